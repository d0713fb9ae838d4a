// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim: the nv-p2p API (nvp2p.h) over the stand-in's allocations, as strict
 * as NVIDIA's driver (../../shared/NVP2P-ABI.md, kernel-open/nvidia/nv-p2p.c):
 *
 * - free callbacks run with the driver lock (gs.lock) held, and get_pages,
 *   put_pages, dma_map_pages and dma_unmap_pages take it;
 * - when a callback returns, its page table and every DMA mapping still on it
 *   are freed, poisoned first; put_pages does the same with what is left;
 * - put_pages of a table a callback already tore down returns 0 (the driver
 *   looks the table up by pointer and address);
 * - put_pages (callback mode) from another process than the one that got the
 *   pages is a VIOLATION: the driver looks the table up among the calling
 *   process's, finds nothing and returns 0, and the pages stay pinned, their
 *   callback armed, until the owner frees the memory; dma_map_pages and
 *   dma_unmap_pages on it, or free_page_table outside a callback, are
 *   use-after-frees in the driver: here they are VIOLATIONs;
 * - persistent tables hold the memory: cuMemFree (GPUSIM_IOC_FREE) of pinned
 *   memory succeeds, its address is gone, the pages stay allocated until the
 *   last put_pages_persistent, and no callback ever runs for them;
 * - legacy_race=1 brings back the race of drivers 515-535: put_pages does not
 *   wait for a free callback running on the same table and frees it under the
 *   callback (counted in legacy_hits; persistent tables never meet it);
 * - fail_nth=N fails the Nth call from now of get_pages, dma_map_pages and the
 *   dma-buf attach/map (-ENOMEM), for fault injection tests.
 *
 * Also a selftest calling the API as a careless client would.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pid.h>
#include <linux/poison.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "gpusim.h"

static unsigned int pt_version = NVIDIA_P2P_PAGE_TABLE_VERSION;
module_param(pt_version, uint, 0644);
MODULE_PARM_DESC(pt_version, "page table version handed out (tests of version checks)");

static unsigned int map_version = NVIDIA_P2P_DMA_MAPPING_VERSION;
module_param(map_version, uint, 0644);
MODULE_PARM_DESC(map_version, "DMA mapping version handed out (tests of version checks)");

static ulong pin_limit;
module_param(pin_limit, ulong, 0644);
MODULE_PARM_DESC(pin_limit, "bytes of BAR1 space for page tables (0: whole BAR); more: -ENOMEM");

static bool persistent_api = true;
module_param(persistent_api, bool, 0644);
MODULE_PARM_DESC(persistent_api, "offer nvidia_p2p_get_pages_persistent (else -ENOTSUPP)");

static bool legacy_race;
module_param(legacy_race, bool, 0644);
MODULE_PARM_DESC(legacy_race, "put_pages does not wait for a running free callback (drivers 515-535)");

static unsigned int cb_delay_ms;
module_param(cb_delay_ms, uint, 0644);
MODULE_PARM_DESC(cb_delay_ms, "sleep before each free callback, driver lock held (race tests)");

/* sleeping in cb_delay_ms or attach_delay_ms right now: tests wait for it */
atomic_t gs_delayed = ATOMIC_INIT(0);
module_param_named(delayed, gs_delayed.counter, int, 0444);
MODULE_PARM_DESC(delayed, "callbacks and attaches sleeping in their delay now");

static atomic_t fail_nth = ATOMIC_INIT(0);
module_param_named(fail_nth, fail_nth.counter, int, 0644);
MODULE_PARM_DESC(fail_nth, "fail the Nth get_pages/dma_map_pages/dma-buf attach or map from now");

static const u8 gs_uuid[NVIDIA_P2P_GPU_UUID_LEN] = {
	0x67, 0x70, 0x75, 0x73, 0x69, 0x6d, 0x2d, 0x75,
	0x75, 0x69, 0x64, 0x2d, 0x30, 0x30, 0x30, 0x31,
};

/* fault injection: true for the fail_nth-th call from when it was set */
bool gs_fail(void)
{
	int n = atomic_read(&fail_nth);

	while (n > 0) {
		if (atomic_try_cmpxchg(&fail_nth, &n, n - 1))
			return n == 1;
	}
	return false;
}

/* sleep @ms (if any), visibly: the parameter 'delayed' counts the sleepers */
void gs_delay(unsigned int ms)
{
	if (!ms)
		return;
	atomic_inc(&gs_delayed);
	msleep(ms);
	atomic_dec(&gs_delayed);
}

/* @pt as a live table of ours, or NULL (gs.tlock held) */
static struct gs_table *gs_table_live(struct nvidia_p2p_page_table *pt)
{
	struct gs_table *t;

	lockdep_assert_held(&gs.tlock);
	list_for_each_entry(t, &gs.tables, node)
		if (&t->pt == pt)
			return t;
	return NULL;
}

static int gs_get(u64 va, u64 len, struct nvidia_p2p_page_table **page_table,
		  void (*free_cb)(void *), void *data, bool persistent)
{
	u64 limit = pin_limit ? pin_limit : gs.bar_size;
	struct gs_table *t;
	struct gs_alloc *a;
	u32 i, n;
	int ret;

	if (!page_table || !len || (va | len) & (GS_PAGE - 1))
		return -EINVAL;
	if (!gs.pdev)
		return -ENODEV;
	if (len > gs.bar_size)
		return -EINVAL;	/* no allocation is that large */
	n = len >> GS_PAGE_SHIFT;
	mutex_lock(&gs.lock);
	ret = -ENOMEM;
	if (gs_fail())
		goto err_unlock;
	/* allocated under the driver lock, as the driver does */
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		goto err_unlock;
	t->page_store = kvcalloc(n, sizeof(*t->page_store), GFP_KERNEL);
	t->page_ptrs = kvcalloc(n, sizeof(*t->page_ptrs), GFP_KERNEL);
	if (!t->page_store || !t->page_ptrs)
		goto err_free;
	a = gs_find_any(va, len);
	if (!a || a->mm != current->mm) {
		ret = -EINVAL;
		goto err_free;
	}
	if (gs.pinned + len > limit)
		goto err_free;
	for (i = 0; i < n; i++) {
		t->page_store[i].physical_address =
			gs.bar_phys + a->bar_off + (va - a->va) + ((u64)i << GS_PAGE_SHIFT);
		t->page_ptrs[i] = &t->page_store[i];
	}
	t->pt.version = pt_version;
	t->pt.page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	t->pt.pages = t->page_ptrs;
	t->pt.entries = n;
	t->pt.gpu_uuid = (u8 *)gs_uuid;
	t->pt.flags = 0;
	INIT_LIST_HEAD(&t->maps);
	t->alloc = a;
	t->va = va;
	t->len = len;
	t->owner = get_pid(task_tgid(current));
	t->persistent = persistent;
	t->free_cb = free_cb;
	t->data = data;
	if (persistent)
		kref_get(&a->ref);
	spin_lock(&gs.tlock);
	list_add_tail(&t->node, &gs.tables);
	spin_unlock(&gs.tlock);
	gs.pinned += len;
	atomic_inc(&gs.ntables);
	mutex_unlock(&gs.lock);
	*page_table = &t->pt;
	return 0;

err_free:
	kvfree(t->page_ptrs);
	kvfree(t->page_store);
	kfree(t);
err_unlock:
	mutex_unlock(&gs.lock);
	return ret;
}

static void gs_mapping_free(struct gs_map *gm)
{
	struct nvidia_p2p_dma_mapping *m = &gm->m;
	u32 i;

	for (i = 0; i < m->entries; i++)
		dma_unmap_resource(&m->pci_dev->dev, m->dma_addresses[i], GS_PAGE,
				   DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
	memset(m->dma_addresses, POISON_FREE, m->entries * sizeof(u64));
	kvfree(m->dma_addresses);
	memset(gm, POISON_FREE, sizeof(*gm));
	kfree(gm);
	atomic_dec(&gs.nmappings);
}

/*
 * The table is gone (put, or its callback returned): its remaining DMA
 * mappings with it, as in the driver. Unlinked by the caller (gs.tlock).
 */
static void gs_table_free(struct gs_table *t)
{
	struct gs_map *gm, *tmp;

	lockdep_assert_held(&gs.lock);
	list_for_each_entry_safe(gm, tmp, &t->maps, node)
		gs_mapping_free(gm);
	gs.pinned -= t->len;
	atomic_dec(&gs.ntables);
	if (t->persistent)
		gs_alloc_put(t->alloc);
	put_pid(t->owner);
	memset(t->page_store, POISON_FREE, t->pt.entries * sizeof(*t->page_store));
	kvfree(t->page_ptrs);
	kvfree(t->page_store);
	memset(t, POISON_FREE, sizeof(*t));
	kfree(t);
}

/* the live table @pt of address @va, unlinked; NULL if there is none */
static struct gs_table *gs_table_take(struct nvidia_p2p_page_table *pt, u64 va,
				      bool persistent)
{
	struct gs_table *t;

	spin_lock(&gs.tlock);
	t = gs_table_live(pt);
	if (t && (t->va != va || t->persistent != persistent))
		t = NULL;
	if (t)
		list_del_init(&t->node);
	spin_unlock(&gs.tlock);
	return t;
}

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	if (p2p_token || va_space || !free_callback)
		return -EINVAL;
	return gs_get(virtual_address, length, page_table, free_callback, data, false);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags)
{
	if (!persistent_api)
		return -ENOTSUPP;
	if (flags & ~NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING)
		return -EINVAL;
	return gs_get(virtual_address, length, page_table, NULL, NULL, true);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages_persistent);

/* legacy_race: no wait for a callback running on the table (gs.tlock only) */
static int gs_put_legacy(struct nvidia_p2p_page_table *pt, u64 va)
{
	struct gs_table *t;
	bool running;

	spin_lock(&gs.tlock);
	t = gs_table_live(pt);
	running = t && t->va == va && !t->persistent && t->in_callback;
	if (running)
		t->legacy_put = true;	/* the callback's runner frees it */
	spin_unlock(&gs.tlock);
	if (!running)
		return 1;
	atomic_inc(&gs.legacy_hits);
	pr_warn("legacy race: put_pages of a table whose free callback is running\n");
	return 0;
}

int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	struct gs_table *t;

	if (p2p_token || va_space || !page_table)
		return -EINVAL;
	if (gs.in_callback == current) {
		gs_violation("put_pages called from a free callback\n");
		return -EINVAL;
	}
	if (READ_ONCE(legacy_race) && !gs_put_legacy(page_table, virtual_address))
		return 0;
	mutex_lock(&gs.lock);
	spin_lock(&gs.tlock);
	t = gs_table_live(page_table);
	spin_unlock(&gs.tlock);
	if (t && t->persistent) {
		mutex_unlock(&gs.lock);
		return -EINVAL;
	}
	if (t && t->owner != task_tgid(current)) {
		mutex_unlock(&gs.lock);
		/* the driver finds no table of this process: 0, nothing put */
		gs_violation("put_pages from process %d, pages got by process %d\n",
			     task_tgid_nr(current), pid_nr(t->owner));
		return 0;
	}
	/* already torn down by a racing free callback: 0, as the driver */
	t = gs_table_take(page_table, virtual_address, false);
	if (t)
		gs_table_free(t);
	mutex_unlock(&gs.lock);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags)
{
	struct gs_table *t;

	if (flags || !page_table)
		return -EINVAL;
	mutex_lock(&gs.lock);
	t = gs_table_take(page_table, virtual_address, true);
	if (t)
		gs_table_free(t);
	mutex_unlock(&gs.lock);
	return t ? 0 : -EINVAL;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	struct gs_table *t;

	if (!page_table)
		return -EINVAL;
	if (gs.in_callback != current) {
		gs_violation("free_page_table outside a free callback\n");
		return -EINVAL;
	}
	spin_lock(&gs.tlock);
	t = gs_table_live(page_table);
	if (t && t->in_callback)
		t->freed_by_client = true;
	spin_unlock(&gs.tlock);
	if (!t || !t->in_callback) {
		gs_violation("free_page_table of a table not being called back\n");
		return -EINVAL;
	}
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_page_table);

/* @page_table must be live: the caller holds it until put or until its callback returns */
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct nvidia_p2p_dma_mapping *m;
	struct gs_table *t;
	struct gs_map *gm;
	u32 i, n;
	int ret = -ENOMEM;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	if (gs.in_callback == current) {
		gs_violation("dma_map_pages called from a free callback\n");
		return -EINVAL;
	}
	mutex_lock(&gs.lock);
	spin_lock(&gs.tlock);
	t = gs_table_live(page_table);
	spin_unlock(&gs.tlock);
	if (!t) {
		mutex_unlock(&gs.lock);
		gs_violation("dma_map_pages on a freed page table\n");
		return -EINVAL;
	}
	if (gs_fail())
		goto err_unlock;
	n = t->pt.entries;
	gm = kzalloc(sizeof(*gm), GFP_KERNEL);
	if (!gm)
		goto err_unlock;
	m = &gm->m;
	m->dma_addresses = kvcalloc(n, sizeof(u64), GFP_KERNEL);
	if (!m->dma_addresses)
		goto err_free;
	for (i = 0; i < n; i++) {
		dma_addr_t d = dma_map_resource(&peer->dev, t->page_store[i].physical_address,
						GS_PAGE, DMA_BIDIRECTIONAL,
						DMA_ATTR_SKIP_CPU_SYNC);

		if (dma_mapping_error(&peer->dev, d)) {
			while (i--)
				dma_unmap_resource(&peer->dev, m->dma_addresses[i], GS_PAGE,
						   DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
			ret = -EIO;
			goto err_free;
		}
		m->dma_addresses[i] = d;
	}
	m->version = map_version;
	m->page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	m->entries = n;
	m->pci_dev = peer;
	spin_lock(&gs.tlock);
	list_add_tail(&gm->node, &t->maps);
	spin_unlock(&gs.tlock);
	atomic_inc(&gs.nmappings);
	mutex_unlock(&gs.lock);
	*dma_mapping = m;
	return 0;

err_free:
	kvfree(m->dma_addresses);
	kfree(gm);
err_unlock:
	mutex_unlock(&gs.lock);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct gs_table *t;
	struct gs_map *gm, *found = NULL;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	if (gs.in_callback == current) {
		gs_violation("dma_unmap_pages called from a free callback\n");
		return -EINVAL;
	}
	mutex_lock(&gs.lock);
	spin_lock(&gs.tlock);
	t = gs_table_live(page_table);
	if (t) {
		list_for_each_entry(gm, &t->maps, node) {
			if (&gm->m == dma_mapping) {
				found = gm;
				list_del(&gm->node);
				break;
			}
		}
	}
	spin_unlock(&gs.tlock);
	if (!t) {
		mutex_unlock(&gs.lock);
		/* the driver dereferences the table here: use after free */
		gs_violation("dma_unmap_pages on a freed page table\n");
		return -EINVAL;
	}
	/* a mapping not (any more) on the table: 0, as the driver */
	if (found) {
		if (found->m.pci_dev != peer)
			gs_violation("dma_unmap_pages for another peer than mapped\n");
		gs_mapping_free(found);
	}
	mutex_unlock(&gs.lock);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_unmap_pages);

/* a no-op in current drivers: the mappings go when the callback returns */
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	if (!dma_mapping)
		return -EINVAL;
	if (gs.in_callback != current)
		gs_violation("free_dma_mapping outside a free callback\n");
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_dma_mapping);

/* the next callback-mode table of @a whose callback has not run, marked running */
static struct gs_table *gs_next_callback(struct gs_alloc *a)
{
	struct gs_table *t;

	spin_lock(&gs.tlock);
	list_for_each_entry(t, &gs.tables, node) {
		if (t->alloc == a && !t->persistent && !t->in_callback) {
			t->in_callback = true;
			spin_unlock(&gs.tlock);
			return t;
		}
	}
	spin_unlock(&gs.tlock);
	return NULL;
}

/* cuMemFree of @a: run the free callbacks of its callback-mode tables */
void gs_p2p_free_callbacks(struct gs_alloc *a)
{
	struct gs_table *t;
	bool freed;

	lockdep_assert_held(&gs.lock);
	while ((t = gs_next_callback(a))) {
		gs_delay(READ_ONCE(cb_delay_ms));
		gs.in_callback = current;
		t->free_cb(t->data);
		gs.in_callback = NULL;
		atomic_inc(&gs.ncallbacks);
		spin_lock(&gs.tlock);
		freed = t->freed_by_client || t->legacy_put;
		list_del_init(&t->node);
		spin_unlock(&gs.tlock);
		if (!freed)
			gs_violation("free callback did not call free_page_table\n");
		/* the table and its mappings die now: any later use is a bug */
		gs_table_free(t);
	}
}

static void gs_selftest_cb(void *data)
{
	struct nvidia_p2p_page_table *pt = data;

	nvidia_p2p_free_page_table(pt);
}

#define GS_EXPECT(call, want)							\
	do {									\
		int __r = (call), __w = (want);					\
		if (__r != __w) {						\
			pr_warn("selftest: %s = %d, want %d\n", #call, __r, __w);	\
			bad++;							\
		}								\
	} while (0)

/* the documented errors of the API, called as a careless client would */
int gs_selftest(u64 va)
{
	struct nvidia_p2p_page_table *pt = NULL, *pt2 = NULL;
	struct nvidia_p2p_dma_mapping *m = NULL;
	int bad = 0;

	GS_EXPECT(nvidia_p2p_get_pages(0, 0, va + 4096, GS_PAGE, &pt, gs_selftest_cb, NULL),
		  -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages(0, 0, va, 4096, &pt, gs_selftest_cb, NULL), -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages(0, 0, va, 0, &pt, gs_selftest_cb, NULL), -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages(0, 0, va, GS_PAGE, &pt, NULL, NULL), -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages(1, 0, va, GS_PAGE, &pt, gs_selftest_cb, NULL), -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages(0, 0, va, GS_PAGE, NULL, gs_selftest_cb, NULL), -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages(0, 0, 0x1000000, GS_PAGE, &pt, gs_selftest_cb, NULL),
		  -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages_persistent(va + 4096, GS_PAGE, &pt, 0), -EINVAL);
	GS_EXPECT(nvidia_p2p_get_pages_persistent(va, GS_PAGE, &pt, 0x80), -EINVAL);
	GS_EXPECT(nvidia_p2p_put_pages_persistent(va, NULL, 0), -EINVAL);
	GS_EXPECT(nvidia_p2p_free_page_table(NULL), -EINVAL);
	GS_EXPECT(nvidia_p2p_dma_map_pages(NULL, NULL, &m), -EINVAL);
	GS_EXPECT(nvidia_p2p_free_dma_mapping(NULL), -EINVAL);

	/* a persistent table is not put with put_pages, nor twice */
	GS_EXPECT(nvidia_p2p_get_pages_persistent(va, GS_PAGE, &pt, 0), 0);
	if (pt) {
		GS_EXPECT(pt->version == pt_version && pt->entries == 1 &&
			  pt->page_size == NVIDIA_P2P_PAGE_SIZE_64KB, true);
		GS_EXPECT(nvidia_p2p_put_pages(0, 0, va, pt), -EINVAL);
		GS_EXPECT(nvidia_p2p_put_pages_persistent(va, pt, 1), -EINVAL);
		GS_EXPECT(nvidia_p2p_put_pages_persistent(va, pt, 0), 0);
		GS_EXPECT(nvidia_p2p_put_pages_persistent(va, pt, 0), -EINVAL);
	}
	/* a callback-mode table put twice: the second finds nothing (0) */
	GS_EXPECT(nvidia_p2p_get_pages(0, 0, va, GS_PAGE, &pt2, gs_selftest_cb, NULL), 0);
	if (pt2) {
		GS_EXPECT(nvidia_p2p_put_pages_persistent(va, pt2, 0), -EINVAL);
		GS_EXPECT(nvidia_p2p_put_pages(0, 0, va, pt2), 0);
		GS_EXPECT(nvidia_p2p_put_pages(0, 0, va, pt2), 0);
	}
	GS_EXPECT(atomic_read(&gs.ntables), 0);
	return bad;
}
