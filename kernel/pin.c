// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma pinned handles: creation, lookup, the ownership decision between the
 * provider's revoke path and unpin/close/exit, and the release of the pages.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/slab.h>

#include "peerdma.h"

/* every pin with pages or a pending callback, by id: callback data is the id */
static DEFINE_XARRAY(pdma_pins);
static atomic64_t pdma_next_id = ATOMIC64_INIT(0);

static void pdma_pin_free(struct kref *ref)
{
	struct pdma_pin *pin = container_of(ref, struct pdma_pin, ref);

	pdma_file_put(pin->file);
	kvfree(pin->phys);
	kfree(pin);
}

void pdma_pin_put(struct pdma_pin *pin)
{
	kref_put(&pin->ref, pdma_pin_free);
}

/* for provider callbacks that only have the id: NULL once released */
struct pdma_pin *pdma_pin_get_by_id(u64 id)
{
	struct pdma_pin *pin;

	xa_lock(&pdma_pins);
	pin = xa_load(&pdma_pins, id);
	if (pin && !kref_get_unless_zero(&pin->ref))
		pin = NULL;
	xa_unlock(&pdma_pins);
	return pin;
}

struct pdma_pin *pdma_pin_lookup(struct pdma_file *f, u64 handle)
{
	struct pdma_pin *pin;

	mutex_lock(&f->lock);
	pin = xa_load(&f->handles, handle);
	if (pin)
		kref_get(&pin->ref);
	mutex_unlock(&f->lock);
	return pin;
}

void pdma_pin_pages_held(struct pdma_pin *pin)
{
	pin->counted = true;
	atomic_inc(&pdma_live_pins);
	atomic64_inc(&pdma_pins_total);
}

/* only the owner of the pages (see peerdma.h) calls this, once */
void pdma_pin_pages_gone(struct pdma_pin *pin)
{
	if (pin->counted) {
		pin->counted = false;
		atomic_dec(&pdma_live_pins);
	}
}

u32 pdma_pin_entries(const struct pdma_pin *pin, u32 flags, u32 *page_size)
{
	if ((flags & PEERDMA_PIN_SPLIT_4K) && pin->page_shift > 12) {
		*page_size = SZ_4K;
		return pin->npages << (pin->page_shift - 12);
	}
	*page_size = 1U << pin->page_shift;
	return pin->npages;
}

/*
 * The provider's revoke path (free callback, MMU invalidation, move_notify)
 * calls this first. True: it owns the pages now, the clients are quiesced and
 * unmapped; it must release the pages and call pdma_pin_revoke_end(). False:
 * unpin/close owns them and has already stopped the clients.
 */
bool pdma_pin_revoke_begin(struct pdma_pin *pin)
{
	int old = atomic_cmpxchg(&pin->state, PDMA_LIVE, PDMA_REVOKED);

	if (old == PDMA_LIVE) {
		atomic64_inc(&pdma_revokes);
		/* synchronously, within the revoking call: the event comes later */
		pdma_counters_revoke(pin->file);
		pdma_clients_quiesce(pin, true);
		return true;
	}
	if (old == PDMA_RELEASING)
		wait_for_completion(&pin->quiesced);
	return false;
}

/*
 * The state is no longer LIVE: a client mapping that began before (under
 * map_sem) sees that, and undoes itself; wait until it has.
 */
void pdma_pin_wait_mappings(struct pdma_pin *pin)
{
	down_write(&pin->map_sem);
	up_write(&pin->map_sem);
}

void pdma_pin_revoke_end(struct pdma_pin *pin, u32 reason)
{
	pdma_pin_pages_gone(pin);
	pdma_event_queue(pin, reason);
	complete_all(&pin->done);
}

static int pdma_pin_validate(struct peerdma_pin *req, u64 *start, u64 *end)
{
	u64 page, last;

	if (req->flags & ~PEERDMA_PIN_FLAGS)
		return -EINVAL;
	switch (req->kind) {
	case PEERDMA_KIND_HOST:
		page = PAGE_SIZE;
		break;
	case PEERDMA_KIND_GPU:
		page = SZ_64K;
		break;
	case PEERDMA_KIND_DMABUF:
		page = PAGE_SIZE;
		break;
	default:
		return -EINVAL;
	}
	if (req->kind == PEERDMA_KIND_DMABUF && req->fd == -1)
		return -EBADF;
	if (req->kind != PEERDMA_KIND_DMABUF && req->fd != -1)
		return -EINVAL;
	if (!req->len)
		return -EINVAL;
	if (check_add_overflow(req->addr, req->len - 1, &last))
		return -EOVERFLOW;
	if (req->len > PEERDMA_MAX_PIN_LEN)
		return -E2BIG;
	if (req->kind != PEERDMA_KIND_DMABUF && last >= TASK_SIZE_MAX)
		return -EFAULT;
	if (last > U64_MAX - page)
		return -EOVERFLOW;
	*start = round_down(req->addr, page);
	*end = round_up(last + 1, page);
	if ((req->flags & PEERDMA_PIN_EXACT) &&
	    (*start != req->addr || *end != req->addr + req->len))
		return -EINVAL;
	if ((req->flags & PEERDMA_PIN_GPU_CALLBACK) && req->kind != PEERDMA_KIND_GPU)
		return -EINVAL;
	if (*end - *start > PEERDMA_MAX_PIN_LEN)
		return -E2BIG;
	return 0;
}

int pdma_pin_create(struct pdma_file *f, struct peerdma_pin *req)
{
	const struct pdma_provider *prov;
	struct pdma_pin *pin;
	u64 start, end;
	int ret;

	ret = pdma_pin_validate(req, &start, &end);
	if (ret)
		return ret;
	switch (req->kind) {
	case PEERDMA_KIND_HOST:
		prov = &pdma_host_provider;
		break;
	case PEERDMA_KIND_GPU:
		prov = &pdma_nvp2p_provider;
		break;
	default:
		prov = &pdma_dmabuf_provider;
		break;
	}

	mutex_lock(&f->lock);
	if (f->nhandles >= min(READ_ONCE(pdma_max_handles), PEERDMA_MAX_HANDLES)) {
		mutex_unlock(&f->lock);
		return -ENOSPC;
	}
	f->nhandles++;		/* reserved */
	mutex_unlock(&f->lock);

	ret = -ENOMEM;
	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		goto err_unreserve;
	kref_init(&pin->ref);
	atomic_set(&pin->state, PDMA_CREATING);
	kref_get(&f->ref);
	pin->file = f;
	pin->prov = prov;
	pin->flags = req->flags;
	pin->addr = start;
	pin->len = end - start;
	pin->user_data = req->user_data;
	mutex_init(&pin->lock);
	init_rwsem(&pin->map_sem);
	INIT_LIST_HEAD(&pin->clients);
	INIT_LIST_HEAD(&pin->ev_node);
	init_completion(&pin->ready);
	init_completion(&pin->quiesced);
	init_completion(&pin->done);
	pin->id = atomic64_inc_return(&pdma_next_id);
	ret = xa_insert(&pdma_pins, pin->id, pin, GFP_KERNEL);
	if (ret)
		goto err_put;

	ret = prov->pin(pin, req->fd);
	complete_all(&pin->ready);
	if (ret)
		goto err_erase;

	mutex_lock(&f->lock);
	ret = xa_insert(&f->handles, pin->id, pin, GFP_KERNEL);
	mutex_unlock(&f->lock);
	if (ret) {
		pdma_pin_release(pin);	/* drops the reservation's ref */
		goto err_unreserve;
	}

	req->handle = pin->id;
	req->pinned_addr = pin->addr;
	req->pinned_len = pin->len;
	req->entries = pdma_pin_entries(pin, pin->flags, &req->page_size);
	return 0;

err_erase:
	xa_erase(&pdma_pins, pin->id);
err_put:
	pdma_pin_put(pin);
err_unreserve:
	mutex_lock(&f->lock);
	f->nhandles--;
	mutex_unlock(&f->lock);
	return ret;
}

/*
 * Give a pin back (unpin ioctl, close, exit), once per pin; consumes the
 * caller's reference. Whatever the order against the provider's revoke path,
 * the pages are released exactly once and the clients are stopped first.
 */
void pdma_pin_release(struct pdma_pin *pin)
{
	if (atomic_cmpxchg(&pin->state, PDMA_LIVE, PDMA_RELEASING) == PDMA_LIVE) {
		pdma_clients_quiesce(pin, false);
		pdma_pin_wait_mappings(pin);
		pin->prov->release(pin);
		pdma_pin_pages_gone(pin);
		complete_all(&pin->done);
	} else {
		/* revoked: wait until the revoke path is entirely done with it */
		wait_for_completion(&pin->done);
	}
	if (pin->prov->destroy)
		pin->prov->destroy(pin);
	if (!pin->awaits_callback)
		xa_erase(&pdma_pins, pin->id);
	pdma_pin_put(pin);
}

/* a provider's late callback is done with an id release left for it */
void pdma_pin_forget(struct pdma_pin *pin)
{
	xa_erase(&pdma_pins, pin->id);
}

int pdma_pin_unpin(struct pdma_file *f, u64 handle)
{
	struct pdma_pin *pin;

	mutex_lock(&f->lock);
	pin = xa_erase(&f->handles, handle);
	if (pin)
		f->nhandles--;
	mutex_unlock(&f->lock);
	if (!pin)
		return -ENOENT;
	pdma_pin_release(pin);
	return 0;
}

void pdma_pins_exit(void)
{
	if (!xa_empty(&pdma_pins))
		pr_err("pins left at unload\n");
	xa_destroy(&pdma_pins);
}
