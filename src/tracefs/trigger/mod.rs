//! Event triggers (`kernel/trace/trace_events_trigger.c`): the commands of
//! the `events/<system>/<event>/trigger` file, what reading it shows, when
//! triggers fire and what they ask of the tracer; their parse errors go to
//! the array's `error_log` (`error_log.rs`).
//!
//! Grammar (Documentation/trace/events.rst §6, checked against the real
//! 6.18 tracefs of the machine this was written on, `uname -r` =
//! `6.18.44-fc-v669`):
//!
//! ```text
//! <cmd>[:<count>] [if <filter>]         cmd: traceon traceoff snapshot stacktrace
//! <cmd>:<sys>:<event>[:<count>] [if <filter>]
//!                                       cmd: enable_event disable_event enable_hist disable_hist
//! hist:<attrs> [if <filter>]            see crate::tracefs::hist
//! !<any of those>                       removes
//! ```
//!
//! What the kernel does and this replica does too:
//! - One write is one command; the text is stripped of surrounding blanks
//!   and cut at a NUL; a write of 4096 bytes or more fails with `EINVAL`,
//!   an empty one does nothing.
//! - The count is `kstrtoul` base 0 (`0x10`, `010`); a count that does not
//!   start with a digit is taken for a filter, so `traceon:+3` and
//!   `traceon foo` fail with `EINVAL`; `traceon:3:4` counts 3; a count too
//!   large fails with `ERANGE`.
//! - `traceon` and `traceoff` are one kind: an event holds at most one of
//!   them (`EEXIST`), and `!traceoff` removes a `traceon`. The same holds
//!   for `snapshot`, `stacktrace`, and per target event for
//!   `enable_event`/`disable_event` and for `enable_hist`/`disable_hist`.
//! - Removal ignores the count and the filter and succeeds when there is
//!   nothing to remove (`!traceon` twice returns 8 both times); only
//!   `enable_event` and friends check that the target event exists
//!   (`EINVAL`). Hist triggers must match on their keys, values, sort keys
//!   and filter to be removed (and also succeed when nothing matches).
//! - Reading lists the newest trigger first (hist triggers go to the end),
//!   `name:unlimited` or `name:count=N`, then ` if <filter as written>`;
//!   with no trigger it shows the help header.
//! - Opening with `O_TRUNC` removes the hist, `enable_hist` and
//!   `disable_hist` triggers only ([`Triggers::truncate`]); the real
//!   tracefs kept `traceon:unlimited` after `echo > trigger`.
//! - A filter that does not parse fails the write with the filter's errno
//!   and logs `event filter parse error` to `error_log`.

pub(crate) mod files;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::RwLockExt;
use crate::tracefs::error_log::ErrorLog;
use crate::tracefs::events::EventDef;
use crate::tracefs::filter::{self, Filter};
pub use crate::tracefs::hist::Hit;
use crate::tracefs::hist::{self, Hist, HistAction, HistDef, HistEnv, NamedHists};
use crate::tracefs::parse::is_space_char as is_space;
use crate::tracefs::synth::{SynthDef, SynthVal};

/// What `trigger` shows when the event has no trigger: the commands of a
/// kernel built with snapshots and hist triggers. (The machine this was
/// measured on builds without them and shows `# traceon traceoff
/// stacktrace enable_event disable_event`.)
pub const AVAILABLE_TRIGGERS: &str = "# Available triggers:\n\
# traceon traceoff snapshot stacktrace enable_event disable_event enable_hist disable_hist hist\n";

/// The longest write the file takes, less one (`PAGE_SIZE`).
const WRITE_MAX: usize = 4096;

/// An event a trigger names (`enable_event:<sys>:<event>`): the tracer's
/// handle for it.
pub trait TriggerEvent: Clone + Send + Sync + 'static {
    /// The event's system.
    fn system(&self) -> &str;
    /// The event's name.
    fn name(&self) -> &str;
    /// Whether both handles name the same event.
    fn same_event(&self, other: &Self) -> bool;
}

/// What a write to `trigger` needs from the tracer.
pub trait TriggerHost<E> {
    /// Look an event up by system and name (`enable_event` targets,
    /// `onmatch()`).
    fn find_event(&self, system: &str, name: &str) -> Option<E>;
    /// Whether any event of that name exists, the `ftrace` system's
    /// included (the kernel's `__find_event_file`, which `onmatch()` uses:
    /// `onmatch(ftrace.print)` pairs `trace_marker` writes).
    fn any_event(&self, system: &str, name: &str) -> bool {
        self.find_event(system, name).is_some()
    }
    /// An `enable_event`, `disable_event`, `enable_hist` or `disable_hist`
    /// trigger naming `target` was added (`on`) or removed: the kernel puts
    /// the target in soft mode while any such trigger exists (its `enable`
    /// file shows `0*`, or `1*` once a trigger enabled it). Count these:
    /// several triggers can name one target. When the last one goes, a
    /// target a trigger had enabled stays enabled (measured: `1*` became
    /// `1`).
    fn soft_mode(&self, target: &E, on: bool);
    /// Where parse errors go.
    fn error_log(&self) -> &ErrorLog;
    /// Nanoseconds since boot, for `error_log` timestamps.
    fn now_ns(&self) -> u64;
    /// The registry of `name=` histograms, one per tracing instance.
    fn named_hists(&self) -> &NamedHists;
    /// A `snapshot` trigger is being added (`on`) or was removed: the
    /// kernel holds the instance's snapshot buffer armed while any exists,
    /// and adding one allocates it (`tracing_arm_snapshot`; EBUSY when it
    /// cannot be armed, and the trigger is not added). Removing one does
    /// not free the buffer.
    fn hold_snapshot(&self, on: bool) -> SysResult<()>;
    /// The instance's registered histograms with variables or variable
    /// references, with their event's system and name.
    fn hists(&self) -> Vec<(String, String, Arc<Hist>)>;
    /// A synthetic event's definition.
    fn synth_def(&self, name: &str) -> Option<Arc<SynthDef>>;
    /// One hist trigger more (`delta` 1) or less (-1) uses the synthetic
    /// event `name`.
    fn synth_ref(&self, name: &str, delta: isize);
}

/// The [`HistEnv`] a trigger host gives the hist parser.
struct Env<'a, E>(&'a dyn TriggerHost<E>);

impl<E> HistEnv for Env<'_, E> {
    fn event_exists(&self, system: &str, event: &str) -> bool {
        self.0.any_event(system, event)
    }
    fn hists(&self) -> Vec<(String, String, Arc<Hist>)> {
        self.0.hists()
    }
    fn synth(&self, name: &str) -> Option<Arc<SynthDef>> {
        self.0.synth_def(name)
    }
}

/// What firing needs to know of the tracer's state.
pub trait FireContext<E> {
    /// Whether `tracing_on` is set (counted `traceon`/`traceoff` triggers
    /// only count when they change it).
    fn tracing_on(&self) -> bool;
    /// Whether `event` records now: enabled and not soft-disabled (counted
    /// `enable_event`/`disable_event` triggers only count when they change
    /// it).
    fn event_enabled(&self, event: &E) -> bool;
}

/// What a fired trigger asks the tracer to do.
#[derive(Clone, Debug)]
pub enum TriggerAction<E> {
    /// Set `tracing_on`.
    TraceOn,
    /// Clear `tracing_on` (a post trigger: after the event is recorded).
    TraceOff,
    /// Take a snapshot of the buffer.
    Snapshot,
    /// Record a stack trace entry (a post trigger).
    StackTrace,
    /// Clear the target's soft-disable: it records from now on.
    EnableEvent(E),
    /// Set the target's soft-disable.
    DisableEvent(E),
    /// Resume the target's hist triggers ([`Triggers::set_hist_paused`]
    /// with `false`).
    EnableHist(E),
    /// Generate the synthetic event `name` (a hist trigger's action).
    Synth {
        /// The synthetic event.
        name: String,
        /// Its fields' values.
        vals: Vec<SynthVal>,
    },
    /// Pause the target's hist triggers.
    DisableHist(E),
}

impl<E> TriggerAction<E> {
    /// Whether the kernel runs this trigger after the event is written
    /// (`traceoff`, `stacktrace`), rather than before.
    pub fn is_post(&self) -> bool {
        matches!(self, TriggerAction::TraceOff | TriggerAction::StackTrace)
    }
}

/// The kernel's trigger types: one trigger of a type per event (per target
/// for the enable types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    TraceOnOff,
    Snapshot,
    StackTrace,
    EventEnable,
    HistEnable,
    Hist,
}

enum Kind<E> {
    TraceOn,
    TraceOff,
    Snapshot,
    StackTrace,
    Enable {
        target: E,
        enable: bool,
        hist: bool,
    },
    Hist {
        hist: Arc<Hist>,
        name: Option<String>,
    },
}

/// Counts are the kernel's `unsigned long`; this one means unlimited.
const UNLIMITED: u64 = u64::MAX;

struct Trigger<E> {
    kind: Kind<E>,
    count: AtomicU64,
    filter: Option<(String, Filter)>,
    paused: AtomicBool,
}

impl<E: TriggerEvent> Trigger<E> {
    fn ty(&self) -> Type {
        match &self.kind {
            Kind::TraceOn | Kind::TraceOff => Type::TraceOnOff,
            Kind::Snapshot => Type::Snapshot,
            Kind::StackTrace => Type::StackTrace,
            Kind::Enable { hist: false, .. } => Type::EventEnable,
            Kind::Enable { hist: true, .. } => Type::HistEnable,
            Kind::Hist { .. } => Type::Hist,
        }
    }

    fn target(&self) -> Option<&E> {
        match &self.kind {
            Kind::Enable { target, .. } => Some(target),
            _ => None,
        }
    }

    /// Use one count: false when none is left.
    fn take(&self) -> bool {
        self.count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| match c {
                0 => None,
                UNLIMITED => Some(c),
                _ => Some(c - 1),
            })
            .is_ok()
    }

    fn filter_str(&self) -> Option<&str> {
        self.filter.as_ref().map(|f| f.0.as_str())
    }

    /// The line reading `trigger` shows.
    fn print(&self) -> String {
        let mut s = match &self.kind {
            Kind::TraceOn => "traceon".to_string(),
            Kind::TraceOff => "traceoff".to_string(),
            Kind::Snapshot => "snapshot".to_string(),
            Kind::StackTrace => "stacktrace".to_string(),
            Kind::Enable {
                target,
                enable,
                hist,
            } => format!(
                "{}_{}:{}:{}",
                if *enable { "enable" } else { "disable" },
                if *hist { "hist" } else { "event" },
                target.system(),
                target.name()
            ),
            Kind::Hist { hist, .. } => {
                return hist
                    .def
                    .info(self.filter_str(), self.paused.load(Ordering::Relaxed))
            }
        };
        match self.count.load(Ordering::Relaxed) {
            UNLIMITED => s.push_str(":unlimited"),
            c => {
                let _ = write!(s, ":count={}", c as i64);
            }
        }
        if let Some(f) = self.filter_str() {
            let _ = write!(s, " if {f}");
        }
        s.push('\n');
        s
    }
}

/// Split at the first blank (`strsep(" \t")`).
fn split_blank(s: &str) -> (&str, Option<&str>) {
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// `event_trigger_separate_filter()`: the parameter and the `if ...` part.
/// Without a required parameter, text that does not start with a digit is
/// all filter.
fn separate_filter(pf: Option<&str>, required: bool) -> SysResult<(Option<&str>, Option<&str>)> {
    let Some(pf) = pf else {
        return if required {
            Err(Errno::EINVAL)
        } else {
            Ok((None, None))
        };
    };
    if !required && !pf.as_bytes()[0].is_ascii_digit() {
        return Ok((None, Some(pf)));
    }
    let (param, rest) = split_blank(pf);
    let filter = rest
        .map(|r| r.trim_start_matches(is_space))
        .filter(|r| !r.is_empty());
    Ok((Some(param), filter))
}

/// `event_trigger_parse_num()`: the count before any further `:`.
fn parse_count(param: Option<&str>) -> SysResult<u64> {
    let Some(p) = param else {
        return Ok(UNLIMITED);
    };
    let number = p.split(':').next().unwrap_or("");
    if number.is_empty() {
        return Err(Errno::EINVAL);
    }
    crate::tracefs::parse::kstrtoul_base0(number)
}

/// The triggers of one event.
///
/// `E` is the tracer's event handle. The hot path checks
/// [`Triggers::is_empty`] (one atomic load) before anything else.
pub struct Triggers<E: TriggerEvent> {
    list: RwLock<Vec<Trigger<E>>>,
    active: AtomicBool,
    cond: AtomicBool,
}

impl<E: TriggerEvent> Default for Triggers<E> {
    fn default() -> Self {
        Triggers {
            list: RwLock::new(Vec::new()),
            active: AtomicBool::new(false),
            cond: AtomicBool::new(false),
        }
    }
}

impl<E: TriggerEvent> Triggers<E> {
    /// No triggers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the event has no trigger (one atomic load). While it has
    /// any, the kernel keeps the event attached even when it is disabled
    /// (its `enable` file shows `0*`) so that the triggers fire.
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.active.load(Ordering::Relaxed)
    }

    /// Whether any trigger needs the record: one has a filter, is a post
    /// trigger (`traceoff`, `stacktrace`) or is a hist trigger (the
    /// kernel's `TRIGGER_COND`). See [`Triggers::fire`] for what this
    /// changes.
    #[inline]
    pub fn is_conditional(&self) -> bool {
        self.cond.load(Ordering::Relaxed)
    }

    fn update_flags(&self, list: &[Trigger<E>]) {
        self.active.store(!list.is_empty(), Ordering::Relaxed);
        let cond = list.iter().any(|t| {
            t.filter.is_some()
                || matches!(t.ty(), Type::Hist | Type::StackTrace)
                || matches!(t.kind, Kind::TraceOff)
        });
        self.cond.store(cond, Ordering::Relaxed);
    }

    /// A write to the `trigger` file (`def` is the event's definition): add
    /// or remove one trigger. Returns the bytes taken (all of them).
    pub fn write(&self, data: &[u8], def: &EventDef, host: &dyn TriggerHost<E>) -> SysResult<u32> {
        if data.is_empty() {
            return Ok(0);
        }
        if data.len() >= WRITE_MAX {
            return Err(Errno::EINVAL);
        }
        let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
        let text = crate::base::bytestr::text(&data[..end]);
        self.command(text.trim_matches(is_space), def, host)?;
        Ok(data.len() as u32)
    }

    /// `trigger_process_regex()`.
    fn command(&self, buf: &str, def: &EventDef, host: &dyn TriggerHost<E>) -> SysResult<()> {
        let (command, next) = match buf.find([':', ' ', '\t']) {
            Some(i) => (&buf[..i], Some(&buf[i + 1..])),
            None => (buf, None),
        };
        let next = next
            .map(|n| n.trim_start_matches(is_space))
            .filter(|n| !n.is_empty());
        let remove = command.starts_with('!');
        let cmd = if remove { &command[1..] } else { command };
        match cmd {
            "traceon" | "traceoff" | "snapshot" | "stacktrace" => {
                self.simple(cmd, remove, next, def, host)
            }
            "enable_event" | "disable_event" | "enable_hist" | "disable_hist" => {
                self.enable(cmd, remove, next, def, host)
            }
            "hist" => self.hist(remove, next, def, host),
            _ => Err(Errno::EINVAL),
        }
    }

    /// `set_trigger_filter()`: `if <filter>` for the triggering event.
    fn filter(
        filter: Option<&str>,
        def: &EventDef,
        host: &dyn TriggerHost<E>,
    ) -> SysResult<Option<(String, Filter)>> {
        let Some(f) = filter else {
            return Ok(None);
        };
        let (word, rest) = split_blank(f);
        let Some(rest) = rest.filter(|_| word == "if") else {
            return Err(Errno::EINVAL);
        };
        match filter::parse(
            &*crate::base::bytestr::bytes(rest),
            &filter::event_lookup(def),
        ) {
            Ok(flt) => Ok(Some((rest.to_string(), flt))),
            Err(e) => {
                host.error_log().log_filter(host.now_ns(), rest, &e);
                Err(e.errno)
            }
        }
    }

    /// Remove the first trigger `pick` chooses (nothing when none does).
    fn unregister(&self, host: &dyn TriggerHost<E>, pick: impl Fn(&Trigger<E>) -> bool) {
        let removed = {
            let mut list = self.list.write_ok();
            let r = list.iter().position(pick).map(|i| list.remove(i));
            self.update_flags(&list);
            r
        };
        if let Some(t) = removed {
            Self::release(&t, host);
        }
    }

    /// What removing a trigger undoes.
    fn release(t: &Trigger<E>, host: &dyn TriggerHost<E>) {
        match &t.kind {
            Kind::Enable { target, .. } => host.soft_mode(target, false),
            Kind::Hist { hist, name } => {
                if let Some(name) = name {
                    host.named_hists().put(name);
                }
                Self::hist_refs(hist, host, -1);
            }
            Kind::Snapshot => {
                let _ = host.hold_snapshot(false);
            }
            _ => {}
        }
    }

    /// What a hist trigger holds while registered: the synthetic events it
    /// generates or is on, and the histograms whose variables it reads.
    fn hist_refs(hist: &Hist, host: &dyn TriggerHost<E>, delta: isize) {
        for s in hist.def.synth_targets() {
            host.synth_ref(&s, delta);
        }
        for h in hist.def.referenced() {
            if delta > 0 {
                h.referenced_by.fetch_add(1, Ordering::SeqCst);
            } else {
                h.referenced_by.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn simple(
        &self,
        cmd: &str,
        remove: bool,
        next: Option<&str>,
        def: &EventDef,
        host: &dyn TriggerHost<E>,
    ) -> SysResult<()> {
        let (param, filter) = separate_filter(next, false)?;
        let (kind, ty) = match cmd {
            "traceon" => (Kind::TraceOn, Type::TraceOnOff),
            "traceoff" => (Kind::TraceOff, Type::TraceOnOff),
            "snapshot" => (Kind::Snapshot, Type::Snapshot),
            _ => (Kind::StackTrace, Type::StackTrace),
        };
        if remove {
            self.unregister(host, |t| t.ty() == ty);
            return Ok(());
        }
        let count = parse_count(param)?;
        let filter = Self::filter(filter, def, host)?;
        // A snapshot trigger arms the snapshot buffer before it is
        // registered, and lets go of it when that fails.
        let snapshot = ty == Type::Snapshot;
        if snapshot {
            host.hold_snapshot(true)?;
        }
        let mut list = self.list.write_ok();
        if list.iter().any(|t| t.ty() == ty) {
            drop(list);
            if snapshot {
                let _ = host.hold_snapshot(false);
            }
            return Err(Errno::EEXIST);
        }
        list.insert(
            0,
            Trigger {
                kind,
                count: AtomicU64::new(count),
                filter,
                paused: AtomicBool::new(false),
            },
        );
        self.update_flags(&list);
        Ok(())
    }

    fn enable(
        &self,
        cmd: &str,
        remove: bool,
        next: Option<&str>,
        def: &EventDef,
        host: &dyn TriggerHost<E>,
    ) -> SysResult<()> {
        if next.is_none() {
            return Err(Errno::EINVAL);
        }
        let (param, filter) = separate_filter(next, true)?;
        let param = param.unwrap_or("");
        let Some((system, rest)) = param.split_once(':') else {
            return Err(Errno::EINVAL);
        };
        let (event, count) = match rest.split_once(':') {
            Some((e, c)) => (e, Some(c)),
            None => (rest, None),
        };
        let Some(target) = host.find_event(system, event) else {
            return Err(Errno::EINVAL);
        };
        let hist = cmd.ends_with("_hist");
        let enable = cmd.starts_with("enable");
        let ty = if hist {
            Type::HistEnable
        } else {
            Type::EventEnable
        };
        if remove {
            self.unregister(host, |t| {
                t.ty() == ty && t.target().is_some_and(|x| x.same_event(&target))
            });
            return Ok(());
        }
        let count = parse_count(count)?;
        let filter = Self::filter(filter, def, host)?;
        host.soft_mode(&target, true);
        let mut list = self.list.write_ok();
        if list
            .iter()
            .any(|t| t.ty() == ty && t.target().is_some_and(|x| x.same_event(&target)))
        {
            drop(list);
            host.soft_mode(&target, false);
            return Err(Errno::EEXIST);
        }
        list.insert(
            0,
            Trigger {
                kind: Kind::Enable {
                    target,
                    enable,
                    hist,
                },
                count: AtomicU64::new(count),
                filter,
                paused: AtomicBool::new(false),
            },
        );
        self.update_flags(&list);
        Ok(())
    }

    /// The kernel's `hist_trigger_match()`: `named` is the histogram
    /// registered under the new trigger's name, if any.
    fn hist_match(
        new: &HistDef,
        filter: Option<&str>,
        named: Option<&Arc<Hist>>,
        t: &Trigger<E>,
        ignore_filter: bool,
    ) -> bool {
        let Kind::Hist { hist, name } = &t.kind else {
            return false;
        };
        match named {
            Some(n) if !Arc::ptr_eq(n, hist) => return false,
            None if name.is_some() => return false,
            _ => {}
        }
        (ignore_filter || filter == t.filter_str()) && new.same_shape(&hist.def)
    }

    fn hist(
        &self,
        remove: bool,
        next: Option<&str>,
        def: &EventDef,
        host: &dyn TriggerHost<E>,
    ) -> SysResult<()> {
        let Some(pf) = next else {
            return Err(Errno::EINVAL);
        };
        let last_cmd = format!("hist:{pf}");
        let loc = format!("hist:{}:{}", def.system, def.name);
        let log = |errs: &[(&'static str, usize)]| {
            for (msg, pos) in errs {
                host.error_log()
                    .log(host.now_ns(), &loc, &last_cmd, msg, *pos);
            }
        };
        let (param, filter) = hist::split_filter(pf)?;
        let mut errs = hist::Errs::new(&last_cmd);
        let parsed = hist::parse(param, def, &mut errs, &Env(host), remove);
        log(&errs.list);
        let hd = parsed?;
        let filter = Self::filter(filter, def, host)?;
        let fstr = filter.as_ref().map(|f| f.0.as_str());
        let named = hd.name.as_ref().and_then(|n| host.named_hists().find(n));

        if remove {
            let busy = self.list.read_ok().iter().any(|t| {
                Self::hist_match(&hd, fstr, named.as_ref(), t, false)
                    && matches!(&t.kind, Kind::Hist { hist, .. }
                        if hist.referenced_by.load(Ordering::SeqCst) > 0)
            });
            if busy {
                return Err(Errno::EBUSY);
            }
            self.unregister(host, |t| {
                Self::hist_match(&hd, fstr, named.as_ref(), t, false)
            });
            if def.system == crate::tracefs::synth::SYSTEM {
                host.synth_ref(&def.name, -1);
            }
            return Ok(());
        }

        let mut list = self.list.write_ok();
        if hd.pause || hd.cont || hd.clear {
            let named_ok = match (&hd.name, &named) {
                (Some(_), None) => false,
                (Some(_), Some(n)) => n.def.same_shape(&hd),
                _ => true,
            };
            if named_ok {
                if let Some(t) = list
                    .iter()
                    .find(|t| Self::hist_match(&hd, fstr, named.as_ref(), t, false))
                {
                    if hd.pause {
                        t.paused.store(true, Ordering::Relaxed);
                    } else if hd.cont {
                        t.paused.store(false, Ordering::Relaxed);
                    } else if let Kind::Hist { hist, .. } = &t.kind {
                        hist.clear();
                    }
                    return Ok(());
                }
            }
        }
        let mut e = hist::Errs::new(&last_cmd);
        let res = (|| {
            if let (Some(name), Some(n)) = (&hd.name, &named) {
                if !n.def.same_shape(&hd) {
                    e.list.push((
                        hist::E_NAMED_MISMATCH,
                        last_cmd.find(name.as_str()).unwrap_or(0),
                    ));
                    return Err(Errno::EINVAL);
                }
            }
            if (hd.name.is_none() || named.is_some())
                && list
                    .iter()
                    .any(|t| Self::hist_match(&hd, fstr, named.as_ref(), t, false))
            {
                e.at0(hist::E_TRIGGER_EEXIST);
                return Err(Errno::EEXIST);
            }
            if hd.cont || hd.clear {
                e.at0(hist::E_TRIGGER_ENOENT_CLEAR);
                return Err(Errno::ENOENT);
            }
            if !hd.clock_ok() {
                let pos = last_cmd.find(hd.clock.as_str()).unwrap_or(0);
                e.list.push((hist::E_SET_CLOCK_FAIL, pos));
                return Err(Errno::EINVAL);
            }
            Ok(())
        })();
        if let Err(err) = res {
            drop(list);
            log(&e.list);
            return Err(err);
        }
        let name = hd.name.clone();
        let paused = hd.pause;
        let hist = match named {
            Some(h) => h,
            // The map is allocated now (ENOMEM past the memory budget).
            None => Hist::new(hd)?,
        };
        if let Some(n) = &name {
            host.named_hists().get(n, &hist);
        }
        Self::hist_refs(&hist, host, 1);
        if def.system == crate::tracefs::synth::SYSTEM {
            host.synth_ref(&def.name, 1);
        }
        list.push(Trigger {
            kind: Kind::Hist { hist, name },
            count: AtomicU64::new(UNLIMITED),
            filter,
            paused: AtomicBool::new(paused),
        });
        self.update_flags(&list);
        Ok(())
    }

    /// Remove every trigger (the event goes away).
    pub fn clear(&self, host: &dyn TriggerHost<E>) {
        let old = {
            let mut list = self.list.write_ok();
            let old = std::mem::take(&mut *list);
            self.update_flags(&list);
            old
        };
        for t in &old {
            Self::release(t, host);
        }
    }

    /// What opening `trigger` with `O_TRUNC` for writing does: remove the
    /// hist, `enable_hist` and `disable_hist` triggers (the kernel's
    /// `unreg_all`), keeping the others.
    pub fn truncate(&self, host: &dyn TriggerHost<E>) {
        let gone = {
            let mut list = self.list.write_ok();
            let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut *list)
                .into_iter()
                .partition(|t| matches!(t.ty(), Type::Hist | Type::HistEnable));
            *list = keep;
            self.update_flags(&list);
            gone
        };
        for t in &gone {
            Self::release(t, host);
        }
    }

    /// The text of the `trigger` file.
    pub fn read_text(&self) -> String {
        let list = self.list.read_ok();
        if list.is_empty() {
            return AVAILABLE_TRIGGERS.to_string();
        }
        list.iter().map(Trigger::print).collect()
    }

    /// The text of the event's `hist` file: one block per hist trigger,
    /// nothing when there is none.
    pub fn hist_text(&self) -> String {
        let list = self.list.read_ok();
        let mut s = String::new();
        let mut n = 0;
        for t in list.iter() {
            if let Kind::Hist { hist, .. } = &t.kind {
                s.push_str(&hist.show(&t.print(), n));
                n += 1;
            }
        }
        s
    }

    /// The histograms of this event's hist triggers that define or
    /// reference variables.
    pub fn var_hists(&self) -> Vec<Arc<Hist>> {
        self.list
            .read_ok()
            .iter()
            .filter_map(|t| match &t.kind {
                Kind::Hist { hist, .. } if hist.def.has_vars() => Some(hist.clone()),
                _ => None,
            })
            .collect()
    }

    /// Pause or resume this event's hist triggers (what the
    /// `enable_hist`/`disable_hist` actions of other events do).
    pub fn set_hist_paused(&self, paused: bool) {
        for t in self.list.read_ok().iter() {
            if t.ty() == Type::Hist {
                t.paused.store(paused, Ordering::Relaxed);
            }
        }
    }

    /// Run the triggers for one hit of the event: count hist entries,
    /// use up counts and return what the tracer must do, in the order the
    /// kernel would (carry out the actions that are not
    /// [`TriggerAction::is_post`] before recording the event and the post
    /// ones after it).
    ///
    /// When to call it, as the kernel runs triggers
    /// (`trace_trigger_soft_disabled()`, `event_trigger_unlock_commit()`):
    ///
    /// 1. Only when `!is_empty()`; then for every hit of the event even
    ///    when the event itself is disabled (soft-disabled, `0*`) and
    ///    whatever `tracing_on` says: the triggers are why the event stays
    ///    attached.
    /// 2. If `!is_conditional()`, call it first, before the
    ///    `set_event_pid` check, then carry out the actions, then record
    ///    the event if it is enabled, `tracing_on` is set (after a
    ///    `traceon` action, so the event that turned tracing on is
    ///    recorded), its pid passes and its filter matches.
    /// 3. If `is_conditional()`, the kernel builds the record first: skip
    ///    the hit when `set_event_pid` rejects it, note whether tracing is
    ///    on, call `fire`, carry out the actions that are not post, then
    ///    record the event if it is enabled, tracing was on when noted and
    ///    its filter matches, then carry out the post actions (whether or
    ///    not the event was recorded or filtered out). The event's own
    ///    filter never stops its triggers: each trigger has its own `if`.
    pub fn fire(&self, hit: &Hit<'_>, cx: &dyn FireContext<E>) -> Vec<TriggerAction<E>> {
        let mut out = Vec::new();
        if self.is_empty() {
            return out;
        }
        let rec = filter::Record {
            entry: hit.entry,
            cpu: hit.cpu,
            comm: hit.comm,
        };
        for t in self.list.read_ok().iter() {
            if t.paused.load(Ordering::Relaxed) {
                continue;
            }
            if let Some((_, f)) = &t.filter {
                if !f.matches(&rec) {
                    continue;
                }
            }
            match &t.kind {
                Kind::TraceOn => {
                    if !cx.tracing_on() && t.take() {
                        out.push(TriggerAction::TraceOn);
                    }
                }
                Kind::TraceOff => {
                    if cx.tracing_on() && t.take() {
                        out.push(TriggerAction::TraceOff);
                    }
                }
                Kind::Snapshot => {
                    if t.take() {
                        out.push(TriggerAction::Snapshot);
                    }
                }
                Kind::StackTrace => {
                    if t.take() {
                        out.push(TriggerAction::StackTrace);
                    }
                }
                Kind::Enable {
                    target,
                    enable,
                    hist: false,
                } => {
                    if cx.event_enabled(target) != *enable && t.take() {
                        out.push(if *enable {
                            TriggerAction::EnableEvent(target.clone())
                        } else {
                            TriggerAction::DisableEvent(target.clone())
                        });
                    }
                }
                Kind::Enable {
                    target,
                    enable,
                    hist: true,
                } => {
                    if t.take() {
                        out.push(if *enable {
                            TriggerAction::EnableHist(target.clone())
                        } else {
                            TriggerAction::DisableHist(target.clone())
                        });
                    }
                }
                Kind::Hist { hist, .. } => {
                    for a in hist.record(hit) {
                        out.push(match a {
                            HistAction::Synth { name, vals } => TriggerAction::Synth { name, vals },
                            HistAction::Snapshot => TriggerAction::Snapshot,
                        });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
