// SPDX-License-Identifier: MIT
/* The direct path's last hop: the receive ring lives in (simulated) GPU
 * memory, registered with the domain, and the (simulated) DMA device writes
 * each received slot into it by the registration's key: what a NIC whose
 * ring lives in GPU pages does. The socket read lands in the device's own
 * buffer first, as it would on the NIC. The CPU deframer then reads the ring,
 * since simulated GPU memory is host memory. */
#include <errno.h>
#include <stdlib.h>

#include "deframe/deframe.h"
#include "peerdma/mr.h"
#include "mem/sim.h"
#include "rx/rx.h"

struct pdma_rx_sim_dma {
	struct pdma_sim *sim;
	struct pdma_domain *dom;
	void *mem;        /* the ring's memory, in the simulated GPU */
	uint8_t *bounce;  /* the device's buffer: one batch of slots */
	uint32_t slot_size;
	uint64_t key;     /* the ring's registration */
};

int pdma_rx_sim_dma_open(struct pdma_rx_sim_dma **out, struct pdma_sim *sim, struct pdma_domain *dom,
			 uint32_t nslots, uint32_t slot_size, enum pdma_ring_layout layout, uint32_t batch,
			 struct pdma_ring *r)
{
	struct pdma_rx_sim_dma *d;
	size_t bytes = (size_t)nslots * ((slot_size + 63u) & ~63u);
	int ret;

	*out = NULL;
	if (!sim || !dom)
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	*out = d;
	d->sim = sim;
	d->dom = dom;
	ret = pdma_sim_alloc(sim, bytes, &d->mem);
	if (ret)
		return ret;
	ret = pdma_ring_init_external(r, d->mem, bytes, slot_size, layout);
	if (!ret)
		ret = pdma_ring_register(r, dom, PDMA_HMEM_SIM);
	if (ret)
		return ret;
	d->key = pdma_mr_key(r->mr);
	d->slot_size = r->slot_size;
	d->bounce = malloc((size_t)batch * r->slot_size);
	return d->bounce ? 0 : -ENOMEM;
}

uint8_t *pdma_rx_sim_dma_buf(struct pdma_rx_sim_dma *d, uint32_t i)
{
	return d->bounce + (size_t)i * d->slot_size;
}

int pdma_rx_sim_dma_write(struct pdma_rx_sim_dma *d, const struct pdma_ring *r, uint64_t idx,
			  const uint8_t *slot)
{
	const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)slot;
	uint8_t *dst = pdma_ring_slot(r, idx);

	/* h->len never exceeds the slot (the socket read is bounded by it),
	 * so the write fits the ring slot. */
	return pdma_sim_dma_write(d->dom, d->key, (uint64_t)(uintptr_t)dst, slot,
				  r->dgram_off + (size_t)h->len);
}

void pdma_rx_sim_dma_close(struct pdma_rx_sim_dma *d)
{
	if (!d)
		return;
	if (d->mem)
		pdma_sim_free(d->sim, d->mem);
	free(d->bounce);
	free(d);
}
