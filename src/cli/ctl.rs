//! `monfs ctl`: send one command line to a mount's control socket (found
//! from MOUNTPOINT, `--socket` or MONFS_SOCKET inside `monfs run`), passing a
//! file the command names as an open descriptor, and print the answer.

use std::path::PathBuf;
use std::process::ExitCode;

/// Run `monfs ctl [MOUNTPOINT] COMMAND...` (`socket`: `--socket`); the exit
/// code is 0 for an `ok` answer, 1 for any other or a failure, 2 for usage.
pub fn ctl(mountpoint: PathBuf, command: Vec<String>, socket: Option<PathBuf>) -> ExitCode {
    // Inside `monfs run`: no MOUNTPOINT, MONFS_SOCKET names the socket.
    let env_socket = std::env::var_os("MONFS_SOCKET").filter(|s| !s.is_empty());
    let (mountpoint, command, socket) = match env_socket {
        Some(s) if socket.is_none() && !mountpoint.is_dir() => {
            let mut words = vec![mountpoint.to_string_lossy().into_owned()];
            words.extend(command);
            (PathBuf::new(), words, Some(PathBuf::from(s)))
        }
        _ => (mountpoint, command, socket),
    };
    if command.is_empty() {
        eprintln!("monfs ctl: no command given (try `monfs ctl MOUNTPOINT help`)");
        return ExitCode::from(2);
    }
    // `plug --wait ...` and `unplug --wait ...`: the command, then `wait`
    // until the device is there (enumerated, drivers bound) or gone.
    let mut command = command;
    let then_wait = match command.iter().position(|w| w == "--wait") {
        Some(i) if matches!(command[0].as_str(), "plug" | "unplug") && command.len() > 3 => {
            command.remove(i);
            let what = if command[0] == "plug" {
                "present"
            } else {
                "gone"
            };
            Some(format!("wait {} {} {what}", command[1], command[2]))
        }
        Some(_) => {
            eprintln!("monfs ctl: --wait goes with plug and unplug");
            return ExitCode::from(2);
        }
        None => None,
    };
    let socket = socket.unwrap_or_else(|| {
        std::fs::read_to_string(mountpoint.join("monfs/socket"))
            .map(|s| PathBuf::from(s.trim()))
            .unwrap_or_else(|_| crate::control::default_socket(&mountpoint))
    });
    // Words with spaces were one argument: keep them one word.
    let line: Vec<String> = command
        .iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if v.contains(char::is_whitespace) && !v.contains('"') => {
                format!("{k}=\"{v}\"")
            }
            _ => w.clone(),
        })
        .collect();
    let (line, file) = match replay_file(&line.join(" ")) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("monfs ctl: {e}");
            return ExitCode::from(1);
        }
    };
    let code = send(&socket, &line, file.as_ref());
    match then_wait {
        Some(w) if code == ExitCode::SUCCESS => send(&socket, &w, None),
        _ => code,
    }
}

/// Send one line, print the answer: 0 for `ok`, 1 otherwise.
fn send(socket: &std::path::Path, line: &str, file: Option<&std::fs::File>) -> ExitCode {
    match crate::control::send(socket, line, file) {
        Ok(answer) => {
            print!("{answer}");
            if answer.starts_with("ok") {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("monfs: control socket {}: {e}", socket.display());
            ExitCode::from(1)
        }
    }
}

/// For `replay start BUS FILE ...`, `plug BUS PORTS from-capture FILE
/// DEVADDR ...` and `plug ... descriptors=FILE`: open FILE with the caller's own rights
/// (without blocking, so a FIFO cannot hang the client) to pass it to the
/// daemon, and name it by its absolute path in the command, where it is only
/// a label. Other commands are returned as they are.
fn replay_file(line: &str) -> Result<(String, Option<std::fs::File>), super::error::CtlFileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut words = crate::control::split_words(line)?;
    // Which word is FILE: `replay start BUS FILE`, `plug BUS PORTS
    // from-capture FILE DEVADDR`.
    // `plug BUS PORTS KIND ... descriptors=FILE`.
    let (at, prefix) = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["replay", "start", _, _, ..] => (3, ""),
        ["plug", _, _, "from-capture", _, ..] => (4, ""),
        ["plug", ..] => match words
            .iter()
            .skip(4)
            .position(|w| w.starts_with("descriptors="))
        {
            Some(i) => (4 + i, "descriptors="),
            None => return Ok((line.to_string(), None)),
        },
        _ => return Ok((line.to_string(), None)),
    };
    let path = PathBuf::from(&words[at][prefix.len()..]);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|source| super::error::CtlFileError::Open {
            path: path.clone(),
            source,
        })?;
    words[at] = format!(
        "{prefix}{}",
        std::path::absolute(&path).unwrap_or(path).display()
    );
    let quoted: Vec<String> = words
        .iter()
        .map(|w| {
            if w.contains(char::is_whitespace) {
                format!("\"{}\"", w.replace('"', "'"))
            } else {
                w.clone()
            }
        })
        .collect();
    Ok((quoted.join(" "), Some(file)))
}
