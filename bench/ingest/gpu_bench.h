/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' GPU module (libpeerdma_vrt_cuda_bench.so, built from the
 * deframer's objects plus gpu_bench.cu when nvcc exists): the deframer's ops
 * (gpu.h, same handle) and the measurements bench_ingest takes with them.
 * Timings are CUDA events around the work on the handle's stream, median of
 * iters passes after warm-ups (PEERDMA_BENCH_WARMUP, default 2), except
 * bench_batches (host clock, as ingest sees it).
 */
#ifndef PDMA_BENCH_INGEST_GPU_BENCH_H
#define PDMA_BENCH_INGEST_GPU_BENCH_H

#include "gpu.h"

#define PDMA_GPU_BENCH_MODULE "libpeerdma_vrt_cuda_bench.so"
#define PDMA_GPU_BENCH_API_VERSION 2 /* 2: staged's span */

struct pdma_gpu_bench {
	double seconds; /* median time of one pass */
	double bytes;   /* bytes moved by one pass (read + written) */
	double gbps;    /* bytes / seconds / 1e9 */
};

/* bench_copy kinds: copies of the deframer's data volume without the
 * deframer, and probes of its passes, to locate where its time goes. */
#define PDMA_GPU_COPY_KERNEL 0 /* grid-stride 16-byte copy kernel, 3 blocks/SM, 8 loads in flight per lane */
#define PDMA_GPU_COPY_SIMPLE 1 /* one 16-byte unit per thread, full grid */
#define PDMA_GPU_COPY_SKEL1 2  /* v7s's warp copy of the payloads only (no parse, no tags), one output */
#define PDMA_GPU_COPY_SKEL4 3  /* the same into four output streams like the deframer's */
/* v11's header pass alone; its slot loads alone (the 64-byte prefix and the
 * trailer read from the datagram; the prefix only, as with the slot header's
 * copy of the trailer). */
#define PDMA_GPU_COPY_HDR 4
#define PDMA_GPU_COPY_TOUCH 5
#define PDMA_GPU_COPY_TOUCHP 6
/* v11's copy pass alone (its header pass runs before the timed part). */
#define PDMA_GPU_COPY_CPASS 7

struct pdma_gpu_bench_ops {
	uint32_t version;
	/* The deframer over n device slots (tags reset before each pass, not
	 * timed); bytes = datagrams read + placed payloads written. */
	int (*deframe)(struct pdma_gpu_dfr *g, const void *dev_slots, uint32_t slot_size, uint32_t n, int iters,
		       struct pdma_gpu_bench *r);
	/* cudaMemcpy device to device of bytes (counted read + written). */
	int (*d2d)(struct pdma_gpu_dfr *g, size_t bytes, int iters, struct pdma_gpu_bench *r);
	/* Host to device from registered memory in chunks of chunk bytes. */
	int (*h2d)(struct pdma_gpu_dfr *g, const void *host, size_t bytes, size_t chunk, int iters,
		   struct pdma_gpu_bench *r);
	/* Host-staged deframe of registered host slots (the launch mode set),
	 * each slot's first span bytes (gpu.h run_staged; 0: whole slots);
	 * r->bytes = the bytes copied. */
	int (*staged)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size, uint32_t span, uint32_t n,
		      size_t chunk, int iters, struct pdma_gpu_bench *r);
	/* Zero-copy deframe: the kernels read the mapped host ring. */
	int (*mapped)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size, uint32_t n, int iters,
		      struct pdma_gpu_bench *r);
	/* A kind above over the same slots as deframe: r->bytes is the
	 * deframer's byte count for those slots (so r->gbps compares directly),
	 * r->seconds the kernel time. */
	int (*copy)(struct pdma_gpu_dfr *g, int kind, const void *dev_slots, uint32_t slot_size, uint32_t n,
		    int iters, struct pdma_gpu_bench *r);
	/* Small batches back to back as ingest issues them: `batches` batches of
	 * `per` slots each walking the registered host ring, through zero-copy
	 * (staged = 0: run()) or host-staged (staged = 1: run_staged() with one
	 * chunk per batch, each batch's span found on the host as ingest does),
	 * with descriptors, in launch mode `mode`. sync_each:
	 * wait for each batch and copy its descriptors out (what ingest does);
	 * else enqueue all and wait once. Host clock; r->seconds = median time
	 * per batch over reps, r->bytes = slot bytes per batch. */
	int (*batches)(struct pdma_gpu_dfr *g, const void *host_slots, uint32_t slot_size, uint32_t per,
		       uint32_t batches, int staged, int mode, int sync_each, int reps, struct pdma_gpu_bench *r);
	/* The 2014 design: one synchronous host-to-device copy per packet. */
	int (*copy_one)(struct pdma_gpu_dfr *g, void *dptr, const void *src, size_t bytes);
};

typedef int (*pdma_vrt_cuda_bench_api_fn)(struct pdma_gpu_bench_ops *ops, uint32_t version);

#endif /* PDMA_BENCH_INGEST_GPU_BENCH_H */
