/* SPDX-License-Identifier: MIT */
/*
 * GPU batching (the host-staged and zero-copy paths): the GPU deframer module
 * (gpu.h, loaded at open) deframes contiguous runs of a receive ring's slots,
 * and the descriptors that come back are accounted here in arrival order, as
 * the CPU deframer accounts its own (deframe/acct.h).
 *
 * Single-threaded after open: the session's deframer thread drives it.
 */
#ifndef PDMA_INGEST_DEFRAME_GPU_BATCH_H
#define PDMA_INGEST_DEFRAME_GPU_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deframe/acct.h"
#include "deframe/deframe_cpu.h"
#include "deframe/frame_acct.h"
#include "rx/ring.h"

/* How each batch is launched: one CUDA graph replay per batch, one stream
 * call per operation, or the default: the module's (graph unless
 * PEERDMA_GPU_LAUNCH says otherwise) for zero-copy, stream for host-staged,
 * where it measured faster. (The session's configuration names it.) */
enum pdma_ingest_launch { PDMA_INGEST_LAUNCH_DEFAULT = 0, PDMA_INGEST_LAUNCH_STREAM,
			  PDMA_INGEST_LAUNCH_GRAPH };

struct pdma_gpu_batch;
/* staged: host-staged (the ring is copied to the GPU in chunk-byte copies,
 * 0: 4 MiB), else zero-copy (the GPU reads the mapped ring). ring_slots: the
 * rings' slots as configured (a batch never exceeds a ring). device: the
 * CUDA ordinal every call of the module runs on. -ENODEV without a GPU or
 * without that one, -ENOENT when the module was not built. */
int pdma_gpu_batch_open(struct pdma_gpu_batch **b, const struct pdma_dfr_config *cfg, int device,
			bool staged, enum pdma_ingest_launch launch, size_t chunk, uint32_t ring_slots);
int pdma_gpu_batch_device(const struct pdma_gpu_batch *b);
void pdma_gpu_batch_close(struct pdma_gpu_batch *b);
/* Pin and map a ring for the device (and unregister it before its fini). */
int pdma_gpu_batch_register(struct pdma_gpu_batch *b, const struct pdma_ring *r);
void pdma_gpu_batch_unregister(struct pdma_gpu_batch *b, const struct pdma_ring *r);
/* Deframe and account ring slots [tail, head) up to the ring's end, once a
 * chunk's worth is waiting, 1 ms after *last_batch, or when flush; now is
 * the monotonic time in seconds and goes to *last_batch when a batch runs.
 * Returns the slots consumed (0: not yet). A failed batch is accounted as
 * unattributed malformed packets and its error kept (pdma_gpu_batch_error). */
uint32_t pdma_gpu_batch_consume(struct pdma_gpu_batch *b, const struct pdma_ring *r, uint64_t tail,
				uint64_t head, bool flush, double now, double *last_batch,
				struct pdma_acct *acct);
/* Pin and map host memory that holds a frame ring's region (or its frame
 * descriptors) for the device; GPU memory needs neither. */
int pdma_gpu_batch_register_mem(struct pdma_gpu_batch *b, void *p, size_t bytes);
void pdma_gpu_batch_unregister_mem(struct pdma_gpu_batch *b, void *p);
/*
 * The GPU's frame-ring entry point (deframe/frame.h): deframe n frames, frame
 * i at base + frames[i].off, on the device, and account their descriptors in
 * the frames' order: skipped frames into *fs by reason, datagrams into acct
 * (pdma_frm_account, as pdma_dfr_process_frames counts on the CPU). base is
 * device memory (the NIC's receive buffers in GPU pages: read in place) or
 * registered host memory; frames may be plain host memory (copied, 8 bytes a
 * frame). n at most the ring_slots * 2 given at open. Returns 0, or the
 * error of a failed run: its frames are then counted as datagrams with an
 * unattributed error, as a failed slot batch is, and the error is kept
 * (pdma_gpu_batch_error). Synchronous.
 */
int pdma_gpu_batch_frames(struct pdma_gpu_batch *b, const struct pdma_frm_cfg *fc, const void *base,
			  const struct pdma_frame *frames, uint32_t n, struct pdma_acct *acct,
			  struct pdma_frm_stats *fs);
/* The first error of a batch, 0 if none. */
int pdma_gpu_batch_error(const struct pdma_gpu_batch *b);
/* After the last batch: the device's tables into d->t, so callers read one
 * layout whatever the deframer, and the per-stream byte totals. */
int pdma_gpu_batch_finish(struct pdma_gpu_batch *b, struct pdma_dfr *d);
/* The launch mode in effect ("graph" or "stream": a failed graph falls back
 * to streams) and the kernel's name. */
const char *pdma_gpu_batch_launch_name(struct pdma_gpu_batch *b);
/* The module's operations and the deframer handle they take (the sample
 * blocks' copies out of the device window: blocks/gpu_mem.c). */
struct pdma_gpu_ops;
struct pdma_gpu_dfr;
const struct pdma_gpu_ops *pdma_gpu_batch_ops(struct pdma_gpu_batch *b, struct pdma_gpu_dfr **g);
const char *pdma_gpu_batch_kernel(struct pdma_gpu_batch *b);

#endif /* PDMA_INGEST_DEFRAME_GPU_BATCH_H */
