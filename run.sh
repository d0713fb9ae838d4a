#!/usr/bin/env bash
# The two entry points of README.md:
#   ./run.sh demo   install what is needed, build, run `peerdma demo`
#   ./run.sh test   install what is needed, build, run every test (tests/run-all)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

case "${1:-}" in
demo)
	scripts/install-deps build
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDMA_BENCH=OFF >/dev/null
	cmake --build build -j"$(nproc)" --target peerdma_tool >/dev/null
	shift
	exec build/peerdma demo "$@"
	;;
test)
	scripts/install-deps build test vm kdebug bench
	shift
	exec tests/run-all "$@"
	;;
*)
	echo "usage: $0 demo|test" >&2
	exit 2
	;;
esac
