#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a program against it
# the way a user would: pkg-config for flags, the shared library at run time.
# Then the ingest API the same way: tests/public/ingest_consumer.c, built only
# against the installed <peerdma/ingest.h> and `pkg-config peerdma`, takes
# the sample blocks of a loopback stream that the installed `peerdma gen`
# sends with loss, duplication and reordering; every sample is checked, and
# tests/public/gen_sent.py compares its gaps with what gen's pcap says it sent.
# usage: tests/install-test.sh BUILD_DIR CC
set -euo pipefail
build=$1 cc=$2
src=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/peerdma/mr.h include/peerdma/ingest.h bin/peerdma; do
	[ -e "$prefix/$f" ] || { echo "install-test: $f not installed"; exit 1; }
done
# The simulated device is for tests and the demo, not public API.
[ ! -e "$prefix/include/peerdma/sim.h" ] || { echo "install-test: sim.h installed"; exit 1; }
# The opt-in CUDA hook library sits next to libpeerdma.
[ -n "$(find "$prefix" -name libpeerdma_cuda_hooks.so)" ] ||
	{ echo "install-test: libpeerdma_cuda_hooks.so not installed"; exit 1; }
pc=$(find "$prefix" -name peerdma.pc | head -n1)
[ -n "$pc" ] || { echo "install-test: peerdma.pc not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
cat >"$prefix/user.c" <<'C'
#include <peerdma/mr.h>
#include <stdio.h>
int main(void)
{
	static char buf[4096];
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	struct pdma_mr *m;

	pdma_domain_attr_init(&a);
	if (pdma_domain_open(&a, &d) || pdma_mr_reg(d, buf, 64, PDMA_READ, 0, 0, 0, &m, NULL) ||
	    pdma_mr_key(m) == PDMA_KEY_NOTAVAIL || pdma_mr_close(m) || pdma_domain_close(d))
		return 1;
	printf("installed libpeerdma works\n");
	return 0;
}
C
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Werror -o "$prefix/user" "$prefix/user.c" $(pkg-config --cflags --libs peerdma)
libdir=$(pkg-config --variable=libdir peerdma)
LD_LIBRARY_PATH=$libdir "$prefix/user"
# The static library alone is enough too, and it holds machine code only (no
# LTO bytecode: CMakeLists.txt, install).
if objdump -h "$libdir/libpeerdma.a" | grep '\.gnu\.lto_' >/dev/null; then
	echo "install-test: the installed libpeerdma.a carries LTO bytecode"
	exit 1
fi
# shellcheck disable=SC2046
"$cc" -std=c11 $(pkg-config --cflags peerdma) -o "$prefix/user_static" "$prefix/user.c" \
	"$libdir/libpeerdma.a" \
	$(pkg-config --static --libs-only-l peerdma | sed -E 's/-lpeerdma(_ingest)?( |$)//g')
"$prefix/user_static"
"$prefix/bin/peerdma" --help >/dev/null

# The ingest API: a loopback stream, every sample and gap checked.
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Werror -o "$prefix/consumer" "$src/public/ingest_consumer.c" \
	$(pkg-config --cflags --libs peerdma)
LD_LIBRARY_PATH=$libdir "$prefix/consumer" 2 3000 >"$prefix/consumer.out" 2>"$prefix/consumer.err" &
cpid=$!
for _ in $(seq 100); do
	grep -q '^PORT ' "$prefix/consumer.out" && break
	sleep 0.1
done
port=$(awk '/^PORT/ {print $2}' "$prefix/consumer.out")
[ -n "$port" ] || { echo "install-test: the ingest consumer did not start"; cat "$prefix/consumer.err"; exit 1; }
"$prefix/bin/peerdma" gen --port "$port" --streams 2 --packets 3000 --loss 10 --dup 10 --reorder 10 \
	--seed 11 --rate 50000 --pcap "$prefix/sent.pcap" >/dev/null
if ! wait "$cpid"; then
	echo "install-test: the ingest consumer failed:"
	cat "$prefix/consumer.err"
	exit 1
fi
python3 "$src/public/gen_sent.py" "$prefix/sent.pcap" 10000000 "$prefix/consumer.out"
echo "installed libpeerdma_ingest works"
