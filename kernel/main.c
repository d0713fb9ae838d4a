// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma: pin GPU (nv-p2p, dma-buf) and host memory for third-party device
 * DMA. This file: module init/exit, the /dev/peerdma character device and its
 * per-open-file contexts, debugfs counters.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cdev.h>
#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uidgid.h>
#include <linux/workqueue.h>

#include "peerdma.h"

static unsigned int dev_gid;
module_param(dev_gid, uint, 0444);
MODULE_PARM_DESC(dev_gid, "group of /dev/peerdma (0: root only, mode 0600; else mode 0660)");

unsigned int pdma_max_handles = PEERDMA_MAX_HANDLES;
module_param_named(max_handles, pdma_max_handles, uint, 0644);
MODULE_PARM_DESC(max_handles, "handles per open file (more: -ENOSPC)");

bool pdma_nvp2p_persistent = true;
module_param_named(nvp2p_persistent, pdma_nvp2p_persistent, bool, 0644);
MODULE_PARM_DESC(nvp2p_persistent,
		 "use nvidia_p2p_get_pages_persistent by default (else free-callback mode)");

atomic_t pdma_live_pins = ATOMIC_INIT(0);
atomic_t pdma_orphans = ATOMIC_INIT(0);
atomic64_t pdma_pins_total = ATOMIC64_INIT(0);
atomic64_t pdma_revokes = ATOMIC64_INIT(0);
struct device *pdma_dev;
struct workqueue_struct *pdma_wq;

static dev_t pdma_devt;
static struct cdev pdma_cdev;
static struct class *pdma_class;
static struct dentry *pdma_dbg;

static void pdma_file_free(struct kref *ref)
{
	struct pdma_file *f = container_of(ref, struct pdma_file, ref);

	xa_destroy(&f->handles);
	pdma_counters_free(f);
	mmdrop(f->mm);
	kfree(f);
}

void pdma_file_put(struct pdma_file *f)
{
	kref_put(&f->ref, pdma_file_free);
}

static int pdma_open(struct inode *inode, struct file *file)
{
	struct pdma_file *f;

	if (!current->mm)
		return -EINVAL;
	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	if (pdma_counters_alloc(f)) {
		kfree(f);
		return -ENOMEM;
	}
	kref_init(&f->ref);
	f->mm = current->mm;
	mmgrab(f->mm);
	mutex_init(&f->lock);
	xa_init(&f->handles);
	spin_lock_init(&f->ev_lock);
	INIT_LIST_HEAD(&f->events);
	init_waitqueue_head(&f->wq);
	file->private_data = f;
	return nonseekable_open(inode, file);
}

/* last close of the file (close, exit, the last holder of a passed fd) */
static int pdma_release(struct inode *inode, struct file *file)
{
	struct pdma_file *f = file->private_data;
	struct pdma_pin *pin;
	unsigned long idx;

	spin_lock(&f->ev_lock);
	f->closed = true;
	spin_unlock(&f->ev_lock);
	pdma_events_drain(f);

	for (;;) {
		idx = 0;
		mutex_lock(&f->lock);
		pin = xa_find(&f->handles, &idx, ULONG_MAX, XA_PRESENT);
		if (pin) {
			xa_erase(&f->handles, idx);
			f->nhandles--;
		}
		mutex_unlock(&f->lock);
		if (!pin)
			break;
		pdma_pin_release(pin);
	}
	pdma_file_put(f);
	return 0;
}

static const struct file_operations pdma_fops = {
	.owner = THIS_MODULE,
	.open = pdma_open,
	.release = pdma_release,
	.unlocked_ioctl = pdma_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.read = pdma_read,
	.poll = pdma_poll,
	.mmap = pdma_mmap,
	.llseek = no_llseek,
};

bool pdma_is_peerdma_file(struct file *file)
{
	return file->f_op == &pdma_fops;
}

static char *pdma_devnode(struct device *dev, umode_t *mode, kuid_t *uid, kgid_t *gid)
{
	if (mode)
		*mode = dev_gid ? 0660 : 0600;
	if (gid && dev_gid)
		*gid = make_kgid(&init_user_ns, dev_gid);
	return NULL;
}

static const struct device_type pdma_dev_type = {
	.name = "peerdma",
	.devnode = pdma_devnode,
};

static void pdma_dev_release(struct device *dev)
{
	kfree(dev);
}

static int pdma_stats_show(struct seq_file *s, void *unused)
{
	seq_printf(s, "live_pins %d\npins_total %lld\nrevokes %lld\norphans %d\n",
		   atomic_read(&pdma_live_pins), atomic64_read(&pdma_pins_total),
		   atomic64_read(&pdma_revokes), atomic_read(&pdma_orphans));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pdma_stats);

static int __init pdma_init(void)
{
	struct device *dev;
	int ret;

	pdma_wq = alloc_workqueue("peerdma", WQ_UNBOUND, 0);
	if (!pdma_wq)
		return -ENOMEM;
	ret = alloc_chrdev_region(&pdma_devt, 0, 1, "peerdma");
	if (ret)
		goto err_wq;
	cdev_init(&pdma_cdev, &pdma_fops);
	pdma_cdev.owner = THIS_MODULE;
	pdma_class = class_create(THIS_MODULE, "peerdma");
	if (IS_ERR(pdma_class)) {
		ret = PTR_ERR(pdma_class);
		goto err_region;
	}
	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev) {
		ret = -ENOMEM;
		goto err_class;
	}
	device_initialize(dev);
	dev->devt = pdma_devt;
	dev->class = pdma_class;
	dev->type = &pdma_dev_type;
	dev->release = pdma_dev_release;
	/* dma-buf attachments of the device itself: direct mapping = CPU physical */
	dev->dma_mask = &dev->coherent_dma_mask;
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (!ret)
		ret = dev_set_name(dev, "peerdma");
	if (!ret)
		ret = cdev_device_add(&pdma_cdev, dev);
	if (ret) {
		put_device(dev);
		goto err_class;
	}
	pdma_dev = dev;

	pdma_dbg = debugfs_create_dir("peerdma", NULL);
	debugfs_create_atomic_t("live_pins", 0400, pdma_dbg, &pdma_live_pins);
	debugfs_create_atomic_t("orphans", 0400, pdma_dbg, &pdma_orphans);
	debugfs_create_file("stats", 0400, pdma_dbg, NULL, &pdma_stats_fops);
	pr_info("ready (ABI %u.%u, GPU mode %s)\n", PEERDMA_ABI_MAJOR, PEERDMA_ABI_MINOR,
		pdma_nvp2p_persistent ? "persistent" : "free-callback");
	return 0;

err_class:
	class_destroy(pdma_class);
err_region:
	unregister_chrdev_region(pdma_devt, 1);
err_wq:
	destroy_workqueue(pdma_wq);
	return ret;
}

static void __exit pdma_exit(void)
{
	debugfs_remove_recursive(pdma_dbg);
	cdev_device_del(&pdma_cdev, pdma_dev);
	put_device(pdma_dev);
	class_destroy(pdma_class);
	unregister_chrdev_region(pdma_devt, 1);
	destroy_workqueue(pdma_wq);	/* flushes deferred client/page releases */
	pdma_pins_exit();
	if (atomic_read(&pdma_live_pins))
		pr_err("unloaded with %d live pins\n", atomic_read(&pdma_live_pins));
}

module_init(pdma_init);
module_exit(pdma_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("peerdma: GPU and host memory pinning for peer-to-peer device DMA");
MODULE_IMPORT_NS(DMA_BUF);
