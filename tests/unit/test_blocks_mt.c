// SPDX-License-Identifier: MIT
/* The public ingest API (include/peerdma/ingest.h) over 127.0.0.1 with the
 * generator: blocks carry every sample gen sent, in order, zeros and gap
 * bits exactly where it lost packets; a stalled consumer's blocks never
 * change and what it misses is counted exactly under both policies;
 * callbacks; DLPack views hold their block; bad input is refused. Threads:
 * the sender, the receive thread, the deframer, callback threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <dlpack/dlpack.h>

#include "gen/gen.h"
#include "loopback/loopback.h"
#include "peerdma/ingest.h"

struct send_job {
	struct pdma_gen_config g;
	uint16_t port;
	double rate;
	pthread_t th;
	int ret;
	uint64_t lost[8];
	atomic_bool done;
};

static void *send_main(void *arg)
{
	struct send_job *j = arg;
	struct pdma_gen *g;
	struct pdma_gen_send_opts o = { .host = "127.0.0.1", .port = j->port, .rate_pps = j->rate };

	j->ret = pdma_gen_open(&j->g, &g);
	if (j->ret)
		return NULL;
	j->ret = pdma_gen_send(g, &o);
	for (uint32_t i = 0; i < j->g.streams && i < 8; i++)
		j->lost[i] = pdma_gen_injected(g, i)->lost;
	pdma_gen_close(g);
	atomic_store(&j->done, true);
	return NULL;
}

static void send_start(struct send_job *j, uint16_t port, uint32_t streams, uint64_t packets,
		       uint32_t loss_pm, double rate)
{
	memset(j, 0, sizeof(*j));
	pdma_gen_config_default(&j->g);
	j->g.streams = streams;
	j->g.packets = packets;
	j->g.loss_pm = loss_pm;
	j->g.dup_pm = loss_pm;
	j->g.reorder_pm = loss_pm;
	j->g.seed = 5;
	j->port = port;
	j->rate = rate;
	assert_int_equal(pthread_create(&j->th, NULL, send_main, j), 0);
}

static void send_wait(struct send_job *j)
{
	pthread_join(j->th, NULL);
	assert_int_equal(j->ret, 0);
}

/* Take blocks while the sender runs (fn sees each; the block is released
 * after); once it is done and the session has been quiet 300 ms, stop the
 * session and take the rest. */
static void consume(struct pdma_ingest *ing, struct pdma_sub *sub, struct send_job *j,
		    void (*fn)(struct pdma_block *b, void *arg), void *arg)
{
	bool stopped = false;
	int quiet = 0;

	for (;;) {
		struct pdma_block *b;
		int e = pdma_sub_next(sub, &b, 100);

		if (e == 0) {
			fn(b, arg);
			pdma_block_release(b);
			quiet = 0;
			continue;
		}
		if (e == -EPIPE)
			break;
		assert_int_equal(e, -ETIMEDOUT);
		if (!stopped && atomic_load(&j->done) && ++quiet >= 3) {
			send_wait(j);
			assert_int_equal(pdma_ingest_stop(ing), 0);
			stopped = true;
		}
	}
	assert_true(stopped);
}

static struct pdma_ingest *open_session(uint32_t block_packets)
{
	struct pdma_ingest_attr a;
	struct pdma_ingest *ing;
	char msg[128];

	pdma_ingest_attr_init(&a);
	a.block_packets = block_packets;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), 0);
	return ing;
}

/* The samples of block b against gen's (loopback.h); returns the gap
 * packets. */
static uint32_t check_block(const struct pdma_block *b)
{
	uint32_t gaps;

	assert_int_equal(b->format, PDMA_FMT_CI16);
	assert_int_equal(b->mem, PDMA_BLOCK_HOST);
	assert_int_equal(b->nsamples, (uint64_t)b->npackets * b->samples_per_packet);
	assert_int_equal(b->ts_int * 10000000ull + b->ts_frac, b->first_sample);
	assert_int_equal(pdma_loopback_check_block(b, b->data, &gaps), 0);
	assert_int_equal(gaps, b->gaps);
	return gaps;
}

/* Every sample, in order, gaps exactly as many as gen lost; the context
 * packet's sample rate reaches the blocks. */
struct exact_state {
	uint64_t next[2], gaps[2], pkts[2];
	bool have[2];
};

static void exact_block(struct pdma_block *b, void *arg)
{
	struct exact_state *x = arg;
	uint32_t s = b->stream_id - 0x1000;

	assert_true(s < 2);
	uint64_t p0 = b->first_sample / b->samples_per_packet;
	if (x->have[s])
		assert_int_equal(p0, x->next[s]);
	x->have[s] = true;
	x->next[s] = p0 + b->npackets;
	x->pkts[s] += b->npackets;
	x->gaps[s] += check_block(b);
	assert_true(b->ctx_fields & PDMA_CTX_SAMPLE_RATE);
	assert_true(b->ctx_sample_rate == 10e6);
}

static void test_blocks_exact(void **state)
{
	struct pdma_ingest *ing = open_session(64);
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct send_job j;
	struct exact_state x = { 0 };
	(void)state;

	/* backpressure: a consumer descheduled on a loaded machine loses
	 * nothing (the rings absorb the wait) */
	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 2, 3000, 10, 100000);
	consume(ing, sub, &j, exact_block, &x);
	for (int s = 0; s < 2; s++) {
		assert_int_equal(x.pkts[s], 3000);
		assert_int_equal(x.gaps[s], j.lost[s]);
		assert_true(j.lost[s] > 0);
	}
	struct pdma_sub_stats ss;
	pdma_sub_stats(sub, &ss);
	assert_int_equal(ss.overruns, 0);
	assert_int_equal(ss.held, 0);
	assert_int_equal(ss.queued, 0);
	struct pdma_ingest_stats st;
	pdma_ingest_stats(ing, &st);
	assert_int_equal(st.blocks_published, ss.delivered);
	assert_int_equal(st.gap_packets, x.gaps[0] + x.gaps[1]);
	assert_int_equal(st.window_drops, 0);
	assert_int_equal(st.socket_drops + st.ring_overruns, 0);
	assert_int_equal(st.streams, 2);
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
}

/* A consumer that holds one block and stalls a second while the stream
 * goes on. Drop-oldest: the held block's bytes never change, every block
 * published is delivered or counted as an overrun, and nothing else is lost. */
static void test_blocks_stall_drop_oldest(void **state)
{
	struct pdma_ingest *ing = open_session(32);
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct send_job j;
	struct pdma_block *held, *b;
	uint64_t delivered_pkts = 0;
	(void)state;

	pdma_sub_attr_init(&sa);
	sa.stream_id = 0x1000;
	sa.depth = 4;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 2, 4000, 0, 8000);
	assert_int_equal(pdma_sub_next(sub, &held, 5000), 0);
	size_t bytes = held->nsamples * 4;
	void *copy = malloc(bytes);
	memcpy(copy, held->data, bytes);
	sleep(1); /* the stall: blocks keep coming */
	assert_memory_equal(held->data, copy, bytes);
	delivered_pkts += held->npackets;
	check_block(held);
	send_wait(&j);
	usleep(200000);
	assert_memory_equal(held->data, copy, bytes);
	pdma_block_release(held);
	free(copy);
	assert_int_equal(pdma_ingest_stop(ing), 0);
	while (pdma_sub_next(sub, &b, 0) == 0) {
		check_block(b);
		delivered_pkts += b->npackets;
		pdma_block_release(b);
	}
	struct pdma_sub_stats ss;
	struct pdma_ingest_stats st;
	pdma_sub_stats(sub, &ss);
	pdma_ingest_stats(ing, &st);
	assert_true(ss.overruns > 0);
	assert_int_equal(ss.delivered + ss.overruns, st.blocks_published);
	assert_int_equal(st.window_drops, 0);
	assert_int_equal(st.socket_drops + st.ring_overruns, 0);
	/* the stream is the blocks delivered, the overrun ones, and what
	 * could not be published for want of a buffer */
	assert_int_equal(delivered_pkts + ss.overrun_packets + st.window_drops + st.late, 4000);
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
}

/* Backpressure: the stalled consumer loses no block; the deframer waited,
 * and what the receive path dropped meanwhile is counted there, exactly:
 * received + dropped = sent. */
static void test_blocks_stall_backpressure(void **state)
{
	struct pdma_ingest *ing = open_session(64);
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct send_job j;
	struct pdma_block *held, *b;
	uint64_t pkts = 0, gaps = 0;
	(void)state;

	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	sa.depth = 2;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 1, 60000, 0, 0); /* unpaced */
	assert_int_equal(pdma_sub_next(sub, &held, 5000), 0);
	size_t bytes = held->nsamples * 4;
	void *copy = malloc(bytes);
	memcpy(copy, held->data, bytes);
	sleep(1);
	assert_memory_equal(held->data, copy, bytes);
	pkts += held->npackets;
	gaps += check_block(held);
	pdma_block_release(held);
	free(copy);
	int e;
	while ((e = pdma_sub_next(sub, &b, 1000)) == 0) {
		gaps += check_block(b);
		pkts += b->npackets;
		pdma_block_release(b);
	}
	assert_int_equal(e, -ETIMEDOUT);
	send_wait(&j);
	assert_int_equal(pdma_ingest_stop(ing), 0);
	while (pdma_sub_next(sub, &b, 0) == 0) {
		gaps += check_block(b);
		pkts += b->npackets;
		pdma_block_release(b);
	}
	struct pdma_sub_stats ss;
	struct pdma_ingest_stats st;
	pdma_sub_stats(sub, &ss);
	pdma_ingest_stats(ing, &st);
	assert_int_equal(ss.overruns, 0);
	assert_true(ss.waits > 0);
	assert_int_equal(ss.delivered, st.blocks_published);
	/* sent = received + dropped by the socket or the ring, exactly */
	print_message("backpressure: %llu received, %llu socket drops, %llu ring overruns, %llu waits, "
		      "%llu placed, %llu in blocks, %llu window drops\n",
		      (unsigned long long)st.datagrams, (unsigned long long)st.socket_drops,
		      (unsigned long long)st.ring_overruns, (unsigned long long)ss.waits,
		      (unsigned long long)st.packets_placed, (unsigned long long)(pkts - gaps),
		      (unsigned long long)st.window_drops);
	assert_int_equal(st.datagrams + st.socket_drops + st.ring_overruns, 60000 + 1);
	assert_true(st.socket_drops + st.ring_overruns > 0);
	/* every placed data packet is in a block, or counted as dropped
	 * between the window and the blocks (a jump past the window when the
	 * rings dropped); gaps are the receive-side drops */
	assert_int_equal(pkts - gaps + st.window_drops + st.late, st.packets_placed);
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
}

struct cb_state {
	pthread_mutex_t m;
	uint64_t pkts, gaps, blocks;
};

static void on_block(struct pdma_block *b, void *arg)
{
	struct cb_state *c = arg;
	uint32_t g = check_block(b);

	pthread_mutex_lock(&c->m);
	c->pkts += b->npackets;
	c->gaps += g;
	c->blocks++;
	pthread_mutex_unlock(&c->m);
	pdma_block_release(b);
}

static void count_block(struct pdma_block *b, void *arg)
{
	(void)b;
	(*(uint64_t *)arg)++;
}

/* Callback subscriptions, one per stream, beside a polling one for all. */
static void test_blocks_callback(void **state)
{
	struct pdma_ingest *ing = open_session(16);
	struct pdma_sub_attr sa;
	struct pdma_sub *cs[2], *all;
	struct cb_state c[2] = { { .m = PTHREAD_MUTEX_INITIALIZER }, { .m = PTHREAD_MUTEX_INITIALIZER } };
	struct send_job j;
	struct pdma_block *b;
	(void)state;

	for (int i = 0; i < 2; i++) {
		pdma_sub_attr_init(&sa);
		sa.stream_id = 0x1000 + i;
		sa.policy = PDMA_SUB_BACKPRESSURE;
		sa.cb = on_block;
		sa.cb_arg = &c[i];
		assert_int_equal(pdma_ingest_subscribe(ing, &sa, &cs[i]), 0);
		assert_int_equal(pdma_sub_next(cs[i], &b, 0), -EINVAL);
	}
	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &all), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &all), -EBUSY);
	send_start(&j, pdma_ingest_port(ing), 2, 1000, 20, 50000);
	uint64_t n = 0;
	consume(ing, all, &j, count_block, &n);
	pdma_sub_close(cs[0]);
	pdma_sub_close(cs[1]);
	pdma_sub_close(all);
	struct pdma_ingest_stats st;
	pdma_ingest_stats(ing, &st);
	/* Backpressure: a callback thread starved of CPU (a loaded machine)
	 * holds the deframer up until the receive path drops; each data packet
	 * it drops is one more gap. Without drops the gaps are gen's losses
	 * exactly; with them, every placed packet is still in a block or
	 * counted. */
	uint64_t rx_drops = st.socket_drops + st.ring_overruns;
	print_message("callback: %llu received, %llu socket drops, %llu ring overruns, %llu placed, "
		      "%llu window drops, %llu late; gaps %llu / %llu, gen lost %llu / %llu\n",
		      (unsigned long long)st.datagrams, (unsigned long long)st.socket_drops,
		      (unsigned long long)st.ring_overruns, (unsigned long long)st.packets_placed,
		      (unsigned long long)st.window_drops, (unsigned long long)st.late,
		      (unsigned long long)c[0].gaps, (unsigned long long)c[1].gaps,
		      (unsigned long long)j.lost[0], (unsigned long long)j.lost[1]);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(c[i].pkts, 1000);
		assert_true(c[i].gaps >= j.lost[i]);
		if (!rx_drops)
			assert_int_equal(c[i].gaps, j.lost[i]);
	}
	assert_int_equal(2000 - c[0].gaps - c[1].gaps + st.window_drops + st.late, st.packets_placed);
	assert_int_equal(n, c[0].blocks + c[1].blocks);
	pdma_ingest_close(ing);
}

/* A callback that holds its first block until the test opens the gate. */
struct gate_state {
	atomic_bool open;
	uint64_t pkts, gaps, blocks;
};

static void gated_block(struct pdma_block *b, void *arg)
{
	struct gate_state *g = arg;

	while (!atomic_load(&g->open))
		usleep(1000);
	g->pkts += b->npackets;
	g->gaps += check_block(b);
	g->blocks++;
	pdma_block_release(b);
}

/* A callback subscription closed after pdma_ingest_stop still sees every
 * block: the session stops with blocks queued behind a callback that has not
 * returned, and the close runs the callback on each of them first. */
static void test_blocks_callback_drain(void **state)
{
	struct pdma_ingest *ing = open_session(16);
	struct gate_state g = { 0 };
	struct pdma_sub_attr sa;
	struct pdma_sub_stats ss;
	struct pdma_ingest_stats st;
	struct pdma_sub *sub;
	struct send_job j;
	(void)state;

	pdma_sub_attr_init(&sa); /* depth 8: the 7 blocks of 100 packets fit */
	sa.cb = gated_block;
	sa.cb_arg = &g;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 1, 100, 0, 20000);
	send_wait(&j);
	usleep(300000); /* arrived, and the open block flushed after 100 ms idle */
	assert_int_equal(pdma_ingest_stop(ing), 0);
	pdma_ingest_stats(ing, &st);
	pdma_sub_stats(sub, &ss);
	assert_int_equal(st.blocks_published, 7);
	assert_int_equal(ss.queued + ss.delivered, 7);
	assert_true(ss.queued > 0); /* what the close must not drop */
	atomic_store(&g.open, true);
	pdma_sub_close(sub);
	assert_int_equal(g.blocks, 7);
	assert_int_equal(g.pkts, 100);
	assert_int_equal(g.gaps, 0);
	assert_int_equal(ss.overruns, 0);
	pdma_ingest_close(ing);
}

/* Two backpressure subscriptions share each block. The producer hands a
 * block to the fast one (subscribed last: delivered to first), then waits for
 * room in the slow one's queue of one, and the fast consumer releases the
 * block meanwhile. The buffer must stay the slow one's: it gets every block
 * once, whole, in order (a buffer freed early was written with the next
 * block, which the slow one then saw twice and the block before it never). */
static void test_blocks_shared_slow(void **state)
{
	struct pdma_ingest *ing = open_session(16);
	struct pdma_sub_attr sa;
	struct pdma_sub *fast, *slow;
	struct pdma_block *b;
	struct send_job j;
	uint64_t next = 0, pkts = 0, gaps = 0, nfast = 0, nslow = 0;
	bool have = false, stopped = false;
	int quiet = 0;
	(void)state;

	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	sa.depth = 1;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &slow), 0);
	sa.depth = 8;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &fast), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 1, 800, 10, 20000);
	for (;;) {
		while (pdma_sub_next(fast, &b, 0) == 0) {
			nfast++;
			pdma_block_release(b);
		}
		int e = pdma_sub_next(slow, &b, 100);

		if (e == 0) {
			uint64_t p0 = b->first_sample / b->samples_per_packet;

			if (have)
				assert_int_equal(p0, next);
			have = true;
			next = p0 + b->npackets;
			pkts += b->npackets;
			gaps += check_block(b);
			nslow++;
			pdma_block_release(b);
			usleep(3000); /* slower than the blocks come: the producer waits */
			quiet = 0;
			continue;
		}
		if (e == -EPIPE)
			break;
		assert_int_equal(e, -ETIMEDOUT);
		if (!stopped && atomic_load(&j.done) && ++quiet >= 3) {
			send_wait(&j);
			assert_int_equal(pdma_ingest_stop(ing), 0);
			stopped = true;
		}
	}
	while (pdma_sub_next(fast, &b, 0) == 0) {
		nfast++;
		pdma_block_release(b);
	}
	struct pdma_sub_stats fs, ss;
	struct pdma_ingest_stats st;
	pdma_sub_stats(fast, &fs);
	pdma_sub_stats(slow, &ss);
	pdma_ingest_stats(ing, &st);
	assert_true(ss.waits > 0); /* the case under test happened */
	assert_int_equal(pkts, 800);
	assert_int_equal(gaps, j.lost[0]);
	assert_int_equal(nslow, st.blocks_published);
	assert_int_equal(nfast, st.blocks_published);
	assert_int_equal(fs.overruns + ss.overruns, 0);
	pdma_sub_close(fast);
	pdma_sub_close(slow);
	pdma_ingest_close(ing);
}

/* A DLPack view: the block's pointer, int16 [n, 2] on the CPU; it holds the
 * block after the consumer's release, and its deleter drops it. */
static void test_blocks_dlpack(void **state)
{
	struct pdma_ingest *ing = open_session(64);
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct pdma_sub_stats ss;
	struct send_job j;
	struct pdma_block *b;
	void *mt;
	(void)state;

	pdma_sub_attr_init(&sa);
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 1, 500, 0, 50000);
	assert_int_equal(pdma_sub_next(sub, &b, 5000), 0);
	assert_int_equal(pdma_block_dlpack(b, 7, &mt), -EINVAL); /* a stream for a CPU block */
	assert_int_equal(pdma_block_dlpack(b, -1, &mt), 0);
	DLManagedTensor *t = mt;
	assert_ptr_equal(t->dl_tensor.data, b->data);
	assert_int_equal(t->dl_tensor.device.device_type, kDLCPU);
	assert_int_equal(t->dl_tensor.ndim, 2);
	assert_int_equal(t->dl_tensor.shape[0], (int64_t)b->nsamples);
	assert_int_equal(t->dl_tensor.shape[1], 2);
	assert_int_equal(t->dl_tensor.dtype.code, kDLInt);
	assert_int_equal(t->dl_tensor.dtype.bits, 16);
	assert_null(t->dl_tensor.strides);
	pdma_block_release(b); /* the consumer is done; the view is not */
	pdma_sub_stats(sub, &ss);
	assert_int_equal(ss.held, 1);
	t->deleter(t);
	pdma_sub_stats(sub, &ss);
	assert_int_equal(ss.held, 0);
	send_wait(&j);
	assert_int_equal(pdma_ingest_stop(ing), 0);
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
}

/* A view outlives its session: the session closes, the view's samples stay
 * readable until its deleter runs, which frees what the session left (ASan
 * and valgrind see a use after free or a leak). pdma_block_read copies a
 * block's packets to host memory. */
static void test_blocks_outlive_session(void **state)
{
	struct pdma_ingest *ing = open_session(64);
	struct pdma_sub_attr sa;
	struct pdma_sub *sub;
	struct send_job j;
	struct pdma_block *b;
	void *mt;
	(void)state;

	pdma_sub_attr_init(&sa);
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	send_start(&j, pdma_ingest_port(ing), 1, 500, 0, 50000);
	assert_int_equal(pdma_sub_next(sub, &b, 5000), 0);
	size_t pkt = (size_t)b->samples_per_packet * 4, bytes = b->nsamples * 4;
	uint8_t *copy = malloc(bytes);
	assert_int_equal(pdma_block_read(b, 0, b->npackets, copy), 0);
	assert_memory_equal(copy, b->data, bytes);
	assert_int_equal(pdma_block_read(b, 1, 1, copy), 0);
	assert_memory_equal(copy, (uint8_t *)b->data + pkt, pkt);
	assert_int_equal(pdma_block_read(b, b->npackets, 1, copy), -EINVAL);
	assert_int_equal(pdma_block_read(b, 1, b->npackets, copy), -EINVAL);
	assert_int_equal(pdma_block_read(b, 0, b->npackets, copy), 0);
	assert_int_equal(pdma_block_dlpack(b, -1, &mt), 0);
	pdma_block_release(b);
	send_wait(&j);
	assert_int_equal(pdma_ingest_stop(ing), 0);
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
	DLManagedTensor *t = mt;
	assert_memory_equal(t->dl_tensor.data, copy, bytes);
	t->deleter(t);
	free(copy);
}

static void test_blocks_bad_input(void **state)
{
	struct pdma_ingest_attr a;
	struct pdma_sub_attr sa;
	struct pdma_ingest *ing;
	struct pdma_sub *sub;
	char msg[128];
	(void)state;

	assert_int_equal(pdma_ingest_open(NULL, &ing, msg, sizeof(msg)), -EINVAL);
	pdma_ingest_attr_init(&a);
	a.size = 8;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	pdma_ingest_attr_init(&a);
	a.block_packets = 0;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "block_packets"));
	pdma_ingest_attr_init(&a);
	a.window_blocks = a.late_blocks + 1;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	pdma_ingest_attr_init(&a);
	a.max_payload = 1001;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	pdma_ingest_attr_init(&a);
	a.path = (enum pdma_ingest_path_kind)42;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	pdma_ingest_attr_init(&a);
	a.bind_addr = "300.1.2.3";
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "bind_addr"));
	a.bind_addr = "";
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	/* the nic path has no ephemeral port: its frames carry one, and the
	 * frame parser would skip every frame for port 0 (before any device) */
	pdma_ingest_attr_init(&a);
	a.path = PDMA_INGEST_PATH_NIC;
	assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "port"));
	pdma_ingest_attr_init(&a);
	assert_int_equal(pdma_ingest_open(&a, &ing, NULL, 0), 0);
	pdma_sub_attr_init(&sa);
	sa.depth = 0;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), -EINVAL);
	pdma_sub_attr_init(&sa);
	sa.policy = (enum pdma_sub_policy)9;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), -EINVAL);
	pdma_sub_attr_init(&sa);
	sa.stream_id = 1ull << 40;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), -EINVAL);
	pdma_sub_attr_init(&sa);
	sa.size = 4;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), -EINVAL);
	pdma_sub_attr_init(&sa);
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	struct pdma_block *b;
	assert_int_equal(pdma_sub_next(sub, &b, 0), -ETIMEDOUT);
	assert_int_equal(pdma_sub_next(sub, NULL, 0), -EINVAL);
	pdma_sub_close(sub);
	assert_int_equal(pdma_sub_next(sub, &b, 0), -EPIPE);
	pdma_ingest_close(ing);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks_exact),
		cmocka_unit_test(test_blocks_stall_drop_oldest),
		cmocka_unit_test(test_blocks_stall_backpressure),
		cmocka_unit_test(test_blocks_callback),
		cmocka_unit_test(test_blocks_callback_drain),
		cmocka_unit_test(test_blocks_shared_slow),
		cmocka_unit_test(test_blocks_dlpack),
		cmocka_unit_test(test_blocks_outlive_session),
		cmocka_unit_test(test_blocks_bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
