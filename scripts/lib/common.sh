# shellcheck shell=bash
# common.sh: what the project's scripts share, sourced by a bash script.
#
#   script_init NAME
#       defines, for a script that calls itself NAME:
#         die MESSAGE...   "NAME: error: MESSAGE" on stderr, exit 1
#         log MESSAGE...   "[NAME  12.3s] MESSAGE" (seconds since script_init)
#         usage [CODE]     the script's header comment (from line 2 to the
#                          line before `set -euo`), then exit CODE (0)
#   fresh_mount MONFS MNT LOG LEVEL [OPTION...]
#       starts `MONFS --log-level LEVEL mount MNT --foreground OPTION...` in
#       the background, its output in LOG, and waits (10 s at most) until it
#       serves; FRESH_DAEMON is its pid. A daemon that exits or does not
#       mount in time is an error (its log, then die).
#   fresh_umount
#       stops that daemon (SIGTERM, SIGKILL after 5 s) and unmounts MNT if
#       it is still mounted; for the caller's EXIT trap, safe to call when
#       nothing was mounted.

script_init() {
	SCRIPT_NAME=$1
	SCRIPT_T0=$EPOCHREALTIME
}

die() { echo "$SCRIPT_NAME: error: $*" >&2; exit 1; }

log() { printf '[%s %6.1fs] %s\n' "$SCRIPT_NAME" "$(awk "BEGIN{print $EPOCHREALTIME - $SCRIPT_T0}")" "$*"; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

FRESH_DAEMON=
FRESH_MNT=

fresh_mount() {
	local monfs=$1 mnt=$2 log=$3 level=$4
	shift 4
	FRESH_MNT=$mnt
	"$monfs" --log-level "$level" mount "$mnt" --foreground "$@" >"$log" 2>&1 &
	FRESH_DAEMON=$!
	for _ in $(seq 100); do
		[ -e "$mnt/monfs/null" ] && return 0
		kill -0 "$FRESH_DAEMON" 2>/dev/null || { cat "$log" >&2; die "monfs exited instead of mounting $mnt"; }
		sleep 0.1
	done
	[ -e "$mnt/monfs/null" ] || { cat "$log" >&2; die "monfs did not mount $mnt within 10 s"; }
}

fresh_umount() {
	if [ -n "$FRESH_DAEMON" ] && kill -0 "$FRESH_DAEMON" 2>/dev/null; then
		kill -TERM "$FRESH_DAEMON" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$FRESH_DAEMON" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$FRESH_DAEMON" 2>/dev/null || true
		wait "$FRESH_DAEMON" 2>/dev/null || true
	fi
	if [ -n "$FRESH_MNT" ] && mountpoint -q "$FRESH_MNT"; then
		umount "$FRESH_MNT" 2>/dev/null || umount -l "$FRESH_MNT" || true
	fi
}
