// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma_edu (test only): reference peerdma client driver for QEMU's edu
 * device (1234:11e8). It moves bytes between two pinned handles through the
 * device's internal 4 KiB buffer, using the I/O addresses peerdma maps for the
 * edu's struct device (IOVAs under an IOMMU), and shows the quiesce contract:
 * the quiesce callback waits for the DMA in flight and stops further DMA.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "../peerdma_client.h"
#include "edu_uapi.h"

#define EDU_ID		0x00
#define EDU_DMA_SRC	0x80
#define EDU_DMA_DST	0x88
#define EDU_DMA_COUNT	0x90
#define EDU_DMA_CMD	0x98
#define EDU_CMD_START	0x1
#define EDU_CMD_TO_BUS	0x2
#define EDU_BUF		0x40000
#define EDU_TIMEOUT_MS	5000

static struct {
	struct pci_dev *pdev;
	void __iomem *mmio;
	struct mutex dma_lock;	/* one transfer at a time; quiesce waits on it */
} edu;

/* per transfer or per attached handle: the client state peerdma quiesces */
struct edu_ref {
	struct peerdma_client *client;
	bool stopped;		/* under edu.dma_lock */
	u32 quiesced;
};

struct edu_file {
	struct mutex lock;	/* attached */
	struct edu_ref *attached;
};

/*
 * Quiesce callbacks that found a transfer in flight and waited for it: lets
 * the tests prove the wait without timing (read-only module parameter).
 */
static unsigned int quiesce_waits;
module_param(quiesce_waits, uint, 0444);
MODULE_PARM_DESC(quiesce_waits, "quiesce callbacks that waited for a DMA in flight");

static void edu_quiesce(void *priv, u64 handle)
{
	struct edu_ref *r = priv;

	/* waits for the transfer in flight, and no later one starts */
	if (!mutex_trylock(&edu.dma_lock)) {
		mutex_lock(&edu.dma_lock);
		WRITE_ONCE(quiesce_waits, quiesce_waits + 1);
	}
	r->stopped = true;
	r->quiesced++;
	mutex_unlock(&edu.dma_lock);
}

static const struct peerdma_client_ops edu_client_ops = {
	.quiesce = edu_quiesce,
};

static int edu_run(u64 src, u64 dst, u32 len, u32 cmd)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(EDU_TIMEOUT_MS);

	lockdep_assert_held(&edu.dma_lock);
	writeq(src, edu.mmio + EDU_DMA_SRC);
	writeq(dst, edu.mmio + EDU_DMA_DST);
	writeq(len, edu.mmio + EDU_DMA_COUNT);
	writeq(cmd | EDU_CMD_START, edu.mmio + EDU_DMA_CMD);
	while (readq(edu.mmio + EDU_DMA_CMD) & EDU_CMD_START) {
		if (time_after(jiffies, deadline)) {
			dev_err(&edu.pdev->dev, "DMA timeout\n");
			return -ETIMEDOUT;
		}
		usleep_range(2000, 4000);
	}
	return 0;
}

static int edu_xfer(struct peerdma_edu_xfer *x)
{
	struct edu_ref src = {}, dst = {};
	dma_addr_t s, d;
	int ret;

	if (!x->len || x->len > PEERDMA_EDU_MAX_XFER)
		return -EINVAL;
	ret = peerdma_client_get(x->peerdma_fd, x->src_handle, &edu.pdev->dev, 0,
				 &edu_client_ops, &src, &src.client);
	if (ret)
		return ret;
	ret = peerdma_client_get(x->peerdma_fd, x->dst_handle, &edu.pdev->dev, 0,
				 &edu_client_ops, &dst, &dst.client);
	if (ret)
		goto out_src;

	mutex_lock(&edu.dma_lock);
	if (src.stopped || dst.stopped) {
		ret = -ENODEV;
		goto out_unlock;
	}
	ret = peerdma_client_dma_addr(src.client, x->src_off, x->len, &s);
	if (!ret)
		ret = peerdma_client_dma_addr(dst.client, x->dst_off, x->len, &d);
	if (ret)
		goto out_unlock;
	ret = edu_run(s, EDU_BUF, x->len, 0);
	if (!ret)
		ret = edu_run(EDU_BUF, d, x->len, EDU_CMD_TO_BUS);
out_unlock:
	mutex_unlock(&edu.dma_lock);
	peerdma_client_put(dst.client);
out_src:
	peerdma_client_put(src.client);
	return ret;
}

static void edu_detach(struct edu_file *f)
{
	lockdep_assert_held(&f->lock);
	if (!f->attached)
		return;
	peerdma_client_put(f->attached->client);
	kfree(f->attached);
	f->attached = NULL;
}

static int edu_attach(struct edu_file *f, struct peerdma_edu_attach *a)
{
	struct edu_ref *r;
	int ret;

	if (a->flags & ~PEERDMA_EDU_ATTACH_SPLIT_4K)
		return -EINVAL;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	ret = peerdma_client_get(a->peerdma_fd, a->handle, &edu.pdev->dev,
				 (a->flags & PEERDMA_EDU_ATTACH_SPLIT_4K) ?
				 PEERDMA_CLIENT_SPLIT_4K : 0,
				 &edu_client_ops, r, &r->client);
	if (ret) {
		kfree(r);
		return ret;
	}
	mutex_lock(&f->lock);
	edu_detach(f);
	f->attached = r;
	mutex_unlock(&f->lock);
	return 0;
}

static void edu_status(struct edu_file *f, struct peerdma_edu_status *st)
{
	const struct peerdma_dma_map *m;

	memset(st, 0, sizeof(*st));
	mutex_lock(&f->lock);
	if (f->attached) {
		st->attached = 1;
		mutex_lock(&edu.dma_lock);
		st->quiesced = f->attached->quiesced;
		m = f->attached->stopped ? NULL : peerdma_client_map(f->attached->client);
		if (m) {
			st->mapped = 1;
			st->entries = m->entries;
			st->first_dma = m->addrs[0];
		}
		mutex_unlock(&edu.dma_lock);
	}
	mutex_unlock(&f->lock);
}

static long edu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct edu_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;
	union {
		struct peerdma_edu_xfer x;
		struct peerdma_edu_attach a;
		struct peerdma_edu_status st;
	} u;

	switch (cmd) {
	case PEERDMA_EDU_IOC_XFER:
		if (copy_from_user(&u.x, uarg, sizeof(u.x)))
			return -EFAULT;
		return edu_xfer(&u.x);
	case PEERDMA_EDU_IOC_ATTACH:
		if (copy_from_user(&u.a, uarg, sizeof(u.a)))
			return -EFAULT;
		return edu_attach(f, &u.a);
	case PEERDMA_EDU_IOC_STATUS:
		edu_status(f, &u.st);
		return copy_to_user(uarg, &u.st, sizeof(u.st)) ? -EFAULT : 0;
	case PEERDMA_EDU_IOC_DETACH:
		mutex_lock(&f->lock);
		edu_detach(f);
		mutex_unlock(&f->lock);
		return 0;
	}
	return -ENOTTY;
}

static int edu_open(struct inode *inode, struct file *file)
{
	struct edu_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	mutex_init(&f->lock);
	file->private_data = f;
	return 0;
}

static int edu_release(struct inode *inode, struct file *file)
{
	struct edu_file *f = file->private_data;

	mutex_lock(&f->lock);
	edu_detach(f);
	mutex_unlock(&f->lock);
	kfree(f);
	return 0;
}

static const struct file_operations edu_fops = {
	.owner = THIS_MODULE,
	.open = edu_open,
	.release = edu_release,
	.unlocked_ioctl = edu_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice edu_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "peerdma_edu",
	.fops = &edu_fops,
	.mode = 0600,
};

static int edu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret;

	if (edu.pdev)
		return -EBUSY;
	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_iomap_regions(pdev, BIT(0), KBUILD_MODNAME);
	if (ret)
		return ret;
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	pci_set_master(pdev);
	edu.mmio = pcim_iomap_table(pdev)[0];
	if ((ioread32(edu.mmio + EDU_ID) & 0xff) != 0xed) {
		dev_err(&pdev->dev, "not an edu device\n");
		return -ENODEV;
	}
	edu.pdev = pdev;
	ret = misc_register(&edu_misc);
	if (ret)
		edu.pdev = NULL;
	return ret;
}

static void edu_remove(struct pci_dev *pdev)
{
	misc_deregister(&edu_misc);
	edu.pdev = NULL;
}

static const struct pci_device_id edu_ids[] = {
	{ PCI_DEVICE(0x1234, 0x11e8) },
	{ }
};
MODULE_DEVICE_TABLE(pci, edu_ids);

static struct pci_driver edu_driver = {
	.name = "peerdma_edu",
	.id_table = edu_ids,
	.probe = edu_probe,
	.remove = edu_remove,
};

static int __init edu_init(void)
{
	mutex_init(&edu.dma_lock);
	return pci_register_driver(&edu_driver);
}

static void __exit edu_exit(void)
{
	pci_unregister_driver(&edu_driver);
}

module_init(edu_init);
module_exit(edu_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("peerdma test: reference client driver for QEMU's edu DMA device");
