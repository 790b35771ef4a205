# shellcheck shell=bash
# trixie.sh: Debian 13 ("trixie") packages, fetched at run time and cached,
# for scripts/libtracefs-utest and scripts/trace-cmd-3.3. Nothing fetched is
# ever copied into the repository.
#
# Debian 12 has no trixie in its apt sources, so packages come through a
# private apt state (its own sources.list with `deb` and `deb-src` lines for
# trixie on the machine's Debian mirror, its own lists and archives, no dpkg
# status); /etc/apt is left alone. The state and everything downloaded are
# kept under $TX_CACHE (MONFS_LIBTRACEFS_CACHE, by default
# /var/tmp/monfs-libtracefs), so reruns work offline: `apt-get update` runs
# only when something is not in the cache yet.
#
# Sourced (not run) by a bash script with `set -euo pipefail` that defines
#   die MESSAGE   print an error and exit non-zero
#   log MESSAGE   print a progress line
# Functions:
#   trixie_source PKG VERSION   the source package (.dsc, orig and debian
#                               tarballs) in $TX_CACHE/sources (apt-get source
#                               --download-only), unpacked with Debian's
#                               patches (dpkg-source -x, which checks every
#                               file against the .dsc) into a fresh
#                               $TX_CACHE/build/PKG-UPSTREAM; sets TX_SRCDIR
#   trixie_debs PKG[=VERSION]...  the binary packages in $TX_CACHE/debs
#                               (apt-get download; without a version, the
#                               first one cached, else trixie's current one);
#                               sets TX_DEBS (their paths)

TX_CACHE=${MONFS_LIBTRACEFS_CACHE:-/var/tmp/monfs-libtracefs}
# Another suite's packages: set TX_SUITE (and TX_CACHE) after sourcing, as
# scripts/libusb-netlink does for bookworm's sources.
TX_SUITE=trixie
_TX_APT=()

# The private apt state; `apt-get update` once per run at most, and only
# when a download is needed.
_tx_apt() {
	[ ${#_TX_APT[@]} -eq 0 ] || return 0
	local mirror A=$TX_CACHE/apt-$TX_SUITE
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $2 ~ /^http/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$mirror" ] || die "no Debian mirror in the apt sources; cannot reach $TX_SUITE"
	mkdir -p "$A/lists/partial" "$A/cache/archives/partial"
	printf 'deb %s %s main\ndeb-src %s %s main\n' "$mirror" "$TX_SUITE" "$mirror" "$TX_SUITE" > "$A/sources.list"
	_TX_APT=(-o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o Dir::State::Status=/dev/null
		-o APT::Sandbox::User=root -o Acquire::Retries=2
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
		-o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false)
	log "apt-get update of $TX_SUITE (private apt state in $A)"
	apt-get "${_TX_APT[@]}" update -qq || die "apt-get update of $TX_SUITE (deb and deb-src, $mirror) failed"
}

# The files a .dsc lists (its Files: section), one a line.
_tx_dsc_files() { awk '/^Files:/ {f = 1; next} f && /^ / {print $3; next} f {exit}' "$1"; }

trixie_source() {
	local pkg=$1 ver=$2 up dsc d f missing=()
	up=${ver#*:}           # no epoch in file names
	dsc=$TX_CACHE/sources/${pkg}_${up}.dsc
	mkdir -p "$TX_CACHE/sources"
	if [ -s "$dsc" ]; then
		while read -r f; do [ -s "$TX_CACHE/sources/$f" ] || missing+=("$f"); done < <(_tx_dsc_files "$dsc")
	fi
	if [ ! -s "$dsc" ] || [ ${#missing[@]} -gt 0 ]; then
		_tx_apt
		log "downloading the source package $pkg $ver from $TX_SUITE (once; cached in $TX_CACHE/sources)"
		rm -rf "$TX_CACHE/sources/partial"; mkdir -p "$TX_CACHE/sources/partial"
		if ! (cd "$TX_CACHE/sources/partial" && apt-get "${_TX_APT[@]}" source --download-only "$pkg=$ver") \
			>"$TX_CACHE/sources/partial.log" 2>&1; then
			grep -E '^(E|Err):|404' "$TX_CACHE/sources/partial.log" | sed 's/^/  /' >&2 || true
			die "apt-get source --download-only $pkg=$ver failed (log: $TX_CACHE/sources/partial.log)"
		fi
		for f in "$TX_CACHE/sources/partial"/*; do
			[ -f "$f" ] && mv -f "$f" "$TX_CACHE/sources/"
		done
		rm -rf "$TX_CACHE/sources/partial"
		[ -s "$dsc" ] || die "apt-get source left no $(basename "$dsc")"
	fi
	# Unpacked afresh each run (a build dirties the tree); dpkg-source checks
	# the tarballs against the .dsc's checksums and applies Debian's patches.
	d=$TX_CACHE/build/$pkg-${up%-*}
	rm -rf "$d"; mkdir -p "$TX_CACHE/build"
	dpkg-source -x "$dsc" "$d" >/dev/null 2>&1 \
		|| die "dpkg-source -x $(basename "$dsc") failed (remove $TX_CACHE/sources to download again)"
	TX_SRCDIR=$d
}

# The cached .deb of PKG at VERSION, or at any version if VERSION is empty
# (apt names an epoch's colon %3a).
_tx_cached_deb() {
	local f
	for f in "$TX_CACHE/debs/$1"_*.deb; do
		[ -f "$f" ] || continue
		if [ -z "$2" ] || [ "$(dpkg-deb -f "$f" Version 2>/dev/null)" = "$2" ]; then
			echo "$f"; return
		fi
	done
	return 0
}

trixie_debs() {
	local spec pkg ver f
	TX_DEBS=()
	mkdir -p "$TX_CACHE/debs"
	for spec in "$@"; do
		pkg=${spec%%=*} ver=
		[ "$pkg" = "$spec" ] || ver=${spec#*=}
		f=$(_tx_cached_deb "$pkg" "$ver")
		if [ -z "$f" ]; then
			_tx_apt
			log "downloading $pkg ${ver:-(current)} from $TX_SUITE (once; cached in $TX_CACHE/debs)"
			rm -rf "$TX_CACHE/debs/partial"; mkdir -p "$TX_CACHE/debs/partial"
			(cd "$TX_CACHE/debs/partial" && apt-get "${_TX_APT[@]}" download "$spec") \
				|| die "apt-get download $spec from $TX_SUITE failed"
			f=$(find "$TX_CACHE/debs/partial" -maxdepth 1 -name "${pkg}_*.deb" | head -1)
			[ -n "$f" ] || die "apt-get download $spec left no .deb"
			dpkg-deb --info "$f" >/dev/null || die "the downloaded $f is not a valid .deb"
			mv "$f" "$TX_CACHE/debs/"
			rm -rf "$TX_CACHE/debs/partial"
			f=$TX_CACHE/debs/$(basename "$f")
		fi
		TX_DEBS+=("$f")
	done
}
