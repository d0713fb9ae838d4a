// SPDX-License-Identifier: MIT
/*
 * bench_ingest part (f): consumers of the public ingest API
 * (include/peerdma/ingest.h), gen -> a session over loopback -> a
 * subscription, per receive path and consumer style (pdma_sub_next, a
 * callback, or no subscriber at all):
 *  - delivery latency: from a packet's arrival in the receive socket to
 *    the moment its block is in the consumer's hands (pdma_sub_next
 *    returned or the callback ran; on the GPU paths, once the block's
 *    event completed). Over loopback a datagram arrives inside the
 *    sendmmsg that carries it, so the latency lies between the one from
 *    just after that call (lo: a lower bound) and the one from just
 *    before it (hi: an upper bound); in the paced runs gen sends one
 *    datagram per call, so the two are a few microseconds apart. Per block, for its newest packet (what the pipeline adds:
 *    receive, deframe, publication, queue, wake-up) and for its oldest
 *    (plus the time the block takes to fill at the stream's rate: hi), at
 *    a paced rate; late_blocks 0 throughout
 *    (gen does not reorder here; each late block would add one block's
 *    fill time to both);
 *  - throughput: unpaced (one sender thread per stream), the consumer's
 *    delivered packets and sample bytes per second against the datagrams
 *    the receive path took in the same run; the run without a subscriber
 *    shows what the receive path does without the copy out into blocks.
 * The consumer reads every sample of a host block (a sum), so its rate
 * includes touching the data once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ingest.h"
#include "peerdma/ingest.h"
#include "peerdma/vrt.h"

#define BLOCK 64 /* block_packets */

struct frun {
	const char *style;        /* "poll", "callback", "none" */
	enum pdma_ingest_path_kind path;
	const char *pname;
	double rate;              /* offered datagrams/s, 0: unpaced */
	uint32_t late;            /* late_blocks */
};

struct fstate {
	const struct pdma_gen_config *g;
	uint64_t k0;              /* gen's first packet index */
	uint32_t spp;
	/* [streams * packets]: each packet's sendmmsg, just before and just
	 * after (the sender thread writes, the consumer reads: a block can be
	 * taken before the call that carried its packets has returned) */
	_Atomic double *tsend, *tsent;
	_Atomic uint64_t handed;  /* datagrams handed to sendmmsg */
	double *lat_new, *lat_new_lo, *lat_old;
	size_t nlat, caplat;
	uint64_t blocks, packets, bytes;
	double t_first, t_last;   /* first and last block taken */
	/* whole blocks (block_packets packets): the rates and latencies; a
	 * stream's last block is cut short and waits for the idle flush
	 * (flush_idle_ms) by design, its first starts at its first packet */
	uint64_t full_packets, full_bytes, partial;
	double t_full;            /* the last whole block taken */
	uint64_t sum;             /* the samples read */
	void *buf;                /* GPU blocks: one packet read back */
	int err;
};

/* gen's sender threads, just before each sendmmsg. */
static void on_send(void *arg, const struct iovec *iov, uint32_t n, double t, bool after)
{
	struct fstate *f = arg;
	const struct pdma_gen_config *g = f->g;
	struct pdma_vrt_packet v;

	if (!after)
		atomic_fetch_add_explicit(&f->handed, n, memory_order_relaxed);
	for (uint32_t i = 0; i < n; i++) {
		if (pdma_vrt_parse(iov[i].iov_base, iov[i].iov_len, PDMA_VRT_EXACT, &v) < 0 ||
		    v.type != PDMA_VRT_DATA_SID)
			continue;
		uint32_t si = v.stream_id - g->stream_id_base;
		uint64_t k = ((uint64_t)v.ts_int * g->sample_rate + v.ts_frac) / f->spp - f->k0;
		if (si < g->streams && k < g->packets)
			atomic_store_explicit(&(after ? f->tsent : f->tsend)[(size_t)si * g->packets + k], t,
					      memory_order_relaxed);
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* One block in the consumer's hands. */
static void take(struct fstate *f, struct pdma_block *b)
{
	const struct pdma_gen_config *g = f->g;
	double t;

	if (b->mem == PDMA_BLOCK_HOST) {
		t = now_s();
		const int16_t *s = b->data;
		uint64_t sum = 0;
		for (uint64_t i = 0; i < b->nsamples * 2; i++)
			sum += (uint16_t)s[i];
		f->sum += sum;
	} else {
		/* waits for the block's event: the samples are valid from here */
		if (pdma_block_read(b, 0, 1, f->buf) && !f->err)
			f->err = -EIO;
		t = now_s();
	}
	if (!f->blocks++)
		f->t_first = t;
	f->t_last = t;
	f->packets += b->npackets - b->gaps;
	f->bytes += (b->npackets - b->gaps) * (uint64_t)b->samples_per_packet * b->bytes_per_sample;
	if (b->npackets != BLOCK) {
		f->partial++;
		pdma_block_release(b);
		return;
	}
	f->t_full = t;
	f->full_packets += b->npackets - b->gaps;
	f->full_bytes += (b->npackets - b->gaps) * (uint64_t)b->samples_per_packet * b->bytes_per_sample;
	uint32_t si = b->stream_id - g->stream_id_base;
	uint64_t k0 = b->first_sample / f->spp - f->k0;
	double tn = 0, tna = 0, to = 1e300;
	for (uint32_t i = 0; i < b->npackets && si < g->streams; i++) {
		if (b->gap_mask[i / 64] >> (i % 64) & 1 || k0 + i >= g->packets)
			continue;
		size_t at = (size_t)si * g->packets + k0 + i;
		double ts = atomic_load_explicit(&f->tsend[at], memory_order_relaxed);
		if (ts > tn) {
			tn = ts;
			tna = atomic_load_explicit(&f->tsent[at], memory_order_relaxed);
		}
		if (ts < to)
			to = ts;
	}
	if (tn > 0 && f->nlat < f->caplat) {
		f->lat_new[f->nlat] = t - tn;
		/* taken before its sendmmsg returned: the lower bound is 0 */
		f->lat_new_lo[f->nlat] = tna > 0 && tna < t ? t - tna : 0;
		f->lat_old[f->nlat++] = t - to;
	}
	pdma_block_release(b);
}

static void take_cb(struct pdma_block *b, void *arg)
{
	take(arg, b);
}

struct poller {
	struct pdma_sub *sub;
	struct fstate *f;
};

static void *poll_main(void *arg)
{
	struct poller *p = arg;
	struct pdma_block *b;
	int e;

	while ((e = pdma_sub_next(p->sub, &b, -1)) == 0)
		take(p->f, b);
	if (e != -EPIPE && !p->f->err)
		p->f->err = e;
	return NULL;
}

struct sender {
	struct pdma_gen *gen;
	struct pdma_gen_send_opts o;
	double t0, t1;
	int ret;
};

static void *send_main(void *arg)
{
	struct sender *s = arg;

	s->t0 = now_s();
	s->ret = pdma_gen_send(s->gen, &s->o);
	s->t1 = now_s();
	return NULL;
}

/* Percentile p of v (sorted, n values); p 1: the maximum. */
static double pct(const double *v, size_t n, double p)
{
	return n ? v[(size_t)(p * (double)(n - 1) + 0.5)] : 0;
}

/* p50, p99 and maximum of sorted latencies, in microseconds. */
static json_t *lat_json(const double *v, size_t n)
{
	return json_pack("{s:f,s:f,s:f}", "p50", pct(v, n, .5) * 1e6, "p99", pct(v, n, .99) * 1e6,
			 "max", pct(v, n, 1) * 1e6);
}

/* One run: prints its row, appends its record. */
static int f_run(const struct frun *r, uint64_t packets, json_t *arr)
{
	struct pdma_gen_config g;
	struct pdma_ingest_attr a;
	struct pdma_sub_attr sa;
	struct pdma_ingest *ing = NULL;
	struct pdma_sub *sub = NULL;
	struct pdma_ingest_stats st;
	struct pdma_sub_stats ss = { 0 };
	struct fstate f = { 0 };
	struct sender snd = { 0 };
	struct poller pl;
	pthread_t pth, sth;
	bool polling = false;
	char msg[256];
	int e;

	pdma_gen_config_default(&g);
	g.streams = 4;
	g.packet_size = 1500;
	g.context = false;
	g.packets = packets;
	f.g = &g;
	f.spp = pdma_gen_payload_len(&g) / 4;
	f.k0 = ((uint64_t)g.ts_start * g.sample_rate + f.spp - 1) / f.spp;
	f.tsend = calloc((size_t)g.streams * g.packets, sizeof(*f.tsend));
	f.tsent = calloc((size_t)g.streams * g.packets, sizeof(*f.tsent));
	f.caplat = (size_t)(g.streams * g.packets / 64 + 16 * g.streams);
	f.lat_new = calloc(f.caplat, sizeof(double));
	f.lat_new_lo = calloc(f.caplat, sizeof(double));
	f.lat_old = calloc(f.caplat, sizeof(double));
	f.buf = malloc(pdma_gen_payload_len(&g));
	if (!f.tsend || !f.tsent || !f.lat_new || !f.lat_new_lo || !f.lat_old || !f.buf) {
		e = -ENOMEM;
		goto out;
	}
	pdma_ingest_attr_init(&a);
	a.path = r->path;
	a.max_streams = 8;
	a.max_payload = (pdma_gen_payload_len(&g) + 3) & ~3u;
	a.block_packets = BLOCK;
	a.window_blocks = 64;
	a.late_blocks = r->late;
	e = pdma_ingest_open(&a, &ing, msg, sizeof(msg));
	if (e) {
		fprintf(stderr, "bench_ingest (f): %s: %s: %s\n", r->pname, strerror(-e), msg);
		goto out;
	}
	if (strcmp(r->style, "none")) {
		pdma_sub_attr_init(&sa);
		sa.depth = 64;
		if (!strcmp(r->style, "callback")) {
			sa.cb = take_cb;
			sa.cb_arg = &f;
		}
		e = pdma_ingest_subscribe(ing, &sa, &sub);
		if (e)
			goto out;
	}
	e = pdma_ingest_start(ing);
	if (e)
		goto out;
	if (sub && !sa.cb) {
		pl = (struct poller){ sub, &f };
		e = -pthread_create(&pth, NULL, poll_main, &pl);
		if (e)
			goto stop;
		polling = true;
	}
	e = pdma_gen_open(&g, &snd.gen);
	if (e)
		goto stop;
	snd.o.port = pdma_ingest_port(ing);
	snd.o.rate_pps = r->rate;
	/* unpaced: as many senders as streams, so that the receive path, not
	 * one sender, sets the rate */
	snd.o.threads = r->rate > 0 ? 1 : g.streams;
	/* paced: one datagram per sendmmsg, so that the bounds of each one's
	 * arrival are one datagram's send apart (a batch of 64 is ~150 us) */
	snd.o.batch = r->rate > 0 ? 1 : 0;
	snd.o.on_send = on_send;
	snd.o.on_send_arg = &f;
	e = -pthread_create(&sth, NULL, send_main, &snd);
	if (!e) {
		pthread_join(sth, NULL);
		e = snd.ret;
	}
	pdma_gen_close(snd.gen);
	/* what is still in the socket and the rings */
	for (uint64_t last = UINT64_MAX; !e;) {
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		pdma_ingest_stats(ing, &st);
		if (st.datagrams == last)
			break;
		last = st.datagrams;
	}
stop:
	pdma_ingest_stop(ing);
	if (polling)
		pthread_join(pth, NULL);
	pdma_ingest_stats(ing, &st);
	if (sub) {
		pdma_sub_stats(sub, &ss);
		pdma_sub_close(sub);
	}
	if (e || f.err) {
		fprintf(stderr, "bench_ingest (f): %s %s: %s\n", r->pname, r->style, strerror(-(e ? e : f.err)));
		e = e ? e : f.err;
		goto out;
	}
	qsort(f.lat_new, f.nlat, sizeof(double), cmp_d);
	qsort(f.lat_new_lo, f.nlat, sizeof(double), cmp_d);
	qsort(f.lat_old, f.nlat, sizeof(double), cmp_d);
	{
		/* the receive rate over the send window (what the socket
		 * took while gen sent), the consumer's over its whole blocks */
		double send_s = snd.t1 - snd.t0, take_s = f.t_full - f.t_first;
		double rx_pps = send_s > 0 ? (double)st.datagrams / send_s : 0;
		double c_pps = take_s > 0 ? (double)f.full_packets / take_s : 0;
		double c_mbps = take_s > 0 ? (double)f.full_bytes / take_s / 1e6 : 0;
		double ratio = st.datagrams ? (double)f.packets / (double)st.datagrams : 0;
		json_t *j = json_object();

		printf("  %-11s %-8s %7s %7.0f %7.0f %7.1f %6.3f %8llu %7.1f %7.1f %7.1f %7.1f %7.1f\n", r->pname,
		       r->style, r->rate > 0 ? "paced" : "unpaced", rx_pps / 1e3, c_pps / 1e3,
		       c_mbps, sub ? ratio : 0,
		       (unsigned long long)ss.overruns, pct(f.lat_new_lo, f.nlat, .5) * 1e6,
		       pct(f.lat_new, f.nlat, .5) * 1e6,
		       pct(f.lat_new, f.nlat, .99) * 1e6, pct(f.lat_new, f.nlat, 1) * 1e6,
		       pct(f.lat_old, f.nlat, .5) * 1e6);
		json_object_set_new(j, "path", json_string(r->pname));
		json_object_set_new(j, "consumer", json_string(r->style));
		json_object_set_new(j, "offered_pps", json_real(r->rate));
		json_object_set_new(j, "late_blocks", json_integer(r->late));
		/* every datagram gen handed to the socket is received or
		 * counted as dropped; what is not is reported, not hidden */
		uint64_t handed = atomic_load(&f.handed), acc = st.datagrams + st.socket_drops + st.ring_overruns;
		if (handed != acc)
			printf("  %s %s: %llu datagrams sent, %llu received or counted as dropped\n", r->pname,
			       r->style, (unsigned long long)handed, (unsigned long long)acc);
		json_object_set_new(j, "datagrams_sent", json_integer((json_int_t)handed));
		json_object_set_new(j, "datagrams_received", json_integer((json_int_t)st.datagrams));
		json_object_set_new(j, "socket_drops", json_integer((json_int_t)st.socket_drops));
		json_object_set_new(j, "ring_overruns", json_integer((json_int_t)st.ring_overruns));
		json_object_set_new(j, "receive_pps", json_real(rx_pps));
		json_object_set_new(j, "blocks_taken", json_integer((json_int_t)f.blocks));
		json_object_set_new(j, "packets_taken", json_integer((json_int_t)f.packets));
		json_object_set_new(j, "consumer_pps", json_real(c_pps));
		json_object_set_new(j, "consumer_MBps", json_real(c_mbps));
		json_object_set_new(j, "partial_blocks", json_integer((json_int_t)f.partial));
		json_object_set_new(j, "taken_over_received", json_real(sub ? ratio : 0));
		json_object_set_new(j, "overruns", json_integer((json_int_t)ss.overruns));
		json_object_set_new(j, "window_drops", json_integer((json_int_t)st.window_drops));
		json_object_set_new(j, "latency_newest_lo_us", lat_json(f.lat_new_lo, f.nlat));
		json_object_set_new(j, "latency_newest_us", lat_json(f.lat_new, f.nlat));
		json_object_set_new(j, "latency_oldest_us", lat_json(f.lat_old, f.nlat));
		json_object_set_new(j, "checksum", json_integer((json_int_t)(f.sum & 0x7fffffff)));
		json_array_append_new(arr, j);
	}
out:
	pdma_ingest_close(ing);
	free((void *)f.tsend);
	free((void *)f.tsent);
	free(f.lat_new_lo);
	free(f.lat_new);
	free(f.lat_old);
	free(f.buf);
	return e;
}

void part_f(struct ctx *x)
{
	static const struct {
		enum pdma_ingest_path_kind path;
		const char *name;
		bool gpu;
	} paths[] = {
		{ PDMA_INGEST_PATH_CPU, "cpu", false },
		{ PDMA_INGEST_PATH_HOST_STAGED, "host-staged", true },
		{ PDMA_INGEST_PATH_ZERO_COPY, "zero-copy", true },
	};
	static const char *const styles[] = { "poll", "callback", "none" };
	json_t *arr = json_array();
	/* whole blocks: every block is published by the stream moving past
	 * it, none by the idle flush (flush_idle_ms) */
	uint64_t lat_pkts = x->quick ? 64 * 80 : 64 * 400, thr_pkts = x->quick ? 64 * 400 : 64 * 4000;

	printf("\n(f) consumers of the public API: 4 streams of 1500 B datagrams over loopback, blocks of 64\n"
	       "    packets; latency from a packet's arrival in the socket to its block in the consumer's hands\n"
	       "    (paced 100k datagrams/s), throughput unpaced; late_blocks 0 (each late block adds\n"
	       "    one block's fill time, 64 packets at the stream's rate)\n");
	printf("  %-11s %-8s %7s %7s %7s %7s %6s %8s %15s %7s %7s %7s\n", "", "", "", "rx", "took", "took",
	       "", "", "newest packet", "", "", "oldest");
	printf("  %-11s %-8s %7s %7s %7s %7s %6s %8s %7s %7s %7s %7s %7s\n", "path", "consumer", "rate",
	       "kpps", "kpps", "MB/s", "took/rx", "overruns", "p50 lo", "p50 hi", "p99 hi", "max hi",
	       "p50 hi");
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (paths[i].gpu && !x->gpu)
			continue;
		for (size_t k = 0; k < 3; k++) {
			struct frun r = { styles[k], paths[i].path, paths[i].name, 100e3, 0 };

			if (k < 2)
				f_run(&r, lat_pkts, arr);
			r.rate = 0;
			f_run(&r, thr_pkts, arr);
		}
	}
	printf("  (latency in microseconds from the packet's arrival in the socket: lo from just after\n"
	       "   the sendmmsg that carried it, hi from just before it)\n");
	json_object_set_new(x->root, "consumers", arr);
}
