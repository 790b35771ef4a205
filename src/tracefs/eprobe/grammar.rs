//! The grammar of an `e:` line (kernel/trace/trace_eprobe.c's
//! `__trace_eprobe_create` and the argument parser of trace_probe.c): words,
//! names, fetch arguments and types, and the `error_log` entries of each
//! mistake, with the kernel's carets.

use super::print::{FetchType, Kind, StrKind};
use crate::base::errno::Errno;
use crate::tracefs::events::Field;
use crate::tracefs::facility::EventId;
use crate::tracefs::filter::{self, Filter};

/// The group of an event probe that names none (`EPROBE_EVENT_SYSTEM`).
pub const GROUP: &str = "eprobes";
/// `MAX_EVENT_NAME_LEN`.
const NAME_MAX: usize = 64;
/// `MAX_TRACE_ARGS`.
const ARGS_MAX: usize = 128;
/// `MAX_ARG_NAME_LEN`.
const ARG_NAME_MAX: usize = 32;
/// `MAX_ARGSTR_LEN`.
const ARG_STR_MAX: usize = 63;
/// `MAX_ARRAY_LEN`.
const ARRAY_MAX: u64 = 64;
/// `MAX_PROBE_EVENT_SIZE`.
const EVENT_SIZE_MAX: usize = 3072;
/// `FETCH_INSN_MAX` less the store and end instructions: how deep
/// dereferences nest.
const NEST_MAX: usize = 14;
/// Field names an argument may not take (`reserved_field_names`).
const RESERVED: &[&str] = &[
    "common_type",
    "common_flags",
    "common_preempt_count",
    "common_pid",
    "common_tgid",
    "__probe_ip",
    "__probe_ret_ip",
    "__probe_func",
];

/// The parse errors `trace_probe.c` logs, with their `error_log` text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeErr {
    NoGroupName,
    GroupTooLong,
    BadGroupName,
    NoEventName,
    EventTooLong,
    BadEventName,
    EventExist,
    BadVar,
    BadMemAddr,
    BadImm,
    ImmstrNoClose,
    FileOnKprobe,
    TooManyOps,
    DerefNeedBrace,
    BadDerefOffs,
    DerefOpenBrace,
    CommCantDeref,
    BadFetchArg,
    ArrayNoClose,
    BadArraySuffix,
    BadArrayNum,
    ArrayTooBig,
    BadType,
    BadString,
    BadSymstring,
    BadBitfield,
    ArgNameTooLong,
    NoArgName,
    BadArgName,
    UsedArgName,
    ArgTooLong,
    NoArgBody,
    NoEventInfo,
    BadAttachEvent,
    NoEpFilter,
    NosupBtfarg,
    EventTooBig,
}

impl ProbeErr {
    /// The kernel's text for it (`trace_probe_err_text`).
    pub fn text(self) -> &'static str {
        use ProbeErr::*;
        match self {
            NoGroupName => "Group name is not specified",
            GroupTooLong => "Group name is too long",
            BadGroupName => "Group name must follow the same rules as C identifiers",
            NoEventName => "Event name is not specified",
            EventTooLong => "Event name is too long",
            BadEventName => "Event name must follow the same rules as C identifiers",
            EventExist => "Given group/event name is already used by another event",
            BadVar => "Invalid $-variable specified",
            BadMemAddr => "Invalid memory address",
            BadImm => "Invalid immediate value",
            ImmstrNoClose => "String is not closed with '\"'",
            FileOnKprobe => "File offset is not available with kprobe",
            TooManyOps => "Dereference is too much nested",
            DerefNeedBrace => "Dereference needs a brace",
            BadDerefOffs => "Invalid dereference offset",
            DerefOpenBrace => "Dereference brace is not closed",
            CommCantDeref => "$comm can not be dereferenced",
            BadFetchArg => "Invalid fetch argument",
            ArrayNoClose => "Array is not closed",
            BadArraySuffix => "Array has wrong suffix",
            BadArrayNum => "Invalid array size",
            ArrayTooBig => "Array number is too big",
            BadType => "Unknown type is specified",
            BadString => "String accepts only memory argument",
            BadSymstring => "Symbol String doesn't accept data/userdata",
            BadBitfield => "Invalid bitfield",
            ArgNameTooLong => "Argument name is too long",
            NoArgName => "Argument name is not specified",
            BadArgName => "Argument name must follow the same rules as C identifiers",
            UsedArgName => "This argument name is already used",
            ArgTooLong => "Argument expression is too long",
            NoArgBody => "No argument expression",
            NoEventInfo => "This requires both group and event name to attach",
            BadAttachEvent => "Attached event does not exist",
            NoEpFilter => "No filter rule after 'if'",
            NosupBtfarg => "BTF is not available or not supported",
            EventTooBig => "Event too big (too many fields?)",
        }
    }
}

/// Where an argument's value comes from.
#[derive(Clone, Debug)]
pub(super) enum Fetch {
    /// A field of the attached event.
    Field(Field),
    /// The task's name.
    Comm,
    /// An immediate value (`\IMM`).
    Imm(u64),
    /// An immediate string (`\"STRING"`).
    Data(Vec<u8>),
    /// Memory: `@ADDR` or a dereference. There is none to read here.
    Memory,
    /// The address of a kernel symbol (`@SYMBOL`): none is known here.
    Symbol,
}

/// One argument of a probe (`struct probe_arg`).
#[derive(Clone, Debug)]
pub(super) struct Arg {
    pub(super) name: String,
    /// The fetch argument as written (what `dynamic_events` shows).
    pub(super) comm: String,
    pub(super) ty: FetchType,
    /// Array length (0: not an array).
    pub(super) count: usize,
    /// A bitfield: (shift left, shift right) in the container.
    pub(super) bitfield: Option<(u32, u32)>,
    /// Offset of the value in the entry, after the common header.
    pub(super) offset: usize,
    pub(super) fetch: Fetch,
}

/// A parsed `e:` line.
#[derive(Debug)]
pub struct Spec {
    pub(super) group: String,
    pub(super) name: String,
    pub(super) target_system: String,
    pub(super) target_event: String,
    pub(super) args: Vec<Arg>,
    /// The arguments' fixed size (`tp->size`).
    pub(super) size: usize,
    pub(super) filter: Option<(String, Filter)>,
}

/// Why an `e:` line failed: the errno and what to log.
#[derive(Debug)]
pub struct CmdError {
    /// What the write returns.
    pub errno: Errno,
    /// The `error_log` entries (error, caret column), in order.
    pub log: Vec<(ProbeErr, usize)>,
    /// A filter that does not fit the attached event: its text and error,
    /// logged as every event filter error is.
    pub filter: Option<(String, filter::FilterError)>,
}

/// The parse state of one line (`trace_probe_log`): the words, and which
/// one errors point into.
struct Log<'a> {
    argv: &'a [&'a str],
    index: usize,
    out: Vec<(ProbeErr, usize)>,
    filter: Option<(String, filter::FilterError)>,
}

impl Log<'_> {
    /// `__trace_probe_log_err`: the column of `offset` in word `index`, or
    /// just past the command when the index is past the words.
    fn err(&mut self, offset: usize, e: ProbeErr) {
        let before: usize = self.argv.iter().take(self.index).map(|a| a.len() + 1).sum();
        let pos = if self.index >= self.argv.len() {
            self.argv.iter().map(|a| a.len() + 1).sum()
        } else {
            before + offset
        };
        self.out.push((e, pos));
    }

    fn fail(self, errno: Errno) -> CmdError {
        CmdError {
            errno,
            log: self.out,
            filter: self.filter,
        }
    }
}

/// `find_fetch_type`: a type name (`x64` when none); a bitfield
/// `b<width>@<offset>/<container bits>` is its container's type.
pub(super) fn find_type(name: Option<&str>) -> Option<FetchType> {
    let name = name.unwrap_or("x64");
    if let Some(rest) = name.strip_prefix('b') {
        let bits = kstrtoul(rest.split_once('/')?.1).ok()?;
        return find_type(Some(match bits {
            8 => "u8",
            16 => "u16",
            32 => "u32",
            64 => "u64",
            _ => return None,
        }));
    }
    let (kind, size) = match name {
        "string" => (Kind::Str(StrKind::Kernel), 4),
        "ustring" => (Kind::Str(StrKind::User), 4),
        "symstr" => (Kind::Str(StrKind::Symbol), 4),
        "char" => (Kind::Char, 1),
        "symbol" => (Kind::Symbol, 8),
        _ => {
            let kind = match name.as_bytes().first() {
                Some(b'u') => Kind::Unsigned,
                Some(b's') => Kind::Signed,
                Some(b'x') => Kind::Hex,
                _ => return None,
            };
            let size = match &name[1..] {
                "8" => 1,
                "16" => 2,
                "32" => 4,
                "64" => 8,
                _ => return None,
            };
            (kind, size)
        }
    };
    Some(FetchType { kind, size })
}

/// `__is_good_name`: a C identifier (a system name may hold `-` too).
fn good_name(s: &str, hyphen: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (!first && c.is_ascii_digit())
            || (hyphen && c == '-')
    };
    let mut it = s.chars();
    it.next().is_some_and(|c| ok(c, true)) && it.all(|c| ok(c, false))
}

/// `kstrtoul` with base 0.
pub(super) fn kstrtoul(s: &str) -> Result<u64, Errno> {
    crate::tracefs::parse::kstrtoul_base0(s)
}

/// `kstrtol` with base 0.
fn kstrtol(s: &str) -> Result<i64, Errno> {
    match s.strip_prefix('-') {
        Some(r) => {
            let v = kstrtoul(r)?;
            if v > i64::MAX as u64 + 1 {
                return Err(Errno::ERANGE);
            }
            Ok((v as i64).wrapping_neg())
        }
        None => i64::try_from(kstrtoul(s)?).map_err(|_| Errno::ERANGE),
    }
}

/// `simple_strtoul` with base 0: the number at the start of `s` and what
/// follows it.
fn simple_strtoul(s: &str) -> (u64, &str) {
    let b = s.as_bytes();
    let (radix, start) = if b.first() == Some(&b'0') {
        if b.get(1).map(|c| c.to_ascii_lowercase()) == Some(b'x')
            && b.get(2).is_some_and(|c| c.is_ascii_hexdigit())
        {
            (16, 2)
        } else {
            (8, 0)
        }
    } else {
        (10, 0)
    };
    let mut v: u64 = 0;
    let mut i = start;
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        v = v.wrapping_mul(radix as u64).wrapping_add(d as u64);
        i += 1;
    }
    (v, &s[i..])
}

/// `traceprobe_parse_event_name` on `text` (at `offset` in its word):
/// the group if one is named, and the event (None for `GROUP/`).
fn parse_event_name<'a>(
    text: &'a str,
    offset: usize,
    log: &mut Log<'_>,
) -> Result<(Option<&'a str>, Option<&'a str>), ()> {
    let slash = text.find('/').or_else(|| text.find('.'));
    let (group, event, offset) = match slash {
        Some(0) => {
            log.err(offset, ProbeErr::NoGroupName);
            return Err(());
        }
        Some(i) => {
            if i + 1 > NAME_MAX {
                log.err(offset, ProbeErr::GroupTooLong);
                return Err(());
            }
            if !good_name(&text[..i], true) {
                log.err(offset, ProbeErr::BadGroupName);
                return Err(());
            }
            (Some(&text[..i]), &text[i + 1..], offset + i + 1)
        }
        None => (None, text, offset),
    };
    if event.is_empty() {
        if slash.is_some() {
            return Ok((group, None));
        }
        log.err(offset, ProbeErr::NoEventName);
        return Err(());
    }
    if event.len() >= NAME_MAX {
        log.err(offset, ProbeErr::EventTooLong);
        return Err(());
    }
    if !good_name(event, false) {
        log.err(offset, ProbeErr::BadEventName);
        return Err(());
    }
    Ok((group, Some(event)))
}

/// Parse one `e` line against the events there are (`find` looks an
/// attachable event up by system and name). `None`: not an event probe
/// line (`-ECANCELED`: the next kind of dynamic event may take it).
pub fn parse(
    line: &str,
    find: &dyn Fn(&str, &str) -> Option<EventId>,
) -> Option<Result<(Spec, EventId), CmdError>> {
    let argv: Vec<&str> = line
        .split(crate::tracefs::parse::is_space_char)
        .filter(|w| !w.is_empty())
        .collect();
    if argv.len() < 2 || !argv[0].starts_with('e') {
        return None;
    }
    let mut log = Log {
        argv: &argv,
        index: 0,
        out: Vec::new(),
        filter: None,
    };
    Some(parse_words(&argv, &mut log, find).map_err(|errno| log.fail(errno)))
}

fn parse_words(
    argv: &[&str],
    log: &mut Log<'_>,
    find: &dyn Fn(&str, &str) -> Option<EventId>,
) -> Result<(Spec, EventId), Errno> {
    let mut group = GROUP.to_string();
    let mut name: Option<String> = None;
    if let Some(c) = argv[0][1..].find(':') {
        let at = c + 2;
        let (g, e) = parse_event_name(&argv[0][at..], at, log).map_err(|_| Errno::EINVAL)?;
        if let Some(g) = g {
            group = g.to_string();
        }
        name = e.map(str::to_string);
    }
    log.index = 1;
    let (sys, event) = match parse_event_name(argv[1], 0, log) {
        Ok((Some(s), Some(e))) => (s, e),
        _ => {
            log.err(0, ProbeErr::NoEventInfo);
            return Err(Errno::EINVAL);
        }
    };
    let name = name.unwrap_or_else(|| event.chars().take(NAME_MAX - 1).collect());
    let mut argc = argv.len();
    let mut filter_at = None;
    if let Some(i) = argv.iter().skip(2).position(|w| *w == "if") {
        filter_at = Some(i + 3);
        argc = i + 2;
    }
    if argc - 2 > ARGS_MAX {
        return Err(Errno::E2BIG);
    }
    let Some(target) = find(sys, event) else {
        log.err(0, ProbeErr::BadAttachEvent);
        return Err(Errno::ENODEV);
    };
    let mut filter = None;
    if let Some(at) = filter_at {
        log.index = at;
        if at >= argv.len() {
            log.err(0, ProbeErr::NoEpFilter);
            return Err(Errno::EINVAL);
        }
        let text = argv[at..].join(" ");
        match filter::parse(text.as_str(), &filter::event_lookup(target.def())) {
            Ok(f) => filter = Some((text, f)),
            Err(e) => {
                log.filter = Some((text, e));
                return Err(Errno::EINVAL);
            }
        }
    }
    let mut args: Vec<Arg> = Vec::new();
    let mut size = 0;
    for (i, word) in argv[2..argc].iter().enumerate() {
        log.index = i + 2;
        let a = parse_arg(word, i, &args, size, target.def(), log)?;
        size = a.offset + a.ty.size * a.count.max(1);
        args.push(a);
    }
    Ok((
        Spec {
            group,
            name,
            target_system: sys.to_string(),
            target_event: event.to_string(),
            args,
            size,
            filter,
        },
        target,
    ))
}

/// `traceprobe_parse_probe_arg` for argument `i`, `NAME=BODY` or `BODY`.
fn parse_arg(
    word: &str,
    i: usize,
    before: &[Arg],
    size: usize,
    target: &crate::tracefs::EventDef,
    log: &mut Log<'_>,
) -> Result<Arg, Errno> {
    let (name, body, at) = match word.find('=') {
        Some(eq) if eq > ARG_NAME_MAX => {
            log.err(0, ProbeErr::ArgNameTooLong);
            return Err(Errno::EINVAL);
        }
        Some(0) => {
            log.err(0, ProbeErr::NoArgName);
            return Err(Errno::EINVAL);
        }
        Some(eq) => (word[..eq].to_string(), &word[eq + 1..], eq + 1),
        None => {
            // With BTF arguments the expression names the argument when it
            // is an identifier; else it is `argN`.
            let base = word.split(':').next().unwrap_or("");
            let n = if good_name(base, false) {
                base.to_string()
            } else {
                format!("arg{}", i + 1)
            };
            (n, word, 0)
        }
    };
    if !good_name(&name, false) {
        log.err(0, ProbeErr::BadArgName);
        return Err(Errno::EINVAL);
    }
    if RESERVED.contains(&name.as_str()) || before.iter().any(|a| a.name == name) {
        log.err(0, ProbeErr::UsedArgName);
        return Err(Errno::EINVAL);
    }
    if body.len() > ARG_STR_MAX {
        log.err(at, ProbeErr::ArgTooLong);
        return Err(Errno::E2BIG);
    }
    if body.is_empty() {
        log.err(at, ProbeErr::NoArgBody);
        return Err(Errno::EINVAL);
    }
    // The type, and an array length in it.
    let (expr, ty_text, ty_at) = match body.find(':') {
        Some(c) => (&body[..c], Some(&body[c + 1..]), c + 1),
        None => (body, None, 0),
    };
    let mut count = 0;
    let mut ty_name = ty_text;
    if let Some(t) = ty_text {
        if let Some(b) = t.find('[') {
            let inner = &t[b + 1..];
            let open = ty_at + b + 1;
            let Some(close) = inner.find(']') else {
                log.err(at + open + inner.len(), ProbeErr::ArrayNoClose);
                return Err(Errno::EINVAL);
            };
            if close + 1 != inner.len() {
                log.err(at + open + close + 1, ProbeErr::BadArraySuffix);
                return Err(Errno::EINVAL);
            }
            match kstrtoul(&inner[..close]) {
                Ok(n) if n > 0 && n <= u32::MAX as u64 => {
                    if n > ARRAY_MAX {
                        log.err(at + open, ProbeErr::ArrayTooBig);
                        return Err(Errno::EINVAL);
                    }
                    count = n as usize;
                }
                _ => {
                    log.err(at + open, ProbeErr::BadArrayNum);
                    return Err(Errno::EINVAL);
                }
            }
            ty_name = Some(&t[..b]);
        }
    }
    let Some(ty) = find_type(ty_name) else {
        log.err(at + ty_at, ProbeErr::BadType);
        return Err(Errno::EINVAL);
    };
    let fetch = parse_fetch(expr, at, 0, target, log)?;
    let offset = size;
    if offset + ty.size * count.max(1) > EVENT_SIZE_MAX {
        log.err(at, ProbeErr::EventTooBig);
        return Err(Errno::E2BIG);
    }
    // finalize_fetch_insn: what each store accepts.
    let deref = matches!(fetch, Fetch::Memory | Fetch::Symbol);
    if ty.kind == Kind::Str(StrKind::Symbol)
        && !matches!(fetch, Fetch::Memory | Fetch::Symbol | Fetch::Field(_))
    {
        log.err(at + ty_at, ProbeErr::BadSymstring);
        return Err(Errno::EINVAL);
    }
    let mut bitfield = None;
    if let Some(t) = ty_name.filter(|t| t.starts_with('b')) {
        let (bw, tail) = simple_strtoul(&t[1..]);
        let bad = |log: &mut Log<'_>| {
            log.err(at + ty_at, ProbeErr::BadBitfield);
            Err(Errno::EINVAL)
        };
        let Some(tail) = tail.strip_prefix('@').filter(|_| bw != 0) else {
            return bad(log);
        };
        let (bo, rest) = simple_strtoul(tail);
        if rest.len() == tail.len() || !rest.starts_with('/') {
            return bad(log);
        }
        let bits = 8 * ty.size as u64;
        if bits < bw.saturating_add(bo) {
            return bad(log);
        }
        bitfield = Some(((bits - bw - bo) as u32, (bits - bw) as u32));
    }
    if count > 0 && !(deref || ty.is_string()) {
        log.err(at + ty_at, ProbeErr::BadString);
        return Err(Errno::EINVAL);
    }
    // `traceprobe_update_arg`: `kallsyms_lookup_name` finds no symbol
    // (ENOENT, not logged).
    if matches!(fetch, Fetch::Symbol) {
        return Err(Errno::ENOENT);
    }
    Ok(Arg {
        name,
        comm: body.to_string(),
        ty,
        count,
        bitfield,
        offset,
        fetch,
    })
}

/// `parse_probe_arg` (for an event probe) on `arg`, which starts at `at`
/// in its word; `depth` counts the dereferences around it.
fn parse_fetch(
    arg: &str,
    at: usize,
    depth: usize,
    target: &crate::tracefs::EventDef,
    log: &mut Log<'_>,
) -> Result<Fetch, Errno> {
    let b = arg.as_bytes();
    match b.first() {
        Some(b'$') => {
            let v = &arg[1..];
            if let Some(f) = target.fields.iter().find(|f| f.name == v) {
                return Ok(Fetch::Field(f.clone()));
            }
            if v == "comm" || v == "COMM" {
                return Ok(Fetch::Comm);
            }
            log.err(at, ProbeErr::BadVar);
            Err(Errno::EINVAL)
        }
        Some(b'%') => {
            // Event probes have no registers; the kernel logs both.
            log.err(at, ProbeErr::BadVar);
            log.err(at, ProbeErr::BadFetchArg);
            Err(Errno::EINVAL)
        }
        Some(b'@') => {
            if b.get(1).is_some_and(u8::is_ascii_digit) {
                if kstrtoul(&arg[1..]).is_err() {
                    log.err(at, ProbeErr::BadMemAddr);
                    return Err(Errno::EINVAL);
                }
                Ok(Fetch::Memory)
            } else if b.get(1) == Some(&b'+') {
                log.err(at, ProbeErr::FileOnKprobe);
                Err(Errno::EINVAL)
            } else {
                // Looked up once the argument is parsed.
                Ok(Fetch::Symbol)
            }
        }
        Some(b'+' | b'-') => {
            let user = b.get(1) == Some(&b'u');
            let Some(open) = arg.find('(') else {
                log.err(at, ProbeErr::DerefNeedBrace);
                return Err(Errno::EINVAL);
            };
            // The offset, its `-` kept and a `+` dropped (kstrtol refuses it).
            let digits = arg.get(1 + usize::from(user)..open).unwrap_or("");
            let num = if b[0] == b'-' {
                format!("-{digits}")
            } else {
                digits.to_string()
            };
            if kstrtol(&num).is_err() {
                log.err(at, ProbeErr::BadDerefOffs);
                return Err(Errno::EINVAL);
            }
            // The kernel moves its column past the brace, one short when
            // the dereference is of user memory.
            let inner_at = at + open + usize::from(!user);
            let inner = &arg[open + 1..];
            let Some(close) = inner.rfind(')') else {
                log.err(inner_at + inner.len(), ProbeErr::DerefOpenBrace);
                return Err(Errno::EINVAL);
            };
            if depth + 1 > NEST_MAX {
                log.err(inner_at, ProbeErr::TooManyOps);
                return Err(Errno::EINVAL);
            }
            let f = parse_fetch(&inner[..close], inner_at, depth + 1, target, log)?;
            if matches!(f, Fetch::Comm | Fetch::Data(_)) {
                log.err(inner_at, ProbeErr::CommCantDeref);
                return Err(Errno::EINVAL);
            }
            Ok(Fetch::Memory)
        }
        Some(b'\\') => {
            if b.get(1) == Some(&b'"') {
                let s = &arg[2..];
                if !s.ends_with('"') {
                    log.err(at + 2 + s.len(), ProbeErr::ImmstrNoClose);
                    return Err(Errno::EINVAL);
                }
                return Ok(Fetch::Data(s.as_bytes()[..s.len() - 1].to_vec()));
            }
            let s = &arg[1..];
            let v = match s.as_bytes().first() {
                Some(c) if c.is_ascii_digit() => kstrtoul(s),
                Some(b'-') => kstrtol(s).map(|v| v as u64),
                Some(b'+') => kstrtol(&s[1..]).map(|v| v as u64),
                _ => Err(Errno::EINVAL),
            };
            match v {
                Ok(v) => Ok(Fetch::Imm(v)),
                Err(_) => {
                    log.err(at + 1, ProbeErr::BadImm);
                    Err(Errno::EINVAL)
                }
            }
        }
        Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
            log.err(at, ProbeErr::NosupBtfarg);
            Err(Errno::EINVAL)
        }
        _ => {
            log.err(at, ProbeErr::BadFetchArg);
            Err(Errno::EINVAL)
        }
    }
}
