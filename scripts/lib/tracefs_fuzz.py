"""Differential fuzzing of an event `filter` file: monfs against the real
tracefs (run by scripts/tracefs-fuzz, which mounts both).

For each input: write it to both files in one write(2) (O_WRONLY|O_TRUNC, as
`echo >` does), note the errno (or the byte count), read the file back, and
compare the two. Then reset both filters with "0". Inputs come from a seeded
grammar of filter expressions, mostly almost-valid (a token dropped,
doubled or swapped), and from a corpus of earlier divergences.
"""

import argparse
import errno
import os
import random
import sys

FIELDS_NUM = ["prev_pid", "prev_prio", "prev_state", "next_pid", "next_prio",
              "common_pid", "common_type", "common_flags", "common_preempt_count",
              "CPU", "cpu", "common_cpu"]
FIELDS_STR = ["prev_comm", "next_comm", "COMM", "comm"]
FIELDS_BAD = ["nosuch", "prev", "pid", "_", "prev_pid.hex"]
OPS = ["==", "!=", "<", "<=", ">", ">=", "&", "~"]
OPS_BAD = ["=", "=~", "<>", "!", "&&", "=="]


def num(r):
    return r.choice([
        str(r.randint(0, 200)), str(-r.randint(1, 200)), hex(r.randint(0, 4096)),
        "0" + oct(r.randint(0, 512))[2:], "08", "0x", "-", "+5", "1.5",
        str(2 ** r.choice([31, 32, 63, 64])), "9" * r.randint(19, 25), "0" * 24 + "1",
    ])


def string(r):
    body = r.choice(["bash", "ba*", "*sh", "*a*", "", "b a", "x" * r.randint(1, 20), "\\t",
                     "[ab]*", "?ash", "x" * r.choice([254, 255, 256, 257]), "b(a)", "a&&b"])
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
        s = s.replace(" ", r.choice(["", "\t", "\n", "  "]))
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


def answer(path, data):
    """Write `data`, then read the file back: (errno or byte count, text)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            res = f"wrote {os.write(fd, data)}"
        except OSError as e:
            res = f"errno {errno.errorcode.get(e.errno, e.errno)}"
        finally:
            os.close(fd)
    except OSError as e:
        res = f"open errno {errno.errorcode.get(e.errno, e.errno)}"
    with open(path, "rb") as f:
        back = f.read()
    return res, back


def reset(path):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def run(real, monfs, data):
    a = answer(real, data)
    b = answer(monfs, data)
    reset(real)
    reset(monfs)
    return a, b


def version_specific(a, b):
    """Debian's 6.12, which monfs follows, refuses an expression that ends
    where a predicate should come ("Meaningless filter expression"); this
    machine's 6.18.44 predates that fix and takes it. Not a divergence."""
    return a[0].startswith("wrote") and b"Meaningless filter expression" in b[1]


def shrink(real, monfs, data):
    """The shortest input found that still diverges (tokens, then bytes)."""
    def diverges(d):
        a, b = run(real, monfs, d)
        return a != b and not version_specific(a, b)
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
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line and not line.startswith("#"):
                    out.append(line.encode().decode("unicode_escape").encode("latin-1"))
    except FileNotFoundError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", required=True)
    ap.add_argument("--monfs", required=True)
    ap.add_argument("--corpus-default")
    ap.add_argument("--corpus")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--keep-going", action="store_true")
    a = ap.parse_args()
    real, monfs = a.real + "/filter", a.monfs + "/filter"
    bad = 0
    seen = set()

    def report(label, data):
        nonlocal bad
        small = shrink(real, monfs, data)
        if small in seen:
            return
        seen.add(small)
        bad += 1
        ra, mb = run(real, monfs, small)
        print(f"  DIVERGES ({label}): {small!r}")
        print(f"    real:  {ra[0]}; reads back {ra[1]!r}")
        print(f"    monfs: {mb[0]}; reads back {mb[1]!r}")
        print(f"    corpus line: {small.decode('latin-1').encode('unicode_escape').decode()}")

    skipped = 0
    for d in corpus(a.corpus or a.corpus_default or ""):
        ra, mb = run(real, monfs, d)
        if ra != mb and not version_specific(ra, mb):
            report("corpus", d)
    print(f"tracefs-fuzz: corpus replayed ({len(corpus(a.corpus or a.corpus_default or ''))} inputs)")
    if a.corpus:
        return 1 if bad else 0
    for seed in range(a.seed, a.seed + a.seeds):
        r = random.Random(seed)
        n_bad = bad
        for _ in range(a.cases):
            d = gen(r).encode()
            ra, mb = run(real, monfs, d)
            if ra != mb and version_specific(ra, mb):
                skipped += 1
            elif ra != mb:
                report(f"seed {seed}", d)
                if not a.keep_going and bad - n_bad >= 20:
                    break
        print(f"tracefs-fuzz: filter seed {seed}: {a.cases} cases, {bad - n_bad} divergences")
        sys.stdout.flush()
    print(f"tracefs-fuzz: {bad} divergences ({skipped} incomplete expressions that this "
          "machine's 6.18.44 takes and 6.12 refuses, not counted)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
