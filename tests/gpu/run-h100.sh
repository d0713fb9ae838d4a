#!/usr/bin/env bash
# The CUDA tests and benchmark on the GPU machine (issue 5), from a build made
# elsewhere (the GPU machine has no libcmocka/libjansson/liburing packages:
# their .so files travel in BUILD/dev). Results under OUTDIR:
#   gpu-tests.log   ctest -V of the CUDA tests (unit + gpu)
#   ipc.log         test_cuda_ipc (two processes sharing CUDA IPC memory, cache
#                   on, auto mode) with the hooks LD_PRELOADed, as users load them
#   bench.log/json  bench_cuda
#   info.log        peerdma info (+ --device for each non-GPU PCI device)
#   hooks.log       LD_PRELOAD detection and the runtime hook under PyTorch
# usage: tests/gpu/run-h100.sh [--tests-only] BUILD OUTDIR
set -uo pipefail
tests_only=0
if [ "${1:-}" = --tests-only ]; then
	tests_only=1
	shift
fi
build=$(readlink -f "${1:?build dir}")
out=${2:?output dir}
src=$(dirname "$(readlink -f "$0")")/../..
src=$(readlink -f "$src")
export LD_LIBRARY_PATH=$build/dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

. "$src/tests/gpu/ctest-dir.sh"
bdir=$(ctest_dir "$build" "$src")

{
	echo "# $(date -u '+%F %T UTC') $(uname -r)"
	nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv,noheader
	(cd "$bdir" && ctest -R cuda -V --timeout 300)
} 2>&1 | tee "$out/gpu-tests.log"
# ctest ran it linked with the hook library; here through LD_PRELOAD.
LD_PRELOAD=$build/libpeerdma_cuda_hooks.so "$build/tests/test_cuda_ipc" 2>&1 | tee "$out/ipc.log"
# The negative control: trusting the hooks for all CUDA memory (what auto did
# before) must serve a stale region in round 3.
PDMA_IPC_TRUST_ALL=1 LD_PRELOAD=$build/libpeerdma_cuda_hooks.so "$build/tests/test_cuda_ipc" \
	>"$out/ipc-trust-all.log" 2>&1 &&
	echo "negative control: test_cuda_ipc PASSED under trust-all (it must fail)" ||
	echo "negative control: test_cuda_ipc failed under trust-all, as it must: $(grep -c '^FAIL' "$out/ipc-trust-all.log") FAIL lines"
[ "$tests_only" = 1 ] && exit 0

"$build/bench/cuda/bench_cuda" --json "$out/bench.json" 2>&1 | tee "$out/bench.log"

{
	"$build/peerdma" info
	for d in /sys/bus/pci/devices/*; do
		b=$(basename "$d")
		[ "$(cat "$d/vendor")" = 0x10de ] && continue
		echo "--- $b vendor $(cat "$d/vendor") class $(cat "$d/class")"
		"$build/peerdma" info --device "$b" | sed -n '/^PCIe path/,$p'
	done
} 2>&1 | tee "$out/info.log"

{
	hook=$build/libpeerdma_cuda_hooks.so
	lib=$build/libpeerdma.so.0
	# libpeerdma.so exports its public API only: the detection it runs
	# (pdma_cuda_hooks_installed, lib/monitor/cuda.c) is redone here.
	py='import ctypes
l = ctypes.CDLL(None)
def addr(n):
    try:
        return ctypes.cast(getattr(l, n), ctypes.c_void_p).value
    except AttributeError:
        return None
def installed():
    d, dh = addr("cuMemFree_v2"), addr("pdma_cuda_hook_cuMemFree_v2")
    r, rh = addr("cudaFree"), addr("pdma_cuda_hook_cudaFree")
    return bool(dh) and d == dh and bool(rh) and (r is None or r == rh)
print("hooks installed (no CUDA runtime loaded yet):", installed())
import torch
x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
print("hooks installed (PyTorch and its libcudart loaded):", installed())
del x
torch.cuda.empty_cache()
try:
    print("hook calls after torch.cuda.empty_cache():", l.pdma_cuda_hooks_calls())
except AttributeError:
    print("hook library not loaded")'
	echo "== LD_PRELOAD=libpeerdma.so.0 (links no hooks: not installed)"
	LD_PRELOAD=$lib python3 -c "$py"
	echo "== LD_PRELOAD=libpeerdma.so.0 libpeerdma_cuda_hooks.so"
	LD_PRELOAD="$lib $hook" python3 -c "$py"
} 2>&1 | tee "$out/hooks.log"
