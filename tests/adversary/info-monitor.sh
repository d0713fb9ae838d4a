#!/bin/sh
# SPDX-License-Identifier: MIT
# `peerdma info` names the host memory monitor a registration cache gets here:
# the same one the adversary's cache picks (adversary --rounds 0 prints it),
# as this user and, when run as root, as nobody (the user-mode-only
# userfaultfd, or memhooks); "none" under PEERDMA_MR_CACHE_MONITOR=disabled.
# usage: info-monitor.sh PEERDMA ADVERSARY; last line "N passed, N failed".
set -u
tool=$1 adv=$2
P=0 F=0
ok() { P=$((P + 1)); echo "ok - $*"; }
bad() { F=$((F + 1)); echo "not ok - $*"; }

# check NAME [RUN...]: info's monitor against the adversary's, run by RUN
check() {
	name=$1
	shift
	out=$("$@" "$tool" info 2>&1) || { bad "$name: peerdma info failed: $out"; return; }
	m=$(printf '%s\n' "$out" | sed -n 's/^Registration cache: host memory monitor \([a-z]*\) (.*/\1/p')
	a=$("$@" "$adv" --rounds 0 2>&1 | sed -n 's/^adversary: monitor \([a-z]*\),.*/\1/p')
	printf '%s\n' "$out" | grep -q '^peerdma\.ko: /dev/peerdma ' || bad "$name: no peerdma.ko line"
	case $m in
	kernel | userfaultfd | memhooks | none) ;;
	*) bad "$name: no monitor line: $(printf '%s\n' "$out" | tail -n 3)"; return ;;
	esac
	if [ "$m" = "$a" ]; then ok "$name: info says $m, as the cache picks"; else bad "$name: info says $m, the cache picks '$a'"; fi
}

check "$(id -un)" env
m=$(PEERDMA_MR_CACHE_MONITOR=disabled "$tool" info | grep '^Registration cache:')
case $m in
*"monitor none ("*"as PEERDMA_MR_CACHE_MONITOR asks") ok "PEERDMA_MR_CACHE_MONITOR=disabled: none" ;;
*) bad "PEERDMA_MR_CACHE_MONITOR=disabled: $m" ;;
esac
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	# private copies: the build tree may not be readable by nobody
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	cp "$tool" "$dir/peerdma"
	cp "$adv" "$dir/adversary"
	chmod 755 "$dir" "$dir/peerdma" "$dir/adversary"
	tool=$dir/peerdma adv=$dir/adversary
	check nobody setpriv --reuid=nobody --regid=nogroup --clear-groups
fi
echo "$P passed, $F failed"
[ "$F" = 0 ]
