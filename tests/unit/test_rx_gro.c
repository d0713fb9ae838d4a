// SPDX-License-Identifier: MIT
/* UDP GRO receive (ingest/rx/gro.c): a coalesced buffer becomes one ring
 * slot per datagram, in order, with the slot format's header; the last
 * datagram may be short; a datagram longer than a slot and a cut buffer are
 * flagged truncated; a ring that fills mid-buffer drops, and counts, exactly
 * the datagrams that found no slot. Then the whole path over loopback: a
 * UDP GSO sender's buffers arrive coalesced and come out as the datagrams
 * that were sent. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "deframe/deframe.h"
#include "rx/rx.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif

/* Byte i of datagram d of a test buffer: distinct per datagram and place. */
static uint8_t pat(uint32_t d, uint32_t i)
{
	return (uint8_t)(d * 31u + i * 7u + 1u);
}

/* n datagrams of seg bytes, the last of last bytes, back to back. */
static uint32_t fill(uint8_t *buf, uint32_t n, uint32_t seg, uint32_t last)
{
	uint32_t off = 0;
	for (uint32_t d = 0; d < n; d++) {
		uint32_t l = d + 1 == n ? last : seg;
		for (uint32_t i = 0; i < l; i++)
			buf[off + i] = pat(d, i);
		off += l;
	}
	return off;
}

/* Slot k holds datagram d's first len bytes, with header (len, flags, seq). */
static void check_slot(const struct pdma_ring *r, uint64_t k, uint32_t d, uint32_t len, uint32_t flags,
		       uint32_t seq)
{
	const uint8_t *s = pdma_ring_slot(r, k);
	const struct pdma_slot_hdr *h = (const struct pdma_slot_hdr *)s;
	assert_int_equal(h->len, len);
	assert_int_equal(h->flags, flags);
	assert_int_equal(h->rx_seq, seq);
	for (uint32_t i = 0; i < len; i++)
		if (s[PDMA_SLOT_HDR + i] != pat(d, i))
			fail_msg("slot %llu byte %u", (unsigned long long)k, i);
	if (flags & PDMA_SLOT_TAIL)
		assert_memory_equal(&h->tail, s + PDMA_SLOT_HDR + len - 4, 4);
}

/* 3 datagrams of 80 bytes and a short one of 20: four slots, in order. */
static void test_split_short_last(void **state)
{
	(void)state;
	struct pdma_ring r;
	struct pdma_rx_gro_counts n = { 0 };
	uint8_t buf[512];
	uint64_t head = 0;
	uint32_t seq = 5;

	assert_int_equal(pdma_ring_init(&r, 8, 128, PDMA_RING_FULL), 0); /* 92 bytes a datagram */
	uint32_t len = fill(buf, 4, 80, 20);
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 80, false, &seq, &n), 4);
	assert_int_equal(head, 4);
	assert_int_equal(seq, 9);
	assert_int_equal(n.datagrams, 4);
	assert_int_equal(n.bytes, 260);
	assert_int_equal(n.truncated, 0);
	assert_int_equal(n.overruns, 0);
	for (uint32_t d = 0; d < 4; d++)
		check_slot(&r, d, d, d == 3 ? 20 : 80, PDMA_SLOT_TAIL, 5 + d);
	/* Without a UDP_GRO control message (gso 0), or with a size not
	 * below the length, the message is one datagram. */
	len = fill(buf, 1, 0, 90);
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 0, false, &seq, &n), 1);
	check_slot(&r, 4, 0, 90, PDMA_SLOT_TAIL, 9);
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 90, false, &seq, &n), 1);
	check_slot(&r, 5, 0, 90, PDMA_SLOT_TAIL, 10);
	assert_int_equal(n.datagrams, 6);
	pdma_ring_fini(&r);
}

/* A ring with 2 free slots gets a buffer of 5 datagrams: 2 land, 3 are
 * overruns, and nothing is written past the consumer's slots. Then the
 * consumer frees slots and the next buffer fills them. */
static void test_split_ring_full(void **state)
{
	(void)state;
	struct pdma_ring r;
	struct pdma_rx_gro_counts n = { 0 };
	uint8_t buf[512];
	uint32_t seq = 0;

	assert_int_equal(pdma_ring_init(&r, 4, 128, PDMA_RING_FULL), 0);
	uint64_t head = 2; /* slots 0, 1: the consumer's */
	atomic_store(&r.head, 2);
	memset(pdma_ring_slot(&r, 0), 0xee, 128);
	uint32_t len = fill(buf, 5, 64, 64);
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 64, false, &seq, &n), 2);
	assert_int_equal(head, 4);
	assert_int_equal(n.datagrams, 2);
	assert_int_equal(n.overruns, 3);
	assert_int_equal(n.bytes, 128);
	check_slot(&r, 2, 0, 64, PDMA_SLOT_TAIL, 0);
	check_slot(&r, 3, 1, 64, PDMA_SLOT_TAIL, 1);
	assert_int_equal(pdma_ring_slot(&r, 0)[PDMA_SLOT_HDR], 0xee); /* untouched */
	/* A dropped datagram takes no sequence number: rx_seq counts slots. */
	assert_int_equal(seq, 2);
	atomic_store(&r.tail, 2);
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 64, false, &seq, &n), 2);
	assert_int_equal(n.overruns, 6);
	check_slot(&r, 4, 0, 64, PDMA_SLOT_TAIL, 2);
	pdma_ring_fini(&r);
}

/* Datagrams longer than a slot holds keep what fits, flagged truncated,
 * each counted once; a cut buffer (MSG_TRUNC) flags its last datagram. */
static void test_split_truncated(void **state)
{
	(void)state;
	struct pdma_ring r;
	struct pdma_rx_gro_counts n = { 0 };
	uint8_t buf[512];
	uint64_t head = 0;
	uint32_t seq = 0;

	assert_int_equal(pdma_ring_init(&r, 8, 128, PDMA_RING_FULL), 0);
	uint32_t len = fill(buf, 3, 100, 50); /* 100 > 92 */
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 100, false, &seq, &n), 3);
	check_slot(&r, 0, 0, 92, PDMA_SLOT_TRUNC, 0);
	check_slot(&r, 1, 1, 92, PDMA_SLOT_TRUNC, 1);
	check_slot(&r, 2, 2, 50, PDMA_SLOT_TAIL, 2);
	assert_int_equal(n.truncated, 2);
	assert_int_equal(n.bytes, 234);
	len = fill(buf, 2, 60, 30);
	assert_int_equal(pdma_rx_gro_split(&r, &head, buf, len, 60, true, &seq, &n), 2);
	check_slot(&r, 3, 0, 60, PDMA_SLOT_TAIL, 3);
	check_slot(&r, 4, 1, 30, PDMA_SLOT_TRUNC, 4);
	assert_int_equal(n.truncated, 3);
	assert_int_equal(n.datagrams, 5);
	pdma_ring_fini(&r);
}

struct rx {
	struct pdma_ring ring;
	struct pdma_rx_stats st;
	atomic_bool stop;
	int fd, tx, ret;
	pthread_t th;
	uint32_t total; /* datagrams sent */
	uint32_t *lens; /* their lengths, in order */
};

static void *rx_main(void *arg)
{
	struct rx *x = arg;
	x->ret = pdma_rx_gro_run(x->fd, &x->ring, 8, &x->stop, &x->st);
	return NULL;
}

/* A ring of nslots slots of slot bytes, a GRO socket and a sender connected
 * to it, the receive thread started; skips where UDP GSO/GRO is missing. */
static void rx_start(struct rx *x, uint32_t nslots, uint32_t slot)
{
	struct sockaddr_in to = { .sin_family = AF_INET };
	socklen_t al = sizeof(to);
	int sz = 8 << 20, seg = 1000;

	memset(x, 0, sizeof(*x));
	assert_int_equal(pdma_ring_init(&x->ring, nslots, slot, PDMA_RING_FULL), 0);
	x->lens = calloc(4096, sizeof(*x->lens));
	assert_non_null(x->lens);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	x->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	x->tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(x->fd >= 0 && x->tx >= 0);
	if (setsockopt(x->fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0)
		setsockopt(x->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	struct timeval tv = { 0, 20000 };
	setsockopt(x->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(bind(x->fd, (struct sockaddr *)&to, sizeof(to)), 0);
	assert_int_equal(getsockname(x->fd, (struct sockaddr *)&to, &al), 0);
	assert_int_equal(connect(x->tx, (struct sockaddr *)&to, sizeof(to)), 0);
	if (setsockopt(x->tx, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) < 0 || pdma_rx_gro_enable(x->fd)) {
		printf("skipped: UDP GSO/GRO unavailable here\n");
		close(x->tx);
		close(x->fd);
		pdma_ring_fini(&x->ring);
		free(x->lens);
		skip();
	}
	assert_int_equal(pthread_create(&x->th, NULL, rx_main, x), 0);
}

/* One send: n datagrams of seg bytes, the last of last bytes, as one GSO
 * buffer of segment size seg (n 1: a plain datagram). */
static void send_buf(struct rx *x, uint32_t n, uint32_t seg, uint32_t last)
{
	static uint8_t buf[65536];
	char ctl[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
	struct iovec iov = { buf, 0 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	for (uint32_t d = 0; d < n; d++) {
		uint32_t l = d + 1 == n ? last : seg;
		for (uint32_t i = 0; i < l; i++)
			buf[iov.iov_len + i] = pat(x->total, i);
		iov.iov_len += l;
		x->lens[x->total++] = l;
	}
	if (n > 1) {
		uint16_t gs = (uint16_t)seg;
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(gs));
		memcpy(CMSG_DATA(c), &gs, sizeof(gs));
	} else {
		/* The socket's UDP_SEGMENT would apply: off for one datagram. */
		int zero = 0;
		setsockopt(x->tx, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero));
	}
	assert_int_equal(sendmsg(x->tx, &mh, 0), (ssize_t)iov.iov_len);
}

/* Until the receive thread has accounted want datagrams (received and
 * dropped for a full ring), at most 10 s (valgrind). */
static void wait_for(struct rx *x, uint64_t want)
{
	for (int k = 0; k < 1000; k++) {
		if (atomic_load(&x->st.datagrams) + atomic_load(&x->ring.overruns) >= want)
			return;
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
}

static void rx_stop(struct rx *x)
{
	atomic_store(&x->stop, true);
	pthread_join(x->th, NULL);
	assert_int_equal(x->ret, 0);
	close(x->tx);
	close(x->fd);
	pdma_ring_fini(&x->ring);
	free(x->lens);
}

/* Slots [0, n) hold datagrams [0, n) as sent, rx_seq 0.. without gaps. */
static void check_all(struct rx *x, uint32_t n)
{
	for (uint32_t d = 0; d < n; d++)
		check_slot(&x->ring, d, d, x->lens[d], x->lens[d] >= 4 ? PDMA_SLOT_TAIL : 0, d);
}

/* Over loopback: a GSO sender's buffers of 40 datagrams (the last buffer
 * ending short) come out one slot per datagram, byte for byte; the slot
 * sequence shows no gap, and the counters add up. */
static void test_gro_run_loopback(void **state)
{
	(void)state;
	struct rx x;
	uint64_t bytes = 0;

	rx_start(&x, 4096, 1000 + PDMA_SLOT_HDR);
	/* One buffer at a time: without CAP_NET_ADMIN the socket buffer is
	 * rmem_max, 208 KiB by default, about three such buffers. */
	for (uint32_t b = 0; b < 20; b++) {
		send_buf(&x, 40, 1000, b + 1 == 20 ? 123 : 1000);
		wait_for(&x, x.total);
	}
	uint32_t total = x.total;
	for (uint32_t d = 0; d < total; d++)
		bytes += x.lens[d];
	assert_int_equal(atomic_load(&x.st.datagrams), total);
	assert_int_equal(atomic_load(&x.st.bytes), bytes);
	assert_int_equal(atomic_load(&x.st.truncated), 0);
	assert_int_equal(atomic_load(&x.ring.overruns), 0);
	assert_int_equal(atomic_load(&x.ring.head), total);
	check_all(&x, total);
	rx_stop(&x);
}

/* Once coalesced buffers have been seen, datagrams go straight into slots
 * at the learned size; buffers of another size, plain datagrams longer and
 * shorter than it, and a return to the first size must all come out as
 * sent. Each send waits for the one before, so each meets the state the
 * one before left. */
static void test_gro_run_sizes(void **state)
{
	(void)state;
	struct rx x;
	static const uint32_t plan[][3] = { /* datagrams, size, last */
		{ 40, 1000, 1000 }, { 40, 1000, 7 }, { 30, 600, 600 }, { 1, 0, 700 }, { 1, 0, 300 },
		{ 1, 0, 0 }, { 20, 1000, 999 }, { 64, 1000, 1000 }, { 3, 1000, 1000 },
	};

	rx_start(&x, 4096, 2048);
	for (size_t p = 0; p < sizeof(plan) / sizeof(plan[0]); p++) {
		send_buf(&x, plan[p][0], plan[p][1], plan[p][2]);
		wait_for(&x, x.total);
		assert_int_equal(atomic_load(&x.st.datagrams), x.total);
	}
	assert_int_equal(atomic_load(&x.ring.overruns), 0);
	assert_int_equal(atomic_load(&x.st.truncated), 0);
	check_all(&x, x.total);
	rx_stop(&x);
}

/* No consumer, a ring of 64 slots: a first buffer of 40 fills 40 slots, a
 * second finds 24 free (24 land in place, 16 are overruns), a third finds
 * none (40 overruns): every datagram is accounted, once. */
static void test_gro_run_ring_full(void **state)
{
	(void)state;
	struct rx x;

	rx_start(&x, 64, 1000 + PDMA_SLOT_HDR);
	for (int b = 0; b < 3; b++) {
		send_buf(&x, 40, 1000, 1000);
		wait_for(&x, x.total);
	}
	assert_int_equal(atomic_load(&x.st.datagrams), 64);
	assert_int_equal(atomic_load(&x.ring.overruns), 56);
	assert_int_equal(atomic_load(&x.ring.head), 64);
	check_all(&x, 64);
	rx_stop(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_short_last),
		cmocka_unit_test(test_split_ring_full),
		cmocka_unit_test(test_split_truncated),
		cmocka_unit_test(test_gro_run_loopback),
		cmocka_unit_test(test_gro_run_sizes),
		cmocka_unit_test(test_gro_run_ring_full),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
