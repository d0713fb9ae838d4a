#!/usr/bin/env bash
# peerdma record end to end over loopback: gen sends 2 streams with loss,
# duplication and reordering (and its pcap of every datagram), record writes
# the SigMF recordings, sigmf_check.py compares them with the pcap: metadata
# valid, data equal to what was sent, a capture exactly after each loss.
# The cpu path always; the GPU paths (host-staged, zero-copy: blocks in GPU
# memory) where a CUDA device is, else they say "skipped: no CUDA device".
# SIGINT to gen and then to record mid-stream: the recordings equal what gen
# says it sent. Then a refusal: a missing --dir.
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
. "$(dirname "$0")/../lib/check-python.sh" record-test

# start_record DIR OPTIONS...: record into DIR in the background (rpid), its
# UDP port in port once it listens (empty if it never did), stderr in
# DIR/record.err, the summary in DIR/summary.json
start_record() {
	local d=$1
	shift
	port=
	"$tool" record --port 0 --dir "$d" --prefix cap --json "$d/summary.json" "$@" 2>"$d/record.err" &
	rpid=$!
	# up to 60 s: a sanitizer's runtime starts slowly
	for _ in $(seq 600); do
		port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$d/record.err" | cut -d: -f2 || true)
		[ -n "$port" ] && break
		kill -0 "$rpid" 2>/dev/null || break
		sleep 0.1
	done
}

# wait_bounded PID SECONDS: wait for PID, killing it (-9) after SECONDS; its
# status. A polling loop in this shell, not a watchdog subshell: a subshell
# killed before it has reset the traps it inherited runs the EXIT trap
# (cleanup: the recordings deleted, record killed, under CI's load).
wait_bounded() {
	local i
	for i in $(seq $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null || true
	wait "$1"
}

# record_path PATH: 0 checked, 77 no CUDA device for it, else failed.
record_path() {
	local path=$1 d=$tmp/$1
	mkdir -p "$d"
	start_record "$d" --path "$path" --idle 1500
	if [ -z "$port" ]; then
		kill "$rpid" 2>/dev/null || true
		wait "$rpid" || true
		rpid=
		if [ "$path" != cpu ] && grep -q 'needs a CUDA device' "$d/record.err"; then
			echo "record-test: --path $path: skipped: no CUDA device"
			return 77
		fi
		echo "record-test: --path $path: record did not start"
		cat "$d/record.err"
		return 1
	fi
	"$tool" gen --port "$port" --streams 2 --packets 4000 --loss 10 --loss-burst 2 --dup 10 \
		--reorder 10 --seed 7 --rate 40000 --pcap "$d/sent.pcap" >/dev/null 2>"$d/gen.err"
	if ! wait "$rpid"; then
		rpid=
		echo "record-test: --path $path: peerdma record failed"
		cat "$d/record.err"
		return 1
	fi
	rpid=
	cat "$d/record.err"
	"$py" "$src/sigmf_check.py" "$d" cap "$d/sent.pcap" 10000000 || return 1
	# The summary names both recordings.
	"$py" - "$d/summary.json" <<'PY' || return 1
import json, sys
r = json.load(open(sys.argv[1]))["record"]
assert len(r["streams"]) == 2 and r["blocks"] > 0 and r["bytes"] > 0, r
assert all(s["rate_from_context"] for s in r["streams"]), r
print("summary: %d streams, %d blocks, %d bytes" % (len(r["streams"]), r["blocks"], r["bytes"]))
PY
	rm -rf "$d"
}

record_path cpu
for p in host-staged zero-copy; do
	st=0
	record_path "$p" || st=$?
	[ "$st" = 0 ] || [ "$st" = 77 ] || exit 1
done

# --idle while the deframer is stalled. The writer blocks (its data file is a
# FIFO nobody reads yet), its queue fills, the backpressure policy holds the
# deframer, and the 64-slot ring drops what gen goes on sending. Those
# datagrams arrived: --idle must not end the session until gen stops. Then
# every datagram gen sent was received or counted dropped, and the final
# report names the ring's drops. (Before, idle counted only datagrams that
# got a slot, and the session stopped 0.3 s into the stall.)
d=$tmp/stall
mkdir -p "$d"
mkfifo "$d/cap-0x1000.sigmf-data"
start_record "$d" --policy backpressure --no-sync --idle 300 --ring-slots 64
[ -n "$port" ] || { echo "record-test: stall: record did not start"; cat "$d/record.err"; exit 1; }
"$tool" gen --port "$port" --streams 1 --packets 40000 --rate 20000 >/dev/null 2>"$d/gen.err"
timeout 120 cat "$d/cap-0x1000.sigmf-data" >/dev/null &
if ! wait "$rpid"; then
	rpid=
	echo "record-test: stall: peerdma record failed"; cat "$d/record.err"; exit 1
fi
rpid=
"$py" - "$d/summary.json" <<'PY' || { cat "$d/record.err"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
arrived = s["datagrams"] + s["ring_overruns"] + s["socket_drops"]
print("stall: %d datagrams received, %d dropped by the full ring, %d by the kernel, of 40001 sent"
      % (s["datagrams"], s["ring_overruns"], s["socket_drops"]))
assert s["ring_overruns"] > 0, "the deframer never stalled: the case did not happen"
assert arrived == 40001, "the session stopped while gen was sending"
PY
grep -q "dropped before the deframer: [1-9][0-9]* datagram(s) by a full receive ring" "$d/record.err" ||
	{ echo "record-test: stall: the report does not name the ring's drops"; cat "$d/record.err"; exit 1; }

# SIGINT to both ends, as a person ends a live capture. gen (paced, 10^8
# packets a stream) stopped 1 s in ends each stream after its event in
# progress and its pcap holds what it sent; record, stopped a moment later
# (its --idle far off), writes the metadata on the signal. The recordings
# then equal gen's pcap sample for sample, a capture after each loss.
# (Before, SIGINT did not reach a background gen at all: the watchdog's
# SIGKILL ends it and the case fails.)
d=$tmp/signals
mkdir -p "$d"
start_record "$d" --idle 60000
[ -n "$port" ] || { echo "record-test: signals: record did not start"; cat "$d/record.err"; exit 1; }
"$tool" gen --port "$port" --streams 2 --packets 100000000 --loss 10 --loss-burst 2 --dup 10 \
	--reorder 10 --seed 7 --rate 20000 --pcap "$d/sent.pcap" >/dev/null 2>"$d/gen.err" &
gp=$!
sleep 1
kill -INT "$gp"
if ! wait_bounded "$gp" 10; then
	echo "record-test: signals: gen did not end cleanly on SIGINT"; cat "$d/gen.err"; exit 1
fi
sleep 0.5
if ! kill -0 "$rpid" 2>/dev/null; then
	# it was to run until this SIGINT: say how it ended (set -e would not)
	st=0
	wait "$rpid" || st=$?
	rpid=
	echo "record-test: signals: peerdma record ended by itself before the SIGINT (status $st)"
	cat "$d/record.err" "$d/gen.err"
	exit 1
fi
kill -INT "$rpid"
if ! wait "$rpid"; then
	rpid=
	echo "record-test: signals: peerdma record failed on SIGINT"; cat "$d/record.err"; exit 1
fi
rpid=
"$py" "$src/sigmf_check.py" "$d" cap "$d/sent.pcap" 10000000 || { cat "$d/gen.err" "$d/record.err"; exit 1; }
echo "record-test: signals: $(cat "$d/gen.err")"

# --zmq beside the recording (ingest's option, publishing record's blocks):
# the recordings are as without it, the summary counts the messages. Before,
# record refused its own blocks (-EBUSY, "sample blocks on this path") and
# never exited, not even on SIGTERM: the watchdog ends it and the case fails.
if "$tool" record --help 2>&1 | grep -- '--zmq' >/dev/null; then
	d=$tmp/zmq
	mkdir -p "$d"
	start_record "$d" --idle 1500 --zmq 'tcp://127.0.0.1:*'
	[ -n "$port" ] || { echo "record-test: zmq: record did not start"; cat "$d/record.err"; exit 1; }
	"$tool" gen --port "$port" --streams 2 --packets 2000 --loss 10 --seed 5 --rate 40000 \
		--pcap "$d/sent.pcap" >/dev/null 2>"$d/gen.err"
	if ! wait_bounded "$rpid" 60; then
		rpid=
		echo "record-test: zmq: peerdma record --zmq failed or hung"; cat "$d/record.err"; exit 1
	fi
	rpid=
	"$py" "$src/sigmf_check.py" "$d" cap "$d/sent.pcap" 10000000 || { cat "$d/record.err"; exit 1; }
	"$py" -c 'import json, sys; z = json.load(open(sys.argv[1]))["zmq"]; sys.exit(0 if z["messages"] > 0 else 1)' \
		"$d/summary.json" || { echo "record-test: zmq: no message published"; exit 1; }
	# set up, refused before the start: ends at once with its line
	if timeout 20 "$tool" record --port 0 --dir "$tmp/none" --zmq 'tcp://127.0.0.1:*' --duration 0.1 -q \
		>/dev/null 2>"$tmp/e0"; then
		echo "record-test: zmq: a missing --dir was accepted"; exit 1
	fi
	grep -q 'not a directory' "$tmp/e0" || { echo "record-test: zmq, missing --dir:"; cat "$tmp/e0"; exit 1; }
	echo "record-test: zmq: $(cat "$d/gen.err")"
else
	echo "record-test: zmq: skipped: built without ZeroMQ"
fi

# Refusal, with its one line.
if "$tool" record --port 0 --dir "$tmp/none" --duration 0.1 -q >/dev/null 2>"$tmp/e1"; then
	echo "record-test: a missing --dir was accepted"; exit 1
fi
grep -q 'not a directory' "$tmp/e1" || { echo "record-test: missing --dir:"; cat "$tmp/e1"; exit 1; }
# Block pools no machine holds (64 streams x 4096 blocks x 1024 packets of 9180
# bytes: 2.2 TiB): refused at the start, with the sizes and what to lower.
# (Under the sanitizers a calloc past their 1 TiB limit aborts unless told to
# return NULL, as the C library does.)
mkdir -p "$tmp/big"
if ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1 \
	TSAN_OPTIONS=${TSAN_OPTIONS:+$TSAN_OPTIONS:}allocator_may_return_null=1 \
	"$tool" record --port 0 --dir "$tmp/big" --pool-blocks 4096 --block-packets 1024 \
	--out-packets 4096 --duration 0.1 -q >/dev/null 2>"$tmp/e2"; then
	echo "record-test: 2.2 TiB of block pools were accepted"; exit 1
fi
grep -E 'the block pools: 64 streams x 4096 blocks x 1024 packets x 9180 bytes = 2350080.0 MiB; lower --max-streams' \
	"$tmp/e2" >/dev/null || { echo "record-test: block pools too large:"; cat "$tmp/e2"; exit 1; }
echo "record-test: passed"
