// SPDX-License-Identifier: MIT
/* Blocks on the GPU paths (include/peerdma/ingest.h): host-staged and
 * zero-copy sessions fed by the generator over 127.0.0.1 publish blocks in
 * device memory (PDMA_BLOCK_CUDA) with an event; read back after the event,
 * every sample equals gen's in host order, gaps zero and flagged exactly as
 * many as gen lost, blocks in order; a DLPack view is a kDLCUDA tensor at
 * the block's address, and a consumer stream can be made to wait on the
 * event. Exits 77 ("skipped: no CUDA device") without a GPU. */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>
#include <dlpack/dlpack.h>

#include "gen/gen.h"
#include "loopback/loopback.h"
#include "peerdma/ingest.h"

static struct {
	void *cu;
	int (*init)(unsigned);
	int (*dev_get)(int *, int);
	int (*ctx_retain)(void **, int);
	int (*ctx_set)(void *);
	int (*ev_sync)(void *);
	int (*dtoh)(void *, uint64_t, size_t);
	int (*stream_create)(void **, unsigned);
	int (*stream_sync)(void *);
	int (*stream_destroy)(void *);
	int (*dev_count)(int *);
	int (*ptr_attr)(void *, int, uint64_t);
} C;

static int cuda_setup(void)
{
	void *ctx;
	int dev;

	C.cu = dlopen("libcuda.so.1", RTLD_NOW);
	if (!C.cu)
		return -1;
	C.init = (int (*)(unsigned))dlsym(C.cu, "cuInit");
	C.dev_get = (int (*)(int *, int))dlsym(C.cu, "cuDeviceGet");
	C.ctx_retain = (int (*)(void **, int))dlsym(C.cu, "cuDevicePrimaryCtxRetain");
	C.ctx_set = (int (*)(void *))dlsym(C.cu, "cuCtxSetCurrent");
	C.ev_sync = (int (*)(void *))dlsym(C.cu, "cuEventSynchronize");
	C.dtoh = (int (*)(void *, uint64_t, size_t))dlsym(C.cu, "cuMemcpyDtoH_v2");
	C.stream_create = (int (*)(void **, unsigned))dlsym(C.cu, "cuStreamCreate");
	C.stream_sync = (int (*)(void *))dlsym(C.cu, "cuStreamSynchronize");
	C.stream_destroy = (int (*)(void *))dlsym(C.cu, "cuStreamDestroy_v2");
	C.dev_count = (int (*)(int *))dlsym(C.cu, "cuDeviceGetCount");
	C.ptr_attr = (int (*)(void *, int, uint64_t))dlsym(C.cu, "cuPointerGetAttribute");
	if (!C.init || C.init(0) || C.dev_get(&dev, 0) || C.ctx_retain(&ctx, dev) || C.ctx_set(ctx))
		return -1;
	return 0;
}

struct send_job {
	struct pdma_gen_config g;
	uint16_t port;
	pthread_t th;
	int ret;
	uint64_t lost[4];
};

static void *send_main(void *arg)
{
	struct send_job *j = arg;
	struct pdma_gen *g;
	struct pdma_gen_send_opts o = { .host = "127.0.0.1", .port = j->port, .rate_pps = 50000 };

	j->ret = pdma_gen_open(&j->g, &g);
	if (j->ret)
		return NULL;
	j->ret = pdma_gen_send(g, &o);
	for (uint32_t i = 0; i < j->g.streams; i++)
		j->lost[i] = pdma_gen_injected(g, i)->lost;
	pdma_gen_close(g);
	return NULL;
}

#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9

/* Blocks of a session on cuda_device (ingest.h): there, and said so. */
static void run_path(enum pdma_ingest_path_kind path, int device)
{
	struct pdma_ingest_attr a;
	struct pdma_sub_attr sa;
	struct pdma_ingest *ing;
	struct pdma_sub *sub;
	struct send_job j = { 0 };
	char msg[256];
	uint64_t next[2] = { 0 }, pkts[2] = { 0 }, gaps[2] = { 0 };
	bool have[2] = { false, false }, dlpack_done = false;
	struct pdma_block *b;
	int e;

	pdma_ingest_attr_init(&a);
	a.path = path;
	a.cuda_device = device;
	e = pdma_ingest_open(&a, &ing, msg, sizeof(msg));
	if (e)
		fail_msg("open (%s): %s: %s", path == PDMA_INGEST_PATH_HOST_STAGED ? "host-staged" : "zero-copy",
			 strerror(-e), msg);
	pdma_sub_attr_init(&sa);
	sa.policy = PDMA_SUB_BACKPRESSURE;
	assert_int_equal(pdma_ingest_subscribe(ing, &sa, &sub), 0);
	assert_int_equal(pdma_ingest_start(ing), 0);
	pdma_gen_config_default(&j.g);
	j.g.streams = 2;
	j.g.packets = 4000;
	j.g.loss_pm = j.g.dup_pm = j.g.reorder_pm = 10;
	j.g.seed = 3;
	j.port = pdma_ingest_port(ing);
	assert_int_equal(pthread_create(&j.th, NULL, send_main, &j), 0);
	bool stopped = false;
	int quiet = 0;
	uint8_t *host = NULL;
	size_t cap = 0;
	for (;;) {
		e = pdma_sub_next(sub, &b, 100);
		if (e == -EPIPE)
			break;
		if (e == -ETIMEDOUT) {
			if (!stopped && ++quiet >= 10) {
				pthread_join(j.th, NULL);
				assert_int_equal(j.ret, 0);
				assert_int_equal(pdma_ingest_stop(ing), 0);
				stopped = true;
			}
			continue;
		}
		assert_int_equal(e, 0);
		quiet = 0;
		assert_int_equal(b->mem, PDMA_BLOCK_CUDA);
		assert_non_null(b->cuda_event);
		uint32_t s = b->stream_id - 0x1000;
		assert_true(s < 2);
		uint64_t p0 = b->first_sample / b->samples_per_packet;
		if (have[s])
			assert_int_equal(p0, next[s]);
		have[s] = true;
		next[s] = p0 + b->npackets;
		pkts[s] += b->npackets;
		size_t bytes = b->nsamples * 4;
		if (bytes > cap) {
			free(host);
			host = malloc(bytes);
			cap = bytes;
		}
		assert_int_equal(b->device, device);
		int ord = -1;
		assert_int_equal(C.ptr_attr(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
					    (uint64_t)(uintptr_t)b->data), 0);
		assert_int_equal(ord, device);
		assert_int_equal(C.ev_sync(b->cuda_event), 0);
		assert_int_equal(C.dtoh(host, (uint64_t)(uintptr_t)b->data, bytes), 0);
		uint32_t g;

		assert_int_equal(pdma_loopback_check_block(b, (const int16_t *)host, &g), 0);
		gaps[s] += g;
		if (!dlpack_done) {
			void *mt, *st;
			/* -1: the consumer asks for no synchronisation */
			assert_int_equal(pdma_block_dlpack(b, -1, &mt), 0);
			((DLManagedTensor *)mt)->deleter((DLManagedTensor *)mt);
			assert_int_equal(pdma_block_dlpack(b, 0, &mt), -EINVAL); /* 0: ambiguous */
			assert_int_equal(C.stream_create(&st, 1), 0);
			assert_int_equal(pdma_block_dlpack(b, (intptr_t)st, &mt), 0);
			DLManagedTensor *t = mt;
			assert_int_equal(t->dl_tensor.device.device_type, kDLCUDA);
			assert_int_equal(t->dl_tensor.device.device_id, device);
			assert_ptr_equal(t->dl_tensor.data, b->data);
			assert_int_equal(t->dl_tensor.shape[0], (int64_t)b->nsamples);
			assert_int_equal(C.stream_sync(st), 0);
			t->deleter(t);
			C.stream_destroy(st);
			dlpack_done = true;
		}
		pdma_block_release(b);
	}
	free(host);
	struct pdma_ingest_stats st;
	pdma_ingest_stats(ing, &st);
	printf("  stats: %llu datagrams, %llu placed, %u streams, %llu blocks, %llu window drops, "
	       "%llu late, %llu gap packets\n", (unsigned long long)st.datagrams,
	       (unsigned long long)st.packets_placed, st.streams, (unsigned long long)st.blocks_published,
	       (unsigned long long)st.window_drops, (unsigned long long)st.late,
	       (unsigned long long)st.gap_packets);
	assert_true(stopped);
	for (int s = 0; s < 2; s++) {
		assert_int_equal(pkts[s], 4000);
		assert_int_equal(gaps[s], j.lost[s]);
	}
	assert_int_equal(st.socket_drops + st.ring_overruns, 0);
	assert_int_equal(st.window_drops, 0);
	printf("  %s: %llu blocks, %llu gap packets, every sample equal\n",
	       path == PDMA_INGEST_PATH_HOST_STAGED ? "host-staged" : "zero-copy",
	       (unsigned long long)st.blocks_published, (unsigned long long)st.gap_packets);
	pdma_sub_close(sub);
	pdma_ingest_close(ing);
}

static void test_blocks_host_staged(void **state)
{
	(void)state;
	run_path(PDMA_INGEST_PATH_HOST_STAGED, 0);
}

static void test_blocks_zero_copy(void **state)
{
	(void)state;
	run_path(PDMA_INGEST_PATH_ZERO_COPY, 0);
}

/* ingest.h cuda_device on the GPU paths: a device that does not exist is
 * refused at open (it was ignored: every session ran on device 0), and with
 * a second GPU the blocks are on it. */
static void test_cuda_device(void **state)
{
	enum pdma_ingest_path_kind paths[] = { PDMA_INGEST_PATH_HOST_STAGED, PDMA_INGEST_PATH_ZERO_COPY };
	struct pdma_ingest_attr a;
	struct pdma_ingest *ing;
	char msg[256];
	int n = 0;

	(void)state;
	assert_int_equal(C.dev_count(&n), 0);
	for (int i = 0; i < 2; i++) {
		pdma_ingest_attr_init(&a);
		a.path = paths[i];
		a.cuda_device = n;
		assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -ENODEV);
		a.cuda_device = -1;
		assert_int_equal(pdma_ingest_open(&a, &ing, msg, sizeof(msg)), -ENODEV);
	}
	if (n < 2) {
		printf("one CUDA device: blocks on a second one not run here\n");
		return;
	}
	run_path(PDMA_INGEST_PATH_HOST_STAGED, n - 1);
	run_path(PDMA_INGEST_PATH_ZERO_COPY, n - 1);
}

int main(void)
{
	struct pdma_ingest_attr a;
	struct pdma_ingest *ing;
	char msg[256];
	int e;

	pdma_ingest_attr_init(&a);
	a.path = PDMA_INGEST_PATH_ZERO_COPY;
	e = pdma_ingest_open(&a, &ing, msg, sizeof(msg));
	if (e == -ENODEV || cuda_setup()) {
		printf("skipped: no CUDA device\n");
		return 77;
	}
	if (e) {
		printf("open: %s: %s\n", strerror(-e), msg);
		return 1;
	}
	pdma_ingest_close(ing);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks_host_staged),
		cmocka_unit_test(test_blocks_zero_copy),
		cmocka_unit_test(test_cuda_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
