// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma_e1000 receive: a pinned range (GPU memory) split into receive
 * buffers, the descriptor ring in coherent host memory or in the pinned range
 * itself, completions reported without touching the payload, and the quiesce
 * callback that stops the receiver before peerdma lets the pages go.
 *
 * What the 82540EM (and QEMU's model of it, hw/net/e1000.c) does with a legacy
 * receive descriptor: it reads the whole 16 bytes, DMAs the frame to the
 * buffer address (a zero address makes it skip the descriptor), then writes
 * the whole descriptor back with the address it read and the new length, then
 * the status byte with DD (and EOP on a frame's last buffer) set. So the
 * address survives the write-back and a ring in GPU memory can be reused by
 * clearing status bytes only. The model keeps any status bit but DD that it
 * found in memory: status must be cleared before a descriptor is handed back.
 * The length includes the 4-byte FCS unless RCTL.SECRC strips it (QEMU
 * counts those 4 bytes but does not write them). Frames above 1522 bytes are
 * dropped (LPE off) and counted in ROC; QEMU pads runts to 60 bytes.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/ktime.h>
#include <linux/mii.h>
#include <linux/pagemap.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "pnic.h"

#define PNIC_BOOT_CHUNK	1024	/* bytes of ring image per loopback frame */
#define PNIC_BOOT_CHUNKS 15	/* one receive address register each */

/*
 * Disable the receiver and wait until the NIC is idle: the 8254x finishes
 * the frame it is writing, then stops; its head pointer stops moving.
 */
void pnic_rx_stop_hw(struct pnic *nic)
{
	u32 rdh, prev;
	int i;

	lockdep_assert_held(&nic->hw_lock);
	pnic_wr(nic, E1000_RCTL, 0);
	prev = pnic_rd(nic, E1000_RDH);	/* also flushes the posted write */
	for (i = 0; i < 100; i++) {
		usleep_range(20, 40);
		rdh = pnic_rd(nic, E1000_RDH);
		if (rdh == prev)
			break;
		prev = rdh;
	}
}

/*
 * peerdma revokes the pin: stop receive DMA before returning. Runs under
 * peerdma's pin lock; takes hw_lock only (see pnic.h).
 */
static void pnic_rx_quiesce(void *priv, u64 handle)
{
	struct pnic_rx *r = priv;
	struct pnic *nic = r->nic;
	u64 t0 = ktime_get_ns();

	/*
	 * A ring-in-memory attach holds hw_lock through its loopback
	 * bootstrap (seconds while QEMU stalls reception): make it give up
	 * within one try instead of keeping the revoker (and the GPU driver's
	 * lock) waiting.
	 */
	WRITE_ONCE(r->abort, true);
	mutex_lock(&nic->hw_lock);
	if (!r->stopped && nic->rx == r && !nic->gone)
		pnic_rx_stop_hw(nic);
	r->stopped = true;
	nic->stats.quiesces++;
	nic->stats.quiesce_ns += ktime_get_ns() - t0;
	mutex_unlock(&nic->hw_lock);
}

static const struct peerdma_client_ops pnic_rx_ops = {
	.quiesce = pnic_rx_quiesce,
};

static u32 pnic_rctl(struct pnic_rx *r)
{
	u32 rctl = E1000_RCTL_EN | E1000_RCTL_BAM;

	if (r->buf_size == 4096)
		rctl |= E1000_RCTL_BSEX | E1000_RCTL_SZ_4096;	/* else 2048: 0 */
	if (r->flags & PDMA_NIC_RX_PROMISC)
		rctl |= E1000_RCTL_UPE;
	if (r->flags & PDMA_NIC_RX_STRIP_CRC)
		rctl |= E1000_RCTL_SECRC;
	return rctl;
}

static void pnic_set_ring(struct pnic *nic, dma_addr_t ring, u32 entries, u32 tail)
{
	lockdep_assert_held(&nic->hw_lock);
	pnic_wr(nic, E1000_RDBAL, lower_32_bits(ring));
	pnic_wr(nic, E1000_RDBAH, upper_32_bits(ring));
	pnic_wr(nic, E1000_RDLEN, entries * sizeof(struct e1000_rx_desc));
	pnic_wr(nic, E1000_RDH, 0);
	pnic_wr(nic, E1000_RDT, tail);
}

/* give the NIC every buffer waiting in the FIFO that the ring has room for */
static void pnic_rx_refill(struct pnic *nic, struct pnic_rx *r)
{
	u32 posted = 0, b;
	struct e1000_rx_desc *d;

	lockdep_assert_held(&nic->hw_lock);
	while (r->fifo_len && (r->next_use + 1) % r->entries != r->next_clean) {
		b = r->fifo[r->fifo_head];
		r->fifo_head = (r->fifo_head + 1) % r->nbufs;
		r->fifo_len--;
		d = &nic->rx_ring[r->next_use];
		d->addr = cpu_to_le64(r->buf_dma[b]);
		d->length = 0;
		d->status = 0;
		d->errors = 0;
		r->slot_buf[r->next_use] = b;
		r->state[b] = PNIC_BUF_NIC;
		r->next_use = (r->next_use + 1) % r->entries;
		posted++;
	}
	if (!posted)
		return;
	wmb();	/* descriptors in memory before the NIC may fetch them */
	pnic_wr(nic, E1000_RDT, r->next_use);
	nic->stats.doorbells++;
}

/* completed descriptors -> r->batch, in ring order; never reads the payload */
static u32 pnic_rx_reap(struct pnic *nic, struct pnic_rx *r, u32 max)
{
	struct pdma_nic_cqe *c;
	struct e1000_rx_desc *d;
	u8 st, err;
	u32 n = 0;

	lockdep_assert_held(&nic->hw_lock);
	while (n < max && r->next_clean != r->next_use) {
		d = &nic->rx_ring[r->next_clean];
		st = READ_ONCE(d->status);
		if (!(st & E1000_RXD_STAT_DD))
			break;
		dma_rmb();	/* length and errors after the DD bit */
		err = d->errors;
		c = &r->batch[n++];
		c->buf = r->slot_buf[r->next_clean];
		c->len = le16_to_cpu(d->length);
		c->errors = err;
		c->status = (st & E1000_RXD_STAT_EOP) ? PDMA_NIC_CQE_EOP : 0;
		if (!(st & E1000_RXD_STAT_IXSM)) {
			if ((st & E1000_RXD_STAT_IPCS) && !(err & E1000_RXD_ERR_IPE))
				c->status |= PDMA_NIC_CQE_IPCS;
			if ((st & E1000_RXD_STAT_TCPCS) && !(err & E1000_RXD_ERR_TCPE))
				c->status |= PDMA_NIC_CQE_L4CS;
		}
		if (err)
			c->status |= PDMA_NIC_CQE_ERR;
		d->status = 0;
		r->state[c->buf] = PNIC_BUF_USER;
		r->next_clean = (r->next_clean + 1) % r->entries;
		nic->stats.rx_frames++;
		nic->stats.rx_bytes += c->len;
		if (err)
			nic->stats.rx_errors++;
	}
	return n;
}

/*
 * RING_IN_MEM: the driver has no CPU mapping of GPU memory, so the NIC itself
 * writes the ring image there. With the PHY in loopback, each transmitted
 * frame (1 KiB of descriptors from a coherent staging buffer) is received into
 * a bootstrap descriptor aimed at its place in the pinned range. Only those
 * frames may land: the receive filter takes exactly their destination
 * addresses (each frame starts with a descriptor's buffer address) in
 * RA[1..15], with our own address, broadcast and promiscuous modes off, so a
 * frame from the wire is dropped meanwhile. A loopback frame the NIC could
 * not take (QEMU stalls reception for 1 s after each RCTL write, a Windows
 * workaround) never touched a descriptor: it is sent again.
 */
static int pnic_rx_ring_to_mem(struct pnic *nic, struct pnic_rx *r,
			       const struct e1000_rx_desc *image, dma_addr_t image_dma)
{
	u32 bytes = r->entries * sizeof(*image), chunks, k, len, rah0, tries, w;
	struct e1000_rx_desc *d;
	int ret = 0;

	lockdep_assert_held(&nic->hw_lock);
	chunks = DIV_ROUND_UP(bytes, PNIC_BOOT_CHUNK);
	if (chunks > PNIC_BOOT_CHUNKS)
		return -EINVAL;
	memset(nic->rx_ring, 0, round_up(chunks + 1, 8) * sizeof(*d));
	for (k = 0; k < chunks; k++) {
		u64 dst = le64_to_cpu(image[k * PNIC_BOOT_CHUNK / sizeof(*image)].addr);

		nic->rx_ring[k].addr = cpu_to_le64(r->ring_dma + k * PNIC_BOOT_CHUNK);
		pnic_wr(nic, E1000_RAL(k + 1), lower_32_bits(dst));
		pnic_wr(nic, E1000_RAH(k + 1), (upper_32_bits(dst) & 0xffff) | E1000_RAH_AV);
	}
	rah0 = pnic_rd(nic, E1000_RAH0);
	pnic_wr(nic, E1000_RAH0, rah0 & ~E1000_RAH_AV);
	wmb();	/* bootstrap descriptors before the NIC may fetch them */
	pnic_set_ring(nic, nic->rx_ring_dma, round_up(chunks + 1, 8), chunks);
	pnic_wr(nic, E1000_RCTL, E1000_RCTL_EN | E1000_RCTL_SECRC);
	ret = pnic_phy_write(nic, MII_BMCR, BMCR_LOOPBACK);
	for (k = 0; !ret && k < chunks; k++) {
		len = min_t(u32, PNIC_BOOT_CHUNK, bytes - k * PNIC_BOOT_CHUNK);
		d = &nic->rx_ring[k];
		for (tries = 0; !ret && tries < 100; tries++) {
			if (READ_ONCE(r->abort)) {	/* revoked meanwhile */
				ret = -ENODEV;
				break;
			}
			if (READ_ONCE(nic->unbinding)) {
				ret = -ENXIO;
				break;
			}
			ret = pnic_tx_raw(nic, image_dma + k * PNIC_BOOT_CHUNK, len);
			/* received within microseconds, or never: 20 ms */
			for (w = 0; !ret && w < 20 && !(READ_ONCE(d->status) &
							E1000_RXD_STAT_DD); w++)
				usleep_range(1000, 2000);
			if (READ_ONCE(d->status) & E1000_RXD_STAT_DD)
				break;
		}
		dma_rmb();	/* the length after the DD bit */
		if (!ret && (!(d->status & E1000_RXD_STAT_DD) || le16_to_cpu(d->length) != len))
			ret = -EIO;
	}
	pnic_phy_write(nic, MII_BMCR, BMCR_ANENABLE | BMCR_FULLDPLX | BMCR_SPEED1000);
	pnic_rx_stop_hw(nic);
	for (k = 0; k < chunks; k++)
		pnic_wr(nic, E1000_RAH(k + 1), 0);
	pnic_wr(nic, E1000_RAH0, rah0);
	if (ret && ret != -ENODEV && ret != -ENXIO)
		dev_err(&nic->pdev->dev, "ring to pinned memory by loopback: %d\n", ret);
	return ret;
}

static void pnic_rx_free(struct pnic_rx *r)
{
	kvfree(r->buf_dma);
	kvfree(r->slot_buf);
	kvfree(r->state);
	kvfree(r->fifo);
	kfree(r);
}

/* buffers and ring from the request and the pin's size (no hardware yet) */
static int pnic_rx_layout(struct pnic_rx *r, struct pdma_nic_rx_attach *a, u64 pinned)
{
	u64 slots, e;

	/* first: every division below is by buf_size */
	if (a->buf_size != 2048 && a->buf_size != 4096)
		return -EINVAL;
	if (a->offset % a->buf_size || a->len % a->buf_size ||
	    a->offset >= pinned || a->len > pinned - a->offset)
		return -EINVAL;
	slots = a->len / a->buf_size;
	if (a->ring_entries && (a->ring_entries % 8 || a->ring_entries > PNIC_RX_RING_MAX))
		return -EINVAL;
	if (!(a->flags & PDMA_NIC_RX_RING_IN_MEM)) {
		r->nbufs = min_t(u64, slots, U32_MAX);
		e = a->ring_entries ? a->ring_entries :
		    min_t(u64, round_down(slots, 8), PNIC_RX_RING_MAX);
		r->bufs_offset = a->offset;
	} else {
		/* descriptor i names buffer i: as many buffers as descriptors */
		e = a->ring_entries;
		if (e > PNIC_RX_RING_IN_MEM_MAX)
			return -EINVAL;
		if (!e) {
			e = round_down(slots * a->buf_size / (a->buf_size + 16), 8);
			e = min_t(u64, e, PNIC_RX_RING_IN_MEM_MAX);
		}
		while (e && e + DIV_ROUND_UP(e * 16, a->buf_size) > slots && !a->ring_entries)
			e -= 8;
		if (e + DIV_ROUND_UP(e * 16, a->buf_size) > slots)
			return -EINVAL;
		r->nbufs = e;
		r->ring_offset = a->offset;
		r->bufs_offset = a->offset + round_up(e * 16, a->buf_size);
	}
	if (r->nbufs < PNIC_MIN_BUFS || e < PNIC_MIN_BUFS)
		return -EINVAL;
	r->entries = e;
	r->buf_size = a->buf_size;
	r->flags = a->flags;
	return 0;
}

static int pnic_rx_alloc(struct pnic_rx *r)
{
	r->buf_dma = kvcalloc(r->nbufs, sizeof(*r->buf_dma), GFP_KERNEL);
	r->slot_buf = kvcalloc(r->entries, sizeof(*r->slot_buf), GFP_KERNEL);
	r->state = kvcalloc(r->nbufs, sizeof(*r->state), GFP_KERNEL);
	r->fifo = kvcalloc(r->nbufs, sizeof(*r->fifo), GFP_KERNEL);
	return r->buf_dma && r->slot_buf && r->state && r->fifo ? 0 : -ENOMEM;
}

/* every buffer's I/O address, from the client mapping only */
static int pnic_rx_map(struct pnic_rx *r)
{
	u32 i;
	int ret = 0;

	if (r->flags & PDMA_NIC_RX_RING_IN_MEM)
		ret = peerdma_client_dma_addr(r->client, r->ring_offset,
					      r->entries * sizeof(struct e1000_rx_desc),
					      &r->ring_dma);
	for (i = 0; !ret && i < r->nbufs; i++)
		ret = peerdma_client_dma_addr(r->client,
					      r->bufs_offset + (u64)i * r->buf_size,
					      r->buf_size, &r->buf_dma[i]);
	/* a buffer over discontiguous pages: not a layout the NIC can use */
	return ret == -ERANGE ? -EINVAL : ret;
}

static int pnic_rx_start(struct pnic *nic, struct pnic_rx *r, struct e1000_rx_desc *image,
			 dma_addr_t image_dma)
{
	u32 i;
	int ret;

	lockdep_assert_held(&nic->hw_lock);
	if (r->stopped)
		return -ENODEV;
	ret = pnic_rx_map(r);
	if (ret)
		return ret;
	pnic_rx_stop_hw(nic);
	if (r->flags & PDMA_NIC_RX_RING_IN_MEM) {
		lockdep_assert_held(&nic->tx_lock);	/* the bootstrap transmits */
		if (nic->tx_stopped) {
			pnic_tx_init_hw(nic);
			nic->tx_stopped = false;
		}
		for (i = 0; i < r->entries; i++)
			image[i].addr = cpu_to_le64(r->buf_dma[i]);
		ret = pnic_rx_ring_to_mem(nic, r, image, image_dma);
		if (ret)
			return ret;
		/* every descriptor but one to the NIC (head == tail: none) */
		pnic_set_ring(nic, r->ring_dma, r->entries, r->entries - 1);
		nic->stats.doorbells++;
	} else {
		memset(nic->rx_ring, 0, r->entries * sizeof(*nic->rx_ring));
		for (i = 0; i < r->nbufs; i++) {
			r->fifo[i] = i;
			r->state[i] = PNIC_BUF_FREE;
		}
		r->fifo_len = r->nbufs;
		pnic_set_ring(nic, nic->rx_ring_dma, r->entries, 0);
		pnic_rx_refill(nic, r);
	}
	pnic_wr(nic, E1000_RCTL, pnic_rctl(r));
	return 0;
}

int pnic_rx_attach(struct pnic *nic, struct file *owner, struct pdma_nic_rx_attach *a)
{
	struct device *dev = &nic->pdev->dev;
	struct e1000_rx_desc *image = NULL;
	const struct peerdma_dma_map *m;
	dma_addr_t image_dma = 0;
	size_t image_len = 0;
	struct pnic_rx *r;
	int ret;

	lockdep_assert_held(&nic->lock);
	if (a->flags & ~PDMA_NIC_RX_FLAGS)
		return -EINVAL;
	if ((a->flags & PDMA_NIC_RX_RING_IN_MEM) && !capable(CAP_SYS_RAWIO))
		return -EPERM;
	if (nic->rx)
		return -EBUSY;
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	r->nic = nic;
	r->owner = owner;
	ret = peerdma_client_get(a->peerdma_fd, a->handle, dev, PEERDMA_CLIENT_SPLIT_4K,
				 &pnic_rx_ops, r, &r->client);
	if (ret) {
		kfree(r);
		return ret;
	}
	m = peerdma_client_map(r->client);
	ret = m ? pnic_rx_layout(r, a, m->pinned_len) : -ENODEV;
	if (!ret)
		ret = pnic_rx_alloc(r);
	if (!ret && (r->flags & PDMA_NIC_RX_RING_IN_MEM)) {
		image_len = r->entries * sizeof(*image);
		image = dma_alloc_coherent(dev, image_len, &image_dma, GFP_KERNEL);
		if (!image)
			ret = -ENOMEM;
	}
	if (!ret) {
		mutex_lock(&nic->hw_lock);
		ret = pnic_rx_start(nic, r, image, image_dma);
		if (!ret)
			nic->rx = r;
		else
			pnic_rx_stop_hw(nic);
		mutex_unlock(&nic->hw_lock);
	}
	if (image)
		dma_free_coherent(dev, image_len, image, image_dma);
	if (ret) {
		peerdma_client_put(r->client);
		pnic_rx_free(r);
		return ret;
	}
	a->nbufs = r->nbufs;
	a->ring_entries = r->entries;
	a->bufs_offset = r->bufs_offset;
	a->ring_offset = r->ring_offset;
	return 0;
}

/* release @owner's attachment in any state (stopped first, then unmapped) */
void pnic_rx_detach(struct pnic *nic, struct file *owner)
{
	struct pnic_rx *r = nic->rx;

	lockdep_assert_held(&nic->lock);
	if (!r || r->owner != owner)
		return;
	mutex_lock(&nic->hw_lock);
	if (!r->stopped)
		pnic_rx_stop_hw(nic);
	r->stopped = true;
	nic->rx = NULL;
	mutex_unlock(&nic->hw_lock);
	/* not under hw_lock: put() takes peerdma's pin lock */
	peerdma_client_put(r->client);
	pnic_rx_free(r);
}

static struct pnic_rx *pnic_rx_of(struct pnic *nic, struct file *owner, bool ring_in_mem)
{
	struct pnic_rx *r = nic->rx;

	if (!r || r->owner != owner ||
	    !!(r->flags & PDMA_NIC_RX_RING_IN_MEM) != ring_in_mem)
		return NULL;
	return r;
}

/*
 * User memory is never touched with a fault allowed under nic->lock: a page
 * that faults slowly (userfaultfd, FUSE) would hold every other file's call
 * and an unbind for as long. The copy runs with faults disabled; when it
 * fails, the caller's state is consistent, and this drops the lock, faults
 * the range in and takes the lock again: -EAGAIN (look again: the
 * attachment may have gone meanwhile), -EINTR (a signal ended the wait) or
 * -EFAULT (not mapped).
 */
static int pnic_fault_in(struct pnic *nic, void __user *uaddr, size_t len, bool write)
{
	size_t left;

	mutex_unlock(&nic->lock);
	left = write ? fault_in_writeable(uaddr, len) : fault_in_readable(uaddr, len);
	mutex_lock(&nic->lock);
	if (!left)
		return -EAGAIN;
	return signal_pending(current) ? -EINTR : -EFAULT;
}

/*
 * Deliver reaped completions (r->batch), oldest first: 0, -EAGAIN or -EFAULT
 * (see pnic_fault_in; they stay pending); *done grows by what was delivered.
 */
static int pnic_rx_deliver(struct pnic *nic, struct pnic_rx *r, struct pdma_nic_cqe __user *uc,
			   u32 max, u32 *done)
{
	u32 n = min(r->npending, max - *done);

	if (copy_to_user_nofault(uc + *done, r->batch, n * sizeof(*uc)))
		return pnic_fault_in(nic, uc + *done, n * sizeof(*uc), true);
	r->npending -= n;
	memmove(r->batch, r->batch + n, r->npending * sizeof(*r->batch));
	*done += n;
	return 0;
}

/*
 * Completions in arrival order; waits up to timeout_ms for the first,
 * dropping nic->lock while it sleeps or faults the cqes array in (a detach or
 * close may come meanwhile). A completion is never lost to a bad cqes
 * pointer: what could not be copied is delivered first by the next RX_POLL.
 */
int pnic_rx_poll(struct pnic *nic, struct file *owner, struct pdma_nic_rx_poll *p)
{
	struct pdma_nic_cqe __user *uc = u64_to_user_ptr(p->cqes);
	unsigned long deadline = jiffies + msecs_to_jiffies(max(p->timeout_ms, 0));
	bool stopped = false, drained = false;
	struct pnic_rx *r;
	u32 n, done = 0;
	int ret = 0;
	u64 t0;

	lockdep_assert_held(&nic->lock);
	if (p->flags || p->pad || !p->max)
		return -EINVAL;
	for (;;) {
		r = pnic_rx_of(nic, owner, false);
		if (!r)
			return nic->gone ? -ENXIO : -EINVAL;
		if (!r->npending) {
			t0 = ktime_get_ns();
			mutex_lock(&nic->hw_lock);
			n = min_t(u32, p->max - done, PNIC_POLL_BATCH);
			r->npending = pnic_rx_reap(nic, r, n);
			stopped = r->stopped;
			nic->stats.reap_ns += ktime_get_ns() - t0;
			mutex_unlock(&nic->hw_lock);
			drained = r->npending < PNIC_POLL_BATCH;
		}
		if (r->npending) {
			/* reaped: theirs once delivered */
			ret = pnic_rx_deliver(nic, r, uc, p->max, &done);
			if (ret == -EAGAIN)	/* the lock went: look again */
				ret = 0;
			else if (ret || done == p->max || drained)
				break;
			continue;
		}
		if (done)
			break;
		if (stopped)
			return -ENODEV;
		if (!p->timeout_ms || (p->timeout_ms > 0 && time_after(jiffies, deadline)))
			break;
		if (signal_pending(current))
			return -EINTR;
		mutex_unlock(&nic->lock);
		usleep_range(50, 100);
		mutex_lock(&nic->lock);
		if (nic->gone)
			return -ENXIO;
	}
	/* a copy failed: what was delivered before it counts, else EFAULT */
	if (ret && !done)
		return ret;
	p->n = done;
	return 0;
}

/* the @k-th buffer staged by the RX_POST in progress, just past the fifo */
static u32 *pnic_rx_staged(struct pnic_rx *r, u32 k)
{
	return &r->fifo[(r->fifo_head + r->fifo_len + k) % r->nbufs];
}

/*
 * Buffers back to the NIC, all or none: each must be user-owned (not posted
 * twice). The indices come in batches; each is checked and staged in the
 * fifo past its end (room: a staged buffer was the user's, so it is in
 * neither the fifo nor the ring), and the call commits them at once. Only
 * RX_POLL and RX_POST, both under nic->lock, touch the fifo and the states.
 * Indices that cannot be read without a fault: nothing staged stays, the
 * lock goes while they are faulted in, and the call starts over.
 */
int pnic_rx_post(struct pnic *nic, struct file *owner, struct pdma_nic_rx_post *p)
{
	u32 __user *ub = u64_to_user_ptr(p->bufs);
	u32 done, staged, n, i, b;
	struct pnic_rx *r;
	int ret;
	u64 t0;

	lockdep_assert_held(&nic->lock);
again:
	r = pnic_rx_of(nic, owner, false);
	if (!r)
		return nic->gone ? -ENXIO : -EINVAL;
	if (p->flags || p->pad || p->n > r->nbufs)
		return -EINVAL;
	done = 0;
	staged = 0;
	ret = 0;
	while (!ret && done < p->n) {
		n = min_t(u32, p->n - done, PNIC_POLL_BATCH);
		if (copy_from_user_nofault(r->post_idx, ub + done, n * sizeof(*ub))) {
			ret = -EAGAIN;
			break;
		}
		mutex_lock(&nic->hw_lock);
		if (r->stopped)		/* revoked: ENODEV before any index check */
			ret = -ENODEV;
		for (i = 0; !ret && i < n; i++) {
			b = r->post_idx[i];
			if (b >= r->nbufs || r->state[b] != PNIC_BUF_USER) {
				ret = -EINVAL;
				break;
			}
			r->state[b] = PNIC_BUF_FREE;
			*pnic_rx_staged(r, staged++) = b;
		}
		mutex_unlock(&nic->hw_lock);
		done += n;
	}
	t0 = ktime_get_ns();
	mutex_lock(&nic->hw_lock);
	if (!ret && r->stopped)
		ret = -ENODEV;
	if (ret) {	/* every buffer of the call stays the user's */
		while (staged--)
			r->state[*pnic_rx_staged(r, staged)] = PNIC_BUF_USER;
	} else {
		r->fifo_len += staged;
		pnic_rx_refill(nic, r);
	}
	nic->stats.reap_ns += ktime_get_ns() - t0;
	mutex_unlock(&nic->hw_lock);
	if (ret == -EAGAIN) {
		ret = pnic_fault_in(nic, ub, p->n * sizeof(*ub), false);
		if (ret == -EAGAIN)
			goto again;
	}
	return ret;
}

/* RING_IN_MEM: the consumer hands descriptors back by moving the tail */
int pnic_rx_doorbell(struct pnic *nic, struct file *owner, struct pdma_nic_rx_doorbell *d)
{
	struct pnic_rx *r = pnic_rx_of(nic, owner, true);
	int ret = 0;

	lockdep_assert_held(&nic->lock);
	if (!r || d->flags || d->pad || d->tail >= r->entries)
		return -EINVAL;
	mutex_lock(&nic->hw_lock);
	if (r->stopped) {
		ret = -ENODEV;
	} else {
		pnic_wr(nic, E1000_RDT, d->tail);
		nic->stats.doorbells++;
	}
	mutex_unlock(&nic->hw_lock);
	return ret;
}

/* MDIO write to the internal PHY (address 1) */
int pnic_phy_write(struct pnic *nic, u32 reg, u16 val)
{
	u32 mdic;
	int i;

	pnic_wr(nic, E1000_MDIC, val | reg << E1000_MDIC_REG_SHIFT |
		E1000_PHY_ADDR << E1000_MDIC_PHY_SHIFT | E1000_MDIC_OP_WRITE);
	for (i = 0; i < 100; i++) {
		mdic = pnic_rd(nic, E1000_MDIC);
		if (mdic & E1000_MDIC_READY)
			return mdic & E1000_MDIC_ERROR ? -EIO : 0;
		usleep_range(50, 100);
	}
	return -ETIMEDOUT;
}
