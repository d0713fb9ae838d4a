#!/usr/bin/env bash
# peerdma record end to end over loopback: gen sends 2 streams with loss,
# duplication and reordering (and its pcap of every datagram), record writes
# the SigMF recordings, sigmf_check.py compares them with the pcap: metadata
# valid, data equal to what was sent, a capture exactly after each loss.
# Then the refusals: a missing --dir, and a GPU path.
# usage: tests/record/record-test.sh PEERDMA_TOOL
set -euo pipefail
tool=$1
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
rpid=
cleanup() {
	[ -z "$rpid" ] || kill "$rpid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
# Debian's python3 has numpy and jsonschema (scripts/install-deps test); a
# python3 earlier in PATH (pyenv) may not.
py=
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import numpy, jsonschema' 2>/dev/null; then
		py=$p
		break
	fi
done
[ -n "$py" ] || { echo "record-test: no python3 with numpy and jsonschema (scripts/install-deps test)"; exit 1; }

"$tool" record --port 0 --dir "$tmp" --prefix cap --idle 1500 --json "$tmp/summary.json" \
	2>"$tmp/record.err" &
rpid=$!
port=
for _ in $(seq 100); do
	port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$tmp/record.err" | cut -d: -f2 || true)
	[ -n "$port" ] && break
	sleep 0.1
done
[ -n "$port" ] || { echo "record-test: record did not start"; cat "$tmp/record.err"; exit 1; }
"$tool" gen --port "$port" --streams 2 --packets 4000 --loss 10 --loss-burst 2 --dup 10 --reorder 10 \
	--seed 7 --rate 40000 --pcap "$tmp/sent.pcap" >/dev/null
if ! wait "$rpid"; then
	rpid=
	echo "record-test: peerdma record failed"
	cat "$tmp/record.err"
	exit 1
fi
rpid=
cat "$tmp/record.err"
"$py" "$src/sigmf_check.py" "$tmp" cap "$tmp/sent.pcap" 10000000
# The summary names both recordings.
"$py" - "$tmp/summary.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["record"]
assert len(r["streams"]) == 2 and r["blocks"] > 0 and r["bytes"] > 0, r
assert all(s["rate_from_context"] for s in r["streams"]), r
print("summary: %d streams, %d blocks, %d bytes" % (len(r["streams"]), r["blocks"], r["bytes"]))
PY

# Refusals, each with its one line.
if "$tool" record --port 0 --dir "$tmp/none" --duration 0.1 -q >/dev/null 2>"$tmp/e1"; then
	echo "record-test: a missing --dir was accepted"; exit 1
fi
grep -q 'not a directory' "$tmp/e1" || { echo "record-test: missing --dir:"; cat "$tmp/e1"; exit 1; }
set +e
"$tool" record --path zero-copy --dir "$tmp" -q >/dev/null 2>"$tmp/e2"
st=$?
set -e
[ "$st" = 2 ] && grep -q -- '--path zero-copy' "$tmp/e2" ||
	{ echo "record-test: --path zero-copy: status $st"; cat "$tmp/e2"; exit 1; }
echo "record-test: passed"
