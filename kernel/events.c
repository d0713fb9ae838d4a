// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma invalidation events: each revoked handle queues one fixed-size
 * struct peerdma_event on its file (no allocation: the pin's own list node);
 * read() returns whole records, poll() reports EPOLLIN while any is queued.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "peerdma.h"

#define PDMA_READ_BATCH 64

void pdma_event_queue(struct pdma_pin *pin, u32 reason)
{
	struct pdma_file *f = pin->file;
	bool queued = false;

	spin_lock(&f->ev_lock);
	if (!f->closed && list_empty(&pin->ev_node)) {
		kref_get(&pin->ref);
		WRITE_ONCE(pin->reason, reason);	/* QUERY reads it unlocked */
		list_add_tail(&pin->ev_node, &f->events);
		queued = true;
	}
	spin_unlock(&f->ev_lock);
	if (queued)
		wake_up_interruptible_poll(&f->wq, EPOLLIN | EPOLLRDNORM);
}

void pdma_events_drain(struct pdma_file *f)
{
	struct pdma_pin *pin, *tmp;
	LIST_HEAD(list);

	spin_lock(&f->ev_lock);
	list_splice_init(&f->events, &list);
	spin_unlock(&f->ev_lock);
	list_for_each_entry_safe(pin, tmp, &list, ev_node) {
		list_del_init(&pin->ev_node);
		pdma_pin_put(pin);
	}
}

ssize_t pdma_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	struct pdma_file *f = file->private_data;
	struct peerdma_event *ev;
	struct pdma_pin *pin, *tmp;
	size_t max = min_t(size_t, count / sizeof(*ev), PDMA_READ_BATCH), n = 0;
	LIST_HEAD(list);
	int ret;

	if (!max)
		return -EINVAL;
	if (f->mm != current->mm)
		return -EACCES;
	ev = kcalloc(max, sizeof(*ev), GFP_KERNEL);
	if (!ev)
		return -ENOMEM;
	spin_lock(&f->ev_lock);
	while (list_empty(&f->events)) {
		spin_unlock(&f->ev_lock);
		if (file->f_flags & O_NONBLOCK) {
			ret = -EAGAIN;
			goto out;
		}
		ret = wait_event_interruptible(f->wq, !list_empty_careful(&f->events));
		if (ret)
			goto out;
		spin_lock(&f->ev_lock);
	}
	while (n < max && !list_empty(&f->events)) {
		pin = list_first_entry(&f->events, struct pdma_pin, ev_node);
		list_move_tail(&pin->ev_node, &list);
		ev[n].handle = pin->id;
		ev[n].user_data = pin->user_data;
		ev[n].reason = pin->reason;
		n++;
	}
	spin_unlock(&f->ev_lock);

	if (copy_to_user(buf, ev, n * sizeof(*ev))) {
		/* nothing consumed: put them back in order */
		spin_lock(&f->ev_lock);
		list_splice(&list, &f->events);
		spin_unlock(&f->ev_lock);
		ret = -EFAULT;
		goto out;
	}
	list_for_each_entry_safe(pin, tmp, &list, ev_node) {
		list_del_init(&pin->ev_node);
		pdma_pin_put(pin);
	}
	ret = n * sizeof(*ev);
out:
	kfree(ev);
	return ret;
}

__poll_t pdma_poll(struct file *file, struct poll_table_struct *wait)
{
	struct pdma_file *f = file->private_data;

	poll_wait(file, &f->wq, wait);
	return list_empty_careful(&f->events) ? 0 : EPOLLIN | EPOLLRDNORM;
}
