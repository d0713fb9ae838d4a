// SPDX-License-Identifier: MIT
/* GPU batching: hand a contiguous run of ring slots to the GPU deframer once
 * a chunk's worth (4 MiB default) is waiting, or whatever is there after 1 ms
 * or at the end, then account its descriptors in arrival order. */
#include <errno.h>
#include <stdlib.h>

#include "deframe/gpu_batch.h"
#include "gpu.h"

struct pdma_gpu_batch {
	struct pdma_gpu_ops ops;
	void *dl;                    /* the module's handle */
	struct pdma_gpu_dfr *dfr;    /* the deframer on the device */
	int device;                  /* its CUDA ordinal */
	struct pdma_dfr_desc *desc;  /* the descriptors of one batch */
	uint32_t ndesc;              /* ... at most */
	bool staged;
	size_t chunk;                /* bytes per host-staged copy */
	int err;                     /* first failure */
};

int pdma_gpu_batch_open(struct pdma_gpu_batch **out, const struct pdma_dfr_config *cfg, int device,
			bool staged, enum pdma_ingest_launch launch, size_t chunk, uint32_t ring_slots)
{
	struct pdma_gpu_batch *b = calloc(1, sizeof(*b));
	int ret;

	*out = NULL;
	if (!b)
		return -ENOMEM;
	b->staged = staged;
	ret = pdma_gpu_load(&b->ops, &b->dl);
	if (ret)
		goto err;
	b->device = device;
	ret = b->ops.open(cfg, device, &b->dfr);
	if (ret)
		goto err;
	/* Default: the module's (graph launch unless PEERDMA_GPU_LAUNCH says
	 * otherwise) for zero-copy, stream launch for host-staged: there graph
	 * replay measured slower (bench_ingest (e), H100, small batches
	 * 0.8-1.06x: its host-to-device memcpy nodes), while zero-copy gained
	 * (1.0-1.2x; bench/results/README.md, part e). */
	const char *env = getenv("PEERDMA_GPU_LAUNCH");
	if (launch == PDMA_INGEST_LAUNCH_DEFAULT && staged && !(env && *env))
		launch = PDMA_INGEST_LAUNCH_STREAM;
	if (launch != PDMA_INGEST_LAUNCH_DEFAULT) {
		ret = b->ops.set_launch(b->dfr, launch == PDMA_INGEST_LAUNCH_GRAPH ? PDMA_GPU_LAUNCH_GRAPH
										   : PDMA_GPU_LAUNCH_STREAM);
		if (ret)
			goto err;
	}
	b->chunk = chunk ? chunk : (4u << 20);
	/* A ring rounds its slots up to a power of two: at most twice these. */
	b->ndesc = ring_slots * 2u;
	b->desc = calloc(b->ndesc, sizeof(*b->desc));
	if (!b->desc) {
		ret = -ENOMEM;
		goto err;
	}
	*out = b;
	return 0;
err:
	pdma_gpu_batch_close(b);
	return ret;
}

void pdma_gpu_batch_close(struct pdma_gpu_batch *b)
{
	if (!b)
		return;
	if (b->dfr)
		b->ops.close(b->dfr);
	pdma_gpu_unload(b->dl);
	free(b->desc);
	free(b);
}

int pdma_gpu_batch_register(struct pdma_gpu_batch *b, const struct pdma_ring *r)
{
	/* The GPU reads the ring (zero-copy) or its copy engine does
	 * (host-staged): pinned and mapped for the device too. */
	return b->ops.host_register(b->dfr, r->base, r->bytes);
}

void pdma_gpu_batch_unregister(struct pdma_gpu_batch *b, const struct pdma_ring *r)
{
	b->ops.host_unregister(b->dfr, r->base);
}

int pdma_gpu_batch_register_mem(struct pdma_gpu_batch *b, void *p, size_t bytes)
{
	return b->ops.host_register(b->dfr, p, bytes);
}

void pdma_gpu_batch_unregister_mem(struct pdma_gpu_batch *b, void *p)
{
	b->ops.host_unregister(b->dfr, p);
}

/* After a failed run: its n descriptors as unattributed malformed datagrams
 * rather than lost silently; the first error is kept. */
static void batch_failed(struct pdma_gpu_batch *b, uint32_t n, int e)
{
	for (uint32_t i = 0; i < n; i++) {
		b->desc[i] = (struct pdma_dfr_desc){ .stream = PDMA_DFR_NO_STREAM,
						     .status = -PDMA_DFR_E_EMPTY };
	}
	if (!b->err)
		b->err = e;
}

uint32_t pdma_gpu_batch_consume(struct pdma_gpu_batch *b, const struct pdma_ring *r, uint64_t tail,
				uint64_t head, bool flush, double now, double *last_batch,
				struct pdma_acct *acct)
{
	uint64_t avail = head - tail;
	if (!flush && avail * r->slot_size < b->chunk && now - *last_batch < 1e-3)
		return 0;
	uint32_t first = (uint32_t)(tail & (r->nslots - 1));
	uint32_t n = (uint32_t)(avail < r->nslots - first ? avail : r->nslots - first);
	const uint8_t *base = pdma_ring_slot(r, tail);
	/* Host-staged: only the bytes the datagrams fill cross PCIe. The
	 * headers this reads are read again below, from the cache. */
	int e = b->staged ? b->ops.run_staged(b->dfr, base, r->slot_size, pdma_slots_span(base, r->slot_size, n), n,
					      b->chunk, b->desc)
			  : b->ops.run(b->dfr, base, r->slot_size, n, b->desc);
	if (e)
		batch_failed(b, n, e);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len;
		const uint8_t *dg = pdma_slot_dgram(base + (size_t)i * r->slot_size, r->slot_size, &len);

		/* the ring is host memory: the observer may read the datagram */
		pdma_acct_add_dg(acct, &b->desc[i], 0, dg, len);
	}
	*last_batch = now;
	return n;
}

int pdma_gpu_batch_frames(struct pdma_gpu_batch *b, const struct pdma_frm_cfg *fc, const void *base,
			  const struct pdma_frame *frames, uint32_t n, struct pdma_acct *acct,
			  struct pdma_frm_stats *fs)
{
	if (n > b->ndesc)
		return -E2BIG;
	int e = b->ops.run_frames(b->dfr, fc, base, frames, n, b->desc);
	if (e)
		batch_failed(b, n, e);
	for (uint32_t i = 0; i < n; i++)
		pdma_frm_account(fs, acct, &b->desc[i], 0);
	return e;
}

int pdma_gpu_batch_error(const struct pdma_gpu_batch *b)
{
	return b->err;
}

int pdma_gpu_batch_finish(struct pdma_gpu_batch *b, struct pdma_dfr *d)
{
	/* Descriptors carry no length: byte totals come from the per-stream
	 * payload size, known once the tables are back. */
	int e = b->ops.read_tables(b->dfr, &d->t);
	for (uint32_t i = 0; i < d->cfg.max_streams; i++)
		d->acct.st[i].s.bytes = d->acct.st[i].s.received * d->t.plen[i];
	return e;
}

const char *pdma_gpu_batch_launch_name(struct pdma_gpu_batch *b)
{
	return b->ops.get_launch(b->dfr) == PDMA_GPU_LAUNCH_GRAPH ? "graph" : "stream";
}

const char *pdma_gpu_batch_kernel(struct pdma_gpu_batch *b)
{
	return b->ops.kernel_name(b->dfr);
}

int pdma_gpu_batch_device(const struct pdma_gpu_batch *b)
{
	return b->device;
}

const struct pdma_gpu_ops *pdma_gpu_batch_ops(struct pdma_gpu_batch *b, struct pdma_gpu_dfr **g)
{
	*g = b->dfr;
	return &b->ops;
}
