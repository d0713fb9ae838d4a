// SPDX-License-Identifier: MIT
/* Receive rings: fixed-size slots in page-aligned, pinned memory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "deframe/deframe.h"
#include "peerdma/mr.h"
#include "rx/ring.h"

static uint32_t pow2_up(uint32_t v)
{
	uint32_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

/* The slot size a ring of layout gets for slot_size (rounded up to the
 * layout's multiple) and, in *off, the datagram's offset there; 0 for an
 * unknown layout or a slot without room for a datagram. */
static uint32_t layout_slot(enum pdma_ring_layout layout, uint32_t slot_size, uint32_t *off)
{
	uint32_t align;

	switch (layout) {
	case PDMA_RING_FULL:
		*off = PDMA_SLOT_HDR;
		align = 64u;
		break;
	case PDMA_RING_PACKED:
		*off = PDMA_SLOT_HDR_PACKED;
		align = 16u;
		break;
	case PDMA_RING_TINY:
		/* A tiny slot is 80 bytes or nothing (deframe.h). */
		*off = PDMA_SLOT_HDR_TINY;
		return slot_size > *off && slot_size <= PDMA_SLOT_TINY_MAX ? PDMA_SLOT_TINY_MAX : 0;
	default:
		*off = 0;
		return 0;
	}
	return slot_size > *off && slot_size <= (1u << 20) ? (slot_size + align - 1) & ~(align - 1) : 0;
}

int pdma_ring_init(struct pdma_ring *r, uint32_t nslots, uint32_t slot_size, enum pdma_ring_layout layout)
{
	uint32_t off, slot = layout_slot(layout, slot_size, &off);

	memset(r, 0, sizeof(*r));
	if (nslots == 0 || nslots > (1u << 24) || !slot)
		return -EINVAL;
	r->nslots = pow2_up(nslots);
	r->slot_size = slot;
	r->dgram_off = off;
	r->bytes = (size_t)r->nslots * r->slot_size;
	/* mmap, not malloc: page-aligned and zeroed, so registration pins whole
	 * pages that hold nothing else. */
	void *p = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	r->base = p;
	r->scratch = malloc(r->slot_size);
	if (!r->scratch) {
		munmap(p, r->bytes);
		r->base = NULL;
		return -ENOMEM;
	}
	/* Pinned even without a domain: the ring must not page out under a
	 * device. Failure (RLIMIT_MEMLOCK) is tolerated for the CPU path. */
	r->mlocked = mlock(p, r->bytes) == 0;
	return 0;
}

int pdma_ring_init_external(struct pdma_ring *r, void *mem, size_t bytes, uint32_t slot_size,
			    enum pdma_ring_layout layout)
{
	uint32_t off;

	memset(r, 0, sizeof(*r));
	slot_size = layout_slot(layout, slot_size, &off);
	if (!mem || !slot_size || bytes < slot_size)
		return -EINVAL;
	uint32_t n = 1;
	while ((uint64_t)n * 2 * slot_size <= bytes && n < (1u << 24))
		n <<= 1;
	r->base = mem;
	r->nslots = n;
	r->slot_size = slot_size;
	r->dgram_off = off;
	r->bytes = (size_t)n * slot_size;
	r->external = 1;
	r->scratch = malloc(slot_size);
	return r->scratch ? 0 : -ENOMEM;
}

void pdma_ring_fini(struct pdma_ring *r)
{
	if (r->mr)
		pdma_mr_close(r->mr);
	if (r->base && !r->external) {
		if (r->mlocked)
			munlock(r->base, r->bytes);
		munmap(r->base, r->bytes);
	}
	free(r->scratch);
	memset(r, 0, sizeof(*r));
}

int pdma_ring_register(struct pdma_ring *r, struct pdma_domain *dom, int iface)
{
	struct iovec iov = { .iov_base = r->base, .iov_len = r->bytes };
	struct pdma_mr_attr attr = {
		.mr_iov = &iov,
		.iov_count = 1,
		/* The device writes packets in (remote write); the deframer and the
		 * GPU copy engine read them. */
		.access = PDMA_RECV | PDMA_READ | PDMA_WRITE | PDMA_REMOTE_WRITE,
		.iface = (enum pdma_hmem_iface)iface,
	};

	if (!r->base || !dom)
		return -EINVAL;
	if (r->mr)
		return -EALREADY;
	return pdma_mr_regattr(dom, &attr, 0, &r->mr);
}
