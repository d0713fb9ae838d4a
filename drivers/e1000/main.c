// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma_e1000: a reference NIC driver on peerdma's in-kernel client API.
 *
 * The NIC receives Ethernet frames straight into memory pinned through
 * /dev/peerdma (GPU pages above all) and transmits from it; user space (or a
 * GPU kernel, with the descriptor ring in GPU memory too) consumes frames in
 * place. This file binds the PCI function (8086:100e, the 82540EM that QEMU
 * emulates as -device e1000), resets it, and offers /dev/peerdma_nicN with the
 * ioctls of include/uapi/peerdma_nic.h; rx.c and tx.c hold the data paths.
 *
 * Polling, no interrupts: the consumers this driver is for poll (a GPU
 * kernel polls the ring in GPU memory; a CPU consumer asks RX_POLL for the
 * next batch with a timeout), so an interrupt per frame would only add
 * latency and CPU time; RX_POLL's wait sleeps 50-100 us between looks at
 * the next descriptor. The 82540EM has no MSI: its INTx may be shared, one
 * more reason to leave it masked. A vendor with MSI-X would add a handler
 * that wakes the RX_POLL waiter instead.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "pnic.h"

static DEFINE_IDA(pnic_ida);

static void pnic_free(struct kref *ref)
{
	kfree(container_of(ref, struct pnic, ref));
}

static void pnic_put(struct pnic *nic)
{
	kref_put(&nic->ref, pnic_free);
}

/* the 82540EM's MAC address: loaded from its EEPROM into RAL0/RAH0 at reset */
static void pnic_read_mac(struct pnic *nic)
{
	u32 lo = pnic_rd(nic, E1000_RAL0), hi = pnic_rd(nic, E1000_RAH0);
	int i;

	for (i = 0; i < 4; i++)
		nic->mac[i] = lo >> (8 * i);
	nic->mac[4] = hi;
	nic->mac[5] = hi >> 8;
	pnic_wr(nic, E1000_RAH0, (hi & 0xffff) | E1000_RAH_AV);
}

static void pnic_reset_hw(struct pnic *nic)
{
	int i;

	pnic_wr(nic, E1000_IMC, ~0U);	/* polled: see the top of this file */
	pnic_wr(nic, E1000_RCTL, 0);
	pnic_wr(nic, E1000_TCTL, 0);
	pnic_rd(nic, E1000_STATUS);
	usleep_range(10000, 20000);	/* DMA in flight ends before the reset */
	pnic_wr(nic, E1000_CTRL, pnic_rd(nic, E1000_CTRL) | E1000_CTRL_RST);
	usleep_range(5000, 10000);	/* the SDM asks for 1 us at least */
	pnic_wr(nic, E1000_IMC, ~0U);
	pnic_rd(nic, E1000_ICR);
	pnic_wr(nic, E1000_CTRL, pnic_rd(nic, E1000_CTRL) | E1000_CTRL_SLU);
	for (i = 0; i < 128; i++)
		pnic_wr(nic, E1000_MTA + 4 * i, 0);
	pnic_wr(nic, E1000_RDTR, 0);	/* no receive delay timer */
	pnic_read_mac(nic);
	pnic_rd(nic, E1000_MPC);	/* statistics clear on read */
	pnic_rd(nic, E1000_ROC);
}

static int pnic_info(struct pnic *nic, struct pdma_nic_info *in)
{
	if (in->flags || in->pad)
		return -EINVAL;
	memcpy(in->mac, nic->mac, sizeof(in->mac));
	mutex_lock(&nic->hw_lock);
	in->link_up = !!(pnic_rd(nic, E1000_STATUS) & E1000_STATUS_LU);
	mutex_unlock(&nic->hw_lock);
	in->rx_ring_max = PNIC_RX_RING_MAX;
	in->tx_ring = PNIC_TX_RING;
	in->buf_sizes = BIT(11) | BIT(12);
	return 0;
}

static int pnic_stats(struct pnic *nic, struct pdma_nic_stats *st)
{
	if (st->flags)
		return -EINVAL;
	mutex_lock(&nic->hw_lock);
	/* both clear on read (the SDM; QEMU keeps MPC, which it rarely counts) */
	nic->stats.rx_missed += pnic_rd(nic, E1000_MPC);
	nic->stats.rx_long += pnic_rd(nic, E1000_ROC);
	*st = nic->stats;
	mutex_unlock(&nic->hw_lock);
	st->size = sizeof(*st);
	st->flags = 0;
	return 0;
}

/* every argument starts with { size, flags }: the size must be ours */
static int pnic_copy_in(void *dst, const void __user *src, u32 size)
{
	u32 got;

	if (get_user(got, (const u32 __user *)src))
		return -EFAULT;
	if (got != size)
		return -EINVAL;
	return copy_from_user(dst, src, size) ? -EFAULT : 0;
}

static long pnic_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct pnic *nic = file->private_data;
	void __user *uarg = (void __user *)arg;
	union {
		struct pdma_nic_info in;
		struct pdma_nic_rx_attach at;
		struct pdma_nic_rx_poll po;
		struct pdma_nic_rx_post ps;
		struct pdma_nic_rx_doorbell db;
		struct pdma_nic_tx tx;
		struct pdma_nic_stats st;
	} u;
	u32 size = _IOC_SIZE(cmd);
	bool out = _IOC_DIR(cmd) & _IOC_READ;
	bool owns_tx;
	int ret;

	switch (cmd) {
	case PDMA_NIC_IOC_INFO:
	case PDMA_NIC_IOC_RX_ATTACH:
	case PDMA_NIC_IOC_RX_POLL:
	case PDMA_NIC_IOC_RX_POST:
	case PDMA_NIC_IOC_RX_DOORBELL:
	case PDMA_NIC_IOC_TX:
	case PDMA_NIC_IOC_STATS:
		ret = pnic_copy_in(&u, uarg, size);
		if (ret)
			return ret;
		break;
	case PDMA_NIC_IOC_RX_DETACH:
		size = 0;
		out = false;
		break;
	default:
		return -ENOTTY;
	}

	if (cmd == PDMA_NIC_IOC_TX) {
		/* owns the transmit ring (tx_lock) itself, and takes no other lock */
		ret = pnic_tx(nic, &u.tx);
		goto out;
	}
	/* a ring-in-memory attach's bootstrap transmits: it owns the ring too */
	owns_tx = cmd == PDMA_NIC_IOC_RX_ATTACH && (u.at.flags & PDMA_NIC_RX_RING_IN_MEM);
	if (owns_tx && mutex_lock_interruptible(&nic->tx_lock))
		return -EINTR;
	mutex_lock(&nic->lock);
	/* remove() sets gone under every lock */
	if (nic->gone || READ_ONCE(nic->unbinding)) {
		ret = -ENXIO;
		goto unlock;
	}
	switch (cmd) {
	case PDMA_NIC_IOC_INFO:
		ret = pnic_info(nic, &u.in);
		break;
	case PDMA_NIC_IOC_RX_ATTACH:
		ret = pnic_rx_attach(nic, file, &u.at);
		break;
	case PDMA_NIC_IOC_RX_POLL:
		/* takes and drops nic->lock itself while it waits */
		ret = pnic_rx_poll(nic, file, &u.po);
		break;
	case PDMA_NIC_IOC_RX_POST:
		ret = pnic_rx_post(nic, file, &u.ps);
		break;
	case PDMA_NIC_IOC_RX_DOORBELL:
		ret = pnic_rx_doorbell(nic, file, &u.db);
		break;
	case PDMA_NIC_IOC_RX_DETACH:
		ret = nic->rx && nic->rx->owner == file ? 0 : -EINVAL;
		pnic_rx_detach(nic, file);
		break;
	default:
		ret = pnic_stats(nic, &u.st);
		break;
	}
unlock:
	mutex_unlock(&nic->lock);
	if (owns_tx)
		mutex_unlock(&nic->tx_lock);
out:
	/* TX reports the frames sent even when it timed out */
	if ((!ret || cmd == PDMA_NIC_IOC_TX) && out && copy_to_user(uarg, &u, size)) {
		/* an attachment the caller was not told of would stay EBUSY */
		if (cmd == PDMA_NIC_IOC_RX_ATTACH && !ret) {
			mutex_lock(&nic->lock);
			pnic_rx_detach(nic, file);
			mutex_unlock(&nic->lock);
		}
		return -EFAULT;
	}
	return ret;
}

static int pnic_open(struct inode *inode, struct file *file)
{
	struct miscdevice *misc = file->private_data;
	struct pnic *nic = container_of(misc, struct pnic, misc);

	kref_get(&nic->ref);
	file->private_data = nic;
	return 0;
}

static int pnic_release(struct inode *inode, struct file *file)
{
	struct pnic *nic = file->private_data;

	mutex_lock(&nic->lock);
	if (!nic->gone)
		pnic_rx_detach(nic, file);
	mutex_unlock(&nic->lock);
	pnic_put(nic);
	return 0;
}

static const struct file_operations pnic_fops = {
	.owner = THIS_MODULE,
	.open = pnic_open,
	.release = pnic_release,
	.unlocked_ioctl = pnic_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static int pnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct device *dev = &pdev->dev;
	struct pnic *nic;
	int ret;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_iomap_regions(pdev, BIT(0), KBUILD_MODNAME);
	if (ret)
		return ret;
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret)
		return ret;
	pci_set_master(pdev);

	nic = kzalloc(sizeof(*nic), GFP_KERNEL);
	if (!nic)
		return -ENOMEM;
	kref_init(&nic->ref);
	mutex_init(&nic->tx_lock);
	mutex_init(&nic->lock);
	mutex_init(&nic->hw_lock);
	nic->pdev = pdev;
	nic->mmio = pcim_iomap_table(pdev)[0];
	/* devres: freed after remove(), when no file can reach them any more */
	nic->rx_ring = dmam_alloc_coherent(dev, PNIC_RX_RING_MAX * sizeof(*nic->rx_ring),
					   &nic->rx_ring_dma, GFP_KERNEL);
	nic->tx_ring = dmam_alloc_coherent(dev, PNIC_TX_RING * sizeof(*nic->tx_ring),
					   &nic->tx_ring_dma, GFP_KERNEL);
	if (!nic->rx_ring || !nic->tx_ring) {
		ret = -ENOMEM;
		goto err_put;
	}
	pnic_reset_hw(nic);
	pnic_tx_init_hw(nic);

	nic->id = ida_alloc(&pnic_ida, GFP_KERNEL);
	if (nic->id < 0) {
		ret = nic->id;
		goto err_put;
	}
	snprintf(nic->name, sizeof(nic->name), "peerdma_nic%d", nic->id);
	nic->misc.minor = MISC_DYNAMIC_MINOR;
	nic->misc.name = nic->name;
	nic->misc.fops = &pnic_fops;
	nic->misc.mode = 0600;
	nic->misc.parent = dev;
	ret = misc_register(&nic->misc);
	if (ret)
		goto err_ida;
	pci_set_drvdata(pdev, nic);
	dev_info(dev, "/dev/%s, MAC %pM, link %s\n", nic->name, nic->mac,
		 pnic_rd(nic, E1000_STATUS) & E1000_STATUS_LU ? "up" : "down");
	return 0;

err_ida:
	ida_free(&pnic_ida, nic->id);
err_put:
	dev_err(dev, "probe failed: %d\n", ret);
	pnic_put(nic);
	return ret;
}

static void pnic_remove(struct pci_dev *pdev)
{
	struct pnic *nic = pci_get_drvdata(pdev);

	misc_deregister(&nic->misc);
	/*
	 * A TX call or a ring bootstrap holds tx_lock for as long as the NIC
	 * takes (with the link down, a TX without timeout: forever). Both poll
	 * this flag and end with ENXIO; no lock, as the bootstrap holds hw_lock.
	 */
	WRITE_ONCE(nic->unbinding, true);
	/* open files see ENXIO from now on; the attachment goes now */
	mutex_lock(&nic->tx_lock);
	mutex_lock(&nic->lock);
	if (nic->rx)
		pnic_rx_detach(nic, nic->rx->owner);
	mutex_lock(&nic->hw_lock);
	pnic_rx_stop_hw(nic);
	pnic_wr(nic, E1000_TCTL, 0);
	nic->gone = true;
	mutex_unlock(&nic->hw_lock);
	mutex_unlock(&nic->lock);
	mutex_unlock(&nic->tx_lock);
	ida_free(&pnic_ida, nic->id);
	pnic_put(nic);
}

static const struct pci_device_id pnic_ids[] = {
	{ PCI_DEVICE(PCI_VENDOR_ID_INTEL, 0x100e) },	/* 82540EM */
	{ }
};
MODULE_DEVICE_TABLE(pci, pnic_ids);

static struct pci_driver pnic_driver = {
	.name = KBUILD_MODNAME,
	.id_table = pnic_ids,
	.probe = pnic_probe,
	.remove = pnic_remove,
};
module_pci_driver(pnic_driver);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("peerdma reference NIC driver: e1000 receive and transmit in pinned GPU memory");
