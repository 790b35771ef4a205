# kernel-vm guest, custom kernel (CONFIG_USER_EVENTS=y): run the
# user_events producers (examples/user_events_producer*.c) against the
# kernel's tracefs (/out/kernel) and monfs's (/out/fuse). Sourced by guest.sh.
if [ -z "$UE_PRODUCERS" ]; then
	err "user_events: no examples/user_events_producer*.c in the tree; nothing to compare"
	return 0 2>/dev/null || exit 0
fi

ue_side() { # ue_side OUTDIR TRACINGDIR
	_d=$1; _t=$2
	mkdir -p $_d
	ls -la $_t/user_events_data $_t/user_events_status $_t/dynamic_events > $_d/ue_files.txt 2>&1
	for p in $UE_PRODUCERS; do
		echo > $_t/trace 2>/dev/null
		# 40 iterations 50 ms apart; the event is enabled from 0.7 s to 1.4 s
		bg prod "$_d/$p.txt" $p $_t 40 50
		sleep 0.7
		_ev=$(ls -d $_t/events/user_events/example_* 2>/dev/null | head -1)
		echo "event dir: $_ev" > $_d/$p.event
		# read(2), not busybox cat's sendfile: monfs's tracefs files have no
		# page-cache content (a known gap, see docs/fidelity.md).
		dd if=$_t/dynamic_events bs=65536 2>/dev/null > $_d/$p.dynamic_events
		if [ -n "$_ev" ]; then
			dd if=$_ev/format bs=65536 2>/dev/null > $_d/$p.format
			echo 1 > $_ev/enable || echo "enable failed" >> $_d/$p.event
			sleep 0.7
			echo 0 > $_ev/enable
		fi
		# While the event still exists: the kernel prints "Unknown type" for
		# entries of freed events.
		dd if=$_t/trace bs=65536 2>/dev/null | grep -v '^#' > $_d/$p.trace
		finish prod 15
		dd if=$_t/dynamic_events bs=65536 2>/dev/null > $_d/$p.dynamic_events_after
	done
}

# The grammar differential (tests/c/ue_grammar.c, cases from
# scripts/lib/user_events_fuzz.py): first on each side, so that both start
# from no user events and the same multi-format id.
ue_grammar_side() { # ue_grammar_side OUTDIR TRACINGDIR
	[ -s /etc/ue-grammar-cases.txt ] || return 0
	mkdir -p $1
	ue_grammar $2 /etc/ue-grammar-cases.txt > $1/ue_grammar.txt 2> $1/ue_grammar.err
	echo $? > $1/ue_grammar.rc
}

ls -la /sys/kernel/tracing/user_events_data || err "user_events: the custom kernel has no user_events_data"
ue_grammar_side $O/kernel /sys/kernel/tracing
ue_side $O/kernel /sys/kernel/tracing
mkdir -p $MNT
bg monfs "$O/monfs.log" monfs mount -f --log-level info $MNT
waitfor 15 "grep -q ' $MNT ' /proc/mounts" || err "monfs did not mount (see monfs.log.err)"
ue_grammar_side $O/fuse $MNT/tracing
ue_side $O/fuse $MNT/tracing
kill -TERM $PID_monfs
finish monfs 10
