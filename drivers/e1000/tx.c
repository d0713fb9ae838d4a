// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma_e1000 transmit: frames sent straight from a pinned range (GPU
 * memory built them), one legacy descriptor per I/O-contiguous piece. The
 * pin is mapped for the NIC for the duration of one TX call: the call waits
 * until the NIC reports the frames sent; on a timeout, an error or a quiesce
 * it stops the transmitter and drops what is still queued, so that no
 * descriptor names an address after the mapping goes.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/ktime.h>
#include <linux/overflow.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "pnic.h"

#define PNIC_TX_BATCH	((PNIC_TX_RING - 1) / 2)	/* a frame takes 1 or 2 descriptors */

/* empty ring, transmitter on (pad short frames, the usual 802.3 timings) */
void pnic_tx_init_hw(struct pnic *nic)
{
	memset(nic->tx_ring, 0, PNIC_TX_RING * sizeof(*nic->tx_ring));
	nic->tx_next = 0;
	pnic_wr(nic, E1000_TDBAL, lower_32_bits(nic->tx_ring_dma));
	pnic_wr(nic, E1000_TDBAH, upper_32_bits(nic->tx_ring_dma));
	pnic_wr(nic, E1000_TDLEN, PNIC_TX_RING * sizeof(*nic->tx_ring));
	pnic_wr(nic, E1000_TDH, 0);
	pnic_wr(nic, E1000_TDT, 0);
	pnic_wr(nic, E1000_TIPG, 10 | 8 << 10 | 6 << 20);
	pnic_wr(nic, E1000_TCTL, E1000_TCTL_EN | E1000_TCTL_PSP | E1000_TCTL_CT |
		E1000_TCTL_COLD);
}

/* stop the transmitter and wait until the NIC no longer reads descriptors */
static void pnic_tx_stop_hw(struct pnic *nic)
{
	u32 tdh, prev;
	int i;

	lockdep_assert_held(&nic->hw_lock);
	pnic_wr(nic, E1000_TCTL, 0);
	prev = pnic_rd(nic, E1000_TDH);
	for (i = 0; i < 100; i++) {
		usleep_range(20, 40);
		tdh = pnic_rd(nic, E1000_TDH);
		if (tdh == prev)
			break;
		prev = tdh;
	}
}

static void pnic_tx_quiesce(void *priv, u64 handle)
{
	struct pnic *nic = priv;
	u64 t0 = ktime_get_ns();

	mutex_lock(&nic->hw_lock);
	if (!nic->tx_stopped && !nic->gone)
		pnic_tx_stop_hw(nic);
	nic->tx_stopped = true;
	nic->stats.quiesces++;
	nic->stats.quiesce_ns += ktime_get_ns() - t0;
	mutex_unlock(&nic->hw_lock);
}

static const struct peerdma_client_ops pnic_tx_ops = {
	.quiesce = pnic_tx_quiesce,
};

static void pnic_tx_desc(struct pnic *nic, dma_addr_t addr, u32 len, u32 cmd)
{
	struct e1000_tx_desc *d = &nic->tx_ring[nic->tx_next];

	lockdep_assert_held(&nic->hw_lock);
	d->addr = cpu_to_le64(addr);
	d->lower = cpu_to_le32(len | E1000_TXD_CMD_IFCS | cmd);
	d->upper = 0;
	nic->tx_next = (nic->tx_next + 1) % PNIC_TX_RING;
}

/* may the running TX call go on: -ENXIO unbinding, -ENODEV its pin quiesced */
static int pnic_tx_may_run(struct pnic *nic)
{
	lockdep_assert_held(&nic->hw_lock);
	if (READ_ONCE(nic->unbinding))
		return -ENXIO;
	return nic->tx_stopped ? -ENODEV : 0;
}

static bool pnic_tx_done(struct pnic *nic, u32 slot)
{
	return le32_to_cpu(READ_ONCE(nic->tx_ring[slot].upper)) & E1000_TXD_STAT_DD;
}

/* one frame from coherent memory (the RING_IN_MEM bootstrap): sent or -ETIMEDOUT */
int pnic_tx_raw(struct pnic *nic, dma_addr_t addr, u32 len)
{
	u32 slot = nic->tx_next;
	int i;

	lockdep_assert_held(&nic->tx_lock);
	lockdep_assert_held(&nic->hw_lock);
	pnic_tx_desc(nic, addr, len, E1000_TXD_CMD_EOP | E1000_TXD_CMD_RS);
	wmb();	/* the descriptor in memory before the NIC may fetch it */
	pnic_wr(nic, E1000_TDT, nic->tx_next);
	for (i = 0; i < 1000; i++) {
		if (pnic_tx_done(nic, slot))
			return 0;
		usleep_range(10, 20);
	}
	/*
	 * The caller frees the staging buffer next: a descriptor the NIC may
	 * still fetch must not name it
	 */
	pnic_tx_stop_hw(nic);
	pnic_tx_init_hw(nic);
	return -ETIMEDOUT;
}

/* one frame's descriptors: split where the pinned pages are not I/O-contiguous */
static int pnic_tx_frame(struct pnic *nic, struct peerdma_client *c,
			 const struct pdma_nic_tx_frame *f, u32 *last)
{
	u64 off = f->offset, end, seg;
	dma_addr_t addr;
	int ret;

	/* a wrapped end would queue nothing and leave *last unset */
	if (f->pad || f->len < 60 || f->len > PNIC_MAX_FRAME ||
	    check_add_overflow(f->offset, (u64)f->len, &end))
		return -EINVAL;
	while (off < end) {
		seg = end - off;
		ret = peerdma_client_dma_addr(c, off, seg, &addr);
		if (ret == -EINVAL) {	/* up to the next 4 KiB boundary */
			seg = min_t(u64, seg, SZ_4K - (off & (SZ_4K - 1)));
			ret = peerdma_client_dma_addr(c, off, seg, &addr);
		}
		if (ret)
			return ret == -ERANGE ? -EINVAL : ret;
		*last = nic->tx_next;
		pnic_tx_desc(nic, addr, seg, off + seg == end ?
			     E1000_TXD_CMD_EOP | E1000_TXD_CMD_RS : 0);
		off += seg;
	}
	return 0;
}

/* queue up to PNIC_TX_BATCH frames, ring the doorbell, wait until sent */
static int pnic_tx_batch(struct pnic *nic, struct peerdma_client *c,
			 const struct pdma_nic_tx_frame *f, u32 n,
			 unsigned long deadline, u32 *done)
{
	u32 last[PNIC_TX_BATCH], i, sent = 0;
	int ret = 0;

	lockdep_assert_held(&nic->tx_lock);
	mutex_lock(&nic->hw_lock);
	for (i = 0; !ret && i < n; i++) {
		ret = pnic_tx_may_run(nic) ?: pnic_tx_frame(nic, c, &f[i], &last[i]);
		if (ret) {	/* nothing of this batch goes out */
			mutex_unlock(&nic->hw_lock);
			return ret;
		}
	}
	wmb();	/* descriptors in memory before the NIC may fetch them */
	pnic_wr(nic, E1000_TDT, nic->tx_next);
	nic->stats.doorbells++;
	mutex_unlock(&nic->hw_lock);

	for (;;) {
		mutex_lock(&nic->hw_lock);
		while (sent < n && pnic_tx_done(nic, last[sent])) {
			sent++;
			nic->stats.tx_frames++;
		}
		ret = pnic_tx_may_run(nic);
		mutex_unlock(&nic->hw_lock);
		if (sent == n || ret)
			break;
		if (time_after(jiffies, deadline)) {
			ret = -ETIMEDOUT;
			break;
		}
		/* tx_lock is held: a kill must not wait for the whole call */
		if (signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		usleep_range(20, 50);
	}
	*done += sent;
	return ret;
}

/*
 * Own the transmit ring and map the call's pin for the NIC: 0, or -EINTR,
 * -ENXIO (unbound), peerdma_client_get()'s error with the ring not owned
 */
static int pnic_tx_begin(struct pnic *nic, struct pdma_nic_tx *t, struct peerdma_client **c)
{
	int ret;

	if (mutex_lock_interruptible(&nic->tx_lock))
		return -EINTR;
	/* remove() sets gone under tx_lock too */
	if (nic->gone || READ_ONCE(nic->unbinding)) {
		ret = -ENXIO;
		goto unlock;
	}
	/*
	 * Before the client exists: a quiesce of this call's pin can come as
	 * soon as peerdma_client_get() has put it on the pin, and the
	 * tx_stopped it sets must stay set. (Earlier clients are put: their
	 * quiesce no longer comes.)
	 */
	mutex_lock(&nic->hw_lock);
	if (nic->tx_stopped)	/* an earlier call's pin was quiesced */
		pnic_tx_init_hw(nic);
	nic->tx_stopped = false;
	mutex_unlock(&nic->hw_lock);
	ret = peerdma_client_get(t->peerdma_fd, t->handle, &nic->pdev->dev,
				 PEERDMA_CLIENT_SPLIT_4K, &pnic_tx_ops, nic, c);
	if (!ret)
		return 0;
unlock:
	mutex_unlock(&nic->tx_lock);
	return ret;
}

/* unmap the pin and give the ring up; on an error, nothing stays queued */
static void pnic_tx_end(struct pnic *nic, struct peerdma_client *c, int ret)
{
	if (ret) {	/* nothing may stay queued once the mapping goes */
		mutex_lock(&nic->hw_lock);
		pnic_tx_stop_hw(nic);
		pnic_tx_init_hw(nic);
		mutex_unlock(&nic->hw_lock);
	}
	peerdma_client_put(c);
	mutex_unlock(&nic->tx_lock);
}

/*
 * The frame list is read with page faults disabled: a page that faults
 * slowly (userfaultfd, FUSE) must not hold the ring, and with it other TX
 * calls, a ring-in-memory attach and an unbind. When a read fails, the call
 * is between batches, nothing is queued: it gives the ring and its mapping
 * up while the batch is faulted in, and begins again.
 */
int pnic_tx(struct pnic *nic, struct pdma_nic_tx *t)
{
	const struct pdma_nic_tx_frame __user *uf = u64_to_user_ptr(t->frames);
	unsigned long deadline = jiffies + msecs_to_jiffies(max(t->timeout_ms, 0));
	struct pdma_nic_tx_frame *f;
	struct peerdma_client *c;
	u32 n, at = 0;
	size_t len;
	int ret;

	t->done = 0;
	if (t->flags || !t->n)
		return -EINVAL;
	if (t->timeout_ms < 0)
		deadline = jiffies + MAX_JIFFY_OFFSET;
	f = kmalloc_array(PNIC_TX_BATCH, sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	ret = pnic_tx_begin(nic, t, &c);
	if (ret)
		goto out;
	while (!ret && at < t->n) {
		n = min_t(u32, t->n - at, PNIC_TX_BATCH);
		len = n * sizeof(*f);
		if (signal_pending(current)) {
			ret = -EINTR;
			break;
		}
		if (copy_from_user_nofault(f, uf + at, len)) {
			pnic_tx_end(nic, c, 0);
			if (!fault_in_readable((const char __user *)(uf + at), len))
				ret = pnic_tx_begin(nic, t, &c);
			else
				ret = signal_pending(current) ? -EINTR : -EFAULT;
			if (ret)	/* the ring is not ours */
				goto out;
			continue;
		}
		ret = pnic_tx_batch(nic, c, f, n, deadline, &t->done);
		at += n;
	}
	pnic_tx_end(nic, c, ret);
out:
	kfree(f);
	return ret;
}
