/* SPDX-License-Identifier: MIT */
/*
 * The GPU deframer module (ingest/deframe/cuda, built by nvcc into
 * libpeerdma_vrt_cuda.so) seen from C: one table of functions, fetched with
 * dlopen() only when a CUDA device is present, so nothing else in peerdma needs
 * CUDA to build, link or run.
 *
 * Thread safety: one pdma_gpu_dfr handle is used by one thread at a time.
 *
 * Launch modes: run() and run_staged() enqueue a batch's work (host-to-device
 * copies, deframe kernels, the descriptor copy back) either on streams, one
 * call per operation (PDMA_GPU_LAUNCH_STREAM), or as one CUDA graph per batch
 * shape (kind, number of chunks, descriptors or not), built and instantiated
 * once and then replayed with cudaGraphLaunch after its nodes' parameters are
 * updated for the batch (PDMA_GPU_LAUNCH_GRAPH, the default; environment
 * PEERDMA_GPU_LAUNCH=stream|graph overrides it at open). Both give identical
 * results. A node update the driver refuses rebuilds that graph; a failure
 * to build or launch one switches the handle to stream launch for good
 * (get_launch() then says so, last_error() why). The two-pass kernel's
 * batches are captured from the stream path into graphs (ingest/deframe/cuda/graph.cu).
 *
 * Kernels (set_kernel, or PEERDMA_DFR_KERNEL at open; any other name fails the
 * open), byte-identical to the CPU deframer (tests/gpu/test_deframer.c runs
 * each); ingest/deframe/cuda/DESIGN.md has how they were chosen and their numbers:
 *   auto   the default: v11 once a payload length is known (the copy
 *          pass's stride comes from it), v7s before; PEERDMA_DFR_AUTO_MIN
 *          sets the shortest payload for v11 (default 1);
 *   v11    two passes: a header pass, one thread per packet, on the fast path
 *          (pdma_dfr_header_fast), writing a work list, then a copy pass of
 *          16-byte output windows (2 per thread) with a stride from the longest
 *          payload seen so far; a longer payload is copied by its header
 *          thread and raises that hint for the next launch;
 *   v7s    one pass: each lane of a warp parses one of 32 headers (parser
 *          scratch in shared memory), then the warp copies their payloads.
 *
 * The benchmarks' measurements (CUDA-event timings, copies of the deframer's
 * data volume) live in a module of their own, bench/ingest/gpu_bench.cu.
 */
#ifndef PDMA_INGEST_GPU_H
#define PDMA_INGEST_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "deframe.h"

/* 5: the measurement entry points moved to the benchmark module
 * (bench/ingest/gpu_bench.h). 6: run_frames (frame rings). 7: blk_* (sample
 * blocks). 8: run_staged's span. */
#define PDMA_GPU_API_VERSION 8

struct pdma_gpu_dfr;

#define PDMA_GPU_LAUNCH_STREAM 0
#define PDMA_GPU_LAUNCH_GRAPH 1

struct pdma_gpu_ops {
	uint32_t version;
	int (*open)(const struct pdma_dfr_config *c, int device, struct pdma_gpu_dfr **g);
	void (*close)(struct pdma_gpu_dfr *g);
	const char *(*device_name)(struct pdma_gpu_dfr *g);
	/* Device memory (the "direct" ring lives here). */
	int (*dev_alloc)(struct pdma_gpu_dfr *g, size_t bytes, void **dptr);
	int (*dev_free)(struct pdma_gpu_dfr *g, void *dptr);
	int (*upload)(struct pdma_gpu_dfr *g, void *dptr, const void *src, size_t bytes);
	/* Pin + map host memory (zero-copy and host-staged rings). */
	int (*host_register)(struct pdma_gpu_dfr *g, void *p, size_t bytes);
	int (*host_unregister)(struct pdma_gpu_dfr *g, void *p);
	/* Deframe n slots that the GPU can address: device memory or mapped
	 * registered host memory (zero-copy). Descriptors (n) come back to
	 * desc. Synchronous. */
	int (*run)(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		   struct pdma_dfr_desc *desc);
	/* Host-staged: copy registered host slots to the GPU in chunks of
	 * chunk_bytes (copy engine, double-buffered) and deframe each there.
	 * span: pdma_slots_span() of these slots, or 0. Where it is less
	 * than slot_size only the first span bytes of each slot cross PCIe
	 * (one pitched copy a chunk), into slots of span bytes on the device:
	 * a 1 KiB datagram in ingest's default 9216-byte slot moves 1088
	 * bytes, not 9216. A span smaller than the slots' datagrams gives the
	 * verdicts of span-byte slots (truncated), not the data. Under graph
	 * launch whole slots are copied: a graph's copy node can be updated
	 * only while it is one-dimensional. */
	int (*run_staged)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size, uint32_t span,
			  uint32_t n, size_t chunk_bytes, struct pdma_dfr_desc *desc);
	/* Copy the device tables (keys, plen, cls, tags, out) into host tables of the
	 * same configuration. */
	int (*read_tables)(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t);
	int (*reset_tables)(struct pdma_gpu_dfr *g);
	const char *(*last_error)(struct pdma_gpu_dfr *g);
	int (*set_launch)(struct pdma_gpu_dfr *g, int mode);
	int (*get_launch)(struct pdma_gpu_dfr *g);
	/* -ENOENT: not auto, v11 or v7s. */
	int (*set_kernel)(struct pdma_gpu_dfr *g, const char *name);
	const char *(*kernel_name)(struct pdma_gpu_dfr *g);
	/* Frame rings (deframe/frame.h): deframe n frames, frame i at base +
	 * frames[i].off (frames[i].len bytes, NIC status frames[i].flags).
	 * base: device memory or registered host memory (a NIC's receive
	 * buffers in GPU memory: the frames are read in place, no copy);
	 * frames: device memory, registered host memory, or any host memory
	 * (then copied to the device first). Descriptors (n) come back to desc
	 * (skipped frames: status -PDMA_DFR_E_FRAME, reason in count), in the
	 * frames' order, for pdma_frm_account(). Runs v11's two passes (the
	 * header pass over frames, the same copy pass) whatever the kernel
	 * setting, on streams. Synchronous. */
	int (*run_frames)(struct pdma_gpu_dfr *g, const struct pdma_frm_cfg *fc, const void *base,
			  const struct pdma_frame *frames, uint32_t n, struct pdma_dfr_desc *desc);
	/* Sample blocks (ingest/blocks/): the device tables' addresses (the
	 * window is t->out); n bytes (a multiple of 4, 4-byte aligned) copied
	 * with each 16-bit word byte-swapped, or zeroed, asynchronously on the
	 * deframer's stream; an event after them (created when *event is NULL,
	 * then recorded again), before which no later batch runs; a consumer's
	 * stream (any thread) made to wait on such an event. */
	int (*blk_tables)(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t);
	int (*blk_copy)(struct pdma_gpu_dfr *g, void *dst, const void *src, size_t n);
	int (*blk_zero)(struct pdma_gpu_dfr *g, void *dst, size_t n);
	int (*blk_fence)(struct pdma_gpu_dfr *g, void **event);
	int (*blk_stream_wait)(struct pdma_gpu_dfr *g, intptr_t stream, void *event);
	void (*blk_event_destroy)(struct pdma_gpu_dfr *g, void *event);
	/* n bytes of device memory to host memory, after event (any thread) */
	int (*blk_read)(struct pdma_gpu_dfr *g, void *dst, const void *src, size_t n, void *event);
};

typedef int (*pdma_vrt_cuda_api_fn)(struct pdma_gpu_ops *ops, uint32_t version);

/* Loads the module when a CUDA device exists: -ENODEV no device/driver,
 * -ENOENT module not found (not built), -EPROTO version mismatch. The search
 * order: $PEERDMA_VRT_CUDA; beside the object that holds this loader (an
 * installed libpeerdma_ingest.so: the module is installed into the same
 * libdir); the running executable's install (bindir -> libdir); next to the
 * executable and one and two directories up (build tree layout); then the
 * loader path. */
int pdma_gpu_load(struct pdma_gpu_ops *ops, void **handle);
/* The same for another build of the module (the benchmarks' one, which adds
 * its measurement entry points): file name module, environment override env. */
int pdma_gpu_load_module(const char *module, const char *env, struct pdma_gpu_ops *ops, void **handle);
void pdma_gpu_unload(void *handle);

#endif /* PDMA_INGEST_GPU_H */
