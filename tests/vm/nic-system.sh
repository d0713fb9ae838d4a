#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0
# The system, in the guest: `peerdma gen --eth` on the host -> QEMU's e1000 ->
# peerdma_e1000 -> GPU memory (gpusim) that `peerdma ingest --path nic`
# allocated through the libcuda stand-in, registered through libpeerdma's
# public MR API and had peerdma.ko pin -> the CPU deframer (standing in for
# the GPU's). Run by /init (tests/vm/init); tests/vm/run's host side
# (tests/vm/nic-host.py) starts gen when told to (RUN NAME), copies the GPU
# memory file when told to (SNAPSHOT NAME), and afterwards checks the
# reports and the bytes (tests/vm/nic-check.py). Control frames go through
# `pdtest nicctl`, from host memory, so that they never touch the GPU memory
# under test.
#
# Runs: full (every stream's accounting, malformed frames, the bytes in GPU
# memory), api (the public ingest API, <peerdma/ingest.h>, on the NIC:
# tests/public/ingest_consumer.c checks every sample of every block as it
# arrives; the host compares its gaps with gen's pcap), record (`peerdma
# record`'s SigMF recordings of the NIC's streams, checked on the host),
# revoke (the GPU memory freed while the NIC receives), kill (kill -9 of
# ingest while the NIC receives), stop (SIGINT while frames arrive), tx (VITA-49 frames built in
# GPU memory, transmitted by the NIC: `peerdma gen --eth --nic`; the host
# compares them with its own gen's). After each: no pin left.
# usage: nic-system SEED (the generators' seed, the host's too)
seed=${1:-1}
export PEERDMA_LIBCUDA=/usr/lib/libcuda-gpusim.so
mkdir -p /tmp
res() { # STATUS TEXT
	if [ "$1" = 0 ]; then echo "ok - nic_system: $2"; else echo "not ok - nic_system: $2"; fi
}
pins_zero() { # WHEN
	p=$(cat /sys/kernel/debug/peerdma/live_pins 2>/dev/null)
	[ "$p" = 0 ]
	res $? "no pin left after $1 (live pins ${p:-?})"
}
# PID SECONDS: wait for PID, killing it (-9) after SECONDS: a hung ingest
# must not hold up the rest of the guest's suite; its exit status
bounded_wait() {
	( sleep "$2"; kill -9 "$1" 2>/dev/null ) &
	bw=$!
	wait "$1"
	bst=$?
	kill $bw 2>/dev/null
	return $bst
}
# PID FILE PATTERN: wait (20 s at most) until the receiver PID has written
# PATTERN to FILE, i.e. has attached the NIC; 1 if it ended or never did
attached() {
	i=0
	while [ $i -lt 200 ]; do
		# QEMU's e1000 stalls reception for 1 s after the receiver is
		# enabled: what came meanwhile would wait in the host's socket
		grep -qs "$3" "$2" && sleep 1.5 && return 0
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}
# NAME ARGS...: ingest in the background until it has attached the NIC
ingest_bg() {
	n=$1
	shift
	rm -f /tmp/$n.json /tmp/$n.err
	peerdma ingest --path nic --deframer cpu --port 4991 --max-streams 8 --out-packets 1024 --json /tmp/$n.json "$@" 2>/tmp/$n.err &
	pid=$!
	attached $pid /tmp/$n.err 'receiving on' && return 0
	sed 's/^/  /' /tmp/$n.err
	return 1
}
json_out() {
	# on one line: the run's log filter shows indented lines as diagnostics
	echo "PDNIC-JSON-BEGIN $1"
	tr -d '\n' </tmp/$1.json
	echo
	echo "PDNIC-JSON-END $1"
}
# after a run: gen done on the host
host_done() { # NAME
	pdtest nicctl "WAIT $1" "DONE $1 0"
	res $? "$1: gen on the host finished"
}
# ... and the GPU memory copied there
host_sync() { # NAME
	host_done "$1"
	pdtest nicctl "SNAPSHOT $1" "SNAPSHOT-OK $1"
	res $? "$1: the host copied the GPU memory"
}
# TEXT: the receiver ($pid) never attached the NIC: a failed check, and it
# is stopped
not_attached() {
	res 1 "$1"
	kill $pid 2>/dev/null
	bounded_wait $pid 10
}

# -- full: counts, malformed frames, bytes
if ingest_bg full --nic-bufs 256 --idle 3000 --duration 300; then
	res 0 "full: ingest attached the NIC to GPU memory pinned by peerdma.ko"
	pdtest nicctl "RUN full"
	bounded_wait $pid 330
	st=$?
	sed 's/^/  /' /tmp/full.err
	res $st "full: ingest ran to the end (exit status $st)"
	host_sync full
	json_out full
else
	not_attached "full: ingest attached the NIC to GPU memory pinned by peerdma.ko"
fi
pins_zero full

# -- api: the public ingest API on the NIC. tests/public/ingest_consumer.c,
# written against <peerdma/ingest.h> only (libpeerdma_ingest.so), opens a
# PDMA_INGEST_PATH_NIC session, takes every stream's blocks while they arrive
# and checks each sample against gen's formula (gaps read as zeros, blocks
# follow without hole or overlap); its GAP/STREAM lines go to the host, which
# compares them with gen's pcap (tests/public/gen_sent.py). api_packets:
# tests/vm/run's api gen sends as many per stream.
api_packets=400
rm -f /tmp/api.out /tmp/api.err
PDMA_CONSUMER_NIC=/dev/peerdma_nic0 ingest_consumer 2 $api_packets >/tmp/api.out 2>/tmp/api.err &
pid=$!
if attached $pid /tmp/api.out '^PORT '; then
	res 0 "api: the public API's nic session attached the NIC"
	pdtest nicctl "RUN api"
	# quiet for 5 s after its last block ends it (at most 60 s before the first)
	bounded_wait $pid 120
	st=$?
	sed 's/^/  /' /tmp/api.err
	res $st "api: every sample of every block as gen sent it, gaps zero, no hole or overlap (exit status $st)"
	host_done api
	# one marker pair around the consumer's lines, for tests/vm/run to cut out
	echo "PDNIC-OUT-BEGIN api"
	cat /tmp/api.out
	echo "PDNIC-OUT-END api"
else
	sed 's/^/  /' /tmp/api.err
	not_attached "api: the public API's nic session attached the NIC"
fi
pins_zero api

# -- record: `peerdma record` on the NIC writes a SigMF recording per stream.
# Its metadata (one line each) and the SHA-256 of its data go to the host,
# which checks them against gen's pcap (tests/record/sigmf_check.py
# --digests): metadata valid, the data exactly gen's samples, a capture
# exactly after each loss.
rm -rf /tmp/rec /tmp/record.json /tmp/record.err
mkdir -p /tmp/rec
peerdma record --path nic --deframer cpu --port 4991 --max-streams 8 --out-packets 1024 --dir /tmp/rec \
	--prefix cap --idle 3000 --flush-idle 1000 --duration 120 --json /tmp/record.json 2>/tmp/record.err &
pid=$!
if attached $pid /tmp/record.err 'receiving on'; then
	res 0 "record: peerdma record attached the NIC"
	pdtest nicctl "RUN record"
	bounded_wait $pid 150
	st=$?
	sed 's/^/  /' /tmp/record.err
	res $st "record: wrote its recordings (exit status $st)"
	host_done record
	echo "PDNIC-OUT-BEGIN record"
	for f in /tmp/rec/*.sigmf-meta; do
		echo "META ${f##*/} $(tr -d '\n' <"$f")"
	done
	for f in /tmp/rec/*.sigmf-data; do
		echo "DATA ${f##*/} $(sha256sum <"$f" | cut -d' ' -f1)"
	done
	echo "PDNIC-OUT-END record"
else
	sed 's/^/  /' /tmp/record.err
	not_attached "record: peerdma record attached the NIC"
fi
pins_zero record

# -- revoke: the application frees the receive memory while the NIC writes
if ingest_bg revoke --nic-bufs 512 --revoke-after 100 --duration 120; then
	pdtest nicctl "RUN revoke"
	bounded_wait $pid 150
	st=$?
	sed 's/^/  /' /tmp/revoke.err
	[ $st = 1 ] && grep -q 'was revoked' /tmp/revoke.err
	res $? "revoke: ingest stopped on the revocation and said so (exit status $st)"
	host_sync revoke
	json_out revoke
else
	not_attached "revoke: ingest attached the NIC"
fi
pins_zero revoke

# -- kill: kill -9 of the consumer while frames arrive
if ingest_bg kill --nic-bufs 256 --duration 120; then
	pdtest nicctl "RUN kill"
	sleep 1
	kill -9 $pid
	wait $pid
	host_done kill
	# the NIC is free again: a new attachment receives
	ingest_bg after-kill --nic-bufs 64 --duration 1
	res $? "kill: the NIC attaches again after kill -9 of its owner"
	bounded_wait $pid 30
else
	not_attached "kill: ingest attached the NIC"
fi
pins_zero "kill -9"

# -- stop: SIGINT while frames keep arriving. The receive loop drains for
# 0.5 s at most after a stop (ingest/rx/rx.h, pdma_rx_stop_now); before
# that bound it waited for the NIC to be quiet, i.e. for gen's 12 s to end.
if ingest_bg stop --nic-bufs 256; then
	pdtest nicctl "RUN stop"
	sleep 2
	t0=$(date +%s)
	kill -INT $pid
	bounded_wait $pid 60
	st=$?
	t=$(($(date +%s) - t0))
	sed 's/^/  /' /tmp/stop.err
	[ $st = 0 ] && [ $t -le 6 ] && grep -q '"datagrams": [1-9]' /tmp/stop.json
	res $? "stop: ingest ended $t s after SIGINT while frames arrived, with a report (exit status $st)"
	host_done stop
else
	not_attached "stop: ingest attached the NIC"
fi
pins_zero stop

# -- tx: the NIC sends VITA-49 frames from GPU pages (tests/vm/run repeats
# this gen command on the host with --pcap-only and compares)
peerdma gen --eth --nic /dev/peerdma_nic0 --streams 2 --packets 200 --loss 10 --dup 10 --reorder 10 \
	--seed "$seed" --json >/tmp/tx.json 2>/tmp/tx.err
st=$?
sed 's/^/  /' /tmp/tx.err
res $st "tx: gen built VITA-49 frames in GPU memory and the NIC sent them (exit status $st)"
pins_zero tx

# what the frames left in the GPU memory goes (the snapshots have it)
pdtest gpuzero 8388608
res $? "GPU memory zeroed for the tests that follow"
