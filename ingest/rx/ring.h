/* SPDX-License-Identifier: MIT */
/*
 * The receive ring: the hand-off between a receive path (rx/) and a deframer
 * (deframe/). Slots are fixed-size and hold one datagram each, in the
 * deframer's input format (deframe/deframe.h: slot header, datagram at
 * PDMA_SLOT_HDR, or at PDMA_SLOT_HDR_PACKED in a packed ring: one layout
 * per ring, each slot's flags say which).
 *
 * Single producer, single consumer. Ownership is explicit: slots [tail, head)
 * belong to the consumer, all others to the producer. The producer fills
 * slots, then publishes them with a release store of head; the consumer reads
 * head with acquire, processes, and hands slots back with a release store of
 * tail. So no slot is read before it is complete and none is overwritten
 * before it is consumed. When the ring is full the producer drops the datagram
 * into a scratch slot and counts an overrun: never silent, never blocking the
 * socket.
 */
#ifndef PDMA_INGEST_RX_RING_H
#define PDMA_INGEST_RX_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct pdma_domain;
struct pdma_mr;

/* Slot layouts (deframe/deframe.h). Packed suits rings sized to small
 * datagrams, tiny (80-byte slots) to datagrams of at most 76 bytes;
 * io_uring's receive path can fill neither (its completion header would lie
 * over the slot header) and refuses them. */
enum pdma_ring_layout { PDMA_RING_FULL, PDMA_RING_PACKED, PDMA_RING_TINY };

struct pdma_ring {
	uint8_t *base;        /* nslots * slot_size bytes, page aligned */
	size_t bytes;
	uint32_t nslots;      /* power of two */
	uint32_t slot_size;   /* bytes, multiple of 64 (packed: 16; tiny: 80), includes the slot header */
	uint32_t dgram_off;   /* PDMA_SLOT_HDR, PDMA_SLOT_HDR_PACKED or PDMA_SLOT_HDR_TINY: the layout */
	_Alignas(64) atomic_uint_fast64_t head; /* producer: next slot to fill */
	_Alignas(64) atomic_uint_fast64_t tail; /* consumer: next slot to read */
	_Alignas(64) atomic_uint_fast64_t overruns;
	uint8_t *scratch;     /* overrun target (one slot) */
	struct pdma_mr *mr;   /* registration of base (NULL when unregistered) */
	int mlocked;
	int external;         /* base not owned (sim GPU memory) */
};

/* slot_size is rounded up to 64 bytes (packed: 16; tiny: to 80, the only
 * tiny size), nslots to a power of two. -EINVAL for a slot without room for
 * a datagram, or a tiny one over 80 bytes. */
int pdma_ring_init(struct pdma_ring *r, uint32_t nslots, uint32_t slot_size, enum pdma_ring_layout layout);
/* A ring over caller memory (e.g. simulated GPU memory); not freed by fini. */
int pdma_ring_init_external(struct pdma_ring *r, void *mem, size_t bytes, uint32_t slot_size,
			    enum pdma_ring_layout layout);
void pdma_ring_fini(struct pdma_ring *r);
/* Registers the ring memory with the domain (pinned, remote-writable) so a
 * device can DMA into it; iface is a PDMA_HMEM_* value (host or sim GPU
 * memory). The one place ring registration happens; the MR is closed by
 * pdma_ring_fini. */
int pdma_ring_register(struct pdma_ring *r, struct pdma_domain *dom, int iface);
static inline uint8_t *pdma_ring_slot(const struct pdma_ring *r, uint64_t i)
{
	return r->base + (size_t)(i & (r->nslots - 1)) * r->slot_size;
}
/* Where a producer writes slot i's datagram, and how much fits there. */
static inline uint8_t *pdma_ring_dgram(const struct pdma_ring *r, uint64_t i)
{
	return pdma_ring_slot(r, i) + r->dgram_off;
}
static inline uint32_t pdma_ring_room(const struct pdma_ring *r)
{
	return r->slot_size - r->dgram_off;
}

#endif /* PDMA_INGEST_RX_RING_H */
