//! The files under `tracing/`. Modes follow tracefs: 0640 for files that take
//! writes, 0440 for read-only ones, 0200 for `inject`; directories 0700
//! (`tracing/`), 0755 (`events/...`) and 0750 (`options/`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::{NodeKind, Tree};
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::events::{FieldKind, FieldValue};
use crate::tracefs::facility::{EventId, Tracing};
use crate::tracefs::filter;
use crate::tracefs::instances::array::{
    EventFile, FilterState, TraceArray, OPTIONS, OPT_PRINTK_DEST, TOP_ONLY_OPTIONS,
};
use crate::tracefs::parse::{is_space, kstrtoul_from_user, next_token, parse_match};
use crate::tracefs::ring::DEFAULT_BUF_BYTES;
use crate::tracefs::trigger::AVAILABLE_TRIGGERS;

/// A trace array and the facility it belongs to, for the closures of its
/// files: its own state through `Deref`, events through the facility.
#[derive(Clone)]
pub(crate) struct Arr {
    pub(crate) t: Arc<Tracing>,
    pub(crate) a: Arc<TraceArray>,
}

impl std::ops::Deref for Arr {
    type Target = TraceArray;
    fn deref(&self) -> &TraceArray {
        &self.a
    }
}

impl Arr {
    /// Array `a` of `t`.
    pub(crate) fn new(t: &Arc<Tracing>, a: Arc<TraceArray>) -> Arr {
        Arr { t: t.clone(), a }
    }
    /// Every event, in `available_events` order.
    fn events(&self) -> Vec<EventId> {
        self.t.events()
    }
    /// Whether `e` is enabled in this array.
    fn enabled(&self, e: &EventId) -> bool {
        self.file(e).enabled.load(Ordering::Relaxed)
    }
    /// `e`'s state in this array.
    fn file(&self, e: &EventId) -> Arc<EventFile> {
        e.0.file(self.a.slot)
    }
    /// Enable or disable `e` in this array.
    fn set_enabled(&self, e: &EventId, on: bool) {
        self.t.set_enabled_in(&self.a, e, on);
    }
}

fn bool_line(b: bool) -> String {
    if b { "1\n" } else { "0\n" }.to_string()
}

/// `0`, `1`, `X` (mixed) or `?` (no events) over a set of events.
fn enable_state(x: &Arr, evs: &[EventId]) -> String {
    let on = evs.iter().filter(|e| x.enabled(e)).count();
    let c = if evs.is_empty() {
        '?'
    } else if on == 0 {
        '0'
    } else if on == evs.len() {
        '1'
    } else {
        'X'
    };
    format!("{c}\n")
}

fn enable_value(data: &[u8]) -> SysResult<bool> {
    match kstrtoul_from_user(data)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Errno::EINVAL),
    }
}

const SYSTEM_FILTER_HELP: &str = "### global filter ###\n\
# Use this to set filters for multiple events.\n\
# Only events with the given fields will be affected.\n\
# If no events are modified, an error message will be displayed here\n";

/// `events/header_page` for sub-buffers of `capacity` usable bytes.
fn header_page(capacity: usize) -> String {
    format!(
        "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
\tfield: char data;\toffset:16;\tsize:{capacity};\tsigned:0;\n"
    )
}

const HEADER_EVENT: &str = "# compressed entry header\n\
\ttype_len    :    5 bits\n\
\ttime_delta  :   27 bits\n\
\tarray       :   32 bits\n\
\n\
\tpadding     : type == 29\n\
\ttime_extend : type == 30\n\
\ttime_stamp : type == 31\n\
\tdata max type_len  == 28\n";

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

/// Parse `inject` text: `field=value` pairs, strings in double quotes.
/// Record event `e` from `field=value ...` text, as the `inject` file and
/// the control interface do (regardless of whether the event is enabled, as
/// the kernel's inject does).
pub(crate) fn inject_text(x: &Arr, e: &EventId, data: &[u8], pid: u32) -> SysResult<()> {
    let def = &e.0.def;
    let vals = parse_inject(def, data)?;
    let mut strs: Vec<Option<String>> = vec![None; def.fields.len()];
    let mut nums = vec![0i64; def.fields.len()];
    for (i, v) in vals {
        match v {
            InjectVal::Num(n) => nums[i] = n,
            InjectVal::Str(s) => strs[i] = Some(s),
        }
    }
    let values: Vec<FieldValue<'_>> = def
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| match f.kind {
            FieldKind::Int { .. } => FieldValue::Int(nums[i]),
            _ => FieldValue::Str(strs[i].as_deref().unwrap_or("")),
        })
        .collect();
    let data_bytes = def.encode(pid, &values);
    let comm = crate::base::procmem::comm_of(pid);
    let mono = x.t.now_mono();
    x.t.record_in(
        &x.a,
        e,
        &x.file(e),
        data_bytes,
        &comm,
        // On the writer's CPU, as the kernel records in the writer's context.
        crate::tracefs::instances::array::At {
            mono,
            cpu: crate::base::procmem::cpu_of(pid),
        },
    );
    Ok(())
}

fn parse_inject(def: &crate::tracefs::EventDef, data: &[u8]) -> SysResult<Vec<(usize, InjectVal)>> {
    let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
    let s = s.trim_end_matches('\0');
    let b = s.as_bytes();
    // A piece of the text by byte positions; 0xA0 is a space (as to the
    // kernel's isspace) and can be the second byte of a character, so a
    // piece that splits one is EINVAL.
    let piece = |from: usize, to: usize| s.get(from..to).ok_or(Errno::EINVAL);
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let st = i;
        while i < b.len() && b[i] != b'=' && !is_space(b[i]) {
            i += 1;
        }
        let name = piece(st, i)?;
        if b.get(i) != Some(&b'=') {
            return Err(Errno::EINVAL);
        }
        i += 1;
        let idx = def
            .fields
            .iter()
            .position(|f| f.name == name)
            .ok_or(Errno::EINVAL)?;
        let f = &def.fields[idx];
        if b.get(i) == Some(&b'"') {
            let close = s[i + 1..].find('"').ok_or(Errno::EINVAL)? + i + 1;
            if !f.is_string() {
                return Err(Errno::EINVAL);
            }
            out.push((idx, InjectVal::Str(piece(i + 1, close)?.to_string())));
            i = close + 1;
        } else {
            let vs = i;
            while i < b.len() && !is_space(b[i]) {
                i += 1;
            }
            if f.is_string() {
                return Err(Errno::EINVAL);
            }
            let tok = piece(vs, i)?;
            let v = parse_num(tok).ok_or(Errno::EINVAL)?;
            out.push((idx, InjectVal::Num(v)));
        }
    }
    if out.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(out)
}

fn parse_num(tok: &str) -> Option<i64> {
    let (neg, body) = match tok.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, tok),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        u64::from_str_radix(&body[1..], 8).ok()?
    } else {
        body.parse::<u64>().ok()?
    };
    Some(if neg {
        (v as i64).wrapping_neg()
    } else {
        v as i64
    })
}

enum InjectVal {
    Num(i64),
    Str(String),
}

/// Set or clear an event's filter from a write to its `filter` file.
fn write_event_filter(x: &Arr, e: &EventId, ev: &EventFile, data: &[u8]) -> SysResult<u32> {
    if data.len() >= 4096 {
        return Err(Errno::EINVAL);
    }
    let raw = filter::clean(data);
    if filter::is_clear(raw) {
        ev.filtered.store(false, Ordering::Relaxed);
        *ev.filter.write_ok() = FilterState::None;
        return Ok(data.len() as u32);
    }
    let text = crate::base::bytestr::text(raw).into_owned();
    match filter::parse(raw, &filter::event_lookup(&e.0.def)) {
        Ok(f) => {
            *ev.filter.write_ok() = FilterState::Active(text, f);
            ev.filtered.store(true, Ordering::Relaxed);
            Ok(data.len() as u32)
        }
        Err(err) => {
            ev.filtered.store(false, Ordering::Relaxed);
            *ev.filter.write_ok() = FilterState::Error(filter::error_text(raw, &err));
            x.error_log.log_filter(x.t.now_mono(), &text, &err);
            Err(err.errno)
        }
    }
}

fn read_event_filter(ev: &EventFile) -> String {
    match &*ev.filter.read_ok() {
        FilterState::None => "none\n".into(),
        FilterState::Active(t, _) => format!("{t}\n"),
        FilterState::Error(s) => s.clone(),
    }
}

/// A system filter goes to every event of the system; events it does not
/// fit get the "Couldn't find or set field" error, and the write succeeds
/// (as measured on 6.18).
fn write_system_filter(x: &Arr, sys: &str, data: &[u8]) -> SysResult<u32> {
    if data.len() >= 4096 {
        return Err(Errno::EINVAL);
    }
    let raw = filter::clean(data);
    let clear = filter::is_clear(raw);
    let text = crate::base::bytestr::text(raw);
    for e in x.events().iter().filter(|e| e.0.def.system == sys) {
        let ev = &*x.file(e);
        if clear {
            ev.filtered.store(false, Ordering::Relaxed);
            *ev.filter.write_ok() = FilterState::None;
            continue;
        }
        match filter::parse(raw, &filter::event_lookup(&e.0.def)) {
            Ok(f) => {
                *ev.filter.write_ok() = FilterState::Active(text.to_string(), f);
                ev.filtered.store(true, Ordering::Relaxed);
            }
            Err(_) => {
                ev.filtered.store(false, Ordering::Relaxed);
                *ev.filter.write_ok() = FilterState::Error(format!(
                    "{text}\n^\nparse_error: {}\n\n",
                    filter::E_BAD_SUBSYS
                ));
            }
        }
    }
    Ok(data.len() as u32)
}

/// Pids a pid list can hold lie below this (the kernel's pid list
/// `MAX_PID`, 2^30).
const PID_LIST_MAX: i32 = 1 << 30;

fn write_pids(set: &Mutex<std::collections::BTreeSet<u32>>, data: &[u8]) -> SysResult<Vec<u32>> {
    let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
    let mut pids = Vec::new();
    for tok in s
        .trim_end_matches('\0')
        .split(|c: char| c.is_ascii_whitespace())
    {
        if tok.is_empty() {
            continue;
        }
        // As trace_pid_write: kstrtoul base 0 (EINVAL), the value taken
        // as a pid_t, and a pid the list cannot hold (2^30 and up, or
        // negative) is -1 (EPERM).
        let v = crate::tracefs::parse::kstrtoul_base0(tok).map_err(|_| Errno::EINVAL)?;
        let pid = v as i32;
        if !(0..PID_LIST_MAX).contains(&pid) {
            return Err(Errno::EPERM);
        }
        pids.push(pid as u32);
    }
    set.lock_ok().extend(pids.iter().copied());
    Ok(pids)
}

impl Arr {
    fn set_option(&self, idx: usize, on: bool) -> SysResult<()> {
        if idx == OPT_PRINTK_DEST {
            return self.set_printk_dest(on);
        }
        if OPTIONS[idx].0 == "test_nop_refuse" {
            // The nop tracer's own test option: its set_flag refuses every
            // change (trace_nop.c, nop_set_flag).
            return Err(Errno::EINVAL);
        }
        self.options.lock_ok()[idx] = on;
        match OPTIONS[idx].0 {
            "event-fork" => {
                self.event_fork.store(on, Ordering::Relaxed);
                if let (true, Some(h)) = (on, self.t.on_event_fork.get()) {
                    h();
                }
            }
            "irq-info" => self.irq_info.store(on, Ordering::Relaxed),
            "stacktrace" => self.stacktrace.store(on, Ordering::Relaxed),
            "record-cmd" => self.record_cmd.store(on, Ordering::Relaxed),
            "record-tgid" => self.record_tgid.store(on, Ordering::Relaxed),
            "overwrite" => self.overwrite.store(on, Ordering::Relaxed),
            _ => {}
        }
        Ok(())
    }

    /// `trace_printk_dest`, set in exactly one array, as the kernel keeps
    /// it: setting it in an array takes it from the one that had it;
    /// clearing it in an instance gives it back to the top level, which
    /// cannot clear it itself (EINVAL).
    fn set_printk_dest(&self, on: bool) -> SysResult<()> {
        let mut dest = self.t.printk_dest.lock_ok();
        let was = self.options.lock_ok()[OPT_PRINTK_DEST];
        if was == on {
            return Ok(());
        }
        if on {
            if let Some(Some(old)) = self.t.arrays.read_ok().get(*dest) {
                old.options.lock_ok()[OPT_PRINTK_DEST] = false;
            }
            *dest = self.slot;
        } else {
            if *dest == 0 {
                return Err(Errno::EINVAL);
            }
            *dest = 0;
            self.t.top.options.lock_ok()[OPT_PRINTK_DEST] = true;
        }
        self.options.lock_ok()[OPT_PRINTK_DEST] = on;
        Ok(())
    }

    /// `buffer_size_kb` (`X` when the CPUs' sizes differ) or
    /// `buffer_total_size_kb`, with the size they will expand to while
    /// nothing has been set up yet.
    fn buffer_kb(&self, total: bool) -> String {
        let expanded = self.expanded.load(Ordering::Relaxed);
        let sizes: Vec<usize> = self
            .bufs
            .iter()
            .map(|b| TraceArray::kb_of(&b.lock_ok()))
            .collect();
        let kb = if total {
            sizes.iter().sum()
        } else if sizes.iter().all(|&k| k == sizes[0]) {
            sizes[0]
        } else {
            return "X\n".into();
        };
        if expanded {
            format!("{kb}\n")
        } else {
            let mul = if total { self.bufs.len() } else { 1 };
            format!("{kb} (expanded: {})\n", DEFAULT_BUF_BYTES / 1024 * mul)
        }
    }
}

/// Add every file under `tracing/`: the global ones, then the top-level
/// array's.
pub fn install(t: &Arc<Tracing>, tree: &Arc<Tree>) {
    tree.add("tracing", NodeKind::Dir, 0o700);
    add_ctl(
        tree,
        "tracing/README",
        Ctl::new(MODE_READ).rs(|| README.to_string()),
    );
    let tt = t.clone();
    add_ctl(
        tree,
        "tracing/available_events",
        Ctl::new(MODE_READ).rs(move || {
            tt.events()
                .iter()
                .map(|e| format!("{}:{}\n", e.0.def.system, e.0.def.name))
                .collect()
        }),
    );
    install_global_info(t, tree);
    install_array(&Arr::new(t, t.top().clone()), tree);
}

/// Add the files of one trace array under its directory (`tracing/` or
/// `tracing/instances/NAME/`).
pub(crate) fn install_array(x: &Arr, tree: &Tree) {
    let b = x.base();
    tree.add(&format!("{b}/events"), NodeKind::Dir, 0o755);
    tree.add(&format!("{b}/options"), NodeKind::Dir, 0o750);
    let (tr, tw, tc) = (x.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/set_event"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                tr.events()
                    .iter()
                    .filter(|e| tr.enabled(e))
                    .map(|e| format!("{}:{}\n", e.0.def.system, e.0.def.name))
                    .collect()
            })
            .w(move |data, _| {
                if data.is_empty() {
                    return Ok(0);
                }
                tw.expand();
                let (consumed, tok) = next_token(data)?;
                let Some(tok) = tok else {
                    return Ok(consumed as u32);
                };
                let tok = crate::base::bytestr::text(tok);
                let m = parse_match(&tok).ok_or(Errno::EINVAL)?;
                let hits: Vec<EventId> = tw
                    .events()
                    .into_iter()
                    .filter(|e| m.matches(&e.0.def.system, &e.0.def.name))
                    .collect();
                if hits.is_empty() {
                    return Err(Errno::EINVAL);
                }
                for e in &hits {
                    tw.set_enabled(e, m.enable);
                }
                Ok(consumed as u32)
            })
            .t(move || {
                for e in tc.events() {
                    tc.set_enabled(&e, false);
                }
            }),
    );
    let (tr, tc) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/trace"),
        Ctl::new(MODE_WRITE)
            .rs(move || tr.trace_text(None))
            .w(|data, _| Ok(data.len() as u32))
            .t(move || tc.clear_all()),
    );
    install_buffer_info(x, tree);
    crate::tracefs::ring::snapshot::install(&x.a, tree);
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
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/buffer_size_kb"),
        Ctl::new(MODE_WRITE)
            .rs(move || tr.buffer_kb(false))
            .w(move |data, _| tw.set_buffer_kb(None, data)),
    );
    let tr = x.clone();
    add_ctl(
        tree,
        &format!("{b}/buffer_total_size_kb"),
        Ctl::new(MODE_READ).rs(move || tr.buffer_kb(true)),
    );
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
    pid_list_file(x, tree, &format!("{b}/set_event_pid"), |a| {
        (&a.event_pids, &a.has_event_pids)
    });

    let (tr, tw, tc) = (x.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/set_ftrace_pid"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                let p = tr.ftrace_pids.lock_ok();
                if p.is_empty() {
                    "no pid\n".into()
                } else {
                    p.iter().map(|p| format!("{p}\n")).collect()
                }
            })
            .w(move |data, _| write_pids(&tw.ftrace_pids, data).map(|_| data.len() as u32))
            .t(move || tc.ftrace_pids.lock_ok().clear()),
    );
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/trace_options"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                let o = tr.options.lock_ok();
                OPTIONS
                    .iter()
                    .zip(o.iter())
                    .map(|((n, _), on)| {
                        if *on {
                            format!("{n}\n")
                        } else {
                            format!("no{n}\n")
                        }
                    })
                    .collect()
            })
            .w(move |data, _| {
                let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
                let s = s
                    .trim_end_matches('\0')
                    .trim_matches(|c: char| c.is_ascii_whitespace());
                let (name, on) = match s.strip_prefix("no") {
                    Some(n) if OPTIONS.iter().any(|o| o.0 == n) => (n, false),
                    _ => (s, true),
                };
                let idx = OPTIONS
                    .iter()
                    .position(|o| o.0 == name)
                    .ok_or(Errno::EINVAL)?;
                tw.set_option(idx, on)?;
                Ok(data.len() as u32)
            }),
    );
    for (idx, (name, _)) in OPTIONS.iter().enumerate() {
        if !x.is_top() && TOP_ONLY_OPTIONS.contains(name) {
            continue;
        }
        let (tr, tw) = (x.clone(), x.clone());
        add_ctl(
            tree,
            &format!("{b}/options/{name}"),
            Ctl::new(MODE_WRITE)
                .rs(move || bool_line(tr.options.lock_ok()[idx]))
                .w(move |data, _| {
                    let on = enable_value(data)?;
                    // As trace_options_write and trace_options_core_write:
                    // a value the option already has changes nothing.
                    if tw.options.lock_ok()[idx] != on {
                        tw.set_option(idx, on)?;
                    }
                    Ok(data.len() as u32)
                }),
        );
    }

    // events/
    let tr = x.clone();
    add_ctl(
        tree,
        &format!("{b}/events/header_page"),
        Ctl::new(MODE_READ).rs(move || header_page(tr.subbuf_capacity())),
    );
    add_ctl(
        tree,
        &format!("{b}/events/header_event"),
        Ctl::new(MODE_READ).rs(|| HEADER_EVENT.into()),
    );
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/events/enable"),
        Ctl::new(MODE_WRITE)
            .rs(move || enable_state(&tr, &tr.events()))
            .w(move |data, _| {
                let on = enable_value(data)?;
                tw.expand();
                let evs = tw.events();
                if evs.is_empty() {
                    return Err(Errno::EINVAL);
                }
                for e in &evs {
                    tw.set_enabled(e, on);
                }
                Ok(data.len() as u32)
            }),
    );
    // Oldest registration first, so the directory lists systems in the order
    // they were defined.
    let mut evs = x.events();
    evs.reverse();
    let mut systems: Vec<String> = Vec::new();
    for e in &evs {
        if !systems.contains(&e.0.def.system) {
            systems.push(e.0.def.system.clone());
        }
    }
    for sys in &systems {
        install_system(x, tree, sys);
    }
    for e in &evs {
        install_event(x, tree, e);
    }
}

/// Add a dynamic event's directory (and its system's, for the system's
/// first event). No `inject`: user events have none here.
pub(crate) fn install_dynamic(t: &Arc<Tracing>, tree: &Tree, e: &EventId) {
    for arr in t.arrays.read_ok().iter().flatten() {
        let x = Arr::new(t, arr.clone());
        let sys = &e.0.def.system;
        if tree.resolve(&format!("{}/events/{sys}", x.base())).is_err() {
            install_system(&x, tree, sys);
        }
        install_event_files(&x, tree, e);
    }
}

fn install_system(x: &Arr, tree: &Tree, sys: &str) {
    {
        let dir = format!("{}/events/{sys}", x.base());
        tree.add(&dir, NodeKind::Dir, 0o755);
        let (tr, tw, sr, sw) = (x.clone(), x.clone(), sys.to_string(), sys.to_string());
        add_ctl(
            tree,
            &format!("{dir}/enable"),
            Ctl::new(MODE_WRITE)
                .rs(move || {
                    let evs: Vec<EventId> = tr
                        .events()
                        .into_iter()
                        .filter(|e| e.0.def.system == sr)
                        .collect();
                    enable_state(&tr, &evs)
                })
                .w(move |data, _| {
                    let on = enable_value(data)?;
                    tw.expand();
                    for e in tw.events().iter().filter(|e| e.0.def.system == sw) {
                        tw.set_enabled(e, on);
                    }
                    Ok(data.len() as u32)
                }),
        );
        let (tw, sw) = (x.clone(), sys.to_string());
        add_ctl(
            tree,
            &format!("{dir}/filter"),
            Ctl::new(MODE_WRITE)
                .rs(|| SYSTEM_FILTER_HELP.into())
                .w(move |data, _| write_system_filter(&tw, &sw, data)),
        );
    }
}

/// Whether a directory of this name can be reached by a path. The kernel
/// takes any user_events name and makes its eventfs directory even when no
/// path reaches it (an empty name, `.`, `..`, a `/` in it); monfs makes
/// none for such an event, which is there all the same (`dynamic_events`,
/// `available_events`, `set_event`).
fn has_path(name: &str) -> bool {
    !(name.is_empty() || name.contains('/') || name == "." || name == "..")
}

fn install_event(x: &Arr, tree: &Tree, e: &EventId) {
    install_event_files(x, tree, e);
    let dir = format!("{}/events/{}/{}", x.base(), e.0.def.system, e.0.def.name);
    install_event_inject(x, tree, e, &dir);
}

/// An event's `enable`, `filter`, `format` and `id`. Names are not
/// reserved, as in the kernel: an event called `enable` or `filter` gets its
/// directory over the system's file of that name, which comes back when the
/// event goes.
fn install_event_files(x: &Arr, tree: &Tree, e: &EventId) {
    if !has_path(&e.0.def.name) {
        return;
    }
    let dir = format!("{}/events/{}/{}", x.base(), e.0.def.system, e.0.def.name);
    tree.add_dir_over_file(&dir);
    let (er, ew, tr, tw) = (e.clone(), e.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/enable"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                // `*`: armed by triggers (soft mode), as the kernel marks it.
                let f = tr.file(&er);
                let star = if f.armed.load(Ordering::Relaxed) {
                    "*"
                } else {
                    ""
                };
                format!("{}{star}\n", f.enabled.load(Ordering::Relaxed) as u8)
            })
            .w(move |data, _| {
                let on = enable_value(data)?;
                tw.expand();
                tw.set_enabled(&ew, on);
                Ok(data.len() as u32)
            }),
    );
    let (fr, ew, fw, xw) = (x.file(e), e.clone(), x.file(e), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/filter"),
        Ctl::new(MODE_WRITE)
            .rs(move || read_event_filter(&fr))
            .w(move |data, _| write_event_filter(&xw, &ew, &fw, data)),
    );
    let (er, ew, ec, xr, xw, xc) = (
        e.clone(),
        e.clone(),
        e.clone(),
        x.clone(),
        x.clone(),
        x.clone(),
    );
    add_ctl(
        tree,
        &format!("{dir}/trigger"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                let t = er.0.trig(xr.a.slot);
                if t.is_empty() {
                    AVAILABLE_TRIGGERS.to_string()
                } else {
                    t.read_text()
                }
            })
            .w(move |data, _| xw.t.write_trigger(&xw.a, &ew, data))
            .t(move || xc.t.truncate_trigger(&xc.a, &ec)),
    );
    let (er, xr) = (e.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/hist"),
        Ctl::new(MODE_READ).rs(move || er.0.trig(xr.a.slot).hist_text()),
    );
    let er = e.clone();
    add_ctl(
        tree,
        &format!("{dir}/format"),
        Ctl::new(MODE_READ).rs(move || er.0.def.format_text()),
    );
    let er = e.clone();
    add_ctl(
        tree,
        &format!("{dir}/id"),
        Ctl::new(MODE_READ).rs(move || format!("{}\n", er.0.def.id)),
    );
}

fn install_event_inject(x: &Arr, tree: &Tree, e: &EventId, dir: &str) {
    let (ew, xw) = (e.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/inject"),
        Ctl::new(0o200).w(move |data, caller| {
            inject_text(&xw, &ew, data, caller.pid)?;
            Ok(data.len() as u32)
        }),
    );
}

/// A pid list file (`set_event_pid`, `set_event_notrace_pid`): one pid a
/// line; writes add, `O_TRUNC` clears. `pick` gives the array's set and
/// its "not empty" flag that the recording path reads.
fn pid_list_file(
    x: &Arr,
    tree: &Tree,
    path: &str,
    pick: fn(&TraceArray) -> (&RwLock<BTreeSet<u32>>, &AtomicBool),
) {
    let (tr, tw, tc) = (x.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        path,
        Ctl::new(MODE_WRITE)
            .rs(move || {
                pick(&tr)
                    .0
                    .read_ok()
                    .iter()
                    .map(|p| format!("{p}\n"))
                    .collect()
            })
            .w(move |data, _| {
                tw.expand();
                let m = Mutex::new(Default::default());
                let pids = write_pids(&m, data)?;
                let (set, flag) = pick(&tw);
                let mut set = set.write_ok();
                set.extend(pids);
                flag.store(!set.is_empty(), Ordering::Relaxed);
                Ok(data.len() as u32)
            })
            .t(move || {
                let (set, flag) = pick(&tc);
                set.write_ok().clear();
                flag.store(false, Ordering::Relaxed);
            }),
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

/// A number in `min..=max` from a write, or EINVAL.
fn ranged(data: &[u8], min: u64, max: u64) -> SysResult<u64> {
    let v = kstrtoul_from_user(data)?;
    if v < min || v > max {
        return Err(Errno::EINVAL);
    }
    Ok(v)
}

/// A trace array's files about its buffer that trace-cmd and the kernel's
/// selftests read: `trace_clock`, `tracing_cpumask`,
/// `set_event_notrace_pid`, `timestamp_mode`, `buffer_percent`,
/// `buffer_subbuf_size_kb`, `free_buffer`.
fn install_buffer_info(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/trace_clock"),
        Ctl::new(MODE_WRITE)
            .rs(move || tr.trace_clock.text())
            .w(move |data, _| {
                let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
                let name = s.trim_end_matches('\0').trim();
                tw.trace_clock.select(name).ok_or(Errno::EINVAL)?;
                // The kernel empties the buffers on every clock write, the
                // snapshot buffer too.
                tw.clear_all();
                for mut b in tw.lock_spare() {
                    b.clear();
                }
                Ok(data.len() as u32)
            }),
    );
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
    pid_list_file(x, tree, &format!("{b}/set_event_notrace_pid"), |a| {
        (&a.notrace_pids, &a.has_notrace_pids)
    });

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
    let percent = Arc::new(std::sync::atomic::AtomicU64::new(50));
    let (pr, pw) = (percent.clone(), percent);
    add_ctl(
        tree,
        &format!("{b}/buffer_percent"),
        Ctl::new(MODE_WRITE)
            .rs(move || format!("{}\n", pr.load(Ordering::Relaxed)))
            .w(move |data, _| {
                pw.store(ranged(data, 0, 100)?, Ordering::Relaxed);
                Ok(data.len() as u32)
            }),
    );
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/buffer_subbuf_size_kb"),
        Ctl::new(MODE_WRITE)
            .rs(move || format!("{}\n", tr.subbuf_kb()))
            .w(move |data, _| tw.set_subbuf_kb(data)),
    );
    // Writing frees the buffer's pages (down to the minimum) as closing
    // the kernel's does.
    let tw = x.clone();
    add_ctl(
        tree,
        &format!("{b}/free_buffer"),
        Ctl::new(0o200).w(move |data, _| {
            for b in &tw.bufs {
                let mut b = b.lock_ok();
                b.clear();
                b.resize(2);
            }
            tw.resize_spare(None, 0);
            Ok(data.len() as u32)
        }),
    );
}

/// The global files about saved task names and the like:
/// `saved_cmdlines(_size)`, `saved_tgids`, `printk_formats`,
/// `tracing_thresh`.
fn install_global_info(t: &Arc<Tracing>, tree: &Tree) {
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
                let n = ranged(data, 1, crate::tracefs::facility::SAVED_CMDLINES_MAX as u64)?;
                let mut c = tw.cmdlines.lock_ok();
                c.size = crate::tracefs::facility::cmdlines_rounded(n as usize);
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

impl Tracing {
    /// Add a dynamic event (user_events) at run time: registered as
    /// [`Tracing::register_dynamic`] says, and its directory
    /// `events/<system>/<name>/` (enable, filter, format, id) appears.
    pub(crate) fn add_dynamic(
        self: &Arc<Self>,
        make: impl FnOnce(u16) -> crate::tracefs::EventDef,
        hook: crate::tracefs::EnableHook,
    ) -> Result<EventId, Errno> {
        let id = self.register_dynamic(make, hook)?;
        if let Some(tree) = self.tree.get() {
            let _g = self.dyn_tree.lock_ok();
            install_dynamic(self, tree, &id);
        }
        Ok(id)
    }

    /// Remove a dynamic event: out of the event list and the tree, and its
    /// system's directory with it when it was the system's last event, as the
    /// kernel does (the tree tells the kernel's dentry cache at once, so the
    /// usual "register, then enable" of a producer that restarts finds the
    /// new directories).
    pub(crate) fn remove_dynamic(&self, id: &EventId) {
        self.unregister_dynamic(id);
        if let Some(tree) = self.tree.get() {
            let _g = self.dyn_tree.lock_ok();
            for arr in self.arrays.read_ok().iter().flatten() {
                let sys = format!("{}/events/{}", arr.base(), id.0.def.system);
                if has_path(&id.0.def.name) {
                    tree.remove(&format!("{sys}/{}", id.0.def.name));
                }
                let has_events = tree.resolve(&sys).is_ok_and(|dir| {
                    dir.children.iter().any(|(_, ino)| {
                        tree.get(*ino)
                            .is_ok_and(|n| matches!(n.kind, NodeKind::Dir))
                    })
                });
                if !has_events {
                    tree.remove(&sys);
                }
            }
        }
    }

    /// Record `system:name` from `field=value ...` text (strings in double
    /// quotes), as its `inject` file does. EINVAL for unknown events or fields.
    pub fn inject(self: &Arc<Self>, id: &EventId, text: &[u8], pid: u32) -> SysResult<()> {
        inject_text(&Arr::new(self, self.top().clone()), id, text, pid)
    }
}

#[cfg(test)]
mod buffer_info_tests {
    use super::*;

    #[test]
    fn saved_cmdlines_size_rounds_as_the_kernels() {
        // Measured on 6.18: 128 and 256 both read back as 6552.
        assert_eq!(crate::tracefs::facility::cmdlines_rounded(128), 6552);
        assert_eq!(crate::tracefs::facility::cmdlines_rounded(256), 6552);
        assert_eq!(crate::tracefs::facility::cmdlines_rounded(6553), 19659);
        // 20,000 to 32,768 (measured: 45,874).
        assert_eq!(crate::tracefs::facility::cmdlines_rounded(20_000), 45_874);
        assert_eq!(crate::tracefs::facility::cmdlines_rounded(32_768), 45_874);
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
