//! The files of `kernel/trace/trace.c` that are no other mechanism's:
//! `README`, `trace`, `tracing_on`, `current_tracer` and
//! `available_tracers` (the nop tracer only), `error_log`,
//! `timestamp_mode`, `tracing_cpumask`, and the global `saved_cmdlines`,
//! `saved_cmdlines_size`, `saved_tgids`, `printk_formats` and
//! `tracing_thresh`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::Tree;
use crate::tracefs::cmdlines::{cmdlines_rounded, SAVED_CMDLINES_MAX};
use crate::tracefs::ctl::{add_ctl, bool_line, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::facility::{Arr, Tracing};
use crate::tracefs::parse::{kstrtoul_from_user, ranged};

const README: &str = "tracing mini-HOWTO (monfs):\n\
\n\
This tracefs is served by monfs. It offers event tracing with the nop\n\
tracer; its events come from monfs's simulators (usb, zvm) and from the\n\
events defined in the monfs configuration.\n\
\n\
# echo 0 > tracing_on : quick way to disable tracing\n\
# echo 1 > tracing_on : quick way to re-enable tracing\n\
\n\
 Important files:\n\
  trace\t\t\t- The static contents of the buffer\n\
\t\t\t  To clear the buffer write into this file: echo > trace\n\
  trace_pipe\t\t- A consuming read to see the contents of the buffer\n\
  snapshot\t\t- Like 'trace' but shows the content of the static\n\
\t\t\t  snapshot buffer. Read the contents for more\n\
\t\t\t  information\n\
  current_tracer\t- only the nop tracer is available\n\
  available_tracers\t- list of configured tracers for current_tracer\n\
  buffer_size_kb\t- view and modify size of per cpu buffer\n\
  buffer_total_size_kb  - view total size of all cpu buffers\n\
  tracing_on\t\t- Enable or disable writing to the ring buffer\n\
  trace_options\t\t- Set format or modify how tracing happens\n\
\t\t\t  Disable an option by prefixing 'no' to the\n\
\t\t\t  option name\n\
  options/\t\t- One file per option, holding 0 or 1\n\
  set_event_pid\t\t- Only trace events of the listed pids\n\
\t\t\t  echo > set_event_pid clears the list\n\
\n\
  available_events\t- list of events that can be enabled\n\
  set_event\t\t- Enables events by name written into it\n\
\t\t\t  Can enable module events via: :mod:<module>\n\
  events/\t\t- Directory containing all trace event subsystems:\n\
      enable\t\t- Write 0/1 to enable/disable tracing of all events\n\
  events/<system>/\t- Directory containing all trace events for <system>:\n\
      enable\t\t- Write 0/1 to enable/disable tracing of all <system>\n\
\t\t\t  events\n\
      filter\t\t- If set, only events passing filter are traced\n\
  events/<system>/<event>/\t- Directory containing control files for\n\
\t\t\t  <event>:\n\
      enable\t\t- Write 0/1 to enable/disable tracing of <event>\n\
      filter\t\t- If set, only events passing filter are traced\n\
      format\t\t- The layout of the event's record and its print format\n\
      id\t\t- The event's type number\n\
      inject\t\t- Write 'field=value ...' to record an event by hand\n\
\n\
  Filters: <field> <op> <value> joined by && and ||, grouped with ( ),\n\
\t   negated with !. Numbers: == != < <= > >= &   Strings (quoted):\n\
\t   == != ~ (glob: * ? [...])\n\
\t   e.g. echo 'status != 0 && bus == 1' > events/usb/usb_urb_complete/filter\n\
\t   echo 0 > filter clears it.\n\
\n\
 Lines of the kernel's own README for the features monfs has:\n\
  dynamic_events\t\t- Create/append/remove/show the generic dynamic events\n\
\t\t\t  Write into this file to define/undefine new trace events.\n\
\t           s:[synthetic/]<event> <field> [<field>]\n\
\t           -:[<group>/][<event>]\n\
\t    field: <stype> <name>;\n\
\t    stype: u8/u16/u32/u64, s8/s16/s32/s64, pid_t,\n\
\t           [unsigned] char/int/long\n\
      hist trigger\t- If set, event hits are aggregated into a hash table\n\
\t    Format: hist:keys=<field1[,field2,...]>\n\
\t            [:<var1>=<field|var_ref|numeric_literal>[,<var2>=...]]\n\
\t            [:values=<field1[,field2,...]>]\n\
\t            [:sort=<field1[,field2,...]>]\n\
\t            [:size=#entries]\n\
\t            [:pause][:continue][:clear]\n\
\t            [:name=histname1]\n\
\t            [:nohitcount]\n\
\t            [:<handler>.<action>]\n\
\t            [if <filter>]\n\n\
\t    Keys and values correspond to fields in the event's format description.  Keys\n\
\t    can be any field, or the special string 'common_stacktrace'.\n\
\t    The available handlers are:\n\n\
\t        onmatch(matching.event)  - invoke on addition or update\n\
\t        onmax(var)               - invoke if var exceeds current max\n\
\t        onchange(var)            - invoke action if var changes\n\n\
\t    The available actions are:\n\n\
\t        trace(<synthetic_event>,param list)  - generate synthetic event\n\
\t        save(field,...)                      - save current event fields\n\
\t        snapshot()                           - snapshot the trace buffer\n\n\
  events/synthetic_events\t- Create/append/remove/show synthetic events\n\
\t  Write into this file to define/undefine new synthetic events.\n\
\t     example: echo 'myevent u64 lat; char name[]; long[] stack' >> synthetic_events\n";

/// `tracing/README`.
pub(crate) fn readme(tree: &Tree) {
    add_ctl(
        tree,
        "tracing/README",
        Ctl::new(MODE_READ).rs(|| README.to_string()),
    );
}

/// `trace` of `x`: the buffers' text; `O_TRUNC` clears them.
pub(crate) fn trace_file(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tc) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/trace"),
        Ctl::new(MODE_WRITE)
            .rs(move || tr.trace_text(None))
            .w(|data, _| Ok(data.len() as u32))
            .t(move || tc.clear_all()),
    );
}

/// `tracing_on` of `x`.
pub(crate) fn tracing_on(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/tracing_on"),
        Ctl::new(MODE_WRITE)
            .rs(move || bool_line(tr.tracing_on()))
            .w(move |data, _| {
                let v = kstrtoul_from_user(data)?;
                tw.on.store(v != 0, Ordering::Relaxed);
                if v != 0 {
                    // Parked trace_pipe readers recheck.
                    for w in tw.wakers.lock_ok().iter() {
                        (w.1)();
                    }
                }
                Ok(data.len() as u32)
            }),
    );
}

/// `current_tracer` and `available_tracers` of `x`: the nop tracer.
pub(crate) fn tracer_files(x: &Arr, tree: &Tree) {
    let b = x.base();
    let tw = x.clone();
    add_ctl(
        tree,
        &format!("{b}/current_tracer"),
        Ctl::new(MODE_WRITE)
            .rs(|| "nop\n".into())
            .w(move |data, _| {
                // Any write sets the buffers up, `nop` included (measured on
                // 6.12: the size reads 1410 afterwards).
                tw.expand();
                // The name ends at a NUL, as the kernel's C string does.
                let data_c = &data[..data.iter().position(|&c| c == 0).unwrap_or(data.len())];
                let s = std::str::from_utf8(data_c).map_err(|_| Errno::EINVAL)?;
                match s.trim_matches(|c: char| c.is_ascii_whitespace()) {
                    "nop" => Ok(data.len() as u32),
                    _ => Err(Errno::EINVAL),
                }
            }),
    );
    add_ctl(
        tree,
        &format!("{b}/available_tracers"),
        Ctl::new(MODE_READ).rs(|| "nop\n".into()),
    );
}

/// `tracing_cpumask` of `x`.
pub(crate) fn tracing_cpumask(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/tracing_cpumask"),
        Ctl::new(MODE_WRITE)
            .rs(move || cpumask_text(&tr.cpumask.read_ok()))
            .w(move |data, _| {
                let mask = parse_cpumask(data, tw.bufs.len())?;
                tw.all_cpus
                    .store(mask.iter().all(|&b| b), Ordering::Relaxed);
                *tw.cpumask.write_ok() = mask;
                Ok(data.len() as u32)
            }),
    );
}

/// `error_log` and `timestamp_mode` of `x`.
pub(crate) fn log_files(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (xr, xc) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/error_log"),
        Ctl::new(MODE_WRITE)
            .rs(move || xr.error_log.text())
            .w(|data, _| Ok(data.len() as u32))
            .t(move || xc.error_log.clear()),
    );
    add_ctl(
        tree,
        &format!("{b}/timestamp_mode"),
        Ctl::new(MODE_READ).rs(|| "[delta] absolute\n".into()),
    );
}

/// `tracing_cpumask` as the kernel's `%*pb` prints it: 32-bit groups in hex,
/// highest first, separated by commas, the first one only as wide as the
/// CPUs it holds need.
fn cpumask_text(mask: &[bool]) -> String {
    let groups = mask.len().div_ceil(32).max(1);
    let mut out = Vec::new();
    for g in (0..groups).rev() {
        let bits = (mask.len() - g * 32).min(32);
        let v = (0..bits).fold(0u32, |v, i| v | ((mask[g * 32 + i] as u32) << i));
        let width = if g == groups - 1 { bits.div_ceil(4) } else { 8 };
        out.push(format!("{v:0width$x}"));
    }
    out.join(",") + "\n"
}

/// Parse a `tracing_cpumask` write as the kernel's bitmap_parse does
/// (lib/bitmap-str.c): the text up to the first newline or NUL, read from
/// its end in 32-bit groups of at most 8 hex digits (a 9th digit is
/// EOVERFLOW, any other character in a group EINVAL), the groups parted by
/// any run of commas and white space; more groups than the CPUs need, or a
/// bit of a CPU the machine does not have, is EOVERFLOW.
fn parse_cpumask(data: &[u8], cpus: usize) -> SysResult<Vec<bool>> {
    let len = data
        .iter()
        .position(|&c| c == b'\n' || c == 0)
        .unwrap_or(data.len());
    let s = &data[..len];
    let sep = |c: u8| c.is_ascii_whitespace() || c == b',' || c == 0x0b;
    let hex = |c: u8| (c as char).to_digit(16);
    let mut groups: Vec<u32> = Vec::new();
    // `end` is one past the next character to read, from the end.
    let mut end = s.len();
    loop {
        while end > 0 && sep(s[end - 1]) {
            end -= 1;
        }
        if end == 0 {
            break;
        }
        if groups.len() == cpus.div_ceil(32) {
            return Err(Errno::EOVERFLOW);
        }
        let mut v = 0u32;
        let mut i = 0;
        loop {
            let c = s[end - 1];
            end -= 1;
            v |= hex(c).ok_or(Errno::EINVAL)? << (4 * i);
            i += 1;
            if end == 0 || sep(s[end - 1]) {
                break;
            }
            if i == 8 {
                // A 9th hex digit overflows; anything else is passed over.
                if hex(s[end - 1]).is_some() {
                    return Err(Errno::EOVERFLOW);
                }
                end -= 1;
                break;
            }
        }
        groups.push(v);
    }
    let mut mask = vec![false; cpus];
    for (g, v) in groups.iter().enumerate() {
        for i in 0..32 {
            if v & (1 << i) != 0 {
                let bit = g * 32 + i;
                if bit >= cpus {
                    return Err(Errno::EOVERFLOW);
                }
                mask[bit] = true;
            }
        }
    }
    Ok(mask)
}

/// The global files about saved task names and the like:
/// `saved_cmdlines(_size)`, `saved_tgids`, `printk_formats`,
/// `tracing_thresh`.
pub(crate) fn install_global(t: &Arc<Tracing>, tree: &Tree) {
    let tr = t.clone();
    add_ctl(
        tree,
        "tracing/saved_cmdlines",
        Ctl::new(MODE_READ).rs(move || {
            let c = tr.cmdlines.lock_ok();
            c.order
                .iter()
                .filter_map(|p| c.comms.get(p).map(|comm| format!("{p} {comm}\n")))
                .collect()
        }),
    );
    let (tr, tw) = (t.clone(), t.clone());
    add_ctl(
        tree,
        "tracing/saved_cmdlines_size",
        Ctl::new(MODE_WRITE)
            .rs(move || format!("{}\n", tr.cmdlines.lock_ok().size))
            .w(move |data, _| {
                let n = ranged(data, 1, SAVED_CMDLINES_MAX as u64)?;
                let mut c = tw.cmdlines.lock_ok();
                c.size = cmdlines_rounded(n as usize);
                c.comms.clear();
                c.order.clear();
                Ok(data.len() as u32)
            }),
    );
    let tr = t.clone();
    add_ctl(
        tree,
        "tracing/saved_tgids",
        Ctl::new(MODE_READ).rs(move || {
            let c = tr.cmdlines.lock_ok();
            let mut v: Vec<(&u32, &u32)> = c.tgids.iter().collect();
            v.sort();
            v.iter().map(|(p, g)| format!("{p} {g}\n")).collect()
        }),
    );
    // monfs has no trace_printk() call sites.
    add_ctl(
        tree,
        "tracing/printk_formats",
        Ctl::new(MODE_READ).rs(String::new),
    );
    let thresh = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (hr, hw) = (thresh.clone(), thresh);
    add_ctl(
        tree,
        "tracing/tracing_thresh",
        Ctl::new(MODE_WRITE)
            .rs(move || format!("{}\n", hr.load(Ordering::Relaxed)))
            .w(move |data, _| {
                hw.store(kstrtoul_from_user(data)?, Ordering::Relaxed);
                Ok(data.len() as u32)
            }),
    );
}

#[cfg(test)]
mod buffer_info_tests {
    use super::*;

    #[test]
    fn saved_cmdlines_size_rounds_as_the_kernels() {
        // Measured on 6.18: 128 and 256 both read back as 6552.
        assert_eq!(cmdlines_rounded(128), 6552);
        assert_eq!(cmdlines_rounded(256), 6552);
        assert_eq!(cmdlines_rounded(6553), 19659);
        // 20,000 to 32,768 (measured: 45,874).
        assert_eq!(cmdlines_rounded(20_000), 45_874);
        assert_eq!(cmdlines_rounded(32_768), 45_874);
    }

    #[test]
    fn cpumask_reads_and_parses_as_the_kernels() {
        assert_eq!(cpumask_text(&[true, true]), "3\n");
        assert_eq!(cpumask_text(&[true, false, true]), "5\n");
        let mut big = vec![true; 40];
        big[33] = false;
        assert_eq!(cpumask_text(&big), "fd,ffffffff\n");
        assert_eq!(parse_cpumask(b"1\n", 2).unwrap(), vec![true, false]);
        assert_eq!(parse_cpumask(b"3", 2).unwrap(), vec![true, true]);
        // CPUs the machine lacks, and groups over 32 bits (measured).
        assert_eq!(parse_cpumask(b"ff", 2), Err(Errno::EOVERFLOW));
        assert_eq!(parse_cpumask(b"fffffffff", 64), Err(Errno::EOVERFLOW));
        assert_eq!(parse_cpumask(b",", 2).unwrap(), vec![false, false]);
        assert!(parse_cpumask(b"1,00000002", 34).unwrap()[1]);
        assert!(parse_cpumask(b"xyz", 2).is_err());
        // Runs of commas and blanks part groups and are never a group.
        assert_eq!(parse_cpumask(b"1,", 2).unwrap(), vec![true, false]);
        assert_eq!(parse_cpumask(b"1,,", 2).unwrap(), vec![true, false]);
        assert_eq!(parse_cpumask(b"1,2", 2), Err(Errno::EOVERFLOW));
        assert!(parse_cpumask(b"1,2", 40).unwrap()[32]);
        // Text after a newline or NUL is not read.
        assert_eq!(parse_cpumask(b"2\nzz", 2).unwrap(), vec![false, true]);
        assert_eq!(parse_cpumask(b"2\0zz", 2).unwrap(), vec![false, true]);
        // A character before 8 digits is passed over.
        assert_eq!(parse_cpumask(b"x00000001", 2).unwrap(), vec![true, false]);
    }
}
