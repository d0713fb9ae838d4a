// SPDX-License-Identifier: MIT
/* Sending the generator's datagrams over UDP: one socket per stream (so a
 * receiver's SO_REUSEPORT sockets can spread the flows), sendmmsg batches,
 * paced against a total rate, from T sender threads that own disjoint sets
 * of streams. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#include "gen/gen.h"
#include "gen/gen_int.h"

double pdma_gen_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void pdma_gen_pace(double t0, uint64_t sent, double rate)
{
	if (rate <= 0)
		return;
	double due = t0 + (double)sent / rate, t = pdma_gen_now();
	if (due > t) {
		double d = due - t;
		struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
		nanosleep(&ts, NULL);
	}
}


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

int pdma_gen_flush(int fd, struct mmsghdr *msg, uint32_t nb)
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

/* UDP GSO (UDP_SEGMENT): the batch's datagrams (one stream's, one socket)
 * as few sends as the kernel allows, each one buffer of equal-size datagrams
 * (the last may be shorter) that the kernel segments after the UDP layer:
 * one pass through the stack for up to 64 datagrams (UDP_MAX_SEGMENTS) of at
 * most 65507 bytes together (an IPv4 datagram's payload). A batch with
 * datagrams of different sizes makes several buffers. */
#define GSO_MAX_SEGS 64u
#define GSO_MAX_BYTES 65507u
static int flush_gso(int fd, struct iovec *iov, uint32_t nb)
{
	struct mmsghdr msg[SEND_BATCH];
	char ctl[SEND_BATCH][CMSG_SPACE(sizeof(uint16_t))];
	uint32_t ng = 0;

	memset(msg, 0, sizeof(msg));
	memset(ctl, 0, sizeof(ctl));
	for (uint32_t i = 0; i < nb; ng++) {
		size_t seg = iov[i].iov_len, bytes = seg;
		uint32_t k = 1;
		/* Equal sizes; a shorter one ends the buffer (GSO's last segment). */
		while (i + k < nb && k < GSO_MAX_SEGS && bytes + iov[i + k].iov_len <= GSO_MAX_BYTES &&
		       iov[i + k].iov_len <= seg && iov[i + k - 1].iov_len == seg) {
			bytes += iov[i + k].iov_len;
			k++;
		}
		struct msghdr *m = &msg[ng].msg_hdr;
		m->msg_iov = &iov[i];
		m->msg_iovlen = k;
		if (k > 1) {
			m->msg_control = ctl[ng];
			m->msg_controllen = sizeof(ctl[ng]);
			struct cmsghdr *c = CMSG_FIRSTHDR(m);
			uint16_t gs = (uint16_t)seg;
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(gs));
			memcpy(CMSG_DATA(c), &gs, sizeof(gs));
		}
		i += k;
	}
	return pdma_gen_flush(fd, msg, ng);
}

/* One sender: builds each datagram in place in a batch slot, sends a stream's
 * turn with one sendmmsg on that stream's socket, and paces per batch against
 * its share of the total rate (a deadline from the start, so oversleeping
 * one batch is made up by the next ones). */
static int send_subset(struct send_ctx *x, uint32_t first)
{
	struct pdma_gen *g = x->g;
	const struct pdma_gen_send_opts *o = x->o;
	const struct pdma_gen_config *c = pdma_gen_get_config(g);
	uint32_t ns = c->streams, step = x->nthreads;
	uint32_t mine = (ns - first + step - 1) / step;
	/* Slot size: the largest datagram (data or context), cache-line rounded. */
	size_t slot = ((size_t)(c->packet_size > 64 ? c->packet_size : 64) + 63) & ~(size_t)63;
	int *fds = calloc(mine, sizeof(int));
	uint8_t *bufs = malloc((SEND_BATCH + 1) * slot);
	struct mmsghdr msg[SEND_BATCH];
	struct iovec iov[SEND_BATCH];
	struct pdma_gen_iter it;
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
	/* a stream's turn is one batch: with batch 1 the streams interleave
	 * datagram by datagram, as devices on a wire would */
	const uint32_t nbatch = o->batch && o->batch < SEND_BATCH ? o->batch : SEND_BATCH;
	pdma_gen_iter_init(g, &it, first, step, nbatch);
	it.stop = o->stop;
	double t0 = pdma_gen_now();
	for (;;) {
		uint32_t si = 0;
		/* Slots rotate: the datagram that ends a batch (another stream)
		 * stays where it was built and starts the next batch. */
		uint8_t *b = bufs + (size_t)((base + nb) % (SEND_BATCH + 1)) * slot;
		len = atomic_load(&x->abort) ? 0 : pdma_gen_iter_next(g, &it, b, slot, &si);
		if (len < 0) {
			ret = len;
			break;
		}
		if (nb && (len == 0 || si != bstream || nb == nbatch)) {
			if (o->on_send)
				o->on_send(o->on_send_arg, iov, nb, pdma_gen_now(), false);
			ret = o->gso ? flush_gso(fds[(bstream - first) / step], iov, nb)
				     : pdma_gen_flush(fds[(bstream - first) / step], msg, nb);
			if (ret)
				goto out;
			if (o->on_send)
				o->on_send(o->on_send_arg, iov, nb, pdma_gen_now(), true);
			sent += nb;
			base = (base + nb) % (SEND_BATCH + 1);
			nb = 0;
			pdma_gen_pace(t0, sent, rate);
		}
		if (len == 0)
			break;
		if (o->pcap) { /* single sender only (pdma_gen_send) */
			struct in_addr src;
			inet_pton(AF_INET, "127.0.0.1", &src);
			ret = pdma_gen_pcap_record(o->pcap, b, (uint32_t)len, src.s_addr,
						   x->dst.sin_addr.s_addr, (uint16_t)(40000 + si % 20000),
						   ntohs(x->dst.sin_port), sent + nb);
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
	if (nt > pdma_gen_get_config(g)->streams)
		nt = pdma_gen_get_config(g)->streams; /* at most one thread per stream */
	if (o->pcap) /* one ordered pcap file: one sender */
		nt = 1;
	x.nthreads = nt;
	atomic_init(&x.abort, false);
	if (o->pcap)
		pdma_gen_pcap_header(o->pcap);
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
