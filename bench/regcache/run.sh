#!/usr/bin/env bash
# Runs bench_regcache and renders its plot.
# usage: bench/regcache/run.sh [BUILD_DIR] [OUT_PREFIX] [bench args...]
#   BUILD_DIR  default: build
#   OUT_PREFIX default: bench/results/regcache  (writes .json .dat .png .txt)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
out=${2:-$top/bench/results/regcache}
shift $(( $# > 2 ? 2 : $# ))
bin=$build/bench/regcache/bench_regcache
[ -x "$bin" ] || { echo "run.sh: $bin not built (needs libucx-dev: scripts/install-deps bench)" >&2; exit 1; }
"$bin" --json "$out.json" --dat "$out.dat" "$@" | tee "$out.txt"
if command -v gnuplot >/dev/null; then
	gnuplot -e "datafile='$out.dat'; outfile='$out.png'" "$top/bench/regcache/plot.gp"
	echo "plot: $out.png"
else
	echo "gnuplot not found: no plot (scripts/install-deps bench)" >&2
fi
