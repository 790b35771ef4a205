#!/usr/bin/python3
"""Seeded generator of hist trigger cases for the differential run of
`scripts/kernel-vm` (Debian's 6.12 kernel has CONFIG_HIST_TRIGGERS; this
machine's own tracefs does not). In the guest tests/c/hist_grammar.c runs
the cases against the kernel's tracefs and monfs's, and
scripts/kernel-vm.d/compare.py diffs the two outputs (the write's result,
the `trigger` file, the `hist` file's `# trigger info:` lines and
`error_log`).

The events are sched:sched_switch and sched:sched_wakeup, which monfs's
guest configuration (scripts/kernel-vm.d/monfs-qemu.yaml) defines with the
6.12 kernel's fields. Cases are mostly almost-valid `hist:` commands: keys
and values with modifiers, sort, size, name, pause/cont/clear, filters,
variables and expressions, onmatch/onmax/onchange actions (well or badly
formed), removal with `!`, duplicates, too many keys, values or sort keys,
and variable references across the two events.

    hist_fuzz.py --seed N --count N [--corpus FILE] > CASES

One case per line: `ID STEP STEP...` (see tests/c/hist_grammar.c), a step
being `T,E,HEX` (append HEX to the `trigger` file of event E: `s`
sched_switch, `w` sched_wakeup) or `S,HEX` (append to synthetic_events).
The corpus's cases come first, with ids `c1`, `c2`...; generated ones are
`gSEED-N`. A corpus line is either that format or `T STEP && STEP ...`, a
step readable as `s:COMMAND`, `w:COMMAND` or `S:DEFINITION` (Python
escapes allowed).
"""

import argparse
import random
import sys

FIELDS = {
    "s": ["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"],
    "w": ["comm", "pid", "prio", "target_cpu"],
}
STRINGS = {"prev_comm", "next_comm", "comm"}
COMMON = ["common_pid", "common_type", "common_flags", "common_preempt_count"]
SPECIAL = ["common_timestamp", "common_cpu", "cpu", "hitcount", "stacktrace", "common_stacktrace",
           "common_comm", "$ts0", "$nosuch"]
MODS = ["hex", "sym", "sym-offset", "execname", "syscall", "log2", "usecs", "percent", "graph",
        "buckets=10", "buckets=0", "buckets=", "buckets=1", "descending", "ascending", "stacktrace",
        "foo", "HEX", ""]
SYNTH = "wakeup_latency u64 lat; pid_t pid"


def field(r, ev, numeric=False):
    k = r.random()
    if k < 0.7:
        fs = [f for f in FIELDS[ev] if not (numeric and f in STRINGS)] or FIELDS[ev]
        return r.choice(fs)
    if k < 0.85:
        return r.choice(COMMON)
    if k < 0.95:
        return r.choice(SPECIAL)
    return r.choice(["nosuch", "Prev_pid", "prev_pid ", "", "9x", FIELDS["w" if ev == "s" else "s"][1]])


def modded(r, ev, numeric=False):
    f = field(r, ev, numeric)
    if r.random() < 0.35:
        f += "." + r.choice(MODS)
        if r.random() < 0.08:
            f += "." + r.choice(MODS)
    return f


def expr(r, ev):
    a, b = modded(r, ev, True), modded(r, ev, True)
    return r.choice([
        "%s+%s" % (a, b), "%s-%s" % (a, b), "%s*%s" % (a, r.choice(["2", "1000", b])),
        "%s/%s" % (a, r.choice(["2", "0", "1000", b])), "-%s" % a, "%s+-%s" % (a, b),
        "(%s+%s)" % (a, b), "%s+%s+%s+%s" % (a, b, a, b), "common_timestamp.usecs-$ts0",
        "common_timestamp-$ts0", "%s+" % a, "%s/-1" % a, "1+%s" % a,
    ])


def var(r, ev):
    name = r.choice(["ts0", "x", "lat", "ts0", "1v", "a_b", "hitcount", "pid"])
    val = r.choice(["common_timestamp.usecs", "common_timestamp", modded(r, ev, True), expr(r, ev), ""])
    return "%s=%s" % (name, val)


def action(r, ev):
    other = "sched.sched_wakeup" if ev == "s" else "sched.sched_switch"
    h = r.choice(["onmatch(%s)" % other, "onmatch(sched.nosuch)", "onmatch(%s" % other, "onmatch()",
                  "onmax($lat)", "onmax(lat)", "onmax($nosuch)", "onchange($lat)", "onchange(prev_pid)",
                  "onmatch(nosuch)"])
    a = r.choice(["trace(wakeup_latency,$lat,next_pid)", "wakeup_latency($lat,next_pid)",
                  "trace(wakeup_latency,$lat)", "trace(nosuch,$lat)", "save(prev_pid,next_prio)",
                  "save(prev_comm)", "snapshot()", "save()", "trace()", "foo(bar)",
                  "trace(wakeup_latency,$lat,next_pid", "save(nosuch)"])
    return "%s.%s" % (h, a)


def keys(r, ev):
    n = r.choice([1, 1, 1, 2, 2, 3, 4])
    return ",".join(modded(r, ev) for _ in range(n))


def hist_cmd(r, ev, named=None):
    parts = [r.choice(["keys", "keys", "keys", "key", "Keys"]) + "=" + keys(r, ev)]
    if r.random() < 0.45:
        n = r.choice([1, 1, 2, 3, 4])
        vs = []
        for _ in range(n):
            vs.append(r.choice([modded(r, ev, True), "hitcount", expr(r, ev)] if r.random() < 0.9
                               else [var(r, ev), "", "$ts0"]))
        parts.append(r.choice(["values", "values", "vals", "val"]) + "=" + ",".join(vs))
    if r.random() < 0.3:
        for _ in range(r.choice([1, 1, 2])):
            parts.append(var(r, ev))
    if r.random() < 0.3:
        ks = [r.choice(["hitcount", field(r, ev), "nosuch"]) + r.choice(["", "", ".descending", ".ascending", ".foo"])
              for _ in range(r.choice([1, 1, 2, 3]))]
        parts.append("sort=" + ",".join(ks))
    if r.random() < 0.2:
        parts.append("size=" + r.choice(["1024", "2048", "0", "1", "100", "131072", "262144", "x", ""]))
    if r.random() < 0.12 or named:
        parts.append("name=" + (named or r.choice(["foo", "bar", "", "a.b"])))
    if r.random() < 0.12:
        parts.append(r.choice(["pause", "cont", "continue", "clear", "nohitcount", "NOHITCOUNT", "clock=global",
                               "clock=mono", "clock=nosuch", "clock="]))
    if r.random() < 0.12:
        parts.append(action(r, ev))
    if r.random() < 0.15:
        r.shuffle(parts)
    cmd = r.choice(["hist", "hist", "hist", "hist", "Hist", "hist "]) + ":" + ":".join(parts)
    if r.random() < 0.05:
        cmd = cmd.replace(":", "::", 1)
    if r.random() < 0.05:
        cmd += ":"
    if r.random() < 0.15:
        f = field(r, ev)
        cmd += " if " + r.choice(["%s > 1" % f, "%s == \"sh\"" % f, "%s ~ \"k*\"" % f, "%s >" % f, "%s" % f,
                                  "(%s < 10 || %s > 100)" % (f, f)])
    return cmd


def case(r):
    ev = r.choice(["s", "s", "w"])
    k = r.random()
    steps = []
    if k < 0.55:
        steps = [(ev, hist_cmd(r, ev))]
    elif k < 0.65:  # duplicate
        c = hist_cmd(r, ev)
        steps = [(ev, c), (ev, c if r.random() < 0.7 else c + ":pause")]
    elif k < 0.75:  # create then remove, maybe written differently
        c = hist_cmd(r, ev)
        rm = c if r.random() < 0.6 else hist_cmd(r, ev)
        steps = [(ev, c), (ev, "!" + rm)]
    elif k < 0.8:  # remove what is not there
        steps = [(ev, "!" + hist_cmd(r, ev))]
    elif k < 0.88:  # variables across events, maybe with a synthetic event
        steps = [("w", "hist:keys=%s:ts0=%s" % (r.choice(["pid", "comm", "prio"]),
                                                 r.choice(["common_timestamp.usecs", "common_timestamp", "prio"])))]
        if r.random() < 0.5:
            steps.insert(0, ("S", r.choice([SYNTH, SYNTH, "wakeup_latency u64 lat", "wakeup_latency char[16] lat; pid_t pid"])))
        lat = r.choice(["lat=common_timestamp.usecs-$ts0", "lat=common_timestamp-$ts0", "lat=$ts0",
                        "lat=common_timestamp.usecs-$nosuch", "lat=next_prio-$ts0", "lat=$ts0+$ts0"])
        cmd = "hist:keys=%s:%s" % (r.choice(["next_pid", "prev_pid", "next_comm"]), lat)
        if r.random() < 0.7:
            cmd += ":" + action(r, "s")
        steps.append(("s", cmd))
        if r.random() < 0.3:
            steps.append(("w", "!" + steps[-2][1] if steps[-2][0] == "w" else "!hist:keys=pid"))
    elif k < 0.94:  # named histograms shared
        n = r.choice(["foo", "bar"])
        steps = [(ev, hist_cmd(r, ev, n)), (r.choice(["s", "w"]), hist_cmd(r, ev, n))]
    else:  # pause/cont/clear on an existing one
        c = "hist:keys=%s" % r.choice(FIELDS[ev][:2])
        steps = [(ev, c), (ev, c + ":" + r.choice(["pause", "cont", "clear", "pause:cont", "name=x:clear"]))]
    return steps


def encode(steps):
    out = []
    for e, t in steps:
        h = t.encode("latin-1").hex() or "-"
        out.append("S,%s" % h if e == "S" else "T,%s,%s" % (e, h))
    return " ".join(out)


def parse_readable(s):
    steps = []
    for st in s.split(" && "):
        e, _, t = st.partition(":")
        steps.append((e, t.encode("latin-1").decode("unicode_escape")))
    return steps


def main():
    ap = argparse.ArgumentParser(description="hist trigger grammar cases")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--corpus")
    a = ap.parse_args()
    n = 0
    if a.corpus:
        with open(a.corpus, encoding="latin-1") as f:
            for ln in f:
                ln = ln.rstrip("\n")
                if not ln.strip() or ln.startswith("#"):
                    continue
                n += 1
                if ln.startswith("T "):
                    print("c%d %s" % (n, encode(parse_readable(ln[2:]))))
                else:
                    print("c%d %s" % (n, ln))
    r = random.Random(a.seed)
    for i in range(a.count):
        print("g%d-%d %s" % (a.seed, i + 1, encode(case(r))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
