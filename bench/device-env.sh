# SPDX-License-Identifier: MIT
# Sourced by the bench scripts that run on the GPU machine (the device tool),
# from a build tree BUILD made on the development machine (nvcc there), with
# what the machine's image lacks carried in BUILD/dev (bench/ingest/NOTES.md):
# shared libraries in BUILD/dev, programs (ucx_perftest, ip) in BUILD/dev/bin,
# Debian's jsonschema and its pure-Python dependencies in BUILD/dev/py.
#   usage: [PY=python3] . bench/device-env.sh BUILD
# Sets B (BUILD's absolute path); the loader's, CUDA module's and program
# paths; with PY, PY's own directory first in PATH (so that scripts run
# with it), and PYTHONPATH where PY lacks jsonschema.
B=$(readlink -f "${1:?build dir}")
export LD_LIBRARY_PATH=$B/dev:$B PEERDMA_VRT_CUDA=$B/libpeerdma_vrt_cuda.so \
	PEERDMA_VRT_CUDA_BENCH=$B/libpeerdma_vrt_cuda_bench.so PATH=$B/dev/bin:$PATH
if [ -n "${PY:-}" ]; then
	"$PY" -c 'import jsonschema' 2>/dev/null || export PYTHONPATH=$B/dev/py
	PATH=$(dirname "$PY"):$PATH
fi
