// SPDX-License-Identifier: MIT
/* Frames from a pcap file into a frame ring (rx/pcap_frames.h). */
#include <errno.h>
#include <string.h>

#include "rx/pcap_frames.h"

static uint32_t rd32(const uint8_t *b, bool swap)
{
	uint32_t v;

	memcpy(&v, b, 4);
	return swap ? __builtin_bswap32(v) : v;
}

int pdma_pcap_in_open(struct pdma_pcap_in *p, FILE *f)
{
	uint8_t h[24];
	uint32_t magic;

	memset(p, 0, sizeof(*p));
	p->f = f;
	if (fread(h, 1, sizeof(h), f) != sizeof(h))
		return ferror(f) ? -EIO : -EPROTO;
	memcpy(&magic, h, 4);
	if (magic == 0xa1b2c3d4u || magic == 0xa1b23c4du)
		p->swap = false;
	else if (magic == 0xd4c3b2a1u || magic == 0x4d3cb2a1u)
		p->swap = true;
	else
		return -EPROTO;
	if ((rd32(h + 20, p->swap) & 0x0fffffffu) != 1) /* LINKTYPE_ETHERNET */
		return -EPROTONOSUPPORT;
	return 0;
}

int pdma_pcap_in_frames(struct pdma_pcap_in *p, uint8_t *region, uint32_t slot, struct pdma_frame *fr,
			uint32_t max)
{
	uint32_t n = 0;
	uint8_t rec[16];

	while (n < max) {
		size_t got = fread(rec, 1, sizeof(rec), p->f);
		if (got == 0 && feof(p->f))
			break;
		if (got != sizeof(rec))
			return ferror(p->f) ? -EIO : -EPROTO;
		uint32_t cap = rd32(rec + 8, p->swap), orig = rd32(rec + 12, p->swap);
		if (cap > 262144u || cap > orig)
			return -EPROTO; /* no capture tool writes these */
		uint8_t *dst = region + (size_t)n * slot;
		const uint32_t keep = cap < slot ? cap : slot, skip = cap - keep;
		if (fread(dst, 1, keep, p->f) != keep || (skip && fseek(p->f, (long)skip, SEEK_CUR)))
			return ferror(p->f) ? -EIO : -EPROTO;
		/* A frame cut by the snaplen is passed as what was captured
		 * (its IP length then says it is short); one longer than a
		 * buffer keeps its length (oversize). */
		p->cut += cap < orig;
		fr[n] = (struct pdma_frame){ .off = n * slot, .len = (uint16_t)(cap > 65535 ? 65535 : cap) };
		if (cap > slot && fr[n].len <= slot)
			fr[n].len = (uint16_t)(slot + 1);
		p->records++;
		n++;
	}
	return (int)n;
}
