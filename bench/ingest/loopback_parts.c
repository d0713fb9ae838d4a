// SPDX-License-Identifier: MIT
/*
 * bench_ingest's receive parts: (c) gen -> ingest end to end over loopback,
 * the highest zero-loss rate per path, receive I/O and thread count; (d) the
 * 2014 design's baseline (recv() per datagram, one copy per packet).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_ingest.h"

/* (c) highest zero-loss rate for each path and thread count. */
static const double rates[] = { 50e3, 100e3, 200e3, 400e3, 800e3, 1.6e6, 3.2e6 };

/* The system's CPU time so far, from /proc/stat's first line: softirq and
 * all busy time (user, nice, system, irq, softirq, steal), in seconds.
 * Tick-sampled (USER_HZ), so only runs of many ticks say much. */
static void proc_stat(double *softirq, double *busy)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");

	*softirq = *busy = 0;
	if (!f)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
		   &v[5], &v[6], &v[7]) == 8) {
		double hz = (double)sysconf(_SC_CLK_TCK);
		*softirq = (double)v[6] / hz;
		*busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
	}
	fclose(f);
}

/* One run at an offered rate; appends its record to runs. r->sent_pps: the
 * rate the senders achieved (datagrams sent over their own time); the CPU
 * figures are per received datagram. */
struct run_fig {
	bool ok;
	double sent_pps, rx_pps;
	struct rx_costs c;
	uint64_t drops, overruns;   /* socket drops, ring overruns */
};

/* A run's or a row's costs, under the same keys. */
static void costs_json(json_t *o, const struct rx_costs *c, bool gro)
{
	json_object_set_new(o, "rx_cpu_ns_per_datagram", json_real(c->rx_cpu_ns));
	json_object_set_new(o, "rx_sys_ns_per_datagram", json_real(c->rx_sys_ns));
	json_object_set_new(o, "softirq_ns_per_datagram", json_real(c->softirq_ns));
	json_object_set_new(o, "all_cpus_busy_ns_per_datagram", json_real(c->busy_ns));
	json_object_set_new(o, "rx_thread_utilization", json_real(c->rx_util));
	if (gro)
		json_object_set_new(o, "datagrams_per_gro_buffer", json_real(c->per_buf));
}

static int c_run(struct pdma_gen_config *g, const struct pdma_ingest_config *ic,
		 const struct pdma_loopback_opts *lo, double rate, double sec, json_t *runs,
		 struct run_fig *r)
{
	struct pdma_loopback_result res;
	double si0, bu0, si1, bu1;
	g->packets = (uint64_t)(rate * sec / g->streams);
	if (g->packets < 500)
		g->packets = 500;
	proc_stat(&si0, &bu0);
	int e = pdma_loopback_once_opts(g, ic, rate, lo, &res);
	proc_stat(&si1, &bu1);
	if (e) {
		free(res.s);
		return e;
	}
	uint64_t sent = 0;
	for (uint32_t i = 0; i < res.streams; i++)
		sent += res.s[i].injected.sent;
	double n = res.totals.datagrams ? (double)res.totals.datagrams : 1;
	memset(r, 0, sizeof(*r));
	r->sent_pps = res.send_seconds > 0 ? (double)sent / res.send_seconds : 0;
	r->rx_pps = res.seconds > 0 ? (double)res.totals.datagrams / res.seconds : 0;
	r->ok = res.match && !res.totals.socket_drops && !res.totals.ring_overruns && !res.totals.truncated;
	r->c.rx_cpu_ns = res.totals.rx_cpu_s * 1e9 / n;
	r->c.rx_sys_ns = res.totals.rx_sys_s * 1e9 / n;
	r->c.softirq_ns = (si1 - si0) * 1e9 / n;
	r->c.busy_ns = (bu1 - bu0) * 1e9 / n;
	r->c.rx_util = res.seconds > 0 ? res.totals.rx_cpu_s / res.seconds : 0;
	r->drops = res.totals.socket_drops;
	r->overruns = res.totals.ring_overruns;
	r->c.per_buf = res.totals.gro_buffers ? (double)res.totals.datagrams / (double)res.totals.gro_buffers : 0;
	json_t *j = json_object();
	json_object_set_new(j, "offered_pps", json_real(rate));
	json_object_set_new(j, "sent_pps", json_real(r->sent_pps));
	json_object_set_new(j, "received_pps", json_real(r->rx_pps));
	json_object_set_new(j, "datagrams", json_integer((json_int_t)res.totals.datagrams));
	json_object_set_new(j, "socket_drops", json_integer((json_int_t)res.totals.socket_drops));
	json_object_set_new(j, "ring_overruns", json_integer((json_int_t)res.totals.ring_overruns));
	json_object_set_new(j, "truncated", json_integer((json_int_t)res.totals.truncated));
	if (ic->rx_io == PDMA_RX_IO_XDP) {
		json_object_set_new(j, "xdp_via_stack", json_integer((json_int_t)res.totals.xdp_stack));
		json_object_set_new(j, "xdp_invalid", json_integer((json_int_t)res.totals.xdp_invalid));
	}
	json_object_set_new(j, "zero_loss", json_boolean(r->ok));
	costs_json(j, &r->c, ic->rx_io == PDMA_RX_IO_GRO);
	json_array_append_new(runs, j);
	free(res.s);
	return 0;
}

/* One row (bench_ingest.h). Doubles the offered rate until a run loses or
 * the senders fall behind it, then bisects between the last zero-loss rate
 * and the first lossy one (to 5%). The rate reported is the senders'
 * achieved rate of the best zero-loss run, with that run's CPU figures. */
void c_row(struct ctx *x, enum pdma_rx_path path, const char *pname, enum pdma_rx_io io, uint32_t threads,
	   uint32_t streams, uint32_t senders, const struct pdma_loopback_opts *lo, json_t *arr, json_t *extra,
	   struct row_fig *f)
{
	struct run_fig best = { 0 }, loss = { 0 };
	double loss_rate = 0;
	const char *ioname = pdma_rx_io_name(io);
	struct pdma_gen_config g;
	struct pdma_ingest_config ic;
	double lo_rate = 0, hi = 0, rate = 50e3, sec = x->quick ? 0.25 : 0.6;
	json_t *runs = json_array();
	memset(f, 0, sizeof(*f));
	pdma_gen_config_default(&g);
	g.packet_size = 1500;
	g.context = false;
	g.streams = streams;
	g.send_threads = senders;
	pdma_ingest_config_default(&ic);
	ic.threads = threads;
	ic.path = path;
	ic.rx_io = io;
	ic.slot_size = 1536;
	ic.ring_slots = 16384;
	ic.dfr.max_payload = 1500;
	/* Output window: 16k packets per stream (positions reused across
	 * batches, newer wins), 16 table entries. */
	ic.dfr.out_pkts = 16384;
	ic.dfr.max_streams = 16;
	if (lo && lo->host)
		ic.bind_addr = lo->host;
	for (int n = 0; n < 24; n++) {
		struct run_fig r;
		int e = c_run(&g, &ic, lo, rate, sec, runs, &r);
		if (e) {
			fprintf(stderr, "%s, %s: %s\n", pname, ioname, strerror(-e));
			f->failed = true;
			break;
		}
		if (r.ok) {
			if (r.sent_pps > best.sent_pps)
				best = r;
			lo_rate = rate;
			if (r.sent_pps < 0.9 * rate && hi == 0) {
				/* No loss at the senders' maximum (and no lossy run
				 * seen): a lower bound only. */
				f->sender_limited = true;
				break;
			}
		} else {
			hi = rate;
			if (loss_rate == 0 || rate < loss_rate) {
				loss_rate = rate;
				loss = r;
			}
		}
		if (hi == 0)
			rate *= 2;
		else if (hi - lo_rate <= 0.05 * hi)
			break;
		else
			rate = lo_rate > 0 ? (lo_rate + hi) / 2 : hi / 2;
		if (rate < 1e3)
			break;
	}
	f->pps = best.sent_pps;
	f->c = best.c;
	/* Who lost first: the socket buffer overflowed (the receive thread was
	 * behind), the ring (the deframer was), or neither counted it: lost on
	 * the way, before any socket (a veth's queue, a backlog). */
	f->limit = f->failed ? "failed" : f->sender_limited ? "sender" : !loss_rate ? "" :
		   !loss.drops && !loss.overruns ? "device" : loss.drops >= loss.overruns ? "socket" : "ring";
	json_t *o = extra ? extra : json_object();
	json_object_set_new(o, "path", json_string(pname));
	json_object_set_new(o, "rx_io", json_string(ioname));
	json_object_set_new(o, "threads", json_integer(threads));
	json_object_set_new(o, "sender_threads", json_integer(senders));
	json_object_set_new(o, "streams", json_integer(streams));
	json_object_set_new(o, "max_zero_loss_pps", json_real(f->pps));
	json_object_set_new(o, "max_zero_loss_gbps", json_real(f->pps * 1500 * 8 / 1e9));
	json_object_set_new(o, "sender_limited", json_boolean(f->sender_limited));
	costs_json(o, &f->c, io == PDMA_RX_IO_GRO);
	json_object_set_new(o, "failed", json_boolean(f->failed));
	json_object_set_new(o, "first_loss", json_string(f->limit));
	json_object_set_new(o, "runs", runs);
	json_array_append_new(arr, o);
}

/* (c): every path this machine has, with recvmmsg and io_uring receive side
 * by side (an io_uring row says "(failed)" and why where io_uring is
 * unavailable). */
void part_c(struct ctx *x, json_t **best1)
{
	json_t *arr = json_array();
	uint32_t threads[] = { 1, 2, 4 };
	enum pdma_rx_path paths[] = { PDMA_RX_CPU, PDMA_RX_HOST_STAGED };
	const char *pname[] = { "cpu", "host-staged" };
	const uint32_t streams = 8;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* Enough senders to outrun the receivers: half the cores, one per
	 * stream at most (on loopback a sender also pays the receive-side
	 * network stack up to the socket queue). */
	uint32_t senders = ncpu > 3 ? (uint32_t)(ncpu / 2) : 1;
	if (senders > streams)
		senders = streams;

	printf("\n(c) end-to-end gen -> ingest over 127.0.0.1, 1500-byte packets, %u streams, %u sender "
	       "threads\n", streams, senders);
	printf("%12s %9s %8s %14s %10s %12s\n", "path", "rx", "threads", "max 0-loss pps", "Gb/s", "rx CPU ns/dg");
	json_object_set_new(x->root, "c_sender_threads", json_integer(senders));
	for (int p = 0; p < (x->gpu ? 2 : 1); p++)
		for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++)
			for (int io = 0; io < 2; io++) {
				if (x->rxlist && !in_list(x->rxlist, io ? "io_uring" : "recvmmsg"))
					continue;
				struct row_fig f;
				c_row(x, paths[p], pname[p], io ? PDMA_RX_IO_URING : PDMA_RX_IO_RECVMMSG, threads[k],
				      streams, senders, NULL, arr, NULL, &f);
				double b = f.pps;
				printf("%12s %9s %8u %14.0f %10.2f %12.0f %s\n", pname[p], io ? "io_uring" : "recvmmsg",
				       threads[k], b, b * 1500 * 8 / 1e9, f.c.rx_cpu_ns,
				       f.failed ? "(failed)" : f.sender_limited
				       ? "(sender-limited: no loss at the senders' maximum)" : "");
				if (p == 0 && k == 0 && !*best1)
					*best1 = json_real(b); /* (d)'s comparison: the first row */
			}
	json_object_set_new(x->root, "c_loopback", arr);
}

/* (d) the 2014 design: recv() per datagram into pinned memory, one copy per
 * packet (to the GPU with a GPU, else a host memcpy). */
struct base_rx {
	int fd;
	uint8_t *buf;      /* pinned receive buffer */
	uint8_t *dst;      /* copy destination (device or host) */
	size_t dst_bytes;
	struct ctx *x;
	struct pdma_gpu_dfr *g;
	atomic_bool stop;
	uint64_t got;
	int err;
};

static void *base_main(void *arg)
{
	struct base_rx *b = arg;
	size_t off = 0;
	for (;;) {
		ssize_t n = recv(b->fd, b->buf, 65536, 0);
		if (n < 0) {
			if ((errno == EAGAIN || errno == EWOULDBLOCK) && atomic_load(&b->stop))
				break;
			continue;
		}
		if (off + (size_t)n > b->dst_bytes)
			off = 0;
		if (b->g) {
			if (b->x->bops.copy_one(b->g, b->dst + off, b->buf, (size_t)n)) {
				b->err = -EIO;
				break;
			}
		} else {
			memcpy(b->dst + off, b->buf, (size_t)n);
		}
		off += (size_t)n;
		b->got++;
	}
	return NULL;
}

void part_d(struct ctx *x, json_t *ours1)
{
	json_t *o = json_object(), *runs = json_array();
	struct pdma_dfr_config c;
	struct base_rx b = { .x = x, .fd = -1 };
	double best = 0;
	bool limited = false;

	pdma_dfr_config_default(&c);
	c.max_streams = 1;
	c.out_pkts = 1;
	if (x->gpu && x->ops.open(&c, 0, &b.g) == 0) {
		b.dst_bytes = 64u << 20;
		if (x->ops.dev_alloc(b.g, b.dst_bytes, (void **)&b.dst))
			goto out;
	} else {
		b.dst_bytes = 64u << 20;
		b.dst = malloc(b.dst_bytes);
	}
	struct pdma_ring pinned; /* a one-slot "ring": pinned receive memory */
	if (pdma_ring_init(&pinned, 1, 65536 + 64, PDMA_RING_FULL))
		goto out;
	b.buf = pinned.base;
	if (b.g)
		x->ops.host_register(b.g, pinned.base, pinned.bytes);
	printf("\n(d) 2014 baseline: recv() per datagram into pinned memory + one %s copy per packet\n",
	       b.g ? "cudaMemcpy (H2D)" : "memcpy");
	for (size_t q = 0; q < sizeof(rates) / sizeof(rates[0]); q++) {
		struct pdma_gen_config g;
		struct pdma_gen *gen;
		struct sockaddr_in a = { .sin_family = AF_INET };
		socklen_t al = sizeof(a);
		int sz = 32 << 20;
		struct timeval tv = { 0, 20000 };
		pthread_t th;

		pdma_gen_config_default(&g);
		g.packet_size = 1500;
		g.context = false;
		g.packets = (uint64_t)(rates[q] * (x->quick ? 0.25 : 0.6) / g.streams);
		if (g.packets < 500)
			g.packets = 500;
		b.fd = socket(AF_INET, SOCK_DGRAM, 0);
		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		if (setsockopt(b.fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
			setsockopt(b.fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
		setsockopt(b.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		bind(b.fd, (struct sockaddr *)&a, sizeof(a));
		getsockname(b.fd, (struct sockaddr *)&a, &al);
		b.got = 0;
		atomic_store(&b.stop, false);
		pthread_create(&th, NULL, base_main, &b);
		pdma_gen_open(&g, &gen);
		struct pdma_gen_send_opts so = { .host = "127.0.0.1", .port = ntohs(a.sin_port),
						 .rate_pps = rates[q] };
		double t0 = now_s();
		pdma_gen_send(gen, &so);
		atomic_store(&b.stop, true);
		pthread_join(th, NULL);
		double sec = now_s() - t0;
		uint64_t sent = g.packets * g.streams;
		pdma_gen_close(gen);
		close(b.fd);
		bool ok = b.got == sent && !b.err;
		json_t *j = json_object();
		json_object_set_new(j, "offered_pps", json_real(rates[q]));
		json_object_set_new(j, "received_pps", json_real((double)b.got / sec));
		json_object_set_new(j, "lost", json_integer((json_int_t)(sent - b.got)));
		json_object_set_new(j, "zero_loss", json_boolean(ok));
		json_array_append_new(runs, j);
		if (!ok)
			break;
		double got = (double)b.got / sec;
		if (got > best)
			best = got;
		if (got < 0.7 * rates[q]) {
			limited = true;
			break;
		}
	}
	printf("baseline max zero-loss rate: %.0f pkt/s (%.2f Gb/s)%s; this pipeline (cpu path, 1 thread): "
	       "%.0f pkt/s\n", best, best * 1500 * 8 / 1e9, limited ? " (sender-limited)" : "",
	       ours1 ? json_real_value(ours1) : 0.0);
	json_object_set_new(o, "sender_limited", json_boolean(limited));
	json_object_set_new(o, "copy", json_string(b.g ? "cudaMemcpy H2D per packet" : "memcpy per packet"));
	json_object_set_new(o, "max_zero_loss_pps", json_real(best));
	json_object_set_new(o, "ours_cpu_1thread_max_zero_loss_pps", ours1 ? json_incref(ours1) : json_null());
	json_object_set_new(o, "runs", runs);
	if (b.g)
		x->ops.host_unregister(b.g, pinned.base);
	pdma_ring_fini(&pinned);
out:
	if (b.g) {
		if (b.dst)
			x->ops.dev_free(b.g, b.dst);
		x->ops.close(b.g);
	} else {
		free(b.dst);
	}
	json_object_set_new(x->root, "d_baseline_2014", o);
}
