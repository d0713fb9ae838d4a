#!/usr/bin/env bash
# A shared library exports its public API and nothing else: every dynamic
# symbol it defines is a pdma_ function declared in its header (or a version
# node), and every function the header declares is exported.
# libpeerdma.so: include/peerdma/mr.h, node PEERDMA_0.1 first;
# libpeerdma_ingest.so: include/peerdma/ingest.h and forward.h, PEERDMA_INGEST_0.1.
# usage: tests/public/exports-test.sh SO SOURCE_DIR [HEADER[,HEADER...] FIRST_NODE]
set -euo pipefail
so=$1 src=$2 hdr=${3:-mr.h} node=${4:-PEERDMA_0.1}
defined=$(nm -D --defined-only "$so" | awk '{print $3}' | sed 's/@.*//' | sort)
declared=$(for h in ${hdr//,/ }; do grep -ohE '\bpdma_[a-z0-9_]+\(' "$src/include/peerdma/$h"; done |
	tr -d '(' | sort -u)
bad=$(grep -vxE 'PEERDMA_([A-Z]+_)?[0-9.]+' <<<"$defined" | grep -vxF -f <(printf '%s\n' "$declared") || true)
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
grep -qx "$node" <<<"$defined" || { echo "exports-test: no version node $node"; exit 1; }
echo "exports-test: $(wc -l <<<"$declared") public functions exported, nothing else"
