// SPDX-License-Identifier: MIT
/*
 * io_uring receive into a ring: one multishot recvmsg per socket that takes
 * its buffers from a provided-buffer ring whose entries are the receive
 * ring's free slots, in ring order. The kernel fills provided buffers in the
 * order they were provided, so completion k lands in slot head + k and the
 * slots are published in order, as the recvmmsg loop publishes them: the
 * consumer sees no difference.
 *
 * Slot layout: io_uring puts a 16-byte struct io_uring_recvmsg_out before the
 * payload (no name, no control messages), so each buffer starts at byte
 * PDMA_SLOT_HDR - 16 = 20 of its slot and the datagram lands at byte 36, the
 * slot format's place; the slot header ([0, 16)) is written afterwards and
 * does not overlap. In a packed ring (datagram at byte 20) that header would
 * lie over the slot header's bytes [4, 16), so a packed ring is refused.
 * Without control messages the kernel's drop counter comes from
 * getsockopt(SO_MEMINFO) instead of SO_RXQ_OVFL.
 *
 * A full ring does not drop here: with no buffer left the multishot request
 * ends (-ENOBUFS), datagrams wait in the socket buffer, and the request is
 * armed again once the consumer frees slots; what the socket buffer cannot
 * hold the kernel drops and counts (socket_drops). The recvmmsg loop instead
 * reads into a scratch slot and counts ring overruns.
 *
 * Thread safety: one receive thread per struct pdma_rx_uring.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>

#include "deframe/deframe.h"
#include "rx/rx.h"

#define BGID 0
#define OUT_HDR ((uint32_t)sizeof(struct io_uring_recvmsg_out))
#define QUIET_NS 20000000 /* a stop request is seen within this (as SO_RCVTIMEO) */

struct pdma_rx_uring {
	struct io_uring ring;
	bool ring_up;
	struct io_uring_buf_ring *br;
	size_t br_bytes;
	uint32_t entries;  /* provided-buffer ring entries (power of two) */
	struct msghdr mh;  /* multishot template: no name, no control */
	int fd;
	struct pdma_ring *r;
	uint64_t provided; /* slots [done, provided) are the kernel's */
	uint64_t done;     /* completions so far = next slot to fill */
	bool armed;
};

/* What the kernel says when io_uring, or a feature of it this file needs, is
 * missing or forbidden, as the one answer callers test for. */
static int unavailable(int e)
{
	return e == -ENOSYS || e == -EPERM || e == -EINVAL || e == -EOPNOTSUPP ? -EOPNOTSUPP : e;
}

int pdma_rx_uring_open(struct pdma_rx_uring **out, int fd, struct pdma_ring *r)
{
	struct pdma_rx_uring *u;
	struct io_uring_params p;
	int ret;

	if (r->dgram_off != PDMA_SLOT_HDR || r->slot_size < PDMA_SLOT_HDR + 64u)
		return -EINVAL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->fd = fd;
	u->r = r;
	u->entries = r->nslots < 4096 ? r->nslots : 4096;
	/* Room for a full buffer ring of completions between two reaps. */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_CQSIZE;
	p.cq_entries = 2 * u->entries;
	ret = io_uring_queue_init_params(8, &u->ring, &p);
	if (ret < 0) {
		ret = unavailable(ret); /* -ENOSYS, -EPERM: io_uring absent or disabled */
		goto err;
	}
	u->ring_up = true;
	u->br_bytes = (size_t)u->entries * sizeof(struct io_uring_buf);
	u->br = mmap(NULL, u->br_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (u->br == MAP_FAILED) {
		u->br = NULL;
		ret = -ENOMEM;
		goto err;
	}
	io_uring_buf_ring_init(u->br);
	struct io_uring_buf_reg reg = {
		.ring_addr = (uint64_t)(uintptr_t)u->br,
		.ring_entries = u->entries,
		.bgid = BGID,
	};
	ret = io_uring_register_buf_ring(&u->ring, &reg, 0);
	if (ret < 0) {
		ret = unavailable(ret); /* -EINVAL before Linux 5.19 */
		goto err;
	}
	u->done = u->provided = atomic_load(&r->head);
	*out = u;
	return 0;
err:
	pdma_rx_uring_close(u);
	return ret;
}

void pdma_rx_uring_close(struct pdma_rx_uring *u)
{
	if (!u)
		return;
	/* Exiting the ring cancels the multishot request and drops the
	 * buffer ring's registration; only then is its memory free. */
	if (u->ring_up)
		io_uring_queue_exit(&u->ring);
	if (u->br)
		munmap(u->br, u->br_bytes);
	free(u);
}

/* Hand the kernel every free slot it has room for, in ring order. */
static void refill(struct pdma_rx_uring *u)
{
	struct pdma_ring *r = u->r;
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint64_t limit = tail + r->nslots;
	uint32_t k = 0;

	if (limit > u->done + u->entries)
		limit = u->done + u->entries;
	for (; u->provided < limit; u->provided++, k++)
		io_uring_buf_ring_add(u->br, pdma_ring_slot(r, u->provided) + PDMA_SLOT_HDR - OUT_HDR,
				      r->slot_size - (PDMA_SLOT_HDR - OUT_HDR), (unsigned short)u->provided,
				      io_uring_buf_ring_mask(u->entries), (int)k);
	if (k)
		io_uring_buf_ring_advance(u->br, (int)k);
}

static int arm(struct pdma_rx_uring *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_recvmsg_multishot(sqe, u->fd, &u->mh, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BGID;
	int ret = io_uring_submit(&u->ring);
	if (ret < 0)
		return ret;
	u->armed = true;
	return 0;
}

int pdma_rx_uring_run(struct pdma_rx_uring *u, const atomic_bool *stop, struct pdma_rx_stats *st)
{
	struct pdma_ring *r = u->r;
	uint64_t seq = 0, since_drops = 0, since = 0;
	uint32_t full_waits = 0;
	int ret = 0;

	for (;;) {
		refill(u);
		if (!u->armed && u->provided > u->done && (ret = arm(u)))
			break;
		if (!u->armed) {
			/* Ring full: the socket buffer holds what arrives
			 * until the consumer frees a slot. Even after a stop
			 * request (the consumer runs until every receive thread
			 * has ended, and what the socket holds is drained
			 * first), unless the consumer has stopped freeing
			 * slots for a second. */
			if (atomic_load(stop) && ++full_waits > 20000)
				break;
			struct timespec ts = { 0, 50000 };
			nanosleep(&ts, NULL);
			continue;
		}
		full_waits = 0;
		struct __kernel_timespec ts = { 0, QUIET_NS };
		struct io_uring_cqe *cqe;
		int e = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
		if (e == -ETIME || e == -EINTR) {
			pdma_rx_socket_drops(u->fd, st);
			if (pdma_rx_stop_now(stop, true, &since))
				break; /* drained: nothing for QUIET_NS */
			continue;
		}
		if (e < 0) {
			ret = e;
			break;
		}
		unsigned head, seen = 0;
		uint64_t first = u->done, bytes = 0, trunc = 0;
		io_uring_for_each_cqe(&u->ring, head, cqe) {
			seen++;
			if (!(cqe->flags & IORING_CQE_F_MORE))
				u->armed = false;
			if (cqe->res == -ENOBUFS)
				continue;
			if (cqe->res < 0) {
				ret = cqe->res;
				break;
			}
			/* In order, one provided buffer per datagram: anything
			 * else would break the ring's ordering. */
			if (!(cqe->flags & IORING_CQE_F_BUFFER) ||
			    (cqe->flags >> IORING_CQE_BUFFER_SHIFT) != (u->done & 0xffffu) || u->done >= u->provided) {
				ret = -EPROTO;
				break;
			}
			uint8_t *slot = pdma_ring_slot(r, u->done);
			struct io_uring_recvmsg_out *o =
				io_uring_recvmsg_validate(slot + PDMA_SLOT_HDR - OUT_HDR, cqe->res, &u->mh);
			if (!o) {
				ret = -EPROTO;
				break;
			}
			uint32_t len = (uint32_t)cqe->res - OUT_HDR;
			bool t = o->flags & MSG_TRUNC;
			pdma_slot_finish(slot, PDMA_SLOT_HDR, len, t, (uint32_t)seq++);
			bytes += len;
			trunc += t;
			u->done++;
		}
		io_uring_cq_advance(&u->ring, seen);
		if (u->done > first) {
			atomic_fetch_add_explicit(&st->datagrams, u->done - first, memory_order_relaxed);
			atomic_fetch_add_explicit(&st->bytes, bytes, memory_order_relaxed);
			if (trunc)
				atomic_fetch_add_explicit(&st->truncated, trunc, memory_order_relaxed);
			/* Publish: the slots' contents happen-before the
			 * consumer's acquire. */
			atomic_store_explicit(&r->head, u->done, memory_order_release);
			since_drops += u->done - first;
			if (since_drops >= 4096) {
				pdma_rx_socket_drops(u->fd, st);
				since_drops = 0;
			}
		}
		if (ret || pdma_rx_stop_now(stop, false, &since))
			break;
	}
	pdma_rx_socket_drops(u->fd, st);
	return ret;
}
