// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma dma-buf import provider: dynamic attachment with peer-to-peer
 * allowed; the exporter's move_notify (called with the dma_resv lock held)
 * revokes the handle. The pin's own attachment is made for the peerdma
 * device (direct mapping: CPU physical addresses, for GET_PAGES); each client
 * gets its own attachment for its device.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-buf.h>
#include <linux/dma-resv.h>
#include <linux/scatterlist.h>
#include <linux/sizes.h>
#include <linux/slab.h>

#include "peerdma.h"

/* dma_resv lock held, or the attachment never published */
static void pdma_buf_unmap_att(struct pdma_buf_att *b)
{
	if (b->sgt)
		dma_buf_unmap_attachment(b->attach, b->sgt, DMA_BIDIRECTIONAL);
	b->sgt = NULL;
}

/* unmapped, dma_resv lock not held: detach (if attached) and drop the reference */
static void pdma_buf_put_att(struct pdma_buf_att *b)
{
	if (b->attach)
		dma_buf_detach(b->dmabuf, b->attach);
	if (b->dmabuf)
		dma_buf_put(b->dmabuf);
	b->attach = NULL;
	b->dmabuf = NULL;
}

/* the exporter moves or revokes the buffer (dma_resv lock held) */
static void pdma_buf_revoke(struct pdma_pin *pin, struct dma_buf *dmabuf)
{
	dma_resv_assert_held(dmabuf->resv);
	if (atomic_read(&pin->state) == PDMA_CREATING) {
		pin->buf.moved = true;	/* the creator checks it under the lock */
		return;
	}
	if (pdma_pin_revoke_begin(pin)) {
		pdma_buf_unmap_att(&pin->buf);
		pdma_pin_revoke_end(pin, PEERDMA_EVENT_DMABUF_MOVE);
	}
}

static void pdma_buf_move_notify(struct dma_buf_attachment *attach)
{
	pdma_buf_revoke(attach->importer_priv, attach->dmabuf);
}

static const struct dma_buf_attach_ops pdma_buf_attach_ops = {
	.allow_peer2peer = true,
	.move_notify = pdma_buf_move_notify,
};

/*
 * A client's attachment: the exporter may notify it before the pin's own,
 * and the client's mapping must not outlive the notification either.
 */
static void pdma_buf_client_move_notify(struct dma_buf_attachment *attach)
{
	struct peerdma_client *c = attach->importer_priv;

	/* a dead client's attachment waits for its deferred free: the pin may be gone */
	if (!READ_ONCE(c->dead))
		pdma_buf_revoke(c->pin, attach->dmabuf);
}

static const struct dma_buf_attach_ops pdma_buf_client_attach_ops = {
	.allow_peer2peer = true,
	.move_notify = pdma_buf_client_move_notify,
};

/* I/O address of byte @off of the buffer in @sgt, and how far it runs on */
static int pdma_sg_addr(struct sg_table *sgt, u64 off, dma_addr_t *addr, u64 *run)
{
	struct scatterlist *sg;
	u64 pos = 0;
	u32 i;

	for_each_sgtable_dma_sg(sgt, sg, i) {
		u64 l = sg_dma_len(sg);

		if (off < pos + l) {
			*addr = sg_dma_address(sg) + (off - pos);
			*run = pos + l - off;
			return 0;
		}
		pos += l;
	}
	return -ERANGE;
}

/* entries of @shift bytes for [pin->addr, + pin->len): each must be contiguous */
static int pdma_sg_fill(struct pdma_pin *pin, struct sg_table *sgt, u32 shift,
			u64 *phys, struct peerdma_client *c)
{
	dma_addr_t a;
	u64 run;
	u32 i, n = pin->len >> shift;
	int ret;

	for (i = 0; i < n; i++) {
		ret = pdma_sg_addr(sgt, pin->addr + ((u64)i << shift), &a, &run);
		if (ret)
			return ret;
		if (run < (1ULL << shift))
			return -EINVAL;
		if (phys)
			phys[i] = a;
		else
			pdma_client_set_addr(c, i, a);
	}
	return 0;
}

static bool pdma_sg_aligned(struct sg_table *sgt, u64 align)
{
	struct scatterlist *sg;
	u32 i;

	for_each_sgtable_dma_sg(sgt, sg, i)
		if ((sg_dma_address(sg) | sg_dma_len(sg)) & (align - 1))
			return false;
	return true;
}

static int pdma_buf_pin(struct pdma_pin *pin, int fd)
{
	struct dma_buf_attachment *attach;
	struct dma_buf *dmabuf;
	struct sg_table *sgt;
	u32 shift = PAGE_SHIFT;
	int ret;

	dmabuf = dma_buf_get(fd);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);
	pin->buf.dmabuf = dmabuf;
	if (pin->addr >= dmabuf->size || pin->len > dmabuf->size - pin->addr) {
		ret = -EINVAL;
		goto err_put;
	}
	attach = dma_buf_dynamic_attach(dmabuf, pdma_dev, &pdma_buf_attach_ops, pin);
	if (IS_ERR(attach)) {
		ret = PTR_ERR(attach);
		goto err_put;
	}
	pin->buf.attach = attach;

	dma_resv_lock(dmabuf->resv, NULL);
	if (pin->buf.moved) {
		ret = -ENODEV;
		goto err_unlock;
	}
	sgt = dma_buf_map_attachment(attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto err_unlock;
	}
	pin->buf.sgt = sgt;
	if (pdma_sg_aligned(sgt, SZ_64K) && IS_ALIGNED(pin->addr | pin->len, SZ_64K))
		shift = 16;
	pin->page_shift = shift;
	pin->npages = pin->len >> shift;
	pin->phys = kvcalloc(pin->npages, sizeof(u64), GFP_KERNEL);
	ret = pin->phys ? pdma_sg_fill(pin, sgt, shift, pin->phys, NULL) : -ENOMEM;
	if (ret) {
		pdma_buf_unmap_att(&pin->buf);
		goto err_unlock;
	}
	pdma_pin_pages_held(pin);
	atomic_set(&pin->state, PDMA_LIVE);
	dma_resv_unlock(dmabuf->resv);
	return 0;

err_unlock:
	dma_resv_unlock(dmabuf->resv);
err_put:
	pdma_buf_put_att(&pin->buf);
	return ret;
}

static void pdma_buf_release(struct pdma_pin *pin)
{
	struct dma_buf *dmabuf = pin->buf.dmabuf;

	dma_resv_lock(dmabuf->resv, NULL);
	pdma_buf_unmap_att(&pin->buf);
	dma_resv_unlock(dmabuf->resv);
}

static void pdma_buf_destroy(struct pdma_pin *pin)
{
	pdma_buf_put_att(&pin->buf);
}

/*
 * Under map_sem, without pin->lock (attaching sleeps and takes the dma_resv
 * lock). The dma-buf is the pin's until its release: the client takes a
 * reference of its own while the pin is LIVE, under pin->lock, which the
 * release cannot pass before it has quiesced the clients.
 */
static int pdma_buf_map(struct pdma_pin *pin, struct peerdma_client *c)
{
	struct dma_buf_attachment *attach;
	struct dma_buf *dmabuf;
	struct sg_table *sgt;
	int ret;

	mutex_lock(&pin->lock);
	dmabuf = pin->buf.dmabuf;
	if (atomic_read(&pin->state) != PDMA_LIVE || !dmabuf) {
		mutex_unlock(&pin->lock);
		return -ENODEV;
	}
	get_dma_buf(dmabuf);
	mutex_unlock(&pin->lock);
	c->buf.dmabuf = dmabuf;
	attach = dma_buf_dynamic_attach(dmabuf, c->dev, &pdma_buf_client_attach_ops, c);
	if (IS_ERR(attach)) {
		ret = PTR_ERR(attach);
		goto err_put;
	}
	c->buf.attach = attach;
	dma_resv_lock(dmabuf->resv, NULL);
	/* revoked (move_notify runs under this lock) since we looked */
	if (atomic_read(&pin->state) != PDMA_LIVE) {
		ret = -ENODEV;
		goto err_unlock;
	}
	sgt = dma_buf_map_attachment(attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto err_unlock;
	}
	c->buf.sgt = sgt;
	ret = pdma_sg_fill(pin, sgt, pin->page_shift, NULL, c);
	if (ret) {
		pdma_buf_unmap_att(&c->buf);
		goto err_unlock;
	}
	dma_resv_unlock(dmabuf->resv);
	return 0;

err_unlock:
	dma_resv_unlock(dmabuf->resv);
err_put:
	pdma_buf_put_att(&c->buf);
	return ret;
}

static void pdma_buf_unmap(struct pdma_pin *pin, struct peerdma_client *c, bool revoking)
{
	struct dma_buf *dmabuf = c->buf.dmabuf;

	if (!c->buf.sgt)
		return;
	if (!revoking)
		dma_resv_lock(dmabuf->resv, NULL);
	pdma_buf_unmap_att(&c->buf);
	if (!revoking)
		dma_resv_unlock(dmabuf->resv);
}

static void pdma_buf_client_free(struct peerdma_client *c)
{
	pdma_buf_put_att(&c->buf);
}

const struct pdma_provider pdma_dmabuf_provider = {
	.name = "dmabuf",
	.kind = PEERDMA_KIND_DMABUF,
	.pin = pdma_buf_pin,
	.release = pdma_buf_release,
	.destroy = pdma_buf_destroy,
	.map = pdma_buf_map,
	.unmap = pdma_buf_unmap,
	.client_free = pdma_buf_client_free,
};
