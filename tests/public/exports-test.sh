#!/usr/bin/env bash
# libpeerdma.so exports its public API and nothing else: every dynamic symbol
# it defines is a pdma_ function declared in include/peerdma/mr.h (or the
# version node itself), and every function mr.h declares is exported.
# usage: tests/public/exports-test.sh LIBPEERDMA_SO SOURCE_DIR
set -euo pipefail
so=$1 src=$2
defined=$(nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' | sort)
declared=$(grep -ohE '\bpdma_[a-z0-9_]+\(' "$src"/include/peerdma/mr.h | tr -d '(' | sort -u)
bad=$(grep -vxE 'PEERDMA_[0-9.]+' <<<"$defined" | grep -vxF -f <(printf '%s\n' "$declared") || true)
if [ -n "$bad" ]; then
	echo "exports-test: $so exports names outside the public API:"
	printf '  %s\n' $bad
	exit 1
fi
missing=$(grep -vxF -f <(printf '%s\n' "$defined") <<<"$declared" || true)
if [ -n "$missing" ]; then
	echo "exports-test: public functions not exported by $so:"
	printf '  %s\n' $missing
	exit 1
fi
unversioned=$(nm -D --defined-only "$so" | awk '$3 ~ /^pdma_/ && $3 !~ /@@PEERDMA_/ {print $3}')
[ -z "$unversioned" ] || { echo "exports-test: without a version node: $unversioned"; exit 1; }
grep -qx 'PEERDMA_0.1' <<<"$defined" || { echo "exports-test: no version node PEERDMA_0.1"; exit 1; }
echo "exports-test: $(wc -l <<<"$declared") public functions exported, nothing else"
