// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma ioctls: argument checking and dispatch (see include/uapi/peerdma.h
 * for the contract and the errno of every rejected input).
 *
 * The arguments are size-versioned ("Growing the ABI" in the header): the
 * dispatcher matches a command by type, number and direction, checks the
 * caller's size against _IOC_SIZE and the struct's first published size, and
 * copies the argument in with copy_struct_from_user() (zero-extends an older
 * caller's struct, refuses a newer caller's nonzero tail with -E2BIG). Each
 * command copies its results back with pdma_copy_out(), never past the
 * caller's size.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/nospec.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "peerdma.h"

#define PDMA_PAGES_CHUNK 256

/* the ABI: same layout for 64-bit and 32-bit (compat) callers */
static_assert(sizeof(struct peerdma_version) == PEERDMA_VERSION_SIZE_VER0);
static_assert(sizeof(struct peerdma_pin) == PEERDMA_PIN_SIZE_VER0);
static_assert(sizeof(struct peerdma_unpin) == PEERDMA_UNPIN_SIZE_VER0);
static_assert(sizeof(struct peerdma_query) == PEERDMA_QUERY_SIZE_VER1);
static_assert(sizeof(struct peerdma_get_pages) == PEERDMA_GET_PAGES_SIZE_VER0);
static_assert(sizeof(struct peerdma_event) == 24);

/* the argument of any command, as this module knows it */
union pdma_ioc_args {
	struct peerdma_version version;
	struct peerdma_pin pin;
	struct peerdma_unpin unpin;
	struct peerdma_query query;
	struct peerdma_get_pages get_pages;
};

/* the caller's argument: where, and its size (the struct it was built with) */
struct pdma_uarg {
	void __user *ptr;
	u32 size;
};

/* results back to the caller, up to the smaller of its size and ours */
static int pdma_copy_out(const struct pdma_uarg *u, const void *karg, size_t ksize)
{
	return copy_to_user(u->ptr, karg, min_t(size_t, u->size, ksize)) ? -EFAULT : 0;
}

static int pdma_ioc_version(struct pdma_file *f, union pdma_ioc_args *a,
			    const struct pdma_uarg *u)
{
	struct peerdma_version v = a->version;

	if (v.flags || v.pad)
		return -EINVAL;
	v.abi_version = PEERDMA_ABI_VERSION;
	v.caps = PEERDMA_CAP_HOST | PEERDMA_CAP_GPU | PEERDMA_CAP_DMABUF |
		 PEERDMA_CAP_EVENTS | PEERDMA_CAP_SPLIT_4K | PEERDMA_CAP_REVOKE_COUNT;
	if (pdma_nvp2p_persistent)
		v.caps |= PEERDMA_CAP_GPU_PERSISTENT;
	return pdma_copy_out(u, &v, sizeof(v));
}

static int pdma_ioc_pin(struct pdma_file *f, union pdma_ioc_args *a,
			const struct pdma_uarg *u)
{
	struct peerdma_pin *p = &a->pin;
	int ret;

	ret = pdma_pin_create(f, p);
	if (ret)
		return ret;
	ret = pdma_copy_out(u, p, sizeof(*p));
	if (ret)
		pdma_pin_unpin(f, p->handle);	/* the caller never learnt the handle */
	return ret;
}

static int pdma_ioc_unpin(struct pdma_file *f, union pdma_ioc_args *a,
			  const struct pdma_uarg *u)
{
	if (a->unpin.flags)
		return -EINVAL;
	return pdma_pin_unpin(f, a->unpin.handle);
}

static int pdma_ioc_query(struct pdma_file *f, union pdma_ioc_args *a,
			  const struct pdma_uarg *u)
{
	struct peerdma_query q = a->query;
	struct pdma_pin *pin;

	if (q.flags || q.pad || q.pad2)
		return -EINVAL;
	pin = pdma_pin_lookup(f, q.handle);
	if (!pin)
		return -ENOENT;
	if (atomic_read(&pin->state) == PDMA_LIVE) {
		q.state = PEERDMA_STATE_LIVE;
		q.revoke_reason = 0;
	} else {
		q.state = PEERDMA_STATE_REVOKED;
		q.revoke_reason = READ_ONCE(pin->reason);
	}
	q.kind = pin->prov->kind;
	q.pinned_addr = pin->addr;
	q.pinned_len = pin->len;
	q.user_data = pin->user_data;
	q.entries = pdma_pin_entries(pin, pin->flags, &q.page_size);
	q.clients = pdma_pin_nclients(pin);
	pdma_pin_put(pin);
	return pdma_copy_out(u, &q, sizeof(q));
}

static int pdma_ioc_get_pages(struct pdma_file *f, union pdma_ioc_args *a,
			      const struct pdma_uarg *u)
{
	struct peerdma_get_pages g = a->get_pages;
	u64 __user *out;
	struct pdma_pin *pin;
	u32 entries, ps, ratio, i, n;
	u64 *buf;
	int ret = 0;

	if (g.flags)
		return -EINVAL;
	if (!capable(CAP_SYS_RAWIO))
		return -EPERM;
	pin = pdma_pin_lookup(f, g.handle);
	if (!pin)
		return -ENOENT;
	if (atomic_read(&pin->state) != PDMA_LIVE) {
		ret = -ENODEV;
		goto out;
	}
	entries = pdma_pin_entries(pin, pin->flags, &ps);
	if (g.count < entries) {
		g.count = entries;
		g.page_size = ps;
		ret = pdma_copy_out(u, &g, sizeof(g)) ?: -EINVAL;
		goto out;
	}
	buf = kmalloc_array(PDMA_PAGES_CHUNK, sizeof(u64), GFP_KERNEL);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	ratio = 1U << (pin->page_shift - ilog2(ps));
	out = u64_to_user_ptr(g.addrs);
	for (i = 0; i < entries; i += n) {
		u32 j;

		n = min_t(u32, entries - i, PDMA_PAGES_CHUNK);
		for (j = 0; j < n; j++)
			buf[j] = pin->phys[(i + j) / ratio] + (u64)((i + j) % ratio) * ps;
		if (copy_to_user(out + i, buf, n * sizeof(u64))) {
			ret = -EFAULT;
			break;
		}
	}
	kfree(buf);
	if (!ret) {
		g.count = entries;
		g.page_size = ps;
		ret = pdma_copy_out(u, &g, sizeof(g));
	}
out:
	pdma_pin_put(pin);
	return ret;
}

typedef int (*pdma_ioc_fn)(struct pdma_file *f, union pdma_ioc_args *a,
			  const struct pdma_uarg *u);

static const struct pdma_ioc {
	u32 ver0;		/* first published size: the least accepted */
	u32 size;		/* this module's struct */
	pdma_ioc_fn fn;
} pdma_iocs[] = {
	[_IOC_NR(PEERDMA_IOC_VERSION)] = { PEERDMA_VERSION_SIZE_VER0,
		sizeof(struct peerdma_version), pdma_ioc_version },
	[_IOC_NR(PEERDMA_IOC_PIN)] = { PEERDMA_PIN_SIZE_VER0,
		sizeof(struct peerdma_pin), pdma_ioc_pin },
	[_IOC_NR(PEERDMA_IOC_UNPIN)] = { PEERDMA_UNPIN_SIZE_VER0,
		sizeof(struct peerdma_unpin), pdma_ioc_unpin },
	[_IOC_NR(PEERDMA_IOC_QUERY)] = { PEERDMA_QUERY_SIZE_VER0,
		sizeof(struct peerdma_query), pdma_ioc_query },
	[_IOC_NR(PEERDMA_IOC_GET_PAGES)] = { PEERDMA_GET_PAGES_SIZE_VER0,
		sizeof(struct peerdma_get_pages), pdma_ioc_get_pages },
};

long pdma_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct pdma_file *f = file->private_data;
	struct pdma_uarg u = { .ptr = (void __user *)arg, .size = _IOC_SIZE(cmd) };
	union pdma_ioc_args karg;
	const struct pdma_ioc *ioc;
	unsigned int nr = _IOC_NR(cmd);
	u32 usize;
	int ret;

	/* by type, number and direction: _IOC_SIZE is the caller's version */
	if (_IOC_TYPE(cmd) != PEERDMA_IOC_MAGIC || _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE) ||
	    nr >= ARRAY_SIZE(pdma_iocs) || !pdma_iocs[nr].fn)
		return -ENOTTY;
	ioc = &pdma_iocs[array_index_nospec(nr, ARRAY_SIZE(pdma_iocs))];
	/* handles are bound to the opener: not a forked child, not an fd receiver */
	if (f->mm != current->mm)
		return -EACCES;
	if (get_user(usize, (u32 __user *)u.ptr))
		return -EFAULT;
	if (usize != u.size || usize < ioc->ver0)
		return -EINVAL;
	ret = copy_struct_from_user(&karg, ioc->size, u.ptr, usize);
	if (ret)
		return ret;
	return ioc->fn(f, &karg, &u);
}
