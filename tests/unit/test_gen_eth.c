// SPDX-License-Identifier: MIT
/* `peerdma gen --eth` as QEMU's dgram netdev sees it: the command sends to a
 * local UDP socket; a small receiver here takes every payload as an
 * Ethernet frame. The good frames carry valid IPv4 and UDP checksums (UDP's
 * not 0), the addresses and ports asked for, and with their headers stripped
 * are exactly the datagrams plain `peerdma gen` sends with the same seed,
 * stream by stream; the malformed frames are, kind by kind, what the JSON
 * report says was injected, as the frame parser classifies them. And the
 * same frames written to a pcap and run through `peerdma deframe` (the CPU
 * frame-ring deframer) give exactly the injected counts. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "deframe/frame_acct.h"
#include "gen/eth.h"
#include "peerdma/vrt.h"

#define MAXF 4096u

static const char *tool;

/* What one socket received: each datagram's bytes. */
struct rx {
	int fd;
	uint16_t port;
	uint8_t *buf[MAXF];
	uint32_t len[MAXF];
	uint32_t n;
	pthread_t th;
};

static void *rx_main(void *arg)
{
	struct rx *r = arg;
	static __thread uint8_t b[65536];

	for (;;) {
		ssize_t n = recv(r->fd, b, sizeof(b), 0);
		if (n < 0)
			break; /* timeout: the sender is done */
		if (r->n < MAXF) {
			r->buf[r->n] = malloc((size_t)n + 1);
			memcpy(r->buf[r->n], b, (size_t)n);
			r->len[r->n++] = (uint32_t)n;
		}
	}
	return NULL;
}

static void rx_start(struct rx *r)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	struct timeval tv = { 1, 0 };
	int sz = 8 << 20;

	memset(r, 0, sizeof(*r));
	r->fd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(r->fd >= 0);
	setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(bind(r->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(r->fd, (struct sockaddr *)&a, &al), 0);
	r->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&r->th, NULL, rx_main, r), 0);
}

static void rx_stop(struct rx *r)
{
	pthread_join(r->th, NULL);
	close(r->fd);
}

static void rx_free(struct rx *r)
{
	for (uint32_t i = 0; i < r->n; i++)
		free(r->buf[i]);
}

/* The datagrams of stream ID id, in arrival order, from a list of
 * datagrams (off bytes into each). */
static uint32_t of_stream(const struct rx *r, const uint32_t *idx, uint32_t n, uint32_t off, uint32_t id,
			  uint32_t *out)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		if (r->len[idx[i]] >= off + 8 && pdma_vrt_get32(r->buf[idx[i]] + off + 4) == id)
			out[k++] = idx[i];
	return k;
}

static void test_eth_frames(void **state)
{
	(void)state;
	const char *common = "-s 3 -n 300 -S 1056 --loss 10 --dup 10 --reorder 10 --seed 5 -r 20000";
	struct rx eth, plain;
	char cmd[1024], path[] = "/tmp/pdma-eth-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);

	/* gen --eth: frames to one socket, the JSON report to a file. */
	rx_start(&eth);
	snprintf(cmd, sizeof(cmd),
		 "%s gen %s --eth --to 127.0.0.1:%u -p 4999 --dst-mac 52:54:00:aa:bb:cc --src-ip 10.1.2.3 "
		 "--dst-ip 10.4.5.6 --src-port 777 --malformed 4 -j >%s",
		 tool, common, eth.port, path);
	assert_int_equal(system(cmd), 0);
	rx_stop(&eth);
	/* Plain gen with the same seed, to another socket. */
	rx_start(&plain);
	snprintf(cmd, sizeof(cmd), "%s gen %s -p %u >/dev/null 2>&1", tool, common, plain.port);
	assert_int_equal(system(cmd), 0);
	rx_stop(&plain);

	json_error_t je;
	json_t *rep = json_load_file(path, 0, &je);
	unlink(path);
	assert_non_null(rep);
	json_t *e = json_object_get(rep, "eth");
	assert_non_null(e);
	assert_int_equal(json_integer_value(json_object_get(e, "frames")), eth.n);

	/* Classify every frame with the deframers' parser, checksums checked. */
	const struct pdma_frm_cfg fc = { 65535, 4999, 0 };
	uint64_t kinds[PDMA_FRM_E__MAX] = { 0 };
	static uint32_t good[MAXF], all_plain[MAXF], a[MAXF], b[MAXF];
	uint32_t ng = 0;
	struct in_addr sip, dip;
	inet_pton(AF_INET, "10.1.2.3", &sip);
	inet_pton(AF_INET, "10.4.5.6", &dip);
	for (uint32_t i = 0; i < eth.n; i++) {
		const uint8_t *f = eth.buf[i];
		uint32_t off, len;
		int why = pdma_frm_parse(&fc, f, eth.len[i], 0, &off, &len);
		/* The oversize kind is valid but for its length: under a
		 * 4096-byte limit it is that. */
		if (!why && eth.len[i] > PDMA_FRM_MAX_LEN)
			why = PDMA_FRM_E_OVERSIZE;
		kinds[why]++;
		if (why)
			continue;
		static const uint8_t mac[6] = { 0x52, 0x54, 0, 0xaa, 0xbb, 0xcc };
		assert_memory_equal(f, mac, 6);
		assert_memory_equal(f + 26, &sip, 4);
		assert_memory_equal(f + 30, &dip, 4);
		assert_int_equal(f[34] << 8 | f[35], 777);
		assert_true(f[40] | f[41]); /* a UDP checksum, checked above */
		assert_int_equal(off, PDMA_ETH_HDRS);
		assert_int_equal(len, eth.len[i] - PDMA_ETH_HDRS);
		good[ng++] = i;
	}
	assert_int_equal(json_integer_value(json_object_get(e, "good")), ng);
	json_t *m = json_object_get(e, "malformed");
	uint64_t nm = 0;
	for (int k = 1; k < PDMA_FRM_E__MAX; k++) {
		assert_int_equal(json_integer_value(json_object_get(m, pdma_frm_reason_name(k))), kinds[k]);
		assert_true(kinds[k] >= 1);
		nm += kinds[k];
	}
	assert_int_equal(nm, ng / 4);
	/* Stripped of their headers, stream by stream: plain gen's datagrams. */
	assert_int_equal(plain.n, ng);
	for (uint32_t i = 0; i < plain.n; i++)
		all_plain[i] = i;
	for (uint32_t s = 0; s < 3; s++) {
		uint32_t na = of_stream(&eth, good, ng, PDMA_ETH_HDRS, 0x1000 + s, a);
		uint32_t nb = of_stream(&plain, all_plain, plain.n, 0, 0x1000 + s, b);
		assert_int_equal(na, nb);
		assert_true(na > 250);
		for (uint32_t k = 0; k < na; k++) {
			assert_int_equal(eth.len[a[k]] - PDMA_ETH_HDRS, plain.len[b[k]]);
			assert_memory_equal(eth.buf[a[k]] + PDMA_ETH_HDRS, plain.buf[b[k]], plain.len[b[k]]);
		}
	}
	printf("gen --eth: %u frames, %u good (= plain gen's datagrams), %llu malformed in %d kinds\n", eth.n, ng,
	       (unsigned long long)nm, PDMA_FRM_E__MAX - 1);
	json_decref(rep);
	rx_free(&eth);
	rx_free(&plain);
}

/* gen --eth --pcap, then peerdma deframe over the capture (the CPU frame
 * ring, no network): per stream, lost, duplicated and reordered are what gen
 * injected, received what it sent less its duplicates; per reason, the
 * skipped frames are gen's malformed frames. */
static void test_capture_deframed(void **state)
{
	(void)state;
	char cmd[1024], pcap[] = "/tmp/pdma-ethcap-XXXXXX", gj[64], dj[64];
	int fd = mkstemp(pcap);
	assert_true(fd >= 0);
	close(fd);
	snprintf(gj, sizeof(gj), "%s.gen", pcap);
	snprintf(dj, sizeof(dj), "%s.dfr", pcap);
	snprintf(cmd, sizeof(cmd),
		 "%s gen --eth --to 127.0.0.1:9 -s 4 -n 700 -S 1056 --loss 10 --loss-burst 3 --dup 10 --reorder 10 "
		 "--seed 11 --malformed 5 -p 5000 -w %s -j >%s && %s deframe --pcap %s -p 5000 -j >%s",
		 tool, pcap, gj, tool, pcap, dj);
	assert_int_equal(system(cmd), 0);
	json_error_t je;
	json_t *g = json_load_file(gj, 0, &je), *d = json_load_file(dj, 0, &je);
	unlink(pcap);
	unlink(gj);
	unlink(dj);
	assert_non_null(g);
	assert_non_null(d);
	json_t *ge = json_object_get(g, "eth"), *sk = json_object_get(d, "skipped");
	assert_int_equal(json_integer_value(json_object_get(d, "frames")), json_integer_value(json_object_get(ge, "frames")));
	assert_int_equal(json_integer_value(json_object_get(d, "datagrams")), json_integer_value(json_object_get(ge, "good")));
	for (int k = 1; k < PDMA_FRM_E__MAX; k++) {
		const char *name = pdma_frm_reason_name(k);
		json_int_t want = json_integer_value(json_object_get(json_object_get(ge, "malformed"), name));
		assert_true(want > 0);
		assert_int_equal(json_integer_value(json_object_get(sk, name)), want);
	}
	assert_int_equal(json_integer_value(json_object_get(d, "malformed_unattributed")), 0);
	json_t *gs = json_object_get(g, "streams"), *ds = json_object_get(d, "streams");
	assert_int_equal(json_array_size(gs), 4);
	assert_int_equal(json_array_size(ds), 4);
	for (size_t i = 0; i < 4; i++) {
		json_t *a = json_array_get(gs, i), *b = NULL;
		for (size_t j = 0; j < 4; j++)
			if (json_integer_value(json_object_get(json_array_get(ds, j), "stream_id")) ==
			    json_integer_value(json_object_get(a, "stream_id")))
				b = json_array_get(ds, j);
		assert_non_null(b);
		static const char *const keys[] = { "lost", "duplicated", "reordered", "context" };
		for (size_t k = 0; k < 4; k++)
			assert_int_equal(json_integer_value(json_object_get(b, keys[k])),
					 json_integer_value(json_object_get(a, keys[k])));
		assert_int_equal(json_integer_value(json_object_get(b, "received")),
				 json_integer_value(json_object_get(a, "sent")) -
					 json_integer_value(json_object_get(a, "duplicated")));
		assert_int_equal(json_integer_value(json_object_get(b, "malformed")), 0);
		assert_true(json_integer_value(json_object_get(a, "lost")) > 0);
	}
	json_decref(g);
	json_decref(d);
}

int main(void)
{
	tool = getenv("PEERDMA_TOOL");
	if (!tool) {
		printf("skipped: PEERDMA_TOOL not set (run through ctest)\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eth_frames),
		cmocka_unit_test(test_capture_deframed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
