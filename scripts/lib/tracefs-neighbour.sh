#!/usr/bin/env bash
# tracefs-neighbour: another user of this machine's tracefs, for
# scripts/loaded-runs: until killed, it does at the top level of the real
# tracefs (mounted in a private mount namespace of its own) what a tracing
# tool does there: enables and disables events through set_event and
# events/*/enable, sets and clears filters, toggles tracing_on, clears the
# buffer and makes and removes an instance. It never sizes a buffer. On
# SIGTERM it puts back what it changed (set_event empty, filters 0,
# tracing_on 1) and exits.
set -uo pipefail
exec unshare -m --propagation private -- bash -c '
d=$(mktemp -d /tmp/tracefs-neighbour.XXXXXX)
mount -t tracefs nodev "$d" || exit 1
cd "$d"
rmdir "$d" 2>/dev/null
restore() {
	echo > set_event
	echo 0 > events/sched/sched_switch/filter
	echo 1 > tracing_on
	rmdir instances/neighbour-$$ 2>/dev/null
	exit 0
}
trap restore TERM INT
while :; do
	echo "sched:*" > set_event
	echo "prev_pid == 1" > events/sched/sched_switch/filter
	echo 1 > events/irq/enable 2>/dev/null
	echo 0 > tracing_on
	mkdir instances/neighbour-$$ 2>/dev/null
	echo "sched:sched_switch" >> set_event
	echo 1 > tracing_on
	echo > trace
	echo 0 > events/sched/sched_switch/filter
	rmdir instances/neighbour-$$ 2>/dev/null
	echo > set_event
	sleep 0.05
done
'
