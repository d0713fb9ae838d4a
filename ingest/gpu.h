/* SPDX-License-Identifier: MIT */
/*
 * The GPU deframer module (ingest/cuda, built by nvcc into
 * libpeerdma_vrt_cuda.so) seen from C: one table of functions, fetched with
 * dlopen() only when a CUDA device is present, so nothing else in peerdma needs
 * CUDA to build, link or run.
 *
 * Thread safety: one pdma_gpu_dfr handle is used by one thread at a time.
 */
#ifndef PDMA_INGEST_GPU_H
#define PDMA_INGEST_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "deframe.h"

#define PDMA_GPU_API_VERSION 1

struct pdma_gpu_dfr;

struct pdma_gpu_bench {
	double seconds;       /* median time of one pass */
	double bytes;         /* bytes moved by one pass (read + written) */
	double gbps;          /* bytes / seconds / 1e9 */
};

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
};

typedef int (*pdma_vrt_cuda_api_fn)(struct pdma_gpu_ops *ops, uint32_t version);

/* Loads the module when a CUDA device exists: -ENODEV no device/driver,
 * -ENOENT module not found (not built), -EPROTO version mismatch. The search
 * order: $PEERDMA_VRT_CUDA, next to the running executable, then one and two
 * directories up (build tree layout), then the loader path. */
int pdma_gpu_load(struct pdma_gpu_ops *ops, void **handle);
void pdma_gpu_unload(void *handle);

#endif /* PDMA_INGEST_GPU_H */
