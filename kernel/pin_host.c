// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma host memory provider: pin_user_pages_fast(FOLL_LONGTERM) with an
 * mmu_interval_notifier. Any invalidation that changes which pages back the
 * range (munmap, exit, madvise, migration...) revokes the handle; protection
 * changes (mprotect, fork's COW write-protect) keep the same pages and do not.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "peerdma.h"

#define PDMA_HOST_RETRIES 16

static void pdma_host_unpin(struct pdma_pin *pin)
{
	unpin_user_pages_dirty_lock(pin->host.pages, pin->npages,
				    !(pin->flags & PEERDMA_PIN_READONLY));
}

/* page unpinning may take page locks: not from within the notifier */
static void pdma_host_revoke_work(struct work_struct *work)
{
	struct pdma_pin *pin = container_of(work, struct pdma_pin, host.revoke_work);

	pdma_pin_wait_mappings(pin);
	pdma_host_unpin(pin);
	pdma_pin_revoke_end(pin, PEERDMA_EVENT_HOST_INVALIDATE);
	pdma_pin_put(pin);
}

static bool pdma_host_invalidate(struct mmu_interval_notifier *mni,
				 const struct mmu_notifier_range *range,
				 unsigned long cur_seq)
{
	struct pdma_pin *pin = container_of(mni, struct pdma_pin, host.notifier);
	int state;

	if (range->event == MMU_NOTIFY_PROTECTION_VMA ||
	    range->event == MMU_NOTIFY_PROTECTION_PAGE ||
	    range->event == MMU_NOTIFY_SOFT_DIRTY) {
		spin_lock(&pin->host.seq_lock);
		mmu_interval_set_seq(mni, cur_seq);
		spin_unlock(&pin->host.seq_lock);
		return true;
	}
	if (!mmu_notifier_range_blockable(range))
		return false;

	spin_lock(&pin->host.seq_lock);
	mmu_interval_set_seq(mni, cur_seq);
	state = atomic_read(&pin->state);
	spin_unlock(&pin->host.seq_lock);
	if (state == PDMA_CREATING)
		return true;	/* the creator sees the new sequence and retries */

	if (!pdma_pin_revoke_begin(pin))
		return true;
	/* clients are stopped and unmapped: the pages can go (once: we own them) */
	kref_get(&pin->ref);
	queue_work(pdma_wq, &pin->host.revoke_work);
	return true;
}

static const struct mmu_interval_notifier_ops pdma_host_mn_ops = {
	.invalidate = pdma_host_invalidate,
};

static int pdma_host_pin(struct pdma_pin *pin, int fd)
{
	unsigned int gup = FOLL_LONGTERM;
	unsigned long seq, done;
	int ret, tries;
	u32 i;

	if (!(pin->flags & PEERDMA_PIN_READONLY))
		gup |= FOLL_WRITE;
	if ((pin->len >> PAGE_SHIFT) > INT_MAX)
		return -E2BIG;
	pin->page_shift = PAGE_SHIFT;
	pin->npages = pin->len >> PAGE_SHIFT;
	spin_lock_init(&pin->host.seq_lock);
	INIT_WORK(&pin->host.revoke_work, pdma_host_revoke_work);
	pin->host.pages = kvcalloc(pin->npages, sizeof(struct page *), GFP_KERNEL);
	pin->phys = kvcalloc(pin->npages, sizeof(u64), GFP_KERNEL);
	if (!pin->host.pages || !pin->phys) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = mmu_interval_notifier_insert(&pin->host.notifier, current->mm, pin->addr,
					   pin->len, &pdma_host_mn_ops);
	if (ret)
		goto err_free;

	for (tries = 0;; tries++) {
		seq = mmu_interval_read_begin(&pin->host.notifier);
		for (done = 0; done < pin->npages; done += ret) {
			ret = pin_user_pages_fast(pin->addr + (done << PAGE_SHIFT),
						  pin->npages - done, gup,
						  pin->host.pages + done);
			if (ret <= 0) {
				if (done)
					unpin_user_pages(pin->host.pages, done);
				ret = ret ? ret : -EFAULT;
				goto err_remove;
			}
		}
		for (i = 0; i < pin->npages; i++)
			pin->phys[i] = page_to_phys(pin->host.pages[i]);
		spin_lock(&pin->host.seq_lock);
		if (!mmu_interval_read_retry(&pin->host.notifier, seq)) {
			pdma_pin_pages_held(pin);
			atomic_set(&pin->state, PDMA_LIVE);
			spin_unlock(&pin->host.seq_lock);
			break;
		}
		spin_unlock(&pin->host.seq_lock);
		unpin_user_pages(pin->host.pages, pin->npages);
		if (tries >= PDMA_HOST_RETRIES) {
			ret = -EAGAIN;
			goto err_remove;
		}
	}
	pin->host.registered = true;
	return 0;

err_remove:
	mmu_interval_notifier_remove(&pin->host.notifier);
err_free:
	kvfree(pin->host.pages);
	pin->host.pages = NULL;
	return ret;
}

static void pdma_host_release(struct pdma_pin *pin)
{
	pdma_host_unpin(pin);
}

static void pdma_host_destroy(struct pdma_pin *pin)
{
	if (pin->host.registered)
		mmu_interval_notifier_remove(&pin->host.notifier);
	pin->host.registered = false;
	kvfree(pin->host.pages);
	pin->host.pages = NULL;
}

/* a read-only pin is mapped for device reads only (writes fault under an IOMMU) */
static enum dma_data_direction pdma_host_dir(struct pdma_pin *pin)
{
	return (pin->flags & PEERDMA_PIN_READONLY) ? DMA_TO_DEVICE : DMA_BIDIRECTIONAL;
}

/*
 * The pages are shared with the CPU for the life of the pin, and the same page
 * may be mapped for several clients (overlapping handles, one device attached
 * twice), as RDMA memory regions are: no CPU cache maintenance at map/unmap
 * (DMA_ATTR_SKIP_CPU_SYNC); a client on a non-coherent platform syncs around
 * each transfer (dma_sync_single_for_cpu/device).
 */
/* undo the first @n pages of pdma_host_map() */
static void pdma_host_unmap_first(struct pdma_pin *pin, struct peerdma_client *c, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		dma_unmap_page_attrs(c->dev, c->dma[i], PAGE_SIZE, pdma_host_dir(pin),
				     DMA_ATTR_SKIP_CPU_SYNC);
}

static int pdma_host_map(struct pdma_pin *pin, struct peerdma_client *c)
{
	dma_addr_t d;
	u32 i;

	for (i = 0; i < pin->npages; i++) {
		d = dma_map_page_attrs(c->dev, pin->host.pages[i], 0, PAGE_SIZE,
				       pdma_host_dir(pin), DMA_ATTR_SKIP_CPU_SYNC);
		if (dma_mapping_error(c->dev, d)) {
			pdma_host_unmap_first(pin, c, i);
			return -ENOMEM;	/* out of I/O address space or memory */
		}
		c->dma[i] = d;
	}
	return 0;
}

static void pdma_host_unmap(struct pdma_pin *pin, struct peerdma_client *c, bool revoking)
{
	pdma_host_unmap_first(pin, c, pin->npages);
}

const struct pdma_provider pdma_host_provider = {
	.name = "host",
	.kind = PEERDMA_KIND_HOST,
	.pin = pdma_host_pin,
	.release = pdma_host_release,
	.destroy = pdma_host_destroy,
	.map = pdma_host_map,
	.unmap = pdma_host_unmap,
};
