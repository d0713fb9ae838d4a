// SPDX-License-Identifier: MIT
/* recvmmsg receive (the default): batches of datagrams straight into the
 * ring's free slots, one iovec per slot at the datagram's place, then the
 * slot headers, then one release store of head for the whole batch. A full
 * ring reads into the scratch slot and counts an overrun. One batch is also
 * what xdp.c takes from the socket beside its XDP socket. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "deframe/deframe.h"
#include "rx/rx.h"

/* The kernel's drop count for the socket (SO_RXQ_OVFL), 0 if absent. */
static uint32_t cmsg_ovfl(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
			uint32_t v;
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v;
		}
	return 0;
}

int pdma_rx_recvmmsg_batch(int fd, struct pdma_ring *r, uint32_t batch, struct pdma_rx_sim_dma *dma,
			   int flags, uint32_t *seq, struct pdma_rx_stats *st)
{
	struct mmsghdr msg[PDMA_RX_MAX_BATCH];
	struct iovec iov[PDMA_RX_MAX_BATCH];
	char ctl[PDMA_RX_MAX_BATCH][CMSG_SPACE(sizeof(uint32_t))];
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint32_t space = r->nslots - (uint32_t)(head - tail);
	uint32_t n = space < batch ? space : batch;
	bool full = n == 0;

	if (full)
		n = 1; /* into scratch: the datagram is dropped and counted */
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *slot = full ? r->scratch
			      : dma ? pdma_rx_sim_dma_buf(dma, i)
				    : pdma_ring_slot(r, head + i);
		iov[i].iov_base = slot + r->dgram_off;
		iov[i].iov_len = pdma_ring_room(r);
		memset(&msg[i].msg_hdr, 0, sizeof(msg[i].msg_hdr));
		msg[i].msg_hdr.msg_iov = &iov[i];
		msg[i].msg_hdr.msg_iovlen = 1;
		msg[i].msg_hdr.msg_control = ctl[i];
		msg[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
	}
	int got = recvmmsg(fd, msg, n, MSG_WAITFORONE | flags, NULL);
	if (got <= 0) {
		/* MSG_WAITFORONE returns at least one datagram or fails;
		 * 0 cannot happen, but must not index msg[-1] below. */
		if (got == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return 0;
		return -errno;
	}
	uint32_t drops = cmsg_ovfl(&msg[got - 1].msg_hdr);
	if (drops)
		atomic_store_explicit(&st->socket_drops, drops, memory_order_relaxed);
	if (full) {
		atomic_fetch_add_explicit(&r->overruns, 1, memory_order_relaxed);
		return 1;
	}
	uint64_t bytes = 0;
	for (int i = 0; i < got; i++) {
		uint8_t *slot = (uint8_t *)iov[i].iov_base - r->dgram_off;
		const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)slot;
		pdma_slot_finish(slot, r->dgram_off, msg[i].msg_len, msg[i].msg_hdr.msg_flags & MSG_TRUNC,
				 (*seq)++);
		bytes += msg[i].msg_len;
		if (h->flags & PDMA_SLOT_TRUNC)
			atomic_fetch_add_explicit(&st->truncated, 1, memory_order_relaxed);
		if (dma) {
			int e = pdma_rx_sim_dma_write(dma, r, head + (uint64_t)i, slot);
			if (e)
				return e;
		}
	}
	atomic_fetch_add_explicit(&st->datagrams, (uint64_t)got, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->bytes, bytes, memory_order_relaxed);
	/* Publish: the slots' contents happen-before the consumer's acquire. */
	atomic_store_explicit(&r->head, head + (uint64_t)got, memory_order_release);
	return got;
}

int pdma_rx_recvmmsg_run(int fd, struct pdma_ring *r, uint32_t batch, struct pdma_rx_sim_dma *dma,
			 const atomic_bool *stop, struct pdma_rx_stats *st)
{
	uint32_t seq = 0;
	uint64_t since = 0;

	if (!batch || batch > PDMA_RX_MAX_BATCH)
		return -EINVAL;
	for (;;) {
		int got = pdma_rx_recvmmsg_batch(fd, r, batch, dma, 0, &seq, st);

		if (got < 0)
			return got;
		if (pdma_rx_stop_now(stop, got == 0, &since)) {
			pdma_rx_socket_drops(fd, st);
			return 0;
		}
	}
}
