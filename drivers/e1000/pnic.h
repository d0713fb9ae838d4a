/* SPDX-License-Identifier: GPL-2.0 */
/*
 * peerdma_e1000: reference NIC driver on peerdma's in-kernel client API, for
 * the Intel 82540EM (QEMU's -device e1000). Registers, descriptor formats and
 * the driver's state, shared by main.c (PCI, device file, ioctls), rx.c
 * (receive ring in pinned memory, quiesce) and tx.c (transmit from pinned
 * memory).
 *
 * Locking, outermost first:
 * - pnic->tx_lock: the transmit ring, tx_next and tx_stopped belong to its
 *   holder: one TX call, or a ring-in-memory attach (its bootstrap
 *   transmits). A TX call takes no other lock but hw_lock, so however long
 *   it waits for the wire, the receive side and STATS of every file go on;
 *   it gives the ring up while its frame list faults in (tx.c).
 * - pnic->lock: the receive attachment; serialises the ioctls that own or
 *   use it (all but TX).
 * - pnic->hw_lock: the registers, ring state and stats; the only lock the
 *   quiesce callbacks take.
 * peerdma calls quiesce with its own pin lock held, and
 * peerdma_client_get()/put() take that pin lock: so get()/put() are never
 * called under hw_lock, and nothing under hw_lock allocates memory (reclaim
 * may run an MMU notifier, which may quiesce us). remove() takes all three,
 * so gone is stable under any one of them.
 */
#ifndef PNIC_H
#define PNIC_H

#include <linux/bits.h>
#include <linux/io.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/types.h>

#include <uapi/peerdma_nic.h>
#include "peerdma_client.h"

/* 8254x registers (Intel PCI/PCI-X Family of GbE Controllers SDM, ch. 13) */
#define E1000_CTRL	0x0000
#define E1000_STATUS	0x0008
#define E1000_MDIC	0x0020
#define E1000_ICR	0x00c0
#define E1000_IMC	0x00d8
#define E1000_RCTL	0x0100
#define E1000_TCTL	0x0400
#define E1000_TIPG	0x0410
#define E1000_RDBAL	0x2800
#define E1000_RDBAH	0x2804
#define E1000_RDLEN	0x2808
#define E1000_RDH	0x2810
#define E1000_RDT	0x2818
#define E1000_RDTR	0x2820
#define E1000_TDBAL	0x3800
#define E1000_TDBAH	0x3804
#define E1000_TDLEN	0x3808
#define E1000_TDH	0x3810
#define E1000_TDT	0x3818
#define E1000_MPC	0x4010
#define E1000_ROC	0x40ac
#define E1000_MTA	0x5200
#define E1000_RAL0	0x5400
#define E1000_RAH0	0x5404
#define E1000_RAL(n)	(0x5400 + 8 * (n))
#define E1000_RAH(n)	(0x5404 + 8 * (n))

#define E1000_CTRL_SLU		BIT(6)
#define E1000_CTRL_RST		BIT(26)
#define E1000_STATUS_LU		BIT(1)
#define E1000_RAH_AV		BIT(31)

#define E1000_RCTL_EN		BIT(1)
#define E1000_RCTL_UPE		BIT(3)
#define E1000_RCTL_MPE		BIT(4)
#define E1000_RCTL_BAM		BIT(15)
#define E1000_RCTL_SZ_4096	(3U << 16)	/* with BSEX */
#define E1000_RCTL_BSEX		BIT(25)
#define E1000_RCTL_SECRC	BIT(26)

#define E1000_TCTL_EN		BIT(1)
#define E1000_TCTL_PSP		BIT(3)
#define E1000_TCTL_CT		(0x0fU << 4)
#define E1000_TCTL_COLD		(0x40U << 12)

#define E1000_MDIC_DATA		GENMASK(15, 0)
#define E1000_MDIC_REG_SHIFT	16
#define E1000_MDIC_PHY_SHIFT	21
#define E1000_MDIC_OP_WRITE	BIT(26)
#define E1000_MDIC_OP_READ	BIT(27)
#define E1000_MDIC_READY	BIT(28)
#define E1000_MDIC_ERROR	BIT(30)
#define E1000_PHY_ADDR		1

/* legacy receive descriptor: the NIC writes back length, status, errors */
struct e1000_rx_desc {
	__le64 addr;
	__le16 length;
	__le16 csum;
	u8 status;
	u8 errors;
	__le16 special;
};

#define E1000_RXD_STAT_DD	BIT(0)
#define E1000_RXD_STAT_EOP	BIT(1)
#define E1000_RXD_STAT_IXSM	BIT(2)	/* ignore the checksum bits */
#define E1000_RXD_STAT_TCPCS	BIT(5)
#define E1000_RXD_STAT_IPCS	BIT(6)
#define E1000_RXD_ERR_TCPE	BIT(5)
#define E1000_RXD_ERR_IPE	BIT(6)

/* legacy transmit descriptor */
struct e1000_tx_desc {
	__le64 addr;
	__le32 lower;		/* length | cso << 16 | cmd << 24 */
	__le32 upper;		/* status | css << 8 | special << 16 */
};

#define E1000_TXD_CMD_EOP	BIT(24)
#define E1000_TXD_CMD_IFCS	BIT(25)
#define E1000_TXD_CMD_RS	BIT(27)
#define E1000_TXD_STAT_DD	BIT(0)

#define PNIC_RX_RING_MAX	4096	/* RDLEN: 64 KiB of descriptors at most */
/* the ring in pinned memory: 15 KiB written by loopback (rx.c) */
#define PNIC_RX_RING_IN_MEM_MAX	960
#define PNIC_TX_RING		64
#define PNIC_POLL_BATCH		256	/* completions reaped per hw_lock hold */
#define PNIC_MIN_BUFS		8	/* RDLEN counts in 128-byte units */
#define PNIC_MAX_FRAME		1514	/* TX; RX drops above 1522 (no LPE) */

/* a receive buffer's owner */
enum pnic_buf_state { PNIC_BUF_USER, PNIC_BUF_FREE, PNIC_BUF_NIC };

/* one receive attachment: a pinned range split into buffers */
struct pnic_rx {
	struct pnic *nic;
	struct file *owner;
	struct peerdma_client *client;
	u32 flags;		/* PDMA_NIC_RX_* */
	u32 buf_size;
	u32 nbufs;
	u32 entries;		/* descriptors in the ring */
	u64 bufs_offset;
	u64 ring_offset;	/* RING_IN_MEM */
	dma_addr_t ring_dma;	/* the ring the NIC uses */
	dma_addr_t *buf_dma;	/* [nbufs] */
	u32 *slot_buf;		/* [entries] buffer in each slot (coherent ring) */
	u8 *state;		/* [nbufs] enum pnic_buf_state */
	u32 *fifo;		/* [nbufs] buffers given back, not yet posted */
	u32 fifo_head, fifo_len;
	u32 next_clean;		/* next slot the NIC completes (its RDH) */
	u32 next_use;		/* first slot the NIC may not use (its RDT) */
	bool stopped;		/* quiesced: the addresses are gone */
	bool abort;		/* a quiesce waits for hw_lock: the ring bootstrap gives up */
	struct pdma_nic_cqe batch[PNIC_POLL_BATCH];
	u32 npending;		/* batch[0..npending): reaped, not yet delivered (EFAULT) */
	u32 post_idx[PNIC_POLL_BATCH];
};

struct pnic {
	struct kref ref;		/* the PCI binding and each open file */
	struct pci_dev *pdev;
	void __iomem *mmio;
	struct miscdevice misc;
	char name[24];
	int id;
	u8 mac[6];
	bool gone;			/* unbound: ENXIO (set under all three locks) */
	bool unbinding;			/* remove() waits for the locks: end what holds them */
	struct mutex tx_lock;		/* outermost: see the top of this file */
	struct mutex lock;		/* the receive attachment */
	struct mutex hw_lock;		/* inner: registers, rings, stats */
	/* receive: the coherent ring (default) and the attachment */
	struct e1000_rx_desc *rx_ring;
	dma_addr_t rx_ring_dma;
	struct pnic_rx *rx;		/* under both locks to change */
	/* transmit: ring in coherent memory, owned by tx_lock's holder */
	struct e1000_tx_desc *tx_ring;
	dma_addr_t tx_ring_dma;
	u32 tx_next;			/* TDT */
	bool tx_stopped;		/* the running TX call's pin was quiesced */
	struct pdma_nic_stats stats;	/* under hw_lock */
};

static inline u32 pnic_rd(struct pnic *nic, u32 reg)
{
	return readl(nic->mmio + reg);
}

static inline void pnic_wr(struct pnic *nic, u32 reg, u32 val)
{
	writel(val, nic->mmio + reg);
}

/* rx.c */
int pnic_rx_attach(struct pnic *nic, struct file *owner, struct pdma_nic_rx_attach *a);
void pnic_rx_detach(struct pnic *nic, struct file *owner);
int pnic_rx_poll(struct pnic *nic, struct file *owner, struct pdma_nic_rx_poll *p);
int pnic_rx_post(struct pnic *nic, struct file *owner, struct pdma_nic_rx_post *p);
int pnic_rx_doorbell(struct pnic *nic, struct file *owner, struct pdma_nic_rx_doorbell *d);
void pnic_rx_stop_hw(struct pnic *nic);
int pnic_phy_write(struct pnic *nic, u32 reg, u16 val);

/* tx.c */
void pnic_tx_init_hw(struct pnic *nic);
int pnic_tx(struct pnic *nic, struct pdma_nic_tx *t);
int pnic_tx_raw(struct pnic *nic, dma_addr_t addr, u32 len);

#endif /* PNIC_H */
