// SPDX-License-Identifier: MIT
/*
 * What a device driver gets from an MR (pdma_mr_dma, pdma_mr_dma_pages: the
 * kernel handle, the dma-buf, the pages), and PDMA_MR_REVOKED: each segment
 * watches its region (lib/cache/region.h) while the MR is open, so a
 * revocation (GPU memory freed, dma-buf moved, host pages unmapped under a
 * kernel pin, a stale cache entry found) reaches the MR's EQ once.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "mr/domain.h"

/* Under the region's users lock, from the thread that revoked it (the kdev
 * event thread, the CUDA deallocation hooks, a cache lookup): the domain lock
 * must not be taken here (a registration may hold it while such a thread waits
 * for it), so the EQ is read with an atomic load. An EQ stays bound while any
 * MR is open (pdma_eq_close: -EBUSY) and this MR is open until it unwatches. */
static void seg_revoked(struct pdma_region_user *u)
{
	struct pdma_mr_seg *seg = pdma_fork_entry(u, struct pdma_mr_seg, user);
	struct pdma_mr *m = seg->mr;
	struct pdma_domain *d = m->dom;
	struct pdma_eq *eq;

	if (atomic_exchange(&m->revoked, true))
		return;
	eq = __atomic_load_n(&d->eq, __ATOMIC_ACQUIRE);
	if (eq && (eq->flags & PDMA_MR_REVOKE_EVENTS)) {
		struct pdma_eq_entry e = { .event = PDMA_MR_REVOKED, .mr = m,
					   .context = m->context };

		if (!pdma_eq_post_unreserved(eq, &e))
			pdma_log(d, 2, "EQ full: PDMA_MR_REVOKED of MR %p lost", (void *)m);
	}
}

void pdma_mr_watch(struct pdma_mr *m)
{
	for (size_t i = 0; i < m->nsegs; i++) {
		m->segs[i].user.revoked = seg_revoked;
		pdma_region_add_user(m->segs[i].region, &m->segs[i].user);
	}
}

void pdma_mr_unwatch(struct pdma_mr *m)
{
	for (size_t i = 0; i < m->nsegs; i++)
		pdma_region_del_user(m->segs[i].region, &m->segs[i].user);
}

void pdma_mr_watch_all(struct pdma_domain *d)
{
	const struct pdma_idmap *t = &d->keys; /* every open MR has its own key there */

	for (size_t i = 0; t->slot && i <= t->mask; i++) {
		const struct pdma_key_entry *e = t->slot[i].val;
		struct pdma_mr *m = e && !e->mapped ? e->mr : NULL;

		if (m && !m->watched) {
			m->watched = true;
			pdma_mr_watch(m);
		}
	}
}

/* The segment's region, held against pdma_mr_refresh and close as an
 * access in flight (domain.h, Locking) until seg_done. */
static struct pdma_region *seg_get(const struct pdma_mr *m, size_t i)
{
	struct pdma_region *r;

	pdma_dom_lock(m->dom);
	r = m->segs[i].region;
	pdma_dom_access_begin(m->dom);
	pdma_dom_unlock(m->dom);
	return r;
}

static void seg_done(const struct pdma_mr *m)
{
	pdma_dom_access_end(m->dom);
}

int pdma_mr_dma(const struct pdma_mr *m, size_t i, struct pdma_mr_dma *dma)
{
	struct pdma_region *r;
	int ret;

	if (!m || !dma || i >= m->nsegs)
		return -EINVAL;
	memset(dma, 0, sizeof(*dma));
	dma->kernel_fd = -1;
	dma->dmabuf_fd = -1;
	r = seg_get(m, i);
	if (!atomic_load_explicit(&r->valid, memory_order_acquire))
		ret = -ENODEV;
	else if (!r->ops->dma)
		ret = -ENOENT; /* checked, not pinned: nothing a driver could hold */
	else
		ret = r->ops->dma(r->be, r->pin, dma);
	/* A revocation that raced with the backend's answer wins. */
	if (!ret && !atomic_load_explicit(&r->valid, memory_order_acquire))
		ret = -ENODEV;
	seg_done(m);
	if (ret) {
		memset(dma, 0, sizeof(*dma));
		dma->kernel_fd = -1;
		dma->dmabuf_fd = -1;
		return ret;
	}
	dma->addr = m->segs[i].addr;
	return 0;
}

int pdma_mr_dma_pages(const struct pdma_mr *m, size_t i, uint64_t *addrs, uint32_t *count)
{
	struct pdma_region *r;
	int ret;

	if (!m || !count || i >= m->nsegs)
		return -EINVAL;
	r = seg_get(m, i);
	if (!atomic_load_explicit(&r->valid, memory_order_acquire))
		ret = -ENODEV;
	else if (!r->ops->dma_pages)
		ret = -ENOENT;
	else
		ret = r->ops->dma_pages(r->be, r->pin, addrs, count);
	seg_done(m);
	return ret;
}
