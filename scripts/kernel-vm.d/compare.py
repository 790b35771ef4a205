#!/usr/bin/python3
"""Compare what the kernel-vm guest collected from the real kernel's usbmon
(kernel/) with what monfs gave through CUSE (cuse/) and FUSE (fuse/).

Structure is compared, not values: device nodes, ioctl transcripts, the `u`
text grammar, binary header fields and flags, the setup packets of each
device's enumeration, tcpdump's link type. Value by value: the usbfs, libusb and isochronous
sessions, the keyboard's unplug uevents, and udevadm monitor's KERNEL and
UDEV events of a hot-plug of the keyboard and the stick; the input layer
(steps K4e, M4e, M5e): sysfs, LED class devices, evdev_probe's answers,
evtest's header, the event frames of each interrupt IN report, udev's
properties and links, the keyboard's hot-plug with evdev loaded; the
cdc_acm session of step K4t against tests/data/kernel_acm/ and the ftdi_sio measurement of step
K4f against tests/data/kernel_ftdi/ (drift). Writes a report (one line per
check: PASS, FAIL or INFO, with details) and exits 1 when a check failed.

    compare.py [--allow-no-cuse] GUEST_DIR REPORT
"""
import os
import re
import sys
from collections import OrderedDict

args = [a for a in sys.argv[1:] if not a.startswith("--")]
ALLOW_NO_CUSE = "--allow-no-cuse" in sys.argv
if len(args) != 2:
    sys.exit(__doc__)
G, REPORT = args
results = []  # (status, item, detail)


def res(status, item, detail=""):
    results.append((status, item, detail))


def check(ok, item, detail=""):
    res("PASS" if ok else "FAIL", item, detail)
    return ok


def path(*p):
    return os.path.join(G, *p)


def read(*p):
    try:
        with open(path(*p), errors="replace") as f:
            return f.read()
    except OSError:
        return None


def lines(*p):
    t = read(*p)
    return None if t is None else [ln for ln in t.split("\n") if ln != ""]


def rc(*p):
    t = read(*p)
    return None if t is None else int(t.strip() or -1)


def write_report_and_exit():
    nfail = sum(1 for r in results if r[0] == "FAIL")
    with open(REPORT, "w") as f:
        f.write("monfs kernel-vm comparison (%s)\n" % (read("info.txt") or "").strip())
        f.write("%d checks: %d PASS, %d FAIL, %d INFO\n\n" % (
            len(results), sum(r[0] == "PASS" for r in results), nfail, sum(r[0] == "INFO" for r in results)))
        for st, item, detail in results:
            f.write("%-4s %s\n" % (st, item))
            if detail:
                f.write("     %s\n" % detail)
    with open(REPORT) as f:
        sys.stdout.write(f.read())
    sys.exit(1 if nfail else 0)


# ------------------------------------------------------------------ user_events grammar (custom kernel)
# 6.12's user_events never set an array field's length (kmalloc'ed, not
# zeroed), so `format` shows `char msg[<whatever was in memory>]`, or `[]`
# when that was 0: the length is not compared.
ARRAY_LEN = re.compile(r"\[-?\d+\];\\toffset:")


def grammar_cases(t):
    """ue_grammar's output: {case id: [lines]} in order."""
    out, cur = OrderedDict(), None
    for ln in (t or "").split("\n"):
        if ln.startswith("case "):
            cur = out.setdefault(ln[5:], [])
        elif ln.startswith(" ") and cur is not None:
            ln = ln[1:]
            if ln.startswith("fmt "):
                ln = ARRAY_LEN.sub("[];\\\\toffset:", ln)
            cur.append(ln)
    return out


def known_grammar(fn):
    """Known divergences: (regex over the case's text, reason)."""
    out = []
    for ln in (read_abs(fn) or "").split("\n"):
        if ln.strip() and not ln.startswith("#"):
            pat, _, why = ln.partition("\t")
            out.append((re.compile(pat), why.strip()))
    return out


def read_abs(fn):
    try:
        with open(fn, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def grammar_differential(name, label, describe, joiner, missing):
    """A grammar differential: the client's output for cases NAME_cases.txt
    on the kernel's tracefs and on monfs's (NAME.txt), case by case;
    divergences whose case text matches a pattern of NAME's known list are
    INFO, others FAIL. `missing` is the result when no cases were copied
    out: ("FAIL" or "INFO", message)."""
    cases_txt = read("%s_cases.txt" % name)
    if cases_txt is None:
        res(missing[0], "%s: %s" % (label, missing[1]))
        return
    texts = {}
    for ln in cases_txt.split("\n"):
        if ln and not ln.startswith("#"):
            cid, _, steps = ln.partition(" ")
            texts[cid] = joiner.join(describe(st) for st in steps.split(" ") if st)
    k = grammar_cases(read("kernel", "%s.txt" % name))
    m = grammar_cases(read("fuse", "%s.txt" % name))
    for side, t in (("kernel", k), ("monfs", m)):
        d = "kernel" if side == "kernel" else "fuse"
        ok = rc(d, "%s.rc" % name) == 0 and "end" in (read(d, "%s.txt" % name) or "").split("\n")
        check(ok and len(t) == len(texts), "%s: %s ran all %d cases" % (label, side, len(texts)),
              "%d cases, rc %s, stderr %r" % (len(t), rc(d, "%s.rc" % name),
                                              (read(d, "%s.err" % name) or "")[:200]))
    known_file = {"ue_grammar": "ue-grammar-known.txt", "hist_grammar": "hist-known.txt"}[name]
    known = known_grammar(os.path.join(os.path.dirname(os.path.abspath(__file__)), known_file))
    div, info, unclean = 0, 0, 0
    for cid, kl in k.items():
        ml = m.get(cid)
        if ml is None:
            continue
        for side, ls in (("kernel", kl), ("monfs", ml)):
            if not any(x == "clean 0" for x in ls):
                unclean += 1
                res("FAIL", "%s %s: %s did not clean up" % (label, cid, side), texts.get(cid, ""))
        if kl == ml:
            continue
        diff = ["kernel %s | monfs %s" % (a, b) for a, b in zip(kl, ml) if a != b]
        if len(kl) != len(ml):
            diff.append("kernel %d lines, monfs %d: kernel %r monfs %r" % (
                len(kl), len(ml), kl[len(ml):][:4], ml[len(kl):][:4]))
        why = next((w for p, w in known if p.search(texts.get(cid, ""))), None)
        if why:
            info += 1
            res("INFO", "%s %s: known divergence: %s" % (label, cid, why),
                "case %s; %s" % (texts.get(cid, ""), "; ".join(diff)[:600]))
        else:
            div += 1
            res("FAIL", "%s %s diverges" % (label, cid),
                "case %s\n     %s" % (texts.get(cid, ""), "\n     ".join(d[:400] for d in diff)))
    check(div == 0 and unclean == 0, "%s: %d cases, %d divergences, %d known, %d unclean" % (
        label, len(texts), div, info, unclean))


def ue_grammar():
    grammar_differential("ue_grammar", "user_events grammar", describe_step, " ",
                         ("FAIL", "no cases were copied out"))


# ------------------------------------------------------------------ hist trigger grammar (6.12)
def hist_describe(st):
    """A hist case step, readable: s:COMMAND, w:COMMAND, S:DEFINITION."""
    parts = st.split(",")
    t = "" if parts[-1] == "-" else bytes.fromhex(parts[-1]).decode("latin-1")
    return "%s:%s" % (parts[1] if parts[0] == "T" else "S", t)


def hist_grammar():
    """The hist trigger differential: tests/c/hist_grammar.c's output on the
    kernel's tracefs and on monfs's; divergences listed in hist-known.txt
    are INFO, others FAIL."""
    grammar_differential("hist_grammar", "hist trigger grammar", hist_describe, " && ",
                         ("INFO", "not run (no cases: --hist-count 0 or not the 6.12 kernel)"))


def describe_step(st):
    """A case step, readable: W:t:"text" and so on."""
    parts = st.split(",")
    def txt(h):
        if h == "-":
            return "<unmapped>"
        return repr(bytes.fromhex(h).decode("latin-1"))
    if parts[0] in ("W", "D"):
        return ":".join(parts[:-1]) + ":" + txt(parts[-1])
    return ":".join(parts[:-1]) + ":" + txt(parts[-1])


# ------------------------------------------------------------------ user_events (custom kernel)
if "--user-events" in sys.argv:
    for ln in lines("errors.txt") or []:
        res("FAIL", "guest: " + ln)
    prods = sorted(f[:-4] for f in os.listdir(path("kernel")) if f.startswith("user_events_producer") and f.endswith(".txt")) \
        if os.path.isdir(path("kernel")) else []
    check(bool(prods), "user_events producers ran", ", ".join(prods))

    def fmt_fields(t):  # the field lines of a format file, without offsets' values kept
        return [re.sub(r"\s+", " ", ln.strip()) for ln in (t or "").split("\n") if ln.strip().startswith("field:")]

    for p in prods:
        k, m = read("kernel", p + ".txt") or "", read("fuse", p + ".txt") or ""
        kr, mr = rc("kernel", p + ".txt.rc"), rc("fuse", p + ".txt.rc")
        kerr, merr = (read("kernel", p + ".txt.err") or "").strip(), (read("fuse", p + ".txt.err") or "").strip()
        if "_old" in p and "user_events_status: No such device" in kerr:
            # 6.4+ kernels dropped the status page; monfs keeps that ABI on purpose.
            res("INFO", "%s: this kernel has no status page (6.4+); monfs serves the seed ABI" % p,
                "kernel %r, monfs %s %r" % (kerr[:120], mr, m.strip()[:120]))
            continue
        check(kr == mr, "%s: same exit status" % p, "kernel %s %r, monfs %s %r" % (kr, kerr[:120], mr, merr[:120]))
        shape = lambda t: re.sub(r"\d+", "N", t.strip())
        check(shape(k) == shape(m), "%s: same output shape" % p, "kernel %r, monfs %r" % (k.strip(), m.strip()))
        for side, t in (("kernel", k), ("fuse", m)):
            w = re.search(r"writes=(\d+) skipped=(\d+)", t)
            if kr == 0:
                check(w is not None and int(w.group(1)) > 0 and int(w.group(2)) > 0,
                      "%s %s: writes while enabled, skips while disabled" % (side, p), w.group(0) if w else t.strip())
        kf, mf = fmt_fields(read("kernel", p + ".format")), fmt_fields(read("fuse", p + ".format"))
        # 6.12's user_event_add_field() kmallocs the field and never sets its
        # array length, so `format` prints `tag[]` when that heap word is 0
        # and `tag[<garbage>]` otherwise; monfs prints `tag[]`.
        unset = [re.sub(r"^(field:[^;\[]*\w+)\[\d+\];", r"\1[];", x) for x in kf]
        if unset != kf and unset == mf:
            res("INFO", "%s: the kernel printed an array length it never set; compared without it" % p,
                "kernel %s" % [x for x in kf if x not in mf])
            kf = unset
        check(kf == mf, "%s: the event's format fields" % p, "kernel %s || monfs %s" % (kf, mf))
        kd, md = (read("kernel", p + ".dynamic_events") or "").strip(), (read("fuse", p + ".dynamic_events") or "").strip()
        check(kd == md, "%s: dynamic_events while registered" % p, "kernel %r, monfs %r" % (kd, md))
        tl = lambda t: [re.sub(r"^.*?: ", "", ln) for ln in (t or "").split("\n") if "example_" in ln]
        kt, mt = tl(read("kernel", p + ".trace")), tl(read("fuse", p + ".trace"))
        norm = lambda x: re.sub(r"\d+", "N", re.sub(r"0x[0-9a-f]+", "0xN", x))
        check(bool(kt) == bool(mt) and {norm(x) for x in kt} == {norm(x) for x in mt},
              "%s: trace lines (event: fields) have the same shape" % p,
              "kernel %d lines e.g. %r, monfs %d lines e.g. %r" % (len(kt), kt[:1], len(mt), mt[:1]))
    ue_grammar()
    write_report_and_exit()

# ------------------------------------------------------------------ sides
cuse_ran = os.path.isdir(path("cuse")) and os.path.exists(path("cuse", "ioctl1.txt"))
SIDES = ["fuse"] + (["cuse"] if cuse_ran else [])

# ------------------------------------------------------------------ guest errors
for ln in lines("errors.txt") or []:
    if "no 'mount --cuse'" in ln and ALLOW_NO_CUSE:
        res("INFO", "guest: " + ln, "allowed by --allow-no-cuse")
    else:
        res("FAIL", "guest: " + ln)
if not cuse_ran:
    if ALLOW_NO_CUSE:
        res("INFO", "CUSE checks", "not run (--no-cuse --allow-no-cuse)")
    else:
        res("FAIL", "CUSE checks", "monfs's CUSE devices were not tested")

# ------------------------------------------------------------------ device nodes
NODE = re.compile(r"^(\S+) (character special file|regular file|regular empty file) ([0-9a-f]+):([0-9a-f]+) (\d+)$")


def nodes(side):
    out = {}
    for ln in lines(side, "nodes.txt") or []:
        m = NODE.match(ln)
        if m:
            out[os.path.basename(m.group(1))] = (m.group(2), int(m.group(3), 16), int(m.group(4), 16), m.group(5))
        else:
            out[ln.split()[0]] = None
    return out


kn = nodes("kernel")
for b in (0, 1):
    n = kn.get("usbmon%d" % b)
    check(n is not None and n[0] == "character special file" and n[2] == b and n[3] == "600",
          "kernel /dev/usbmon%d: char device, minor %d, mode 0600" % (b, b), str(n))
if cuse_ran:
    cn = nodes("cuse")
    for b in (0, 1):
        n, k = cn.get("usbmon%d" % b), kn.get("usbmon%d" % b)
        check(n is not None and n[0] == "character special file" and n[2] == b and n[3] == "600",
              "CUSE /dev/usbmon%d: char device, minor %d, mode 0600 like the kernel's" % (b, b),
              "monfs %s, kernel %s" % (n, k))
        if n and k:
            res("PASS" if n[1] == k[1] else "INFO", "CUSE /dev/usbmon%d major" % b,
                "monfs %d, kernel %d (the kernel's is dynamic: alloc_chrdev_region)" % (n[1], k[1]))
    n = cn.get("monreader")
    check(n is not None and n[0] == "character special file" and n[3] == "600",
          "CUSE /dev/monreader: char device, mode 0600", str(n))
fnodes = nodes("fuse")
for b in (0, 1):
    n = fnodes.get("usbmon%d" % b)
    check(n is not None and n[3] == "600", "FUSE dev/usbmon%d: mode 0600" % b, str(n))

# ------------------------------------------------------------------ ioctl transcripts
# Lines whose answer depends on whether events are queued (monfs's devices
# make traffic all the time, the kernel's idle qemu devices none).
TRAFFIC = ("URB_LEN(empty)", "STATS", "GETX(nonblock, empty)", "MFETCH(nonblock, empty)",
           "read(nonblock, empty)", "MFLUSH(5) empty")
# A 32-bit caller's GETX has no allocation limit (mon_bin_compat_ioctl), so
# GETX(alloc 0x10000001) fetches an event when one is queued.
TRAFFIC32 = ("GETX(alloc 0x10000001)",)
# What any CUSE device gives, whatever its server does (fs/fuse/cuse.c):
# cuse_frontend_fops has no .mmap, so mmap fails with ENODEV (a writable
# shared mapping of an O_RDONLY fd fails earlier, in do_mmap, with EACCES as
# on the kernel's own device: that line must match the kernel), and the ring
# is then not mapped, so resizing "while mapped" succeeds; its .llseek is
# noop_llseek and cuse_open never applies FOPEN_NONSEEKABLE, so lseek
# returns the position (0) where usbmon's nonseekable device says ESPIPE.
CUSE_MMAP = OrderedDict([
    ("lseek", "0"),
    ("mmap(PROT_READ, MAP_SHARED)", "-1 errno=19"),
    ("RING_SIZE(65536) while mapped", "0"),
    ("RING_SIZE? while mapped", "65536"),
    ("mprotect(PROT_WRITE)", None),  # on MAP_FAILED: whatever mprotect says; not usbmon's
    ("mmap(MAP_PRIVATE)", "-1 errno=19"),
    ("mmap(ring + 2 pages)", "-1 errno=19"),
    ("read last ring byte", None),  # not mapped on CUSE: not printed
    ("read past the ring", None),
])


def transcript(side, b, bits=64):
    t = lines(side, ("ioctl%d.txt" if bits == 64 else "ioctl32_%d.txt") % b)
    if t is None:
        return None
    return OrderedDict((ln.split(" -> ")[0], ln.split(" -> ", 1)[1] if " -> " in ln else "")
                       for ln in t)


for bits, b in ((64, 0), (64, 1), (32, 0), (32, 1)):
    prog = "usbmon_ioctl" if bits == 64 else "usbmon_ioctl32 (compat ioctls)"
    k = transcript("kernel", b, bits)
    if not check(k is not None and len(k) >= 40, "kernel %s /dev/usbmon%d ran" % (prog, b),
                 "%s lines" % (len(k) if k else None)):
        continue
    for side in SIDES:
        m = transcript(side, b, bits)
        if m is None:
            res("FAIL", "%s %s usbmon%d" % (side, prog, b), "no transcript")
            continue
        diffs, explained = [], []
        for key in list(k.keys()) + [x for x in m if x not in k]:
            kv, mv = k.get(key), m.get(key)
            if side == "cuse" and key in CUSE_MMAP:
                want = CUSE_MMAP[key]
                if want is not None and mv != want:
                    diffs.append("%s: monfs %r, want %r on CUSE (kernel's own device: %r)" % (key, mv, want, kv))
                elif kv != mv:
                    explained.append(key)
                continue
            if kv == mv:
                continue
            if key in TRAFFIC or (bits == 32 and key in TRAFFIC32):
                explained.append(key)
                continue
            diffs.append("%s: kernel %r, monfs %r" % (key, kv, mv))
        detail = "; ".join(diffs) if diffs else "%d lines identical" % (len(k) - len(explained))
        if explained:
            detail += " (differing as explained: %s)" % ", ".join(explained)
        check(not diffs, "%s transcript %s usbmon%d == kernel" % (prog, side.upper(), b), detail)

# ------------------------------------------------------------------ u text grammar
HEX = r"[0-9a-f]"
U_LINE = re.compile(
    r"^(?P<tag>[0-9a-f]{1,16}) (?P<ts>\d+) (?P<ev>[SCE]) (?P<t>[CIBZ])(?P<d>[io]):(?P<bus>\d+):(?P<dev>\d{3}):(?P<ep>\d+)"
    r"(?P<mid>( s %s{2} %s{2} %s{4} %s{4} %s{4})|( -?\d+(:-?\d+)*)( \d+( -?\d+:\d+:\d+)*)?)"
    r" (?P<len>\d+)(?P<data>( [<>])| =( %s{2,8})+)?$" % ((HEX,) * 6))


def u_grammar(ls):
    """Return (number of lines, list of problems)."""
    bad = []
    for ln in ls:
        m = U_LINE.match(ln)
        if not m:
            bad.append("grammar: " + ln)
            continue
        t, ev, mid = m.group("t"), m.group("ev"), m.group("mid")
        if mid.startswith(" s") and not (t == "C" and ev == "S" or ev == "E"):
            bad.append("setup on a non-control-submission: " + ln)
        if t == "C" and ev == "S" and not mid.startswith(" s"):
            bad.append("control submission without setup: " + ln)
        if t == "I" and not re.match(r"^ -?\d+:\d+$", mid):
            bad.append("interrupt without status:interval: " + ln)
        if t in "BC" and not mid.startswith(" s") and not re.match(r"^ -?\d+$", mid):
            bad.append("bulk/control without a plain status: " + ln)
        data = m.group("data") or ""
        if data.startswith(" ="):
            words = data[3:].split(" ")
            if any(len(w) % 2 for w in words) or any(len(w) != 8 for w in words[:-1]):
                bad.append("data words: " + ln)
            nbytes = sum(len(w) // 2 for w in words)
            if nbytes > min(int(m.group("len")), 32):
                bad.append("more data than length (or 32): " + ln)
        if int(m.group("dev")) > 127 or int(m.group("ep")) > 15:
            bad.append("device/endpoint out of range: " + ln)
    return len(ls), bad


TEXTS = [("0u_enum.txt", "0u during enumeration"), ("1u.txt", "1u during traffic"),
         ("read.txt", "usbmon_read read"), ("get.txt", "usbmon_read get (MON_IOCX_GET)"),
         ("getx.txt", "usbmon_read getx (MON_IOCX_GETX)"), ("mmap.txt", "usbmon_mmap (mmap + MFETCH)")]
for side in ["kernel"] + SIDES:
    for fn, what in TEXTS:
        ls = lines(side, fn)
        if side == "cuse" and fn == "mmap.txt":
            err = read(side, fn + ".err") or ""
            check(rc(side, fn + ".rc") == 1 and "No such device" in err,
                  "CUSE usbmon_mmap: mmap fails with ENODEV (CUSE has no mmap)", err.strip()[:200])
            continue
        if side == "cuse" and fn == "0u_enum.txt":
            continue  # the text files are FUSE's; checked under fuse
        if ls is None:
            res("FAIL", "%s %s" % (side, what), "no output")
            continue
        n, bad = u_grammar(ls)
        if fn in ("read.txt", "get.txt", "getx.txt", "mmap.txt"):
            r = rc(side, fn + ".rc")
            check(r == 0 and n == 60, "%s %s: 60 events, exit 0" % (side, what),
                  "%d lines, exit %s %s" % (n, r, (read(side, fn + ".err") or "").strip()[:200]))
        check(n > 0 and not bad, "%s %s: every line matches the u grammar" % (side, what),
              "%d lines; %s" % (n, "; ".join(bad[:5]) if bad else "all match"))

# ------------------------------------------------------------------ binary headers
HDR = re.compile(r"(\w+)=(\S+)")


def headers(side, fn):
    out = []
    for ln in lines(side, fn) or []:
        if ln.startswith("id="):
            d = dict(HDR.findall(ln))
            for k_ in list(d):
                if k_ not in ("id", "setup", "xfer_flags", "tail", "data"):
                    d[k_] = int(d[k_])
            out.append(d)
    return out


def combo(h):
    return (chr(h["type"]), "ZICB"[h["xfer"]], "i" if h["ep"] & 0x80 else "o",
            h["flag_setup"], h["flag_data"], h["len_cap"] > 0, h["length"] > 0)


def hdr_checks(hs, getx, bus):
    bad = []
    ids = set()
    for h in hs:
        s = "id=%s %s" % (h["id"], combo(h))
        if chr(h["type"]) not in "SCE":
            bad.append("type " + s)
        if h["xfer"] > 3 or (h["ep"] & 0x7f) > 15 or h["dev"] > 127:
            bad.append("xfer/ep/dev range " + s)
        if bus is not None and h["bus"] != bus:
            bad.append("busnum %d " % h["bus"] + s)
        if not 0 <= h["ts_usec"] < 1000000:
            bad.append("ts_usec " + s)
        if h["len_cap"] > h["length"] and h["xfer"] != 0:
            bad.append("len_cap > length " + s)
        if chr(h["type"]) == "S" and h["status"] != -115:
            bad.append("submission status %d " % h["status"] + s)
        is_ctrl_s = chr(h["type"]) == "S" and h["xfer"] == 2
        if (h["flag_setup"] == 0) != is_ctrl_s:
            bad.append("flag_setup %d " % h["flag_setup"] + s)
        if not is_ctrl_s and h["flag_setup"] != ord("-"):
            bad.append("flag_setup not '-' " + s)
        if getx and h["xfer"] != 0 and (h["ndesc"] != 0 or h["start_frame"] != 0):
            bad.append("ndesc/start_frame on non-iso " + s)
        if not getx and h.get("tail") != "a5a5a5a5":
            bad.append("MON_IOCX_GET wrote past 48 bytes " + s)
        if chr(h["type"]) == "S":
            ids.add(h["id"])
    return bad


def flags_of(hs):
    return {h["xfer_flags"] for h in hs}


for fn, getx, bus, what in [("hdr0_enum.txt", True, None, "/dev/usbmon0 GETX during enumeration"),
                            ("hdr_getx.txt", True, 1, "/dev/usbmon1 GETX (64-byte headers)"),
                            ("hdr_get.txt", False, 1, "/dev/usbmon1 GET (48-byte headers)")]:
    kh = headers("kernel", fn)
    kbad = hdr_checks(kh, getx, bus)
    check(kh and not kbad, "kernel %s: header fields in range" % what,
          "%d events; %s" % (len(kh), "; ".join(kbad[:4]) or "ok"))
    kcombos = {combo(h) for h in kh}
    for side in SIDES:
        mh = headers(side, fn)
        mbad = hdr_checks(mh, getx, bus)
        check(mh and not mbad, "%s %s: header fields in range" % (side, what),
              "%d events; %s" % (len(mh), "; ".join(mbad[:4]) or "ok"))
        # (type, xfer type, direction, flag_setup, flag_data, data captured,
        # length>0): every combination monfs gives for a (type, xfer, dir)
        # the kernel showed must be one the kernel gave too.
        seen_keys = {c[:3] for c in kcombos}
        extra = sorted({combo(h) for h in mh if combo(h)[:3] in seen_keys} - kcombos)
        unverified = sorted({combo(h)[:3] for h in mh} - seen_keys)
        check(not extra, "%s %s: flag combinations the kernel also produces" % (side, what),
              ("monfs-only: %s" % extra if extra else "%d combinations" % len({combo(h) for h in mh}))
              + ("; kinds the kernel did not show in this run: %s" % unverified if unverified else ""))
        if getx:
            # The flags are the drivers' (usb-storage, usbhid), not the capture
            # window's: take the kernel's from every GETX capture (the
            # enumeration saw no writes, the bus 1 capture does).
            kf = {}
            for h in kh + headers("kernel", "hdr_getx.txt") + headers("kernel", "hdr0_enum.txt"):
                kf.setdefault(combo(h)[1:3], set()).add(h["xfer_flags"])
            mf = {}
            for h in mh:
                mf.setdefault(combo(h)[1:3], set()).add(h["xfer_flags"])
            dif = {k_: (sorted(kf[k_]), sorted(v)) for k_, v in mf.items() if k_ in kf and not v <= kf[k_]}
            check(not dif, "%s %s: xfer_flags values the kernel's drivers use, per (type, dir)" % (side, what),
                  "differ, (kernel, monfs): %s" % dif if dif else "subset of the kernel's")

# ------------------------------------------------------------------ enumeration
T_LINE = re.compile(r"^T:\s+Bus=(\d+) Lev=(\d+) Prnt=(\d+) Port=(\d+) Cnt=\d+ Dev#=\s*(\d+) Spd=(\S+)")


def usb_devices(side):
    out, cur = {}, None
    for ln in lines(side, "devices.txt") or []:
        m = T_LINE.match(ln)
        if m:
            bus, lev, _, port, dev, spd = m.groups()
            cur = {"bus": int(bus), "lev": int(lev), "port": int(port) + 1, "dev": int(dev), "speed": spd}
            out[(int(bus), int(dev))] = cur
        elif cur is not None and ln.startswith("S:  Product="):
            cur["product"] = ln.split("=", 1)[1]
        elif cur is not None and ln.startswith("P:  Vendor="):
            cur["id"] = ln.split("Vendor=")[1][:4] + ":" + ln.split("ProdID=")[1][:4]
    return out


def setups(side, fn="0u_enum.txt"):
    seq = {}
    for ln in lines(side, fn) or []:
        f = ln.split(" ")
        if len(f) > 10 and f[2] == "S" and f[4] == "s":
            _, bus, dev, ep = f[3].split(":")
            if ep == "0":
                seq.setdefault((int(bus), int(dev)), []).append(" ".join(f[5:10]))
    return seq


# Divergences of monfs from the kernel that the comparison shows and that are
# not mended yet: each check named here is reported INFO with its reason
# instead of FAIL (a check that is not named here fails as ever).
KNOWN_ENUM = {}


def known_usb(ok, title, detail, why):
    """check(), but a failure with a known reason `why` is an INFO line."""
    if ok or not why:
        check(ok, title, detail)
    else:
        res("INFO", "%s: known divergence: %s" % (title, why), detail)


def setups_bin(side, fn="hdr0_enum.txt"):
    """setups(), from the binary capture of the same window (usbmon_hdr's
    lines of dev/usbmon0): its ring holds the whole enumeration, where a
    text reader that falls behind on a busy host loses events as the
    kernel's does, which made the text's lists differ in the middle."""
    seq = {}
    for ln in lines(side, fn) or []:
        f = dict(kv.split("=", 1) for kv in ln.split(" ") if "=" in kv)
        if f.get("type") != "83" or f.get("flag_setup") != "0" or f.get("ep") not in ("0", "128"):
            continue
        b = bytes.fromhex(f["setup"])
        if len(b) != 8:
            continue
        pk = "%02x %02x %04x %04x %04x" % (b[0], b[1], int.from_bytes(b[2:4], "little"),
                                          int.from_bytes(b[4:6], "little"), int.from_bytes(b[6:8], "little"))
        seq.setdefault((int(f["bus"]), int(f["dev"])), []).append(pk)
    return seq


kdev, ks = usb_devices("kernel"), setups_bin("kernel")
mdev, ms = usb_devices("fuse"), setups_bin("fuse")
for side, seq, text in (("kernel", ks, setups("kernel")), ("monfs", ms, setups("fuse"))):
    lost = sum(len(v) for v in seq.values()) - sum(len(v) for v in text.values())
    res("INFO", "%s: the setup packets of enumeration are read from the binary capture (dev/usbmon0); "
        "its text capture (0u) has %d fewer" % (side, lost))
kby = {(d["bus"], d["port"]): d for d in kdev.values() if d["lev"] == 1}
mby = {(d["bus"], d["port"]): d for d in mdev.values() if d["lev"] == 1}
check(len(kby) == 5, "kernel: five qemu devices enumerated", str(sorted(kby)))
check(len(mby) == 5, "monfs: five simulated devices enumerated", str(sorted(mby)))
for bp in sorted(set(kby) | set(mby)):
    kd, md = kby.get(bp), mby.get(bp)
    name = (kd or md).get("product", "?")
    if not kd or not md:
        res("FAIL", "enumeration of bus %d port %d (%s)" % (bp + (name,)), "present only in %s" % ("kernel" if kd else "monfs"))
        continue
    check(kd.get("id") == md.get("id") and kd.get("product") == md.get("product"),
          "device on bus %d port %d: same ids and product string" % bp,
          "kernel %s %r, monfs %s %r" % (kd.get("id"), kd.get("product"), md.get("id"), md.get("product")))
    check(kd["speed"] == md["speed"], "device %r: same speed" % name,
          "kernel Spd=%s, monfs Spd=%s" % (kd["speed"], md["speed"]))
    kseq, mseq = ks.get((kd["bus"], kd["dev"]), []), ms.get((md["bus"], md["dev"]), [])
    if kseq == mseq:
        res("PASS", "enumeration of %r: the same %d setup packets in order" % (name, len(kseq)), " | ".join(kseq))
    else:
        import difflib
        d = [x for x in difflib.unified_diff(kseq, mseq, "kernel", "monfs", n=0, lineterm="")
             if not x.startswith(("---", "+++"))]
        known_usb(False, "enumeration of %r: setup packets differ" % name,
                  "kernel: %s || monfs: %s || diff: %s" % (" | ".join(kseq), " | ".join(mseq), " ".join(d)),
                  KNOWN_ENUM.get(name))


# ------------------------------------------------------------------ the flash drive's SCSI answers
def storage_answers(side, d):
    """The data (usbmon's first 32 bytes) of the flash drive D's bulk IN
    completions of 36 and 192 bytes, sd's INQUIRY and MODE SENSE(6) of all
    pages, in the captures of enumeration and traffic: length -> the
    distinct data in order, tags and times aside."""
    done = re.compile(r"C Bi:%d:%03d:\d+ 0 (36|192) = (.*)$" % (d["bus"], d["dev"]))
    out = {}
    for fn in ("0u_enum.txt", "1u.txt"):
        for ln in lines(side, fn) or []:
            m = done.match(ln.split(" ", 2)[-1])
            if m and m.group(2) not in out.setdefault(int(m.group(1)), []):
                out[int(m.group(1))].append(m.group(2))
    return out


# qemu's usb-storage (46f4:0001) with its scsi-hd on the kernel's side, the
# simulated flash drive on monfs's: the same bytes for sd's scan (the stick's
# image is as large as monfs's disk, so the block descriptor and the
# geometry pages agree too).
kst = next((d for d in kby.values() if d.get("id") == "46f4:0001"), None)
mst = next((d for d in mby.values() if d.get("id") == "46f4:0001"), None)
if not kst or not mst:
    res("FAIL", "flash drive: sd's INQUIRY and MODE SENSE answers",
        "no 46f4:0001 on the %s side" % ("kernel's" if not kst else "monfs's"))
else:
    ka, ma = storage_answers("kernel", kst), storage_answers("fuse", mst)
    for n, what in ((36, "INQUIRY"), (192, "MODE SENSE(6) of all pages")):
        check(ka.get(n) is not None and ka.get(n) == ma.get(n),
              "flash drive: sd's %s answered with the same %d bytes as qemu's usb-storage" % (what, n),
              "kernel %s, monfs %s" % (ka.get(n), ma.get(n)))


def int_submits(side, bus, dev):  # "interval length" of each interrupt IN submission
    out = []
    for ln in lines(side, "0u_enum.txt") or []:
        f = ln.split(" ")
        if len(f) > 5 and f[2] == "S" and f[3].startswith("Ii:%d:%03d:" % (bus, dev)):
            out.append("%s %s" % (f[4].split(":")[1], f[5]))
    return out


for bp in sorted(set(kby) & set(mby)):
    kd, md = kby[bp], mby[bp]
    name = kd.get("product", "?")
    ki, mi = int_submits("kernel", kd["bus"], kd["dev"]), int_submits("fuse", md["bus"], md["dev"])
    if not ki and not mi:
        continue
    if not ki:
        res("INFO", "interrupt polling of %r: not compared" % name,
            "the kernel's usbhid submits its interrupt URB only while an input handler has the "
            "device open (the console's keyboard handler opens keyboards; nothing opens the tablet "
            "or the mouse in the guest), so the kernel showed none; monfs polls: %s" % (sorted(set(mi)) or "none"))
        continue
    check(set(mi) <= set(ki) and mi, "interrupt polling of %r: same interval and length" % name,
          "kernel (interval length) %s, monfs %s" % (sorted(set(ki)), sorted(set(mi))))
kz = len(ks.get((1, 0), []))
mz = len(ms.get((1, 0), []))
check(kz == mz, "GET_DESCRIPTOR(64) to address 0 before addressing (bus 1)",
      "kernel %d, monfs %d (one per device expected with xHCI)" % (kz, mz))
kr = ks.get((1, 1), [])
mr = ms.get((1, 1), [])
res("INFO", "root hub 1 requests (monfs starts its root hubs before a capture can open, so not compared)",
    "kernel %d: %s || monfs %d: %s" % (len(kr), " | ".join(kr[:40]), len(mr), " | ".join(mr[:40])))

# ------------------------------------------------------------------ tcpdump
for side, want in [("kernel", None)] + ([("cuse", "189")] if cuse_ran else []):
    lt = (read(side, "tcpdump.linktype") or "").strip()
    n = len(lines(side, "tcpdump.txt") or [])
    err = (read(side, "tcpdump.out.err") or "").strip().replace("\n", " / ")
    if want:
        check(lt == want, "CUSE: tcpdump -i usbmon1 uses libpcap's read path (linktype 189)", "linktype %s; %s" % (lt, err))
    else:
        res("INFO", "kernel: tcpdump -i usbmon1 link type", "%s (220 = mmap path); %s" % (lt, err))
    check(n > 0 and rc(side, "tcpdump.r.rc") == 0, "%s: tcpdump captured and tcpdump -r decodes it" % side,
          "%d packets decoded" % n)

# ------------------------------------------------------------------ stat files, usb/devices
STAT = re.compile(r"^nreaders \d+ events \d+ text_lost \d+$")
for side in ("kernel", "fuse"):
    for fn, how in (("stats_files_read.txt", "read(2) (dd)"), ("stats_files.txt", "busybox cat (sendfile)")):
        t = read(side, fn) or ""
        parts = re.split(r"^--- .*$", t, flags=re.M)[1:]
        bad = [p.strip() for p in parts if not STAT.match(p.strip())]
        check(parts and not bad, "%s Ns files read with %s: one 'nreaders N events N text_lost N' line" % (side, how),
              "%d files; bad: %r" % (len(parts), bad[:3]))

# monreader: no kernel counterpart on x86; CUSE and FUSE must both deliver sets
for side in SIDES:
    t = read(side, "monreader.txt") or ""
    check(rc(side, "monreader.txt.rc") == 0 and re.search(r"^END sets=2 ", t, re.M) is not None,
          "%s monreader_tool: 2 complete data sets" % side, (t.strip().split("\n") or [""])[-1])

# ------------------------------------------------------------------ hist triggers
hist_grammar()


# ------------------------------------------------------------------ usbfs
# tests/c/usbfs_kbd.c's session with the keyboard through /dev/bus/usb:
# the program's answers must be the same, and so must the usbmon lines of
# the session, from the program's first request to usbhid's URB after the
# program's CONNECT: its control requests, the end of usbhid's URB at the
# detach, its own interrupt URB, usbhid's probe again. Tags and time
# stamps aside. The qemu keyboard is idle, so the program's URB is
# discarded; monfs's keyboard types, so its URB may get a report first:
# that URB's completion and the answers that depend on it (poll, discard,
# reap) are shown, not compared.
PROGRAM_URB = ("poll ", "discard ", "reap ")


def device_lines(side, name):
    """The usbmon lines of file NAME for the session's device, without tag
    and time, its device number written DEV; None without a device."""
    dev = (read(side, "usbfs_devnum.txt") or "").strip()
    if not dev:
        return None
    mark = ":1:%03d:" % int(dev)
    return [ln.split(" ", 2)[2].replace(mark, ":1:DEV:") for ln in lines(side, name) or [] if mark in ln]


def usbfs_window(side):
    ls = device_lines(side, "usbfs_1u.txt")
    if ls is None:
        return None
    start = next((i for i, ln in enumerate(ls) if ln.startswith("S Ci:1:DEV:0 s 80 06 0100")), None)
    if start is None:
        return []
    out, detached, program, leds = [], False, 0, False
    for ln in ls[start:]:
        is_int = ln.startswith(("S Ii", "C Ii"))
        if is_int and not detached:
            if ln.startswith("C Ii") and (" -108:" in ln or " -2:" in ln):
                detached = True
                out.append(ln)
            continue  # usbhid's own polling before the detach
        if is_int and program < 2 and not leds:
            program += 1
            if program == 2:
                ln = "C Ii:1:DEV:1 (the program's URB ends: not compared)"
        out.append(ln)
        if ln.startswith("S Co:1:DEV:0 s 21 09"):
            leds = True
        if leds and ln.startswith("S Ii"):
            break
    return out


kp, mp = lines("kernel", "usbfs_kbd.txt") or [], lines("fuse", "usbfs_kbd.txt") or []
kc = [ln for ln in kp if not ln.startswith(PROGRAM_URB)]
mc = [ln for ln in mp if not ln.startswith(PROGRAM_URB)]
check(kp and kc == mc and rc("kernel", "usbfs_kbd.txt.rc") == 0,
      "usbfs: the keyboard session answers the same (tests/c/usbfs_kbd.c)",
      "kernel: %s || monfs: %s" % (" | ".join(kc), " | ".join(mc)))
res("INFO", "usbfs: the program's interrupt URB (an idle qemu keyboard NAKs; monfs's types)",
    "kernel: %s || monfs: %s" % (" | ".join(ln for ln in kp if ln.startswith(PROGRAM_URB)),
                                 " | ".join(ln for ln in mp if ln.startswith(PROGRAM_URB))))
kw, mw = usbfs_window("kernel"), usbfs_window("fuse")
if kw == mw and kw:
    res("PASS", "usbfs: the session's usbmon lines are the kernel's (%d lines)" % len(kw), " | ".join(kw))
else:
    import difflib
    d = [x for x in difflib.unified_diff(kw or [], mw or [], "kernel", "monfs", n=0, lineterm="")
         if not x.startswith(("---", "+++"))]
    res("FAIL", "usbfs: the session's usbmon lines differ",
        "kernel: %s || monfs: %s || diff: %s" % (" | ".join(kw or []), " | ".join(mw or []), " ".join(d)))


# ------------------------------------------------------------------ libusb
# tests/c/usbfs_libusb.c (Debian's libusb, libusb_wrap_sys_device) with the
# keyboard: the same operations (guest.sh's LIBUSB_OPS) on both. Its answers
# are compared line by line and so are the usbmon lines of the session, every
# field but the URB tag and the time stamp (the device number, the same
# device on both, is replaced by DEV). Not compared, each an INFO line: the
# answers of the interrupt IN reads and the completions of their URBs (qemu's
# keyboard gets no input, so a read times out and libusb discards its URB:
# -2; monfs's keyboard types once usbhid is detached, so a read gets a
# report); the PCI slot in qemu's serial string; usbhid's own polling
# before the detach (only the end of its URB at
# the detach is compared). The window runs from the program's first request
# to usbhid's first interrupt URB after its probe again (SET_IDLE).
def libusb_window(side):
    ls = device_lines(side, "libusb_1u.txt")
    if ls is None:
        return None
    out, detached, reprobed = [], False, False
    for ln in ls:
        is_int = ln.startswith(("S Ii", "C Ii"))
        if is_int and not detached:
            if ln.startswith("C Ii") and (" -108:" in ln or " -2:" in ln):
                detached = True
                out.append(ln)
            continue  # usbhid's own polling before the detach
        if ln.startswith("S Co:1:DEV:0 s 21 0a"):
            reprobed = True
        if ln.startswith("C Ii") and not reprobed:
            ln = "C Ii:1:DEV:1 (the program's URB ends: not compared)"
        out.append(ln)
        if reprobed and ln.startswith("S Ii"):
            break
    return out


LIBUSB_DATA = ("int-in:",)
# qemu's serial string names the controller's PCI address ("68284-0000:00:SS.F-PORT"), which the
# guest's device order decides; monfs's default is one fixed address: the slot is not compared.
SLOT = re.compile(r"-0000:00:[0-9a-f]{2}\.[0-7]-")
kp, mp = [[SLOT.sub("-0000:00:SLOT-", ln) for ln in lines(side, "usbfs_libusb.txt") or []]
          for side in ("kernel", "fuse")]
kc = [ln for ln in kp if not ln.startswith(LIBUSB_DATA)]
mc = [ln for ln in mp if not ln.startswith(LIBUSB_DATA)]
check(kc and kc == mc and rc("kernel", "usbfs_libusb.txt.rc") == 0 and rc("fuse", "usbfs_libusb.txt.rc") == 0
      and len(kp) == len(mp),
      "libusb: the keyboard session answers the same (tests/c/usbfs_libusb.c, %d operations)" % len(kp),
      "kernel: %s || monfs: %s" % (" | ".join(kc), " | ".join(mc)))
res("INFO", "libusb: the interrupt IN reads (qemu's idle keyboard: a timeout; monfs's types): not compared",
    "kernel: %s || monfs: %s" % (" | ".join(ln for ln in kp if ln.startswith(LIBUSB_DATA)),
                                 " | ".join(ln for ln in mp if ln.startswith(LIBUSB_DATA))))
kw, mw = libusb_window("kernel"), libusb_window("fuse")
if kw == mw and kw:
    res("PASS", "libusb: the session's usbmon lines are the kernel's, all fields but tag and time (%d lines)"
        % len(kw), " | ".join(kw))
else:
    import difflib
    d = [x for x in difflib.unified_diff(kw or [], mw or [], "kernel", "monfs", n=0, lineterm="")
         if not x.startswith(("---", "+++"))]
    res("FAIL", "libusb: the session's usbmon lines differ",
        "kernel: %s || monfs: %s || diff: %s" % (" | ".join(kw or []), " | ".join(mw or []), " ".join(d)))

# ------------------------------------------------------------------ isochronous
# tests/c/usbfs_iso.c with the audio device (qemu's usb-audio, monfs's kind:
# audio; alone on bus 2, its usbmon lines from 2u): the detach of its streaming interface's driver, a claim, the
# setting with the isochronous OUT endpoint, 12 URBs of 128 packets with
# URB_ISO_ASAP, 3 in flight, a URB without it once the stream drained,
# setting 0, the release and the attach. Compared: the program's answers
# before and after the stream; the URBs in reap order with their status,
# actual length, error count, start_frame (usbfs never copies the HCD's
# back) and each packet's status and length; the endpoint's usbmon S and C
# lines between the program's two SET_INTERFACE requests, in order, every
# field but tag, time and the start frame of a completion, the device
# number written DEV; and where the HCD put each URB: the start frame of its
# completion against the time of its submission (6.12's xhci-hcd continues
# an endpoint's stream only on a controller with Contiguous Frame ID
# capability; on one without, qemu's, it reads MFINDEX at each submission
# and puts the URB at the frame just ahead, so start frame minus submission
# time is the same for every URB, whatever was queued before it).
ISO_URB = re.compile(r"^urb (\d+) status (-?\d+) actual (\d+) errors (\d+) start_frame (-?\d+) pk(.*)$")
ISO_END = ("set-interface-0 ", "release ", "connect ", "driver-end ")


def iso_answers(side):
    ls = lines(side, "usbfs_iso.txt") or []
    first = next((i for i, ln in enumerate(ls) if ISO_URB.match(ln)), len(ls))
    begin = ls[:first]
    end = [ln for ln in ls[first:] if ln.startswith(ISO_END)]
    urbs = [ln for ln in ls[first:] if not ln.startswith(ISO_END)]
    return begin, urbs, end


def iso_window(side):
    """The endpoint's usbmon lines between the program's SET_INTERFACE to
    the stream's setting and the one back to 0: (time in us, event,
    start frame, the line without tag and time, a completion's start frame
    written F)."""
    dev = (read(side, "iso_devnum.txt") or "").strip()
    if not dev:
        return None
    mark = ":2:%03d:" % int(dev)
    out, inside = [], False
    for raw in lines(side, "iso_2u.txt") or []:
        if mark not in raw:
            continue
        f = raw.split(" ")
        ts, f = int(f[1]), f[2:]
        ln = " ".join(f).replace(mark, ":2:DEV:")
        if ln.startswith("S Co:2:DEV:0 s 01 0b"):
            if inside:
                break
            inside = f[5] != "0000"
            continue
        if inside and f[1].startswith(("Zo", "Zi")):
            st = f[2].split(":")
            sf = int(st[2])
            if f[0] == "C":
                st[2] = "F"
            out.append((ts, f[0], sf, " ".join([f[0], ln.split(" ")[1], ":".join(st)] + ln.split(" ")[3:])))
    return out


def iso_placement(win):
    """Per URB, in order (the endpoint's completions come in submission
    order): the start frame of its completion minus the frame of its
    submission's time, modulo the 11-bit frame counter; and the distances
    between consecutive start frames."""
    subs = [ts for ts, ev, _, _ in win if ev == "S"]
    ends = [sf for _, ev, sf, _ in win if ev == "C"]
    offs = [(sf - ts // 1000) % 2048 for ts, sf in zip(subs, ends)]
    dist = [(b - a) % 2048 for a, b in zip(ends, ends[1:])]
    return offs, dist


kb, ku, ke = iso_answers("kernel")
mb, mu, me = iso_answers("fuse")
krc, mrc = rc("kernel", "usbfs_iso.txt.rc"), rc("fuse", "usbfs_iso.txt.rc")
check(kb and kb == mb and krc == 0 and mrc == 0,
      "usbfs iso: the audio session's answers before the stream are the same (tests/c/usbfs_iso.c: "
      "endpoint, driver, detach, claim, setting)",
      "kernel rc %s: %s || monfs rc %s: %s" % (krc, " | ".join(kb), mrc, " | ".join(mb)))
check(ku and ku == mu,
      "usbfs iso: %d URBs in the same reap order, each URB's and each packet's status and length"
      % sum(1 for x in ku if ISO_URB.match(x)),
      "kernel: %s || monfs: %s" % (" | ".join(ku), " | ".join(mu)))
check(ke and ke == me,
      "usbfs iso: the audio session's answers after the stream are the same (setting 0, release, attach, driver)",
      "kernel: %s || monfs: %s" % (" | ".join(ke), " | ".join(me)))
kw, mw = iso_window("kernel"), iso_window("fuse")
kl, ml = [x[3] for x in kw or []], [x[3] for x in mw or []]
if kl == ml and kl:
    res("PASS", "usbfs iso: the endpoint's usbmon S and C lines are the kernel's, in order (%d lines)" % len(kl),
        " | ".join(kl))
else:
    import difflib
    d = [x for x in difflib.unified_diff(kl, ml, "kernel", "monfs", n=0, lineterm="")
         if not x.startswith(("---", "+++"))]
    res("FAIL", "usbfs iso: the endpoint's usbmon S and C lines differ",
        "kernel: %s || monfs: %s || diff: %s" % (" | ".join(kl), " | ".join(ml), " ".join(d)))
(ko, kd), (mo, md) = iso_placement(kw or []), iso_placement(mw or [])
def placed(o):
    """How many of the offsets `o` (start frame - submission ms, modulo
    2048) are within 2 of their median. A stream whose frames continue
    gives offsets that move by a URB's frames less the program's time at
    each URB; frames read off MFINDEX at submission give one offset, but
    for a URB whose submission stamp the guest's clock took late on a busy
    host (seen: the kernel's first URB 9 ms off, the other twelve equal)."""
    if not o:
        return 0
    m = sorted(o)[len(o) // 2]
    return sum(1 for x in o if min((x - m) % 2048, (m - x) % 2048) <= 2)


kp, mp = placed(ko), placed(mo)
check(ko and kp >= len(ko) - 1,
      "usbfs iso: kernel: each URB's start frame is its submission's frame plus a constant (within 2, "
      "one URB aside)",
      "start frame - submission ms: %s; distances between start frames %s" % (ko, kd))
check(mo and mp >= len(mo) - 1 and len(mo) == len(ko),
      "usbfs iso: monfs places each URB as the kernel did: its start frame is its submission's frame "
      "plus a constant (within 2, one URB aside)",
      "monfs: start frame - submission ms %s, distances %s || kernel: %s, distances %s"
      % (mo, md, ko, kd))
res("INFO", "usbfs iso: not compared: URB tags and times; a completion's start frame as a value (the "
    "frame counter's value when the stream starts depends on when the program runs; where each URB was "
    "put is checked against its submission's time instead); the distances between start frames as values "
    "(on qemu's xHCI they follow the program's timing)")

# ------------------------------------------------------------------ uevents
# tests/c/uevent_listen.c on netlink group 1, the keyboard's (1-1) events:
# on the kernel while its port is disabled (the unplug: qemu's xHCI does not
# report the device again when the port is enabled), inside `monfs run`
# while `monfs ctl` unplugs and plugs it. The unplug's events are compared:
# the same actions in the same order, each with the same keys in the same
# order and the same values, but for what names a place or a number the two
# buses give differently (SEQNUM, DEVPATH, DEVNAME, MINOR, DEVNUM); the plug
# half is an INFO line.
UEV_PLACE = ("SEQNUM", "DEVPATH", "DEVNAME", "MINOR", "DEVNUM")


def uevents(side):
    out = []
    for ln in lines(side, "uevents.txt") or []:
        if ln == "ready":
            continue
        f = ln.split(" | ")
        head = f[0].split("@", 1)[0]
        kv = [x.split("=", 1) for x in f[1:] if "=" in x]
        name = dict(kv).get("DEVPATH", "").rsplit("/", 1)[-1]
        kind = name.split(":", 1)[1] if ":" in name else "device"
        out.append((head, kind, [(k, "-" if k in UEV_PLACE else v) for k, v in kv]))
    return out


def show(evs):
    return " / ".join("%s %s %s" % (a, k, ",".join("%s=%s" % x for x in kv)) for a, k, kv in evs)


ku, mu = uevents("kernel"), uevents("fuse")
check(len(ku) == 4 and ku == mu[:4],
      "uevents: the keyboard's unplug, the kernel's actions, keys and values (%d events)" % len(ku),
      "kernel: %s || monfs: %s" % (show(ku), show(mu[:4])))
res("INFO", "uevents: monfs's plug of the keyboard (a port enabled again gives no replug on qemu's xHCI; "
    "the hot-plug checks compare a plug through qemu's monitor)", show(mu[4:]))

# ------------------------------------------------------------------ hidraw
# tests/c/hidraw_hostile.c (--no-read) and tests/c/hidraw_hidapi.c (no
# reads) on the keyboard's hidraw node: the same answers, but for the PCI
# slot in HID_PHYS and HID_UNIQ (qemu's serial names it) and the node's
# name; and the same usbmon lines on the keyboard's ep0 (usbhid's
# SET_REPORT and GET_REPORT URBs for them), tags, times and the device
# number aside. hidapi's string getters on the open device look it up by
# the number fstat gives: monfs's node is a file of the mount (no number),
# an INFO line until it is a character device.
HIDAPI_BY_NUMBER = ("manufacturer ",)


def hidraw_answers(side, name):
    """The answers, the PCI slot, the node's name and the bytes of the
    reports got (GET_REPORT: monfs's keyboard types, qemu's is idle; the
    lengths are compared) written as placeholders."""
    out = []
    for ln in lines(side, name) or []:
        ln = SLOT.sub("-0000:00:SLOT-", ln)
        ln = re.sub(r"/dev/hidraw[0-9]+", "NODE", ln)
        ln = re.sub(r"^((feature|input) [0-9]+):.*", r"\1: BYTES", ln)
        out.append(ln)
    return out


def hidraw_compare():
    for name, what in (("hidraw_hostile.txt", "raw calls (tests/c/hidraw_hostile.c)"),
                       ("hidraw_hidapi.txt", "hidapi, hidraw backend (tests/c/hidraw_hidapi.c)")):
        k, m = hidraw_answers("kernel", name), hidraw_answers("fuse", name)
        # HIDIOCREVOKE needs a NULL argument, which a FUSE file's caller
        # cannot pass (the kernel copies the int in first): compared on
        # the character device below.
        k = [ln for ln in k if not ln.startswith(("revoke", "others_work"))]
        kc = [ln for ln in k if not ln.startswith(HIDAPI_BY_NUMBER)]
        mc = [ln for ln in m if not ln.startswith(HIDAPI_BY_NUMBER)]
        check(bool(kc) and kc == mc and rc("kernel", name + ".rc") == 0 and rc("fuse", name + ".rc") == 0,
              "hidraw: the keyboard's %s answer the same (%d)" % (what, len(kc)),
              "kernel: %s || monfs: %s" % (" | ".join(kc), " | ".join(mc)))
        kn = [ln for ln in k if ln.startswith(HIDAPI_BY_NUMBER)]
        mn = [ln for ln in m if ln.startswith(HIDAPI_BY_NUMBER)]
        if kn or mn:
            res("INFO", "hidraw: hidapi's lookup of the open node by its device number",
                "kernel: %s || monfs: %s" % (" | ".join(kn), " | ".join(mn)))
    # Inside monfs run as root with /dev/cuse, the node is a character
    # device whose number is sysfs's, and hidapi finds the open device by
    # it: all its answers are the kernel's.
    cu = lines("fuse", "hidraw_cuse.txt") or []
    if read("cuse", "nodes.txt") is None:
        res("INFO", "hidraw: no CUSE in this run: monfs run's hidraw node is the mount's file", " | ".join(cu))
    else:
        num = re.match(r"number (\S+) sysfs (\S+)$", cu[1]) if len(cu) > 1 else None
        check(bool(cu) and cu[0] == "type character special file" and num is not None
              and num.group(1) == num.group(2),
              "hidraw: monfs run's node is a character device of sysfs's number (CUSE)", " | ".join(cu[:2]))
        k = hidraw_answers("kernel", "hidraw_hidapi.txt")
        m = [SLOT.sub("-0000:00:SLOT-", re.sub(r"/dev/hidraw[0-9]+", "NODE", ln)) for ln in cu[2:]]
        m = [re.sub(r"^((feature|input) [0-9]+):.*", r"\1: BYTES", ln) for ln in m]
        check(bool(k) and k == m, "hidraw: hidapi on monfs run's character device answers the kernel's, "
              "its lookups by device number included (%d)" % len(k),
              "kernel: %s || monfs: %s" % (" | ".join(k), " | ".join(m)))
        k, m = hidraw_answers("kernel", "hidraw_hostile.txt"), hidraw_answers("fuse", "hidraw_cuse_hostile.txt")
        check(bool(k) and k == m, "hidraw: raw calls on monfs run's character device answer the kernel's (%d)" % len(k),
              "kernel: %s || monfs: %s" % (" | ".join(k), " | ".join(m)))
    ep0 = lambda side: [re.sub(r"^(C Ci:1:DEV:0 0 [0-9]+) = .*", r"\1 = BYTES", ln)
                        for ln in device_lines(side, "hidraw_1u.txt") or []
                        if re.match(r"[SC] C[io]:1:DEV:0 ", ln)]
    k, m = ep0("kernel"), ep0("fuse")
    check(bool(k) and k == m, "hidraw: the usbmon lines of the session on the keyboard's ep0 (%d)" % len(k),
          "kernel: %s || monfs: %s" % (" | ".join(k), " | ".join(m)))


hidraw_compare()


def tty_cuse_compare():
    # Inside monfs run as root with /dev/cuse, an ACM port's node is a
    # character device whose number is sysfs's, and tests/c/tty_acm.c's
    # session on it answers as on the mount's file (step M5t, the same
    # loopback device, each session on a port fresh from its probe).
    cu = lines("fuse", "tty_cuse.txt") or []
    if read("cuse", "nodes.txt") is None:
        res("INFO", "tty: no CUSE in this run: monfs run's ttyACM0 is the mount's file", " | ".join(cu))
        return
    num = re.match(r"number (\S+) sysfs (\S+)$", cu[1]) if len(cu) > 1 else None
    check(bool(cu) and cu[0] == "type character special file" and num is not None
          and num.group(1) == num.group(2),
          "tty: monfs run's ttyACM0 is a character device of sysfs's number (CUSE)", " | ".join(cu))
    c, f = lines("fuse", "tty_acm_cuse.txt") or [], lines("fuse", "tty_acm_file.txt") or []
    check(bool(c) and c[-1] == "close 0" and c == f,
          "tty: tests/c/tty_acm.c on monfs run's ttyACM0 character device answers as on the mount's file (%d)"
          % len(c), "character device: %s || file: %s" % (" | ".join(c), " | ".join(f)))


tty_cuse_compare()

# ------------------------------------------------------------------ hot-plug: udevadm monitor
# `udevadm monitor --kernel --udev --property` while qemu's keyboard and
# stick are unplugged (device_del) and plugged (device_add) through qemu's
# monitor with Debian's udevd running in the guest, and while `monfs ctl`
# unplugs and plugs the same kinds inside `monfs run`. Per device and
# direction, and per source (KERNEL: netlink group 1, UDEV: group 2), the
# USB subsystem's events of the device and its interfaces: the same
# actions in the same order, each with the same keys in the same order
# and the same values, but for what names a place or a time the two
# systems give differently (HOTPLUG_PLACE) and what only a real system has
# (HOTPLUG_REAL, each an INFO line with its reason). The HID core's
# events under an interface (the HID device and its hidraw node) are
# compared the same way; the other subsystems' events under the device
# (input, leds, wakeup, scsi, block, ...), which monfs does not simulate,
# are INFO lines.
HOTPLUG_DEVICES = (("kbd", "1-1", "the keyboard"), ("stick", "1-3", "the stick"),
                   ("audio", "2-1", "the audio device"))
HOTPLUG_PLACE = OrderedDict([
    ("SEQNUM", "the kernel's counter: every uevent of the system before counts"),
    ("DEVPATH", "names the host controller's PCI address; compared as its last part (the port)"),
    ("DEVNAME", "bus/usb/BBB/DDD: the device number"),
    ("MINOR", "(bus - 1) * 128 + device number - 1"),
    ("DEVNUM", "the device number the bus gave, which counts every device plugged before"),
    ("USEC_INITIALIZED", "the time udevd first saw the device"),
    ("ID_PATH", "names the host controller's PCI address"),
    ("ID_PATH_TAG", "ID_PATH made a tag"),
    ("ID_FOR_SEAT", "usb-ID_PATH_TAG"),
])
HOTPLUG_REAL = OrderedDict()
MON_HEAD = re.compile(r"^(KERNEL|UDEV) *\[[0-9.]+\] (\S+) +(\S+) \((\S*)\)$")


def monitor_events(side, name):
    """udevadm monitor's output: [(source, action, devpath, subsystem,
    [(key, value)])], None without the file."""
    t = read(side, "udev_%s.txt" % name)
    if t is None:
        return None
    out, cur = [], None
    for ln in t.split("\n"):
        m = MON_HEAD.match(ln)
        if m:
            cur = (m.group(1), m.group(2), m.group(3), m.group(4), [])
            out.append(cur)
        elif ln == "":
            cur = None
        elif cur is not None and "=" in ln:
            cur[4].append(tuple(ln.split("=", 1)))
    return out


def hotplug_usb(evs, port):
    """The USB subsystem's events of the device at PORT (1-1) and of its
    interfaces, and the HID core's below them (what: hid, hidraw):
    [(source, action, what, [(key, value)])], values of HOTPLUG_PLACE
    written -, HOTPLUG_REAL's left out; and the others."""
    mine, others = [], []
    for src, action, devpath, subsys, kv in evs:
        last = devpath.rsplit("/", 1)[-1]
        usb = subsys == "usb" and (last == port or last.startswith(port + ":"))
        hid = subsys in ("hid", "hidraw") and "/%s:" % port in devpath
        if usb or hid:
            what = subsys if hid else last.split(":", 1)[1] if ":" in last else "device"
            # hidraw's major is dynamic on both (monfs's is CUSE's in
            # monfs run as root)
            place = lambda k: k in HOTPLUG_PLACE or (subsys == "hidraw" and k == "MAJOR")
            kv = [(k, "-" if place(k) else SLOT.sub("-0000:00:SLOT-", v))
                  for k, v in kv if k not in HOTPLUG_REAL]
            mine.append((src, action, what, kv))
        elif "/%s/" % port in devpath + "/" or "/%s:" % port in devpath:
            others.append((src, action, subsys, last))
    return mine, others


def per_object(evs):
    """EVS [(action, what, kv)] grouped by object (what), each object's in
    their order, the objects sorted by name."""
    return sorted(evs, key=lambda e: e[1])


def show_evs(evs):
    return " / ".join("%s %s %s" % (a, w, ",".join("%s=%s" % x for x in kv)) for a, w, kv in evs)


def hotplug_compare():
    seen_real = OrderedDict()
    for dev, port, label in HOTPLUG_DEVICES:
        for direction in ("unplug", "plug"):
            name = "%s_%s" % (dev, direction)
            kall, mall = monitor_events("kernel", name), monitor_events("fuse", name)
            if kall is None or mall is None:
                res("FAIL", "hot-plug: %s's %s: no udevadm monitor recording" % (label, direction),
                    "kernel %s, monfs %s" % ("recorded" if kall is not None else "missing",
                                            "recorded" if mall is not None else "missing"))
                continue
            for evs in (kall, mall):
                for src, action, devpath, subsys, kv in evs:
                    for k, v in kv:
                        if k in HOTPLUG_REAL:
                            seen_real.setdefault(k, set()).add(v)
            kev, kother = hotplug_usb(kall, port)
            mev, mother = hotplug_usb(mall, port)
            for src in ("KERNEL", "UDEV"):
                k = [e[1:] for e in kev if e[0] == src]
                m = [e[1:] for e in mev if e[0] == src]
                if src == "UDEV":
                    # udevd's workers handle sibling interfaces at once,
                    # so their events come in either order: each object's
                    # own events keep theirs, objects by name.
                    k, m = per_object(k), per_object(m)
                title = "hot-plug: %s's %s, %s events (usb, hid, hidraw): " % (label, direction, src)
                ka, ma = [(a, w) for a, w, _ in k], [(a, w) for a, w, _ in m]
                if not check(bool(k) and ka == ma, title + "the same actions in the same order (%d)" % len(k),
                             "kernel: %s || monfs: %s" % (" ".join("%s %s" % x for x in ka),
                                                         " ".join("%s %s" % x for x in ma))):
                    continue
                diffs = []
                for (a, w, kkv), (_, _, mkv) in zip(k, m):
                    kk, mk = [x for x, _ in kkv], [x for x, _ in mkv]
                    if kk != mk:
                        diffs.append("%s %s: keys: kernel %s, monfs %s" % (a, w, ",".join(kk), ",".join(mk)))
                    kd, md = dict(kkv), dict(mkv)
                    for key in kk:
                        if key in md and kd[key] != md[key]:
                            diffs.append("%s %s: %s: kernel %r, monfs %r" % (a, w, key, kd[key], md[key]))
                check(not diffs, title + "each event's keys in order and values",
                      " | ".join(diffs) if diffs else show_evs(k))
            res("INFO", "hot-plug: %s's %s: the other subsystems' events under it (monfs simulates "
                "USB's, HID's and hidraw's only)"
                % (label, direction),
                "kernel: %s || monfs: %s" % (" ".join("%s %s %s(%s)" % e for e in kother) or "none",
                                              " ".join("%s %s %s(%s)" % e for e in mother) or "none"))
    res("INFO", "hot-plug: not compared as values (places and times): %s" % ", ".join(HOTPLUG_PLACE),
        "; ".join("%s: %s" % kv for kv in HOTPLUG_PLACE.items()))
    res("INFO", "hot-plug: the PCI slot in qemu's serial strings (ID_SERIAL, ID_SERIAL_SHORT, ...) not compared",
        "qemu's serial names the controller's PCI address (-0000:00:SS.F-), which the guest's device "
        "order decides; monfs's default is one fixed address")
    for k, why in HOTPLUG_REAL.items():
        res("INFO", "hot-plug: %s left out: %s" % (k, why), "values seen: %s" % sorted(seen_real.get(k, ())))
    if not HOTPLUG_REAL:
        res("INFO", "hot-plug: no property of the USB events is left out as one only a real system has")
    res("INFO", "hot-plug: the host's answers (qemu)", (read("kernel", "hotplug.txt") or "").strip().replace("\n", " | "))


hotplug_compare()

# ------------------------------------------------------------------ the input layer
# Step K4e (kernel/input) against M4e (fuse/input: the mount's sys/class/input
# and dev/input/eventN files) and M5e (run/input: inside `monfs run`, where as
# root with /dev/cuse the event nodes are character devices, with udev's
# database and links, and udevadm monitor of the keyboard's unplug and plug),
# for qemu's keyboard, tablet and mouse. What legitimately differs is written
# as a placeholder: the input and event numbers (the order devices came in),
# the HID device's number (.NNNN), the PCI address of the host controller
# (qemu's slot, monfs's one per bus), the USB device number, times.
INPUT_DEVS = ("kbd", "tablet", "mouse")
PCI = re.compile(r"0000:00:[0-9a-f]{2}\.[0-7]")
PCI_TAG = re.compile(r"0000_00_[0-9a-f]{2}_[0-7]")
PCI_HEX = re.compile(r"303030303a30303a3[0-9a-f]3[0-9a-f]2e3[0-7]")  # "0000:00:SS.F" in hex
HIDDEV = re.compile(r"(0003:0627:0001)\.[0-9A-F]{4}")
INPUT_SIDES = [("fuse", "fuse/input", "the mount's files (M4e)"), ("run", "run/input", "monfs run (M5e)")]


def input_devices(d):
    """devices.txt of an input directory: {dev: (inputN, eventN, path, devnum or None)}"""
    out = {}
    for ln in lines(d, "devices.txt") or []:
        f = ln.split()
        if len(f) >= 4:
            out[f[0]] = (f[1], f[2], f[3], int(f[4]) if len(f) > 4 else None)
    return out


HCD = re.compile(r"/devices/(pci0000:00/0000:00:[0-9a-f]{2}\.[0-7]|platform/monfs_hcd\.\d+)/usb")
INPUT_MAJOR = [False]  # True: the event nodes' major is CUSE's (a dynamic one), a place too


def input_norm(s, info):
    """S with the places of INFO (inputN, eventN, ...) written as placeholders"""
    inp, ev = info[0], info[1]
    evn = int(ev[5:])
    s = HCD.sub("/devices/HCD/usb", s)
    # udev's ID_PATH (and the by-path links) and ID_PATH_TAG name the
    # controller: pci-0000:00:03.0 on qemu, platform-monfs_hcd.1 on monfs;
    # path_id's tag keeps '-' and makes any other non-alphanumeric '_'
    s = re.sub(r"\b(pci-0000:00:[0-9a-f]{2}\.[0-7]|platform-monfs_hcd\.\d+)-usb-", "HCDPATH-usb-", s)
    s = re.sub(r"\b(pci-0000_00_[0-9a-f]{2}_[0-7]|platform-monfs_hcd_\d+)-usb-", "HCDTAG-usb-", s)
    s = PCI.sub("PCI", s)
    s = PCI_TAG.sub("PCI_TAG", s)
    s = PCI_HEX.sub("PCIHEX", s)
    s = HIDDEV.sub(r"\1.NNNN", s)
    s = re.sub(r"(?<!-[0-9]/)\b%s\b" % inp, "inputN", s)
    s = re.sub(r"\b%s\b" % ev, "eventN", s)
    s = re.sub(r"\b13:%d\b" % (64 + evn), "13:MINOR", s)
    s = re.sub(r"^MINOR=%d$" % (64 + evn), "MINOR=MINOR", s)
    if INPUT_MAJOR[0]:
        s = re.sub(r"\b\d+:(%d|MINOR)\b" % (64 + evn), "MAJOR:MINOR", s)
        s = re.sub(r"^MAJOR=\d+$", "MAJOR=MAJOR", s)
    s = re.sub(r"\b(usb-PCI-[0-9])/", r"\1/", s)
    return s


def sysdump_entries(d, dev, info):
    """*_sysfs.txt: OrderedDict {path: (header, [content lines])}, normalized"""
    t = read(d, "%s_sysfs.txt" % dev)
    if t is None:
        return None
    out, cur = OrderedDict(), None
    for ln in t.split("\n"):
        if ln.startswith("# "):
            continue
        if ln.startswith("== "):
            body = input_norm(ln[3:], info)
            m = re.match(r"^(.*?)( \(.*\)| -> .*)$", body)
            p, h = (m.group(1), m.group(2)) if m else (body, "")
            if INPUT_MAJOR[0] and p in ("eventN/dev", "eventN/uevent"):
                h = re.sub(r", \d+ bytes", ", B bytes", h)  # the major's digits
            cur = out.setdefault(p, [h, []])
        elif cur is not None and ln:
            cur[1].append(input_norm(ln[2:] if ln.startswith("  ") else ln, info))
    return out


def input_sysfs_compare(kd, side, sd, label):
    for dev in INPUT_DEVS:
        if dev not in kd or dev not in sd:
            res("FAIL", "input %s: %s's input device in sysfs" % (label, dev),
                "kernel %s, monfs %s" % (kd.get(dev), sd.get(dev)))
            continue
        k = sysdump_entries("kernel/input", dev, kd[dev])
        m = sysdump_entries(side, dev, sd[dev])
        if k is None or m is None:
            res("FAIL", "input %s: %s's sysfs dump" % (label, dev), "kernel %s, monfs %s" % (k is not None, m is not None))
            continue
        kmice = sorted(p for p in k if re.match(r"mouse\d+(/|$)", p) and p not in m)
        for p in kmice:
            del k[p]
        if kmice:
            res("INFO", "input %s: %s: mousedev's mouseN under inputN left out: monfs does not simulate mousedev"
                % (label, dev), " ".join(kmice))
        kp, mp = set(k), set(m)
        check(kp == mp, "input %s: %s: the same files, links and directories under inputN (%d; power/ left out)" % (label, dev, len(kp)),
              "only the kernel's: %s || only monfs's: %s" % (" ".join(sorted(kp - mp)) or "none", " ".join(sorted(mp - kp)) or "none"))
        diffs, led_trig = [], []
        for p in k:
            if p not in m:
                continue
            (kh, kc), (mh, mc) = k[p], m[p]
            if p.endswith("/trigger") and kh == mh and kc != mc:
                led_trig.append("%s: kernel %r, monfs %r" % (p, " ".join(kc), " ".join(mc)))
                continue
            if kh != mh:
                diffs.append("%s: kernel%s, monfs%s" % (p, kh, mh))
            if kc != mc:
                diffs.append("%s: kernel %r, monfs %r" % (p, " | ".join(kc), " | ".join(mc)))
        leds = [p for p in k if "::" in p and p.count("/") == 0]
        check(not diffs, "input %s: %s: each attribute's mode, size and value, each link's target%s" % (
            label, dev, " (LED class devices included: %s)" % " ".join(leds) if leds else ""),
            " | ".join(diffs) if diffs else "%d entries" % len(k))
        if led_trig:
            # the trigger list names every LED trigger the system has
            # registered (cpuN for each CPU, disk-*, mtd, ...)
            kt = [x for x in led_trig]
            res("FAIL", "input %s: %s: the LED triggers (the list and the one selected)" % (label, dev), " | ".join(kt))
        # /sys/class/leds links
        kl = [input_norm(re.sub(r"^/sys/class/", "/class/", ln), kd[dev]) for ln in lines("kernel/input", "%s_ls.txt" % dev) or []
              if ln.startswith("/sys/class/leds/")]
        ml = [input_norm(ln, sd[dev]) for ln in lines(side, "%s_ls.txt" % dev) or [] if ln.startswith("/class/leds/")]
        if kl or ml:
            check(kl == ml, "input %s: %s: the LED class devices' links in class/leds (%d)" % (label, dev, len(kl)),
                  "kernel: %s || monfs: %s" % (" | ".join(kl), " | ".join(ml)))


# evdev_probe: the calls whose answers a FUSE file cannot give: EVIOCGRAB
# and EVIOCREVOKE take their argument as a value, which FUSE reads as a
# pointer (it copies the int in first: EFAULT), and what follows from a
# grab or a revoke that did not happen.
FUSE_GRAB = ("open_second", "EVIOCGRAB", "close fd2", "EVIOCREVOKE", "EVIOCRMFF")
# Both transports (FUSE, CUSE): the kernel's fuse module answers a read of
# 0 bytes itself (0), without asking the filesystem.
ZERO_READ = ("read(0) ",)
FUSE_VFS = ("ioctl FIONREAD",)
# The tablet's position (EVIOCGABS of X and Y): qemu's was never moved
# before the probe, monfs's moves about by itself.
def abs_value(ln):
    ln = re.sub(r"^(EVIOCGABS\((0|0x1)\) 0 value=)\d+", r"\1POS", ln)
    return re.sub(r"^(EVIOCGABS\(0\)size8 0 hex=)[0-9a-f]{8}", r"\1POSHEX__", ln)
REVOKED = re.compile(r"(\brevoked\b|^open_after_revoke)")


def probe_lines(d, dev, info):
    return [input_norm(ln, info) for ln in lines(d, "%s_probe.txt" % dev) or []]


def probe_split(ls):
    """(the lines compared, the zero-length reads, the positions)"""
    z = [ln for ln in ls if ln.startswith(ZERO_READ)]
    p = [ln for ln in ls if abs_value(ln) != ln]
    return [abs_value(ln) for ln in ls if not ln.startswith(ZERO_READ)], z, p


def input_probe_compare(kd, side, sd, label, fuse):
    import difflib
    for dev in INPUT_DEVS:
        if dev not in kd or dev not in sd:
            continue
        k, kz, kpos = probe_split(probe_lines("kernel/input", dev, kd[dev]))
        m, mz, mpos = probe_split(probe_lines(side, dev, sd[dev]))
        res("INFO", "input %s: %s: evdev_probe's reads of 0 bytes not compared: the kernel's fuse module (FUSE and "
            "CUSE) answers them itself" % (label, dev), "kernel: %s || monfs: %s" % (" | ".join(kz), " | ".join(mz)))
        if kpos or mpos:
            res("INFO", "input %s: %s: the axes' current values (EVIOCGABS) not compared: qemu's tablet was not moved "
                "before the probe, monfs's moves by itself" % (label, dev),
                "kernel: %s || monfs: %s" % (" | ".join(kpos), " | ".join(mpos)))
        diffs, infos, enosys = [], [], []
        sm = difflib.SequenceMatcher(a=k, b=m, autojunk=False)
        for op, a0, a1, b0, b1 in sm.get_opcodes():
            if op == "equal":
                continue
            ka, mb = k[a0:a1], m[b0:b1]
            for i in range(max(len(ka), len(mb))):
                kl = ka[i] if i < len(ka) else "(none)"
                ml = mb[i] if i < len(mb) else "(none)"
                grabby = kl.startswith(FUSE_GRAB) or ml.startswith(FUSE_GRAB) or REVOKED.search(kl) or REVOKED.search(ml)
                if "-ENOSYS" in kl and kl.replace("-ENOSYS", "-ENOTTY") == ml:
                    enosys.append("kernel %r, monfs %r" % (kl, ml))
                elif fuse and kl.startswith(FUSE_VFS) and ml.startswith(FUSE_VFS):
                    infos.append("kernel %r, monfs %r (the VFS answers FIONREAD on a regular file itself: its size "
                                 "less the position)" % (kl, ml))
                elif fuse and grabby and ("-EFAULT" in ml or REVOKED.search(kl) or kl.startswith(FUSE_GRAB)):
                    infos.append("kernel %r, monfs %r" % (kl, ml))
                else:
                    diffs.append("kernel %r, monfs %r" % (kl, ml))
        krc, mrc = rc("kernel/input", "%s_probe.txt.rc" % dev), rc(side, "%s_probe.txt.rc" % dev)
        check(bool(k) and not diffs and krc == mrc,
              "input %s: %s: evdev_probe%s answers the kernel's%s (%d lines)" % (
                  label, dev, " --led" if dev == "kbd" else "", ", but the grabs and the revoke" if fuse else "", len(k)),
              ("exit kernel %s, monfs %s; " % (krc, mrc)) + (" | ".join(diffs) if diffs else "same"))
        if enosys:
            res("INFO", "input %s: %s: ENOSYS (EVIOCGREP without EV_REP, EVIOCRMFF) reaches the caller as ENOTTY: "
                "the kernel's fuse module translates it for FUSE and CUSE alike (fs/fuse/ioctl.c)" % (label, dev),
                " | ".join(enosys))
        if fuse:
            res("INFO", "input %s: %s: evdev_probe's EVIOCGRAB and EVIOCREVOKE calls (and what follows from them) on a FUSE file: "
                "FUSE copies the int argument in as if it were a pointer (EFAULT); compared on monfs run's character device"
                % (label, dev), " | ".join(infos) if infos else "no difference")


# The usbmon lines of the EV_LED writes' SET_REPORTs (usbhid's control URB
# to the keyboard's ep0): tags and times aside, the device number as DEV.
U_TEXT = re.compile(r"^\S+ \d+ ([SCE]) ([CBIZ][io]):(\d+):(\d+):(\d+) (.*)$")


def set_report_lines(d, fn, devnum):
    """SET_REPORT (21 09) submissions to DEVNUM's ep0 and their completions (by URB tag)"""
    out, tags = [], set()
    for ln in lines(d, fn) or []:
        m = U_TEXT.match(ln)
        if not m or int(m.group(4)) != devnum or m.group(2) != "Co" or m.group(5) != "0":
            continue
        tag = ln.split(" ", 1)[0]
        if m.group(1) == "S" and m.group(6).startswith("s 21 09 "):
            tags.add(tag)
        elif tag not in tags:
            continue
        else:
            tags.discard(tag)
        out.append("%s %s:%s:DEV:0 %s" % (m.group(1), m.group(2), m.group(3), m.group(6)))
    return out


def set_report_urbs(d, fn, devnum):
    """the URB addresses of the SET_REPORT (21 09) submissions to DEVNUM's ep0"""
    out = []
    for ln in lines(d, fn) or []:
        m = U_TEXT.match(ln)
        if m and m.group(1) == "S" and m.group(2) == "Co" and int(m.group(4)) == devnum \
                and m.group(6).startswith("s 21 09 "):
            out.append(ln.split(" ", 1)[0])
    return out


def kernel_devnum(dev, info, fn):
    """the kernel's device number: devices.txt's, or the one device whose
    interrupt IN completions in FN carry data"""
    if info[3] is not None:
        return info[3]
    seen = set()
    for ln in lines("kernel/input", fn) or []:
        m = U_TEXT.match(ln)
        if m and m.group(1) == "C" and m.group(2) == "Ii" and m.group(4) != "001" and " = " in ln:
            seen.add(int(m.group(4)))
    return seen.pop() if len(seen) == 1 else None


# The events of each interrupt IN report, pairs in order: a report that
# changes nothing gives no events. hid-input's and the input core's rules,
# as a model (checked against the kernel's own pairs first): a keyboard's
# modifier bits then its key array (each old key released, then each new
# key pressed, index by index), EV_MSC MSC_SCAN before each key that
# changes; a pointer's buttons (MSC_SCAN, KEY), then X, Y (EV_REL, not 0;
# or EV_ABS, only a changed value) and the wheel (REL_WHEEL and
# REL_WHEEL_HI_RES, value * 120), a SYN_REPORT after any.
HID_KBD = [0, 0, 0, 0, 30, 48, 46, 32, 18, 33, 34, 35, 23, 36, 37, 38,
           50, 49, 24, 25, 16, 19, 31, 20, 22, 47, 17, 45, 21, 44, 2, 3,
           4, 5, 6, 7, 8, 9, 10, 11, 28, 1, 14, 15, 57, 12, 13, 26,
           27, 43, 43, 39, 40, 41, 51, 52, 53, 58, 59, 60, 61, 62, 63, 64]
MODS = [29, 42, 56, 125, 97, 54, 100, 126]


def s8(b):
    return b - 256 if b > 127 else b


def model(dev, prev, cur):
    ev = []
    if dev == "kbd":
        if len(cur) < 8:
            return None
        pm, cm = prev[0], cur[0]
        for i in range(8):
            if (pm >> i) & 1 != (cm >> i) & 1:
                v = (cm >> i) & 1
                ev += [(4, 4, 0x700e0 + i), (1, MODS[i], v)]
        old, new = list(prev[2:8]), list(cur[2:8])
        for n in range(6):
            if old[n] not in new and old[n] >= 4:
                ev += [(4, 4, 0x70000 + old[n]), (1, HID_KBD[old[n]] if old[n] < 64 else -1, 0)]
            if new[n] not in old and new[n] >= 4:
                ev += [(4, 4, 0x70000 + new[n]), (1, HID_KBD[new[n]] if new[n] < 64 else -1, 1)]
    else:
        pb, cb = prev[0] & 7, cur[0] & 7
        for i in range(3):
            if (pb >> i) & 1 != (cb >> i) & 1:
                ev += [(4, 4, 0x90001 + i), (1, 272 + i, (cb >> i) & 1)]
        if dev == "mouse":
            if len(cur) < 3:
                return None
            for code, v in ((0, s8(cur[1])), (1, s8(cur[2]))):
                if v:
                    ev.append((2, code, v))
            wheel = s8(cur[3]) if len(cur) > 3 else 0
        else:
            if len(cur) < 6:
                return None
            for code, off in ((0, 1), (1, 3)):
                v, pv = cur[off] | cur[off + 1] << 8, prev[off] | prev[off + 1] << 8
                if v != pv:
                    ev.append((3, code, v))
            wheel = s8(cur[5])
        if wheel:
            ev += [(2, 8, wheel), (2, 11, wheel * 120)]
    return ev + [(0, 0, 0)] if ev else []


def int_reports(d, fn, devnum):
    """the data of each interrupt IN completion of DEVNUM's endpoint 1 with status 0, in order"""
    out = []
    for ln in lines(d, fn) or []:
        m = U_TEXT.match(ln)
        if not m or m.group(1) != "C" or m.group(2) != "Ii" or int(m.group(4)) != devnum:
            continue
        rest = m.group(6).split(" = ", 1)
        if not rest[0].startswith("0:") or len(rest) < 2:
            continue
        out.append(bytes.fromhex(rest[1].replace(" ", "")))
    return out


def is_repeat(f):
    return len(f) == 2 and f[0][0] == 1 and f[0][2] == 2 and f[1] == (0, 0, 1)


def frames(d, dev, repeats=None):
    """the frames of *_events.txt; autorepeat's (KEY value 2, SYN_REPORT 1) go to REPEATS"""
    out, cur = [], []
    for ln in lines(d, "%s_events.txt" % dev) or []:
        if ln.startswith("open"):
            continue
        t = tuple(int(x) for x in ln.split())
        cur.append(t)
        if t[:2] == (0, 0):
            if is_repeat(cur):
                if repeats is not None:
                    repeats.append(cur)
            else:
                out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def pair_reports(dev, reports, frs, first_prev):
    """[(prev, report, frame)] with the model's prediction deciding which
    reports gave a frame; FIRST_PREV None: the state before the first
    report is unknown (it is then the key of no pair). None when the
    counts do not fit."""
    zero = bytes(8)
    for first_gives in ((True, False) if first_prev is None else (None,)):
        pairs, fi, prev, ok = [], 0, first_prev, True
        for i, r in enumerate(reports):
            if i == 0 and prev is None:
                gives = first_gives
            else:
                pred = model(dev, prev, r)
                gives = bool(pred)
            if gives:
                if fi >= len(frs):
                    ok = False
                    break
                pairs.append((prev, r, frs[fi]))
                fi += 1
            else:
                pairs.append((prev, r, []))
            prev = r
        if ok and fi == len(frs):
            return pairs
    return None


def key_of(dev, prev, r):
    if prev is None:
        return None
    if dev == "kbd":
        return (prev[:1] + prev[2:8]).hex() + ">" + (r[:1] + r[2:8]).hex()
    if dev == "mouse":
        return "%02x>%s" % (prev[0] & 7, r.hex())
    return prev[:5].hex() + ">" + r.hex()


def show_frame(f):
    return ",".join("%d %d %d" % e for e in f) or "none"


def input_events_compare(kd, side, sd, label, first):
    kpairs = {}
    for dev in INPUT_DEVS:
        if dev not in kd:
            continue
        kn = kernel_devnum(dev, kd[dev], "%s_1u.txt" % dev)
        kr = int_reports("kernel/input", "%s_1u.txt" % dev, kn) if kn else []
        pk = pair_reports(dev, kr, frames("kernel/input", dev), bytes(8))
        kpairs[dev] = pk
        if first:  # the model against the kernel: once
            bad = [(p, r, f) for p, r, f in pk or [] if model(dev, p, r) != f]
            check(pk is not None and not bad, "input: %s: the comparison's model of hid-input gives the kernel's frames "
                  "for the kernel's reports (%d reports)" % (dev, len(kr)),
                  " | ".join("%s>%s: kernel %s, model %s" % (p.hex(), r.hex(), show_frame(f), show_frame(model(dev, p, r)))
                             for p, r, f in bad) if pk is not None else
                  "the kernel's %d reports and %d frames do not pair" % (len(kr), len(frames("kernel/input", dev))))
    for dev in INPUT_DEVS:
        if dev not in sd:
            continue
        mn = sd[dev][3]
        mr = int_reports(side, "events_1u.txt", mn) if mn is not None else []
        reps = []
        mf = frames(side, dev, reps)
        if reps:
            res("INFO", "input %s: %s: autorepeat frames (a key held past the delay) left out of the pairing" % (label, dev),
                "%d: %s" % (len(reps), " / ".join(show_frame(f) for f in reps[:8])))
        pm = pair_reports(dev, mr, mf, None)
        if not check(pm is not None and len(mr) > 0,
                     "input %s: %s: monfs's interrupt IN reports and event frames pair in order (%d reports, %d frames)"
                     % (label, dev, len(mr), len(mf)),
                     "reports: %s || frames: %s" % (" ".join(r.hex() for r in mr[:40]), " / ".join(show_frame(f) for f in mf[:40]))):
            continue
        # same report (with the state it found) -> same frame as the kernel's
        km = OrderedDict()
        for p, r, f in kpairs.get(dev) or []:
            km.setdefault(key_of(dev, p, r), f)
        mm = OrderedDict()
        for p, r, f in pm:
            k = key_of(dev, p, r)
            if k is not None:
                mm.setdefault(k, []).append(f)
        common = [k for k in km if k in mm]
        diffs = ["%s: kernel %s, monfs %s" % (k, show_frame(km[k]), " ; ".join(sorted(set(show_frame(f) for f in mm[k]))))
                 for k in common if any(f != km[k] for f in mm[k])]
        if common:
            check(not diffs, "input %s: %s: the reports seen on both (previous>report), the same event frame (%d: %s)"
                  % (label, dev, len(common), " ".join(common)), " | ".join(diffs) or "same")
        else:
            res("INFO", "input %s: %s: no report (with the same previous one) seen on both; the model below checks "
                "monfs's" % (label, dev), "kernel: %s" % " ".join(km))
        bad = [(p, r, f) for p, r, f in pm if p is not None and model(dev, p, r) != f]
        check(not bad, "input %s: %s: each of monfs's reports gives the frame hid-input gives it (the model checked "
              "against the kernel's; %d reports, %d distinct)" % (label, dev, len(pm), len(mm)),
              " | ".join("%s>%s: monfs %s, hid-input %s" % (p.hex(), r.hex(), show_frame(f), show_frame(model(dev, p, r)))
                         for p, r, f in bad[:12]) or "same")


def evtest_header(d, dev, info):
    out = []
    for ln in lines(d, "%s_evtest.txt" % dev) or []:
        if ln.startswith("Testing ..."):
            break
        if re.match(r"^ +Value +-?\d+$", ln):
            continue
        out.append(input_norm(ln, info))
    return out


def input_evtest_compare(kd, side, sd, label, fuse):
    for dev in INPUT_DEVS:
        if dev not in kd or dev not in sd:
            continue
        k, m = evtest_header("kernel/input", dev, kd[dev]), evtest_header(side, dev, sd[dev])
        grab = [ln for ln in m if ln not in k and fuse]
        mg = [ln for ln in m if ln in k] if fuse else m
        check(bool(k) and k == mg, "input %s: %s: evtest's header (the device, its events, codes and ranges; "
              "the axes' current values left out)" % (label, dev),
              "same" if k == mg else "kernel: %s || monfs: %s" % (" | ".join(k), " | ".join(m)))
        if grab:
            res("INFO", "input %s: %s: evtest's lines only monfs's FUSE file gives (evtest's EVIOCGRAB test: EFAULT on "
                "a FUSE file)" % (label, dev), " | ".join(grab))


def udevadm_blocks(d, dev, info, all_info):
    """*_udevadm.txt: {header: {"S": set, "E": {k: v}, other letters: value}}"""
    out, cur = OrderedDict(), None
    for ln in lines(d, "%s_udevadm.txt" % dev) or []:
        if ln.startswith("### "):
            cur = out.setdefault(input_norm(ln[4:], info), OrderedDict([("S", set()), ("E", OrderedDict())]))
            continue
        if cur is None or len(ln) < 3 or ln[1:3] != ": ":
            continue
        ltr, v = ln[0], input_norm(ln[3:], info)
        if ltr == "S":
            cur["S"].add(v)
        elif ltr == "E":
            k, _, val = v.partition("=")
            if k == "DEVLINKS":
                val = " ".join(sorted(val.split()))
            if k == "MINOR":
                val = "MINOR" if val == "MINOR" or val == str(64 + int(info[1][5:])) else val
            cur["E"][k] = val
        else:
            cur[ltr] = v
    return out


UDEV_TIME = ("USEC_INITIALIZED",)


def input_udev_compare(kd, side, sd, label):
    for dev in INPUT_DEVS:
        if dev not in kd or dev not in sd:
            continue
        k = udevadm_blocks("kernel/input", dev, kd[dev], kd)
        m = udevadm_blocks(side, dev, sd[dev], sd)
        mice = [h for h in k if "/mouse" in h]
        only_k = [h for h in k if h not in m and h not in mice]
        only_m = [h for h in m if h not in k]
        check(not only_k and not only_m, "input %s: %s: udevadm info of the input, event and LED devices (%d)"
              % (label, dev, len([h for h in k if h not in mice])),
              "only the kernel's: %s || only monfs's: %s" % (" | ".join(only_k) or "none", " | ".join(only_m) or "none"))
        if mice:
            res("INFO", "input %s: %s: mousedev's mouseN (udevadm info) left out: monfs does not simulate mousedev"
                % (label, dev), " | ".join(mice))
        diffs = []
        for h in k:
            if h not in m:
                continue
            kb, mb = k[h], m[h]
            for ltr in sorted(set(kb) | set(mb)):
                if ltr == "E":
                    ke, me = kb["E"], mb["E"]
                    kk = [x for x in ke if x not in UDEV_TIME]
                    mk = [x for x in me if x not in UDEV_TIME]
                    if set(kk) != set(mk):
                        diffs.append("%s: E keys only the kernel's %s, only monfs's %s" % (
                            h, ",".join(x for x in kk if x not in me) or "none", ",".join(x for x in mk if x not in ke) or "none"))
                    for x in kk:
                        if x in me and ke[x] != me[x]:
                            diffs.append("%s: %s: kernel %r, monfs %r" % (h, x, ke[x], me[x]))
                elif ltr == "R":
                    continue  # the number in the name (inputN, eventN)
                elif kb.get(ltr) != mb.get(ltr):
                    diffs.append("%s: %s: kernel %r, monfs %r" % (h, ltr, kb.get(ltr), mb.get(ltr)))
        check(not diffs, "input %s: %s: udev's properties (values, USEC_INITIALIZED aside), names and links "
              "(S: and DEVLINKS as sets)" % (label, dev), " | ".join(diffs) or "same")


def input_links_compare(kd, side, sd, label):
    """ls -l /dev/input/by-id and by-path: the three devices' links"""
    def links(d, fn, devs):
        out = set()
        cur = None
        for ln in lines(d, fn) or []:
            if ln.endswith(":"):
                cur = ln[:-1]
                continue
            m = re.search(r" (\S+) -> (\S+)$", ln)
            if m and cur in ("/dev/input/by-id", "/dev/input/by-path"):
                target = m.group(2).rsplit("/", 1)[-1]
                for dev, info in devs.items():
                    if target == info[1]:
                        out.add("%s/%s -> %s" % (cur, input_norm(m.group(1), info), dev))
        return out
    k = links("kernel/input", "ls_dev_input_end.txt", kd)
    m = links(side, "ls_dev_input_end.txt", sd)
    km = {x for x in k if "mouse ->" not in x or "event-mouse" in x}
    kmice = k - km
    check(bool(km) and km == m, "input %s: the event nodes' links in /dev/input/by-id and by-path (%d)" % (label, len(km)),
          "only the kernel's: %s || only monfs's: %s" % (" | ".join(sorted(km - m)) or "none", " | ".join(sorted(m - km)) or "none"))
    if kmice:
        res("INFO", "input %s: mousedev's links left out (monfs does not simulate mousedev)" % label, " | ".join(sorted(kmice)))


INPUT_UEV_OBJ = [(re.compile(r"/input/input\d+/input\d+::(\w+)$"), lambda m: "leds %s" % m.group(1)),
                 (re.compile(r"/input/input\d+/event\d+$"), lambda m: "event"),
                 (re.compile(r"/input/input\d+/mouse\d+$"), lambda m: "mouse"),
                 (re.compile(r"/input/input\d+$"), lambda m: "input"),
                 (re.compile(r"/hidraw/hidraw\d+$"), lambda m: "hidraw"),
                 (re.compile(r"/0003:0627:0001\.[0-9A-F]{4}$"), lambda m: "hid"),
                 (re.compile(r"/wakeup/wakeup\d+$"), lambda m: "wakeup"),
                 (re.compile(r"/1-1:1\.0$"), lambda m: "usb interface"),
                 (re.compile(r"/1-1$"), lambda m: "usb device")]


def input_uevent_objects(evs, src):
    out = []
    for s, action, devpath, subsys, kv in evs or []:
        if s != src or "/1-1" not in devpath:
            continue
        for rx, name in INPUT_UEV_OBJ:
            mm = rx.search(devpath)
            if mm:
                out.append("%s %s" % (action, name(mm)))
                break
        else:
            out.append("%s ?%s(%s)" % (action, devpath.rsplit("/", 1)[-1], subsys))
    return out


def input_hotplug_compare():
    for direction in ("unplug", "plug"):
        k = monitor_events("kernel/input", "kbd_%s" % direction)
        m = monitor_events("run/input", "kbd_%s" % direction)
        if k is None or m is None:
            res("FAIL", "input: the keyboard's %s with evdev: no udevadm monitor recording" % direction,
                "kernel %s, monfs %s" % (k is not None, m is not None))
            continue
        ko, mo = input_uevent_objects(k, "KERNEL"), input_uevent_objects(m, "KERNEL")
        kw = [x for x in ko if x.endswith(" wakeup")]
        mw = [x for x in mo if x.endswith(" wakeup")]
        ko = [x for x in ko if not x.endswith(" wakeup")]
        mo = [x for x in mo if not x.endswith(" wakeup")]
        check(bool(ko) and ko == mo, "input: the keyboard's %s with evdev loaded, KERNEL events: usb, hid, input, "
              "event, leds and hidraw in the kernel's order (%d)" % (direction, len(ko)),
              "kernel: %s || monfs: %s" % (" / ".join(ko), " / ".join(mo)))
        if kw or mw:
            res("INFO", "input: the keyboard's %s: the USB device's wakeup source left out (monfs does not model "
                "wakeup sources)" % direction, "kernel: %s || monfs: %s" % (" / ".join(kw) or "none", " / ".join(mw) or "none"))
        # UDEV events: udevd's workers run at once, each object's own in order
        ku = sorted(input_uevent_objects(k, "UDEV"), key=lambda x: x.split(" ", 1)[1])
        mu = sorted(input_uevent_objects(m, "UDEV"), key=lambda x: x.split(" ", 1)[1])
        ku = [x for x in ku if not x.endswith(" wakeup")]
        mu = [x for x in mu if not x.endswith(" wakeup")]
        check(bool(ku) and ku == mu, "input: the keyboard's %s with evdev loaded, UDEV events per object, in each "
              "object's order (%d)" % (direction, len(ku)),
              "kernel: %s || monfs: %s" % (" / ".join(ku), " / ".join(mu)))
        # the input, event and leds events' properties, KERNEL and UDEV
        diffs, raced = [], []
        for src in ("KERNEL", "UDEV"):
            def props(evs):
                out = OrderedDict()
                for s, action, devpath, subsys, kv in evs:
                    if s != src or subsys not in ("input", "leds"):
                        continue
                    obj = [name(mm) for rx, name in INPUT_UEV_OBJ for mm in [rx.search(devpath)] if mm][:1]
                    ev = re.search(r"event\d+", devpath)
                    info = (re.search(r"input\d+", devpath).group(0), ev.group(0) if ev else "event999")
                    d = OrderedDict()
                    for key, val in kv:
                        if key in ("SEQNUM", "USEC_INITIALIZED"):
                            continue
                        val = input_norm(val, info)
                        if key == "DEVLINKS":
                            val = " ".join(sorted(val.split()))
                        if key == "MINOR" and info[1] != "event999" and val == str(64 + int(info[1][5:])):
                            val = "MINOR"
                        if key == "MAJOR" and cuse_ran:
                            val = "MAJOR"  # CUSE's dynamic major in monfs run
                        d[key] = val
                    out.setdefault("%s %s" % (action, obj[0] if obj else devpath), d)
                return out
            kp, mp = props(k), props(m)
            for o in kp:
                if o not in mp:
                    continue
                ke, me = kp[o], mp[o]
                if list(ke) != list(me):
                    diffs.append("%s %s keys: kernel %s, monfs %s" % (src, o, ",".join(ke), ",".join(me)))
                for x in ke:
                    if x in me and ke[x] != me[x]:
                        if (direction == "unplug" and x in ("ID_PATH", "ID_PATH_TAG", "ID_FOR_SEAT")
                                and me[x].startswith(ke[x])):
                            # udevd ran path_id after the interface had gone
                            raced.append("%s %s %s: kernel %r, monfs %r" % (src, o, x, ke[x], me[x]))
                            continue
                        diffs.append("%s %s %s: kernel %r, monfs %r" % (src, o, x, ke[x], me[x]))
        if raced:
            res("INFO", "input: the keyboard's %s: paths the kernel's udevd found cut short (path_id ran after the "
                "interface had left sysfs: an unplug's race, not a difference)" % direction, " | ".join(raced))
        check(not diffs, "input: the keyboard's %s: the input, event and leds events' properties, keys in order "
              "(SEQNUM, USEC_INITIALIZED aside; DEVLINKS as a set)" % direction, " | ".join(diffs) or "same")


def input_compare():
    kd = input_devices("kernel/input")
    if not kd:
        res("FAIL", "input: no kernel step K4e results (kernel/input/devices.txt)")
        return
    for side, d, label in INPUT_SIDES:
        sd = input_devices(d)
        if not sd:
            res("FAIL", "input %s: no results (%s/devices.txt)" % (label, d))
            continue
        fuse = side == "fuse"
        INPUT_MAJOR[0] = side == "run" and cuse_ran
        if INPUT_MAJOR[0]:
            res("INFO", "input %s: the event nodes' major (in sysfs, uevents, udev's database) not compared: CUSE's "
                "dynamic one (the kernel's evdev holds 13)" % label)
        if side == "run":
            types = [ln for dev in INPUT_DEVS for ln in lines(d, "%s_ls.txt" % dev) or [] if ln.startswith("/dev/input/")]
            if cuse_ran:
                check(bool(types) and all("character special file" in t for t in types),
                      "input %s: the event nodes are character devices (CUSE)" % label, " | ".join(types))
            else:
                res("INFO", "input %s: no CUSE in this run: the event nodes are the mount's files" % label, " | ".join(types))
                fuse = True
        input_sysfs_compare(kd, d, sd, label)
        input_probe_compare(kd, d, sd, label, fuse)
        # the EV_LED writes' SET_REPORTs
        kn = kernel_devnum("kbd", kd["kbd"], "kbd_1u.txt") if "kbd" in kd else None
        k = set_report_lines("kernel/input", "kbd_probe_1u.txt", kn) if kn else []
        m = set_report_lines(d, "kbd_probe_1u.txt", sd["kbd"][3]) if "kbd" in sd else []
        check(bool(k) and k == m, "input %s: the usbmon lines of the keyboard's EV_LED writes (CAPSL 1, 0): "
              "SET_REPORT on ep0 (%d)" % (label, len(k)), "kernel: %s || monfs: %s" % (" | ".join(k), " | ".join(m)))
        # usbhid sends them on its one control URB (urbctrl), one after the other
        ku = set_report_urbs("kernel/input", "kbd_probe_1u.txt", kn) if kn else []
        mu = set_report_urbs(d, "kbd_probe_1u.txt", sd["kbd"][3]) if "kbd" in sd else []
        check(len(ku) > 1 and len(set(ku)) == 1 and len(mu) == len(ku) and len(set(mu)) == 1,
              "input %s: the keyboard's EV_LED writes' SET_REPORTs all go on one URB (usbhid's urbctrl)" % label,
              "kernel: %s || monfs: %s" % (" ".join(ku), " ".join(mu)))
        input_evtest_compare(kd, d, sd, label, fuse)
        input_events_compare(kd, d, sd, label, side == INPUT_SIDES[0][0])
        if side == "run":
            input_udev_compare(kd, d, sd, label)
            input_links_compare(kd, d, sd, label)
    input_hotplug_compare()


input_compare()


# ------------------------------------------------------------------ cdc_acm (step K4t, the kernel only)
# The fresh measurement (kernel/tty: g_serial on dummy_hcd, cdc_acm's
# ttyACM0, tests/c/tty_acm.c) against the one the repository keeps
# (tests/data/kernel_acm/, which tests/tty.rs holds monfs to), so that a
# change of the kernel's (or of the guest's set-up) shows as a failure.
# The usbmon lines are compared as tests/tty.rs compares them (acm_streams
# there): URB tags and time stamps left out; every line in its endpoint's
# sequence; across endpoints, the order of all lines but the notification
# URB's completions with data and resubmissions and the read URBs'
# resubmissions, whose place the kernel does not fix (the device's timing;
# the reader may run before the callback resubmits).
KERNEL_ACM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "kernel_acm")


def kept_acm(name):
    try:
        with open(os.path.join(KERNEL_ACM, name)) as f:
            return f.read()
    except OSError:
        return None


def acm_streams(text):
    ordered, per_ep, read_completed, notify_submitted = [], OrderedDict(), False, False
    for ln in (text or "").split("\n"):
        w = ln.split(" ")[2:]
        if len(w) < 2 or ":3:002:" not in w[1]:
            continue
        f = " ".join(w)
        per_ep.setdefault(w[1], []).append(f)
        kind = w[1][:2]
        # the notification URB's first submission, and its killing
        notify_fixed = kind == "Ii" and ((w[0] == "S" and not notify_submitted) or
                                         (w[0] == "C" and len(w) > 2 and w[2].startswith("-")))
        if kind == "Ii" and w[0] == "S":
            notify_submitted = True
        if (kind != "Ii" or notify_fixed) and not (kind == "Bi" and w[0] == "S" and read_completed):
            ordered.append(f)
        if kind == "Bi" and w[0] == "C":
            read_completed = True
    return ordered, per_ep


def first_diff(a, b):
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return "line %d: kept %r, now %r" % (i + 1, x, y)
    return "same"


def acm_compare():
    T = "kernel/tty"
    if "flavour 6.12" not in (read("info.txt") or ""):
        res("INFO", "tty: the cdc_acm measurement not compared (tests/data/kernel_acm is 6.12's)")
        return
    if read(T, "tty_acm.txt") is None:
        res("FAIL", "tty: no kernel step K4t results (kernel/tty/tty_acm.txt)")
        return
    check(rc(T, "tty_acm.txt.rc") == 0, "tty: tty_acm /dev/ttyACM0 exited 0", (read(T, "tty_acm.err") or "").strip())
    for name, what in (("tty_acm.txt", "tty_acm's answers on ttyACM0"),
                       ("descriptors.hex", "g_serial's descriptors"),
                       ("bmCapabilities.txt", "the control interface's bmCapabilities"),
                       ("uevent.txt", "ttyACM0's uevent"),
                       ("drivers.txt", "the interfaces' drivers")):
        kept = (kept_acm(name) or "").split("\n")
        now = (read(T, name) or "").split("\n")
        check(kept == now and kept != [""], "tty: %s are tests/data/kernel_acm/%s's" % (what, name),
              first_diff(kept, now))
    # g_serial's manufacturer string is "Linux RELEASE with dummy_udc":
    # it changes with each kernel package, which is not a difference
    kept = [ln for ln in (kept_acm("device.txt") or "").split("\n") if not ln.startswith("manufacturer ")]
    now = [ln for ln in (read(T, "device.txt") or "").split("\n") if not ln.startswith("manufacturer ")]
    check(kept == now, "tty: g_serial's sysfs attributes (the manufacturer string, which carries the kernel "
          "release, aside)", first_diff(kept, now))
    # `ls -l`'s dates are the run's: the total, then each entry's mode,
    # links, owner, group, size, name and link target (as tests/tty.rs's
    # ls_entries, which also leaves out power/, which monfs does not model)
    def entries(t):
        out = []
        for ln in (t or "").split("\n"):
            w = ln.split()
            if w[:1] == ["total"]:
                out.append(" ".join(w))
            elif len(w) >= 9:
                out.append(" ".join(w[:5] + w[8:]))
        return out
    kept, now = entries(kept_acm("ls_class_tty_ttyACM0.txt")), entries(read(T, "ls_class_tty_ttyACM0.txt"))
    check(kept == now and kept, "tty: ls -l /sys/class/tty/ttyACM0/ (total, modes, links, owners, sizes, names, "
          "link targets; dates aside)", first_diff(kept, now))
    ko, ke = acm_streams(kept_acm("usbmon.txt"))
    no, ne = acm_streams(read(T, "usbmon.txt"))
    for ep in sorted(set(ke) | set(ne)):
        check(ke.get(ep) == ne.get(ep), "tty: usbmon %s's lines of the ttyACM0 session (URB tags, time stamps "
              "aside) are tests/data/kernel_acm/usbmon.txt's (%d)" % (ep, len(ke.get(ep, []))),
              first_diff(ke.get(ep, []), ne.get(ep, [])))
    check(ko == no and ko, "tty: the usbmon lines' order across endpoints (the notification URB's completions with "
          "data and resubmissions, the read URBs' resubmissions aside) is tests/data/kernel_acm/usbmon.txt's (%d)"
          % len(ko), first_diff(ko, no))
    res("INFO", "tty: usbmon's URB tags and time stamps not compared (the kernel's pointers and clock); the places "
        "of the notification URB's completions with data and resubmissions and of the read URBs' resubmissions "
        "among the other endpoints' lines not compared (the device's timing, and the reader against "
        "acm_read_bulk_callback)")


acm_compare()


# ------------------------------------------------------------------ ftdi_sio (step K4f, the kernel only)
# The fresh measurement (kernel/ftdi: qemu's usb-serial, an FTDI FT232BM,
# hot-plugged on bus 1 port 5; ftdi_sio's ttyUSB0; tests/c/tty_acm.c on it
# against a loopback; two stty runs; the unplug) against the one the
# repository keeps (tests/data/kernel_ftdi/, which monfs's ftdi_sio is
# held to), so that a change of the kernel's (or of the guest's set-up)
# shows as a failure. Left out: URB tags and time stamps; the device number
# the device got (it counts the hot-plugs before it: DEV); uevents'
# SEQNUM and udev's USEC_INITIALIZED; the order of udev's links (DEVLINKS,
# udevadm info's S: lines; udevd's own); ls -l's dates; dmesg's times; the
# root hub's lines of the plug and the unplug (how often the hub driver
# reads the port's status while it debounces depends on timing).
KERNEL_FTDI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "kernel_ftdi")
MON_HEAD_FTDI = re.compile(r"^(KERNEL|UDEV) *\[[0-9.]+\] +(\S+) +(\S+) \((\S+)\)$")


def ftdi_norm(text, devnum):
    """TEXT with the device number DEVNUM written DEV, and times left out"""
    if text is None:
        return None
    if devnum:
        d = int(devnum)
        text = text.replace(":1:%03d:" % d, ":1:DEV:").replace("001/%03d" % d, "001/DEV")
        text = text.replace("DEVNUM=%03d" % d, "DEVNUM=DEV")
        text = re.sub(r"(MAJOR=189\n(?:E: )?MINOR=)%d\b" % (d - 1), r"\g<1>DEV", text)
        text = re.sub(r"\bc 189:%d\b" % (d - 1), "c 189:DEV", text)
        text = re.sub(r"\bdevice( number)? %d\b" % d, r"device\1 DEV", text)
    text = re.sub(r"(?m)^\[ *[0-9.]+\] ", "", text)
    text = re.sub(r"(?m)^((?:E: )?USEC_INITIALIZED=)\d+$", r"\g<1>-", text)
    # udev's links, in an order of its own (DEVLINKS, udevadm info's S: lines): sorted
    text = re.sub(r"(?m)^((?:E: )?DEVLINKS=)(.*)$",
                  lambda m: m.group(1) + " ".join(sorted(m.group(2).split())), text)
    out, links = [], []
    for ln in text.split("\n") + [None]:
        if ln is not None and ln.startswith("S: "):
            links.append(ln)
            continue
        out += sorted(links)
        links = []
        if ln is not None:
            out.append(ln)
    return "\n".join(out)


def ftdi_sides(name):
    """NAME's lines, kept and now, normalised"""
    kept_dev = (read_abs(os.path.join(KERNEL_FTDI, "devnum.txt")) or "").strip()
    kept = ftdi_norm(read_abs(os.path.join(KERNEL_FTDI, name)), kept_dev)
    now = ftdi_norm(read("kernel/ftdi", name), (read("kernel/ftdi", "devnum.txt") or "").strip())
    return (kept or "").split("\n"), (now or "").split("\n")


def ftdi_usbmon(text, addrs):
    """usbmon lines of the devices ADDRS (":1:DEV:", ...) without URB tags and
    time stamps: (all in order; in order without the read URBs'
    resubmissions after the first completion; per endpoint)"""
    ordered, fixed, per_ep, read_completed = [], [], OrderedDict(), False
    for ln in text:
        w = ln.split(" ")[2:]
        if len(w) < 2 or not any(a in w[1] for a in addrs):
            continue
        f = " ".join(w)
        ordered.append(f)
        per_ep.setdefault(w[1], []).append(f)
        if not (w[1].startswith("Bi") and w[0] == "S" and read_completed):
            fixed.append(f)
        if w[1].startswith("Bi") and w[0] == "C":
            read_completed = True
    return ordered, fixed, per_ep


def ftdi_events(text):
    """udevadm monitor's events: ([KERNEL events], [UDEV events]), each the
    header without its time and the properties without SEQNUM"""
    out, cur = {"KERNEL": [], "UDEV": []}, None
    for ln in text:
        m = MON_HEAD_FTDI.match(ln)
        if m:
            cur = ["%s %s (%s)" % (m.group(2), m.group(3), m.group(4))]
            out[m.group(1)].append(cur)
        elif ln == "":
            cur = None
        elif cur is not None and "=" in ln and not ln.startswith("SEQNUM="):
            cur.append(ln)
    return [" | ".join(e) for e in out["KERNEL"]], [" | ".join(e) for e in out["UDEV"]]


def ftdi_ls(text):
    """ls -l's lines without their dates; other lines as they are"""
    out = []
    for ln in text:
        w = ln.split()
        out.append(" ".join(w[:5] + w[8:]) if len(w) >= 9 and w[0][:1] in "-dlcb" else ln)
    return out


def ftdi_compare():
    F = "kernel/ftdi"
    if "flavour 6.12" not in (read("info.txt") or ""):
        res("INFO", "ftdi: the ftdi_sio measurement not compared (tests/data/kernel_ftdi is 6.12's)")
        return
    if read(F, "tty_acm.txt") is None:
        res("FAIL", "ftdi: no kernel step K4f results (kernel/ftdi/tty_acm.txt)")
        return
    check(rc(F, "tty_acm.txt.rc") == 0, "ftdi: tty_acm /dev/ttyUSB0 exited 0", (read(F, "tty_acm.err") or "").strip())
    for name, what in (("tty_acm.txt", "tty_acm's answers on ttyUSB0"),
                       ("stty_1.txt", "stty 115200 cs7 parenb -cstopb crtscts, and stty -a after it,"),
                       ("stty_2.txt", "stty 9600 cs8 -parenb -crtscts, and stty -a after it,"),
                       ("descriptors.hex", "qemu's usb-serial's descriptors"),
                       ("device.txt", "the USB device's sysfs attributes"),
                       ("interface.txt", "the interface's sysfs attributes"),
                       ("drivers.txt", "the interface's driver"),
                       ("where.txt", "the port, bus and speed"),
                       ("links.txt", "the tty's and the port device's sysfs links"),
                       ("port_uevent.txt", "the port device's uevent"),
                       ("tty_uevent.txt", "ttyUSB0's uevent"),
                       ("port_attrs.txt", "the port device's attributes (modes, values)"),
                       ("port_sysfs.txt", "the port device's sysfs tree"),
                       ("nodes_owner.txt", "/dev/ttyUSB0 (type, numbers, mode, owner)"),
                       ("proc_tty_drivers.txt", "/proc/tty/drivers"),
                       ("proc_tty_driver_usbserial.txt", "/proc/tty/driver/usbserial"),
                       ("udevadm_property.txt", "udev's properties of /dev/ttyUSB0"),
                       ("udevadm_all.txt", "udevadm info of the tty, the port, the interface and the device"),
                       ("dmesg.txt", "the kernel's messages of the plug")):
        kept, now = ftdi_sides(name)
        check(kept == now and kept != [""], "ftdi: %s are tests/data/kernel_ftdi/%s's" % (what, name),
              first_diff(kept, now))
    for name, what in (("ls_class_tty_ttyUSB0.txt", "ls -l /sys/class/tty/ttyUSB0/"),
                       ("ls_port_ttyUSB0.txt", "ls -l /sys/bus/usb-serial/devices/ttyUSB0/"),
                       ("ls_interface.txt", "ls -l of the interface"),
                       ("ls_drivers.txt", "the usb-serial bus's and ftdi_sio's directories"),
                       ("ls_dev_serial.txt", "udev's links in /dev/serial")):
        kept, now = (ftdi_ls(x) for x in ftdi_sides(name))
        check(kept == now and kept != [""], "ftdi: %s (dates aside) is tests/data/kernel_ftdi/%s's" % (what, name),
              first_diff(kept, now))
    for name, what in (("load", "loading usbserial and ftdi_sio"), ("plug", "the plug"), ("unplug", "the unplug")):
        (kk, ku), (nk, nu) = (ftdi_events(x) for x in ftdi_sides("udev_%s.txt" % name))
        check(kk == nk and kk, "ftdi: the KERNEL uevents of %s (SEQNUM aside) are tests/data/kernel_ftdi/"
              "udev_%s.txt's (%d)" % (what, name, len(kk)), first_diff(kk, nk))
        # udevd handles the events of unrelated objects (the modules', the
        # drivers' and the bus's) in parallel: their order is not its own
        if name == "load":
            ku, nu, how = sorted(ku), sorted(nu), ", in any order"
        else:
            how = ""
        check(ku == nu and ku, "ftdi: udevd's UDEV events of %s (SEQNUM, USEC_INITIALIZED aside%s) are "
              "tests/data/kernel_ftdi/udev_%s.txt's (%d)" % (what, how, name, len(ku)), first_diff(ku, nu))
    # the plug: the device's lines, address 0's before it is addressed
    (ko, _, _), (no, _, _) = (ftdi_usbmon(x, (":1:DEV:", ":1:000:")) for x in ftdi_sides("plug_1u.txt"))
    check(ko == no and ko, "ftdi: usbmon lines of the plug's enumeration and ftdi_sio's probe (address 0 and the "
          "device; URB tags, time stamps aside) are tests/data/kernel_ftdi/plug_1u.txt's (%d)" % len(ko),
          first_diff(ko, no))
    for name in ("plug", "unplug"):
        (kr, _, _), (nr, _, _) = (ftdi_usbmon(x, (":1:001:",)) for x in ftdi_sides("%s_1u.txt" % name))
        res("INFO", "ftdi: the root hub's usbmon lines of the %s not compared (the hub driver's debounce reads "
            "depend on timing): kept %d, now %d" % (name, len(kr), len(nr)))
    (ko, _, _), (no, _, _) = (ftdi_usbmon(x, (":1:DEV:",)) for x in ftdi_sides("unplug_1u.txt"))
    check(ko == no, "ftdi: the device's usbmon lines of the unplug are tests/data/kernel_ftdi/unplug_1u.txt's (%d)"
          % len(ko), first_diff(ko, no))
    for name, what in (("session_1u.txt", "the ttyUSB0 session"), ("stty_1_1u.txt", "stty 115200 cs7 parenb crtscts"),
                       ("stty_2_1u.txt", "stty 9600 cs8 -parenb -crtscts")):
        (_, kf, ke), (_, nf, ne) = (ftdi_usbmon(x, (":1:DEV:",)) for x in ftdi_sides(name))
        for ep in sorted(set(ke) | set(ne)):
            check(ke.get(ep) == ne.get(ep), "ftdi: usbmon %s's lines of %s (URB tags, time stamps aside) are "
                  "tests/data/kernel_ftdi/%s's (%d)" % (ep, what, name, len(ke.get(ep, []))),
                  first_diff(ke.get(ep, []), ne.get(ep, [])))
        check(kf == nf and kf, "ftdi: the usbmon lines' order across endpoints in %s (the read URBs' resubmissions "
              "aside) is tests/data/kernel_ftdi/%s's (%d)" % (what, name, len(kf)), first_diff(kf, nf))
    res("INFO", "ftdi: usbmon's URB tags and time stamps, the device number, SEQNUM, USEC_INITIALIZED, the order of "
        "udev's links, ls -l's dates and dmesg's times not compared; the places of the read URBs' resubmissions among the other endpoints' "
        "lines not compared (the reader against usb_serial_generic_read_bulk_callback)")


ftdi_compare()


# ------------------------------------------------------------------ report
write_report_and_exit()
