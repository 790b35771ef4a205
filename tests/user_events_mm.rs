//! user_events enable bits are bound to address spaces, as in the kernel:
//! an exec'd image (setuid or not) and a process that reuses a pid are never
//! written, a forked child's copy follows enable, and enable words or ioctl
//! buffers in pages only a FUSE daemon can serve fail with EFAULT instead of
//! wedging the mount. Words are read from outside through /proc/PID/mem.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, Mount};

/// A tool process whose stdout is read line by line.
struct Tool {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Tool {
    fn spawn(bin: &Path, args: &[&str]) -> Tool {
        Tool::spawn_env(bin, args, &[])
    }

    fn spawn_env(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Tool {
        let mut child = Command::new(bin)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn ue_lifecycle");
        let out = BufReader::new(child.stdout.take().unwrap());
        Tool { child, out }
    }

    /// The next line that starts with `prefix` (panics at EOF).
    fn line(&mut self, prefix: &str) -> String {
        loop {
            let mut l = String::new();
            let n = self.out.read_line(&mut l).unwrap();
            assert!(n > 0, "ue_lifecycle ended before a `{prefix}` line");
            if l.starts_with(prefix) {
                return l.trim_end().to_string();
            }
        }
    }

    fn go(&mut self) {
        self.child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` out of a line of space-separated pairs.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in `{line}`"))
}

/// The u32 at `addr` in process `pid`.
fn word(pid: u32, addr: u64) -> u32 {
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, addr).unwrap();
    u32::from_ne_bytes(b)
}

fn enable(m: &Mount, name: &str, on: bool) {
    let p = m.path(&format!("tracing/events/user_events/{name}/enable"));
    std::fs::write(&p, if on { "1" } else { "0" }).unwrap();
}

/// The mount still answers: a listing and a read, each bounded in time.
fn still_serving(m: &Mount) {
    let out =
        m.sh_ok("timeout 10 ls tracing >/dev/null && timeout 10 cat tracing/user_events_status");
    assert!(out.contains("Active:"), "{out}");
}

/// One bus with no device and no hub polling: usbmon stays quiet until
/// a test plugs something.
const QUIET_BUS: &str =
    "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n      devices: []\n";

const EXEC_ADDR: &str = "0x5a0000000";

fn exec_case(setuid: bool) {
    let m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let prog = if setuid {
        // The same program, setuid to nobody: exec changes its credentials.
        let p = tmp.path().join("ue_lifecycle_suid");
        std::fs::copy(&tool, &p).unwrap();
        let o = Command::new("sh")
            .arg("-c")
            .arg(format!("chown 65534 {0} && chmod 4755 {0}", p.display()))
            .status()
            .unwrap();
        assert!(o.success());
        p
    } else {
        tool.clone()
    };
    let tr = m.path("tracing");
    let name = if setuid { "ue_exec_suid" } else { "ue_exec" };
    let mut t = Tool::spawn(
        &tool,
        &[
            "exec-reg",
            tr.to_str().unwrap(),
            EXEC_ADDR,
            name,
            prog.to_str().unwrap(),
        ],
    );
    assert_eq!(t.line("registered="), "registered=OK");
    let pid: u32 = field(&t.line("ready"), "pid").parse().unwrap();
    assert_eq!(pid, t.child.id(), "exec keeps the pid");
    if setuid {
        let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid = st.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(uid.contains("65534"), "not setuid: {uid}");
    }
    let addr = u64::from_str_radix(EXEC_ADDR.trim_start_matches("0x"), 16).unwrap();
    // The old image's enable word sat at this address; the new image's page
    // there must never be written.
    for on in [true, false, true] {
        enable(&m, name, on);
        assert_eq!(
            word(pid, addr),
            0,
            "the exec'd image was written (enable={on})"
        );
    }
    // The new image has no enabler at that address: registering it again
    // is no EADDRINUSE, and that registration follows enable.
    t.signal(libc::SIGUSR1);
    assert_eq!(t.line("rereg="), "rereg=OK");
    assert_eq!(word(pid, addr), 1);
    enable(&m, name, false);
    assert_eq!(word(pid, addr), 0);
    still_serving(&m);
}

#[test]
fn exec_drops_enable_bits_and_never_writes_the_new_image() {
    exec_case(false);
}

#[test]
fn setuid_exec_is_never_written() {
    exec_case(true);
}

#[test]
fn forked_child_follows_enable_and_its_exit_leaves_the_parent() {
    let m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let tr = m.path("tracing");
    let mut t = Tool::spawn(&tool, &["fork-follow", tr.to_str().unwrap(), "ue_fork"]);
    let parent_line = t.line("parent");
    assert_eq!(field(&parent_line, "registered"), "OK");
    let parent: u32 = field(&parent_line, "pid").parse().unwrap();
    let addr =
        u64::from_str_radix(field(&parent_line, "addr").trim_start_matches("0x"), 16).unwrap();
    let child: u32 = field(&t.line("child"), "pid").parse().unwrap();
    for on in [true, false, true] {
        enable(&m, "ue_fork", on);
        assert_eq!(word(parent, addr), on as u32, "parent, enable={on}");
        assert_eq!(word(child, addr), on as u32, "child, enable={on}");
    }
    // The child exits: the parent's bit still follows enable.
    // SAFETY: kill(2) on the tool's child.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    while common::proc_state(child).is_some_and(|s| s != 'Z') {
        std::thread::sleep(Duration::from_millis(5));
    }
    for on in [false, true] {
        enable(&m, "ue_fork", on);
        assert_eq!(
            word(parent, addr),
            on as u32,
            "parent after the child's exit, enable={on}"
        );
    }
    t.signal(libc::SIGTERM);
    still_serving(&m);
}

/// In a pid namespace of its own (so that `ns_last_pid` decides the next
/// pid), a producer registers and exits, and a new process gets its pid and
/// maps a page at the same address: enabling never writes it.
#[test]
fn a_reused_pid_is_never_written() {
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let script = r#"
set -eu
mnt=$1 monfs=$2 tool=$3 dir=$4
"$monfs" --log-level debug mount "$mnt" --foreground 2>"$dir/monfs.log" &
for _ in $(seq 400); do [ -e "$mnt/monfs/null" ] && break; sleep 0.05; done
T=$mnt/tracing
echo 'u:ue_reuse u32 x' > "$T/dynamic_events"
"$tool" reg-wait "$T" 0x5b0000000 ue_reuse > "$dir/reg.out" &
P=$!
until grep -q registered= "$dir/reg.out"; do sleep 0.01; done
grep -q registered=OK "$dir/reg.out"
kill -TERM "$P"; wait "$P" || true
echo $((P - 1)) > /proc/sys/kernel/ns_last_pid
"$tool" victim "$T" 0x5b0000000 > "$dir/victim.out" &
V=$!
[ "$V" = "$P" ] || { echo "pid not reused: $P then $V"; exit 3; }
until grep -q ready "$dir/victim.out"; do sleep 0.01; done
for on in 1 0 1; do
    echo $on > "$T/events/user_events/ue_reuse/enable"
    w=$(dd if=/proc/$V/mem bs=4 count=1 skip=$((0x5b0000000)) iflag=skip_bytes 2>/dev/null | od -An -tu4 | tr -d ' ')
    echo "enable=$on word=$w"
done
kill "$V"; wait "$V" || true
echo 0 > "$T/events/user_events/ue_reuse/enable"
echo '-:ue_reuse u32 x' >> "$T/dynamic_events"
umount "$mnt"
wait
"#;
    let o = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
            script,
            "reuse",
        ])
        .arg(&mnt)
        .arg(common::monfs_bin())
        .arg(&tool)
        .arg(tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let log = std::fs::read_to_string(tmp.path().join("monfs.log")).unwrap_or_default();
    assert!(
        o.status.success(),
        "{out}\n{}\nlog:\n{log}",
        String::from_utf8_lossy(&o.stderr)
    );
    let words: Vec<&str> = out.lines().filter(|l| l.starts_with("enable=")).collect();
    assert_eq!(
        words,
        ["enable=1 word=0", "enable=0 word=0", "enable=1 word=0"],
        "{log}"
    );
}

/// Enable words and ioctl buffers in pages that only a FUSE daemon can
/// fault in: this mount's own files, and a second mount whose daemon is
/// stopped. Each call fails with EFAULT and the mount keeps answering.
#[test]
fn pages_only_fuse_can_serve_give_efault_not_a_wedge() {
    let m = Mount::default_config();
    let stalled = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let tr = m.path("tracing");
    let own = m.path("tracing/user_events_status");
    let other = stalled.path("tracing/user_events_status");
    let usbmon = m.path("dev/usbmon1");
    let run = |args: &[&str], stop: Option<&Mount>| -> String {
        let mut t = Tool::spawn(&tool, args);
        t.line("mapped");
        if let Some(s) = stop {
            // SAFETY: kill(2) on the second daemon.
            unsafe { libc::kill(s.child.id() as i32, libc::SIGSTOP) };
        }
        t.go();
        let t0 = Instant::now();
        let l = t.line(if args[0] == "reg-at" { "reg=" } else { "getx=" });
        eprintln!("{args:?}: {l} ({:?})", t0.elapsed());
        if let Some(s) = stop {
            // SAFETY: as above.
            unsafe { libc::kill(s.child.id() as i32, libc::SIGCONT) };
        }
        l
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let reg_own = run(&["reg-at", &s(&tr), &s(&own), "ue_wedge"], None);
    assert!(reg_own.starts_with("reg=EFAULT"), "{reg_own}");
    still_serving(&m);
    let getx_own = run(&["getx-at", &s(&usbmon), &s(&own)], None);
    assert!(getx_own.starts_with("getx=EFAULT"), "{getx_own}");
    still_serving(&m);
    let reg_other = run(&["reg-at", &s(&tr), &s(&other), "ue_wedge"], Some(&stalled));
    assert!(reg_other.starts_with("reg=EFAULT"), "{reg_other}");
    still_serving(&m);
    let getx_other = run(&["getx-at", &s(&usbmon), &s(&other)], Some(&stalled));
    assert!(getx_other.starts_with("getx=EFAULT"), "{getx_other}");
    still_serving(&m);
    still_serving(&stalled);
}

/// The same with a page that a userfaultfd watches and nobody serves: the
/// pre-access check cannot see it, so the deadlines fail the call (the
/// worker pool's for the enable word, the request watchdog's for the GETX
/// buffer) and the mount keeps answering meanwhile and after.
#[test]
fn userfaultfd_pages_give_efault_within_a_second() {
    let m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let tr = m.path("tracing");
    let usbmon = m.path("dev/usbmon1");
    for args in [
        vec!["reg-uffd", tr.to_str().unwrap(), "ue_uffd"],
        vec!["getx-uffd", usbmon.to_str().unwrap()],
    ] {
        let mut t = Tool::spawn(&tool, &args);
        t.line("mapped");
        t.go();
        // While the call waits on the page, every other file answers.
        still_serving(&m);
        let l = t.line(if args[0] == "reg-uffd" {
            "reg="
        } else {
            "getx="
        });
        eprintln!("{args:?}: {l}");
        assert!(l.contains("=EFAULT"), "{l}");
        drop(t);
        still_serving(&m);
    }
    assert!(m.log_text().contains("stuck"), "{}", m.log_text());
}

/// A blocking GETX parks on a quiet bus; when traffic comes, the service
/// thread retries it and writes into a userfaultfd page that nobody serves.
/// The watchdog answers it EFAULT and starts another service thread, so a
/// reader that blocks afterwards is still woken by the next events.
#[test]
fn a_parked_request_stuck_in_the_callers_memory_does_not_stop_wakeups() {
    let m = Mount::with_config(QUIET_BUS);
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let usbmon = m.path("dev/usbmon1");
    let mut t = Tool::spawn(&tool, &["getx-uffd", usbmon.to_str().unwrap()]);
    t.line("mapped");
    t.go();
    common::wait_blocked(t.child.id());
    m.sh_ok("echo 'plug 1 1 hid-mouse' > monfs/ctl");
    let l = t.line("getx=");
    assert!(l.starts_with("getx=EFAULT"), "{l}");
    // A new blocked reader is woken by the next device's traffic: the
    // keyboard's (address 3, after the root hub and the mouse). The mouse
    // may still send a line or two meanwhile; the reader takes them and
    // blocks again.
    let grep = Command::new("grep")
        .args(["-m", "1", "-F", ":1:003:"])
        .arg(m.path("usb/usbmon/1u"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_blocked(grep.id());
    m.sh_ok("echo 'plug 1 2 hid-keyboard' > monfs/ctl");
    let out = grep.wait_with_output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains(" S Ci:1:003:0 s 80 06 0100 "), "{line}");
    drop(t);
    still_serving(&m);
    assert!(m.log_text().contains("thread is stuck"), "{}", m.log_text());
}

/// A request thread stays stuck in a userfaultfd page for good (its owner
/// keeps it and never serves it): the request is answered, and SIGTERM still
/// unmounts and ends the daemon (the stuck caller keeps the mount busy, so
/// `umount` alone would rightly leave it serving).
#[test]
fn a_thread_stuck_for_good_does_not_keep_the_daemon_from_ending() {
    let mut m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let usbmon = m.path("dev/usbmon1");
    let mut t = Tool::spawn_env(
        &tool,
        &["getx-uffd", usbmon.to_str().unwrap()],
        &[("UE_HOLD", "1")],
    );
    t.line("mapped");
    t.go();
    let l = t.line("getx=");
    assert!(l.starts_with("getx=EFAULT"), "{l}");
    still_serving(&m);
    // SAFETY: signalling the daemon.
    unsafe { libc::kill(m.child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + common::HANG;
    while m.alive() {
        assert!(
            Instant::now() < deadline,
            "the daemon did not end: {}",
            m.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(t);
}

/// A request thread stuck in a caller's page (answered EFAULT and replaced)
/// comes back when the page goes away and serves beside its replacement:
/// every later request from the same CPU (in the io_uring leg, the same
/// queue, which now has two threads) is answered. The daemon once left the
/// answers of the thread that was not waiting for completions unsubmitted
/// until another request came, and a caller waited for good (a CI hang).
#[test]
fn a_replaced_thread_that_comes_back_leaves_no_answer_behind() {
    let m = Mount::with_config(QUIET_BUS);
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let usbmon = m.path("dev/usbmon1");
    // This thread and the processes it starts run on one CPU: one queue.
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls change only
    // this thread's affinity.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let len = std::mem::size_of_val(&set);
        assert_eq!(libc::sched_getaffinity(0, len, &mut set), 0);
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .unwrap();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(first, &mut set);
        assert_eq!(libc::sched_setaffinity(0, len, &set), 0);
    }
    let mut t = Tool::spawn_env(
        &tool,
        &["getx-uffd", usbmon.to_str().unwrap()],
        &[("UE_HOLD", "1")],
    );
    t.line("mapped");
    // Once the tool has its reader open (it waits for "go"), a device's
    // enumeration gives it events: its GETX is answered at once, by the
    // thread that takes the request, not by the one that retries parked
    // requests.
    common::wait_blocked(t.child.id());
    let grep = Command::new("grep")
        .args(["-q", "-m", "1", "-F", " C Ci:1:002:0 "])
        .arg(m.path("usb/usbmon/1u"))
        .spawn()
        .unwrap();
    common::wait_blocked(grep.id());
    m.sh_ok("echo 'plug 1 1 hid-mouse' > monfs/ctl");
    assert!(grep.wait_with_output().unwrap().status.success());
    t.go();
    let l = t.line("getx=");
    assert!(l.starts_with("getx=EFAULT"), "{l}");
    let log = m.log_text();
    assert!(log.contains("a request thread is stuck"), "{log}");
    // The page goes with its owner: the stuck thread comes back.
    drop(t);
    for _ in 0..20 {
        still_serving(&m);
    }
}

/// CAP_PERFMON counts only in the initial user namespace, as the kernel's
/// `perfmon_capable()`: root of a user namespace of its own (`unshare -Ur`,
/// every bit in CapEff) may not create a persistent event, root may.
#[test]
fn persistent_events_need_perfmon_in_the_initial_user_namespace() {
    let m = Mount::default_config();
    let o = m.sh("unshare -Ur bash -c \"echo 'u:ue_userns u32 a' >> tracing/dynamic_events\" 2>&1");
    let err = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success() && err.contains("Operation not permitted"),
        "{err}"
    );
    assert_eq!(m.sh_ok("cat tracing/dynamic_events"), "");
    m.sh_ok("echo 'u:ue_userns u32 a' >> tracing/dynamic_events");
    assert_eq!(m.sh_ok("cat tracing/dynamic_events"), "u:ue_userns u32 a\n");
}

/// One producer process costs the daemon one descriptor however many bits
/// it registers (its address space is pinned once).
#[test]
fn a_producer_pins_its_address_space_once() {
    let m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let tr = m.path("tracing");
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", m.child.id()))
            .unwrap()
            .count()
    };
    let before = fds();
    let mut t = Tool::spawn(&tool, &["reg-many", tr.to_str().unwrap(), "ue_many", "200"]);
    assert_eq!(t.line("registered="), "registered=200");
    let during = fds();
    assert!(
        during <= before + 4,
        "{before} descriptors before, {during} with 200 bits"
    );
    t.signal(libc::SIGTERM);
    still_serving(&m);
}

/// Issue 37, finding 6: with address space randomization off (`setarch
/// -R`, as under gdb), fork+exec'd children of a producer run the same
/// binary at the same layout; the fresh image's memory is never written,
/// because exec also gives it new `AT_RANDOM` bytes. Each child's own
/// global word (at the address of the parent's enable word) stays 0 while
/// the event is enabled and disabled.
#[test]
fn children_exec_d_without_aslr_are_never_written() {
    let m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let tr = m.path("tracing");
    const N: usize = 50;
    let n = N.to_string();
    let mut t = Tool::spawn(
        Path::new("setarch"),
        &[
            "-R",
            tool.to_str().unwrap(),
            "fork-exec",
            tr.to_str().unwrap(),
            "ue_noaslr",
            &n,
        ],
    );
    assert_eq!(t.line("registered="), "registered=OK");
    // setarch execs the tool in place: the pid is the tool's. Its children
    // are killed however the test ends.
    let kids = KillChildren(t.child.id());
    enable(&m, "ue_noaslr", true);
    t.go();
    let mut children = Vec::new();
    for _ in 0..N {
        let l = t.line("child");
        let pid: u32 = field(&l, "pid").parse().unwrap();
        let addr = u64::from_str_radix(field(&l, "addr").trim_start_matches("0x"), 16).unwrap();
        children.push((pid, addr));
    }
    let written = |when: &str| {
        let bad: Vec<u32> = children
            .iter()
            .filter(|(pid, addr)| word(*pid, *addr) != 0)
            .map(|(pid, _)| *pid)
            .collect();
        assert!(
            bad.is_empty(),
            "{} of {N} exec'd children had their word written ({when}): {bad:?}",
            bad.len()
        );
    };
    written("enabled at the fork");
    for on in [false, true, false, true] {
        enable(&m, "ue_noaslr", on);
        written(if on { "enabled" } else { "disabled" });
    }
    drop(kids);
    t.signal(libc::SIGTERM);
    still_serving(&m);
}

/// Kills the children of process `.0` on drop.
struct KillChildren(u32);

impl Drop for KillChildren {
    fn drop(&mut self) {
        let p = self.0;
        let kids =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for pid in kids
            .split_whitespace()
            .filter_map(|w| w.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on the tool's children.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Issue 37, finding 7: one producer registering 20,000 enable bits (on
/// plain anonymous memory, for 500 events) while two CPU hogs run and
/// another producer's registration fails on a userfaultfd page gets every
/// one: none is EFAULT, and its address space is never judged stuck. The
/// rate is printed.
#[test]
fn a_busy_producer_is_never_judged_stuck_for_anothers_stall() {
    let m = Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let tool = compile_c("ue_lifecycle", tmp.path());
    let tr = m.path("tracing");
    let mut stuck = Tool::spawn(&tool, &["reg-uffd", tr.to_str().unwrap(), "ue_stall"]);
    stuck.line("mapped");
    stuck.go();
    let hogs: Vec<Child> = (0..2)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap()
        })
        .collect();
    let mut busy = Tool::spawn(
        &tool,
        &["reg-lots", tr.to_str().unwrap(), "ue_lots", "20000", "500"],
    );
    let l = busy.line("registered=");
    for mut h in hogs {
        let _ = h.kill();
        let _ = h.wait();
    }
    println!("{l}");
    assert_eq!(field(&l, "registered"), "20000", "{l}");
    assert_eq!(field(&l, "efault"), "0", "{l}");
    let l = stuck.line("reg=");
    assert!(l.contains("=EFAULT"), "{l}");
    let stuck_pid = stuck.child.id();
    let busy_pid = busy.child.id();
    let log = m.log_text();
    let judged: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("did not finish in time"))
        .collect();
    assert!(
        judged
            .iter()
            .all(|l| l.contains(&format!("process {stuck_pid}'s"))),
        "busy producer {busy_pid} judged stuck: {judged:?}"
    );
    busy.signal(libc::SIGTERM);
    drop(stuck);
    still_serving(&m);
}
