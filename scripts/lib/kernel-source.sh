# shellcheck shell=bash
# kernel-source.sh: Debian 12's linux-source-6.12 package, fetched at run time
# and cached, for the runners of the kernel's own selftests
# (scripts/selftests, scripts/ftrace-selftests, scripts/ring-buffer-selftests).
# Nothing from the kernel is
# ever copied into the repository.
#
# The .deb is downloaded once with `apt-get download` (from the machine's apt
# sources, else from bookworm-backports through a private apt state; /etc/apt
# is left alone) and kept under $KSRC_CACHE/debs; the few parts of the source
# the runners need are extracted from it once into $KSRC_CACHE/src/VERSION,
# so reruns work offline. KSRC_CACHE is MONFS_SELFTESTS_CACHE, by default
# /var/tmp/monfs-selftests.
#
# Sourced (not run) by a bash script with `set -euo pipefail` that defines
#   die MESSAGE   print an error and exit non-zero
#   log MESSAGE   print a progress line
# Then `kernel_source` fetches and extracts and sets
#   KSRC_PKG  the package (linux-source-6.12)
#   KSRC_DEB  the cached .deb
#   KSRC_VER  its version (6.12.117-1~deb12u1, ...)
#   KSRC_DIR  the extracted tree: tools/testing/selftests/{user_events,ftrace,
#             ring-buffer}, kselftest.h, kselftest_harness.h,
#             include/uapi/linux/{user_events,trace_mmap}.h

KSRC_CACHE=${MONFS_SELFTESTS_CACHE:-/var/tmp/monfs-selftests}
KSRC_PKG=linux-source-6.12
# What is extracted, as members of the package's tarball (below its top
# directory). The list is written into the tree's .extracted marker, so a
# cache extracted with another list is extracted again.
KSRC_MEMBERS=(
	'tools/testing/selftests/user_events/*'
	'tools/testing/selftests/ftrace/*'
	'tools/testing/selftests/ring-buffer/*'
	tools/testing/selftests/kselftest.h
	tools/testing/selftests/kselftest_harness.h
	include/uapi/linux/user_events.h
	include/uapi/linux/trace_mmap.h
)

# A private apt state with bookworm-backports, /etc/apt untouched.
_ksrc_use_backports() {
	local mirror A=$KSRC_CACHE/apt-backports
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$mirror" ] || die "no Debian mirror in the apt sources; cannot reach bookworm-backports"
	mkdir -p "$A/lists/partial" "$A/cache/archives/partial"
	echo "deb $mirror bookworm-backports main" > "$A/sources.list"
	_KSRC_APT=(-o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o Dir::State::Status=/dev/null
		-o APT::Sandbox::User=root)
	apt-get "${_KSRC_APT[@]}" update -qq || die "apt-get update of bookworm-backports failed"
}

_ksrc_cached_deb() { find "$KSRC_CACHE/debs" -maxdepth 1 -name "${KSRC_PKG}_*.deb" | sort -V | tail -1; }

# Into $KSRC_CACHE/debs/partial, moved into place once complete.
_ksrc_download() {
	rm -rf "$KSRC_CACHE/debs/partial"; mkdir -p "$KSRC_CACHE/debs/partial"
	(cd "$KSRC_CACHE/debs/partial" && apt-get "${_KSRC_APT[@]}" -o APT::Sandbox::User=root download "$KSRC_PKG")
}

kernel_source() {
	local t f tarball want
	[ -r /etc/debian_version ] || die "this runner needs a Debian system (apt-get, dpkg-deb)"
	if ! command -v xz >/dev/null; then
		log "installing xz-utils"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends xz-utils >/dev/null \
			|| die "could not install xz-utils (needed to unpack the kernel source)"
	fi
	for t in dpkg-deb tar xz; do
		command -v "$t" >/dev/null || die "$t is missing"
	done

	# ---- the package, downloaded once
	mkdir -p "$KSRC_CACHE/debs"
	_KSRC_APT=()
	KSRC_DEB=$(_ksrc_cached_deb)
	if [ -z "$KSRC_DEB" ]; then
		log "downloading $KSRC_PKG (about 150 MB, once; cached in $KSRC_CACHE)"
		if ! _ksrc_download 2>/dev/null; then
			apt-get update -qq || die "apt-get update failed"
			if ! _ksrc_download 2>/dev/null; then
				log "no $KSRC_PKG in the machine's apt sources; trying bookworm-backports"
				_ksrc_use_backports
				_ksrc_download || die "apt-get download $KSRC_PKG failed (it is in bookworm-security and bookworm-backports)"
			fi
		fi
		f=$(find "$KSRC_CACHE/debs/partial" -maxdepth 1 -name "${KSRC_PKG}_*.deb" | head -1)
		[ -n "$f" ] || die "apt-get download $KSRC_PKG left no .deb"
		dpkg-deb --info "$f" >/dev/null || die "the downloaded $f is not a valid .deb"
		mv "$f" "$KSRC_CACHE/debs/"
		rm -rf "$KSRC_CACHE/debs/partial"
		KSRC_DEB=$(_ksrc_cached_deb)
	fi
	KSRC_VER=$(dpkg-deb -f "$KSRC_DEB" Version) || die "cannot read the version of $KSRC_DEB"

	# ---- the parts the runners need, extracted once per version and list
	KSRC_DIR=$KSRC_CACHE/src/$KSRC_VER
	want=$(printf '%s\n' "${KSRC_MEMBERS[@]}")
	if [ ! -e "$KSRC_DIR/.extracted" ] || [ "$(cat "$KSRC_DIR/.extracted")" != "$want" ]; then
		log "extracting the user_events, ftrace and ring-buffer selftests from $(basename "$KSRC_DEB")"
		rm -rf "$KSRC_DIR"; mkdir -p "$KSRC_DIR"
		tarball=./usr/src/$KSRC_PKG.tar.xz
		dpkg-deb --fsys-tarfile "$KSRC_DEB" | tar -xO "$tarball" \
			| tar -xJ -C "$KSRC_DIR" --strip-components=1 --wildcards \
				"${KSRC_MEMBERS[@]/#/$KSRC_PKG/}" \
			|| die "extracting the selftests from $KSRC_DEB failed"
		printf '%s\n' "$want" > "$KSRC_DIR/.extracted"
	fi
	for f in tools/testing/selftests/user_events/ftrace_test.c tools/testing/selftests/kselftest_harness.h \
		include/uapi/linux/user_events.h tools/testing/selftests/ftrace/ftracetest \
		tools/testing/selftests/ring-buffer/map_test.c include/uapi/linux/trace_mmap.h; do
		[ -s "$KSRC_DIR/$f" ] || die "$KSRC_DIR/$f is missing after extraction (remove $KSRC_DIR to extract again)"
	done
}
