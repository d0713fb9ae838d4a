// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma in-kernel client API: device drivers map a pinned handle for their
 * own struct device and are quiesced before the pages go away.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/device.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "peerdma.h"

static void pdma_client_free_work(struct work_struct *work)
{
	struct peerdma_client *c = container_of(work, struct peerdma_client, free_work);
	struct pdma_pin *pin = c->pin;

	if (pin->prov->client_free)
		pin->prov->client_free(c);
	put_device(c->dev);
	kvfree(c->dma);
	kfree(c);
	pdma_pin_put(pin);
}

/* the last put may come from a revoke path holding provider locks: defer */
static void pdma_client_release(struct kref *ref)
{
	struct peerdma_client *c = container_of(ref, struct peerdma_client, ref);

	INIT_WORK(&c->free_work, pdma_client_free_work);
	queue_work(pdma_wq, &c->free_work);
}

static void pdma_client_ref_put(struct peerdma_client *c)
{
	kref_put(&c->ref, pdma_client_release);
}

void pdma_client_set_addr(struct peerdma_client *c, u32 i, dma_addr_t addr)
{
	u32 n = 1U << (c->pin->page_shift - c->shift), j;

	for (j = 0; j < n; j++)
		c->dma[i * n + j] = addr + ((dma_addr_t)j << c->shift);
}

/*
 * Stop every client of @pin (the caller won the ownership decision), let the
 * loser of that decision go on, then take the clients' mappings down. The
 * loser may be a revoke path that holds the provider's locks (dma_resv: a
 * dma-buf client's unmap takes it), so it is let go first; no mapping refers
 * to anything the loser frees when it returns (see peerdma.h).
 */
void pdma_clients_quiesce(struct pdma_pin *pin, bool revoking)
{
	struct peerdma_client *c, *tmp;
	LIST_HEAD(gone);

	mutex_lock(&pin->lock);
	list_for_each_entry(c, &pin->clients, node) {
		if (c->ops && c->ops->quiesce)
			c->ops->quiesce(c->priv, pin->id);
		WRITE_ONCE(c->dead, true);
		c->on_list = false;
	}
	list_splice_init(&pin->clients, &gone);
	mutex_unlock(&pin->lock);
	complete_all(&pin->quiesced);

	list_for_each_entry_safe(c, tmp, &gone, node) {
		list_del_init(&c->node);
		pin->prov->unmap(pin, c, revoking);
		pdma_client_ref_put(c);
	}
}

u32 pdma_pin_nclients(struct pdma_pin *pin)
{
	struct peerdma_client *c;
	u32 n = 0;

	mutex_lock(&pin->lock);
	list_for_each_entry(c, &pin->clients, node)
		n++;
	mutex_unlock(&pin->lock);
	return n;
}

/**
 * peerdma_client_get - map a pinned handle for a device
 * @fd: the /dev/peerdma file descriptor of the calling process
 * @handle: a handle created through that file
 * @dev: the device that will DMA (a PCI device for GPU memory)
 * @flags: PEERDMA_CLIENT_SPLIT_4K to get 4 KiB entries
 * @ops: quiesce callback, called before the pages are revoked
 * @priv: passed to @ops
 * @out: the client, for peerdma_client_map() and peerdma_client_put()
 *
 * Must be called from the process that opened @fd. Returns 0, -EBADF, -EINVAL
 * (not a peerdma fd, bad flags), -EACCES (another process), -ENOENT (unknown
 * handle), -ENODEV (revoked), -ENOMEM, or the provider's mapping error.
 */
int peerdma_client_get(int fd, u64 handle, struct device *dev, u32 flags,
		       const struct peerdma_client_ops *ops, void *priv,
		       struct peerdma_client **out)
{
	const struct pdma_provider *prov;
	struct peerdma_client *c;
	struct pdma_file *pf;
	struct pdma_pin *pin;
	struct fd f;
	u32 entries, ps;
	int ret;

	if (!dev || !out || (flags & ~PEERDMA_CLIENT_SPLIT_4K))
		return -EINVAL;
	f = fdget(fd);
	if (!f.file)
		return -EBADF;
	if (!pdma_is_peerdma_file(f.file)) {
		fdput(f);
		return -EINVAL;
	}
	pf = f.file->private_data;
	if (pf->mm != current->mm) {
		fdput(f);
		return -EACCES;
	}
	pin = pdma_pin_lookup(pf, handle);
	fdput(f);
	if (!pin)
		return -ENOENT;
	prov = pin->prov;

	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c) {
		pdma_pin_put(pin);
		return -ENOMEM;
	}
	kref_init(&c->ref);
	INIT_LIST_HEAD(&c->node);
	c->pin = pin;
	/* the deferred free (a dma-buf detach) may run after the driver let go */
	c->dev = get_device(dev);
	c->ops = ops;
	c->priv = priv;
	c->flags = flags;
	entries = pdma_pin_entries(pin, (flags & PEERDMA_CLIENT_SPLIT_4K) ?
				   PEERDMA_PIN_SPLIT_4K : 0, &ps);
	c->shift = ilog2(ps);
	c->dma = kvcalloc(entries, sizeof(*c->dma), GFP_KERNEL);
	if (!c->dma) {
		ret = -ENOMEM;
		goto err_free;
	}
	c->map.pinned_addr = pin->addr;
	c->map.pinned_len = pin->len;
	c->map.page_size = ps;
	c->map.entries = entries;
	c->map.addrs = c->dma;

	/* no allocation under pin->lock: it is taken in reclaim (MMU notifier) */
	down_read(&pin->map_sem);
	if (atomic_read(&pin->state) != PDMA_LIVE) {
		ret = -ENODEV;
		goto err_unlock;
	}
	ret = prov->map(pin, c);
	if (ret)
		goto err_unlock;
	mutex_lock(&pin->lock);
	if (atomic_read(&pin->state) != PDMA_LIVE) {
		/* revoked meanwhile: the device never saw these addresses */
		mutex_unlock(&pin->lock);
		prov->unmap(pin, c, false);
		up_read(&pin->map_sem);
		ret = -ENODEV;
		goto err_put;
	}
	kref_get(&c->ref);	/* the list's */
	list_add_tail(&c->node, &pin->clients);
	c->on_list = true;
	mutex_unlock(&pin->lock);
	up_read(&pin->map_sem);
	*out = c;
	return 0;

err_put:
	pdma_client_ref_put(c);	/* provider state to clean up: deferred free */
	return ret;
err_unlock:
	up_read(&pin->map_sem);
err_free:
	put_device(c->dev);
	kvfree(c->dma);
	kfree(c);
	pdma_pin_put(pin);
	return ret;
}
EXPORT_SYMBOL_GPL(peerdma_client_get);

/* NULL once the client was quiesced (its addresses must not be used any more) */
const struct peerdma_dma_map *peerdma_client_map(struct peerdma_client *pc)
{
	struct peerdma_client *c = pc;

	return READ_ONCE(c->dead) ? NULL : &c->map;
}
EXPORT_SYMBOL_GPL(peerdma_client_map);

/*
 * I/O address of [off, off + len) (offsets from pinned_addr) when that lies in
 * one I/O-contiguous stretch. Call it only between get and quiesce, serialized
 * with the quiesce callback by the driver's own lock.
 */
int peerdma_client_dma_addr(struct peerdma_client *pc, u64 off, u64 len,
			    dma_addr_t *addr)
{
	struct peerdma_client *c = pc;
	u64 ps = 1ULL << c->shift, i, first, last;

	if (READ_ONCE(c->dead))
		return -ENODEV;
	if (!len || off >= c->map.pinned_len || len > c->map.pinned_len - off)
		return -ERANGE;
	first = off >> c->shift;
	last = (off + len - 1) >> c->shift;
	for (i = first; i < last; i++)
		if (c->dma[i + 1] != c->dma[i] + ps)
			return -EINVAL;
	*addr = c->dma[first] + (off & (ps - 1));
	return 0;
}
EXPORT_SYMBOL_GPL(peerdma_client_dma_addr);

/* release a client in any state; do not call it from the quiesce callback */
void peerdma_client_put(struct peerdma_client *pc)
{
	struct peerdma_client *c = pc;
	struct pdma_pin *pin;
	bool unmap = false;

	if (!c)
		return;
	pin = c->pin;
	/* the unmap must end before a release gives the pages back */
	down_read(&pin->map_sem);
	mutex_lock(&pin->lock);
	if (c->on_list) {
		list_del_init(&c->node);
		c->on_list = false;
		WRITE_ONCE(c->dead, true);
		unmap = true;
	}
	mutex_unlock(&pin->lock);
	if (unmap) {
		pin->prov->unmap(pin, c, false);
		pdma_client_ref_put(c);
	}
	up_read(&pin->map_sem);
	pdma_client_ref_put(c);
}
EXPORT_SYMBOL_GPL(peerdma_client_put);
