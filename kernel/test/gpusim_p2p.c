// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim: the nv-p2p API (nvp2p.h) over the stand-in's allocations, with the
 * documented errors and version fields, and a selftest calling it as a
 * careless client would.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/module.h>
#include <linux/pci.h>
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

static const u8 gs_uuid[NVIDIA_P2P_GPU_UUID_LEN] = {
	0x67, 0x70, 0x75, 0x73, 0x69, 0x6d, 0x2d, 0x75,
	0x75, 0x69, 0x64, 0x2d, 0x30, 0x30, 0x30, 0x31,
};

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
	t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return -ENOMEM;
	t->page_store = kvcalloc(n, sizeof(*t->page_store), GFP_KERNEL);
	t->page_ptrs = kvcalloc(n, sizeof(*t->page_ptrs), GFP_KERNEL);
	if (!t->page_store || !t->page_ptrs) {
		ret = -ENOMEM;
		goto err_free;
	}

	mutex_lock(&gs.lock);
	a = gs_find_any(va, len);
	if (!a || a->mm != current->mm) {
		ret = -EINVAL;
		goto err_unlock;
	}
	if (gs.pinned + len > limit) {
		ret = -ENOMEM;
		goto err_unlock;
	}
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
	t->alloc = a;
	t->va = va;
	t->len = len;
	t->persistent = persistent;
	t->free_cb = free_cb;
	t->data = data;
	if (persistent)
		kref_get(&a->ref);
	list_add_tail(&t->node, &gs.tables);
	gs.pinned += len;
	atomic_inc(&gs.ntables);
	mutex_unlock(&gs.lock);
	*page_table = &t->pt;
	return 0;

err_unlock:
	mutex_unlock(&gs.lock);
err_free:
	kvfree(t->page_ptrs);
	kvfree(t->page_store);
	kfree(t);
	return ret;
}

static void gs_table_free(struct gs_table *t)
{
	lockdep_assert_held(&gs.lock);
	list_del(&t->node);
	gs.pinned -= t->len;
	atomic_dec(&gs.ntables);
	if (t->persistent)
		gs_alloc_put(t->alloc);
	kvfree(t->page_ptrs);
	kvfree(t->page_store);
	kfree(t);
}

static struct gs_table *gs_table_find(struct nvidia_p2p_page_table *pt, u64 va)
{
	struct gs_table *t;

	lockdep_assert_held(&gs.lock);
	list_for_each_entry(t, &gs.tables, node)
		if (&t->pt == pt && t->va == va)
			return t;
	return NULL;
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

int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	struct gs_table *t;

	if (p2p_token || va_space || !page_table)
		return -EINVAL;
	if (gs.in_callback == current) {
		pr_err("VIOLATION: put_pages called from a free callback\n");
		return -EINVAL;
	}
	mutex_lock(&gs.lock);
	t = gs_table_find(page_table, virtual_address);
	if (t && t->persistent) {
		mutex_unlock(&gs.lock);
		return -EINVAL;
	}
	/* already torn down by a racing free callback: fine */
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
	int ret = 0;

	if (flags || !page_table)
		return -EINVAL;
	mutex_lock(&gs.lock);
	t = gs_table_find(page_table, virtual_address);
	if (t && t->persistent)
		gs_table_free(t);
	else
		ret = -EINVAL;
	mutex_unlock(&gs.lock);
	return ret;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	struct gs_table *t = container_of(page_table, struct gs_table, pt);

	if (!page_table)
		return -EINVAL;
	if (gs.in_callback != current) {
		pr_err("VIOLATION: free_page_table outside a free callback\n");
		return -EINVAL;
	}
	t->freed_by_client = true;
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_page_table);

/*
 * The caller guarantees @page_table is valid (it is until put_pages or until a
 * free callback returns), so no driver lock is taken here.
 */
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct nvidia_p2p_dma_mapping *m;
	u32 i;

	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->dma_addresses = kvcalloc(page_table->entries, sizeof(u64), GFP_KERNEL);
	if (!m->dma_addresses) {
		kfree(m);
		return -ENOMEM;
	}
	for (i = 0; i < page_table->entries; i++) {
		dma_addr_t d = dma_map_resource(&peer->dev,
						page_table->pages[i]->physical_address,
						GS_PAGE, DMA_BIDIRECTIONAL,
						DMA_ATTR_SKIP_CPU_SYNC);

		if (dma_mapping_error(&peer->dev, d)) {
			while (i--)
				dma_unmap_resource(&peer->dev, m->dma_addresses[i], GS_PAGE,
						   DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
			kvfree(m->dma_addresses);
			kfree(m);
			return -EIO;
		}
		m->dma_addresses[i] = d;
	}
	m->version = map_version;
	m->page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	m->entries = page_table->entries;
	m->pci_dev = peer;
	atomic_inc(&gs.nmappings);
	*dma_mapping = m;
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_map_pages);

static void gs_mapping_free(struct nvidia_p2p_dma_mapping *m)
{
	u32 i;

	for (i = 0; i < m->entries; i++)
		dma_unmap_resource(&m->pci_dev->dev, m->dma_addresses[i], GS_PAGE,
				   DMA_BIDIRECTIONAL, DMA_ATTR_SKIP_CPU_SYNC);
	kvfree(m->dma_addresses);
	kfree(m);
	atomic_dec(&gs.nmappings);
}

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	if (!peer || !page_table || !dma_mapping || dma_mapping->pci_dev != peer)
		return -EINVAL;
	if (gs.in_callback == current) {
		pr_err("VIOLATION: dma_unmap_pages called from a free callback\n");
		return -EINVAL;
	}
	gs_mapping_free(dma_mapping);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_dma_unmap_pages);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	if (!dma_mapping)
		return -EINVAL;
	gs_mapping_free(dma_mapping);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_dma_mapping);

/* cuMemFree of @a: run the free callbacks of its callback-mode tables */
void gs_p2p_free_callbacks(struct gs_alloc *a)
{
	struct gs_table *t, *tmp;

	lockdep_assert_held(&gs.lock);
	list_for_each_entry_safe(t, tmp, &gs.tables, node) {
		if (t->alloc != a || t->persistent)
			continue;
		gs.in_callback = current;
		t->free_cb(t->data);
		gs.in_callback = NULL;
		atomic_inc(&gs.ncallbacks);
		if (!t->freed_by_client)
			pr_err("VIOLATION: free callback did not call free_page_table\n");
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
