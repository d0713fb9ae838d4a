// SPDX-License-Identifier: MIT
/*
 * pdma_ingest_start() that fails (include/peerdma/ingest.h): a thread it needs
 * cannot be created. The call returns the error and leaves the session as it
 * was: subscribing still works, a second start receives. Before the fix the
 * stop flag and the blocks' "started" stayed set: subscribing was -EBUSY and
 * a later start's receive threads ended at once.
 *
 * The failure is forced by interposing pthread_create (this program's own
 * definition wins over libc's). The sanitizers own that symbol, so under them
 * the test is skipped; gcc, clang and valgrind runs have it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "peerdma/ingest.h"
#include "peerdma/vrt.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#ifndef SANITIZED
static int creates, fail_at = -1;

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
	if (++creates == fail_at)
		return EAGAIN;
	return real(t, a, fn, arg);
}

static void send_packets(uint16_t port, uint32_t sid, int n)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	for (int k = 0; k < n; k++) {
		uint8_t buf[256], pay[64] = { 0 };
		struct pdma_vrt_packet p = { .type = PDMA_VRT_DATA_SID, .tsi = 1, .tsf = 1,
					     .count = k & 15, .stream_id = sid,
					     .ts_frac = (uint64_t)k * 16 };
		int len = pdma_vrt_build(&p, pay, sizeof(pay), buf, sizeof(buf));

		assert_true(len > 0);
		assert_int_equal(sendto(fd, buf, len, 0, (struct sockaddr *)&dst, sizeof(dst)), len);
	}
	close(fd);
}

/* fail: which pthread_create of the start fails (1: the receive thread, 2:
 * the deframer thread, with one receive thread). */
static void start_fails_then_works(int fail)
{
	struct pdma_ingest_attr a;
	struct pdma_ingest *ing;
	struct pdma_sub_attr sa;
	struct pdma_sub *sub, *sub2;
	struct pdma_ingest_stats st;
	struct pdma_block *b;
	char msg[200];
	int got = 0;

	pdma_ingest_attr_init(&a);
	a.block_packets = 16;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), 0);
	pdma_sub_attr_init(&sa);
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	creates = 0;
	fail_at = fail;
	assert_int_equal(pdma_ingest_start(ing), -EAGAIN);
	fail_at = -1;
	assert_false(pdma_ingest_ended(ing));
	assert_int_equal(pdma_ingest_stop(ing), -EINVAL); /* never started */
	/* Still before the start: subscribing works. */
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub2), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_packets(pdma_ingest_port(ing), 7, 64);
	for (int tries = 0; got < 64 && tries < 100; tries++) {
		int r = pdma_sub_next(sub2, &b, 100);

		if (r == 0) {
			got += (int)b->npackets;
			pdma_block_release(b);
		}
	}
	assert_int_equal(got, 64);
	assert_false(pdma_ingest_ended(ing));
	assert_int_equal(pdma_ingest_stop(ing), 0);
	pdma_ingest_stats(ing, &st);
	assert_int_equal(st.datagrams, 64);
	while (pdma_sub_next(sub, &b, 0) == 0)
		pdma_block_release(b);
	assert_int_equal(pdma_sub_next(sub, &b, 0), -EPIPE);
	pdma_sub_close(sub);
	pdma_sub_close(sub2);
	pdma_ingest_close(ing);
}

static void test_rx_thread_fails(void **state)
{
	(void)state;
	start_fails_then_works(1);
}

static void test_deframer_thread_fails(void **state)
{
	(void)state;
	start_fails_then_works(2);
}
#endif

int main(void)
{
#ifdef SANITIZED
	printf("skipped: the sanitizer owns pthread_create, which this test interposes\n");
	return 77;
#else
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rx_thread_fails),
		cmocka_unit_test(test_deframer_thread_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
