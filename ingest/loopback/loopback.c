// SPDX-License-Identifier: MIT
/* gen -> ingest on 127.0.0.1 inside one process, and the comparison of what
 * the generator injected with what the receiver detected, per stream. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loopback/loopback.h"

struct sender {
	struct pdma_gen *g;
	struct pdma_gen_send_opts o;
	int netns;            /* -1: the creator's */
	double seconds;
	int ret;
	atomic_bool done;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void *send_main(void *arg)
{
	struct sender *s = arg;
	double t0 = now_s();
	/* A thread's own namespace: gen's sockets (and its sender threads,
	 * which inherit it) are opened there. */
	if (s->netns >= 0 && setns(s->netns, CLONE_NEWNET) < 0)
		s->ret = -errno;
	else
		s->ret = pdma_gen_send(s->g, &s->o);
	s->seconds = now_s() - t0;
	atomic_store(&s->done, true);
	return NULL;
}

/* A subscriber's block against the generator (struct pdma_loopback_stream's
 * block_* counts); GPU blocks read to host memory first. */
static void check_block(struct pdma_block *b, const struct pdma_gen_config *gc,
			struct pdma_loopback_result *res, uint8_t **buf, size_t *cap)
{
	uint32_t i = b->stream_id - gc->stream_id_base;
	size_t bytes = b->nsamples * b->bytes_per_sample;

	res->blocks++;
	if (i >= gc->streams)
		return;
	struct pdma_loopback_stream *ls = &res->s[i];
	const int16_t *iq = b->data;
	if (b->mem != PDMA_BLOCK_HOST) {
		if (bytes > *cap) {
			uint8_t *n = realloc(*buf, bytes);
			if (!n) {
				ls->block_errors += b->npackets;
				return;
			}
			*buf = n;
			*cap = bytes;
		}
		if (pdma_block_read(b, 0, b->npackets, *buf)) {
			ls->block_errors += b->npackets;
			return;
		}
		iq = (const int16_t *)*buf;
	}
	uint32_t gaps;

	ls->block_errors += pdma_loopback_check_block(b, iq, &gaps);
	ls->block_gaps += gaps;
	ls->block_packets += b->npackets;
}

uint32_t pdma_loopback_check_block(const struct pdma_block *b, const int16_t *iq, uint32_t *gaps)
{
	uint32_t bad = 0;

	*gaps = 0;
	for (uint32_t p = 0; p < b->npackets; p++) {
		bool gap = (b->gap_mask[p / 64] >> (p % 64)) & 1;
		for (uint32_t k = 0; k < b->samples_per_packet; k++) {
			uint64_t n = (uint64_t)p * b->samples_per_packet + k;
			uint32_t w = gap ? 0 : pdma_gen_sample(b->stream_id, b->first_sample + n);
			if (iq[2 * n] != (int16_t)(w >> 16) || iq[2 * n + 1] != (int16_t)(w & 0xffff)) {
				bad++;
				break;
			}
		}
		*gaps += gap;
	}
	return bad;
}

/* Check every filled output position of a stream against the generator's
 * sample function: the deframed bytes must be exactly what was sent. */
static void verify_content(const struct pdma_dfr *d, uint32_t idx, uint32_t id,
			   struct pdma_loopback_stream *ls)
{
	uint32_t plen = d->t.plen[idx], spp = plen / d->cfg.bytes_per_sample;
	const uint8_t *out = pdma_dfr_out(d, idx);
	for (uint32_t pos = 0; pos < d->cfg.out_pkts; pos++) {
		uint64_t tag = d->t.tags[(size_t)idx * d->cfg.out_pkts + pos];
		if (!tag)
			continue;
		uint64_t p = tag - 1, s0 = p * spp;
		const uint8_t *b = out + (size_t)pos * plen;
		for (uint32_t i = 0; i < spp; i++)
			if (pdma_vrt_get32(b + 4 * i) != pdma_gen_sample(id, s0 + i)) {
				ls->content_errors++;
				break;
			}
		ls->checked_packets++;
	}
}

int pdma_loopback_in_netns(int ns, int (*fn)(void *), void *arg, int *fn_ret)
{
	int self, ret = 0;

	if (ns < 0) {
		*fn_ret = fn(arg);
		return 0;
	}
	self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self < 0)
		return -errno;
	if (setns(ns, CLONE_NEWNET) < 0) {
		ret = -errno;
		close(self);
		return ret;
	}
	*fn_ret = fn(arg);
	/* Cannot fail with the rights that allowed the first setns; the
	 * caller learns that this thread is not back. */
	if (setns(self, CLONE_NEWNET) < 0)
		ret = -errno;
	close(self);
	return ret;
}

struct open_args {
	const struct pdma_ingest_config *ic;
	struct pdma_ingest **ing;
};

static int open_fn(void *arg)
{
	const struct open_args *a = arg;

	return pdma_ingest_open_config(a->ic, a->ing, NULL, 0);
}

/* The session, its sockets opened in network namespace ns (-1: this
 * thread's); the thread returns to its own. */
static int open_in(const struct pdma_ingest_config *ic, int ns, struct pdma_ingest **ing)
{
	struct open_args a = { ic, ing };
	int ret = -ECANCELED; /* fn's result if it never ran */
	int e = pdma_loopback_in_netns(ns, open_fn, &a, &ret);

	if (!e)
		return ret;
	if (!ret)
		pdma_ingest_close(*ing);
	return e;
}

static int run_once(const struct pdma_gen_config *gc, const struct pdma_ingest_config *ic,
		    double rate, bool blocks, const struct pdma_loopback_opts *lo,
		    struct pdma_loopback_result *res)
{
	struct pdma_ingest *ing = NULL;
	struct pdma_sub *sub = NULL;
	struct sender snd = { .netns = lo ? lo->tx_netns : -1 };
	uint8_t *buf = NULL;
	size_t cap = 0;
	pthread_t th;
	int ret;

	ret = open_in(ic, lo ? lo->rx_netns : -1, &ing);
	if (ret)
		return ret;
	ret = pdma_gen_open(gc, &snd.g);
	if (ret)
		goto out;
	/* The subscriber: a public-API consumer, where the path gives blocks
	 * (not the nic path's GPU deframer). Backpressure: it never loses a
	 * block, so every packet is accounted in its checks. */
	if (blocks && pdma_ingest_enable_blocks(ing, 64, 1, 16, 100) == 0) {
		struct pdma_sub_attr sa;

		pdma_sub_attr_init(&sa);
		sa.policy = PDMA_SUB_BACKPRESSURE;
		sa.depth = 64;
		ret = pdma_ingest_subscribe(ing, &sa, &sub);
		if (ret)
			goto out;
		res->blocks_on = true;
	}
	snd.o.host = lo && lo->host ? lo->host : "127.0.0.1";
	snd.o.batch = lo ? lo->send_batch : 0;
	snd.o.gso = lo && lo->gso;
	snd.o.port = pdma_ingest_port(ing);
	snd.o.rate_pps = rate;
	snd.o.threads = gc->send_threads;
	ret = pdma_ingest_start(ing);
	if (ret)
		goto out;
	double t0 = now_s();
	ret = pthread_create(&th, NULL, send_main, &snd);
	if (ret) {
		ret = -ret;
		pdma_ingest_stop(ing);
		goto out;
	}
	/* Consume while the sender runs, and on until the session has been
	 * quiet for 150 ms: pdma_ingest_stop never waits for a subscriber, so
	 * the blocks must be taken before it. */
	for (int quiet = 0; sub && quiet < 3;) {
		struct pdma_block *b;

		if (pdma_sub_next(sub, &b, 50) == 0) {
			check_block(b, gc, res, &buf, &cap);
			pdma_block_release(b);
			quiet = 0;
		} else if (atomic_load(&snd.done)) {
			quiet++;
		}
	}
	pthread_join(th, NULL);
	ret = pdma_ingest_stop(ing);
	res->seconds = now_s() - t0;
	res->send_seconds = snd.seconds;
	for (struct pdma_block *b; sub && pdma_sub_next(sub, &b, 0) == 0;) {
		check_block(b, gc, res, &buf, &cap);
		pdma_block_release(b);
	}
	if (!ret)
		ret = snd.ret;
	if (ret)
		goto out;

	const struct pdma_dfr *d = pdma_ingest_dfr(ing);
	pdma_ingest_totals(ing, &res->totals);
	res->malformed = d->acct.malformed_unattributed;
	res->match = true;
	for (uint32_t i = 0; i < gc->streams; i++) {
		struct pdma_loopback_stream *ls = &res->s[i];
		uint32_t id = gc->stream_id_base + i;
		ls->injected = *pdma_gen_injected(snd.g, i);
		ls->detected.stream_id = id;
		for (uint32_t k = 0; k < d->cfg.max_streams; k++) {
			struct pdma_stream_stats s;
			if (d->t.keys[k] == ((1ull << 32) | id) && pdma_acct_stream(&d->acct, k, &s)) {
				ls->detected = s;
				verify_content(d, k, id, ls);
			}
		}
		res->malformed += ls->detected.malformed;
		ls->match = ls->detected.lost == ls->injected.lost &&
			    ls->detected.duplicated == ls->injected.duplicated &&
			    ls->detected.reordered == ls->injected.reordered &&
			    ls->detected.received == gc->packets - ls->injected.lost &&
			    ls->content_errors == 0 && ls->checked_packets > 0 &&
			    (!res->blocks_on || (ls->block_packets == gc->packets &&
						 ls->block_gaps == ls->injected.lost && !ls->block_errors));
		if (!ls->match)
			res->match = false;
	}
	if (res->malformed)
		res->match = false;
out:
	free(buf);
	pdma_sub_close(sub);
	pdma_gen_close(snd.g);
	pdma_ingest_close(ing);
	return ret;
}

int pdma_loopback_once(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		       double rate_pps, struct pdma_loopback_result *res)
{
	return pdma_loopback_once_opts(g, ic, rate_pps, NULL, res);
}

int pdma_loopback_once_opts(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
			    double rate_pps, const struct pdma_loopback_opts *o, struct pdma_loopback_result *res)
{
	struct pdma_ingest_config c = *ic;
	memset(res, 0, sizeof(*res));
	res->streams = g->streams;
	res->s = calloc(g->streams, sizeof(*res->s));
	if (!res->s)
		return -ENOMEM;
	c.port = 0;
	res->attempts = 1;
	res->rate_pps = rate_pps;
	return run_once(g, &c, rate_pps, false, o, res);
}

int pdma_loopback_run(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		      double rate_pps, struct pdma_loopback_result *res)
{
	struct pdma_ingest_config c = *ic;
	int ret = 0;

	memset(res, 0, sizeof(*res));
	res->streams = g->streams;
	res->s = calloc(g->streams, sizeof(*res->s));
	if (!res->s)
		return -ENOMEM;
	c.port = 0;
	for (res->attempts = 1; res->attempts <= 4; res->attempts++) {
		res->rate_pps = rate_pps;
		for (uint32_t i = 0; i < g->streams; i++)
			memset(&res->s[i], 0, sizeof(res->s[i]));
		res->blocks = 0;
		ret = run_once(g, &c, rate_pps, true, NULL, res);
		if (ret)
			break;
		if (res->totals.socket_drops == 0 && res->totals.ring_overruns == 0)
			break;
		rate_pps = rate_pps > 0 ? rate_pps / 2 : 100000;
	}
	if (res->attempts > 4)
		res->attempts = 4;
	return ret;
}
