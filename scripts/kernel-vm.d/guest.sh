#!/bin/sh
# kernel-vm guest script (run by /init). Runs the same clients against the
# real kernel's usbmon (directory /out/kernel) and against monfs: its CUSE
# devices (/out/cuse) and its FUSE files (/out/fuse). Raw outputs only; the
# host compares them (compare.py). Problems are recorded in /out/errors.txt
# (one line each) so that the comparison fails on them; nothing is skipped
# silently.
. /etc/kernel-vm.conf
O=/out
M=/sys/kernel/debug/usb/usbmon
MNT=/mnt/monfs
KV=$(uname -r)
up() { cut -d' ' -f1 /proc/uptime; }
step() { echo; echo "=== $* (uptime $(up))"; }
err() { echo "GUEST_ERROR: $*"; echo "$*" >> $O/errors.txt; }
waitfor() { # waitfor SECONDS SHELL-CONDITION
	_n=$(($1 * 10)); shift
	while :; do
		eval "$@" && return 0
		[ $_n -le 0 ] && return 1
		sleep 0.1; _n=$((_n - 1))
	done
}
load() {
	for m; do
		if grep -Eq "/$(echo "$m" | sed 's/[-_]/[-_]/g')\.ko\$" /lib/modules/$KV/modules.builtin 2>/dev/null; then
			echo "module $m: built in"
		else
			modprobe "$m" && echo "module $m: loaded" || err "modprobe $m failed"
		fi
	done
}
# Background jobs with names: bg NAME OUTFILE CMD...; finish NAME [SECS]
# waits up to SECS for it (then SIGTERM) and writes its exit status to
# OUTFILE.rc.
bg() {
	_name=$1; _out=$2; shift 2
	"$@" > "$_out" 2> "$_out.err" &
	eval "PID_$_name=$!; OUT_$_name=$_out"
}
alive() { # alive NAME...: true when one of them still runs
	for _j; do
		eval "_p=\$PID_$_j"
		[ -n "$_p" ] && kill -0 "$_p" 2>/dev/null && return 0
	done
	return 1
}
finish_all() { # finish_all SECS NAME...: wait for all of them together, up to SECS
	_s=$1; shift
	waitfor "$_s" "! alive $*"
	for _j; do finish $_j 0; done
}
finish() {
	eval "_p=\$PID_$1; _o=\$OUT_$1"
	[ -n "$_p" ] || return 0
	if ! waitfor "${2:-0}" "! kill -0 $_p 2>/dev/null"; then
		kill -TERM "$_p" 2>/dev/null
		waitfor 3 "! kill -0 $_p 2>/dev/null" || kill -KILL "$_p" 2>/dev/null
		echo "(stopped by the guest script after ${2:-0}s)" >> "$_o.err"
	fi
	wait "$_p"
	echo $? > "$_o.rc"
	eval "PID_$1="
}
nodes() { # nodes FILE PATH...: type, major:minor (hex), mode, as stat -c prints them
	_f=$1; shift
	for n; do
		[ -e "$n" ] && stat -c '%n %F %t:%T %a' "$n" || echo "$n missing"
	done > "$_f"
}
stat_files() { # stat_files OUTDIR DIR: the Ns files, read with busybox cat (sendfile) and with dd (read)
	for f in $2/*s; do echo "--- $f"; cat $f; done > $1/stats_files.txt
	for f in $2/*s; do echo "--- $f"; dd if=$f bs=4096 2>/dev/null; done > $1/stats_files_read.txt
}
linktype() { # linktype PCAP: the pcap file header's link type
	od -A n -t u4 -j 20 -N 4 "$1" 2>/dev/null | tr -d ' '
}

# the clients that read bus 1 while TRAFFIC (a shell function) runs:
# read/get/getx (usbmon_read), mmap (usbmon_mmap), raw headers (usbmon_hdr),
# the text file 1u and, with TCPDUMP=1, tcpdump -i usbmon1.
run_clients() { # run_clients OUTDIR DEVICE TEXTDIR TRAFFIC
	_d=$1; _dev=$2; _txt=$3; _traffic=$4
	mkdir -p "$_d"
	bg text1u "$_d/1u.txt" cat "$_txt/1u"
	bg rd "$_d/read.txt" usbmon_read read "$_dev" 60
	bg get "$_d/get.txt" usbmon_read get "$_dev" 60
	bg getx "$_d/getx.txt" usbmon_read getx "$_dev" 60
	bg mmap "$_d/mmap.txt" usbmon_mmap "$_dev" 60
	bg hdrx "$_d/hdr_getx.txt" usbmon_hdr getx "$_dev" 120 25
	bg hdr "$_d/hdr_get.txt" usbmon_hdr get "$_dev" 120 25
	if [ "${TCPDUMP:-0}" = 1 ]; then
		bg tcpdump "$_d/tcpdump.out" tcpdump -i usbmon1 -w "$_d/tcpdump.pcap" -U -c 40 -Z root
	fi
	sleep 1
	$_traffic
	if [ "${TCPDUMP:-0}" = 1 ]; then
		finish_all 25 rd get getx mmap hdrx hdr tcpdump
	else
		finish_all 25 rd get getx mmap hdrx hdr
	fi
	finish text1u 0
	if [ "${TCPDUMP:-0}" = 1 ]; then
		linktype "$_d/tcpdump.pcap" > "$_d/tcpdump.linktype"
		tcpdump -r "$_d/tcpdump.pcap" -nn > "$_d/tcpdump.txt" 2> "$_d/tcpdump.r.err"
		echo $? > "$_d/tcpdump.r.rc"
	fi
	wc -l "$_d"/*.txt
}

# the ioctl transcripts: bus 0 (all buses) and bus 1 (the devices), from a
# 64-bit and a 32-bit (compat ioctl) program
run_ioctls() { # run_ioctls OUTDIR DEVPREFIX
	for b in 0 1; do
		usbmon_ioctl "$2$b" > "$1/ioctl$b.txt" 2>&1
		echo $? > "$1/ioctl$b.txt.rc"
		usbmon_ioctl32 "$2$b" > "$1/ioctl32_$b.txt" 2>&1
		echo $? > "$1/ioctl32_$b.txt.rc"
	done
}

# The hist trigger differential (tests/c/hist_grammar.c, cases from
# scripts/lib/hist_fuzz.py): the same cases on the kernel's tracefs and on
# monfs's, compared by compare.py.
hist_grammar_side() { # hist_grammar_side OUTDIR TRACINGDIR
	[ -s /etc/hist-grammar-cases.txt ] || return 0
	mkdir -p $1
	_t0=$(up)
	hist_grammar $2 /etc/hist-grammar-cases.txt > $1/hist_grammar.txt 2> $1/hist_grammar.err
	echo $? > $1/hist_grammar.rc
	echo "hist grammar: $(grep -c '^case ' $1/hist_grammar.txt) cases, uptime $_t0 -> $(up)"
}

# The usbfs session of tests/c/usbfs_kbd.c with the keyboard, and the
# usbmon lines it causes (from 1u, read meanwhile).
usbfs_session() { # usbfs_session OUTDIR TEXTDIR DEVNODE
	bg ufs1u "$1/usbfs_1u.txt" cat "$2/1u"
	sleep 0.5
	usbfs_kbd "$3" > "$1/usbfs_kbd.txt" 2>&1
	echo $? > "$1/usbfs_kbd.txt.rc"
	sleep 1
	finish ufs1u 0
	echo "usbfs: $(wc -l < "$1/usbfs_1u.txt") lines of 1u"
}
# The same kind of session through Debian's libusb (tests/c/usbfs_libusb.c,
# libusb_wrap_sys_device on the node): descriptors, strings, standard and
# HID class requests, a class request to the interface while usbhid holds
# it, detach, claim, interrupt IN reads with a timeout, release, attach.
# No SET_IDLE (it would make qemu's keyboard send reports at the idle rate)
# and no GET_REPORT (monfs's keyboard types, so its report is not qemu's).
LIBUSB_OPS="desc config string:4 string:1 string:11 ctrl-in:80:06:0100:0:12 ctrl-in:80:06:0200:0:ff
ctrl-in:81:06:2200:0:3f active:0 detach:0 active:0 detach:0 claim:0 ctrl-in:81:06:2200:0:3f
ctrl-in:a1:02:0:0:1 ctrl-in:a1:03:0:0:1 ctrl-in:80:00:0:0:2 ctrl-in:81:00:0:0:2 ctrl-in:82:00:0:81:2
ctrl-out:21:09:0200:0:01 int-in:81:8:300 int-in:81:8:300 release:0 attach:0 active:0 attach:0"
libusb_session() { # libusb_session OUTDIR TEXTDIR DEVNODE
	bg lu1u "$1/libusb_1u.txt" cat "$2/1u"
	sleep 0.5
	usbfs_libusb "$3" $LIBUSB_OPS > "$1/usbfs_libusb.txt" 2> "$1/usbfs_libusb.err"
	echo $? > "$1/usbfs_libusb.txt.rc"
	sleep 1
	finish lu1u 0
	echo "libusb: $(wc -l < "$1/usbfs_libusb.txt") answers, $(wc -l < "$1/libusb_1u.txt") lines of 1u"
	cat "$1/usbfs_libusb.err"
}
# The isochronous session of tests/c/usbfs_iso.c with the audio device
# (qemu's usb-audio; monfs's kind: audio; bus 2), and the usbmon lines it
# causes (2u).
iso_session() { # iso_session OUTDIR TEXTDIR DEVNODE
	bg iso2u "$1/iso_2u.txt" cat "$2/2u"
	sleep 0.5
	usbfs_iso "$3" > "$1/usbfs_iso.txt" 2>&1
	echo $? > "$1/usbfs_iso.txt.rc"
	sleep 1
	finish iso2u 0
	echo "usbfs iso: $(wc -l < "$1/usbfs_iso.txt") lines, $(wc -l < "$1/iso_2u.txt") lines of 2u"
	cat "$1/usbfs_iso.txt"
}
audio_devnum_kernel() {
	for d in /sys/bus/usb/devices/2-*; do
		[ "$(cat $d/product 2>/dev/null)" = "QEMU USB Audio" ] && cat $d/devnum && return 0
	done
	return 1
}
# The keyboard's hidraw node under SYSDIR (its class/hidraw directory):
# the one whose HID device is the QEMU USB Keyboard.
kbd_hidraw() { # kbd_hidraw SYSDIR
	for d in $1/hidraw*; do
		grep -q "^HID_NAME=QEMU QEMU USB Keyboard$" $d/device/uevent 2>/dev/null && basename $d && return 0
	done
	return 1
}
# tests/c/hidraw_hostile.c (no reads: qemu's keyboard is idle; HIDIOCREVOKE
# with HIDRAW_REVOKE=--revoke, on character devices only) and
# tests/c/hidraw_hidapi.c (Debian's hidapi, hidraw backend: no reads) on
# the keyboard's hidraw node, and the usbmon lines they cause (1u). hidapi
# enumerates through /sys/class/hidraw: on monfs it runs in `monfs run
# --use` (HIDAPI_RUN), where /sys and /dev/hidrawN are monfs's.
hidraw_session() { # hidraw_session OUTDIR TEXTDIR NODE SYSFS_REPORT_DESCRIPTOR HIDAPI_NODE
	bg hr1u "$1/hidraw_1u.txt" cat "$2/1u"
	sleep 0.5
	hidraw_hostile --no-read $HIDRAW_REVOKE "$3" "$4" > "$1/hidraw_hostile.txt" 2>&1
	echo $? > "$1/hidraw_hostile.txt.rc"
	$HIDAPI_RUN hidraw_hidapi 0 "$5" > "$1/hidraw_hidapi.txt" 2>&1
	echo $? > "$1/hidraw_hidapi.txt.rc"
	sleep 1
	finish hr1u 0
	echo "hidraw: $(wc -l < "$1/hidraw_hostile.txt") + $(wc -l < "$1/hidraw_hidapi.txt") answers, $(wc -l < "$1/hidraw_1u.txt") lines of 1u"
}

kbd_devnum_kernel() {
	for d in /sys/bus/usb/devices/1-*; do
		[ "$(cat $d/product 2>/dev/null)" = "QEMU USB Keyboard" ] && cat $d/devnum && return 0
	done
	return 1
}

# The hot-plug recordings: udevadm monitor --kernel --udev --property in
# OUTDIR/udev_NAME.txt while something unplugs or plugs a device.
# udevadm prints its header once its sockets are bound.
udev_record() { # udev_record OUTDIR NAME CMD... (waitfor uses _n, so _uf)
	_uf=$1/udev_$2.txt; _un=$2; shift 2
	bg umon "$_uf" udevadm monitor --kernel --udev --property
	waitfor 10 "grep -qs '^UDEV - ' $_uf" || err "$_uf: udevadm monitor did not start"
	sleep 0.5
	"$@" || err "$_un: $* failed"
	finish umon 0
	echo "$_un: $(grep -c '^KERNEL\[' "$_uf") KERNEL, $(grep -c '^UDEV *\[' "$_uf") UDEV events"
}
hp() { # hp REQUEST: ask the host (hotplug.py, on ttyS1) and wait for its answer (logged in HPLOG)
	printf '%s\n' "$*" >&3
	read -t 60 -r _a <&3 || { err "kernel: no answer from the host to '$*'"; return 1; }
	echo "host: $* -> $_a"
	echo "$* $_a" >> ${HPLOG:-$O/kernel/hotplug.txt}
	case $_a in ok*) return 0 ;; *) err "kernel: the host answered '$*' with '$_a'"; return 1 ;; esac
}
settle() { # after a hot-plug: udevd's queue empty, and a second for stragglers
	udevadm settle -t 30 || err "kernel: udevadm settle timed out"
	sleep 1
}
hp_wait() { # hp_wait REQUEST CONDITION: ask, wait until CONDITION holds, settle
	hp "$1" || return 1
	waitfor 30 "$2" || err "kernel: after '$1': not $2"
	settle
}
hotplug_kernel() {
	udev_record $O/kernel kbd_unplug hp_wait "unplug kbd" '[ ! -e /sys/bus/usb/devices/1-1 ]'
	udev_record $O/kernel kbd_plug hp_wait "plug kbd" '[ -e /sys/bus/usb/devices/1-1:1.0/driver ] && ls /sys/bus/usb/devices/1-1:1.0/*/hidraw >/dev/null 2>&1'
	udev_record $O/kernel stick_unplug hp_wait "unplug stick" '[ ! -e /sys/bus/usb/devices/1-3 ] && ! ls /sys/block | grep -q ^sd'
	udev_record $O/kernel stick_plug hp_wait "plug stick" 'ls /sys/block | grep -q ^sd'
	# two interfaces one driver takes (snd-usb-audio, loaded since boot)
	udev_record $O/kernel audio_unplug hp_wait "unplug audio" '[ ! -e /sys/bus/usb/devices/2-1 ]'
	udev_record $O/kernel audio_plug hp_wait "plug audio" '[ -e /sys/bus/usb/devices/2-1:1.1/driver ]'
}
monfs_hotplug() { # inside monfs run (the same steps: monfs ctl)
	monfs ctl resume 1 >/dev/null   # the buses start paused (monfs-qemu.yaml)
	monfs ctl resume 2 >/dev/null
	monfs ctl wait 1 1 present >/dev/null
	monfs ctl wait 1 3 present >/dev/null
	monfs ctl wait 2 1 present >/dev/null   # the audio device plugs last
	udev_record $O/fuse kbd_unplug monfs_ctl unplug --wait 1 1
	udev_record $O/fuse kbd_plug monfs_ctl plug --wait 1 1 hid-keyboard
	udev_record $O/fuse stick_unplug monfs_ctl unplug --wait 1 3
	udev_record $O/fuse stick_plug monfs_ctl plug --wait 1 3 mass-storage
	udev_record $O/fuse audio_unplug monfs_ctl unplug --wait 2 1
	udev_record $O/fuse audio_plug monfs_ctl plug --wait 2 1 audio
}
monfs_ctl() { monfs ctl "$@" >/dev/null && sleep 1; }

# ---- the input layer (step K4e, the kernel only): hid-input's input
# devices of qemu's keyboard, tablet and mouse, evdev's event nodes and
# input-leds's LED class devices, in OUTDIR (/out/kernel/input); the host
# (hotplug.py) types, moves and clicks through QMP input-send-event.
INPUT_DEVS="kbd tablet mouse"
input_name() { # input_name kbd|tablet|mouse: the input device's name
	case $1 in
	kbd) echo "QEMU QEMU USB Keyboard" ;;
	tablet) echo "QEMU QEMU USB Tablet" ;;
	mouse) echo "QEMU QEMU USB Mouse" ;;
	esac
}
input_of() { # input_of NAME [SYSDIR]: SYSDIR/class/input/inputN of the input device called NAME
	for _d in ${2:-/sys}/class/input/input*; do
		[ "$(cat $_d/name 2>/dev/null)" = "$1" ] && echo $_d && return 0
	done
	return 1
}
sysdump() { # sysdump DIR: DIR's files (power/ left out), links and directories, recursively
	_r=$(readlink -f $1)
	echo "# $1 -> $_r"
	find $_r | grep -v -e '/power/' -e '/power$' | sort | while read -r _f; do
		_rel=${_f#$_r}; _rel=${_rel#/}; [ -n "$_rel" ] || _rel=.
		if [ -L $_f ]; then
			echo "== $_rel -> $(readlink $_f)"
		elif [ -d $_f ]; then
			echo "== $_rel/ (directory, mode $(stat -c %a $_f))"
		elif [ -r $_f ]; then
			echo "== $_rel (mode $(stat -c %a $_f), $(cat $_f 2>/dev/null | wc -c) bytes)"
			cat $_f 2>&1 | sed 's/^/  /'
		else
			echo "== $_rel (mode $(stat -c %a $_f), not readable)"
		fi
	done
}
# evdev_probe --events and evtest on NODE while the host performs the
# REQUESTs, and bus 1's usbmon text meanwhile, to pair each interrupt IN
# report with the events it caused: in order (a report that changes
# nothing causes none), or by time: evtest's stamps are the real-time
# clock's, usbmon's the monotonic clock's modulo 4096 s, so the two differ
# by one constant in a run.
input_events() { # input_events OUTPREFIX NODE SECS REQUEST... (finish uses _p: _ip)
	_ip=$1; _node=$2; _secs=$3; shift 3
	bg ev1u "${_ip}_1u.txt" cat $M/1u
	bg evtest "${_ip}_evtest.txt" evtest $_node
	bg evprobe "${_ip}_events.txt" evdev_probe --events $_secs $_node
	waitfor 10 "grep -q '^open' ${_ip}_events.txt" || err "kernel: evdev_probe --events $_node did not start"
	# the device polled (its URB submitted: qemu activates a pointer's
	# handler on its first poll) and evtest's header printed
	sleep 2
	for _req; do hp "$_req"; done
	finish evprobe $((_secs + 10))
	kill -TERM $PID_evtest 2>/dev/null
	finish evtest 5
	sleep 0.5
	finish ev1u 0
	echo "$_node: $(grep -c '^[0-9]' ${_ip}_events.txt) events, $(grep -c '^Event:' ${_ip}_evtest.txt) evtest lines, $(grep -c ' C Ii:' ${_ip}_1u.txt) interrupt IN completions"
}
load_settle() { load "$@"; settle; }
input_kernel() { # input_kernel UDEVD_OK (inside K4p: ttyS1 on fd 3, udevd running when UDEVD_OK is 1)
	step "K4e. kernel: the input layer of the keyboard, the tablet and the mouse (hid-input, evdev, input-leds)"
	I=$O/kernel/input
	mkdir -p $I
	HPLOG=$I/hotplug.txt
	# evdev was kept from udevd's kmod builtin until now (a blacklist
	# line, K4p): the hot-plug recordings before stay as without evdev
	rm -f /etc/modprobe.d/kernel-vm-evdev.conf
	if [ "$1" = 1 ]; then
		udev_record $I evdev_load load_settle evdev input_leds
	else
		load evdev input_leds
	fi
	waitfor 10 'ls /sys/class/input/input*/event* >/dev/null 2>&1' || err "kernel: no event node after loading evdev"
	if [ "$1" = 1 ]; then
		# as at boot: udevd's database for the input devices made before it ran
		udevadm trigger --action=add --subsystem-match=input --subsystem-match=leds || err "kernel: udevadm trigger (input, leds) failed"
		settle
		# the keyboard's unplug and plug with evdev loaded: the input,
		# event, mouse and leds devices' events among USB's and HID's
		udev_record $I kbd_unplug hp_wait "unplug kbd" '[ ! -e /sys/bus/usb/devices/1-1 ]'
		udev_record $I kbd_plug hp_wait "plug kbd" 'ls -d /sys/bus/usb/devices/1-1:1.0/0003:*/input/input*/event* >/dev/null 2>&1 && ls /sys/bus/usb/devices/1-1:1.0/*/hidraw >/dev/null 2>&1'
	fi
	cat /proc/bus/input/devices > $I/proc_bus_input_devices.txt
	cat /proc/bus/input/handlers > $I/proc_bus_input_handlers.txt
	ls -l /sys/class/input /sys/class/leds > $I/ls_class.txt 2>&1
	ls -l /dev/input /dev/input/by-id /dev/input/by-path > $I/ls_dev_input.txt 2>&1
	ls -l /sys/bus/pci/devices > $I/pci.txt 2>&1
	for _p in /sys/bus/pci/devices/*; do
		echo "$(basename $_p) $(cat $_p/vendor):$(cat $_p/device) class=$(cat $_p/class)"
	done >> $I/pci.txt
	: > $I/devices.txt
	for _dv in $INPUT_DEVS; do
		_d=$(input_of "$(input_name $_dv)") || { err "kernel: no input device called $(input_name $_dv)"; continue; }
		_ev=$(basename $(ls -d $_d/event* | head -1))
		_real=$(readlink -f $_d)
		_usb=${_real%%/[0-9]-[0-9]:*}
		echo "$_dv $(basename $_d) $_ev $_real $(cat $_usb/devnum)" >> $I/devices.txt
		# the USB device's runtime PM (udev's hwdb: ID_AUTOSUSPEND=1 for
		# qemu's HID devices, so power/control is auto: an open but idle
		# device suspends, and wakes remotely on input)
		_usb=${_real%%/[0-9]-[0-9]:*}
		for _f in control runtime_status autosuspend_delay_ms wakeup runtime_suspended_time; do
			echo "$_dv $(basename $_usb)/power/$_f $(cat $_usb/power/$_f 2>&1)"
		done >> $I/usb_power.txt
		sysdump $_d > $I/${_dv}_sysfs.txt
		{
			ls -l $_real
			for _c in $_real/*; do [ -d $_c ] && [ ! -L $_c ] && ls -l $_c; done
			for _l in /sys/class/leds/$(basename $_d)::*; do [ -e $_l ] && echo "$_l -> $(readlink $_l)"; done
			stat -c '%n %F %t:%T %a %u:%g' /dev/input/$_ev
			for _c in $_real/mouse* $_real/js*; do [ -e $_c/dev ] && stat -c '%n %F %t:%T %a %u:%g' /dev/input/$(basename $_c); done
		} > $I/${_dv}_ls.txt 2>&1
		_led=
		[ $_dv = kbd ] && _led=--led
		# the probe with the device awake (power/control on): a
		# suspended usbhid queues the EV_LED writes' SET_REPORTs until
		# the device resumes
		_pc=$(cat $_usb/power/control)
		bg pr1u "$I/${_dv}_probe_1u.txt" cat $M/1u
		sleep 0.5
		echo on > $_usb/power/control
		sleep 0.5
		echo "--- power/control on, runtime_status $(cat $_usb/power/runtime_status)" >> $I/${_dv}_probe_1u.mark
		evdev_probe $_led /dev/input/$_ev > $I/${_dv}_probe.txt 2>&1
		echo $? > $I/${_dv}_probe.txt.rc
		sleep 1
		finish pr1u 0
		echo $_pc > $_usb/power/control
		echo "$_dv: $(basename $_d) $_ev, evdev_probe $(wc -l < $I/${_dv}_probe.txt) lines, $(wc -l < $I/${_dv}_probe_1u.txt) lines of 1u"
		case $_dv in
		kbd) input_events $I/kbd /dev/input/$_ev 20 'keys kbd hello World\n' ;;
		mouse) input_events $I/mouse /dev/input/$_ev 15 "rel mouse 10 5" "rel mouse -3 7" "btn mouse left" \
			"btn mouse right" "btn mouse wheel-up" ;;
		tablet) input_events $I/tablet /dev/input/$_ev 15 "abs tablet 0x4000 0x2000" "abs tablet 100 32767" \
			"btn tablet left" "abs tablet 0 0" ;;
		esac
		if [ "$1" = 1 ]; then
			for _c in $_real $_real/event* $_real/mouse* $_real/*::*; do
				[ -e $_c ] || continue
				echo "### udevadm info --query=all --path=${_c#/sys}"
				udevadm info --query=all --path=${_c#/sys} 2>&1
				echo
			done > $I/${_dv}_udevadm.txt
			for _c in $_real/event* $_real/mouse*; do
				[ -e $_c ] || continue
				echo "### udevadm info --query=all --name=/dev/input/$(basename $_c)"
				udevadm info --query=all --name=/dev/input/$(basename $_c) 2>&1
				echo
			done >> $I/${_dv}_udevadm.txt
		fi
	done
	ls -l /dev/input /dev/input/by-id /dev/input/by-path > $I/ls_dev_input_end.txt 2>&1
	HPLOG=
}

# ---- the input layer on monfs (steps M4e on the mount's files, M5e in
# monfs run, with CUSE character devices as root): what K4e records on the
# kernel, for monfs's keyboard, tablet and mouse, in OUTDIR. monfs's devices
# type ("hello from monfs usbmon") and move by themselves, so the events
# are recorded while bus 1 runs between two pauses (monfs ctl pause 1),
# with bus 1's usbmon text opened before: every interrupt IN report of the
# window is in the text, and its events (if any) in each recording.
# Pause bus 1 at a moment when device DEVNUM holds no key or button (its
# last interrupt IN report in CAPTURE, bus 1's usbmon text being read,
# has none): a key held while the bus is paused would repeat, and the
# probe's state queries (EVIOCGKEY) would show it.
idle_pause() { # idle_pause CAPTURE DEVNUM CTL...
	_cf=$1; _cd=$(printf %03d $2); shift 2
	_ct=0
	while :; do
		"$@" pause 1 >/dev/null
		sleep 0.3
		_cl=$(grep " C Ii:1:$_cd:1 0:" $_cf | tail -1)
		case "$_cl" in
		*" = 00000000 00000000"|*" = 00"??????|*" = 00"??????" "????) return 0 ;;
		esac
		_ct=$((_ct + 1))
		[ $_ct -ge 40 ] && { echo "idle_pause: device $_cd not idle: $_cl"; return 1; }
		"$@" resume 1 >/dev/null
		sleep 0.$((_ct % 7 + 1))
	done
}
# evdev_probe with bus 1 paused while the device is idle; should the probe
# make no progress for 2 s (a call waiting for the bus: the EV_LED writes'
# SET_REPORTs), the bus runs for 0.2 s and pauses again once the device is
# idle (each time noted in OUT.stalls).
probe_paused() { # probe_paused OUT CAPTURE DEVNUM NODE LEDFLAG CTL...
	_po=$1; _pc=$2; _pd=$3; _pn=$4; _pl=$5; shift 5
	idle_pause $_pc $_pd "$@"
	evdev_probe $_pl $_pn > $_po 2>&1 &
	_pp=$!
	_plast=-1; _pstill=0; _ptries=0
	while kill -0 $_pp 2>/dev/null; do
		sleep 0.2
		_pn2=$(wc -c < $_po)
		if [ "$_pn2" = "$_plast" ]; then _pstill=$((_pstill + 1)); else _pstill=0; _plast=$_pn2; fi
		if [ $_pstill -ge 10 ]; then
			_ptries=$((_ptries + 1))
			echo "no progress for 2 s at byte $_pn2 (last line: $(tail -1 $_po)); the bus runs 0.2 s" >> $_po.stalls
			"$@" resume 1 >/dev/null
			sleep 0.2
			idle_pause $_pc $_pd "$@"
			_pstill=0
			[ $_ptries -ge 20 ] && { kill $_pp; err "evdev_probe on $_pn: no progress"; }
		fi
	done
	wait $_pp
	echo $? > $_po.rc
}
monfs_input() { # monfs_input OUTDIR SYSDIR DEVDIR USBMONDIR CTL... (CTL: monfs ctl [MNT])
	_I=$1; _S=$2; _D=$3; _U=$4; shift 4
	mkdir -p $_I
	: > $_I/devices.txt
	ls -l $_S/class/input $_S/class/leds > $_I/ls_class.txt 2>&1
	for _dv in $INPUT_DEVS; do
		_d=$(input_of "$(input_name $_dv)" $_S) || { err "monfs ($_I): no input device called $(input_name $_dv)"; continue; }
		_ev=$(basename $(ls -d $_d/event* | head -1))
		_real=$(readlink -f $_d)
		_usb=${_real%%/[0-9]-[0-9]:*}
		echo "$_dv $(basename $_d) $_ev ${_real#$_S} $(cat $_usb/devnum)" >> $_I/devices.txt
		sysdump $_d > $_I/${_dv}_sysfs.txt
		{
			for _l in $_S/class/leds/$(basename $_d)::*; do [ -e $_l ] && echo "${_l#$_S} -> $(readlink $_l)"; done
			stat -c '%n %F %t:%T %a %u:%g' $_D/input/$_ev
		} > $_I/${_dv}_ls.txt 2>&1
		_led=
		[ $_dv = kbd ] && _led=--led
		# the probe with bus 1 paused while the device is idle: its
		# queue holds only what the probe's own calls cause; the EV_LED
		# writes' SET_REPORTs go out when the bus resumes
		bg pr1u "$_I/${_dv}_probe_1u.txt" cat $_U/1u
		sleep 0.5
		probe_paused $_I/${_dv}_probe.txt $_I/${_dv}_probe_1u.txt $(cat $_usb/devnum) $_D/input/$_ev "$_led" "$@"
		"$@" resume 1 >/dev/null
		sleep 1
		finish pr1u 0
		echo "$_dv: $(basename $_d) $_ev, evdev_probe $(wc -l < $_I/${_dv}_probe.txt) lines, $(wc -l < $_I/${_dv}_probe_1u.txt) lines of 1u"
	done
	# the events of the three devices in one window of bus 1's time
	"$@" pause 1 >/dev/null || err "monfs ($_I): $* pause 1 failed"
	bg mev1u "$_I/events_1u.txt" cat $_U/1u
	_names=
	while read -r _dv _in _ev _rest; do
		bg mevp_$_dv "$_I/${_dv}_events.txt" evdev_probe --events 14 $_D/input/$_ev
		bg mevt_$_dv "$_I/${_dv}_evtest.txt" evtest $_D/input/$_ev
		_names="$_names mevp_$_dv"
		waitfor 10 "grep -q '^open' $_I/${_dv}_events.txt" || err "monfs ($_I): evdev_probe --events $_D/input/$_ev did not start"
	done < $_I/devices.txt
	sleep 1
	"$@" resume 1 >/dev/null || err "monfs ($_I): $* resume 1 failed"
	sleep 8
	idle_pause $_I/events_1u.txt $(awk '$1 == "kbd" {print $5}' $_I/devices.txt) "$@"
	# shellcheck disable=SC2086
	finish_all 20 $_names
	for _dv in $INPUT_DEVS; do
		eval "_p=\${PID_mevt_$_dv:-}"
		[ -n "$_p" ] && kill -TERM $_p 2>/dev/null
		finish mevt_$_dv 5
	done
	sleep 0.5
	finish mev1u 0
	"$@" resume 1 >/dev/null || err "monfs ($_I): $* resume 1 failed"
	for _dv in $INPUT_DEVS; do
		[ -e $_I/${_dv}_events.txt ] && echo "$_dv: $(grep -c '^[0-9]' $_I/${_dv}_events.txt) events"
	done
	echo "events window: $(grep -c ' C Ii:' $_I/events_1u.txt) interrupt IN completions"
}
# inside monfs run (its own mount; as root with /dev/cuse the event nodes
# are character devices): monfs_input, udev's view (udevadm info, the
# links) and udevadm monitor of the keyboard's unplug and plug
monfs_input_run() {
	RI=$O/run/input
	mkdir -p $RI
	monfs ctl resume 1 >/dev/null
	for _p in 1 2 4; do monfs ctl wait 1 $_p present >/dev/null || err "monfs run: device 1 $_p did not enumerate"; done
	monfs ctl wait settled >/dev/null
	sleep 1
	monfs_input $RI /sys /dev $M monfs ctl
	while read -r _dv _in _ev _path _dn; do
		_real=/sys$_path
		for _c in $_real $_real/event* $_real/mouse* $_real/*::*; do
			[ -e $_c ] || continue
			echo "### udevadm info --query=all --path=${_c#/sys}"
			udevadm info --query=all --path=${_c#/sys} 2>&1
			echo
		done > $RI/${_dv}_udevadm.txt
		for _c in $_real/event* $_real/mouse*; do
			[ -e $_c ] || continue
			echo "### udevadm info --query=all --name=/dev/input/$(basename $_c)"
			udevadm info --query=all --name=/dev/input/$(basename $_c) 2>&1
			echo
		done >> $RI/${_dv}_udevadm.txt
	done < $RI/devices.txt
	ls -l /dev/input /dev/input/by-id /dev/input/by-path > $RI/ls_dev_input.txt 2>&1
	udev_record $RI kbd_unplug monfs_ctl unplug --wait 1 1
	udev_record $RI kbd_plug monfs_ctl plug --wait 1 1 hid-keyboard
	monfs ctl wait settled >/dev/null
	ls -l /dev/input /dev/input/by-id /dev/input/by-path > $RI/ls_dev_input_end.txt 2>&1
	true
}

# ---- cdc_acm (step K4t, the kernel only): OUTDIR /out/kernel/tty
acm_session() {
	T=$O/kernel/tty
	mkdir -p $T
	load cdc_acm dummy_hcd usb_f_acm g_serial
	waitfor 30 '[ -c /dev/ttyGS0 ] && [ -c /dev/ttyACM0 ]' || { err "kernel: no /dev/ttyGS0 and /dev/ttyACM0 after loading dummy_hcd and g_serial"; return 1; }
	_ad=$(readlink -f /sys/class/tty/ttyACM0/device)
	_ud=$(dirname $_ad)
	_bus=$(cat $_ud/busnum)
	echo "ttyACM0 on $(basename $_ud) (bus $_bus, device $(cat $_ud/devnum), speed $(cat $_ud/speed))" | tee $T/where.txt
	echo "$_bus" > $T/busnum.txt
	cat $_ud/devnum > $T/devnum.txt
	od -An -v -tx1 $_ud/descriptors | tr -d ' \n' > $T/descriptors.hex
	echo >> $T/descriptors.hex
	for _s in idVendor idProduct manufacturer product serial speed bDeviceClass bcdDevice; do
		echo "$_s $(cat $_ud/$_s 2>/dev/null)"
	done > $T/device.txt
	cat $_ad/bmCapabilities > $T/bmCapabilities.txt 2>&1
	cat /sys/class/tty/ttyACM0/uevent > $T/uevent.txt 2>&1
	ls -l /sys/class/tty/ttyACM0/ > $T/ls_class_tty_ttyACM0.txt 2>&1
	readlink /sys/class/tty/ttyACM0 > $T/class_link.txt 2>&1
	stat -c '%n %F %t:%T %a' /dev/ttyACM0 /dev/ttyGS0 > $T/nodes.txt 2>&1
	for _i in $_ud/$(basename $_ud):*; do
		echo "$(basename $_i) driver $(basename $(readlink $_i/driver) 2>/dev/null)"
	done > $T/drivers.txt
	bg acmloop "$T/loopback.txt" tty_acm --loopback /dev/ttyGS0
	waitfor 10 "grep -q open $T/loopback.txt" || err "kernel: tty_acm --loopback /dev/ttyGS0 did not open it"
	# g_serial's SERIAL_STATE for the gadget side's open (if it sends
	# one) is queued before ttyACM0 opens: it waits for the notification URB
	sleep 0.5
	bg acmmon "$T/usbmon.txt" cat $M/${_bus}u
	sleep 0.5
	tty_acm /dev/ttyACM0 > $T/tty_acm.txt 2> $T/tty_acm.err
	echo $? > $T/tty_acm.txt.rc
	# the last close kills the 16 read URBs: their completions end the session
	waitfor 10 "[ \$(grep -c ' C Bi:.* -2 ' $T/usbmon.txt) -ge 16 ]" || err "kernel: the ttyACM0 session's killed read URBs are not all in $T/usbmon.txt"
	sleep 0.5
	finish acmmon 0
	kill -TERM $PID_acmloop 2>/dev/null
	finish acmloop 3
	echo "tty_acm: $(wc -l < $T/tty_acm.txt) lines (exit $(cat $T/tty_acm.txt.rc)), $(wc -l < $T/usbmon.txt) lines of ${_bus}u"
	cat $T/tty_acm.txt $T/tty_acm.err
	rmmod g_serial usb_f_acm cdc_acm dummy_hcd || err "kernel: rmmod g_serial usb_f_acm cdc_acm dummy_hcd failed"
}

# ---- ftdi_sio (step K4f, the kernel only, inside K4p: ttyS1 on fd 3,
# udevd running): OUTDIR /out/kernel/ftdi. qemu's usb-serial, an FTDI
# FT232BM (0403:6001, bcdDevice 4.00), hot-plugged by the host (hotplug.py)
# on port 5 of bus 1 (free at boot); its chardev is a socket the host
# echoes on (serial-echo.py), so ttyUSB0 is a loopback.
FTDI_PORT=1-5
ftdi_urbs_done() { # ftdi_urbs_done CAPTURE DEVNUM: every bulk IN URB of the device submitted in CAPTURE has completed
	_fs=$(grep -c " S Bi:1:$2:1 " $1)
	_fc=$(grep -c " C Bi:1:$2:1 " $1)
	[ "$_fs" -gt 0 ] && [ "$_fs" = "$_fc" ]
}
ftdi_record() { # ftdi_record NAME REQUEST CONDITION: udevadm monitor and bus 1's usbmon text around hp_wait
	bg fmon "$F/$1_1u.txt" cat $M/1u
	sleep 0.5
	udev_record $F $1 hp_wait "$2" "$3"
	sleep 0.5
	finish fmon 0
	echo "$1: $(wc -l < $F/$1_1u.txt) lines of 1u"
}
ftdi_sysfs() { # the port's sysfs, /dev and /proc entries (udevd running)
	_ud=/sys/bus/usb/devices/$FTDI_PORT
	_if=$_ud/$FTDI_PORT:1.0
	_pd=/sys/bus/usb-serial/devices/ttyUSB0
	echo "ttyUSB0 on $FTDI_PORT (bus $(cat $_ud/busnum), device $(cat $_ud/devnum), speed $(cat $_ud/speed))" | tee $F/where.txt
	cat $_ud/devnum > $F/devnum.txt
	od -An -v -tx1 $_ud/descriptors | tr -d ' \n' > $F/descriptors.hex
	echo >> $F/descriptors.hex
	for _s in idVendor idProduct bcdDevice manufacturer product serial speed version bDeviceClass bDeviceSubClass \
		bDeviceProtocol bMaxPacketSize0 bNumConfigurations bNumInterfaces bConfigurationValue bmAttributes bMaxPower; do
		echo "$_s $(cat $_ud/$_s 2>&1)"
	done > $F/device.txt
	for _s in bInterfaceNumber bAlternateSetting bNumEndpoints bInterfaceClass bInterfaceSubClass bInterfaceProtocol \
		modalias supports_autosuspend authorized; do
		echo "$_s $(cat $_if/$_s 2>&1)"
	done > $F/interface.txt
	echo "$(basename $_if) driver $(basename $(readlink $_if/driver) 2>/dev/null)" > $F/drivers.txt
	{
		echo "# ls /sys/bus/usb-serial/drivers/"; ls /sys/bus/usb-serial/drivers/
		echo "# ls /sys/bus/usb-serial/devices/"; ls /sys/bus/usb-serial/devices/
		echo "# ls -l /sys/bus/usb-serial/drivers/ftdi_sio/"; ls -l /sys/bus/usb-serial/drivers/ftdi_sio/
		echo "# ls -l /sys/bus/usb/drivers/ftdi_sio/"; ls -l /sys/bus/usb/drivers/ftdi_sio/
		echo "# ls /sys/bus/usb-serial/"; ls /sys/bus/usb-serial/
	} > $F/ls_drivers.txt 2>&1
	for _l in /sys/class/tty/ttyUSB0 $_pd; do
		echo "$_l -> $(readlink $_l) = $(readlink -f $_l)"
	done > $F/links.txt 2>&1
	ls -l /sys/class/tty/ttyUSB0/ > $F/ls_class_tty_ttyUSB0.txt 2>&1
	ls -l $_pd/ > $F/ls_port_ttyUSB0.txt 2>&1
	ls -l $_if/ > $F/ls_interface.txt 2>&1
	cat $_pd/uevent > $F/port_uevent.txt 2>&1
	cat /sys/class/tty/ttyUSB0/uevent > $F/tty_uevent.txt 2>&1
	# each attribute of the port device: name, mode, value (or the error of
	# reading it: a write-only attribute cannot be opened for reading)
	for _a in $_pd/*; do
		[ -f $_a ] || continue
		echo "$(basename $_a) $(stat -c %a $_a) $(cat $_a 2>&1 | tr '\n' '|')"
	done > $F/port_attrs.txt
	sysdump $_pd > $F/port_sysfs.txt
	stat -c '%n %F %t:%T %a' /dev/ttyUSB0 > $F/nodes.txt 2>&1
	stat -c '%n %F %t:%T %a %u:%g' /dev/ttyUSB0 > $F/nodes_owner.txt 2>&1
	cat /proc/tty/drivers > $F/proc_tty_drivers.txt 2>&1
	cat /proc/tty/driver/usbserial > $F/proc_tty_driver_usbserial.txt 2>&1
	ls -l /dev/serial /dev/serial/by-id /dev/serial/by-path > $F/ls_dev_serial.txt 2>&1
	udevadm info -q property -n /dev/ttyUSB0 > $F/udevadm_property.txt 2>&1
	for _c in /sys/class/tty/ttyUSB0 $_pd $_if $_ud; do
		echo "### udevadm info --query=all --path=$(readlink -f $_c | sed 's|^/sys||')"
		udevadm info --query=all --path=$(readlink -f $_c | sed 's|^/sys||') 2>&1
		echo
	done > $F/udevadm_all.txt
}
ftdi_stty() { # ftdi_stty N SETTING...: stty -F /dev/ttyUSB0 SETTING... with bus 1's usbmon text in stty_N_1u.txt
	_fn=$1; shift
	bg fstty "$F/stty_${_fn}_1u.txt" cat $M/1u
	sleep 0.5
	echo "stty -F /dev/ttyUSB0 $*" > $F/stty_$_fn.txt
	stty -F /dev/ttyUSB0 "$@" >> $F/stty_$_fn.txt 2>&1
	echo "rc $?" >> $F/stty_$_fn.txt
	waitfor 10 "ftdi_urbs_done $F/stty_${_fn}_1u.txt $FDEV" || err "kernel: stty $*: the read URBs' completions are not all in stty_${_fn}_1u.txt"
	sleep 0.5
	finish fstty 0
	stty -F /dev/ttyUSB0 -a >> $F/stty_$_fn.txt 2>&1
	echo "stty $*: $(wc -l < $F/stty_${_fn}_1u.txt) lines of 1u"
}
ftdi_kernel() {
	step "K4f. kernel: ftdi_sio's ttyUSB0 on qemu's usb-serial hot-plugged on bus 1 port 5 (tests/c/tty_acm.c on a loopback)"
	F=$O/kernel/ftdi
	mkdir -p $F
	HPLOG=$F/hotplug.txt
	udev_record $F load load_settle usbserial ftdi_sio
	ftdi_record plug "plug serial" "[ -c /dev/ttyUSB0 ] && [ -e /sys/class/tty/ttyUSB0 ]"
	if [ ! -c /dev/ttyUSB0 ]; then
		err "kernel: no /dev/ttyUSB0 after plugging qemu's usb-serial"
	else
		FDEV=$(printf %03d $(cat /sys/bus/usb/devices/$FTDI_PORT/devnum))
		ftdi_sysfs
		dmesg | grep -i -e ftdi -e usbserial -e ttyUSB -e "usb $FTDI_PORT" > $F/dmesg.txt
		# the session, with bus 1's usbmon text: until the last close's
		# killed read URBs have completed
		bg fses "$F/session_1u.txt" cat $M/1u
		sleep 0.5
		tty_acm /dev/ttyUSB0 > $F/tty_acm.txt 2> $F/tty_acm.err
		echo $? > $F/tty_acm.txt.rc
		waitfor 10 "ftdi_urbs_done $F/session_1u.txt $FDEV" || err "kernel: the ttyUSB0 session's read URBs' completions are not all in session_1u.txt"
		sleep 0.5
		finish fses 0
		echo "tty_acm: $(wc -l < $F/tty_acm.txt) lines (exit $(cat $F/tty_acm.txt.rc)), $(wc -l < $F/session_1u.txt) lines of 1u"
		cat $F/tty_acm.txt $F/tty_acm.err
		ftdi_stty 1 115200 cs7 parenb -cstopb crtscts
		ftdi_stty 2 9600 cs8 -parenb -crtscts
	fi
	ftdi_record unplug "unplug serial" "[ ! -e /sys/bus/usb/devices/$FTDI_PORT ] && [ ! -e /dev/ttyUSB0 ]"
	ls -l /dev/serial > $F/ls_dev_serial_after.txt 2>&1
	HPLOG=
}

kernel_traffic() { # SCSI reads (and first some writes) on the qemu USB stick, each a separate command
	_i=0
	while [ $_i -lt 40 ]; do
		# writes too, so that the bulk OUT data stage's flags are the kernel's, not assumed
		[ $_i -lt 6 ] && dd if=/dev/zero of=$STICK bs=4096 count=1 seek=$((256 + _i)) conv=fsync 2>/dev/null
		echo 3 > /proc/sys/vm/drop_caches
		dd if=$STICK of=/dev/null bs=4096 count=1 skip=$_i 2>/dev/null
		_i=$((_i + 1))
	done
}
monfs_traffic() { # monfs's storage simulation makes its own traffic
	sleep 3
}

# sourced inside monfs run for the functions above (monfs_hotplug)
[ "${GUEST_LIB:-0}" = 1 ] && return 0

mkdir -p $O/kernel $O/fuse $O/cuse
echo "kernel $KV flavour $KFLAVOR cuse=$CUSE" > $O/info.txt
step "0. system"
uname -a
cat /proc/cmdline
nproc

if [ "$KFLAVOR" = custom ]; then
	step "U. user_events (custom kernel)"
	. /guest-user-events.sh
	echo DONE > $O/DONE
	exit 0
fi

# ---------------------------------------------------------------- the kernel
step "K1. kernel usbmon: load, device nodes"
load usbmon
ls -la $M
# devtmpfs makes the nodes; create them from sysfs if it did not
for d in /sys/class/usbmon/*; do
	n=/dev/$(basename "$d")
	[ -e "$n" ] || mknod -m 600 "$n" c $(tr ':' ' ' < "$d/dev")
done
step "K2. kernel: enumeration of qemu's usb-kbd, usb-tablet, usb-storage, usb-mouse on qemu-xhci, usb-audio on a second one"
bg kenum "$O/kernel/0u_enum.txt" cat $M/0u
bg kenumh "$O/kernel/hdr0_enum.txt" usbmon_hdr getx /dev/usbmon0 100000 60
sleep 0.5
load xhci_pci usbhid hid_generic usb_storage sd_mod snd_usb_audio
waitfor 20 '[ -e /sys/bus/usb/devices/1-1 ] && [ -e /sys/bus/usb/devices/1-2 ] && [ -e /sys/bus/usb/devices/1-3 ]' \
	|| err "kernel: the three qemu USB devices did not appear on bus 1"
waitfor 20 '[ -e /sys/bus/usb/devices/2-1 ]' || err "kernel: qemu's usb-audio did not appear on bus 2"
STICK=
waitfor 20 'ls /sys/block | grep -q ^sd' || err "kernel: the qemu USB stick gave no /dev/sd*"
for b in /sys/block/sd*; do [ -e "$b" ] && STICK=/dev/$(basename $b); done
echo "USB stick: $STICK"
sleep 3
finish kenum 0
finish kenumh 0
cat /sys/kernel/debug/usb/devices > $O/kernel/devices.txt
for d in /sys/bus/usb/devices/[0-9]*-[0-9]*; do
	case $d in *:*) continue ;; esac
	echo "$(basename $d) busnum=$(cat $d/busnum) devnum=$(cat $d/devnum) id=$(cat $d/idVendor):$(cat $d/idProduct) speed=$(cat $d/speed) product=$(cat $d/product 2>/dev/null)"
done | tee $O/kernel/sysfs_devices.txt
for d in /sys/bus/usb/devices/[12]-[0-9]; do # qemu's descriptors, for the simulator's
	echo "$(basename $d) descriptors $(od -An -v -tx1 $d/descriptors | tr -d ' \n')"
	for s in manufacturer product serial configuration; do
		[ -e $d/$s ] && echo "$(basename $d) $s $(cat $d/$s)"
	done
	# every string the device answers (interface and unit names too)
	usb_strings /dev/bus/usb/$(printf %03d $(cat $d/busnum))/$(printf %03d $(cat $d/devnum)) 15 |
		sed "s/^/$(basename $d) string /"
	for i in $d/$(basename $d):*; do
		echo "$(basename $i) driver $(basename $(readlink $i/driver) 2>/dev/null)"
	done
done > $O/kernel/descriptors.txt
for r in /sys/bus/hid/devices/*/report_descriptor; do
	[ -e "$r" ] && echo "$(basename $(dirname $r)) $(od -An -v -tx1 $r | tr -d ' \n')"
done >> $O/kernel/descriptors.txt
nodes $O/kernel/nodes.txt /dev/usbmon0 /dev/usbmon1
cat $O/kernel/nodes.txt
grep usbmon /proc/devices
stat_files $O/kernel $M

step "K2h. kernel: hist trigger grammar"
hist_grammar_side $O/kernel /sys/kernel/tracing
step "K3. kernel: ioctl transcripts"
run_ioctls $O/kernel /dev/usbmon
step "K4. kernel: clients and tcpdump on bus 1 during SCSI reads"
TCPDUMP=1 run_clients $O/kernel /dev/usbmon1 $M kernel_traffic
cat $O/kernel/tcpdump.out.err
step "K4u. kernel: usbfs session with the keyboard (/dev/bus/usb)"
KDEV=$(kbd_devnum_kernel) || err "kernel: no QEMU USB Keyboard in sysfs"
echo "$KDEV" > $O/kernel/usbfs_devnum.txt
usbfs_session $O/kernel $M /dev/bus/usb/001/$(printf %03d "$KDEV")
step "K4l. kernel: libusb session with the keyboard (/dev/bus/usb)"
libusb_session $O/kernel $M /dev/bus/usb/001/$(printf %03d "$KDEV")
step "K4h. kernel: hidraw session with the keyboard (/dev/hidrawN)"
KHR=$(kbd_hidraw /sys/class/hidraw) || err "kernel: no hidraw node of the QEMU USB Keyboard"
HIDAPI_RUN= HIDRAW_REVOKE=--revoke hidraw_session $O/kernel $M /dev/$KHR /sys/class/hidraw/$KHR/device/report_descriptor /dev/$KHR
step "K4i. kernel: usbfs isochronous session with the audio device (/dev/bus/usb)"
KADEV=$(audio_devnum_kernel) || err "kernel: no QEMU USB Audio in sysfs"
echo "$KADEV" > $O/kernel/iso_devnum.txt
iso_session $O/kernel $M /dev/bus/usb/002/$(printf %03d "$KADEV")
step "K4p. kernel: hot-plug through qemu's monitor with udevd, udevadm monitor --kernel --udev --property"
# The host (scripts/kernel-vm.d/hotplug.py) unplugs and plugs qemu's
# keyboard and stick on the guest's request (device_del, device_add); each
# is recorded by udevadm monitor while Debian's udevd (its rules, hwdb.bin)
# runs. udevd stops afterwards: nothing else here runs with it.
if [ -c /dev/ttyS1 ] && stty -F /dev/ttyS1 raw -echo; then
	exec 3<>/dev/ttyS1
	mkdir -p /run
	# no evdev from udevd's kmod builtin (an input device's MODALIAS)
	# before step K4e loads it: these recordings are without it
	mkdir -p /etc/modprobe.d
	echo "blacklist evdev" > /etc/modprobe.d/kernel-vm-evdev.conf
	udevd_ok=1
	systemd-udevd --daemon --resolve-names=never > $O/kernel/udevd.log 2>&1 || { err "kernel: systemd-udevd --daemon failed: $(tail -1 $O/kernel/udevd.log)"; udevd_ok=0; }
	waitfor 10 '[ -S /run/udev/control ]' || { err "kernel: udevd made no /run/udev/control"; udevd_ok=0; }
	if [ $udevd_ok = 1 ]; then
		# as systemd-udev-trigger does at boot: udevd's database for the
		# USB devices the kernel found before udevd ran, which a remove
		# event's properties come from
		udevadm trigger --action=add --subsystem-match=usb || err "kernel: udevadm trigger failed"
		settle
		hotplug_kernel
	fi
	input_kernel $udevd_ok
	ftdi_kernel
	echo bye >&3
	read -t 10 -r _a <&3
	udevadm control --exit || err "kernel: udevadm control --exit failed"
	exec 3>&-
else
	err "kernel: no /dev/ttyS1 to ask the host for hot-plugs"
fi
step "K4h. kernel: the uevents of an unplug of the keyboard (its port disabled)"
# usb_disconnect of the keyboard alone (qemu's xHCI does not report the
# device again when the port is enabled, so the plug half is monfs's only).
PORT=/sys/bus/usb/devices/1-0:1.0/usb1-port1/disable
if [ -e $PORT ]; then
	bg kuev "$O/kernel/uevents.txt" uevent_listen 20 4 1-1
	waitfor 5 "grep -q ready $O/kernel/uevents.txt" || err "kernel: uevent_listen did not start"
	echo 1 > $PORT
	finish kuev 20
	echo 0 > $PORT
else
	err "kernel: no $PORT to disable the keyboard's port with"
fi
step "K4t. kernel: cdc_acm's ttyACM0 on g_serial through dummy_hcd (tests/c/tty_acm.c, a loopback on ttyGS0)"
# The host side of a CDC ACM port and the device side in one kernel:
# dummy_hcd's bus, g_serial's ACM function (usb_f_acm, loaded first: the
# guest has no /sbin/modprobe for its request_module), cdc_acm binding it
# as ttyACM0. tty_acm --loopback echoes on the gadget's ttyGS0 while
# tty_acm drives ttyACM0 and usbmon records the bus (tests/data/kernel_acm
# keeps a run's measurement; compare.py compares each run with it).
acm_session
step "K5. kernel: unload usbmon (its /dev/usbmonN names are monfs's next)"
rmmod usbmon || err "rmmod usbmon failed"
waitfor 5 '[ ! -e /dev/usbmon1 ]' || err "/dev/usbmon1 still exists after rmmod usbmon"

# ---------------------------------------------------------------- monfs
monfs_part() {
step "M1. monfs mount"
load fuse
CUSEFLAG=
if [ "$CUSE" = 1 ]; then
	if monfs mount --help | grep -q -- '--cuse'; then
		load cuse
		CUSEFLAG=--cuse
	else
		err "CUSE: this monfs has no 'mount --cuse' option; CUSE was not tested"
	fi
fi
mkdir -p $MNT
bg monfs "$O/monfs.log" monfs mount -f --log-level info --config /etc/monfs-qemu.yaml $CUSEFLAG $MNT
if ! waitfor 15 "grep -q ' $MNT ' /proc/mounts"; then
	err "monfs did not mount: $(tail -1 $O/monfs.log.err)"
	finish monfs 0
	return 1
fi
bg fenum "$O/fuse/0u_enum.txt" cat $MNT/usb/usbmon/0u
bg fenumh "$O/fuse/hdr0_enum.txt" usbmon_hdr getx $MNT/dev/usbmon0 100000 60
if [ -n "$CUSEFLAG" ]; then
	waitfor 10 '[ -e /dev/usbmon0 ] && [ -e /dev/usbmon1 ]' || err "CUSE: /dev/usbmon0 and /dev/usbmon1 did not appear"
	bg cenumh "$O/cuse/hdr0_enum.txt" usbmon_hdr getx /dev/usbmon0 100000 60
fi
# The buses start paused (monfs-qemu.yaml), so that the captures above
# see their enumeration from its first request however slowly the guest
# got here.
sleep 0.5
monfs ctl $MNT resume 1 >/dev/null || err "monfs ctl resume 1 failed"
monfs ctl $MNT resume 2 >/dev/null || err "monfs ctl resume 2 failed"
echo "monfs up at $(up); the buses resumed: devices plug in 4 s"
# Each device enumerated and its driver's probe over (a slow guest on a
# busy host took longer than a fixed wait, and the captures ended before
# usb-storage's GET_MAX_LUN or snd-usb-audio's mixer requests).
for bp in "1 1" "1 2" "1 3" "1 4" "2 1"; do
	# shellcheck disable=SC2086
	monfs ctl $MNT wait $bp present timeout_ms=120000 >/dev/null ||
		err "monfs: the device at bus and port $bp did not enumerate"
done
sleep 3
finish fenum 0
finish fenumh 0
finish cenumh 0
cat $MNT/usb/devices > $O/fuse/devices.txt
if [ ! -s $O/fuse/devices.txt ]; then
	err "monfs: cat usb/devices read nothing (a second read with grep follows)"
	grep '' $MNT/usb/devices > $O/fuse/devices.txt
fi
ls -la $MNT $MNT/dev $MNT/usb/usbmon > $O/fuse/ls.txt 2>&1
nodes $O/fuse/nodes.txt $MNT/dev/usbmon0 $MNT/dev/usbmon1 $MNT/dev/monreader
if [ -n "$CUSEFLAG" ]; then
	nodes $O/cuse/nodes.txt /dev/usbmon0 /dev/usbmon1 /dev/monreader
	cat $O/cuse/nodes.txt
	ls -la /sys/class/cuse/ > $O/cuse/sysfs.txt 2>&1
fi
stat_files $O/fuse $MNT/usb/usbmon

step "M1h. monfs: hist trigger grammar"
hist_grammar_side $O/fuse $MNT/tracing
step "M2. monfs: ioctl transcripts"
run_ioctls $O/fuse $MNT/dev/usbmon
[ -n "$CUSEFLAG" ] && run_ioctls $O/cuse /dev/usbmon
step "M3. monfs: clients on bus 1 (FUSE files)"
TCPDUMP=0 run_clients $O/fuse $MNT/dev/usbmon1 $MNT/usb/usbmon monfs_traffic
step "M3u. monfs: usbfs session with the keyboard (dev/bus/usb)"
MDEV=$(awk '/^T:/ {d = $0; sub(/.*Dev#= */, "", d); sub(/ .*/, "", d)} /Product=QEMU USB Keyboard/ {print d; exit}' $MNT/usb/devices)
[ -n "$MDEV" ] || err "monfs: no QEMU USB Keyboard in usb/devices"
echo "$MDEV" > $O/fuse/usbfs_devnum.txt
usbfs_session $O/fuse $MNT/usb/usbmon $MNT/dev/bus/usb/001/$(printf %03d "$MDEV")
step "M3l. monfs: libusb session with the keyboard (dev/bus/usb)"
libusb_session $O/fuse $MNT/usb/usbmon $MNT/dev/bus/usb/001/$(printf %03d "$MDEV")
step "M3h. monfs: hidraw session with the keyboard (dev/hidrawN)"
MHR=$(kbd_hidraw $MNT/sys/class/hidraw) || err "monfs: no hidraw node of the QEMU USB Keyboard"
HIDAPI_RUN="monfs run --use $MNT --" HIDRAW_REVOKE= hidraw_session $O/fuse $MNT/usb/usbmon $MNT/dev/$MHR \
	$MNT/sys/class/hidraw/$MHR/device/report_descriptor /dev/$MHR
step "M3i. monfs: usbfs isochronous session with the audio device (dev/bus/usb)"
MADEV=$(awk '/^T:/ {d = $0; sub(/.*Dev#= */, "", d); sub(/ .*/, "", d)} /Product=QEMU USB Audio/ {print d; exit}' $MNT/usb/devices)
[ -n "$MADEV" ] || err "monfs: no QEMU USB Audio in usb/devices"
echo "$MADEV" > $O/fuse/iso_devnum.txt
iso_session $O/fuse $MNT/usb/usbmon $MNT/dev/bus/usb/002/$(printf %03d "$MADEV")
if [ -n "$CUSEFLAG" ]; then
	step "M4. monfs: clients and tcpdump -i usbmon1 on the CUSE devices"
	TCPDUMP=1 run_clients $O/cuse /dev/usbmon1 $MNT/usb/usbmon monfs_traffic
	cat $O/cuse/tcpdump.out.err
fi
step "M5. monfs: monreader"
monreader_tool -n 2 -N -i 15000 $MNT/dev/monreader > $O/fuse/monreader.txt 2>&1; echo $? > $O/fuse/monreader.txt.rc
if [ -n "$CUSEFLAG" ]; then
	monreader_tool -n 2 -N -i 15000 /dev/monreader > $O/cuse/monreader.txt 2>&1; echo $? > $O/cuse/monreader.txt.rc
fi
step "M4e. monfs: the input layer of the keyboard, the tablet and the mouse on the mount's files (sys/class/input, dev/input/eventN)"
monfs_input $O/fuse/input $MNT/sys $MNT/dev $MNT/usb/usbmon monfs ctl $MNT
step "M5h. monfs run: the uevents of an unplug and a plug of the keyboard (monfs ctl)"
mkdir -p /run
monfs run --timing fast --config /etc/monfs-qemu.yaml -- sh -c '
	# The buses start paused (monfs-qemu.yaml); the keyboard plugs 4 ms
	# after its bus resumes (fast timing): its plug is over, and
	# announced, before the listener starts.
	monfs ctl resume 1 >/dev/null
	monfs ctl wait 1 1 present >/dev/null
	uevent_listen 40 9 1-1 > /out/fuse/uevents.txt & L=$!
	n=50; until grep -q ready /out/fuse/uevents.txt || [ $n = 0 ]; do sleep 0.1; n=$((n - 1)); done
	monfs ctl unplug --wait 1 1 >/dev/null
	monfs ctl plug 1 1 hid-keyboard >/dev/null
	wait $L' > $O/fuse/uevents.run 2>&1 || err "monfs run: the uevent session failed: $(tail -3 $O/fuse/uevents.run)"
step "M5c. monfs run: the keyboard's hidraw node (a character device through CUSE as root), hidapi on it"
monfs run --timing fast --config /etc/monfs-qemu.yaml -- sh -c '
	monfs ctl resume 1 >/dev/null
	monfs ctl wait 1 1 present >/dev/null
	monfs ctl wait settled >/dev/null
	for d in /sys/class/hidraw/hidraw*; do
		grep -q "^HID_NAME=QEMU QEMU USB Keyboard$" $d/device/uevent && N=$(basename $d)
	done
	echo "type $(stat -c %F /dev/$N)"
	echo "number $(printf %d:%d 0x$(stat -c %t /dev/$N) 0x$(stat -c %T /dev/$N)) sysfs $(cat /sys/class/hidraw/$N/dev)"
	hidraw_hidapi 0 /dev/$N
	hidraw_hostile --no-read --revoke /dev/$N /sys/class/hidraw/$N/device/report_descriptor > /out/fuse/hidraw_cuse_hostile.txt 2>&1
	' > $O/fuse/hidraw_cuse.txt 2>&1 || err "monfs run: the hidraw session failed: $(tail -3 $O/fuse/hidraw_cuse.txt)"
cat $O/fuse/hidraw_cuse.txt
step "M5t. monfs run: an ACM port's node (a character device through CUSE as root), tests/c/tty_acm.c on it and on the mount's file"
# examples/acm_loopback.c as an external device on a bus of its own; two
# runs, so that each session opens a port fresh from its probe (a tty
# keeps its termios from one open to the next).
acm_loopback --dump /tmp/acm.desc
cat > /tmp/monfs-acm.yaml <<'ACM'
usb:
  buses:
    - bus: 3
      hub_poll_ms: 0
      devices:
        - {port: 1, kind: external, descriptors: /tmp/acm.desc, manufacturer: monfs, product: ACM loopback, serial: "1", command: [acm_loopback]}
ACM
monfs run --timing fast --config /tmp/monfs-acm.yaml -- sh -c '
	echo "type $(stat -c %F /dev/ttyACM0)"
	echo "number $(printf %d:%d 0x$(stat -c %t /dev/ttyACM0) 0x$(stat -c %T /dev/ttyACM0)) sysfs $(cat /sys/class/tty/ttyACM0/dev)"
	tty_acm /dev/ttyACM0 > /out/fuse/tty_acm_cuse.txt 2>&1
	echo "rc $?"' > $O/fuse/tty_cuse.txt 2>&1 || err "monfs run: the ttyACM0 character device session failed: $(tail -3 $O/fuse/tty_cuse.txt)"
monfs run --timing fast --config /tmp/monfs-acm.yaml -- sh -c 'tty_acm $MONFS_MOUNT/dev/ttyACM0' \
	> $O/fuse/tty_acm_file.txt 2>&1 || err "monfs run: the ttyACM0 file session failed: $(tail -3 $O/fuse/tty_acm_file.txt)"
cat $O/fuse/tty_cuse.txt
step "M5p. monfs run: udevadm monitor --kernel --udev --property during an unplug and a plug of the keyboard, the stick and the audio device (monfs ctl)"
monfs run --timing fast --config /etc/monfs-qemu.yaml -- sh -c 'GUEST_LIB=1; . /guest.sh; monfs_hotplug' \
	> $O/fuse/hotplug.run 2>&1 || err "monfs run: the hot-plug session failed: $(tail -3 $O/fuse/hotplug.run)"
cat $O/fuse/hotplug.run
step "M5e. monfs run: the input layer (CUSE event nodes as root), udev's properties and links, the keyboard's unplug and plug"
monfs run --timing fast --config /etc/monfs-qemu.yaml -- sh -c 'GUEST_LIB=1; . /guest.sh; monfs_input_run' \
	> $O/run_input.log 2>&1 || err "monfs run: the input session failed: $(tail -3 $O/run_input.log)"
cat $O/run_input.log
step "M6. monfs: unmount"
kill -TERM $PID_monfs
finish monfs 10
grep -q " $MNT " /proc/mounts && err "monfs still mounted after SIGTERM"
[ -n "$CUSEFLAG" ] && [ -e /dev/usbmon1 ] && err "CUSE: /dev/usbmon1 still exists after monfs exited"
tail -20 $O/monfs.log.err
}
monfs_part
step "done"
echo DONE > $O/DONE
