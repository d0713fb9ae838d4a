// SPDX-License-Identifier: MIT
/* The SigMF writer's path for blocks in device memory (pdma_block_read into
 * the write buffer, whole packets at a time), run here on host blocks of a
 * real session: gen sends one lossy stream over 127.0.0.1, a consumer thread
 * writes every block twice, once as it is (host: copied from b->data) and
 * once marked as pinned GPU memory (PDMA_BLOCK_CUDA_HOST: read through
 * pdma_block_read, a 4 KiB buffer so runs are split and flushed), and the
 * two recordings must be identical, byte for byte, data and metadata.
 * Threads: the sender, the session's receive and deframer threads, the
 * consumer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gen/gen.h"
#include "peerdma/ingest.h"
#include "sinks/sigmf.h"

static char dir[] = "/tmp/test_sigmf_read.XXXXXX";

struct consumer {
	struct pdma_sub *sub;
	struct pdma_sigmf *host, *dev;
	uint64_t blocks, gaps;
	int err;
};

static void *consume(void *arg)
{
	struct consumer *c = arg;
	struct pdma_block *b;
	int ret;

	while ((ret = pdma_sub_next(c->sub, &b, 5000)) == 0) {
		enum pdma_block_mem m = b->mem;

		c->blocks++;
		c->gaps += b->gaps;
		ret = pdma_sigmf_write(c->host, b);
		if (!ret) {
			b->mem = PDMA_BLOCK_CUDA_HOST;
			ret = pdma_sigmf_write(c->dev, b);
			b->mem = m;
		}
		if (ret && !c->err)
			c->err = ret;
		pdma_block_release(b);
	}
	if (ret != -EPIPE && !c->err)
		c->err = ret;
	return NULL;
}

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *p;
	long len;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	rewind(f);
	p = malloc((size_t)len + 1);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*n = (size_t)len;
	return p;
}

static void same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *pa = slurp(a, &na), *pb = slurp(b, &nb);

	assert_true(na > 0);
	assert_int_equal(na, nb);
	assert_memory_equal(pa, pb, na);
	free(pa);
	free(pb);
	unlink(a);
	unlink(b);
}

static void test_device_read_path(void **state)
{
	struct pdma_ingest_attr ia;
	struct pdma_sub_attr sa;
	struct pdma_ingest *ing;
	struct consumer c = { 0 };
	struct pdma_gen_config gc;
	struct pdma_gen *g;
	pthread_t th;
	char msg[256];

	(void)state;
	assert_non_null(mkdtemp(dir));
	pdma_ingest_attr_init(&ia);
	assert_int_equal(pdma_ingest_open(&ia, &ing, msg, sizeof(msg)), 0);
	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &c.sub), 0);
	struct pdma_sigmf_attr wh = { .dir = dir, .prefix = "host", .sample_rate = ia.sample_rate,
				      .nosync = true };
	struct pdma_sigmf_attr wd = wh;
	wd.prefix = "dev";
	wd.buf_bytes = 4096; /* 4 packets of 992 bytes: runs split, flushes between */
	assert_int_equal(pdma_sigmf_open(&wh, &c.host), 0);
	assert_int_equal(pdma_sigmf_open(&wd, &c.dev), 0);
	assert_int_equal(pthread_create(&th, NULL, consume, &c), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);

	pdma_gen_config_default(&gc);
	gc.streams = 1;
	gc.packets = 3000;
	gc.loss_pm = 20;
	gc.loss_burst = 3;
	gc.seed = 5;
	assert_int_equal(pdma_gen_open(&gc, &g), 0);
	struct pdma_gen_send_opts so = { .port = pdma_ingest_port(ing), .rate_pps = 30000 };
	assert_int_equal(pdma_gen_send(g, &so), 0);
	const uint64_t lost = pdma_gen_injected(g, 0)->lost;
	pdma_gen_close(g);
	usleep(200 * 1000);
	assert_int_equal(pdma_ingest_stop(ing), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(c.err, 0);
	assert_true(c.blocks > 0);
	assert_int_equal(c.gaps, lost); /* loopback: what gen lost, nothing else */
	assert_int_equal(pdma_sigmf_finish(c.host), 0);
	assert_int_equal(pdma_sigmf_finish(c.dev), 0);

	struct pdma_sigmf_info ih, id;
	pdma_sigmf_stream(c.host, 0, &ih);
	pdma_sigmf_stream(c.dev, 0, &id);
	assert_int_equal(ih.samples, (gc.packets - lost) * (pdma_gen_payload_len(&gc) / 4));
	assert_int_equal(id.samples, ih.samples);
	assert_int_equal(id.captures, ih.captures);
	assert_true(ih.captures > 1);
	same_file(ih.data_path, id.data_path);
	/* the metadata names no file: identical too */
	same_file(ih.meta_path, id.meta_path);
	pdma_sigmf_close(c.host);
	pdma_sigmf_close(c.dev);
	pdma_sub_close(c.sub);
	pdma_ingest_close(ing);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_read_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
