// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim: a test-only GPU stand-in. It exports the documented nv-p2p API
 * (persistent and free-callback modes, with the documented errors) and exports
 * its memory as dma-bufs, backed by the BAR2 of QEMU's ivshmem-plain device
 * (1af4:1110). User space allocates and frees "GPU memory" through /dev/gpusim
 * (see gpusim_uapi.h); freeing runs the free callbacks synchronously with the
 * driver lock held, as the NVIDIA driver does.
 *
 * Protocol violations by a caller (put_pages from within a free callback, a
 * callback that did not call free_page_table, unbalanced mappings) are logged
 * as "gpusim: VIOLATION" lines, which the test harness looks for.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/debugfs.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "../nvp2p.h"
#include "gpusim_uapi.h"

static unsigned int pt_version = NVIDIA_P2P_PAGE_TABLE_VERSION;
module_param(pt_version, uint, 0644);
MODULE_PARM_DESC(pt_version, "page table version handed out (tests of version checks)");

static unsigned int map_version = NVIDIA_P2P_DMA_MAPPING_VERSION;
module_param(map_version, uint, 0644);
MODULE_PARM_DESC(map_version, "DMA mapping version handed out (tests of version checks)");

static ulong pin_limit;
module_param(pin_limit, ulong, 0644);
MODULE_PARM_DESC(pin_limit, "bytes of BAR1 space for page tables (0: whole BAR); more: -ENOMEM");

static bool dmabuf_dynamic = true;
module_param(dmabuf_dynamic, bool, 0644);
MODULE_PARM_DESC(dmabuf_dynamic,
		 "export dynamic dma-bufs (pin/unpin, map under the resv lock), else cached static ones");

static bool persistent_api = true;
module_param(persistent_api, bool, 0644);
MODULE_PARM_DESC(persistent_api, "offer nvidia_p2p_get_pages_persistent (else -ENOTSUPP)");

#define GS_PAGE GPUSIM_PAGE
#define GS_PAGE_SHIFT 16

struct gs_file;

struct gs_alloc {
	struct kref ref;	/* owner list + persistent tables + dma-bufs */
	struct list_head node;	/* in gs_file.allocs while not freed */
	struct mm_struct *mm;	/* allocating process (mmgrab) */
	u64 va;
	u64 len;
	u64 bar_off;
	bool freed;
	struct list_head bufs;	/* gs_buf.node */
};

struct gs_table {
	struct list_head node;	/* gs.tables */
	struct gs_alloc *alloc;
	struct nvidia_p2p_page_table pt;
	struct nvidia_p2p_page *page_store;
	struct nvidia_p2p_page **page_ptrs;
	u64 va;
	u64 len;
	bool persistent;
	bool freed_by_client;
	void (*free_cb)(void *data);
	void *data;
};

struct gs_buf {
	struct list_head node;	/* gs_alloc.bufs */
	struct gs_alloc *alloc;
	struct dma_buf *dmabuf;
	u64 bar_off;
	u64 len;
	bool revoked;		/* under the dma-buf's resv lock */
};

struct gs_file {
	struct list_head allocs;
};

static struct {
	struct pci_dev *pdev;
	phys_addr_t bar_phys;
	u64 bar_size;
	unsigned long *map;	/* one bit per 64 KiB */
	unsigned long nbits;
	struct mutex lock;	/* everything below and all lists */
	struct list_head tables;
	u64 used;
	u64 pinned;
	struct task_struct *in_callback;
	atomic_t ntables;
	atomic_t nmappings;
	atomic_t nbufs;
	atomic_t nbufmaps;
	atomic_t ncallbacks;
	struct dentry *dbg;
} gs;

static const u8 gs_uuid[NVIDIA_P2P_GPU_UUID_LEN] = {
	0x67, 0x70, 0x75, 0x73, 0x69, 0x6d, 0x2d, 0x75,
	0x75, 0x69, 0x64, 0x2d, 0x30, 0x30, 0x30, 0x31,
};

static void gs_alloc_release(struct kref *ref)
{
	struct gs_alloc *a = container_of(ref, struct gs_alloc, ref);

	lockdep_assert_held(&gs.lock);
	bitmap_clear(gs.map, a->bar_off >> GS_PAGE_SHIFT, a->len >> GS_PAGE_SHIFT);
	gs.used -= a->len;
	mmdrop(a->mm);
	kfree(a);
}

static void gs_alloc_put(struct gs_alloc *a)
{
	kref_put(&a->ref, gs_alloc_release);
}

/* the live (not freed) allocation of @mm that holds [va, va + len) */
static struct gs_alloc *gs_find(struct gs_file *f, u64 va, u64 len)
{
	struct gs_alloc *a;

	lockdep_assert_held(&gs.lock);
	list_for_each_entry(a, &f->allocs, node)
		if (va >= a->va && len <= a->len && va - a->va <= a->len - len)
			return a;
	return NULL;
}

/* all open files, to find allocations by address for nv-p2p calls */
static LIST_HEAD(gs_files_list);
struct gs_file_node {
	struct list_head node;
	struct gs_file *f;
};

static struct gs_alloc *gs_find_any(u64 va, u64 len)
{
	struct gs_file_node *n;
	struct gs_alloc *a;

	list_for_each_entry(n, &gs_files_list, node) {
		a = gs_find(n->f, va, len);
		if (a)
			return a;
	}
	return NULL;
}

/* ---- nv-p2p API ---- */

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

/* ---- dma-buf export ---- */

static int gs_buf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	/* BAR memory has no struct pages: only peer-to-peer capable importers */
	return attach->peer2peer ? 0 : -EOPNOTSUPP;
}

/* BAR memory never moves: pinning is a no-op; revocation is by move_notify */
static int gs_buf_pin(struct dma_buf_attachment *attach)
{
	dma_resv_assert_held(attach->dmabuf->resv);
	return 0;
}

static void gs_buf_unpin(struct dma_buf_attachment *attach)
{
	dma_resv_assert_held(attach->dmabuf->resv);
}

static struct sg_table *gs_buf_map(struct dma_buf_attachment *attach,
				   enum dma_data_direction dir)
{
	struct gs_buf *b = attach->dmabuf->priv;
	u32 n = b->len >> GS_PAGE_SHIFT, i;
	struct scatterlist *sg;
	struct sg_table *sgt;
	int ret;

	if (dma_buf_is_dynamic(attach->dmabuf))
		dma_resv_assert_held(attach->dmabuf->resv);
	if (b->revoked)
		return ERR_PTR(-ENODEV);
	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	ret = sg_alloc_table(sgt, n, GFP_KERNEL);
	if (ret) {
		kfree(sgt);
		return ERR_PTR(ret);
	}
	for_each_sgtable_sg(sgt, sg, i) {
		phys_addr_t p = gs.bar_phys + b->bar_off + ((u64)i << GS_PAGE_SHIFT);
		dma_addr_t d = dma_map_resource(attach->dev, p, GS_PAGE, dir,
						DMA_ATTR_SKIP_CPU_SYNC);

		if (dma_mapping_error(attach->dev, d)) {
			struct scatterlist *s2;
			u32 j;

			for_each_sgtable_sg(sgt, s2, j) {
				if (j >= i)
					break;
				dma_unmap_resource(attach->dev, sg_dma_address(s2), GS_PAGE,
						   dir, DMA_ATTR_SKIP_CPU_SYNC);
			}
			sg_free_table(sgt);
			kfree(sgt);
			return ERR_PTR(-EIO);
		}
		sg_dma_address(sg) = d;
		sg_dma_len(sg) = GS_PAGE;
	}
	atomic_inc(&gs.nbufmaps);
	return sgt;
}

static void gs_buf_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
			 enum dma_data_direction dir)
{
	struct scatterlist *sg;
	u32 i;

	for_each_sgtable_sg(sgt, sg, i)
		dma_unmap_resource(attach->dev, sg_dma_address(sg), sg_dma_len(sg), dir,
				   DMA_ATTR_SKIP_CPU_SYNC);
	sg_free_table(sgt);
	kfree(sgt);
	atomic_dec(&gs.nbufmaps);
}

static void gs_buf_release(struct dma_buf *dmabuf)
{
	struct gs_buf *b = dmabuf->priv;

	mutex_lock(&gs.lock);
	list_del(&b->node);
	gs_alloc_put(b->alloc);
	mutex_unlock(&gs.lock);
	atomic_dec(&gs.nbufs);
	kfree(b);
}

static const struct dma_buf_ops gs_buf_ops = {
	.attach = gs_buf_attach,
	.map_dma_buf = gs_buf_map,
	.unmap_dma_buf = gs_buf_unmap,
	.release = gs_buf_release,
};

static const struct dma_buf_ops gs_buf_dynamic_ops = {
	.attach = gs_buf_attach,
	.pin = gs_buf_pin,
	.unpin = gs_buf_unpin,
	.map_dma_buf = gs_buf_map,
	.unmap_dma_buf = gs_buf_unmap,
	.release = gs_buf_release,
};

static int gs_export(struct gs_file *f, struct gpusim_export *e)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	struct dma_buf *dmabuf;
	struct gs_alloc *a;
	struct gs_buf *b;
	int fd;

	if (!e->len || (e->va | e->len) & (GS_PAGE - 1) || e->pad)
		return -EINVAL;
	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return -ENOMEM;
	mutex_lock(&gs.lock);
	a = gs_find(f, e->va, e->len);
	if (!a) {
		mutex_unlock(&gs.lock);
		kfree(b);
		return -EINVAL;
	}
	b->alloc = a;
	b->bar_off = a->bar_off + (e->va - a->va);
	b->len = e->len;
	info.ops = dmabuf_dynamic ? &gs_buf_dynamic_ops : &gs_buf_ops;
	info.size = e->len;
	info.flags = O_RDWR;
	info.priv = b;
	dmabuf = dma_buf_export(&info);
	if (IS_ERR(dmabuf)) {
		mutex_unlock(&gs.lock);
		kfree(b);
		return PTR_ERR(dmabuf);
	}
	b->dmabuf = dmabuf;
	kref_get(&a->ref);
	list_add_tail(&b->node, &a->bufs);
	atomic_inc(&gs.nbufs);
	mutex_unlock(&gs.lock);
	fd = dma_buf_fd(dmabuf, O_CLOEXEC);
	if (fd < 0) {
		dma_buf_put(dmabuf);
		return fd;
	}
	e->fd = fd;
	return 0;
}

/* ---- allocations ---- */

static int gs_alloc(struct gs_file *f, struct gpusim_alloc *req)
{
	struct gs_alloc *a;
	unsigned long n, bit;

	if (!req->size || req->size > gs.bar_size)
		return -EINVAL;
	n = DIV_ROUND_UP(req->size, GS_PAGE);
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	mutex_lock(&gs.lock);
	bit = bitmap_find_next_zero_area(gs.map, gs.nbits, 0, n, 0);
	if (bit >= gs.nbits) {
		mutex_unlock(&gs.lock);
		kfree(a);
		return -ENOMEM;
	}
	bitmap_set(gs.map, bit, n);
	kref_init(&a->ref);
	INIT_LIST_HEAD(&a->bufs);
	a->bar_off = (u64)bit << GS_PAGE_SHIFT;
	a->len = (u64)n << GS_PAGE_SHIFT;
	a->va = GPUSIM_VA_BASE + a->bar_off;
	a->mm = current->mm;
	mmgrab(a->mm);
	gs.used += a->len;
	list_add_tail(&a->node, &f->allocs);
	mutex_unlock(&gs.lock);
	req->va = a->va;
	req->bar_off = a->bar_off;
	return 0;
}

/* cuMemFree: run the free callbacks, revoke dma-bufs; persistent tables keep the memory */
static void gs_free_locked(struct gs_alloc *a)
{
	struct gs_table *t, *tmp;
	struct gs_buf *b;

	lockdep_assert_held(&gs.lock);
	a->freed = true;
	list_del_init(&a->node);
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
	list_for_each_entry(b, &a->bufs, node) {
		dma_resv_lock(b->dmabuf->resv, NULL);
		b->revoked = true;
		dma_buf_move_notify(b->dmabuf);
		dma_resv_unlock(b->dmabuf->resv);
	}
	gs_alloc_put(a);
}

static int gs_free(struct gs_file *f, u64 va)
{
	struct gs_alloc *a;

	mutex_lock(&gs.lock);
	list_for_each_entry(a, &f->allocs, node) {
		if (a->va == va) {
			gs_free_locked(a);
			mutex_unlock(&gs.lock);
			return 0;
		}
	}
	mutex_unlock(&gs.lock);
	return -EINVAL;
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
static int gs_selftest(u64 va)
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

static int gs_open(struct inode *inode, struct file *file)
{
	struct gs_file_node *n;
	struct gs_file *f;

	if (!gs.pdev)
		return -ENODEV;
	f = kzalloc(sizeof(*f), GFP_KERNEL);
	n = kzalloc(sizeof(*n), GFP_KERNEL);
	if (!f || !n) {
		kfree(f);
		kfree(n);
		return -ENOMEM;
	}
	INIT_LIST_HEAD(&f->allocs);
	n->f = f;
	mutex_lock(&gs.lock);
	list_add_tail(&n->node, &gs_files_list);
	mutex_unlock(&gs.lock);
	file->private_data = n;
	return 0;
}

static int gs_release(struct inode *inode, struct file *file)
{
	struct gs_file_node *n = file->private_data;
	struct gs_alloc *a, *tmp;

	mutex_lock(&gs.lock);
	list_for_each_entry_safe(a, tmp, &n->f->allocs, node)
		gs_free_locked(a);
	list_del(&n->node);
	mutex_unlock(&gs.lock);
	kfree(n->f);
	kfree(n);
	return 0;
}

static long gs_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct gs_file_node *n = file->private_data;
	void __user *uarg = (void __user *)arg;
	union {
		struct gpusim_info info;
		struct gpusim_alloc alloc;
		struct gpusim_export exp;
		u64 va;
	} u;
	int ret;

	switch (cmd) {
	case GPUSIM_IOC_INFO:
		memset(&u.info, 0, sizeof(u.info));
		mutex_lock(&gs.lock);
		u.info.bar_phys = gs.bar_phys;
		u.info.bar_size = gs.bar_size;
		u.info.used = gs.used;
		u.info.pinned = gs.pinned;
		mutex_unlock(&gs.lock);
		u.info.tables = atomic_read(&gs.ntables);
		u.info.mappings = atomic_read(&gs.nmappings);
		u.info.bufs = atomic_read(&gs.nbufs);
		u.info.bufmaps = atomic_read(&gs.nbufmaps);
		u.info.callbacks = atomic_read(&gs.ncallbacks);
		return copy_to_user(uarg, &u.info, sizeof(u.info)) ? -EFAULT : 0;
	case GPUSIM_IOC_ALLOC:
		if (copy_from_user(&u.alloc, uarg, sizeof(u.alloc)))
			return -EFAULT;
		ret = gs_alloc(n->f, &u.alloc);
		if (!ret && copy_to_user(uarg, &u.alloc, sizeof(u.alloc)))
			ret = -EFAULT;	/* the allocation stays until close */
		return ret;
	case GPUSIM_IOC_FREE:
		if (copy_from_user(&u.va, uarg, sizeof(u.va)))
			return -EFAULT;
		return gs_free(n->f, u.va);
	case GPUSIM_IOC_SELFTEST:
		if (copy_from_user(&u.va, uarg, sizeof(u.va)))
			return -EFAULT;
		return gs_selftest(u.va);
	case GPUSIM_IOC_EXPORT:
		if (copy_from_user(&u.exp, uarg, sizeof(u.exp)))
			return -EFAULT;
		ret = gs_export(n->f, &u.exp);
		if (!ret && copy_to_user(uarg, &u.exp, sizeof(u.exp)))
			ret = -EFAULT;
		return ret;
	}
	return -ENOTTY;
}

static int gs_mmap(struct file *file, struct vm_area_struct *vma)
{
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;

	if (off >= gs.bar_size || len > gs.bar_size - off)
		return -EINVAL;
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	vma->vm_flags |= VM_IO | VM_DONTEXPAND | VM_DONTDUMP;
	return io_remap_pfn_range(vma, vma->vm_start, (gs.bar_phys + off) >> PAGE_SHIFT,
				  len, vma->vm_page_prot);
}

static const struct file_operations gs_fops = {
	.owner = THIS_MODULE,
	.open = gs_open,
	.release = gs_release,
	.unlocked_ioctl = gs_ioctl,
	.mmap = gs_mmap,
};

static struct miscdevice gs_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "gpusim",
	.fops = &gs_fops,
	.mode = 0600,
};

static int gs_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret;

	if (gs.pdev)
		return -EBUSY;
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_iomap_regions(pdev, BIT(2), KBUILD_MODNAME);
	if (ret)
		return ret;
	gs.bar_phys = pci_resource_start(pdev, 2);
	gs.bar_size = pci_resource_len(pdev, 2) & ~(GS_PAGE - 1);
	gs.nbits = gs.bar_size >> GS_PAGE_SHIFT;
	if (!gs.nbits)
		return -ENODEV;
	gs.map = devm_bitmap_zalloc(&pdev->dev, gs.nbits, GFP_KERNEL);
	if (!gs.map)
		return -ENOMEM;
	gs.pdev = pdev;
	ret = misc_register(&gs_misc);
	if (ret) {
		gs.pdev = NULL;
		return ret;
	}
	dev_info(&pdev->dev, "GPU stand-in: BAR2 %pa, %llu MiB\n", &gs.bar_phys,
		 gs.bar_size >> 20);
	return 0;
}

static void gs_remove(struct pci_dev *pdev)
{
	misc_deregister(&gs_misc);
	if (atomic_read(&gs.ntables) || atomic_read(&gs.nmappings) || gs.used)
		pr_err("VIOLATION: removed with %d tables, %d mappings, %llu bytes used\n",
		       atomic_read(&gs.ntables), atomic_read(&gs.nmappings), gs.used);
	gs.pdev = NULL;
}

static const struct pci_device_id gs_ids[] = {
	{ PCI_DEVICE(0x1af4, 0x1110) },
	{ }
};
MODULE_DEVICE_TABLE(pci, gs_ids);

static struct pci_driver gs_driver = {
	.name = "gpusim",
	.id_table = gs_ids,
	.probe = gs_probe,
	.remove = gs_remove,
};

static int gs_stat_show(struct seq_file *s, void *unused)
{
	mutex_lock(&gs.lock);
	seq_printf(s, "used %llu\npinned %llu\n", gs.used, gs.pinned);
	mutex_unlock(&gs.lock);
	seq_printf(s, "tables %d\nmappings %d\nbufs %d\nbufmaps %d\ncallbacks %d\n",
		   atomic_read(&gs.ntables), atomic_read(&gs.nmappings),
		   atomic_read(&gs.nbufs), atomic_read(&gs.nbufmaps),
		   atomic_read(&gs.ncallbacks));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gs_stat);

static int __init gs_init(void)
{
	mutex_init(&gs.lock);
	INIT_LIST_HEAD(&gs.tables);
	gs.dbg = debugfs_create_dir("gpusim", NULL);
	debugfs_create_file("stats", 0400, gs.dbg, NULL, &gs_stat_fops);
	return pci_register_driver(&gs_driver);
}

static void __exit gs_exit(void)
{
	pci_unregister_driver(&gs_driver);
	debugfs_remove_recursive(gs.dbg);
}

module_init(gs_init);
module_exit(gs_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("peerdma test: GPU stand-in exporting nv-p2p and dma-bufs over ivshmem BAR2");
MODULE_IMPORT_NS(DMA_BUF);
