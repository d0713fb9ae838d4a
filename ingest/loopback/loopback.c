// SPDX-License-Identifier: MIT
/* gen -> ingest on 127.0.0.1 inside one process, and the comparison of what
 * the generator injected with what the receiver detected, per stream. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loopback/loopback.h"

struct sender {
	struct pdma_gen *g;
	struct pdma_gen_send_opts o;
	double seconds;
	int ret;
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
	s->ret = pdma_gen_send(s->g, &s->o);
	s->seconds = now_s() - t0;
	return NULL;
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

static int run_once(const struct pdma_gen_config *gc, const struct pdma_ingest_config *ic,
		    double rate, struct pdma_loopback_result *res)
{
	struct pdma_ingest *ing = NULL;
	struct sender snd = { 0 };
	pthread_t th;
	int ret;

	ret = pdma_ingest_open_config(ic, &ing, NULL, 0);
	if (ret)
		return ret;
	ret = pdma_gen_open(gc, &snd.g);
	if (ret)
		goto out;
	snd.o.host = "127.0.0.1";
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
	pthread_join(th, NULL);
	ret = pdma_ingest_stop(ing);
	res->seconds = now_s() - t0;
	res->send_seconds = snd.seconds;
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
		memset(ls, 0, sizeof(*ls));
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
			    ls->content_errors == 0 && ls->checked_packets > 0;
		if (!ls->match)
			res->match = false;
	}
	if (res->malformed)
		res->match = false;
out:
	pdma_gen_close(snd.g);
	pdma_ingest_close(ing);
	return ret;
}

int pdma_loopback_once(const struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		       double rate_pps, struct pdma_loopback_result *res)
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
	return run_once(g, &c, rate_pps, res);
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
		ret = run_once(g, &c, rate_pps, res);
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
