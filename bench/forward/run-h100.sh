#!/usr/bin/env bash
# Issue 16 on the GPU machine, in one call, from the build tree BUILD built on
# the development machine (nvcc there), with what the image lacks carried in
# BUILD/dev (bench/ingest/NOTES.md): the shared libraries, ucx_perftest
# (Debian's ucx-utils) in BUILD/dev/bin, and Debian's jsonschema and its two
# pure-Python dependencies in BUILD/dev/py for the SigMF checks.
#  1. bench_forward.py: forward against ucx_perftest over loopback (tcp),
#     64 KiB to 1 MiB (512 KiB: the default block, 64 x 8 KiB), alternating
#     in one run, eager as well up to 256 KiB, both with one rendezvous lane
#     (bench_forward.py says why); 1b. 64 KiB and 512 KiB with UCX's default
#     of two lanes, for comparison;
#  2. stage_gpu.py: GPU blocks staged to pinned host memory, against the
#     D2H copy-engine peak, every sample checked against gen's capture;
#  3. forward-test.sh gpu (ctest's forward_gpu): two consumers of GPU blocks.
#   usage: bench/forward/run-h100.sh [BUILD] [PYTHON]   (results in $OUT)
set -uo pipefail
PY=${2:-/opt/torch/.venv/bin/python3}
. "$(dirname "$0")/../device-env.sh" "${1:-build-vrt}"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
date -u
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
nproc
ip -br addr 2>/dev/null || true
"$PY" -c 'import numpy, jsonschema; print("python ok", numpy.__version__)'
echo "=== 1. bench_forward"
timeout 420 "$PY" bench/forward/bench_forward.py --build "$B" --sizes "${SIZES:-65536,262144,524288,1048576}" \
	--rounds "${ROUNDS:-3}" --seconds "${SECONDS_PER:-3}" --json "$OUT/forward-h100.json"
echo "bench_forward rc=$?"
echo "=== 1b. 64 KiB and 512 KiB with UCX's default of two rendezvous lanes"
timeout 150 "$PY" bench/forward/bench_forward.py --build "$B" --sizes 65536,524288 --rounds 2 --seconds 2 \
	--eager-max 0 --paced 0 --rndv-lanes 0 --json "$OUT/forward-lanes2-h100.json"
echo "bench_forward (two lanes) rc=$?"
echo "=== 2. stage_gpu"
timeout 200 "$PY" bench/forward/stage_gpu.py --build "$B" --json "$OUT/stage-h100.json"
echo "stage_gpu rc=$?"
echo "=== 3. forward-test gpu"
timeout 200 tests/forward/forward-test.sh "$B/peerdma" gpu
echo "forward-test gpu rc=$?"
