// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim: a test-only GPU stand-in. It exports the documented nv-p2p API
 * (persistent and free-callback modes, with the documented errors;
 * gpusim_p2p.c) and exports its memory as dma-bufs (gpusim_dmabuf.c), backed
 * by the BAR2 of QEMU's ivshmem-plain device (1af4:1110). User space allocates
 * and frees "GPU memory" through /dev/gpusim (see gpusim_uapi.h); freeing runs
 * the free callbacks synchronously with the driver lock held, as the NVIDIA
 * driver does (gpusim_p2p.c lists the rules it enforces). This file: the
 * allocations, the device file, the PCI driver.
 *
 * Protocol violations by a caller (put_pages from within a free callback, a
 * callback that did not call free_page_table, any use of a page table after
 * its callback returned) are logged as "gpusim: VIOLATION" lines, which the
 * test harness looks for, and counted (GPUSIM_IOC_INFO).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "gpusim.h"

struct gs_state gs;

static void gs_alloc_release(struct kref *ref)
{
	struct gs_alloc *a = container_of(ref, struct gs_alloc, ref);

	lockdep_assert_held(&gs.lock);
	bitmap_clear(gs.map, a->bar_off >> GS_PAGE_SHIFT, a->len >> GS_PAGE_SHIFT);
	gs.used -= a->len;
	mmdrop(a->mm);
	kfree(a);
}

void gs_alloc_put(struct gs_alloc *a)
{
	kref_put(&a->ref, gs_alloc_release);
}

/* the live (not freed) allocation of @mm that holds [va, va + len) */
struct gs_alloc *gs_find(struct gs_file *f, u64 va, u64 len)
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

struct gs_alloc *gs_find_any(u64 va, u64 len)
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
	lockdep_assert_held(&gs.lock);
	a->freed = true;
	list_del_init(&a->node);
	gs_p2p_free_callbacks(a);
	gs_bufs_revoke(a);
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
		u.info.violations = atomic_read(&gs.violations);
		u.info.legacy_hits = atomic_read(&gs.legacy_hits);
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
	.compat_ioctl = compat_ptr_ioctl,
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
	seq_printf(s, "violations %d\nlegacy_hits %d\n", atomic_read(&gs.violations),
		   atomic_read(&gs.legacy_hits));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gs_stat);

static int __init gs_init(void)
{
	mutex_init(&gs.lock);
	spin_lock_init(&gs.tlock);
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
