#!/usr/bin/python3
"""Seeded generator of user_events grammar cases for the differential run of
`scripts/kernel-vm --custom-kernel` (the cases run in the guest against the
kernel's tracefs and monfs's by tests/c/ue_grammar.c, and
scripts/kernel-vm.d/compare.py --user-events diffs the two outputs).

Cases are mostly almost-valid: `dynamic_events` lines (`u:NAME FIELDS`,
`!u:NAME FIELDS`, `-:NAME`, flags, comments, several lines in one write) and
DIAG_IOCSREG name_args strings of the same grammar with random user_reg
sizes, flags and enable bits. Many cases have several steps (create, then
register or delete the same event with the fields written another way), so
the kernel's textual field matching is exercised too.

    user_events_fuzz.py --seed N --count N [--corpus FILE] > CASES

One case per line: `ID STEP STEP...` (see tests/c/ue_grammar.c); the
corpus's cases come first, with ids `c1`, `c2`...; generated ones are
`gSEED-N`. A corpus line is either that format or `T STEP-TEXT`, a
readable form: `W:t:TEXT`, `R:SIZE:FLAGS:BIT:ESIZE:ADDR:TEXT`, `D:TEXT`, `E:VAL:SYSTEM/EVENT`
steps parted by ` && `, TEXT with Python escapes (`\\n`, `\\t`, `\\x00`).
"""

import argparse
import random
import sys

TYPES = ["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "int", "unsigned int",
         "short", "unsigned short", "char", "unsigned char"]
BAD_TYPES = ["long", "unsigned long", "u128", "bool", "float", "U32", "u32 ", "uint32_t",
             "unsigned", "signed int", "__data_loc", "__rel_loc", "s", ""]


def name(r, base):
    k = r.random()
    if k < 0.7:
        return base
    return r.choice([
        base + "_x" * r.randint(1, 3), base.upper(), base + "-1", base + ".a",
        base + "\t", base + "*", base + "%", "a" * r.choice([1, 32, 63, 64, 200, 255, 256]),
        base + ":", base + ":BPF_ITER", base + ":multi", base + ":a,b", "9" + base,
        base + "\xe9", base + "[1]", base + "$", base + "\xa0x", base + "\xc3\xa0",
    ])


def arr(r):
    if r.random() < 0.6:
        return str(r.randint(1, 64))
    return r.choice([str(r.randint(1, 64)), "0", "1024", "1025", "0x10", "010", "08", "+4",
                     "-1", "", "4294967297", "1234567", "12345678", " 4", "4 "])


def field(r, i):
    fname = r.choice(["a", "b", "msg", "count", "f%d" % i, "x" * 40, "_", "a1", "A", "a\xff"])
    k = r.random()
    if k < 0.5:
        t = r.choice(TYPES)
    elif k < 0.6:
        t = "%schar[%s]" % (r.choice(["", "", "unsigned "]), arr(r))
    elif k < 0.72:
        t = "%s %schar[]" % (r.choice(["__data_loc", "__rel_loc"]), r.choice(["", "", "unsigned "]))
        if r.random() < 0.15:
            t = t.replace("char[]", r.choice(["u8[]", "int", "char[4]", "char"]))
    elif k < 0.85:
        t = "struct %s" % r.choice(["s", "foo", "my_struct", "x"])
        size = str(r.randint(1, 64)) if r.random() < 0.6 else r.choice([str(r.randint(1, 64)), "0", "+8", "08", "0x10", "-1", "", "a",
                         str(r.randint(65, 4096))])
        return "%s %s%s" % (t, fname, (" " + size) if size != "" else "")
    elif k < 0.92:
        t = r.choice(TYPES)
    else:
        t = r.choice(BAD_TYPES)
    f = "%s %s" % (t, fname)
    if r.random() < 0.05:
        f = t  # missing name
    if r.random() < 0.04:
        f += " " + r.choice(["1", "x", ""])  # a third word
    return f


def sep(r):
    if r.random() < 0.7:
        return r.choice([";", "; "])
    return r.choice([";", "; ", "; ", ";  ", " ;", ";\t", "\t;", ";;", ": ", ","])


def fields(r):
    n = r.choice([0, 1, 1, 2, 2, 3, 4])
    fs = [field(r, i) for i in range(n)]
    s = ""
    for i, f in enumerate(fs):
        s += (sep(r) if i else "") + f
    if fs and r.random() < 0.08:
        s += r.choice([";", "; ", " ", "\t"])
    if r.random() < 0.05:
        s = "\t" + s
    return s


def space_variants(r, s):
    """The same field list written another way (for matching)."""
    k = r.random()
    if k < 0.3:
        return s
    if k < 0.45:
        return s.replace("; ", ";")
    if k < 0.55:
        return s.replace(" ", "  ", 1)
    if k < 0.65:
        return s.replace(" ", "\t", 1)
    if k < 0.75:
        return s + ";"
    if k < 0.85:
        return s.replace(";", " ;")
    return fields(r)


def command(r, base):
    n = name(r, base)
    fs = fields(r)
    gap = r.choice([" ", " ", " ", "  ", "\t"])
    return n + (gap + fs if fs or r.random() < 0.1 else ""), n, fs


def dyn_line(r, base):
    k = r.random()
    cmd, n, fs = command(r, base)
    if k < 0.8:
        pre = r.choice(["u:", "u:", "u:", "u: ", "u:\t", "U:", "u", " u:", "u::"])
        line = pre + cmd
    elif k < 0.9:
        line = r.choice(["!u:", "-:", "!u:user_events/", "-:user_events/", "!x:", "-:nosuch/", "!u:", "-",
                         "!u:user_events_multi/", "-:user_events_multi/", "! u:", "!"]) + cmd
    else:
        line = r.choice(["", " ", "#u:%s" % base, "u:%s # comment" % base, "\t",
                         "x:%s" % base, "u:%s\x00" % base])
    return line, n, fs


def wstep(r, text, mode=None):
    return "W:%s:%s" % (mode or r.choice(["t", "a", "a", "w"]), text)


def rstep(r, text, bit=None):
    size = r.choice(["28"] * 40 + ["32", "32t", "27", "0", "4097", "29", "4096"])
    flags = r.choice(["0"] * 20 + ["1", "2", "2", "3", "4", "0x8000"])
    esize = r.choice(["4", "8"] * 20 + ["0", "1", "2", "16"])
    if bit is None:
        bit = r.choice([r.randint(0, 31)] * 6 + [r.randint(0, 63), 64, 255])
    addr = r.choice(["a"] * 30 + ["m", "k"])
    if r.random() < 0.02:
        text = "\x00BAD"  # an unmapped name_args
    return "R:%s:%s:%s:%s:%s:%s" % (size, flags, bit, esize, addr, text)


def case(r, i):
    base = r.choice(["ev", "test", "ue", "foo"]) + str(i)
    k = r.random()
    steps = []
    if k < 0.3:
        # one write, one to three lines
        lines = [dyn_line(r, base)[0] for _ in range(r.choice([1, 1, 1, 2, 3]))]
        end = r.choice(["\n", "\n", "", "\n\n"])
        steps.append(wstep(r, "\n".join(lines) + end))
    elif k < 0.5:
        cmd, _, _ = command(r, base)
        if r.random() < 0.03:
            cmd = cmd + "x" * r.choice([400, 505, 506, 507, 600])
        steps.append(rstep(r, cmd))
    elif k < 0.68:
        # create, then the same event again written another way
        n = base
        fs = fields(r)
        first = "%s %s" % (n, fs) if fs else n
        if r.random() < 0.5:
            steps.append(wstep(r, "u:" + first + "\n", "a"))
        else:
            steps.append(rstep(r, first, bit=0))
        fs2 = space_variants(r, fs)
        second = "%s %s" % (n, fs2) if fs2 else n
        k2 = r.random()
        if k2 < 0.35:
            steps.append(wstep(r, "u:" + second + "\n", "a"))
        elif k2 < 0.7:
            steps.append(rstep(r, second, bit=1))
        else:
            steps.append(wstep(r, r.choice(["!u:", "-:", "!u:user_events/"]) + second + "\n", "a"))
    elif k < 0.78:
        # multi-format registrations
        fs = fields(r)
        a = "%s %s" % (base, fs) if fs else base
        steps.append("R:28:2:0:8:a:" + a)
        fs2 = space_variants(r, fs)
        b = "%s %s" % (base, fs2) if fs2 else base
        steps.append("R:28:%s:1:8:a:%s" % (r.choice(["2", "2", "0"]), b))
        if r.random() < 0.3:
            steps.append("W:a:u:%s\n" % b)
    elif k < 0.88:
        # an enabled event: deleting it, truncating, registering it again
        fs = fields(r)
        a = "%s %s" % (base, fs) if fs else base
        multi = r.random() < 0.3
        if multi:
            steps.append("R:28:2:0:8:a:" + a)
        else:
            steps.append(r.choice([wstep(r, "u:%s\n" % a, "a"), "R:28:0:0:8:a:" + a]))
        steps.append("E:1:%s/%s" % ("user_events_multi" if multi else "user_events",
                                    base + (".*" if multi else "")))
        steps.append(r.choice([wstep(r, "!u:%s\n" % a, "a"), wstep(r, "", "t"), "D:" + base,
                               "R:28:0:1:8:a:" + a, wstep(r, "u:%s\n" % a, "a")]))
        if r.random() < 0.5:
            steps.append("E:0:%s/%s" % ("user_events_multi" if multi else "user_events", base))
    elif k < 0.94:
        # delete ioctl and misc
        fs = fields(r)
        a = "%s %s" % (base, fs) if fs else base
        steps.append(wstep(r, "u:%s\n" % a, "a"))
        steps.append("D:" + r.choice([base, base + " ", a, base + ":x", "", base[:-1]]))
    else:
        # long writes: lines around the 4094/4095-byte limit, writes past
        # the kernel's 4095-byte copy
        lines = []
        for j in range(r.choice([1, 2, 3])):
            ln = "u:%s_%d u32 a" % (base, j)
            target = r.choice([4093, 4094, 4095, 4096, r.randint(100, 3000)])
            ln += " " * 0 + ("#" + "c" * max(0, target - len(ln) - 1) if r.random() < 0.5
                             else ";" * max(0, target - len(ln)))
            lines.append(ln[:target])
        end = r.choice(["\n", ""])
        steps.append(wstep(r, "\n".join(lines) + end))
    return steps


def esc(s):
    return s.encode("latin-1").hex()


def encode(cid, steps):
    out = [cid]
    for st in steps:
        kind, rest = st.split(":", 1)
        if kind == "W":
            mode, text = rest.split(":", 1)
            out.append("W,%s,%s" % (mode, esc(text)))
        elif kind == "R":
            parts = rest.split(":", 5)
            text = parts[5]
            out.append("R,%s,%s" % (",".join(parts[:5]), "-" if text == "\x00BAD" else esc(text)))
        elif kind == "D":
            out.append("D,%s" % esc(rest))
        elif kind == "E":
            val, ev = rest.split(":", 1)
            out.append("E,%s,%s" % (val, esc(ev)))
        else:
            raise ValueError("bad step %r" % st)
    return " ".join(out)


def corpus(path):
    """The corpus's cases: (id, encoded line)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for ln in f:
            ln = ln.rstrip("\n")
            if not ln or ln.startswith("#"):
                continue
            n = len(out) + 1
            if ln.startswith("T "):
                text = ln[2:].encode("latin-1", "backslashreplace").decode("unicode_escape")
                steps = text.split(" && ")
                out.append(encode("c%d" % n, steps))
            else:
                out.append("c%d %s" % (n, ln.split(" ", 1)[1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--corpus", action="append", default=[])
    a = ap.parse_args()
    lines = []
    for c in a.corpus:
        lines += corpus(c)
    r = random.Random(a.seed)
    for i in range(a.count):
        lines.append(encode("g%d-%d" % (a.seed, i), case(r, i)))
    sys.stdout.write("".join(ln + "\n" for ln in lines))


if __name__ == "__main__":
    main()
