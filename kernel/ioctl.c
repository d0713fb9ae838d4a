// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma ioctls: argument checking and dispatch (see include/uapi/peerdma.h
 * for the contract and the errno of every rejected input).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "peerdma.h"

#define PDMA_PAGES_CHUNK 256

/* the ABI: same layout for 64-bit and 32-bit (compat) callers */
static_assert(sizeof(struct peerdma_version) == 24);
static_assert(sizeof(struct peerdma_pin) == 72);
static_assert(sizeof(struct peerdma_unpin) == 16);
static_assert(sizeof(struct peerdma_query) == 64);
static_assert(sizeof(struct peerdma_get_pages) == 32);
static_assert(sizeof(struct peerdma_event) == 24);

static int pdma_ioc_version(void __user *uarg)
{
	struct peerdma_version v;

	if (copy_from_user(&v, uarg, sizeof(v)))
		return -EFAULT;
	if (v.size != sizeof(v) || v.flags || v.pad)
		return -EINVAL;
	v.abi_version = PEERDMA_ABI_VERSION;
	v.caps = PEERDMA_CAP_HOST | PEERDMA_CAP_GPU | PEERDMA_CAP_DMABUF |
		 PEERDMA_CAP_EVENTS | PEERDMA_CAP_SPLIT_4K;
	if (pdma_nvp2p_persistent)
		v.caps |= PEERDMA_CAP_GPU_PERSISTENT;
	return copy_to_user(uarg, &v, sizeof(v)) ? -EFAULT : 0;
}

static int pdma_ioc_pin(struct pdma_file *f, void __user *uarg)
{
	struct peerdma_pin p;
	int ret;

	if (copy_from_user(&p, uarg, sizeof(p)))
		return -EFAULT;
	ret = pdma_pin_create(f, &p);
	if (ret)
		return ret;
	if (copy_to_user(uarg, &p, sizeof(p))) {
		pdma_pin_unpin(f, p.handle);
		return -EFAULT;
	}
	return 0;
}

static int pdma_ioc_unpin(struct pdma_file *f, void __user *uarg)
{
	struct peerdma_unpin u;

	if (copy_from_user(&u, uarg, sizeof(u)))
		return -EFAULT;
	if (u.size != sizeof(u) || u.flags)
		return -EINVAL;
	return pdma_pin_unpin(f, u.handle);
}

static int pdma_ioc_query(struct pdma_file *f, void __user *uarg)
{
	struct peerdma_query q;
	struct pdma_pin *pin;

	if (copy_from_user(&q, uarg, sizeof(q)))
		return -EFAULT;
	if (q.size != sizeof(q) || q.flags || q.pad)
		return -EINVAL;
	pin = pdma_pin_lookup(f, q.handle);
	if (!pin)
		return -ENOENT;
	q.state = atomic_read(&pin->state) == PDMA_LIVE ? PEERDMA_STATE_LIVE :
		  PEERDMA_STATE_REVOKED;
	q.kind = pin->prov->kind;
	q.pinned_addr = pin->addr;
	q.pinned_len = pin->len;
	q.user_data = pin->user_data;
	q.entries = pdma_pin_entries(pin, pin->flags, &q.page_size);
	q.clients = pdma_pin_nclients(pin);
	pdma_pin_put(pin);
	return copy_to_user(uarg, &q, sizeof(q)) ? -EFAULT : 0;
}

static int pdma_ioc_get_pages(struct pdma_file *f, void __user *uarg)
{
	struct peerdma_get_pages g;
	u64 __user *out;
	struct pdma_pin *pin;
	u32 entries, ps, ratio, i, n;
	u64 *buf;
	int ret = 0;

	if (copy_from_user(&g, uarg, sizeof(g)))
		return -EFAULT;
	if (g.size != sizeof(g) || g.flags)
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
		ret = copy_to_user(uarg, &g, sizeof(g)) ? -EFAULT : -EINVAL;
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
		ret = copy_to_user(uarg, &g, sizeof(g)) ? -EFAULT : 0;
	}
out:
	pdma_pin_put(pin);
	return ret;
}

long pdma_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct pdma_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case PEERDMA_IOC_VERSION:
	case PEERDMA_IOC_PIN:
	case PEERDMA_IOC_UNPIN:
	case PEERDMA_IOC_QUERY:
	case PEERDMA_IOC_GET_PAGES:
		break;
	default:
		return -ENOTTY;
	}
	/* handles are bound to the opener: not a forked child, not an fd receiver */
	if (f->mm != current->mm)
		return -EACCES;

	switch (cmd) {
	case PEERDMA_IOC_VERSION:
		return pdma_ioc_version(uarg);
	case PEERDMA_IOC_PIN:
		return pdma_ioc_pin(f, uarg);
	case PEERDMA_IOC_UNPIN:
		return pdma_ioc_unpin(f, uarg);
	case PEERDMA_IOC_QUERY:
		return pdma_ioc_query(f, uarg);
	default:
		return pdma_ioc_get_pages(f, uarg);
	}
}
