// SPDX-License-Identifier: MIT
/* The VITA-49 generator: DIFI-style data packets (stream ID, class ID, UTC
 * integer + sample-count fractional timestamps, optional trailer), with
 * deterministic injected loss, reordering and duplication, counted per
 * stream so a receiver's accounting can be checked against it exactly. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gen/gen.h"
#include "peerdma/vrt.h"

#define GEN_OUI 0x7c386cu /* class ID OUI used by the generator (any 24-bit value) */
#define GEN_BURST 32u     /* datagrams per stream per round-robin turn */

struct gen_stream {
	uint64_t next;       /* next packet index to decide on */
	uint64_t q[2];       /* pending packet indices, q[0] first */
	uint32_t nq;
	uint32_t turn;       /* datagrams sent in the current turn */
	bool ctx_sent;
	uint8_t ctx_count;
	uint64_t rng;
	struct pdma_gen_inject inj;
};

/* Round-robin over the streams first, first + step, ... (a sender thread
 * owns one such disjoint subset; pdma_gen_next walks all of them). Every
 * stream's state (injection RNG, queue, counts) is its own, so what a stream
 * sends and injects does not depend on how the streams are split. */
struct gen_iter {
	uint32_t first, step;
	uint32_t cur;        /* round-robin position (a stream index) */
	uint32_t live;       /* streams of this subset with packets left */
	uint32_t burst;      /* datagrams per stream per turn */
};

struct pdma_gen {
	struct pdma_gen_config c;
	uint32_t plen, spp;
	uint64_t k0;         /* packet index of the first packet (absolute) */
	struct gen_iter it;  /* pdma_gen_next's walk over all streams */
	struct gen_stream *s;
};

static void iter_init(const struct pdma_gen *g, struct gen_iter *it, uint32_t first, uint32_t step,
		      uint32_t burst)
{
	it->first = first;
	it->step = step;
	it->cur = first;
	it->live = first < g->c.streams ? (g->c.streams - first + step - 1) / step : 0;
	it->burst = burst;
}

void pdma_gen_config_default(struct pdma_gen_config *c)
{
	memset(c, 0, sizeof(*c));
	c->streams = 4;
	c->stream_id_base = 0x1000;
	c->packet_size = 1024;
	c->packets = 1000;
	c->sample_rate = 10000000;
	c->ts_start = 1700000000;
	c->trailer = true;
	c->context = true;
	c->loss_burst = 1;
	c->seed = 1;
}

static uint32_t hdr_bytes(const struct pdma_gen_config *c)
{
	return 28 + (c->trailer ? 4u : 0u);
}

uint32_t pdma_gen_payload_len(const struct pdma_gen_config *c)
{
	return c->packet_size > hdr_bytes(c) ? c->packet_size - hdr_bytes(c) : 0;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int pdma_gen_open(const struct pdma_gen_config *c, struct pdma_gen **out)
{
	uint32_t plen = pdma_gen_payload_len(c);

	if (!c->streams || c->streams > 65535 || c->packet_size % 4 || plen < 4 ||
	    c->packet_size > 65535u * 4 || !c->sample_rate || !c->packets ||
	    c->loss_pm + c->dup_pm + c->reorder_pm > 1000)
		return -EINVAL;
	struct pdma_gen *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->s = calloc(c->streams, sizeof(*g->s));
	if (!g->s) {
		free(g);
		return -ENOMEM;
	}
	g->c = *c;
	if (!g->c.loss_burst)
		g->c.loss_burst = 1;
	g->plen = plen;
	g->spp = plen / 4;
	/* Absolute sample counts (seconds x rate + samples into the second) of
	 * packet starts are multiples of the samples per packet, so a receiver
	 * recovers the packet index exactly: start at the first such boundary at
	 * or after ts_start. */
	g->k0 = ((uint64_t)c->ts_start * c->sample_rate + g->spp - 1) / g->spp;
	iter_init(g, &g->it, 0, 1, GEN_BURST);
	for (uint32_t i = 0; i < c->streams; i++)
		g->s[i].rng = c->seed * 0x100000001b3ull + i;
	*out = g;
	return 0;
}

void pdma_gen_close(struct pdma_gen *g)
{
	if (!g)
		return;
	free(g->s);
	free(g);
}

const struct pdma_gen_inject *pdma_gen_injected(const struct pdma_gen *g, uint32_t stream)
{
	return stream < g->c.streams ? &g->s[stream].inj : NULL;
}

/* Decide what happens to packet s->next and queue what is to be sent. The
 * events never touch the first or last packet, and a swap never pairs with
 * the last packet, so every injected event is visible to the receiver and
 * counts exactly once. */
static void refill(struct pdma_gen *g, struct gen_stream *s)
{
	uint64_t n = g->c.packets;

	while (s->nq == 0 && s->next < n) {
		uint64_t k = s->next;
		uint32_t r = (uint32_t)(splitmix(&s->rng) % 1000);
		uint32_t b = g->c.loss_burst;
		if (k == 0 || k + 1 >= n) {
			s->q[s->nq++] = k;
			s->next++;
		} else if (r < g->c.loss_pm) {
			if (k + b < n) {
				s->inj.lost += b;
				s->next += b;
			} else {
				s->q[s->nq++] = k;
				s->next++;
			}
		} else if (r < g->c.loss_pm + g->c.dup_pm) {
			s->q[s->nq++] = k;
			s->q[s->nq++] = k;
			s->inj.duplicated++;
			s->next++;
		} else if (r < g->c.loss_pm + g->c.dup_pm + g->c.reorder_pm && k + 2 < n) {
			s->q[s->nq++] = k + 1;
			s->q[s->nq++] = k;
			s->inj.reordered++;
			s->next += 2;
		} else {
			s->q[s->nq++] = k;
			s->next++;
		}
	}
}

static int build_data(struct pdma_gen *g, uint32_t si, uint64_t k, uint8_t *buf, size_t cap)
{
	const struct pdma_gen_config *c = &g->c;
	uint32_t id = c->stream_id_base + si;
	uint64_t s = (g->k0 + k) * g->spp;
	struct pdma_vrt_packet p = {
		.type = PDMA_VRT_DATA_SID,
		.flags = PDMA_VRT_F_CLASS | (c->trailer ? PDMA_VRT_F_TRAILER : 0),
		.tsi = PDMA_VRT_TSI_UTC,
		.tsf = PDMA_VRT_TSF_SAMPLES,
		.count = (uint8_t)(k & 15),
		.stream_id = id,
		.oui = GEN_OUI,
		.icc = 0,
		.pcc = 1,
		.ts_int = (uint32_t)(s / c->sample_rate),
		.ts_frac = s % c->sample_rate,
		/* calibrated time + valid data enabled and set */
		.trailer = 0xc0000000u | 0x000c0000u,
	};
	int n = pdma_vrt_build(&p, NULL, g->plen, buf, cap);
	if (n < 0)
		return -EMSGSIZE;
	/* pdma_gen_sample(id, s + i) for i = 0.. computed incrementally (the
	 * product's low 32 bits advance by the constant; test_ingest checks the
	 * content against pdma_gen_sample): the fill was most of the sender's
	 * user time. */
	uint8_t *o = buf + p.payload_off;
	uint32_t m = (uint32_t)s * 2654435761u, x = id * 40503u, lo = (uint32_t)(s + id);
	for (uint32_t i = 0; i < g->spp; i++, o += 4, m += 2654435761u, lo++) {
		uint32_t v = htonl(((m ^ x) & 0xffff0000u) | (lo & 0xffffu));
		memcpy(o, &v, 4);
	}
	return n;
}

static int build_context(struct pdma_gen *g, uint32_t si, struct gen_stream *s, uint8_t *buf,
			 size_t cap)
{
	uint8_t pay[20];
	/* Sample rate and bandwidth: 64-bit, radix point at bit 20 (Hz). */
	uint64_t rate = g->c.sample_rate << 20, bw = (g->c.sample_rate * 4 / 5) << 20;
	pdma_vrt_put32(pay, PDMA_VRT_CIF0_CHANGE | PDMA_VRT_CIF0_BANDWIDTH | PDMA_VRT_CIF0_SAMPLE_RATE);
	pdma_vrt_put32(pay + 4, (uint32_t)(bw >> 32));
	pdma_vrt_put32(pay + 8, (uint32_t)bw);
	pdma_vrt_put32(pay + 12, (uint32_t)(rate >> 32));
	pdma_vrt_put32(pay + 16, (uint32_t)rate);
	struct pdma_vrt_packet p = {
		.type = PDMA_VRT_CONTEXT,
		.flags = PDMA_VRT_F_CLASS,
		.tsi = PDMA_VRT_TSI_UTC,
		.tsf = PDMA_VRT_TSF_SAMPLES,
		.count = (uint8_t)(s->ctx_count++ & 15),
		.stream_id = g->c.stream_id_base + si,
		.oui = GEN_OUI,
		.pcc = 2,
		.ts_int = g->c.ts_start,
	};
	int n = pdma_vrt_build(&p, pay, sizeof(pay), buf, cap);
	return n < 0 ? -EMSGSIZE : n;
}

static int iter_next(struct pdma_gen *g, struct gen_iter *it, uint8_t *buf, size_t cap,
		     uint32_t *stream)
{
	while (it->live) {
		uint32_t si = it->cur;
		struct gen_stream *s = &g->s[si];
		if (s->turn >= it->burst || (s->nq == 0 && s->next >= g->c.packets)) {
			s->turn = 0;
			it->cur += it->step;
			if (it->cur >= g->c.streams)
				it->cur = it->first;
			continue;
		}
		*stream = si;
		s->turn++;
		if (g->c.context && !s->ctx_sent) {
			s->ctx_sent = true;
			s->inj.context++;
			return build_context(g, si, s, buf, cap);
		}
		refill(g, s);
		if (s->nq == 0) { /* everything left was dropped */
			s->turn = it->burst;
			continue;
		}
		uint64_t k = s->q[0];
		s->q[0] = s->q[1];
		s->nq--;
		if (s->nq == 0 && s->next >= g->c.packets)
			it->live--;
		s->inj.sent++;
		return build_data(g, si, k, buf, cap);
	}
	return 0;
}

int pdma_gen_next(struct pdma_gen *g, uint8_t *buf, size_t cap, uint32_t *stream)
{
	return iter_next(g, &g->it, buf, cap, stream);
}

/* ---- pcap ---- */

static void pcap_header(FILE *f)
{
	uint32_t h[6] = { 0xa1b2c3d4u, 0x00040002u, 0, 0, 65535, 1 /* Ethernet */ };
	/* version 2.4 stored as two 16-bit fields, little-endian host order */
	uint16_t v[2] = { 2, 4 };
	fwrite(&h[0], 4, 1, f);
	fwrite(v, 2, 2, f);
	fwrite(&h[2], 4, 4, f);
}

static uint16_t ip_csum(const uint8_t *p, size_t n)
{
	uint32_t s = 0;
	for (size_t i = 0; i < n; i += 2)
		s += (uint32_t)(p[i] << 8 | p[i + 1]);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

static int pcap_record(FILE *f, const uint8_t *pkt, uint32_t len, uint32_t src, uint32_t dst,
		       uint16_t sport, uint16_t dport, uint64_t t_us)
{
	uint8_t h[42] = { 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00 };
	uint8_t *ip = h + 14, *udp = h + 34;
	uint32_t caplen = 42 + len;
	uint32_t rec[4] = { (uint32_t)(t_us / 1000000), (uint32_t)(t_us % 1000000), caplen, caplen };

	if (len > 65507)
		return -EMSGSIZE;
	ip[0] = 0x45;
	ip[2] = (uint8_t)((20 + 8 + len) >> 8);
	ip[3] = (uint8_t)(20 + 8 + len);
	ip[6] = 0x40; /* DF */
	ip[8] = 64;
	ip[9] = 17;
	memcpy(ip + 12, &src, 4);
	memcpy(ip + 16, &dst, 4);
	uint16_t cs = ip_csum(ip, 20);
	ip[10] = (uint8_t)(cs >> 8);
	ip[11] = (uint8_t)cs;
	udp[0] = (uint8_t)(sport >> 8);
	udp[1] = (uint8_t)sport;
	udp[2] = (uint8_t)(dport >> 8);
	udp[3] = (uint8_t)dport;
	udp[4] = (uint8_t)((8 + len) >> 8);
	udp[5] = (uint8_t)(8 + len);
	if (fwrite(rec, 4, 4, f) != 4 || fwrite(h, 1, 42, f) != 42 || fwrite(pkt, 1, len, f) != len)
		return -EIO;
	return 0;
}

int pdma_gen_write_pcap(struct pdma_gen *g, FILE *f, const char *host, uint16_t port)
{
	struct in_addr dst, src;
	uint8_t *buf = malloc(65536);
	uint32_t si;
	uint64_t n = 0;
	int len, ret = 0;

	if (!buf)
		return -ENOMEM;
	if (inet_pton(AF_INET, host ? host : "127.0.0.1", &dst) != 1) {
		free(buf);
		return -EINVAL;
	}
	inet_pton(AF_INET, "127.0.0.1", &src);
	pcap_header(f);
	while ((len = pdma_gen_next(g, buf, 65536, &si)) > 0) {
		/* One source port per stream, as pdma_gen_send uses. */
		ret = pcap_record(f, buf, (uint32_t)len, src.s_addr, dst.s_addr,
				  (uint16_t)(40000 + si % 20000), port, n++);
		if (ret)
			break;
	}
	free(buf);
	if (len < 0)
		return len;
	return ferror(f) ? -EIO : ret;
}

/* ---- UDP ---- */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Datagrams per sendmmsg call (and per stream turn while sending: one call
 * carries one stream's datagrams, since each stream has its own socket). */
#define SEND_BATCH 64u

struct send_ctx {
	struct pdma_gen *g;
	const struct pdma_gen_send_opts *o;
	struct sockaddr_in dst;
	uint32_t nthreads;
	atomic_bool abort;   /* a sender thread failed: the others stop */
};

struct send_thread {
	struct send_ctx *x;
	uint32_t first;      /* owns streams first, first + nthreads, ... */
	pthread_t th;
	int ret;
};

static int flush(int fd, struct mmsghdr *msg, uint32_t nb)
{
	uint32_t done = 0;
	while (done < nb) {
		int r = sendmmsg(fd, msg + done, nb - done, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOBUFS || errno == EAGAIN) {
				usleep(50);
				continue;
			}
			/* ECONNREFUSED: nobody listening yet; the datagram is gone,
			 * as on a real network. */
			if (errno == ECONNREFUSED) {
				done++;
				continue;
			}
			return -errno;
		}
		done += (uint32_t)r;
	}
	return 0;
}

/* One sender: builds each datagram in place in a batch slot, sends a stream's
 * turn with one sendmmsg on that stream's socket, and paces per batch against
 * its share of the total rate (a deadline from the start, so oversleeping
 * one batch is made up by the next ones). */
static int send_subset(struct send_ctx *x, uint32_t first)
{
	struct pdma_gen *g = x->g;
	const struct pdma_gen_send_opts *o = x->o;
	uint32_t ns = g->c.streams, step = x->nthreads;
	uint32_t mine = (ns - first + step - 1) / step;
	/* Slot size: the largest datagram (data or context), cache-line rounded. */
	size_t slot = ((size_t)(g->c.packet_size > 64 ? g->c.packet_size : 64) + 63) & ~(size_t)63;
	int *fds = calloc(mine, sizeof(int));
	uint8_t *bufs = malloc((SEND_BATCH + 1) * slot);
	struct mmsghdr msg[SEND_BATCH];
	struct iovec iov[SEND_BATCH];
	struct gen_iter it;
	uint32_t bstream = 0, nb = 0, base = 0;
	uint64_t sent = 0;
	double rate = o->rate_pps * mine / ns;
	int ret = 0, len = 0;
	unsigned long slack = 0;
	bool slack_set = false;

	if (!fds || !bufs) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < mine; i++)
		fds[i] = -1;
	/* One connected socket per stream: its own source port, so SO_REUSEPORT
	 * receivers hash each stream to one socket and keep its order. */
	for (uint32_t i = 0; i < mine; i++) {
		fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&x->dst, sizeof(x->dst)) < 0) {
			ret = -errno;
			goto out;
		}
		int sz = 4 << 20;
		setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	}
	/* Pacing sleeps are short: ask for 1 us timer slack (default 50 us). */
	if (rate > 0) {
		int s = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
		if (s >= 0 && prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0) {
			slack = (unsigned long)s;
			slack_set = true;
		}
	}
	memset(msg, 0, sizeof(msg));
	for (uint32_t i = 0; i < SEND_BATCH; i++) {
		msg[i].msg_hdr.msg_iov = &iov[i];
		msg[i].msg_hdr.msg_iovlen = 1;
	}
	iter_init(g, &it, first, step, SEND_BATCH);
	double t0 = now_s();
	for (;;) {
		uint32_t si = 0;
		/* Slots rotate: the datagram that ends a batch (another stream)
		 * stays where it was built and starts the next batch. */
		uint8_t *b = bufs + (size_t)((base + nb) % (SEND_BATCH + 1)) * slot;
		bool stop = (o->stop && atomic_load(o->stop)) || atomic_load(&x->abort);
		len = stop ? 0 : iter_next(g, &it, b, slot, &si);
		if (len < 0) {
			ret = len;
			break;
		}
		if (nb && (len == 0 || si != bstream || nb == SEND_BATCH)) {
			ret = flush(fds[(bstream - first) / step], msg, nb);
			if (ret)
				goto out;
			sent += nb;
			base = (base + nb) % (SEND_BATCH + 1);
			nb = 0;
			if (rate > 0) {
				double due = t0 + (double)sent / rate, t = now_s();
				if (due > t) {
					double d = due - t;
					struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
					nanosleep(&ts, NULL);
				}
			}
		}
		if (len == 0)
			break;
		if (o->pcap) { /* single sender only (pdma_gen_send) */
			struct in_addr src;
			inet_pton(AF_INET, "127.0.0.1", &src);
			ret = pcap_record(o->pcap, b, (uint32_t)len, src.s_addr, x->dst.sin_addr.s_addr,
					  (uint16_t)(40000 + si % 20000), ntohs(x->dst.sin_port), sent + nb);
			if (ret)
				goto out;
		}
		bstream = si;
		iov[nb] = (struct iovec){ .iov_base = b, .iov_len = (size_t)len };
		nb++;
	}
out:
	if (slack_set)
		prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	if (fds)
		for (uint32_t i = 0; i < mine; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	free(fds);
	free(bufs);
	if (ret)
		atomic_store(&x->abort, true);
	return ret;
}

static void *send_main(void *arg)
{
	struct send_thread *t = arg;
	t->ret = send_subset(t->x, t->first);
	return NULL;
}

int pdma_gen_send(struct pdma_gen *g, const struct pdma_gen_send_opts *o)
{
	struct send_ctx x = { .g = g, .o = o };
	uint32_t nt = o->threads ? o->threads : 1;
	int ret = 0;

	x.dst = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(o->port ? o->port : 4991) };
	if (inet_pton(AF_INET, o->host ? o->host : "127.0.0.1", &x.dst.sin_addr) != 1)
		return -EINVAL;
	if (nt > g->c.streams)
		nt = g->c.streams;
	if (o->pcap) /* one ordered pcap file: one sender */
		nt = 1;
	x.nthreads = nt;
	atomic_init(&x.abort, false);
	if (o->pcap)
		pcap_header(o->pcap);
	if (nt == 1)
		return send_subset(&x, 0);

	struct send_thread *t = calloc(nt, sizeof(*t));
	uint32_t started = 0;
	if (!t)
		return -ENOMEM;
	for (; started < nt; started++) {
		t[started].x = &x;
		t[started].first = started;
		int e = pthread_create(&t[started].th, NULL, send_main, &t[started]);
		if (e) {
			ret = -e;
			atomic_store(&x.abort, true);
			break;
		}
	}
	for (uint32_t i = 0; i < started; i++) {
		pthread_join(t[i].th, NULL);
		if (t[i].ret && !ret)
			ret = t[i].ret;
	}
	free(t);
	return ret;
}
