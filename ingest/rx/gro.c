// SPDX-License-Identifier: MIT
/*
 * UDP GRO receive: the socket asks for coalesced buffers (UDP_GRO), so one
 * recvmmsg message may hold many datagrams of one flow, back to back, each
 * gso_size bytes but the last, which may be shorter (the UDP_GRO control
 * message gives gso_size; without it the message is one datagram). The kernel
 * then pays its per-skb costs (socket lookup, queueing, wakeup, the syscall's
 * share) once per coalesced buffer instead of once per datagram; what stays
 * per datagram is the copy.
 *
 * Two modes. Batches (the start, and whenever nothing coalesces): recvmmsg
 * of up to batch buffers into bounce buffers (64 KiB each: a GRO buffer is at
 * most that), each datagram copied into its own ring slot
 * (pdma_rx_gro_split); the copy is the price of not knowing gso_size before
 * the data lands. Direct (once a coalesced buffer has told gso_size): one
 * recvmsg per buffer with one iovec of gso_size bytes per free slot, so
 * equal-size datagrams land in their slots with no copy of ours; a buffer of
 * another size is gathered and split (and teaches the new size), and 64
 * single-datagram buffers in a row go back to batches, which take those with
 * fewer system calls. Either way the ring's one-datagram-per-slot format
 * does not change, and neither does the consumer.
 *
 * Accounting stays exact per datagram: each one is counted (datagrams,
 * bytes, truncated) as the recvmmsg path counts it; a full ring drops, and
 * counts as one overrun, every datagram of the buffer that has no slot, not
 * one per buffer.
 *
 * Coalescing happens only where the kernel does GRO: a NIC's (or a veth's)
 * NAPI poll, or a sender's UDP GSO buffer delivered whole. Loopback traffic
 * sent one datagram per skb goes through the backlog without GRO, so on
 * 127.0.0.1 this path receives one datagram per message, like recvmmsg.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "deframe/deframe.h"
#include "rx/rx.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif

/* The largest GRO buffer: the kernel coalesces up to 64 KiB (gro_max_size)
 * of UDP payload, and a single datagram over IPv4 is at most 65507 bytes. */
#define GRO_BUF 65536u

int pdma_rx_gro_enable(int fd)
{
	int one = 1;

	if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) < 0)
		return errno == ENOPROTOOPT ? -EOPNOTSUPP : -errno;
	return 0;
}

uint32_t pdma_rx_gro_split(struct pdma_ring *r, uint64_t *head, const uint8_t *buf, uint32_t len,
			   uint32_t gso_size, bool trunc, uint32_t *seq, struct pdma_rx_gro_counts *n)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint32_t cap = pdma_ring_room(r), filled = 0;
	/* No control message, or a bogus size: the whole message is one
	 * datagram. A zero-length datagram is one datagram too. */
	uint32_t seg = gso_size && gso_size < len ? gso_size : len;

	for (uint32_t off = 0;;) {
		uint32_t dl = len - off < seg ? len - off : seg;
		/* MSG_TRUNC on a coalesced buffer: the bytes past len are
		 * gone, so the datagram they belonged to is the last one
		 * here, and it is incomplete. */
		bool last = off + dl >= len, t = trunc && last;

		if (*head - tail >= r->nslots) {
			tail = atomic_load_explicit(&r->tail, memory_order_acquire);
			if (*head - tail >= r->nslots) {
				n->overruns++;
				goto next;
			}
		}
		uint8_t *slot = pdma_ring_slot(r, *head);
		uint32_t cl = dl;
		if (cl > cap) {
			cl = cap;
			t = true;
		}
		memcpy(slot + r->dgram_off, buf + off, cl);
		pdma_slot_finish(slot, r->dgram_off, cl, t, (*seq)++);
		n->datagrams++;
		n->bytes += cl;
		n->truncated += t;
		(*head)++;
		filled++;
next:
		off += dl;
		if (last)
			break;
	}
	return filled;
}

/* UDP_GRO's gso_size and the kernel's drop count (SO_RXQ_OVFL) from a
 * message's control data. */
static void cmsgs(struct msghdr *m, uint32_t *gso, uint32_t *ovfl)
{
	*gso = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
			int v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			*gso = v > 0 ? (uint32_t)v : 0;
		} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
			memcpy(ovfl, CMSG_DATA(c), sizeof(*ovfl));
		}
	}
}

#define CTL_BYTES (CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint32_t)))
/* Direct receive: iovecs for the datagrams of one buffer at most (a 64 KiB
 * buffer of seg-byte datagrams), and one for the overflow (UIO_MAXIOV). */
#define DIRECT_IOV 1024u
/* Back to batches after this many buffers in a row held one datagram. */
#define DIRECT_SINGLES 64u

struct gro_rx {
	int fd;
	struct pdma_ring *r;
	uint32_t batch, cap, seq;
	uint32_t seg;     /* direct mode: the datagram size the slots' iovecs take; 0: batches */
	uint32_t singles; /* direct mode: buffers in a row with one datagram */
	uint8_t *bounce;  /* max(batch, 2) buffers of GRO_BUF */
	size_t bounce_bytes;
	struct mmsghdr msg[PDMA_RX_MAX_BATCH];
	struct iovec iov[PDMA_RX_MAX_BATCH];
	struct iovec div[DIRECT_IOV];
	char (*ctl)[CTL_BYTES];
};

/* Batches: up to batch buffers into bounce buffers, each split into slots
 * (a copy per datagram). Learns the datagram size of coalesced buffers
 * for direct mode. Returns recvmmsg's count, or -1 with errno. */
static int recv_batch(struct gro_rx *g, uint64_t *head, struct pdma_rx_gro_counts *n, uint32_t *ovfl)
{
	for (uint32_t i = 0; i < g->batch; i++) {
		memset(&g->msg[i].msg_hdr, 0, sizeof(g->msg[i].msg_hdr));
		g->iov[i].iov_base = g->bounce + (size_t)i * GRO_BUF;
		g->iov[i].iov_len = GRO_BUF;
		g->msg[i].msg_hdr.msg_iov = &g->iov[i];
		g->msg[i].msg_hdr.msg_iovlen = 1;
		g->msg[i].msg_hdr.msg_control = g->ctl[i];
		g->msg[i].msg_hdr.msg_controllen = sizeof(g->ctl[i]);
	}
	int got = recvmmsg(g->fd, g->msg, g->batch, MSG_WAITFORONE, NULL);
	if (got <= 0)
		return got < 0 ? -1 : 0;
	for (int i = 0; i < got; i++) {
		uint32_t gso;
		cmsgs(&g->msg[i].msg_hdr, &gso, ovfl);
		pdma_rx_gro_split(g->r, head, g->iov[i].iov_base, g->msg[i].msg_len, gso,
				  g->msg[i].msg_hdr.msg_flags & MSG_TRUNC, &g->seq, n);
		/* Coalescing seen, of datagrams a slot holds: the next buffers
		 * go straight into slots. */
		if (gso && gso < g->msg[i].msg_len && gso <= g->cap)
			g->seg = gso;
	}
	return got;
}

/* Direct: one buffer, its datagrams received straight into the next free
 * slots, one iovec of seg bytes per slot, so a buffer of seg-byte datagrams
 * (the last may be shorter) needs no copy; what the slots cannot take (the
 * ring is full, or more datagrams than iovecs) lands in an overflow buffer
 * and is split from there. A buffer of another size was spread over the
 * slots at seg-byte steps: it is gathered into a bounce buffer and split
 * from there (and seg learns its size). Returns 1, 0 or -1 with errno. */
static int recv_direct(struct gro_rx *g, uint64_t *head, struct pdma_rx_gro_counts *n, uint32_t *ovfl)
{
	struct pdma_ring *r = g->r;
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint32_t space = r->nslots - (uint32_t)(*head - tail);
	uint32_t k = GRO_BUF / g->seg + 1, gso;
	uint8_t *over = g->bounce, *lin = g->bounce + GRO_BUF;
	struct msghdr mh = { 0 };

	if (k > space)
		k = space;
	if (k > DIRECT_IOV - 1)
		k = DIRECT_IOV - 1;
	for (uint32_t i = 0; i < k; i++) {
		g->div[i].iov_base = pdma_ring_dgram(r, *head + i);
		g->div[i].iov_len = g->seg;
	}
	g->div[k].iov_base = over;
	g->div[k].iov_len = GRO_BUF;
	mh.msg_iov = g->div;
	mh.msg_iovlen = k + 1;
	mh.msg_control = g->ctl[0];
	mh.msg_controllen = sizeof(g->ctl[0]);
	ssize_t got = recvmsg(g->fd, &mh, 0);
	if (got < 0)
		return -1;
	uint32_t len = (uint32_t)got;
	bool trunc = mh.msg_flags & MSG_TRUNC;
	if (len > GRO_BUF) { /* more than a UDP buffer holds: cannot happen, but lin is this big */
		len = GRO_BUF;
		trunc = true;
	}
	cmsgs(&mh, &gso, ovfl);
	if (gso == g->seg || (!gso && len <= g->seg)) {
		/* In place: datagram d is in slot d while d < k. */
		uint32_t nd = gso && len ? (len + gso - 1) / gso : 1, in = nd < k ? nd : k;
		for (uint32_t d = 0; d < in; d++) {
			uint32_t dl = len - d * g->seg < g->seg ? len - d * g->seg : g->seg;
			bool t = trunc && d + 1 == nd;
			pdma_slot_finish(pdma_ring_slot(r, *head), r->dgram_off, dl, t, g->seq++);
			n->datagrams++;
			n->bytes += dl;
			n->truncated += t;
			(*head)++;
		}
		if (nd > k) /* the rest, in the overflow buffer */
			pdma_rx_gro_split(r, head, over, len - k * g->seg, gso, trunc, &g->seq, n);
	} else {
		/* Laid out at the wrong steps: gather, then split. */
		uint32_t off = 0;
		for (uint32_t i = 0; i <= k && off < len; i++) {
			uint32_t c = len - off < g->div[i].iov_len ? len - off : (uint32_t)g->div[i].iov_len;
			memcpy(lin + off, g->div[i].iov_base, c);
			off += c;
		}
		pdma_rx_gro_split(r, head, lin, len, gso, trunc, &g->seq, n);
		if (gso && gso < len)
			g->seg = gso <= g->cap ? gso : 0;
	}
	/* Nothing coalesces any more: batches take single datagrams with
	 * fewer system calls. */
	if (gso && gso < len)
		g->singles = 0;
	else if (++g->singles >= DIRECT_SINGLES)
		g->seg = g->singles = 0;
	return 1;
}

int pdma_rx_gro_run(int fd, struct pdma_ring *r, uint32_t batch, const atomic_bool *stop,
		    struct pdma_rx_stats *st)
{
	struct gro_rx *g;
	uint64_t since = 0;
	int ret;

	if (!batch || batch > PDMA_RX_MAX_BATCH)
		return -EINVAL;
	if (r->slot_size <= r->dgram_off)
		return -EINVAL;
	ret = pdma_rx_gro_enable(fd);
	if (ret)
		return ret;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->fd = fd;
	g->r = r;
	g->batch = batch;
	g->cap = pdma_ring_room(r);
	/* mmap: pages are touched only as far as buffers fill (one datagram
	 * per message where nothing coalesces). Two at least: direct mode's
	 * overflow and its gather buffer. */
	g->bounce_bytes = (size_t)(batch > 2 ? batch : 2) * GRO_BUF;
	g->bounce = mmap(NULL, g->bounce_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	g->ctl = calloc(batch, sizeof(*g->ctl));
	if (g->bounce == MAP_FAILED || !g->ctl) {
		ret = -ENOMEM;
		goto out;
	}
	for (;;) {
		uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
		struct pdma_rx_gro_counts n = { 0 };
		uint32_t ovfl = 0;
		int got = g->seg ? recv_direct(g, &head, &n, &ovfl) : recv_batch(g, &head, &n, &ovfl);
		if (got <= 0) {
			if (got == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
				if (pdma_rx_stop_now(stop, true, &since))
					goto stopped;
				continue;
			}
			ret = -errno;
			goto out;
		}
		if (ovfl)
			atomic_store_explicit(&st->socket_drops, ovfl, memory_order_relaxed);
		if (n.overruns)
			atomic_fetch_add_explicit(&r->overruns, n.overruns, memory_order_relaxed);
		if (n.truncated)
			atomic_fetch_add_explicit(&st->truncated, n.truncated, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->buffers, (uint64_t)got, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->datagrams, n.datagrams, memory_order_relaxed);
		atomic_fetch_add_explicit(&st->bytes, n.bytes, memory_order_relaxed);
		/* Publish: the slots' contents happen-before the consumer's acquire. */
		atomic_store_explicit(&r->head, head, memory_order_release);
		if (pdma_rx_stop_now(stop, false, &since))
			goto stopped;
	}
stopped:
	pdma_rx_socket_drops(fd, st);
	ret = 0;
out:
	if (g->bounce != MAP_FAILED && g->bounce)
		munmap(g->bounce, g->bounce_bytes);
	free(g->ctl);
	free(g);
	return ret;
}
