/* SPDX-License-Identifier: MIT */
/*
 * The GPU deframer module (ingest/cuda, built by nvcc into
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
 * (get_launch() then says so, last_error() why). Measured on an H100 (bench
 * part e): graph replay is within run-to-run noise of stream launch, since a
 * small batch's cost is GPU-side (kernel + descriptor copy, ~22 us), not the
 * launch calls. The two-pass variants (v8tp ... auto) always launch on
 * streams.
 *
 * Kernel variants (set_kernel, or PEERDMA_DFR_KERNEL at open), all byte-
 * identical (tests/gpu/test_deframer.c runs each); bench/ingest/NOTES.md has
 * their measurements:
 *   auto   the default: v11 once a payload length is known (the copy
 *          pass's stride comes from it), v7s before; PEERDMA_DFR_AUTO_MIN
 *          sets the shortest payload for v11 (default 1);
 *   v11    two passes: a header pass, one thread per packet, on the fast path
 *          (pdma_dfr_header_fast: the slot's first 64 bytes in three
 *          independent loads, the trailer from the slot header's copy when
 *          the producer set PDMA_SLOT_TAIL, 32-bit and double arithmetic
 *          instead of 64-bit divisions; no shared parser scratch, 8 blocks
 *          per SM),
 *          then v9's copy pass (2 windows per thread, 6 blocks per SM) with a
 *          stride (16-byte output windows per packet) from the longest
 *          payload seen so far; a longer payload is
 *          copied by its header thread and raises that hint for the next
 *          launch;
 *   v5     lane-parallel headers, flattened 16/4-byte warp copy (3 blocks of
 *          256 per SM, 8 units in flight per lane);
 *   v7s    v5 with the parser's scratch struct in shared memory instead of a
 *          local-memory stack frame;
 *   v5cs   v5 with streaming cache hints; v5b4: 4 blocks per SM, 4 units;
 *   v5na   v5 with payload loads that skip L1; v6: v5na with 16-byte loads for
 *          16-byte aligned payloads going to 4-byte aligned destinations;
 *          v6b4: v6 at 4 blocks per SM; v7, v7b4: v6 / v6b4 with v7s's scratch;
 *   tma    Hopper: payloads moved by cp.async.bulk global->shared->global when
 *          a group is 16-byte aligned and the ring is in device memory (v5
 *          otherwise); v6tma: the same with v6 as the fallback;
 *   v8tp   two passes: the general header pass writing a work list, then one
 *          thread per 16-byte output window; v9: the copy pass with its stride
 *          from the slot geometry, 4 windows per thread; v9u8: 8 windows;
 *   v10    v9 in sub-batches, header pass k + 1 overlapping copy pass k.
 */
#ifndef PDMA_INGEST_GPU_H
#define PDMA_INGEST_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "deframe.h"

/* 4: version 3's repairs() (the v14 experiment, removed) is gone. */
#define PDMA_GPU_API_VERSION 4

struct pdma_gpu_dfr;

struct pdma_gpu_bench {
	double seconds;       /* median time of one pass */
	double bytes;         /* bytes moved by one pass (read + written) */
	double gbps;          /* bytes / seconds / 1e9 */
};

#define PDMA_GPU_LAUNCH_STREAM 0
#define PDMA_GPU_LAUNCH_GRAPH 1

/* bench_copy kinds: copies of the deframer's data volume without the
 * deframer, to locate where its time goes. */
#define PDMA_GPU_COPY_KERNEL 0   /* grid-stride 16-byte copy kernel, 3 blocks/SM, 8 loads in flight per lane */
#define PDMA_GPU_COPY_SIMPLE 1   /* one 16-byte unit per thread, full grid */
#define PDMA_GPU_COPY_SKEL1 2    /* payloads only (no parse, no tags), one contiguous output */
#define PDMA_GPU_COPY_SKEL4 3    /* payloads only, four output streams like the deframer's */
/* Probes of the two-pass header pass (time on the deframer's byte count):
 * v11's header pass alone; its slot loads alone (prefix + the trailer read from
 * the datagram; prefix only, as with the slot header's copy of the trailer). */
#define PDMA_GPU_COPY_HDR 4
#define PDMA_GPU_COPY_TOUCH 5
#define PDMA_GPU_COPY_TOUCHP 6
/* The current two-pass kernel's copy pass alone (its header pass run before
 * the timed part). */
#define PDMA_GPU_COPY_CPASS 7

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
	 * chunk_bytes (copy engine, double-buffered) and deframe each there. */
	int (*run_staged)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size,
			  uint32_t n, size_t chunk_bytes, struct pdma_dfr_desc *desc);
	/* Copy the device tables (keys, plen, tags, out) into host tables of the
	 * same configuration. */
	int (*read_tables)(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t);
	int (*reset_tables)(struct pdma_gpu_dfr *g);
	/* Measurements (CUDA events, median of iters after warm-up). */
	int (*bench_deframe)(struct pdma_gpu_dfr *g, const void *dev_slots, uint32_t slot_size,
			     uint32_t n, int iters, struct pdma_gpu_bench *r);
	int (*bench_d2d)(struct pdma_gpu_dfr *g, size_t bytes, int iters, struct pdma_gpu_bench *r);
	int (*bench_h2d)(struct pdma_gpu_dfr *g, const void *host, size_t bytes, size_t chunk,
			 int iters, struct pdma_gpu_bench *r);
	int (*bench_staged)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size,
			    uint32_t n, size_t chunk, int iters, struct pdma_gpu_bench *r);
	int (*bench_mapped)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size,
			    uint32_t n, int iters, struct pdma_gpu_bench *r);
	/* The 2014 design: one synchronous host-to-device copy per packet. */
	int (*copy_one)(struct pdma_gpu_dfr *g, void *dptr, const void *src, size_t bytes);
	const char *(*last_error)(struct pdma_gpu_dfr *g);
	/* ---- version 2 ---- */
	int (*set_launch)(struct pdma_gpu_dfr *g, int mode);
	int (*get_launch)(struct pdma_gpu_dfr *g);
	/* -ENOENT unknown name, -ENOTSUP not on this GPU. */
	int (*set_kernel)(struct pdma_gpu_dfr *g, const char *name);
	const char *(*kernel_name)(struct pdma_gpu_dfr *g);
	/* Copy kinds above over the same slots as bench_deframe: r->bytes is the
	 * deframer's byte count for those slots (so r->gbps compares directly),
	 * r->seconds the kernel time (CUDA events, median). */
	int (*bench_copy)(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, uint32_t slot_size,
			  uint32_t n, int iters, struct pdma_gpu_bench *r);
	/* Small batches back to back as ingest issues them: `batches` batches of
	 * `per` slots each walking the registered host ring, through zero-copy
	 * (staged = 0: run()) or host-staged (staged = 1: run_staged() with one
	 * chunk per batch), with descriptors, in launch mode `mode`. sync_each:
	 * wait for each batch and copy its descriptors out (what ingest does);
	 * else enqueue all and wait once. Host clock; r->seconds = median time
	 * per batch over reps, r->bytes = slot bytes per batch. */
	int (*bench_batches)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size,
			     uint32_t per, uint32_t batches, int staged, int mode, int sync_each,
			     int reps, struct pdma_gpu_bench *r);
};

typedef int (*pdma_vrt_cuda_api_fn)(struct pdma_gpu_ops *ops, uint32_t version);

/* Loads the module when a CUDA device exists: -ENODEV no device/driver,
 * -ENOENT module not found (not built), -EPROTO version mismatch. The search
 * order: $PEERDMA_VRT_CUDA, next to the running executable, then one and two
 * directories up (build tree layout), then the loader path. */
int pdma_gpu_load(struct pdma_gpu_ops *ops, void **handle);
void pdma_gpu_unload(void *handle);

#endif /* PDMA_INGEST_GPU_H */
