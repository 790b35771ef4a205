"""Differential fuzzing of tracefs files: monfs against the real tracefs
(run by scripts/tracefs-fuzz, which mounts both).

For each input: open the same file of both trees the same way (O_TRUNC as
`echo >` does, O_APPEND, or neither), write the input in one write(2) or in
two or three chunks, note the errno (or the byte count) of each write, read
the file back, and compare the two. Then put both files back. Inputs come
from a seeded grammar per interface, mostly almost-valid (a token dropped,
doubled or swapped), and from a corpus of earlier divergences.
"""

import argparse
import errno
import os
import random
import sys
import time
import warnings

# Inputs are decoded with "unicode_escape" (generators and the corpus write
# escapes); a backslash before another character stays as it is.
warnings.filterwarnings("ignore", category=DeprecationWarning)

FIELDS_NUM = ["prev_pid", "prev_prio", "prev_state", "next_pid", "next_prio",
              "common_pid", "common_type", "common_flags", "common_preempt_count",
              "CPU", "cpu", "common_cpu", "stacktrace", "STACKTRACE"]
FIELDS_STR = ["prev_comm", "next_comm", "COMM", "comm"]
# A "\\xNN" in a generated text is one byte (texts are unescaped in fuzz()).
# The kernel's isalnum() takes 0xC0..0xFF (lib/ctype.c), its isspace() 0xA0.
FIELDS_BAD = ["nosuch", "prev", "pid", "_", "prev_pid.hex", "prev_pid\\xe9", "prev\\xd7pid"]
OPS = ["==", "!=", "<", "<=", ">", ">=", "&", "~"]
OPS_BAD = ["=", "=~", "<>", "!", "&&", "=="]


def num(r):
    return r.choice([
        str(r.randint(0, 200)), str(-r.randint(1, 200)), hex(r.randint(0, 4096)),
        "0" + oct(r.randint(0, 512))[2:], "08", "0x", "-", "+5", "1.5", "1\\xe9", "0x\\xc0",
        str(2 ** r.choice([31, 32, 63, 64])), "9" * r.randint(19, 25), "0" * 24 + "1",
    ])


def string(r):
    body = r.choice(["bash", "ba*", "*sh", "*a*", "", "b a", "x" * r.randint(1, 20), "\\t",
                     "[ab]*", "?ash", "x" * r.choice([254, 255, 256, 257]), "b(a)", "a&&b",
                     "b\\xe9sh", "\\xff*", "\\xc3\\xa9", "b\\xa0a"])
    q = r.choice(['"', "'", '"', ""])
    return f"{q}{body}{q}"


def cpus(r):
    return r.choice(["CPUS{0}", "CPUS{0-1}", "CPUS{1,3}", "CPUS{}", "CPUS{0", "CPUS0}", "CPUS{x}"])


def pred(r):
    k = r.random()
    if k < 0.05:
        return f"{r.choice(FIELDS_NUM + FIELDS_STR)} {r.choice(OPS)} {cpus(r)}"
    if k < 0.45:
        return f"{r.choice(FIELDS_NUM)} {r.choice(OPS)} {num(r)}"
    if k < 0.8:
        return f"{r.choice(FIELDS_STR)} {r.choice(['==', '!=', '~'])} {string(r)}"
    if k < 0.9:
        return f"{r.choice(FIELDS_NUM + FIELDS_STR)} {r.choice(OPS + OPS_BAD)} {r.choice([num(r), string(r)])}"
    return f"{r.choice(FIELDS_BAD)} {r.choice(OPS)} {num(r)}"


def expr(r, depth=0):
    if depth > 2 or r.random() < 0.5:
        e = pred(r)
    else:
        e = f"{expr(r, depth + 1)} {r.choice(['&&', '||'])} {expr(r, depth + 1)}"
    if r.random() < 0.15:
        e = f"({e})"
    if r.random() < 0.1:
        e = "!" + e
    return e


def mutate(r, s):
    if r.random() < 0.1:
        s = s.replace(" ", r.choice(["", "\t", "\n", "  ", "\\xa0"]))
    toks = s.split(" ")
    k = r.random()
    if k < 0.4 or len(toks) < 2:
        return s
    i = r.randrange(len(toks))
    if k < 0.6:
        del toks[i]
    elif k < 0.75:
        toks.insert(i, toks[i])
    elif k < 0.9:
        j = r.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    else:
        toks[i] = toks[i][: max(0, len(toks[i]) - 1)]
    return " ".join(toks)


def gen(r):
    return mutate(r, expr(r))


def kstr(r):
    """Almost-numbers, as kstrtoul and friends see them."""
    return r.choice(["0", "1", "2", "-1", "+1", " 1", "1 ", "1\n", "01", "0x1", "0x", "x",
                     "", "1x", "10", "100", "101", "4294967296", "18446744073709551616",
                     str(r.randint(0, 300)), "\t1", "1\n\n", "0\x00", "1\x00x", "1\\xa0", "\\xa01"])


def opt_name(r, names):
    n = r.choice(names + ["nosuch", "", "no", "nono" + r.choice(names)])
    pre = r.choice(["", "", "no"])
    post = r.choice(["", "", "\n", " ", "x", "\x00"])
    return r.choice(["", " "]) + pre + n + post


def pids(r):
    parts = [r.choice(["1", "2", str(r.randint(1, 40000)), "0", "-1", "abc", "4194304",
                       "99999999999", "1,2", "", "0x10", "010"]) for _ in range(r.randint(1, 4))]
    return r.choice([" ", "  ", "\n", "\t"]).join(parts) + r.choice(["", "\n", " "])


def clock(r):
    c = r.choice(["local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot",
                  "tai", "x86-tsc", "nosuch", "", "[local]", "loc"])
    return r.choice(["", " "]) + c + r.choice(["", "\n", " ", "x"])


def mask(r):
    return r.choice(["1", "2", "3", "0", "ff", "x", "1,0", "00000003", "", "4", "1\n",
                     "0x3", " 3", "3 ", "fffffffff", "1,", ",1", "1,,0", "1 0", "0 1",
                     "x00000001", "1\x002", "0,,,3", "\t2\t", "000000001", "1,2"])


def tracer(r):
    # Only the nop tracer: the function and blk tracers are the kernel's.
    return r.choice(["nop", " nop", "nop\n", "nop ", "nope", "", "no", "nop\x00x", "NOP",
                     "\n", "nopnop"])


def trigger(r):
    """Trigger commands that never fire (counts of 0, or malformed), so the
    real machine's tracing is left alone. No snapshot or hist: this
    machine's kernel is built without them."""
    cmd = r.choice(["traceon", "traceoff", "stacktrace", "enable_event:sched:sched_wakeup",
                    "disable_event:sched:sched_wakeup", "enable_event:nosuch:x",
                    "enable_event:sched", "traceon:", "nosuch", "stacktrace:x"])
    count = r.choice([":0", ":00", ":0x0", ":0:5", ":abc", ":+0", ":-0", ": 0", ""])
    if count == "" and not cmd.startswith("enable_event:n"):
        count = ":0"
    filt = r.choice(["", "", " if prev_pid == 0", " if nosuch == 1", " if", " if prev_pid ==",
                     "  if  prev_pid == 0  ", " if (prev_pid == 0", ' if prev_comm == "b\\xe9"',
                     "\\xa0if prev_pid == 0", " if\\xa0prev_pid\\xa0==\\xa00"])
    bang = r.choice(["", "", "", "!"])
    return r.choice(["", " ", "\\xa0"]) + bang + cmd + count + filt + r.choice(["", "\\n", " ", "\\xa0"])


# How a case opens the file: O_TRUNC as `echo >` does, O_APPEND as `>>`
# does, or neither.
MODES = {"trunc": os.O_TRUNC, "append": os.O_APPEND, "plain": 0}
# Chunk boundaries inside a case's bytes: each chunk is one write(2) on the
# same open file.
SEP = b"\x1e"


def answer(path, data, mode="trunc"):
    """Open with `mode`, write `data` chunk by chunk, and read the file back
    after each write: (errno or byte count of each write, "; "-joined;
    what each read gave, SEP-joined)."""
    try:
        fd = os.open(path, os.O_WRONLY | MODES[mode])
    except OSError as e:
        with open(path, "rb") as f:
            return f"open errno {errno.errorcode.get(e.errno, e.errno)}", f.read()
    res, backs = [], []
    try:
        for chunk in data.split(SEP):
            if not chunk:
                # The kernel's FUSE answers a zero-length write itself.
                continue
            try:
                res.append(f"wrote {os.write(fd, chunk)}")
            except OSError as e:
                res.append(f"errno {errno.errorcode.get(e.errno, e.errno)}")
            with open(path, "rb") as f:
                backs.append(f.read())
    finally:
        os.close(fd)
    return "; ".join(res), SEP.join(backs)


def steps(ans):
    """An answer's writes, each with what the file read after it."""
    res, back = ans
    if res.startswith("open"):
        return [(res, back)]
    return list(zip(res.split("; "), back.split(SEP)))


def chunked(r, d):
    """Most cases are one write; some are split into two or three."""
    if len(d) < 2 or r.random() < 0.75:
        return d
    cuts = sorted(r.sample(range(1, len(d)), min(len(d) - 1, r.randint(1, 2))))
    out, last = b"", 0
    for c in cuts:
        out += d[last:c] + SEP
        last = c
    return out + d[last:]


def pick_mode(r):
    return r.choices(["trunc", "append", "plain"], [0.7, 0.15, 0.15])[0]


# The empty `trigger` file lists the trigger commands the kernel was built
# with; monfs lists those of a kernel with snapshot and hist triggers (as
# Debian's 6.12 is), this machine's kernel has neither.
HELP_REAL = b"# traceon traceoff stacktrace enable_event disable_event\n"
HELP_MONFS = (b"# traceon traceoff snapshot stacktrace enable_event disable_event "
              b"enable_hist disable_hist hist\n")


def normalize(ans):
    res, back = ans
    return res, back.replace(HELP_MONFS, HELP_REAL)


def version_specific(a, b):
    """Differences that are not monfs's to fix, so not divergences:
    Debian's 6.12, which monfs follows, refuses a filter expression that
    ends where a predicate should come ("Meaningless filter expression"),
    which this machine's 6.18.44 predates and takes (or, after an `||`,
    refuses with no message: "Error: (0)"). Each write that differs must
    be such a one."""
    diff = [(x, y) for x, y in zip(steps(a), steps(b)) if x != y]
    return bool(diff) and all(
        ("errno" not in x[0] or b"\nError: (0)\n" in x[1])
        and b"Meaningless filter expression" in y[1] for x, y in diff)


def shrink(diverges, data):
    """The shortest input found that still diverges (tokens, then bytes)."""
    cur = data
    changed = True
    while changed:
        changed = False
        toks = cur.split(b" ")
        for i in range(len(toks)):
            cand = b" ".join(toks[:i] + toks[i + 1:])
            if cand and diverges(cand):
                cur, changed = cand, True
                break
        if changed:
            continue
        for i in range(len(cur)):
            cand = cur[:i] + cur[i + 1:]
            if cand and diverges(cand):
                cur, changed = cand, True
                break
    return cur


def corpus(path):
    """(interface, mode, input) triples: one per line,
    `interface[@mode]<TAB>input` with Python string escapes in the input
    (`\\x1e` between the chunks of a chunked write); a line without a tab
    is a filter written with O_TRUNC."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line or line.startswith("#"):
                    continue
                name, _, text = line.partition("\t") if "\t" in line else ("filter", "", line)
                name, _, mode = name.partition("@")
                out.append((name, mode or "trunc",
                            text.encode().decode("unicode_escape").encode("latin-1")))
    except FileNotFoundError:
        pass
    return out


# The largest number a size file (buffer_size_kb) is given: the real
# tracefs allocates what it is asked for at once, on a machine others use.
SIZE_CAP_KB = 4096


def too_big(data):
    """Whether `data` holds a number (a run of digits) above SIZE_CAP_KB."""
    run = b""
    for c in data + b" ":
        if 0x30 <= c <= 0x39:
            run += bytes([c])
        else:
            if run and int(run) > SIZE_CAP_KB:
                return True
            run = b""
    return False


class Iface:
    """A file both trees have: how to make inputs for it and how to put it
    back afterwards (`reset` is written to both). `view` turns what the file
    reads back into what is compared; `kernel_only` tells an input whose
    answer depends on what only the kernel has; `unsafe` an input never to
    be written to the machine's real tracefs."""

    def __init__(self, name, path, gen, reset, view=None, kernel_only=None, unsafe=None):
        self.name, self.path, self.gen, self.reset = name, path, gen, reset
        self.view = view or (lambda back: back)
        self.kernel_only = kernel_only or (lambda data: False)
        self.unsafe = unsafe or (lambda data: False)


def events(root):
    path = os.path.join(root, "available_events")
    if not os.path.exists(path):
        # An instance: the events are the top level's.
        path = os.path.join(os.path.dirname(os.path.dirname(root)), "available_events")
    with open(path) as f:
        return {tuple(ln.strip().split(":", 1)) for ln in f if ":" in ln}


class SetEvent:
    """`set_event` on both trees. Only the events both have are compared, and
    an input with a token that names kernel events but none that monfs has
    too (`sched:sched_stat_wait`) is the kernel's alone. Tokens match as the
    kernel's ftrace_set_clr_event matches: `sys:event`, with an empty or `*`
    side for any, or one word for a system or an event name."""

    def __init__(self, real_root, monfs_root):
        self.real = events(real_root)
        self.common = self.real & events(monfs_root)
        systems = sorted({s for s, _ in self.common})
        names = sorted({e for _, e in self.common})
        self.words = systems + names + ["nosuch", "sched_stat_wait", "kmem:mm_page_alloc",
                                        "sched:nosuch", "nosuch:sched_switch", "*", ""]

    @staticmethod
    def matches(tok, evs):
        tok = tok.lstrip("!")
        if ":" in tok:
            sys_, ev = tok.split(":", 1)
            return {(s, e) for s, e in evs if sys_ in ("", "*", s) and ev in ("", "*", e)}
        return {(s, e) for s, e in evs if tok in (s, e)}

    def kernel_only(self, data):
        # Each write is parsed on its own: a chunk boundary ends a token.
        text = data.replace(SEP, b" ").decode("latin-1")
        for tok in text.split():
            if self.matches(tok, self.real) and not self.matches(tok, self.common):
                return True
        return False

    def view(self, back):
        """The common events it lists, sorted: the order is the kernel's
        event list's, which follows its link order (monfs lists them in
        available_events's order, as the kernel does)."""
        keep = {f"{s}:{e}" for s, e in self.common}
        return b"".join(sorted(ln + b"\n" for ln in back.split(b"\n") if ln.decode("latin-1") in keep))

    def gen(self, r):
        def one():
            w = r.choice(self.words)
            k = r.random()
            if k < 0.5:
                s, e = r.choice(sorted(self.common))
                w = r.choice([f"{s}:{e}", e, f"{s}:", f"*:{e}", f"{s}:*", f":{e}", s])
            elif k < 0.6:
                w = f"{w}:{r.choice(self.words)}"
            return r.choice(["", "", "", "!"]) + w
        toks = [one() for _ in range(r.randint(1, 3))]
        return r.choice([" ", "\n", "  ", "\t", "\\xa0"]).join(toks) + r.choice(["", "\n", " ", "\n\n", "\\xa0"])


def ifaces(real_root, monfs_root):
    opts = sorted(os.listdir(os.path.join(real_root, "options")))
    names = opts
    se = SetEvent(real_root, monfs_root)
    out = [
        Iface("filter", "events/sched/sched_switch/filter", gen, b"0"),
        Iface("set_event", "set_event", se.gen, b"", se.view, se.kernel_only),
        Iface("enable", "events/sched/sched_switch/enable", kstr, b"0"),
        Iface("sys-enable", "events/sched/enable", kstr, b"0"),
        Iface("tracing_on", "tracing_on", kstr, b"1"),
        Iface("buffer_percent", "buffer_percent", kstr, b"50"),
        Iface("buffer_size_kb", "buffer_size_kb", kstr, b"1408", unsafe=too_big),
        Iface("set_event_pid", "set_event_pid", pids, b""),
        Iface("set_event_notrace_pid", "set_event_notrace_pid", pids, b""),
        Iface("tracing_cpumask", "tracing_cpumask", mask, b"3"),
        Iface("trace_clock", "trace_clock", clock, b"local"),
        Iface("current_tracer", "current_tracer", tracer, b"nop"),
        Iface("trace_options", "trace_options", lambda r: opt_name(r, names), None),
        Iface("trigger", "events/sched/sched_switch/trigger", trigger, None),
    ]
    for o in ("irq-info", "record-tgid", "event-fork", "markers"):
        if o in opts:
            out.append(Iface(f"options/{o}", f"options/{o}", kstr, None))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", required=True, help="the real tracefs root")
    ap.add_argument("--monfs", required=True, help="monfs's tracing/")
    ap.add_argument("--corpus-default")
    ap.add_argument("--corpus")
    ap.add_argument("--only", help="comma-separated interface names")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("--minutes", type=float,
                    help="run each interface this long (seeds from --seed on), not --seeds")
    ap.add_argument("--instance",
                    help="use instances/NAME of both trees (made if missing; default "
                         "monfs-fuzz-PID, made and removed by this run)")
    ap.add_argument("--parallel", action="store_true",
                    help="one process per interface, each in an instance of its own")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.parallel:
        return parallel(a)
    if not a.instance:
        # The machine's tracefs is shared: never the top level.
        a.instance = f"monfs-fuzz-{os.getpid()}"
    for root in (a.real, a.monfs):
        path = os.path.join(root, "instances", a.instance)
        if not os.path.isdir(path):
            os.mkdir(path)
    a.real = os.path.join(a.real, "instances", a.instance)
    a.monfs = os.path.join(a.monfs, "instances", a.instance)
    try:
        return fuzz(a)
    finally:
        for root in (a.real, a.monfs):
            try:
                os.rmdir(root)
            except OSError:
                pass


def parallel(a):
    """Every interface at once, each in an instance of its own (so that
    they do not see each other's writes), as child processes of this one."""
    import subprocess
    names = [i.name for i in ifaces(a.real, a.monfs)]
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    procs = []
    for n in names:
        args = [sys.executable, __file__, "--real", a.real, "--monfs", a.monfs, "--only", n,
                "--seed", str(a.seed), "--seeds", str(a.seeds), "--cases", str(a.cases),
                "--instance", f"monfs-fuzz-{os.getpid()}-" + n.replace("/", "-"), "--child"]
        for flag, v in (("--minutes", a.minutes), ("--corpus-default", a.corpus_default),
                        ("--corpus", a.corpus)):
            if v is not None:
                args += [flag, str(v)]
        if a.keep_going:
            args.append("--keep-going")
        procs.append((n, subprocess.Popen(args, stdout=subprocess.PIPE, text=True)))
    failed = []
    for n, p in procs:
        out, _ = p.communicate()
        sys.stdout.write(out)
        if p.returncode:
            failed.append(n)
    print(f"tracefs-fuzz: {len(procs)} interfaces in parallel, "
          f"{len(failed)} with divergences{': ' + ', '.join(failed) if failed else ''}")
    return 1 if failed else 0


def fuzz(a):
    bad = 0
    skipped = 0
    seen = set()
    all_ifaces = ifaces(a.real, a.monfs)
    if a.only:
        want = a.only.split(",")
        all_ifaces = [i for i in all_ifaces if i.name in want]

    for iface in all_ifaces:
        real = os.path.join(a.real, iface.path)
        monfs = os.path.join(a.monfs, iface.path)
        # Files without a fixed reset value (options) are put back to how
        # they read at the start.
        if iface.reset is None:
            with open(real, "rb") as f:
                start = f.read()
            if iface.name == "trigger":
                def put_back(real=real, monfs=monfs):
                    # Removal takes the command without count or filter.
                    for path in (real, monfs):
                        with open(path, "rb") as f:
                            lines = [ln for ln in f.read().decode("latin-1").splitlines()
                                     if ln and not ln.startswith("#")]
                        for ln in lines:
                            parts = ln.split(" if ")[0].split(":")
                            keep = 3 if parts[0].endswith("_event") else 1
                            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                            try:
                                os.write(fd, ("!" + ":".join(parts[:keep])).encode("latin-1"))
                            except OSError:
                                pass
                            os.close(fd)
            elif iface.name == "trace_options":
                def put_back(real=real, monfs=monfs, start=start):
                    for path in (real, monfs):
                        with open(path, "rb") as f:
                            now = f.read()
                        for line in set(now.split()) - set(start.split()):
                            name = line[2:] if line.startswith(b"no") else b"no" + line
                            if name in start.split():
                                fd = os.open(path, os.O_WRONLY)
                                try:
                                    os.write(fd, name)
                                except OSError:
                                    pass
                                os.close(fd)
            else:
                def put_back(real=real, monfs=monfs, start=start):
                    for path in (real, monfs):
                        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
                        os.write(fd, start)
                        os.close(fd)
        else:
            def put_back(real=real, monfs=monfs, v=iface.reset):
                for path in (real, monfs):
                    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
                    try:
                        if v:
                            os.write(fd, v)
                    finally:
                        os.close(fd)

        def run(data, mode, real=real, monfs=monfs, put_back=put_back, view=iface.view,
                unsafe=iface.unsafe):
            if unsafe(data):
                # Not tried (the same answer on both sides stands for it).
                return ("unsafe", b""), ("unsafe", b"")
            # monfs first: the kernel's buffer_size_kb takes the memory it
            # asks for at once, which monfs's check of MemAvailable would see.
            y = normalize(answer(monfs, data, mode))
            x = answer(real, data, mode)
            put_back()
            def v(ans):
                return ans[0], SEP.join(view(b) for b in ans[1].split(SEP))
            return v(x), v(y)

        def diverges(d, mode, run=run, kernel_only=iface.kernel_only):
            x, y = run(d, mode)
            return x != y and not version_specific(x, y) and not kernel_only(d)

        def report(label, data, mode, run=run, diverges=diverges, name=iface.name):
            nonlocal bad
            small = shrink(lambda d: diverges(d, mode), data)
            if (name, mode, small) in seen:
                return
            seen.add((name, mode, small))
            bad += 1
            x, y = run(small, mode)
            tag = name if mode == "trunc" else f"{name}@{mode}"
            print(f"  DIVERGES ({tag}, {label}): {small!r}")
            print(f"    real:  {x[0]}; reads back {x[1][:300]!r}")
            print(f"    monfs: {y[0]}; reads back {y[1][:300]!r}")
            print(f"    corpus line: {tag}\t{small.decode('latin-1').encode('unicode_escape').decode()}")

        for name, mode, d in corpus(a.corpus or a.corpus_default or ""):
            if name != iface.name:
                continue
            if diverges(d, mode):
                report("corpus", d, mode)
        if a.corpus:
            continue
        deadline = time.monotonic() + a.minutes * 60 if a.minutes else None
        total = 0
        iface_bad = bad
        seed = a.seed
        while (seed < a.seed + a.seeds) if deadline is None else time.monotonic() < deadline:
            r = random.Random(f"{iface.name}/{seed}")
            n_bad = bad
            for _ in range(a.cases):
                total += 1
                g = iface.gen(r)
                try:
                    d = g.encode().decode("unicode_escape").encode("latin-1")
                except UnicodeDecodeError:
                    # A lone backslash at the end: the bytes as they are.
                    d = g.encode("latin-1")
                d, mode = chunked(r, d), pick_mode(r)
                if not d.replace(SEP, b""):
                    # The kernel's FUSE answers a zero-length write itself
                    # (0 bytes written): it never reaches monfs.
                    continue
                x, y = run(d, mode)
                if x[0] == "unsafe":
                    skipped += 1
                elif x != y and (version_specific(x, y) or iface.kernel_only(d)):
                    skipped += 1
                elif x != y:
                    report(f"seed {seed}", d, mode)
                    if not a.keep_going and bad - n_bad >= 10:
                        break
            if deadline is None:
                print(f"tracefs-fuzz: {iface.name} seed {seed}: {a.cases} cases, "
                      f"{bad - n_bad} divergences")
                sys.stdout.flush()
            seed += 1
        if deadline is not None:
            print(f"tracefs-fuzz: {iface.name}: {a.minutes:g} min, seeds {a.seed}-{seed - 1}, "
                  f"{total} cases, {bad - iface_bad} divergences")
            sys.stdout.flush()
    if a.child:
        return 1 if bad else 0
    print(f"tracefs-fuzz: {bad} divergences ({skipped} not counted: incomplete filter "
          "expressions that this machine's 6.18.44 takes and 6.12 refuses, set_event "
          f"tokens that name only kernel events, and sizes above {SIZE_CAP_KB} KB, which "
          "are not written to the machine's tracefs)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
