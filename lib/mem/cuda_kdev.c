// SPDX-License-Identifier: MIT
/*
 * GPU memory as a domain registers it: a pin that something can actually hold.
 * The cuda backend's own pin (pdma_mem_cuda_ops, cuda_gpu.c) only prepares a
 * handle: a dma-buf export, or for the nv-p2p path nothing but the virtual
 * address. On its own the nv-p2p kind pins nothing, so a registration must not
 * stop there (issue 13: "nothing succeeds without a pin"):
 *
 *  pdma_mem_cuda_kdev_ops (a domain with kernel_device): the module pins the
 *    handle, PEERDMA_KIND_DMABUF on the exported fd where the driver offers
 *    dma-buf, else PEERDMA_KIND_GPU on the virtual address (nv-p2p);
 *    PEERDMA_CUDA_DMABUF=0 forces the latter. Its revocations (GPU_FREE,
 *    DMABUF_MOVE events, read by the kdev event thread; nv-p2p pins are
 *    taken in free-callback mode so that a free revokes them) and the deallocation
 *    hooks' both revoke the region, once.
 *  pdma_mem_cuda_export_ops (no kernel device): the dma-buf export is kept as
 *    the handle (any importer can attach and pin it: pdma_mr_dma names it);
 *    memory that cannot be exported is refused with -EOPNOTSUPP and a log line
 *    saying what to load.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "mem/cuda_int.h"
#include "mem/kdev.h"
#include "uapi/peerdma.h"

struct gpin {
	void *cpin;   /* the cuda backend's pin (the dma-buf, SYNC_MEMOPS done) */
	void *kpin;   /* the module's, NULL without a kernel device */
	pdma_mem_revoke_fn revoke;
	void *arg;
	atomic_bool fired; /* the region's callback ran: both sources may report */
};

/* From the kdev event thread (module revoked the pin) or the deallocation
 * hooks (memory about to be freed): the region is revoked once. */
static void gpin_revoked(void *arg)
{
	struct gpin *g = arg;

	if (!atomic_exchange(&g->fired, true) && g->revoke)
		g->revoke(g->arg);
}

static int kgpu_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc)
{
	const struct pdma_cuda_kdev *b = be;

	return pdma_mem_cuda_ops.query(b->cuda, addr, len, alloc);
}

static int kgpu_same_alloc(void *be, uint64_t addr, uint64_t buffer_id)
{
	const struct pdma_cuda_kdev *b = be;

	return pdma_cuda_tag_check(b->cuda, addr, buffer_id);
}

static const char *kgpu_why(int err, uint32_t kind)
{
	switch (err) {
	case -EOPNOTSUPP:
		return kind == PEERDMA_KIND_GPU ?
			"peerdma.ko has no nv-p2p provider (load nvidia.ko, or gpusim in the test guest, before peerdma.ko)" :
			"peerdma.ko cannot import dma-bufs";
	case -ENOMEM:
		return "out of memory or GPU BAR space";
	case -ENOSPC:
		return "too many pins on this file";
	default:
		return "refused by peerdma.ko";
	}
}

static int kgpu_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **out)
{
	const struct pdma_cuda_kdev *b = be;
	struct pdma_cuda_pin_info pi;
	struct gpin *g = calloc(1, sizeof(*g));
	uint32_t kind;
	int ret;

	if (!g)
		return -ENOMEM;
	g->revoke = revoke;
	g->arg = arg;
	ret = pdma_mem_cuda_ops.pin(b->cuda, addr, len, gpin_revoked, g, &g->cpin);
	if (ret) {
		free(g);
		return ret;
	}
	pdma_cuda_pin_info(g->cpin, &pi);
	if (pi.kind == PDMA_CUDA_PIN_DMABUF) {
		kind = PEERDMA_KIND_DMABUF;
		ret = pi.dmabuf_fd < 0 ? -EFAULT : /* freed meanwhile: the hooks closed it */
		      pdma_kdev_pin(b->kdev, kind, 0, pi.dmabuf_fd, PDMA_HMEM_CUDA,
				    pi.dmabuf_offset, pi.dmabuf_len, pi.va, gpin_revoked, g, &g->kpin);
	} else {
		kind = PEERDMA_KIND_GPU;
		/* Free-callback mode: a persistent nv-p2p pin keeps the pages
		 * past cuMemFree and tells nobody, so the MR would never learn
		 * that its memory was freed. With the callback the driver
		 * revokes the pin in cuMemFree (PEERDMA_EVENT_GPU_FREE). */
		ret = pdma_kdev_pin(b->kdev, kind, PEERDMA_PIN_GPU_CALLBACK, -1, PDMA_HMEM_CUDA,
				    pi.va, pi.len, pi.va, gpin_revoked, g, &g->kpin);
	}
	if (ret) {
		pdma_cuda_log(b->cuda, 3, "cuda: peerdma.ko pin of GPU memory [%#llx, +%zu) (%s) failed: %s (%d)",
			      (unsigned long long)pi.va, pi.len,
			      kind == PEERDMA_KIND_DMABUF ? "dma-buf" : "nv-p2p", kgpu_why(ret, kind),
			      ret);
		pdma_mem_cuda_ops.unpin(b->cuda, g->cpin);
		free(g);
		return ret;
	}
	*out = g;
	return 0;
}

static void kgpu_unpin(void *be, void *pin)
{
	const struct pdma_cuda_kdev *b = be;
	struct gpin *g = pin;

	/* The module lets go of the dma-buf (or the nv-p2p pages) first; then
	 * the export is closed. */
	if (g->kpin)
		pdma_kdev_unpin(b->kdev, g->kpin);
	pdma_mem_cuda_ops.unpin(b->cuda, g->cpin);
	free(g);
}

static int kgpu_dma(void *be, void *pin, struct pdma_mr_dma *dma)
{
	const struct pdma_cuda_kdev *b = be;
	struct gpin *g = pin;
	struct pdma_cuda_pin_info pi;
	int ret;

	if (atomic_load(&g->fired))
		return -ENODEV;
	ret = pdma_kdev_dma(b->kdev, g->kpin, dma);
	if (ret)
		return ret;
	pdma_cuda_pin_info(g->cpin, &pi);
	if (pi.revoked)
		return -ENODEV;
	if (pi.kind == PDMA_CUDA_PIN_DMABUF) {
		dma->dmabuf_fd = pi.dmabuf_fd;
		dma->dmabuf_offset = pi.dmabuf_offset;
	}
	return 0;
}

static int kgpu_dma_pages(void *be, void *pin, uint64_t *addrs, uint32_t *count)
{
	const struct pdma_cuda_kdev *b = be;
	struct gpin *g = pin;

	if (atomic_load(&g->fired))
		return -ENODEV;
	return pdma_kdev_dma_pages(b->kdev, g->kpin, addrs, count);
}

const struct pdma_mem_ops pdma_mem_cuda_kdev_ops = {
	.name = "cuda-kdev",
	.page_size = PDMA_CUDA_GPU_PAGE,
	.cpu_visible = false,
	.query = kgpu_query,
	.same_alloc = kgpu_same_alloc,
	.pin = kgpu_pin,
	.unpin = kgpu_unpin,
	.dma = kgpu_dma,
	.dma_pages = kgpu_dma_pages,
};

/* ------------------------------------------------- without a kernel device */

static bool dmabuf_off(void)
{
	const char *e = getenv("PEERDMA_CUDA_DMABUF");

	return e && !strcmp(e, "0");
}

static int exp_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		   void **out)
{
	struct pdma_cuda_pin_info pi;
	void *p;
	int ret = pdma_mem_cuda_ops.pin(be, addr, len, revoke, arg, &p);

	if (ret)
		return ret;
	pdma_cuda_pin_info(p, &pi);
	if (pi.kind != PDMA_CUDA_PIN_DMABUF) {
		pdma_mem_cuda_ops.unpin(be, p);
		pdma_cuda_log(be, 3,
			      "cuda: GPU memory [%#llx, +%zu) has no dma-buf export (%s) and nothing would pin it: "
			      "load peerdma.ko and open the domain with kernel_device (\"/dev/peerdma\") to pin it with nv-p2p",
			      (unsigned long long)pi.va, pi.len,
			      dmabuf_off() ? "PEERDMA_CUDA_DMABUF=0" : "the driver offers none");
		return -EOPNOTSUPP;
	}
	*out = p;
	return 0;
}

static int exp_dma(void *be, void *pin, struct pdma_mr_dma *dma)
{
	struct pdma_cuda_pin_info pi;

	(void)be;
	pdma_cuda_pin_info(pin, &pi);
	if (pi.revoked || pi.dmabuf_fd < 0)
		return -ENODEV;
	dma->kernel_fd = -1;
	dma->kind = 0;
	dma->handle = 0;
	dma->pinned_addr = pi.va;
	dma->pinned_len = pi.len;
	dma->page_size = PDMA_CUDA_GPU_PAGE;
	dma->entries = (uint32_t)(pi.len / PDMA_CUDA_GPU_PAGE);
	dma->dmabuf_fd = pi.dmabuf_fd;
	dma->dmabuf_offset = pi.dmabuf_offset;
	return 0;
}

const struct pdma_mem_ops pdma_mem_cuda_export_ops = {
	.name = "cuda-dmabuf",
	.page_size = PDMA_CUDA_GPU_PAGE,
	.cpu_visible = false,
	.query = pdma_mem_cuda_query,
	.same_alloc = pdma_mem_cuda_same_alloc,
	.pin = exp_pin,
	.unpin = pdma_cuda_unpin,
	.dma = exp_dma,
	/* no dma_pages: the physical addresses are the importer's to get */
};
