// SPDX-License-Identifier: MIT
/*
 * The simulated DMA device: moves bytes through registered MRs by key, with
 * every check a real device's IOMMU/NIC would make on our behalf (key, access,
 * bounds, enabled, revoked). See lib/mem/sim.h.
 */
#include <errno.h>
#include <string.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "mem/sim.h"

struct copy {
	unsigned char *buf; /* device-side bytes */
	bool to_mr;         /* true: buf -> MR; false: MR -> buf */
};

static void copy_piece(void *arg, void *mem, size_t len, size_t done)
{
	struct copy *c = arg;

	if (c->to_mr)
		memcpy(mem, c->buf + done, len);
	else
		memcpy(c->buf + done, mem, len);
}

static void count(struct pdma_domain *d, size_t len)
{
	if (d->attr.sim)
		pdma_sim_count_dma(d->attr.sim, len);
}

static int dma(struct pdma_domain *d, uint64_t key, uint64_t addr, void *buf, size_t len,
	       bool write)
{
	struct copy c = { .buf = buf, .to_mr = write };
	int ret;

	if (!d || !buf)
		return -EINVAL;
	ret = pdma_key_access(d, key, addr, len, write ? PDMA_REMOTE_WRITE : PDMA_REMOTE_READ,
			      copy_piece, &c);
	if (!ret)
		count(d, len);
	return ret;
}

int pdma_sim_dma_write(struct pdma_domain *d, uint64_t key, uint64_t addr, const void *src,
		       size_t len)
{
	return dma(d, key, addr, (void *)src, len, true);
}

int pdma_sim_dma_read(struct pdma_domain *d, uint64_t key, uint64_t addr, void *dst,
		      size_t len)
{
	return dma(d, key, addr, dst, len, false);
}

/* The local side of an RMA: a segment of a described MR, or a hidden
 * registration of host memory. */
struct local {
	struct pdma_region *held;  /* region held for DMA (quiesce lock shared) */
	struct pdma_region *owned; /* hidden registration to release after */
	bool cached;
};

/* With desc: caller holds d->lock (the descriptor is looked up). Without:
 * the hidden registration pins, and runs without it. */
static int local_begin(struct pdma_domain *d, const void *buf, size_t len, void *desc,
		       uint64_t access, struct local *l)
{
	uint64_t a = (uint64_t)(uintptr_t)buf;
	const struct pdma_mem_ops *ops;
	struct pdma_mem_alloc alloc;
	void *be;
	struct pdma_mr *m;
	int ret;

	memset(l, 0, sizeof(*l));
	if (!buf || !len || a + len < a)
		return -EINVAL;
	if (desc) {
		m = pdma_desc_mr(d, desc);
		if (!m)
			return -EINVAL;
		if (!(m->access & access))
			return -EACCES;
		for (size_t i = 0; i < m->nsegs; i++) {
			struct pdma_mr_seg *s = &m->segs[i];

			if (a < s->addr || len > s->addr + s->len - a)
				continue;
			if (!s->region->ops->cpu_visible)
				return -EOPNOTSUPP;
			if (!pdma_region_dma_begin(s->region))
				return -EFAULT;
			l->held = s->region;
			return 0;
		}
		return -EINVAL; /* the desc does not cover the buffer */
	}
	if (d->attr.mr_mode & PDMA_MR_LOCAL)
		return -EINVAL;
	if ((d->attr.mr_mode & PDMA_MR_HMEM) && d->attr.sim &&
	    !pdma_mem_sim_ops.query(d->attr.sim, a, len, &alloc))
		return -EINVAL; /* device memory must be registered and described */
	/* The provider hides local registration: pin the host buffer now. */
	ret = pdma_domain_backend(d, PDMA_HMEM_SYSTEM, 0, a, len, &ops, &be, NULL);
	if (!ret)
		ret = ops->query(be, a, len, &alloc);
	if (ret)
		return ret;
	if (d->cache) {
		ret = pdma_cache_get(d->cache, ops, be, PDMA_HMEM_SYSTEM, a, len, &alloc,
				     &l->owned);
		l->cached = true;
	} else {
		uint64_t s;
		size_t pl;

		pdma_page_round(ops->page_size, a, len, &s, &pl);
		ret = pdma_region_create(ops, be, PDMA_HMEM_SYSTEM, s, pl, 0, &l->owned);
	}
	if (ret)
		return ret;
	if (!pdma_region_dma_begin(l->owned)) {
		l->held = NULL;
		return -EFAULT;
	}
	l->held = l->owned;
	return 0;
}

static void local_end(struct pdma_domain *d, struct local *l)
{
	if (l->held)
		pdma_region_dma_end(l->held);
	if (!l->owned)
		return;
	if (l->cached)
		pdma_cache_put(d->cache, l->owned);
	else if (atomic_fetch_sub(&l->owned->refcnt, 1) == 1)
		pdma_region_destroy(l->owned);
}

static int rma(struct pdma_domain *d, void *buf, size_t len, void *desc, uint64_t addr,
	       uint64_t key, bool write)
{
	struct copy c = { .buf = buf, .to_mr = write };
	const uint64_t local_access = write ? PDMA_WRITE : PDMA_READ;
	struct pdma_mr *m = NULL;
	bool in_flight = false;
	struct local l;
	int ret = 0;

	if (!d)
		return -EINVAL;
	if (!desc)
		ret = local_begin(d, buf, len, NULL, local_access, &l);
	pdma_dom_lock(d);
	if (!ret && desc)
		ret = local_begin(d, buf, len, desc, local_access, &l);
	if (!ret) {
		/* From here to local_end both MRs stay open (domain.h, Locking). */
		m = pdma_key_lookup(d, key);
		pdma_dom_access_begin(d);
		in_flight = true;
	}
	pdma_dom_unlock(d);
	if (!ret)
		ret = m ? pdma_mr_access(d, m, addr, len,
					 write ? PDMA_REMOTE_WRITE : PDMA_REMOTE_READ, copy_piece,
					 &c)
			: -ENOKEY;
	local_end(d, &l);
	if (in_flight)
		pdma_dom_access_end(d);
	if (!ret)
		count(d, len);
	return ret;
}

int pdma_sim_write(struct pdma_domain *d, const void *buf, size_t len, void *desc, uint64_t addr,
		   uint64_t key)
{
	return rma(d, (void *)buf, len, desc, addr, key, true);
}

int pdma_sim_read(struct pdma_domain *d, void *buf, size_t len, void *desc, uint64_t addr,
		  uint64_t key)
{
	return rma(d, buf, len, desc, addr, key, false);
}
