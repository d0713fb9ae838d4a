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

	assert_int_equal(pdma_ring_init(&r, 8, 128), 0); /* 92 bytes a datagram */
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

	assert_int_equal(pdma_ring_init(&r, 4, 128), 0);
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

	assert_int_equal(pdma_ring_init(&r, 8, 128), 0);
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
	int fd, ret;
};

static void *rx_main(void *arg)
{
	struct rx *x = arg;
	x->ret = pdma_rx_gro_run(x->fd, &x->ring, 8, &x->stop, &x->st);
	return NULL;
}

/* Over loopback: a GSO sender's buffers of 40 datagrams (the last buffer
 * ending short) come out one slot per datagram, byte for byte; the slot
 * sequence shows no gap, and the counters add up. */
static void test_gro_run_loopback(void **state)
{
	(void)state;
	struct rx x;
	struct sockaddr_in to = { .sin_family = AF_INET };
	socklen_t al = sizeof(to);
	pthread_t th;
	enum { SEG = 1000, NBUF = 20, PER = 40 };
	static uint8_t buf[SEG * PER];

	memset(&x, 0, sizeof(x));
	assert_int_equal(pdma_ring_init(&x.ring, 4096, SEG + PDMA_SLOT_HDR), 0);
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	x.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), sz = 4 << 20;
	assert_true(x.fd >= 0 && tx >= 0);
	setsockopt(x.fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	struct timeval tv = { 0, 20000 };
	setsockopt(x.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(bind(x.fd, (struct sockaddr *)&to, sizeof(to)), 0);
	assert_int_equal(getsockname(x.fd, (struct sockaddr *)&to, &al), 0);
	assert_int_equal(connect(tx, (struct sockaddr *)&to, sizeof(to)), 0);
	int seg = SEG;
	if (setsockopt(tx, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) < 0 || pdma_rx_gro_enable(x.fd)) {
		printf("skipped: UDP GSO/GRO unavailable here\n");
		close(tx);
		close(x.fd);
		pdma_ring_fini(&x.ring);
		skip();
	}
	assert_int_equal(pthread_create(&th, NULL, rx_main, &x), 0);
	uint32_t total = 0;
	for (uint32_t b = 0; b < NBUF; b++) {
		uint32_t n = PER, last = b + 1 == NBUF ? 123 : SEG, off = 0;
		for (uint32_t d = 0; d < n; d++) {
			uint32_t l = d + 1 == n ? last : SEG;
			for (uint32_t i = 0; i < l; i++)
				buf[off + i] = pat(total + d, i);
			off += l;
		}
		assert_int_equal(send(tx, buf, off, 0), (ssize_t)off);
		total += n;
	}
	/* The consumer: wait for every datagram, then stop. */
	for (int k = 0; k < 200 && atomic_load(&x.st.datagrams) < total; k++) {
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	atomic_store(&x.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(x.ret, 0);
	assert_int_equal(atomic_load(&x.st.datagrams), total);
	assert_int_equal(atomic_load(&x.st.bytes), (uint64_t)(total - 1) * SEG + 123);
	assert_int_equal(atomic_load(&x.st.truncated), 0);
	assert_int_equal(atomic_load(&x.ring.overruns), 0);
	assert_int_equal(atomic_load(&x.ring.head), total);
	for (uint32_t d = 0; d < total; d++)
		check_slot(&x.ring, d, d, d + 1 == total ? 123 : SEG, PDMA_SLOT_TAIL, d);
	close(tx);
	close(x.fd);
	pdma_ring_fini(&x.ring);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_short_last),
		cmocka_unit_test(test_split_ring_full),
		cmocka_unit_test(test_split_truncated),
		cmocka_unit_test(test_gro_run_loopback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
