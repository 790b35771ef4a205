//! `monfs generate`: the man pages and shell completions the Debian package
//! ships (scripts/package) come out of the binary, one page per subcommand.

use std::path::Path;
use std::process::Command;

fn monfs(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_monfs"))
        .args(args)
        .output()
        .expect("run monfs");
    assert!(
        out.status.success(),
        "monfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn man_pages_one_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = monfs(&["generate", "man", dir.path().to_str().unwrap()]);
    let listed = String::from_utf8(out.stdout).unwrap();
    for page in [
        "monfs",
        "monfs-mount",
        "monfs-ctl",
        "monfs-run",
        "monfs-zvm-dump",
        "monfs-record",
        "monfs-check-config",
        "monfs-generate",
        "monfs-generate-man",
        "monfs-generate-completions",
    ] {
        let path = dir.path().join(format!("{page}.1"));
        assert!(
            listed.contains(&path.display().to_string()),
            "{page}.1 not listed: {listed}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines().any(|l| l.starts_with(".TH ")),
            "{page}.1 has no .TH"
        );
        assert!(
            text.contains(".SH \"SEE ALSO\""),
            "{page}.1 has no SEE ALSO"
        );
    }
    let top = std::fs::read_to_string(dir.path().join("monfs.1")).unwrap();
    for needle in [
        "/etc/monfs/default.yaml",
        "MONFS_LOG",
        "monfs\\-usbmon\\-ns",
    ] {
        assert!(top.contains(needle), "monfs.1 lacks {needle}");
    }
    // Every option of `monfs mount --help` is in its page.
    let mount = std::fs::read_to_string(dir.path().join("monfs-mount.1")).unwrap();
    for opt in [
        "config",
        "foreground",
        "private",
        "ctl\\-socket",
        "no\\-mmap",
        "cuse",
    ] {
        assert!(
            mount.contains(&format!("\\-\\-{opt}")),
            "monfs-mount.1 lacks --{opt}"
        );
    }
}

/// The monfs pages a man page refers to: every `NAME(1)` whose NAME starts
/// with `monfs`, in its SUBCOMMANDS, SEE ALSO or anywhere else.
fn monfs_pages_named(roff: &str) -> Vec<String> {
    let text = roff
        .replace("\\-", "-")
        .replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "");
    let mut names = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("(1)") {
        let before = &rest[..i];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(0, |j| j + 1);
        let name = &before[start..];
        if name.starts_with("monfs") && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
        rest = &rest[i + 3..];
    }
    names
}

#[test]
fn every_page_monfs_1_names_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = monfs(&["generate", "man", dir.path().to_str().unwrap()]);
    let listed = String::from_utf8(out.stdout).unwrap();
    let top = std::fs::read_to_string(dir.path().join("monfs.1")).unwrap();
    let named = monfs_pages_named(&top);
    // Its subcommands' pages and the helpers' (the Debian package installs
    // monfs-usbmon-ns and monfs-trace-ns).
    for page in [
        "monfs-mount",
        "monfs-ctl",
        "monfs-usbmon-ns",
        "monfs-trace-ns",
    ] {
        assert!(
            named.iter().any(|n| n == page),
            "monfs.1 does not name {page}(1): it names {named:?}"
        );
    }
    // Every page monfs.1 names, and every monfs page those name in turn,
    // was written and listed.
    let mut todo = named;
    let mut seen = Vec::new();
    while let Some(page) = todo.pop() {
        if seen.contains(&page) {
            continue;
        }
        let path = dir.path().join(format!("{page}.1"));
        assert!(
            path.exists(),
            "a page names {page}(1), but monfs generate man did not write {}",
            path.display()
        );
        assert!(
            listed.contains(&path.display().to_string()),
            "{page}.1 not listed: {listed}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let th = text.lines().find(|l| l.starts_with(".TH ")).unwrap_or("");
        assert!(
            th.contains(&format!("\"monfs {}\"", env!("CARGO_PKG_VERSION"))),
            "{page}.1's .TH line has no monfs version: {th}"
        );
        todo.extend(monfs_pages_named(&text));
        seen.push(page);
    }
    // The helpers' pages are dist/man's, footer aside.
    for page in ["monfs-usbmon-ns", "monfs-trace-ns"] {
        let written = std::fs::read_to_string(dir.path().join(format!("{page}.1"))).unwrap();
        let source = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("dist/man/{page}.1")),
        )
        .unwrap();
        let body = |t: &str| t.split_once('\n').unwrap().1.to_string();
        assert_eq!(
            body(&written),
            body(&source),
            "{page}.1 differs from dist/man's"
        );
    }
}

#[test]
fn completions_under_the_names_shells_load() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, file, marker) in [
        ("bash", "monfs", "complete -F"),
        ("zsh", "_monfs", "#compdef monfs"),
        ("fish", "monfs.fish", "complete -c monfs"),
    ] {
        monfs(&[
            "generate",
            "completions",
            shell,
            dir.path().to_str().unwrap(),
        ]);
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(text.contains(marker), "{shell}: {file} lacks {marker}");
        assert!(text.contains("check-config"), "{shell}: no subcommands");
        // Without a directory: the same, on standard output.
        let out = monfs(&["generate", "completions", shell]);
        assert_eq!(
            out.stdout,
            text.as_bytes(),
            "{shell}: stdout differs from the file"
        );
    }
    assert!(!Path::new(&dir.path().join("monfs.bash")).exists());
}
