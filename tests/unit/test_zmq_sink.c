// SPDX-License-Identifier: MIT
/*
 * The ZeroMQ sink (ingest/sinks/zmq.h) against a SUB socket of our own, with
 * blocks made by hand: the two frames of a message (topic, samples), ci16 and
 * cf32 bytes, the tag header byte for byte as gr-zeromq parses it (magic,
 * version, offsets, PMT key/value/srcid), zero fill of dropped blocks, jumps,
 * stale blocks, the topic filter, refusals (other formats, a cancelled sink),
 * the subscriber handshake, and a subscriber that never reads: publishing
 * waits (never drops) until cancelled. GNU Radio itself reads the sink in
 * tests/gnuradio/zmq_flowgraph.py.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include <cmocka.h>

#include "sinks/zmq.h"

#define SPP 8u
#define NPKT 4u
#define NS (SPP * NPKT)

struct fix {
	char ep[64];
	void *ctx, *sub;
	struct pdma_zmq *z;
};

static int open_fix(struct fix *f, enum pdma_zmq_format fmt, bool tags, const char *topic)
{
	struct pdma_zmq_attr a;
	static int n;

	snprintf(f->ep, sizeof(f->ep), "ipc:///tmp/pdma-test-zmq-%d-%d", (int)getpid(), n++);
	pdma_zmq_attr_init(&a);
	a.endpoint = f->ep;
	a.format = fmt;
	a.tags = tags;
	a.sample_rate = 1000;
	a.max_fill = 4 * NS;
	a.linger_ms = 0;
	a.hwm = 4; /* small queues: the stalled subscriber's test fills them */
	assert_int_equal(pdma_zmq_open(&a, &f->z, NULL, 0), 0);
	f->ctx = zmq_ctx_new();
	f->sub = zmq_socket(f->ctx, ZMQ_SUB);
	int t = 2000, hwm = 4;
	zmq_setsockopt(f->sub, ZMQ_RCVTIMEO, &t, sizeof(t));
	zmq_setsockopt(f->sub, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	assert_int_equal(zmq_setsockopt(f->sub, ZMQ_SUBSCRIBE, topic, strlen(topic)), 0);
	assert_int_equal(zmq_connect(f->sub, f->ep), 0);
	return pdma_zmq_wait_subscribers(f->z, 1, 5000);
}

static void close_fix(struct fix *f)
{
	pdma_zmq_close(f->z);
	zmq_close(f->sub);
	zmq_ctx_term(f->ctx);
}

/* A block of stream id at block number seq: sample k's I = k, Q = -k (k the
 * time line index, truncated), packets in gapmask zero. */
struct hblock {
	struct pdma_block b;
	uint64_t mask;
	int16_t s[2 * NS];
};

static void make_block(struct hblock *h, uint32_t id, uint64_t seq, uint64_t gapmask)
{
	memset(h, 0, sizeof(*h));
	h->mask = gapmask;
	h->b.stream_id = id;
	h->b.format = PDMA_FMT_CI16;
	h->b.bytes_per_sample = 4;
	h->b.samples_per_packet = SPP;
	h->b.npackets = NPKT;
	h->b.nsamples = NS;
	h->b.seq = seq;
	h->b.first_sample = seq * NS;
	h->b.ts_int = h->b.first_sample / 1000;
	h->b.ts_frac = h->b.first_sample % 1000;
	h->b.gap_mask = &h->mask;
	h->b.data = h->s;
	h->b.mem = PDMA_BLOCK_HOST;
	for (uint32_t i = 0; i < NS; i++) {
		if (gapmask >> (i / SPP) & 1)
			continue;
		h->s[2 * i] = (int16_t)(h->b.first_sample + i);
		h->s[2 * i + 1] = (int16_t)-(int16_t)(h->b.first_sample + i);
	}
	h->b.gaps = (uint32_t)__builtin_popcountll(gapmask);
}

/* The next message: topic into topic (NUL-terminated), data frame into *data
 * (malloc'd), its length returned. */
static size_t recv_msg(struct fix *f, char topic[32], uint8_t **data)
{
	zmq_msg_t m;
	int more;
	size_t ml = sizeof(more);

	zmq_msg_init(&m);
	assert_true(zmq_msg_recv(&m, f->sub, 0) >= 0);
	assert_int_equal(zmq_msg_size(&m), PDMA_ZMQ_TOPIC_LEN);
	memcpy(topic, zmq_msg_data(&m), PDMA_ZMQ_TOPIC_LEN);
	topic[PDMA_ZMQ_TOPIC_LEN] = '\0';
	zmq_getsockopt(f->sub, ZMQ_RCVMORE, &more, &ml);
	assert_int_equal(more, 1);
	assert_true(zmq_msg_recv(&m, f->sub, 0) >= 0);
	size_t n = zmq_msg_size(&m);
	*data = malloc(n ? n : 1);
	memcpy(*data, zmq_msg_data(&m), n);
	zmq_getsockopt(f->sub, ZMQ_RCVMORE, &more, &ml);
	assert_int_equal(more, 0);
	zmq_msg_close(&m);
	return n;
}

static bool nothing_more(struct fix *f)
{
	zmq_pollitem_t it = { .socket = f->sub, .events = ZMQ_POLLIN };
	return zmq_poll(&it, 1, 200) == 0;
}

static void test_topic(void **state)
{
	char t[PDMA_ZMQ_TOPIC_LEN + 1];

	(void)state;
	pdma_zmq_topic(0x1000, t);
	assert_string_equal(t, "stream-00001000");
	pdma_zmq_topic(0xdeadbeef, t);
	assert_string_equal(t, "stream-deadbeef");
	/* odd length: a keyless SUB source refuses the topic frame as samples */
	assert_int_equal(strlen(t) % 2, 1);
}

static void test_ci16_fill_filter(void **state)
{
	struct fix f;
	struct hblock h;
	char topic[32];
	uint8_t *d;

	(void)state;
	assert_int_equal(open_fix(&f, PDMA_ZMQ_CI16, false, "stream-00001000"), 0);
	make_block(&h, 0x1000, 10, 0x2); /* packet 1 lost */
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);
	make_block(&h, 0x1001, 10, 0); /* another stream: filtered out */
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);
	make_block(&h, 0x1000, 12, 0); /* block 11 never came: zeros */
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);

	assert_int_equal(recv_msg(&f, topic, &d), NS * 4);
	assert_string_equal(topic, "stream-00001000");
	for (uint32_t i = 0; i < NS; i++) {
		int16_t iq[2];
		memcpy(iq, d + 4 * i, 4);
		int16_t want = i / SPP == 1 ? 0 : (int16_t)(10 * NS + i);
		assert_int_equal(iq[0], want);
		assert_int_equal(iq[1], (int16_t)-want);
	}
	free(d);
	assert_int_equal(recv_msg(&f, topic, &d), NS * 4); /* the fill */
	for (uint32_t i = 0; i < NS * 4; i++)
		assert_int_equal(d[i], 0);
	free(d);
	assert_int_equal(recv_msg(&f, topic, &d), NS * 4);
	int16_t iq[2];
	memcpy(iq, d, 4);
	assert_int_equal(iq[0], (int16_t)(12 * NS));
	free(d);
	assert_true(nothing_more(&f));

	struct pdma_zmq_stream_stats s;
	assert_true(pdma_zmq_stream_stats(f.z, 0, &s));
	assert_int_equal(s.stream_id, 0x1000);
	assert_int_equal(s.first_sample, 10 * NS);
	assert_int_equal(s.samples, 3 * NS);
	assert_int_equal(s.messages, 3);
	assert_int_equal(s.gap_samples, SPP);
	assert_int_equal(s.fill_samples, NS);
	assert_true(pdma_zmq_stream_stats(f.z, 1, &s));
	assert_int_equal(s.stream_id, 0x1001);
	assert_false(pdma_zmq_stream_stats(f.z, 2, &s));
	struct pdma_zmq_stats st;
	pdma_zmq_stats(f.z, &st);
	assert_int_equal(st.messages, 4);
	assert_int_equal(st.streams, 2);
	assert_int_equal(st.subscribers, 1);
	close_fix(&f);
}

/* The tag header as gr-zeromq's parse_tag_header reads it. */
struct rd {
	const uint8_t *p, *end;
};

static uint64_t rd_host(struct rd *r, size_t n)
{
	uint64_t v = 0;
	assert_true(r->p + n <= r->end);
	memcpy(&v, r->p, n); /* little-endian host assumed by the test */
	r->p += n;
	return v;
}

static uint64_t rd_be(struct rd *r, size_t n)
{
	uint64_t v = 0;
	assert_true(r->p + n <= r->end);
	for (size_t i = 0; i < n; i++)
		v = v << 8 | r->p[i];
	r->p += n;
	return v;
}

static void rd_symbol(struct rd *r, char *out, size_t cap)
{
	assert_int_equal(rd_be(r, 1), 0x02);
	size_t n = (size_t)rd_be(r, 2);
	assert_true(n < cap && r->p + n <= r->end);
	memcpy(out, r->p, n);
	out[n] = '\0';
	r->p += n;
}

static double rd_double(struct rd *r)
{
	assert_int_equal(rd_be(r, 1), 0x04);
	uint64_t v = rd_be(r, 8);
	double d;
	memcpy(&d, &v, sizeof(d));
	return d;
}

struct tag {
	uint64_t off;
	char key[32];
	uint64_t u;
	double d;
};

/* Parses the header; returns the tag count, *hdr_len its bytes. */
static int parse_hdr(const uint8_t *d, size_t n, uint64_t *offset, struct tag *t, int cap,
		     size_t *hdr_len)
{
	struct rd r = { d, d + n };
	char src[32];

	assert_int_equal(rd_host(&r, 2), 0x5FF0);
	assert_int_equal(rd_host(&r, 1), 1);
	*offset = rd_host(&r, 8);
	int nt = (int)rd_host(&r, 8);
	assert_true(nt <= cap);
	for (int i = 0; i < nt; i++) {
		t[i].off = rd_host(&r, 8);
		rd_symbol(&r, t[i].key, sizeof(t[i].key));
		uint64_t type = r.p[0];
		if (type == 0x0b) {
			r.p++;
			t[i].u = rd_be(&r, 8);
		} else if (type == 0x04) {
			t[i].d = rd_double(&r);
		} else {
			assert_int_equal(rd_be(&r, 1), 0x0c); /* tuple (u64, double) */
			assert_int_equal(rd_be(&r, 4), 2);
			assert_int_equal(rd_be(&r, 1), 0x0b);
			t[i].u = rd_be(&r, 8);
			t[i].d = rd_double(&r);
		}
		rd_symbol(&r, src, sizeof(src));
		assert_string_equal(src, "peerdma");
	}
	*hdr_len = (size_t)(r.p - d);
	return nt;
}

static void test_cf32_tags(void **state)
{
	struct fix f;
	struct hblock h;
	char topic[32];
	uint8_t *d;
	struct tag t[8];
	uint64_t off;
	size_t hl, n;

	(void)state;
	assert_int_equal(open_fix(&f, PDMA_ZMQ_CF32, true, "stream-00000007"), 0);
	make_block(&h, 7, 5, 0x6); /* packets 1 and 2: one run */
	h.b.ctx_fields = PDMA_CTX_RF_FREQ;
	h.b.ctx_rf_freq = 2.4e9;
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);
	make_block(&h, 7, 7, 0x9); /* block 6 dropped; packets 0 and 3 lost */
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);
	make_block(&h, 7, 100, 0); /* beyond max_fill: a jump, rx_time again */
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);
	make_block(&h, 7, 99, 0); /* behind: stale */
	assert_int_equal(pdma_zmq_publish(f.z, &h.b, NULL, 0), 0);

	/* block 5: rx_time, rx_rate, rx_freq at its first sample, one gap run */
	n = recv_msg(&f, topic, &d);
	assert_int_equal(parse_hdr(d, n, &off, t, 8, &hl), 4);
	assert_int_equal(off, 5 * NS);
	assert_int_equal(n - hl, NS * 8);
	assert_string_equal(t[0].key, "rx_time");
	assert_int_equal(t[0].off, 5 * NS);
	assert_int_equal(t[0].u, 5 * NS / 1000);
	assert_true(t[0].d == (double)(5 * NS % 1000) / 1000.0);
	assert_string_equal(t[1].key, "rx_rate");
	assert_true(t[1].d == 1000.0);
	assert_string_equal(t[2].key, "rx_freq");
	assert_true(t[2].d == 2.4e9);
	assert_string_equal(t[3].key, "pdma_gap");
	assert_int_equal(t[3].off, 5 * NS + SPP);
	assert_int_equal(t[3].u, 2 * SPP);
	const uint8_t *pl = d + hl;
	for (uint32_t i = 0; i < NS; i++) {
		float c[2];
		memcpy(c, pl + 8 * i, 8);
		int16_t want = (i / SPP == 1 || i / SPP == 2) ? 0 : (int16_t)(5 * NS + i);
		assert_true(c[0] == (float)want / 32768.0f);
		assert_true(c[1] == (float)(int16_t)-want / 32768.0f);
	}
	free(d);
	/* block 6: zeros, pdma_drop */
	n = recv_msg(&f, topic, &d);
	assert_int_equal(parse_hdr(d, n, &off, t, 8, &hl), 1);
	assert_int_equal(off, 6 * NS);
	assert_string_equal(t[0].key, "pdma_drop");
	assert_int_equal(t[0].off, 6 * NS);
	assert_int_equal(t[0].u, NS);
	assert_int_equal(n - hl, NS * 8);
	free(d);
	/* block 7: two runs, no rx_time */
	n = recv_msg(&f, topic, &d);
	assert_int_equal(parse_hdr(d, n, &off, t, 8, &hl), 2);
	assert_string_equal(t[0].key, "pdma_gap");
	assert_int_equal(t[0].off, 7 * NS);
	assert_int_equal(t[0].u, SPP);
	assert_int_equal(t[1].off, 7 * NS + 3 * SPP);
	free(d);
	/* block 100: the jump */
	n = recv_msg(&f, topic, &d);
	assert_int_equal(parse_hdr(d, n, &off, t, 8, &hl), 2);
	assert_string_equal(t[0].key, "rx_time");
	assert_int_equal(t[0].off, 100 * NS);
	assert_int_equal(t[0].u, 100 * NS / 1000);
	free(d);
	assert_true(nothing_more(&f));

	struct pdma_zmq_stream_stats s;
	assert_true(pdma_zmq_stream_stats(f.z, 0, &s));
	assert_int_equal(s.jumps, 1);
	assert_int_equal(s.stale, 1);
	assert_int_equal(s.fill_samples, NS);
	assert_int_equal(s.gap_samples, 4 * SPP);
	close_fix(&f);
}

static void test_refusals(void **state)
{
	struct pdma_zmq_attr a;
	struct pdma_zmq *z;
	struct hblock h;
	char msg[256];

	(void)state;
	pdma_zmq_attr_init(&a);
	assert_int_equal(pdma_zmq_open(&a, &z, msg, sizeof(msg)), -EINVAL); /* no endpoint */
	a.endpoint = "bogus://x";
	assert_true(pdma_zmq_open(&a, &z, msg, sizeof(msg)) < 0);
	assert_non_null(strstr(msg, "bogus://x"));
	a.endpoint = "ipc:///tmp/pdma-test-zmq-refuse";
	assert_int_equal(pdma_zmq_open(&a, &z, msg, sizeof(msg)), 0);
	/* nobody subscribes */
	assert_int_equal(pdma_zmq_wait_subscribers(z, 1, 150), -ETIMEDOUT);
	make_block(&h, 1, 0, 0);
	h.b.format = 99;
	assert_int_equal(pdma_zmq_publish(z, &h.b, msg, sizeof(msg)), -EPROTO);
	h.b.format = PDMA_FMT_CI16;
	/* no subscriber: published into nothing, never blocks */
	assert_int_equal(pdma_zmq_publish(z, &h.b, msg, sizeof(msg)), 0);
	pdma_zmq_cancel(z);
	assert_int_equal(pdma_zmq_publish(z, &h.b, msg, sizeof(msg)), -ECANCELED);
	pdma_zmq_close(z);
}

struct stall {
	struct pdma_zmq *z;
	int ret;              /* read after the join */
	atomic_int sent;      /* watched while the publisher runs */
};

static void *stall_pub(void *arg)
{
	struct stall *s = arg;
	struct hblock *h = malloc(sizeof(*h));
	/* 1 MiB messages: the kernel's socket buffers fill after a few */
	size_t big = 1u << 18;
	int16_t *buf = calloc(big, 4);

	make_block(h, 3, 0, 0);
	h->b.data = buf;
	h->b.nsamples = big;
	for (int i = 0; i < 4096; i++) {
		h->b.first_sample = (uint64_t)i * big;
		s->ret = pdma_zmq_publish(s->z, &h->b, NULL, 0);
		if (s->ret)
			break;
		atomic_store(&s->sent, i + 1);
	}
	free(buf);
	free(h);
	return NULL;
}

/* A subscriber that never reads: publishing waits (XPUB_NODROP) instead of
 * dropping, and gives up only when cancelled. */
static void test_stalled_subscriber(void **state)
{
	struct fix f;
	struct stall s = { .z = NULL };
	pthread_t th;

	(void)state;
	assert_int_equal(open_fix(&f, PDMA_ZMQ_CI16, false, ""), 0);
	s.z = f.z;
	assert_int_equal(pthread_create(&th, NULL, stall_pub, &s), 0);
	/* Stuck: the count stops for a second, a few messages in (the
	 * queues and the socket's buffers hold about ten). A dropping socket
	 * would run on to 4096. Waits up to 20 s: a loaded machine moves the
	 * first messages slowly. */
	int sent = -1, still = 0;
	for (int t = 0; t < 200 && still < 10; t++) {
		usleep(100 * 1000);
		int now = atomic_load(&s.sent);
		still = now == sent ? still + 1 : 0;
		sent = now;
	}
	assert_int_equal(still, 10);
	assert_true(sent < 64);
	pdma_zmq_cancel(f.z);
	pthread_join(th, NULL);
	assert_int_equal(s.ret, -ECANCELED);
	struct pdma_zmq_stats st;
	pdma_zmq_stats(f.z, &st);
	assert_true(st.send_waits >= 1);
	/* what was queued is all there, in order */
	char topic[32];
	uint8_t *d;
	for (int i = 0; i < sent; i++) {
		assert_int_equal(recv_msg(&f, topic, &d), (1u << 18) * 4);
		free(d);
	}
	close_fix(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_topic),
		cmocka_unit_test(test_ci16_fill_filter),
		cmocka_unit_test(test_cf32_tags),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_stalled_subscriber),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
