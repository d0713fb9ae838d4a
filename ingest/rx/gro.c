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
 * Buffers land in a bounce area (one 64 KiB buffer per batch entry: a GRO
 * buffer is at most 64 KiB) and each datagram is copied into its own ring
 * slot (pdma_rx_gro_split): the ring's one-datagram-per-slot format does not
 * change, and neither does the consumer. The copy is the price of not knowing
 * gso_size before the data lands; it is one memcpy of a datagram that is hot
 * in cache.
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
	uint32_t cap = r->slot_size - PDMA_SLOT_HDR, filled = 0;
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
		memcpy(slot + PDMA_SLOT_HDR, buf + off, cl);
		pdma_slot_finish(slot, cl, t, (*seq)++);
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

int pdma_rx_gro_run(int fd, struct pdma_ring *r, uint32_t batch, const atomic_bool *stop,
		    struct pdma_rx_stats *st)
{
	struct mmsghdr msg[PDMA_RX_MAX_BATCH];
	struct iovec iov[PDMA_RX_MAX_BATCH];
	char (*ctl)[CTL_BYTES];
	uint8_t *bounce;
	uint32_t seq = 0;
	int ret;

	if (!batch || batch > PDMA_RX_MAX_BATCH)
		return -EINVAL;
	if (r->slot_size <= PDMA_SLOT_HDR)
		return -EINVAL;
	ret = pdma_rx_gro_enable(fd);
	if (ret)
		return ret;
	/* mmap: pages are touched only as far as buffers fill (one datagram
	 * per message where nothing coalesces). */
	bounce = mmap(NULL, (size_t)batch * GRO_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ctl = calloc(batch, sizeof(*ctl));
	if (bounce == MAP_FAILED || !ctl) {
		if (bounce != MAP_FAILED)
			munmap(bounce, (size_t)batch * GRO_BUF);
		free(ctl);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < batch; i++) {
		iov[i].iov_base = bounce + (size_t)i * GRO_BUF;
		iov[i].iov_len = GRO_BUF;
	}
	for (;;) {
		for (uint32_t i = 0; i < batch; i++) {
			memset(&msg[i].msg_hdr, 0, sizeof(msg[i].msg_hdr));
			msg[i].msg_hdr.msg_iov = &iov[i];
			msg[i].msg_hdr.msg_iovlen = 1;
			msg[i].msg_hdr.msg_control = ctl[i];
			msg[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
		}
		int got = recvmmsg(fd, msg, batch, MSG_WAITFORONE, NULL);
		if (got <= 0) {
			if (got == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
				if (atomic_load(stop)) {
					pdma_rx_socket_drops(fd, st);
					ret = 0;
					break;
				}
				continue;
			}
			ret = -errno;
			break;
		}
		uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
		struct pdma_rx_gro_counts n = { 0 };
		uint32_t ovfl = 0;
		for (int i = 0; i < got; i++) {
			uint32_t gso;
			cmsgs(&msg[i].msg_hdr, &gso, &ovfl);
			pdma_rx_gro_split(r, &head, iov[i].iov_base, msg[i].msg_len, gso,
					  msg[i].msg_hdr.msg_flags & MSG_TRUNC, &seq, &n);
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
	}
	munmap(bounce, (size_t)batch * GRO_BUF);
	free(ctl);
	return ret;
}
