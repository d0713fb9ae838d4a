// SPDX-License-Identifier: MIT
/* Blocks out of the deframer's windows: the mirror of what each window
 * position holds, publication once a stream has moved past a block, and the
 * copy into the stream's pool (blocks.h says why a copy). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blocks/blocks.h"

/* Host copies: the window holds VITA-49's big-endian 16-bit I/Q words; a
 * block holds them in host order. */
static int host_copy_swap16(void *arg, void *dst, const void *src, size_t n)
{
	const uint8_t *s = src;
	uint8_t *d = dst;

	(void)arg;
	for (size_t i = 0; i + 1 < n; i += 2) {
		uint16_t v;
		memcpy(&v, s + i, 2);
		v = (uint16_t)(v << 8 | v >> 8);
		memcpy(d + i, &v, 2);
	}
	return 0;
}

static int host_zero(void *arg, void *dst, size_t n)
{
	(void)arg;
	memset(dst, 0, n);
	return 0;
}

static int host_read(void *arg, void *dst, const void *src, size_t n, void *event)
{
	(void)arg;
	(void)event;
	memcpy(dst, src, n);
	return 0;
}

static int host_alloc(void *arg, size_t n, void **p)
{
	(void)arg;
	/* Large and mostly untouched until blocks are published: calloc's
	 * fresh pages cost nothing until written. */
	*p = calloc(1, n);
	return *p ? 0 : -ENOMEM;
}

static void host_free(void *arg, void *p)
{
	(void)arg;
	free(p);
}

static struct pdma_blk *blk_at(struct pdma_blocks *bl, size_t i)
{
	return (struct pdma_blk *)(bl->blk_mem + i * bl->blk_size);
}

int pdma_blocks_open(struct pdma_blocks **out, const struct pdma_dfr_config *cfg, uint32_t block_packets,
		     uint32_t late_blocks, uint32_t pool_blocks, const uint8_t *window,
		     const struct pdma_blk_mem *mem)
{
	struct pdma_blocks *bl;
	size_t nbuf, pool_bytes;
	int ret;

	bl = calloc(1, sizeof(*bl));
	if (!bl || !block_packets || cfg->out_pkts % block_packets || pool_blocks < 2 ||
	    cfg->bytes_per_sample != 4 || cfg->max_payload % 4 ||
	    (uint64_t)(late_blocks + 2) * block_packets > cfg->out_pkts) {
		free(bl);
		if (mem && mem->fini)
			mem->fini(mem->arg);
		return bl ? -EINVAL : -ENOMEM;
	}
	bl->cfg = *cfg;
	bl->B = block_packets;
	bl->late = late_blocks;
	bl->pool = pool_blocks;
	bl->buf_bytes = (size_t)block_packets * cfg->max_payload;
	bl->window = window;
	if (mem) {
		bl->mem = *mem;
	} else {
		bl->mem = (struct pdma_blk_mem){ .kind = PDMA_BLOCK_HOST, .copy = host_copy_swap16,
						 .zero = host_zero, .read = host_read, .alloc = host_alloc,
						 .free = host_free };
	}
	pthread_mutex_init(&bl->lock, NULL);
	pthread_cond_init(&bl->room, NULL);
	nbuf = (size_t)cfg->max_streams * pool_blocks;
	bl->blk_size = sizeof(struct pdma_blk) + (block_packets + 63) / 64 * sizeof(uint64_t);
	bl->blk_size = (bl->blk_size + 63) & ~(size_t)63;
	bl->st = calloc(cfg->max_streams, sizeof(*bl->st));
	bl->scratch = calloc(cfg->out_pkts, sizeof(*bl->scratch));
	bl->blk_mem = calloc(nbuf, bl->blk_size);
	ret = bl->st && bl->blk_mem && bl->scratch ? 0 : -ENOMEM;
	if (!ret && __builtin_mul_overflow(nbuf, bl->buf_bytes, &pool_bytes))
		ret = -ENOMEM; /* no memory holds it */
	if (!ret)
		ret = bl->mem.alloc(bl->mem.arg, pool_bytes, (void **)&bl->pool_mem);
	if (ret)
		goto err;
	for (uint32_t i = 0; i < cfg->max_streams; i++) {
		struct pdma_blk_stream *s = &bl->st[i];

		for (uint32_t j = pool_blocks; j-- > 0;) {
			struct pdma_blk *b = blk_at(bl, (size_t)i * pool_blocks + j);

			b->bl = bl;
			b->stream = i;
			b->pub.data = bl->pool_mem + ((size_t)i * pool_blocks + j) * bl->buf_bytes;
			b->pub.gap_mask = b->mask;
			b->pub.mem = bl->mem.kind;
			b->pub.device = bl->mem.device;
			b->pub.format = PDMA_FMT_CI16;
			b->pub.bytes_per_sample = 4;
			b->next = s->free;
			s->free = b;
		}
		s->nfree = pool_blocks;
	}
	*out = bl;
	return 0;
err:
	pdma_blocks_free(bl);
	return ret;
}

void pdma_blocks_close(struct pdma_blocks *bl, void (*fin)(void *arg), void *fin_arg)
{
	bool now;

	if (!bl) {
		if (fin)
			fin(fin_arg);
		return;
	}
	pthread_mutex_lock(&bl->lock);
	bl->fin = fin;
	bl->fin_arg = fin_arg;
	now = bl->held_total == 0;
	bl->closing = true;
	pthread_mutex_unlock(&bl->lock);
	if (now)
		pdma_blocks_free(bl);
}

void pdma_blocks_free(struct pdma_blocks *bl)
{
	void (*fin)(void *arg) = bl->fin;
	void *fin_arg = bl->fin_arg;

	pdma_blocks_free_subs(bl);
	if (bl->st)
		for (uint32_t i = 0; i < bl->cfg.max_streams; i++)
			free(bl->st[i].ptag);
	if (bl->blk_mem && bl->mem.event_destroy)
		for (size_t i = 0; i < (size_t)bl->cfg.max_streams * bl->pool; i++)
			if (blk_at(bl, i)->pub.cuda_event)
				bl->mem.event_destroy(bl->mem.arg, blk_at(bl, i)->pub.cuda_event);
	if (bl->pool_mem)
		bl->mem.free(bl->mem.arg, bl->pool_mem);
	if (bl->mem.fini)
		bl->mem.fini(bl->mem.arg);
	free(bl->st);
	free(bl->scratch);
	free(bl->blk_mem);
	pthread_cond_destroy(&bl->room);
	pthread_mutex_destroy(&bl->lock);
	free(bl);
	if (fin)
		fin(fin_arg);
}

/* A CIF0 frequency-like field: 64-bit two's complement, radix point at bit
 * 20, in Hz (VITA 49.0 9.5.1). */
static double ctx_hz(const uint8_t *p)
{
	return (double)(int64_t)pdma_vrt_get64(p) / 1048576.0;
}

static void context(struct pdma_blk_stream *s, const uint8_t *dg, uint32_t len)
{
	struct pdma_vrt_packet v;

	if (pdma_vrt_parse(dg, len, PDMA_VRT_EXACT, &v) < 0 || v.type != PDMA_VRT_CONTEXT)
		return;
	if ((v.cif0 & PDMA_VRT_CIF0_SAMPLE_RATE) && v.ctx_off[31 - 21]) {
		s->ctx_rate = ctx_hz(dg + v.ctx_off[31 - 21]);
		s->ctx_fields |= PDMA_CTX_SAMPLE_RATE;
	}
	if ((v.cif0 & PDMA_VRT_CIF0_RF_FREQ) && v.ctx_off[31 - 27]) {
		s->ctx_freq = ctx_hz(dg + v.ctx_off[31 - 27]);
		s->ctx_fields |= PDMA_CTX_RF_FREQ;
	}
	if ((v.cif0 & PDMA_VRT_CIF0_BANDWIDTH) && v.ctx_off[31 - 29]) {
		s->ctx_bw = ctx_hz(dg + v.ctx_off[31 - 29]);
		s->ctx_fields |= PDMA_CTX_BANDWIDTH;
	}
}

void pdma_blocks_observe(void *arg, const struct pdma_dfr_desc *d, uint32_t payload_len,
			 const uint8_t *dg, uint32_t dglen)
{
	struct pdma_blocks *bl = arg;
	struct pdma_blk_stream *s;

	if (d->stream == PDMA_DFR_NO_STREAM || d->stream >= bl->cfg.max_streams)
		return;
	s = &bl->st[d->stream];
	if (d->status == PDMA_DFR_ST_CONTEXT) {
		if (dg)
			context(s, dg, dglen);
		return;
	}
	if (d->status != PDMA_DFR_ST_DATA && d->status != PDMA_DFR_ST_DATA_OLD)
		return;
	if (!s->have) {
		/* The stream's first data packet opens its first block (gen and
		 * senders that never reorder it: a packet before it is late). */
		if (!s->ptag) {
			s->ptag = calloc(bl->cfg.out_pkts, sizeof(*s->ptag));
			if (!s->ptag)
				return;
		}
		s->have = true;
		atomic_fetch_add_explicit(&bl->streams, 1, memory_order_relaxed);
		s->stream_id = d->stream_id;
		s->next = d->pkt;
		s->high = d->pkt;
	}
	if (!s->plen) {
		struct pdma_vrt_packet v;

		if (payload_len)
			s->plen = payload_len;
		else if (dg && pdma_vrt_parse(dg, dglen, PDMA_VRT_EXACT, &v) >= 0)
			s->plen = v.payload_len;
		s->spp = s->plen / bl->cfg.bytes_per_sample;
	}
	if (d->status == PDMA_DFR_ST_DATA) {
		atomic_fetch_add_explicit(&bl->placed, 1, memory_order_relaxed);
		uint64_t *t = &s->ptag[d->pkt % bl->cfg.out_pkts];

		/* The deframer wrote over the packet this position held: if
		 * that one's block is still unpublished, it is lost now. */
		if (*t && *t - 1 >= s->next)
			atomic_fetch_add_explicit(&bl->window_drops, 1, memory_order_relaxed);
		*t = d->pkt + 1;
		if (d->pkt < s->next)
			atomic_fetch_add_explicit(&bl->late_pkts, 1, memory_order_relaxed);
	}
	if (d->pkt > s->high)
		s->high = d->pkt;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Placed packets of [from, to) the window still holds. */
static uint64_t placed_here(struct pdma_blocks *bl, const struct pdma_blk_stream *s, uint64_t from,
			    uint64_t to)
{
	uint64_t n = 0;

	for (uint64_t p = from; p < to; p++)
		n += s->ptag[p % bl->cfg.out_pkts] == p + 1;
	return n;
}

/* Copy packets [from, to) of stream idx out of the window into a pool
 * buffer and hand it to the subscriptions. */
static void publish_one(struct pdma_blocks *bl, uint32_t idx, uint64_t from, uint64_t to)
{
	struct pdma_blk_stream *s = &bl->st[idx];
	const uint32_t n = (uint32_t)(to - from), out = bl->cfg.out_pkts;
	const uint8_t *win = bl->window + (size_t)idx * out * bl->cfg.max_payload;
	struct pdma_blk *b;
	uint32_t gaps = 0;

	if (!pdma_blocks_wanted(bl, s->stream_id))
		return; /* nobody subscribes: no copy */
	pthread_mutex_lock(&bl->lock);
	b = pdma_blocks_get_buf(bl, idx);
	pthread_mutex_unlock(&bl->lock);
	if (!b) {
		atomic_fetch_add_explicit(&bl->window_drops, placed_here(bl, s, from, to),
					  memory_order_relaxed);
		return;
	}
	memset(b->mask, 0, (bl->B + 63) / 64 * sizeof(uint64_t));
	int err = 0;
	/* The block's positions are consecutive (block_packets divides
	 * out_pkts): one copy per run of present packets. */
	for (uint32_t i = 0; i < n;) {
		uint64_t p = from + i;
		bool here = s->ptag[p % out] == p + 1;
		uint32_t j = i + 1;

		while (j < n && (s->ptag[(from + j) % out] == from + j + 1) == here)
			j++;
		uint8_t *dst = (uint8_t *)b->pub.data + (size_t)i * s->plen;
		size_t len = (size_t)(j - i) * s->plen;
		if (here) {
			err = err ? err : bl->mem.copy(bl->mem.arg, dst, win + (size_t)(p % out) * s->plen, len);
		} else {
			err = err ? err : bl->mem.zero(bl->mem.arg, dst, len);
			for (uint32_t k = i; k < j; k++)
				b->mask[k / 64] |= 1ull << (k % 64);
			gaps += j - i;
		}
		i = j;
	}
	/* GPU: one event per buffer, recorded again at each use */
	if (!err && bl->mem.fence)
		err = bl->mem.fence(bl->mem.arg, &b->pub.cuda_event);
	if (err) {
		/* a failed copy: the block never reaches anyone */
		pthread_mutex_lock(&bl->lock);
		pdma_blocks_put_buf(bl, b);
		pthread_mutex_unlock(&bl->lock);
		atomic_fetch_add_explicit(&bl->window_drops, placed_here(bl, s, from, to),
					  memory_order_relaxed);
		return;
	}
	b->pub.stream_id = s->stream_id;
	b->pub.samples_per_packet = s->spp;
	b->pub.first_sample = from * s->spp;
	b->pub.ts_int = b->pub.first_sample / bl->cfg.sample_rate;
	b->pub.ts_frac = b->pub.first_sample % bl->cfg.sample_rate;
	b->pub.nsamples = (uint64_t)n * s->spp;
	b->pub.npackets = n;
	b->pub.gaps = gaps;
	b->pub.seq = from / bl->B;
	b->pub.ctx_fields = s->ctx_fields;
	b->pub.ctx_sample_rate = s->ctx_rate;
	b->pub.ctx_rf_freq = s->ctx_freq;
	b->pub.ctx_bandwidth = s->ctx_bw;
	pthread_mutex_lock(&bl->lock);
	if (pdma_blocks_deliver(bl, b)) {
		atomic_fetch_add_explicit(&bl->published, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&bl->gap_packets, gaps, memory_order_relaxed);
	}
	pthread_mutex_unlock(&bl->lock);
}

static void publish_stream(struct pdma_blocks *bl, uint32_t idx, bool flush)
{
	struct pdma_blk_stream *s = &bl->st[idx];
	const uint64_t out = bl->cfg.out_pkts;

	if (!s->have || !s->plen)
		return;
	/* A jump past the whole window (receive-side drops, a sender
	 * restarted with a later timestamp): of the blocks entirely more than
	 * a window behind the newest packet, only those the window still
	 * holds packets of are published; the others are skipped (consumers
	 * see first_sample jump): what they had placed was overwritten, and
	 * counted then (pdma_blocks_observe).
	 * One pass over the window finds them, however long the jump. */
	if (s->high + 1 > out && s->next < (s->high + 1 - out) / bl->B * bl->B) {
		const uint64_t bound = (s->high + 1 - out) / bl->B * bl->B;
		uint32_t nk = 0;
		uint64_t at = s->next;

		for (uint64_t i = 0; i < out; i++) {
			uint64_t t = s->ptag[i];

			if (t && t - 1 >= s->next && t - 1 < bound)
				bl->scratch[nk++] = (t - 1) / bl->B;
		}
		qsort(bl->scratch, nk, sizeof(*bl->scratch), cmp_u64);
		for (uint32_t i = 0; i < nk; i++) {
			uint64_t k = bl->scratch[i], from = k * bl->B > at ? k * bl->B : at;

			if (i && k == bl->scratch[i - 1])
				continue;
			publish_one(bl, idx, from, (k + 1) * bl->B);
			at = (k + 1) * bl->B;
		}
		s->next = bound;
	}
	for (;;) {
		uint64_t end = (s->next / bl->B + 1) * bl->B;

		if (!flush && s->high + 1 < end + (uint64_t)bl->late * bl->B)
			break;
		if (flush && s->next > s->high)
			break;
		if (flush && end > s->high + 1)
			end = s->high + 1; /* the last block ends at the newest packet */
		publish_one(bl, idx, s->next, end);
		s->next = end;
	}
}

void pdma_blocks_publish(struct pdma_blocks *bl)
{
	for (uint32_t i = 0; i < bl->cfg.max_streams; i++)
		publish_stream(bl, i, false);
}

void pdma_blocks_publish_open(struct pdma_blocks *bl)
{
	for (uint32_t i = 0; i < bl->cfg.max_streams; i++)
		publish_stream(bl, i, true);
}

void pdma_blocks_stop(struct pdma_blocks *bl)
{
	atomic_store(&bl->stopping, true);
	pthread_mutex_lock(&bl->lock);
	pthread_cond_broadcast(&bl->room);
	pthread_mutex_unlock(&bl->lock);
}

void pdma_blocks_flush(struct pdma_blocks *bl)
{
	pdma_blocks_stop(bl);
	pdma_blocks_publish_open(bl);
	pdma_blocks_end_subs(bl);
}

void pdma_blocks_stats(struct pdma_blocks *bl, struct pdma_ingest_stats *s)
{
	s->packets_placed = atomic_load(&bl->placed);
	s->window_drops = atomic_load(&bl->window_drops);
	s->late = atomic_load(&bl->late_pkts);
	s->blocks_published = atomic_load(&bl->published);
	s->gap_packets = atomic_load(&bl->gap_packets);
	s->streams = atomic_load(&bl->streams);
}
