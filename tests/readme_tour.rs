//! The README's tour, run: every ```sh block under "## Tour" runs, in
//! order, with bash -e against a fresh mount of the default configuration,
//! so the README cannot promise what monfs does not do. Commands that block
//! are bounded in the README itself (`grep -m`, `tcpdump -c`, `--sets`);
//! `timeout` here only turns a hang into a failure.
//!
//! Also checked: README links every file in docs/, every relative link of
//! README and docs/*.md names a file of the repository, and no file in
//! examples/ points outside the repository.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Mount;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
}

/// The ```sh blocks of the section that starts at the line `heading`
/// and ends at the next heading of its level.
fn sh_blocks(text: &str, heading: &str) -> Vec<String> {
    let level = heading.split(' ').next().unwrap();
    let mut blocks = Vec::new();
    let mut inside = false;
    let mut cur: Option<String> = None;
    for line in text.lines() {
        if cur.is_none() && line.starts_with('#') {
            let l = line.split(' ').next().unwrap();
            if line == heading {
                inside = true;
                continue;
            }
            if inside && l.len() <= level.len() {
                break;
            }
        }
        if !inside {
            continue;
        }
        match (&mut cur, line) {
            (None, "```sh") => cur = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                cur = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            _ => {}
        }
    }
    assert!(cur.is_none(), "an unclosed ```sh block under {heading}");
    blocks
}

#[test]
fn readme_tour_runs_against_the_default_config() {
    let blocks = sh_blocks(&readme(), "## Tour");
    assert!(blocks.len() >= 8, "the tour has {} sh blocks", blocks.len());
    let m = Mount::default_config();
    // The tour runs from the repository's top directory; a scratch copy of
    // it (scripts/ and examples/ linked) keeps its files out of the tree.
    let work = tempfile::tempdir().unwrap();
    for d in ["scripts", "examples"] {
        std::os::unix::fs::symlink(repo().join(d), work.path().join(d)).unwrap();
    }
    let bin_dir = common::monfs_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (i, block) in blocks.iter().enumerate() {
        // The set-up lines name the user's mount and build; the test has
        // its own.
        let script: String = block
            .lines()
            .filter(|l| !l.starts_with("export MNT=") && !l.starts_with("export PATH="))
            .map(|l| format!("{l}\n"))
            .collect();
        if script.trim().is_empty() {
            continue;
        }
        let o = Command::new("timeout")
            .args(["-k", "10", "300", "bash", "-e", "-c"])
            .arg(&script)
            .current_dir(work.path())
            .env("MNT", m.root())
            .env("PATH", &path)
            // The namespace helpers run the monfs under test.
            .env("MONFS_BIN", common::monfs_bin())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "tour block {} failed ({}):\n{script}\nstdout:\n{}\nstderr:\n{}\nlog:\n{}",
            i + 1,
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            m.log_text()
        );
    }
}

/// Relative link targets of Markdown text: `](target)`, without `#anchor`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let t = &rest[..end];
        rest = &rest[end..];
        let t = t.split('#').next().unwrap();
        if !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:") {
            out.push(t.to_string());
        }
    }
    out
}

#[test]
fn readme_links_every_doc_and_every_link_resolves() {
    let root = repo();
    let readme_links = links(&readme());
    let mut docs = Vec::new();
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        docs.push(name);
    }
    assert!(!docs.is_empty());
    for d in &docs {
        let rel = format!("docs/{d}");
        assert!(readme_links.contains(&rel), "README does not link {rel}");
    }
    let mut files: Vec<(PathBuf, String)> = vec![(root.clone(), readme())];
    for d in &docs {
        if d.ends_with(".md") {
            let p = root.join("docs").join(d);
            files.push((root.join("docs"), std::fs::read_to_string(p).unwrap()));
        }
    }
    for (base, text) in &files {
        for l in links(text) {
            let target = base.join(&l);
            let rel = target
                .strip_prefix(&root)
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| target.clone());
            let rel = normalize(&rel);
            assert!(
                root.join(&rel).exists(),
                "a link in {} names {l}, which is not in the repository",
                base.display()
            );
        }
    }
}

/// `docs/../config/x` as `config/x`.
fn normalize(p: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            c => parts.push(c.as_os_str().to_string_lossy().to_string()),
        }
    }
    parts.join("/")
}

/// Every file in examples/ cites only the repository's own files (or the
/// kernel's documentation by name, `Documentation/...`): no URL, no
/// Markdown file or repository path that does not exist.
#[test]
fn examples_point_only_inside_the_repository() {
    let root = repo();
    let mut stack = vec![root.join("examples")];
    let mut checked = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "target" {
                    stack.push(p);
                }
                continue;
            }
            // A lock file names the registry its dependencies come from;
            // a capture (the umockdev example's recording) is binary.
            if name == "Cargo.lock" || name.ends_with(".pcapng") || name.ends_with(".pcap") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            checked += 1;
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "{} has a URL",
                p.display()
            );
            for word in text.split(|c: char| {
                c.is_whitespace()
                    || matches!(
                        c,
                        '(' | ')' | '[' | ']' | '"' | '`' | '\'' | ',' | ';' | '<' | '>'
                    )
            }) {
                let w = word.trim_end_matches(['.', ':']);
                let top = w.split('/').next().unwrap();
                let in_repo = w.contains('/')
                    && [
                        "docs", "examples", "tests", "scripts", "src", "config", "benches",
                    ]
                    .contains(&top);
                if w.ends_with(".md") || in_repo {
                    assert!(
                        root.join(w).exists(),
                        "{} cites {w}, which is not in the repository",
                        p.display()
                    );
                }
            }
        }
    }
    assert!(checked >= 8, "only {checked} example files");
}

/// Every entry of examples/ has its row in docs/examples.md's table, which
/// README's Examples section points to.
#[test]
fn every_example_has_its_row() {
    let table = std::fs::read_to_string(repo().join("docs/examples.md")).unwrap();
    assert!(readme().contains("(docs/examples.md)"));
    for e in std::fs::read_dir(repo().join("examples")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        assert!(
            table.contains(&format!("(../examples/{name})")),
            "docs/examples.md's table has no row for examples/{name}"
        );
    }
}
