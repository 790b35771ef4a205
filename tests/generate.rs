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
