// SPDX-License-Identifier: MIT
/*
 * A forwarder that breaks the protocol is not trusted further
 * (ingest/forward/DESIGN.md): the consumer ends with lost and -EPROTO, and
 * what the forwarder sends after the violation, a valid BLOCK and an END,
 * changes nothing. Before, the valid block was published and the END turned
 * the loss into an end (`peerdma consume` exited 0).
 *
 * The forwarder here is a fake of the test's own, in the same process: UCX
 * through the library's loader (ingest/forward/ucx.h), the messages through
 * its encoders (wire.h). After the first CREDIT it sends a BLOCK whose gap
 * count disagrees with its mask, a good BLOCK and END. A control run sends
 * two good blocks and END: both arrive and the consumer ends.
 *
 * Two UCX workers progress on two threads (the fake's and the consumer's):
 * _mt, so TSan runs it and valgrind does not (under valgrind UCX's worker
 * progress read address 0x4, inside libucp).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "forward/ucx.h"
#include "forward/wire.h"
#include "peerdma/forward.h"

#define B 4u         /* packets a block */
#define SPP 16u      /* samples a packet */

struct fake {
	struct pdma_ucx u;
	ucp_listener_h listener;
	ucp_ep_h ep;
	uint16_t port;
	bool bad_first;
	atomic_bool hello, credit, stop;
	pthread_t th;
};

static ucs_status_t on_hello(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			     const ucp_am_recv_param_t *param)
{
	(void)hdr, (void)hlen, (void)data, (void)len, (void)param;
	atomic_store(&((struct fake *)arg)->hello, true);
	return UCS_OK;
}

static ucs_status_t on_credit(void *arg, const void *hdr, size_t hlen, void *data, size_t len,
			      const ucp_am_recv_param_t *param)
{
	(void)hdr, (void)hlen, (void)data, (void)len, (void)param;
	atomic_store(&((struct fake *)arg)->credit, true);
	return UCS_OK;
}

static void on_ep_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)arg, (void)ep, (void)status; /* the consumer closed: expected */
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
	struct fake *f = arg;
	ucp_ep_params_t p = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
					    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
			      .conn_request = req, .err_mode = UCP_ERR_HANDLING_MODE_PEER,
			      .err_handler = { .cb = on_ep_err } };

	if (!f->ep)
		f->u.api->ep_create(f->u.worker, &p, &f->ep);
}

static void send_am(struct fake *f, unsigned id, const void *hdr, size_t hlen, const void *buf, size_t n)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_EAGER };

	assert_int_equal(pdma_ucx_wait(&f->u, f->u.api->am_send_nbx(f->ep, id, hdr, hlen, buf, n, &p), 5000), 0);
}

static void send_block(struct fake *f, uint64_t seq, uint32_t gaps)
{
	static uint32_t samples[B * SPP];
	uint64_t mask = 0; /* no packet missing, whatever gaps says */
	struct pdma_block b = { .stream_id = 0x1000, .format = PDMA_FMT_CI16, .bytes_per_sample = 4,
				.samples_per_packet = SPP, .first_sample = seq * B * SPP,
				.nsamples = B * SPP, .npackets = B, .gaps = gaps, .gap_mask = &mask,
				.seq = seq, .mem = PDMA_BLOCK_HOST };
	uint8_t hdr[256];

	send_am(f, PDMA_FWD_AM_BLOCK, hdr, pdma_fwd_block_put(hdr, &b), samples, sizeof(samples));
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	bool welcomed = false, sent = false;

	while (!atomic_load(&f->stop)) {
		if (!pdma_ucx_progress(&f->u))
			usleep(1000);
		if (atomic_load(&f->hello) && f->ep && !welcomed) {
			struct pdma_fwd_welcome w = { .version = PDMA_FWD_VERSION, .block_packets = B,
						      .max_payload = SPP * 4, .sample_rate = 1000000 };
			uint8_t buf[PDMA_FWD_WELCOME_LEN];

			send_am(f, PDMA_FWD_AM_WELCOME, buf, pdma_fwd_welcome_put(buf, &w), NULL, 0);
			welcomed = true;
		}
		if (atomic_load(&f->credit) && !sent) {
			struct pdma_fwd_end e = { 0 };
			uint8_t buf[64];

			send_block(f, 0, f->bad_first ? 1 : 0);
			send_block(f, 1, 0);
			send_am(f, PDMA_FWD_AM_END, buf, pdma_fwd_end_put(buf, &e), NULL, 0);
			sent = true;
		}
	}
	return NULL;
}

/* Returns 1 where UCX is not installed (the test then skips). */
static int fake_open(struct fake *f, bool bad_first)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	ucp_listener_params_t lp = { 0 };
	ucp_listener_attr_t la = { .field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR };
	ucp_am_handler_param_t hp = { .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
						    UCP_AM_HANDLER_PARAM_FIELD_CB |
						    UCP_AM_HANDLER_PARAM_FIELD_ARG,
				      .arg = f };
	char msg[256];

	memset(f, 0, sizeof(*f));
	f->bad_first = bad_first;
	if (pdma_ucx_open(&f->u, msg, sizeof(msg)) == -ENODEV)
		return 1;
	hp.id = PDMA_FWD_AM_HELLO;
	hp.cb = on_hello;
	assert_int_equal(f->u.api->worker_set_am_recv_handler(f->u.worker, &hp), UCS_OK);
	hp.id = PDMA_FWD_AM_CREDIT;
	hp.cb = on_credit;
	assert_int_equal(f->u.api->worker_set_am_recv_handler(f->u.worker, &hp), UCS_OK);
	lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
	lp.sockaddr.addr = (const struct sockaddr *)&sin;
	lp.sockaddr.addrlen = sizeof(sin);
	lp.conn_handler.cb = on_conn;
	lp.conn_handler.arg = f;
	assert_int_equal(f->u.api->listener_create(f->u.worker, &lp, &f->listener), UCS_OK);
	assert_int_equal(f->u.api->listener_query(f->listener, &la), UCS_OK);
	f->port = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
	assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
	return 0;
}

static void fake_close(struct fake *f)
{
	atomic_store(&f->stop, true);
	pthread_join(f->th, NULL);
	if (f->ep)
		pdma_ucx_close_ep(&f->u, f->ep, 1000);
	f->u.api->listener_destroy(f->listener);
	pdma_ucx_close(&f->u);
}

/* The consumer against the fake; its stats when its subscription ended. */
static void consume(bool bad_first, struct pdma_consume_stats *st, uint32_t *blocks)
{
	struct fake f;
	struct pdma_consume_attr a;
	struct pdma_consume *c;
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct pdma_block *b;
	char msg[256];
	int r;

	if (fake_open(&f, bad_first)) {
		printf("skipped: UCX is not installed\n");
		exit(77);
	}
	pdma_consume_attr_init(&a);
	a.addr = "127.0.0.1";
	a.port = f.port;
	a.name = "untrusting";
	assert_int_equal(pdma_consume_open(&a, &c, msg, sizeof(msg)), 0);
	pdma_sub_attr_init(&sa);
	assert_int_equal(pdma_consume_subscribe(c, &sa, &sub), 0);
	assert_int_equal(pdma_consume_start(c), 0);
	*blocks = 0;
	for (int waited = 0; waited < 100; waited++) {
		r = pdma_sub_next(sub, &b, 100);
		if (r == 0) {
			++*blocks;
			pdma_block_release(b);
			waited = 0;
		} else if (r == -EPIPE) {
			break;
		}
	}
	assert_int_equal(r, -EPIPE); /* ended or lost: the subscription ends */
	pdma_consume_stats(c, st);
	pdma_sub_close(sub);
	pdma_consume_close(c);
	fake_close(&f);
}

static void test_bad_block_not_trusted(void **state)
{
	struct pdma_consume_stats st;
	uint32_t blocks;

	(void)state;
	consume(true, &st, &blocks);
	assert_true(st.lost);
	assert_false(st.ended);
	assert_int_equal(st.error, -EPROTO);
	assert_int_equal(blocks, 0); /* the good block after the bad one: not published */
}

static void test_good_blocks_control(void **state)
{
	struct pdma_consume_stats st;
	uint32_t blocks;

	(void)state;
	consume(false, &st, &blocks);
	assert_false(st.lost);
	assert_true(st.ended);
	assert_int_equal(st.error, 0);
	assert_int_equal(blocks, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_blocks_control),
		cmocka_unit_test(test_bad_block_not_trusted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
