// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim: dma-bufs of the stand-in's memory, static (cached mappings) or
 * dynamic (pin/unpin, map under the resv lock) as the dmabuf_dynamic parameter
 * says; revoked by move_notify when the memory is freed.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/fcntl.h>
#include <linux/module.h>
#include <linux/slab.h>

#include "gpusim.h"

static bool dmabuf_dynamic = true;
module_param(dmabuf_dynamic, bool, 0644);
MODULE_PARM_DESC(dmabuf_dynamic,
		 "export dynamic dma-bufs (pin/unpin, map under the resv lock), else cached static ones");

static unsigned int attach_delay_ms;
module_param(attach_delay_ms, uint, 0644);
MODULE_PARM_DESC(attach_delay_ms, "sleep in each attach, no lock held (race tests)");

static int gs_buf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	gs_delay(READ_ONCE(attach_delay_ms));
	if (gs_fail())
		return -ENOMEM;
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
	if (gs_fail())
		return ERR_PTR(-ENOMEM);
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

int gs_export(struct gs_file *f, struct gpusim_export *e)
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

/* cuMemFree of @a: its dma-bufs are revoked (move_notify), mapping fails after */
void gs_bufs_revoke(struct gs_alloc *a)
{
	struct gs_buf *b;

	lockdep_assert_held(&gs.lock);
	list_for_each_entry(b, &a->bufs, node) {
		dma_resv_lock(b->dmabuf->resv, NULL);
		b->revoked = true;
		dma_buf_move_notify(b->dmabuf);
		dma_resv_unlock(b->dmabuf->resv);
	}
}
