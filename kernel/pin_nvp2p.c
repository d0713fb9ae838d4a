// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma GPU memory provider through NVIDIA's nv-p2p API (see nvp2p.h).
 * Persistent mode by default; free-callback mode on request, or when the
 * driver refuses the persistent API (MIG, vGPU).
 *
 * The free callback gets the handle id, never a pointer: it looks the pin up,
 * decides ownership with one cmpxchg, quiesces the clients, frees the page
 * table (never put_pages) and returns without waiting on the GPU. The driver
 * frees the table when it returns, and it holds its own lock meanwhile, the
 * lock nvidia_p2p_dma_map_pages and dma_unmap_pages take. So a client of a
 * free-callback pin cannot be mapped or unmapped through the table safely:
 * a call that waits for that lock while the callback runs touches the freed
 * table once it gets it, and the callback cannot wait for such a call without
 * deadlocking. Those clients are mapped with dma_map_resource() from the
 * physical addresses copied at pin time, as the driver itself maps BAR pages
 * for a PCIe peer; their mappings outlive the table. Persistent pins have no
 * callback: their clients get nvidia_p2p_dma_map_pages(), which also covers
 * platforms where the peer's addresses are not BAR addresses. Neither is
 * called under pin->lock, which the callback takes.
 *
 * Only the pinning process can put a free-callback table: the driver looks it
 * up among the calling process's (put_pages from elsewhere finds nothing,
 * returns 0 and leaves the pages pinned, the callback armed). When the last
 * close of the file happens in another process (a forked child or the
 * receiver of the fd held it last, or a kernel thread's deferred fput), the
 * release stops the clients as always but leaves the table to its callback:
 * the pin is an orphan, kept by id, until the owner frees the memory or exits
 * and the callback frees the table. Every callback-mode pin holds a module
 * reference while its callback may still come, so the module cannot be
 * unloaded under a callback that would jump into it.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pid.h>
#include <linux/sizes.h>
#include <linux/slab.h>

#include "nvp2p.h"
#include "peerdma.h"

/* the callback data is the handle id itself */
static_assert(sizeof(void *) >= sizeof(u64), "nv-p2p is LP64 only");

/* the callback can no longer come: drop the module reference it held, once */
static bool pdma_nv_disarm(struct pdma_pin *pin)
{
	return atomic_xchg(&pin->nv.armed, 0);
}

static void pdma_nv_free_callback(void *data)
{
	struct pdma_pin *pin = pdma_pin_get_by_id((u64)(uintptr_t)data);
	struct nvidia_p2p_page_table *pt;
	bool orphaned = false, armed;

	if (!pin)
		return;		/* already released: stale callback */
	/* the creator reads the page table until ready; it takes no driver lock */
	wait_for_completion(&pin->ready);
	/*
	 * Still valid here: the table dies when we return, and a racing put
	 * (unpin won the ownership decision) waits for the driver lock our
	 * caller holds. NULL: put already (only a driver with the 515-535 race
	 * calls back after put_pages returned).
	 */
	pt = READ_ONCE(pin->nv.pt);
	if (pdma_pin_revoke_begin(pin)) {
		/* clients stopped and unmapped; the pages are the driver's again */
		pdma_pin_revoke_end(pin, PEERDMA_EVENT_GPU_FREE);
	} else {
		/* release owns the pages and stopped the clients: it must not put */
		mutex_lock(&pin->lock);
		WRITE_ONCE(pin->nv.torn, true);
		orphaned = pin->awaits_callback;
		mutex_unlock(&pin->lock);
	}
	if (pt)
		nvidia_p2p_free_page_table(pt);
	armed = pdma_nv_disarm(pin);
	if (orphaned) {
		/* the last of a pin released in another process */
		pdma_pin_forget(pin);
		atomic_dec(&pdma_orphans);
		pdma_pin_put(pin);
	}
	pdma_pin_put(pin);
	/*
	 * Last, so that it compiles to a tail call: module_put returns to the
	 * driver, and no instruction of ours runs once the module may go
	 * (tests/kernel/dkms checks the jmp).
	 */
	if (armed)
		module_put(THIS_MODULE);
}

/* the I/O address of native page @i as mapped for client @c */
static dma_addr_t pdma_nv_client_addr(struct pdma_pin *pin, struct peerdma_client *c, u32 i)
{
	return c->dma[(u64)i << (pin->page_shift - c->shift)];
}

/*
 * Released outside the pinning process: put_pages would find nothing. Leave
 * the table to its callback, unless that already ran; true if it is left.
 */
static bool pdma_nv_orphan(struct pdma_pin *pin)
{
	bool orphan;

	mutex_lock(&pin->lock);
	orphan = !pin->nv.torn;
	if (orphan) {
		pin->awaits_callback = true;
		kref_get(&pin->ref);	/* the callback's */
		atomic_inc(&pdma_orphans);
	}
	mutex_unlock(&pin->lock);
	if (orphan)
		pr_debug("handle %llu released by process %d, pinned by %d: its pages wait for the GPU free\n",
			 pin->id, task_tgid_nr(current), pid_nr(pin->nv.owner));
	return orphan;
}

static void pdma_nv_destroy(struct pdma_pin *pin)
{
	put_pid(pin->nv.owner);
	pin->nv.owner = NULL;
}

static void pdma_nv_put(struct pdma_pin *pin)
{
	struct nvidia_p2p_page_table *pt = pin->nv.pt;
	int ret = 0;

	if (pin->nv.persistent) {
		ret = nvidia_p2p_put_pages_persistent(pin->addr, pt, 0);
	} else {
		if (task_tgid(current) != pin->nv.owner && pdma_nv_orphan(pin))
			return;
		/* torn: the callback ran, and drops the module reference itself */
		if (!READ_ONCE(pin->nv.torn)) {
			/*
			 * A callback that starts now: the driver sorts it out
			 * (it runs first, and put returns 0). A put that
			 * returns 0 has unregistered the callback.
			 */
			ret = nvidia_p2p_put_pages(0, 0, pin->addr, pt);
			if (!ret && pdma_nv_disarm(pin))
				module_put(THIS_MODULE);
		}
	}
	if (ret)
		pr_err("put_pages of handle %llu failed: %d\n", pin->id, ret);
	WRITE_ONCE(pin->nv.pt, NULL);
}

static int pdma_nv_pin(struct pdma_pin *pin, int fd)
{
	struct nvidia_p2p_page_table *pt;
	bool persistent = pdma_nvp2p_persistent &&
			  !(pin->flags & PEERDMA_PIN_GPU_CALLBACK);
	u32 shift, i;
	int ret = -ENOTSUPP;

	if (persistent)
		ret = nvidia_p2p_get_pages_persistent(pin->addr, pin->len, &pt, 0);
	if (ret == -ENOTSUPP) {
		persistent = false;
		ret = nvidia_p2p_get_pages(0, 0, pin->addr, pin->len, &pt,
					   pdma_nv_free_callback,
					   (void *)(uintptr_t)pin->id);
	}
	if (ret)
		return ret == -ENOTSUPP ? -EOPNOTSUPP : ret;
	pin->nv.pt = pt;
	pin->nv.persistent = persistent;
	if (!persistent) {
		/* an ioctl of our file: the module is held, and stays for the callback */
		__module_get(THIS_MODULE);
		atomic_set(&pin->nv.armed, 1);
		pin->nv.owner = get_pid(task_tgid(current));
	}
	pdma_pin_pages_held(pin);

	ret = -EPROTO;
	if (!nvidia_p2p_page_table_version_ok(pt)) {
		pr_warn_ratelimited("incompatible page table version 0x%08x\n", pt->version);
		goto err_put;
	}
	switch (pt->page_size) {
	case NVIDIA_P2P_PAGE_SIZE_4KB:
		shift = 12;
		break;
	case NVIDIA_P2P_PAGE_SIZE_64KB:
		shift = 16;
		break;
	case NVIDIA_P2P_PAGE_SIZE_128KB:
		shift = 17;
		break;
	default:
		pr_warn_ratelimited("unknown GPU page size type %u\n", pt->page_size);
		goto err_put;
	}
	if (((u64)pt->entries << shift) != pin->len) {
		pr_warn_ratelimited("page table covers %u pages of %u KiB, not %llu bytes\n",
				    pt->entries, 1U << (shift - 10), pin->len);
		goto err_put;
	}
	pin->phys = kvcalloc(pt->entries, sizeof(u64), GFP_KERNEL);
	if (!pin->phys) {
		ret = -ENOMEM;
		goto err_put;
	}
	for (i = 0; i < pt->entries; i++)
		pin->phys[i] = pt->pages[i]->physical_address;
	pin->page_shift = shift;
	pin->npages = pt->entries;
	atomic_set(&pin->state, PDMA_LIVE);
	return 0;

err_put:
	/* let a racing free callback go before put_pages takes the driver lock */
	atomic_set(&pin->state, PDMA_RELEASING);
	complete_all(&pin->quiesced);
	complete_all(&pin->ready);
	pdma_nv_put(pin);
	pdma_pin_pages_gone(pin);
	pdma_nv_destroy(pin);	/* no release, so no destroy, for a failed pin */
	return ret;
}

static void pdma_nv_release(struct pdma_pin *pin)
{
	pdma_nv_put(pin);
}

/* undo the first @n pages of pdma_nv_map_resource() */
static void pdma_nv_unmap_resource(struct pdma_pin *pin, struct peerdma_client *c, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		dma_unmap_resource(c->dev, pdma_nv_client_addr(pin, c, i),
				   1ULL << pin->page_shift, DMA_BIDIRECTIONAL,
				   DMA_ATTR_SKIP_CPU_SYNC);
}

/* free-callback mode: our own mapping of the BAR pages (see the top) */
static int pdma_nv_map_resource(struct pdma_pin *pin, struct peerdma_client *c)
{
	dma_addr_t d;
	u32 i;

	for (i = 0; i < pin->npages; i++) {
		d = dma_map_resource(c->dev, pin->phys[i], 1ULL << pin->page_shift,
				     DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
		if (dma_mapping_error(c->dev, d)) {
			pdma_nv_unmap_resource(pin, c, i);
			return -ENOMEM;	/* out of I/O address space or memory */
		}
		pdma_client_set_addr(c, i, d);
	}
	c->nv.res = true;
	return 0;
}

static int pdma_nv_map(struct pdma_pin *pin, struct peerdma_client *c)
{
	struct nvidia_p2p_dma_mapping *m;
	u32 i;
	int ret;

	if (!dev_is_pci(c->dev))
		return -EINVAL;
	if (!pin->nv.persistent)
		return pdma_nv_map_resource(pin, c);
	/* the table lives until put, which waits for us (map_sem) */
	ret = nvidia_p2p_dma_map_pages(to_pci_dev(c->dev), pin->nv.pt, &m);
	if (ret)
		return ret == -ENOTSUPP ? -EOPNOTSUPP : ret;
	if (!nvidia_p2p_dma_mapping_version_ok(m) || m->entries != pin->npages) {
		pr_warn_ratelimited("incompatible DMA mapping (version 0x%08x, %u entries)\n",
				    m->version, m->entries);
		nvidia_p2p_dma_unmap_pages(to_pci_dev(c->dev), pin->nv.pt, m);
		return -EPROTO;
	}
	for (i = 0; i < m->entries; i++)
		pdma_client_set_addr(c, i, m->dma_addresses[i]);
	c->nv.mapping = m;
	return 0;
}

static void pdma_nv_unmap(struct pdma_pin *pin, struct peerdma_client *c, bool revoking)
{
	if (c->nv.res) {
		pdma_nv_unmap_resource(pin, c, pin->npages);
		c->nv.res = false;
	}
	if (c->nv.mapping) {
		/* persistent: no revoke path; before put (release waits for us) */
		nvidia_p2p_dma_unmap_pages(to_pci_dev(c->dev), pin->nv.pt, c->nv.mapping);
		c->nv.mapping = NULL;
	}
}

const struct pdma_provider pdma_nvp2p_provider = {
	.name = "nvp2p",
	.kind = PEERDMA_KIND_GPU,
	.pin = pdma_nv_pin,
	.release = pdma_nv_release,
	.destroy = pdma_nv_destroy,
	.map = pdma_nv_map,
	.unmap = pdma_nv_unmap,
};
