// SPDX-License-Identifier: MIT
/*
 * Inside the GPU deframer module: the handle, the kernels' signatures and the
 * host functions that deframe.cu, graph.cu and the benchmark module
 * (bench/ingest/gpu_bench.cu, linked with the same objects into a separate
 * shared object) share. The module's interface to the rest of peerdma is
 * ingest/deframe/gpu.h; nothing here is visible outside the shared object (built with
 * -fvisibility=hidden).
 */
#ifndef PDMA_INGEST_CUDA_DFR_H
#define PDMA_INGEST_CUDA_DFR_H

#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>

extern "C" {
#include "deframe.h"
#include "gpu.h"
}

/* ---- kernels (kernels.cu) ---- */

#define DFR_ONEPASS_MINB 3 /* v7s: resident blocks of 256 per SM */
#define DFR_COPY_U 2       /* v11's copy pass: 16-byte windows per thread ... */
#define DFR_COPY_MINB 6    /* ... and resident blocks of 256 per SM */
#define DFR_SMALL_R 4      /* v16: 16-byte units in flight per lane */
#define DFR_TINY_MAX 64    /* v16: payloads up to this many bytes run dfr_tiny_pass ... */
#define DFR_TINY_MINB 6    /* ... with this many resident blocks of 256 per SM */

__global__ void dfr_onepass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *slots,
			    uint32_t slot_size, uint32_t n, uint32_t group, struct pdma_dfr_desc *desc,
			    uint32_t *pmax, uint32_t *hhint);
__global__ void dfr_hdr_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *slots,
			     uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint4 *wl,
			     uint32_t stride, uint32_t hint, uint32_t *pmax, uint32_t *hhint);
__global__ void dfr_frm_hdr_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, struct pdma_frm_cfg fc,
				 const uint8_t *base, const struct pdma_frame *frames, uint32_t n,
				 struct pdma_dfr_desc *desc, uint4 *wl, uint32_t stride, uint32_t hint, uint32_t *pmax,
				 uint32_t *hhint);
__global__ void dfr_small_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *slots,
			       uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint32_t hint,
			       uint32_t *pmax, uint32_t *hhint);
__global__ void dfr_tiny_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *slots,
			      uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint32_t hint,
			      uint32_t *pmax, uint32_t *hhint);
__global__ void dfr_tiny80_pass(struct pdma_dfr_config c, struct pdma_dfr_tables t, const uint8_t *slots,
				uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc, uint32_t hint,
				uint32_t *pmax, uint32_t *hhint);
__global__ void dfr_copy_pass(const uint8_t *slots, uint32_t slot_size, uint32_t n, uint32_t stride,
			      uint8_t *out, const uint4 *wl);

/* ---- the handle ---- */

/* A kernel variant: the two-pass v11 (tp), the one-pass v16 (small) or v7s,
 * or auto (v16 or v11 by the longest payload known, v7s before one is). */
struct kvar {
	const char *name;
	bool tp;
	bool autosel;
	bool small;  /* v16 (launched from the stream path like v11, so graphs capture it) */
};

struct gent;

/* Every call into the module runs on the deframer's device (its open's
 * ordinal), whichever thread makes it, and leaves the thread's current device
 * as it was: the caller's thread (open, uploads), the session's deframer
 * thread and the consumers' threads (blocks.cu). */
struct on_device {
	int prev = -1;
	explicit on_device(int dev)
	{
		cudaGetDevice(&prev);
		if (prev != dev)
			cudaSetDevice(dev);
	}
	~on_device()
	{
		int now = -1;
		cudaGetDevice(&now);
		if (prev >= 0 && now != prev)
			cudaSetDevice(prev);
	}
};

struct pdma_gpu_dfr {
	struct pdma_dfr_config c;
	int device;
	cudaDeviceProp prop;
	struct pdma_dfr_tables t;     /* device pointers */
	struct pdma_dfr_desc *d_desc;
	struct pdma_dfr_desc *h_desc; /* pinned host copy of the descriptors */
	size_t desc_cap;              /* descriptors */
	uint8_t *stage[2];            /* host-staged chunk buffers */
	size_t stage_cap;
	cudaStream_t s[2];
	cudaEvent_t ev[2];
	char err[256];
	int sms;
	int launch;                   /* PDMA_GPU_LAUNCH_* */
	const struct kvar *kv;        /* kernel variant */
	struct gent *gc;              /* graph cache [GCACHE] (graph.cu) */
	uint64_t gstamp;
	uint64_t grebuilds;           /* graph shapes instantiated again after a refused update */
	uint4 *tpwl[2];               /* two-pass work list per stream */
	size_t tpcap[2];              /* its entries */
	uint32_t *hint_h, *hint_d;    /* longest payload seen (mapped host word; 0 unknown) */
	uint32_t *d_pmax;             /* ... its device-side maximum */
	uint32_t auto_min;            /* auto: v11 once the longest payload seen is this long */
	uint32_t small_max;           /* auto: v16 while the longest payload seen is at most this long */
	uint64_t topo;                /* graph capture: the launch topology launch() chose, folded per call */
	struct pdma_frame *d_frames;  /* frame descriptors copied from unregistered host memory */
	size_t frames_cap;
	struct {                      /* registered host ranges and their device aliases */
		const uint8_t *p, *d;
		size_t n;
	} reg[8];
};

#define CK(g, call)                                                                       \
	do {                                                                              \
		cudaError_t e_ = (call);                                                  \
		if (e_ != cudaSuccess) {                                                  \
			snprintf((g)->err, sizeof((g)->err), "%s: %s", #call,             \
				 cudaGetErrorString(e_));                                 \
			return e_ == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;          \
		}                                                                         \
	} while (0)

/* ---- sample blocks (blocks.cu; gpu.h's blk_* ops) ---- */
int dfr_blk_tables(struct pdma_gpu_dfr *g, struct pdma_dfr_tables *t);
int dfr_blk_copy(struct pdma_gpu_dfr *g, void *dst, const void *src, size_t n);
int dfr_blk_zero(struct pdma_gpu_dfr *g, void *dst, size_t n);
int dfr_blk_fence(struct pdma_gpu_dfr *g, void **event);
int dfr_blk_stream_wait(struct pdma_gpu_dfr *g, intptr_t stream, void *event);
void dfr_blk_event_destroy(struct pdma_gpu_dfr *g, void *event);
int dfr_blk_read(struct pdma_gpu_dfr *g, void *dst, const void *src, size_t n, void *event);

/* ---- launches (deframe.cu) ---- */

/* dfr_launch's parts: the whole deframe, or (measurements) the two-pass
 * kernel's header or copy pass alone. */
#define DFR_PASS_HDR 1
#define DFR_PASS_COPY 2
#define DFR_PASS_ALL 3

/* The one-pass kernel's grid for n packets: blocks, packets per warp. */
void dfr_kshape(const struct pdma_gpu_dfr *g, uint32_t n, uint32_t *blocks, uint32_t *group);
/* Enqueue the deframing of n slots at device address slots on stream s
 * (descriptors to d_desc when given). parts other than DFR_PASS_ALL run the
 * two-pass variant v11's passes alone, whatever g->kv says. */
int dfr_launch(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
	       struct pdma_dfr_desc *d_desc, cudaStream_t s, int parts);
int dfr_reset_tags(struct pdma_gpu_dfr *g, cudaStream_t s);
int dfr_ensure_desc(struct pdma_gpu_dfr *g, size_t n);
/* Device address of slots: itself, or the mapped alias of registered host memory. */
int dfr_dev_ptr(struct pdma_gpu_dfr *g, const void *p, const void **dp);
/* Enqueue a batch the GPU can address (run) or host-staged in chunks
 * (staged), descriptors to h_desc + doff when want_desc; ends on s[0]. */
int dfr_enqueue_run(struct pdma_gpu_dfr *g, const void *dp, uint32_t slot_size, uint32_t n, bool want_desc,
		    size_t doff);
int dfr_enqueue_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t span, uint32_t n,
		       size_t chunk, bool want_desc, size_t doff);
/* The device slot size a host-staged batch gets (gpu.h run_staged). */
uint32_t dfr_stage_pitch(const struct pdma_gpu_dfr *g, uint32_t slot_size, uint32_t span);
int dfr_sync_all(struct pdma_gpu_dfr *g);
/* The ops of gpu.h that the measurements use too. */
int dfr_run(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n, struct pdma_dfr_desc *desc);
int dfr_run_staged(struct pdma_gpu_dfr *g, const void *host, uint32_t slot_size, uint32_t span, uint32_t n,
		   size_t chunk, struct pdma_dfr_desc *desc);
int dfr_set_launch(struct pdma_gpu_dfr *g, int mode);
int dfr_set_kernel(struct pdma_gpu_dfr *g, const char *name);

/* ---- CUDA graphs (graph.cu) ---- */

#define GMAXC 32 /* chunks per staged graph; longer batches take several launches */
#define GCACHE 8 /* executable graphs cached per handle */

/* One one-pass kernel launch, as stream launch or graph kernel node. */
struct kplan {
	uint32_t blocks;
	struct pdma_dfr_config c;
	struct pdma_dfr_tables t;
	const uint8_t *slots;
	uint32_t slot_size, n, group;
	struct pdma_dfr_desc *desc;
	uint32_t *pmax, *hhint;
	void *p[9];
};

/* One batch for the node-by-node graph path: nch chunks (kind 1: copy host ->
 * stage, then kernel; kind 0: kernel only), then optionally the descriptors
 * back. */
struct bplan {
	int kind;
	uint32_t nch;
	const void *hsrc[GMAXC];
	void *stage[GMAXC];
	size_t bytes[GMAXC];
	struct kplan k[GMAXC];
	bool desc;
	void *hdesc;
	const void *ddesc;
	size_t dbytes;
};

void dfr_make_kplan(struct pdma_gpu_dfr *g, const void *slots, uint32_t slot_size, uint32_t n,
		    struct pdma_dfr_desc *d_desc, struct kplan *k);
/* 0 launched on s[0]; 1 the graph path failed before anything was launched
 * (the handle then uses stream launch; the caller enqueues on streams). */
int dfr_graph_launch(struct pdma_gpu_dfr *g, struct bplan *b);
/* What enqueue(arg) enqueues on s[0] (and s[1], forked and joined), captured
 * and replayed as one graph; kind, nch and desc name the batch's shape. Also 1
 * when capture failed (nothing ran); < 0 enqueue's error. */
int dfr_capture_launch(struct pdma_gpu_dfr *g, int kind, uint32_t nch, bool desc, int (*enqueue)(void *),
		       void *arg);
int dfr_graph_init(struct pdma_gpu_dfr *g);
void dfr_graph_fini(struct pdma_gpu_dfr *g);

#endif /* PDMA_INGEST_CUDA_DFR_H */
