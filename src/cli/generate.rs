//! `monfs generate`: the man pages and shell completions, written from the
//! command line's own definition so that they never drift from `--help`.
//! The Debian package (scripts/package) ships what this writes; after a
//! `cargo install`, a user can write them where their shell or `man` looks.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Roff};
use clap_mangen::Man;

/// Write one man page (section 1) per command into `dir`: `monfs.1` and
/// `monfs-SUBCOMMAND.1` for each visible subcommand, at every level
/// (`monfs-generate-man.1`), and the pages of the namespace helpers
/// ([`HELPER_PAGES`]). `monfs.1` also gets FILES, ENVIRONMENT and SEE ALSO
/// sections (its subcommands' pages and the helpers'), the others a SEE ALSO
/// naming their parent. So every page `monfs.1` names is written. Returns
/// the files written.
pub fn man_pages(cmd: Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives the subcommands their display names, `monfs-mount` etc.
    cmd.build();
    let mut written = Vec::new();
    let name = cmd.get_name().to_string();
    // Every page's footer: `monfs 0.1.0`.
    let source = format!("{name} {}", cmd.get_version().unwrap_or_default());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        sub_pages(sub, &name, &source, dir, &mut written)?;
    }
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(page_name)
        .collect();
    for (name, text) in HELPER_PAGES {
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, helper_page(text, &source))?;
        written.push(path);
    }
    let helpers = HELPER_PAGES.iter().map(|(name, _)| name.to_string());
    let mut extra = top_extra_sections();
    see_also(
        &mut extra,
        &subcommands.into_iter().chain(helpers).collect::<Vec<_>>(),
    );
    written.push(write_page(cmd, &source, extra, dir)?);
    Ok(written)
}

/// The pages of the namespace helpers, which are shell scripts
/// (scripts/usbmon-ns and scripts/trace-ns, installed by the Debian package
/// as `monfs-usbmon-ns` and `monfs-trace-ns`): written by hand in dist/man
/// and carried in the binary, so that `monfs generate man` writes every
/// page `monfs.1` names.
pub const HELPER_PAGES: [(&str, &str); 2] = [
    (
        "monfs-usbmon-ns",
        include_str!("../../dist/man/monfs-usbmon-ns.1"),
    ),
    (
        "monfs-trace-ns",
        include_str!("../../dist/man/monfs-trace-ns.1"),
    ),
];

/// A helper's page with the footer of the generated ones (`monfs 0.1.0`):
/// its `.TH` line names the source as plain `"monfs"`.
fn helper_page(text: &str, source: &str) -> String {
    match text.split_once('\n') {
        Some((th, rest)) if th.starts_with(".TH ") => {
            let th = th.replacen(" \"monfs\" ", &format!(" \"{source}\" "), 1);
            format!("{th}\n{rest}")
        }
        _ => text.to_string(),
    }
}

/// The page of `cmd` (a subcommand of the page `parent`) and of its own
/// subcommands.
fn sub_pages(
    cmd: &Command,
    parent: &str,
    source: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let name = page_name(cmd);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        sub_pages(sub, &name, source, dir, written)?;
    }
    let mut extra = Roff::default();
    see_also(&mut extra, &[parent.to_string()]);
    written.push(write_page(cmd.clone(), source, extra, dir)?);
    Ok(())
}

/// A command's page name: `monfs-mount` for `monfs mount`.
fn page_name(cmd: &Command) -> String {
    cmd.get_display_name().unwrap_or(cmd.get_name()).to_string()
}

/// Render `cmd`'s page, with footer `source` and the sections `extra` after
/// clap_mangen's, into `dir`.
fn write_page(cmd: Command, source: &str, extra: Roff, dir: &Path) -> std::io::Result<PathBuf> {
    let man = Man::new(cmd).source(source);
    let path = dir.join(man.get_filename());
    let mut out = Vec::new();
    man.render(&mut out)?;
    extra.to_writer(&mut out)?;
    std::fs::write(&path, out)?;
    Ok(path)
}

/// FILES and ENVIRONMENT for `monfs.1`.
fn top_extra_sections() -> Roff {
    let mut r = Roff::default();
    r.control("SH", ["FILES"]);
    let files: [(&str, &str); 6] = [
        (
            "/etc/monfs/default.yaml",
            "The packaged configuration (the same as the built-in default). \
             The systemd unit monfs@NAME.service mounts /etc/monfs/NAME.yaml.",
        ),
        (
            "/run/monfs/NAME",
            "Where monfs@NAME.service mounts (a user's monfs@NAME.service: \
             $XDG_RUNTIME_DIR/monfs/NAME).",
        ),
        (
            "/run/monfs/",
            "The default control sockets (and, in the background without a \
             journal, logs); kept at mode 0700.",
        ),
        (
            "MOUNTPOINT/monfs/socket, MOUNTPOINT/monfs/log",
            "The paths of a running mount's control socket and log.",
        ),
        (
            "/lib/systemd/system/monfs@.service",
            "The system template unit (systemctl start monfs@default).",
        ),
        (
            "/usr/lib/systemd/user/monfs@.service",
            "The user template unit (systemctl --user start monfs@default); \
             it reads ~/.config/monfs/NAME.yaml, else /etc/monfs/NAME.yaml.",
        ),
    ];
    for (file, what) in files {
        r.control("TP", []);
        r.text([italic(file)]);
        r.text([roman(what)]);
    }
    r.control("SH", ["ENVIRONMENT"]);
    r.control("TP", []);
    r.text([bold("MONFS_LOG")]);
    r.text([roman(
        "The log level, as --log-level: error, warn, info, debug or trace.",
    )]);
    r
}

/// A SEE ALSO section naming `pages` (section 1).
fn see_also(r: &mut Roff, pages: &[String]) {
    r.control("SH", ["SEE ALSO"]);
    let mut words = Vec::new();
    for (i, name) in pages.iter().enumerate() {
        words.push(bold(name.clone()));
        words.push(roman(if i + 1 < pages.len() { "(1), " } else { "(1)" }));
    }
    r.text(words);
}

/// The file name `shell` loads completions for command `bin` from, in the
/// directories Debian installs them to (bash-completion wants the bare
/// command name; zsh `_monfs`; fish `monfs.fish`). Other shells: the name
/// clap_complete gives.
pub fn completion_file_name(shell: Shell, bin: &str) -> String {
    use clap_complete::Generator;
    match shell {
        Shell::Bash => bin.to_string(),
        other => other.file_name(bin),
    }
}

/// Write `shell`'s completions for `cmd` (invoked as `bin`) to `out`.
pub fn completions(shell: Shell, mut cmd: Command, bin: &str, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut cmd, bin, out);
}

/// Write `shell`'s completions for `cmd` into `dir`, under
/// [`completion_file_name`]. Returns the file written.
pub fn completions_to(
    shell: Shell,
    cmd: Command,
    bin: &str,
    dir: &Path,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(completion_file_name(shell, bin));
    let mut out = Vec::new();
    completions(shell, cmd, bin, &mut out);
    std::fs::write(&path, out)?;
    Ok(path)
}
