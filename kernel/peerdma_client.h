/* SPDX-License-Identifier: GPL-2.0 */
/*
 * peerdma in-kernel client API, for device drivers that DMA to/from memory
 * pinned through /dev/peerdma.
 *
 * A driver receives (peerdma fd, handle) from its user, calls peerdma_client_get()
 * from that user's process context and gets the DMA address list of the handle
 * for its own device. Before peerdma revokes the pages (GPU free, munmap,
 * dma-buf move, unpin, close, exit), it calls ops->quiesce(): the driver must
 * stop (or wait for) every DMA to the range before returning, must not sleep
 * long, and must not call back into peerdma. After quiesce the address list is
 * gone: peerdma_client_map() returns NULL. peerdma_client_put() releases it in
 * any state. The client holds a reference on @dev until peerdma has freed it
 * (a dma-buf client is detached from a work item, after the put returned).
 */
#ifndef PEERDMA_CLIENT_H
#define PEERDMA_CLIENT_H

#include <linux/bits.h>
#include <linux/types.h>

struct device;
struct peerdma_client;

struct peerdma_client_ops {
	void (*quiesce)(void *priv, u64 handle);
};

struct peerdma_dma_map {
	u64 pinned_addr;	/* start of the pinned range (user/GPU VA or offset) */
	u64 pinned_len;
	u32 page_size;		/* bytes covered by each entry */
	u32 entries;
	const dma_addr_t *addrs; /* entries I/O addresses for the client's device */
};

#define PEERDMA_CLIENT_SPLIT_4K BIT(0)

int peerdma_client_get(int fd, u64 handle, struct device *dev, u32 flags,
		       const struct peerdma_client_ops *ops, void *priv,
		       struct peerdma_client **out);
const struct peerdma_dma_map *peerdma_client_map(struct peerdma_client *c);
/*
 * I/O address of [off, off + len) from the pinned start, or -ERANGE/-EINVAL/-ENODEV
 * if that does not lie inside one contiguous stretch of entries
 */
int peerdma_client_dma_addr(struct peerdma_client *c, u64 off, u64 len,
			    dma_addr_t *addr);
void peerdma_client_put(struct peerdma_client *c);

#endif /* PEERDMA_CLIENT_H */
