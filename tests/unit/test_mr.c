// SPDX-License-Identifier: MIT
/* The fi_mr-style registration API against host memory and the sim device:
 * every call, every documented error with its exact errno. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "peerdma/mr.h"
#include "mem/sim.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)

static struct pdma_domain *dom_open(uint32_t mode, struct pdma_sim *sim)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d = NULL;

	pdma_domain_attr_init(&a);
	a.mr_mode = mode;
	a.sim = sim;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	return d;
}

static struct pdma_sim *sim_open(size_t mem, size_t bar)
{
	struct pdma_sim_attr a = { .mem_size = mem, .bar_size = bar };
	struct pdma_sim *s = NULL;

	assert_int_equal(pdma_sim_open(&a, &s), 0);
	return s;
}

static struct pdma_mr *reg_sim(struct pdma_domain *d, void *buf, size_t len, uint64_t access)
{
	struct iovec iov = { buf, len };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = access,
				  .iface = PDMA_HMEM_SIM };
	struct pdma_mr *m = NULL;

	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	return m;
}

/* Locked memory of this process in KiB, from /proc/self/status. */
static long vmlck_kib(void)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

static void test_domain_attrs(void **state)
{
	struct pdma_domain_attr a, q;
	struct pdma_domain *d;

	(void)state;
	pdma_domain_attr_init(&a);
	assert_int_equal(a.mr_mode, PDMA_MR_BASIC | PDMA_MR_LOCAL | PDMA_MR_HMEM);
	assert_int_equal(PDMA_MR_BASIC, PDMA_MR_VIRT_ADDR | PDMA_MR_ALLOCATED | PDMA_MR_PROV_KEY);
	assert_int_equal(pdma_domain_open(NULL, &d), -EINVAL);
	assert_int_equal(pdma_domain_open(&a, NULL), -EINVAL);
	a.mr_mode = 1u << 20;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	pdma_domain_attr_init(&a);
	a.mr_key_size = 9;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	pdma_domain_attr_init(&a);
	a.raw_key_size = 8;
	assert_int_equal(pdma_domain_open(&a, &d), -EINVAL);
	a.raw_key_size = 0;
	a.kernel_device = "/nonexistent/peerdma";
	assert_int_equal(pdma_domain_open(&a, &d), -ENODEV);
	a.kernel_device = NULL;
	a.mr_key_size = 0;
	a.mr_iov_limit = 0;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_domain_query(d, &q), 0);
	assert_int_equal(q.mr_key_size, 8);
	assert_int_equal(q.mr_iov_limit, 4);
	assert_int_equal(q.raw_key_size, 16);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(NULL), -EINVAL);
}

static void test_reg_args(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[8192];
	struct pdma_mr *m;
	struct iovec iov[5];
	struct pdma_mr_attr a = { 0 };
	uint8_t auth[4] = { 0 };
	void *hole;

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 0, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, NULL, 16, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, RW, 1, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, RW, 0, 0, 1, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, 0, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, 1u << 6, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf, 16, RW, 0, 0, 0, NULL, NULL), -EINVAL);
	assert_int_equal(pdma_mr_reg(NULL, buf, 16, RW, 0, 0, 0, &m, NULL), -EINVAL);
	/* A hole in the address space: ALLOCATED memory only. */
	hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(hole != MAP_FAILED);
	munmap(hole, 4096);
	assert_int_equal(pdma_mr_reg(d, hole, 16, RW, 0, 0, 0, &m, NULL), -EFAULT);
	/* iov count bounds: 1..mr_iov_limit (4). */
	for (int i = 0; i < 5; i++) {
		iov[i].iov_base = buf + 1024 * i;
		iov[i].iov_len = 100;
	}
	assert_int_equal(pdma_mr_regv(d, iov, 0, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_regv(d, iov, 5, RW, 0, 0, 0, &m, NULL), -EINVAL);
	assert_int_equal(pdma_mr_regv(d, NULL, 1, RW, 0, 0, 0, &m, NULL), -EINVAL);
	iov[1].iov_len = 0;
	assert_int_equal(pdma_mr_regv(d, iov, 2, RW, 0, 0, 0, &m, NULL), -EINVAL);
	iov[1].iov_len = 100;
	assert_int_equal(pdma_mr_regv(d, iov, 4, RW, 0, 0, 0, &m, (void *)0x1234), 0);
	assert_ptr_equal(pdma_mr_context(m), (void *)0x1234);
	assert_int_equal(pdma_mr_close(m), 0);
	/* regattr: auth keys are not supported, device memory needs HMEM. */
	a.mr_iov = iov;
	a.iov_count = 1;
	a.access = RW;
	a.auth_key = auth;
	a.auth_key_size = sizeof(auth);
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EINVAL);
	a.auth_key = NULL;
	a.auth_key_size = 0;
	a.iface = PDMA_HMEM_SIM;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EOPNOTSUPP);
	a.iface = (enum pdma_hmem_iface)7;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_close(NULL), -EINVAL);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_hmem_backends(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, NULL);
	static char buf[4096];
	struct iovec iov = { buf, 64 };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW };
	struct pdma_mr *m;
	void *lib;

	(void)state;
	a.iface = PDMA_HMEM_SIM; /* no sim attached to this domain */
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -ENODEV);
	a.iface = (enum pdma_hmem_iface)7;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EINVAL);
	a.iface = PDMA_HMEM_CUDA;
	a.device = -1;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -EINVAL);
	a.device = 0;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) /* no driver: a clear error, not a crash (tests/gpu covers the rest) */
		assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), -ENODEV);
	else
		dlclose(lib);
	a.iface = PDMA_HMEM_SYSTEM;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_requested_keys(void **state)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	static char buf[4096];
	struct pdma_mr *m1, *m2;

	(void)state;
	pdma_domain_attr_init(&a);
	a.mr_mode = PDMA_MR_VIRT_ADDR; /* no PROV_KEY: caller's keys */
	a.mr_key_size = 2;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 42, 0, &m1, NULL), 0);
	assert_int_equal(pdma_mr_key(m1), 42);
	assert_int_equal(pdma_mr_reg(d, buf + 64, 64, RW, 0, 42, 0, &m2, NULL), -ENOKEY);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0x10000, 0, &m2, NULL), -EKEYREJECTED);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0xffff, 0, &m2, NULL), 0);
	assert_int_equal(pdma_mr_key(m2), 0xffff);
	assert_int_equal(pdma_mr_close(m1), 0);
	/* A closed MR's key is free again. */
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 42, 0, &m1, NULL), 0);
	assert_int_equal(pdma_domain_close(d), -EBUSY);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_domain_close(d), 0);

	pdma_domain_attr_init(&a);
	a.mr_mode = 0;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, PDMA_KEY_NOTAVAIL, 0, &m1, NULL),
			 -EKEYREJECTED);
	assert_int_equal(pdma_domain_close(d), 0);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_provider_keys(void **state)
{
	enum { N = 500 };
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	static struct pdma_mr *m[N];
	uint64_t keys[N];
	int high = 0;

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 7, 0, &m[0], NULL), -EKEYREJECTED);
	for (int i = 0; i < N; i++) {
		assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m[i], NULL), 0);
		keys[i] = pdma_mr_key(m[i]);
		assert_true(keys[i] != PDMA_KEY_NOTAVAIL && keys[i] != 0);
		high += keys[i] >> 56 != 0;
	}
	qsort(keys, N, sizeof(keys[0]), cmp_u64);
	for (int i = 1; i < N; i++)
		assert_true(keys[i] != keys[i - 1]);
	/* 64-bit random keys: nearly all have a non-zero top byte
	 * (P(top byte 0) = 1/256 each); sequential keys would have none. */
	assert_true(high > N * 9 / 10);
	for (int i = 0; i < N; i++)
		assert_int_equal(pdma_mr_close(m[i]), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* Keys come from a pool of random bytes: a forked child must not draw the
 * bytes its parent draws next (it would hand out the parent's keys). */
static void test_provider_keys_fork(void **state)
{
	enum { N = 4 };
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_mr *m[N + 1];
	uint64_t mine[N], child[N];
	int fds[2], status;
	pid_t pid;

	(void)state;
	/* Fill the pool in the parent before the fork. */
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m[N], NULL), 0);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < N; i++) {
			struct pdma_mr *cm;

			if (pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &cm, NULL))
				_exit(2);
			child[i] = pdma_mr_key(cm);
		}
		_exit(write(fds[1], child, sizeof(child)) == sizeof(child) ? 0 : 3);
	}
	close(fds[1]);
	for (int i = 0; i < N; i++) {
		assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m[i], NULL), 0);
		mine[i] = pdma_mr_key(m[i]);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(read(fds[0], child, sizeof(child)), sizeof(child));
	close(fds[0]);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			assert_true(mine[i] != child[j]);
	for (int i = 0; i <= N; i++)
		assert_int_equal(pdma_mr_close(m[i]), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_raw_keys(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_RAW, NULL);
	struct pdma_domain *plain = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	uint8_t raw[32], bad[32];
	size_t ks = 4;
	uint64_t base = 1, key, key2, pk;
	struct pdma_mr *m, *pm;
	char out[8] = { 0 };

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 256, RW, 0, 0, 0, &m, NULL), 0);
	assert_true(pdma_mr_key(m) == PDMA_KEY_NOTAVAIL);
	assert_int_equal(pdma_mr_raw_attr(m, &base, raw, &ks, 0), -ERANGE);
	assert_int_equal(ks, 16);
	assert_int_equal(pdma_mr_raw_attr(m, &base, raw, &ks, 1), -EINVAL);
	assert_int_equal(pdma_mr_raw_attr(m, &base, raw, &ks, 0), 0);
	assert_int_equal(ks, 16);
	assert_int_equal(base, (uint64_t)(uintptr_t)buf);
	/* The peer side: map the raw key to a usable key. */
	assert_int_equal(pdma_mr_map_raw(d, base, raw, ks, &key, 0), 0);
	assert_int_equal(pdma_sim_dma_write(d, key, base + 10, "raw!", 4), 0);
	assert_memory_equal(buf + 10, "raw!", 4);
	assert_int_equal(pdma_mr_map_raw(d, base, raw, ks, &key2, 0), 0);
	assert_true(key2 != key);
	memcpy(bad, raw, ks);
	bad[9] ^= 1; /* tampered tag */
	assert_int_equal(pdma_mr_map_raw(d, base, bad, ks, &key2, 0), -EKEYREJECTED);
	memcpy(bad, raw, ks);
	bad[0] ^= 1; /* unknown key */
	assert_int_equal(pdma_mr_map_raw(d, base, bad, ks, &key2, 0), -ENOKEY);
	assert_int_equal(pdma_mr_map_raw(d, base + 1, raw, ks, &key2, 0), -EINVAL);
	assert_int_equal(pdma_mr_map_raw(d, base, raw, ks - 1, &key2, 0), -EINVAL);
	assert_int_equal(pdma_mr_unmap_key(d, key), 0);
	assert_int_equal(pdma_sim_dma_read(d, key, base, out, 4), -ENOKEY);
	assert_int_equal(pdma_mr_unmap_key(d, key), -ENOKEY);
	/* Non-raw domains have no raw calls. */
	assert_int_equal(pdma_mr_reg(plain, buf, 64, RW, 0, 0, 0, &pm, NULL), 0);
	pk = pdma_mr_key(pm);
	assert_true(pk != PDMA_KEY_NOTAVAIL);
	ks = sizeof(raw);
	assert_int_equal(pdma_mr_raw_attr(pm, &base, raw, &ks, 0), -ENOSYS);
	assert_int_equal(pdma_mr_map_raw(plain, base, raw, 16, &key2, 0), -ENOSYS);
	assert_int_equal(pdma_mr_unmap_key(plain, pk), -ENOSYS);
	assert_int_equal(pdma_mr_close(pm), 0);
	/* Mapped keys die with their MR; the domain stays closable. */
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_sim_dma_read(d, key2, base, out, 4), -ENOKEY);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(plain), 0);
}

static void test_access_and_bounds(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_PROV_KEY | PDMA_MR_ALLOCATED, NULL);
	struct pdma_domain *v = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_mr *ro, *wo, *vm;
	char tmp[16];

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 100, PDMA_REMOTE_READ, 0, 0, 0, &ro, NULL), 0);
	assert_int_equal(pdma_mr_reg(d, buf + 200, 100, PDMA_REMOTE_WRITE, 0, 0, 0, &wo, NULL), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(ro), 0, "x", 1), -EACCES);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(wo), 0, tmp, 1), -EACCES);
	/* 0-based offsets without VIRT_ADDR. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), 98, "ab", 2), 0);
	assert_memory_equal(buf + 298, "ab", 2);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), 99, "ab", 2), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), 0, "", 0), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(wo), UINT64_MAX, "a", 1), -EINVAL);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(ro), 98, tmp, 2), 0);
	assert_memory_equal(tmp, buf + 98, 2);
	/* Virtual addresses under VIRT_ADDR. */
	assert_int_equal(pdma_mr_reg(v, buf + 1000, 100, PDMA_REMOTE_WRITE, 0, 0, 0, &vm, NULL), 0);
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(vm), (uintptr_t)buf + 1050, "va", 2), 0);
	assert_memory_equal(buf + 1050, "va", 2);
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(vm), 50, "va", 2), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(vm), (uintptr_t)buf + 999, "v", 1),
			 -EINVAL);
	/* Keys are per domain. */
	assert_int_equal(pdma_sim_dma_write(v, pdma_mr_key(wo), 0, "x", 1), -ENOKEY);
	/* Closing an MR makes its key invalid for the device. */
	uint64_t k = pdma_mr_key(wo);

	assert_int_equal(pdma_mr_close(wo), 0);
	assert_int_equal(pdma_sim_dma_write(d, k, 0, "x", 1), -ENOKEY);
	assert_int_equal(pdma_mr_close(ro), 0);
	assert_int_equal(pdma_mr_close(vm), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(v), 0);
}

static void test_iov_dma(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char a[64], b[32], c[64];
	struct iovec iov[3] = { { a, 16 }, { b, 8 }, { c, 16 } };
	char in[40], out[40];
	struct pdma_mr *m;
	uint64_t base = (uintptr_t)a;

	(void)state;
	for (int i = 0; i < 40; i++)
		in[i] = (char)('A' + i);
	assert_int_equal(pdma_mr_regv(d, iov, 3, RW, 0, 0, 0, &m, NULL), 0);
	/* Offsets 10..34 of the concatenation span all three buffers. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), base + 10, in, 25), 0);
	assert_memory_equal(a + 10, in, 6);
	assert_memory_equal(b, in + 6, 8);
	assert_memory_equal(c, in + 14, 11);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), base + 10, out, 25), 0);
	assert_memory_equal(out, in, 25);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), base + 30, in, 11), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), base + 30, in, 10), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_host_pinning(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	const size_t sz = 16 * 4096;
	char *buf = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct pdma_mr *m1, *m2;
	long base;

	(void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* ASan and TSan replace mlock with a no-op: VmLck cannot move. */
	munmap(buf, sz);
	pdma_domain_close(d);
	skip();
#endif
	assert_true(buf != MAP_FAILED);
	base = vmlck_kib();
	/* 100 bytes straddling a page boundary pin two whole pages. */
	assert_int_equal(pdma_mr_reg(d, buf + 4096 - 50, 100, RW, 0, 0, 0, &m1, NULL), 0);
	assert_int_equal(vmlck_kib() - base, 8);
	/* A second MR sharing the second page keeps it locked after the first
	 * one is closed (mlock is not reference counted by the kernel). */
	assert_int_equal(pdma_mr_reg(d, buf + 4096 + 100, 3 * 4096, RW, 0, 0, 0, &m2, NULL), 0);
	assert_int_equal(vmlck_kib() - base, 20); /* pages 0-1 and 1-4 */
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(vmlck_kib() - base, 16); /* page 1 still locked */
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(vmlck_kib() - base, 0);
	munmap(buf, sz);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* A cached host registration is found without querying the memory; once the
 * memory is unmapped, the cache must not hand out the old pages: the next
 * registration fails like an uncached one, and new memory at the same address
 * is pinned afresh. */
static void test_cached_host_unmapped(void **state)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	struct pdma_cache_stats st;
	const size_t sz = 4 * 4096;
	struct pdma_mr *m;
	uint64_t misses;
	char *buf, *again;

	(void)state;
	pdma_domain_attr_init(&a);
	a.use_cache = 1;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	buf = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(buf != MAP_FAILED);
	memset(buf, 1, sz);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m, NULL), 0);
		assert_int_equal(pdma_mr_close(m), 0);
	}
	pdma_cache_get_stats(d->cache, &st);
	if (st.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST)
		assert_int_equal(st.misses, 1); /* cached: two hits */
	misses = st.misses;
	munmap(buf, sz);
	assert_int_equal(pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m, NULL), -EFAULT);
	again = mmap(buf, sz, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (again == buf) {
		memset(again, 2, sz);
		assert_int_equal(pdma_mr_reg(d, buf + 100, 2 * 4096, RW, 0, 0, 0, &m, NULL), 0);
		pdma_cache_get_stats(d->cache, &st);
		if (st.mode[PDMA_HMEM_SYSTEM] == PDMA_CACHE_MODE_TRUST)
			assert_true(st.misses > misses); /* pinned afresh, not the old region */
		assert_int_equal(pdma_mr_close(m), 0);
		munmap(again, sz);
	}
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_sim_memory(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 0);
	struct pdma_sim_ptr_info i1, i2;
	void *p, *q, *r;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, 0, &p), -EINVAL);
	assert_int_equal(pdma_sim_alloc(s, 2 << 20, &p), -ENOMEM);
	assert_int_equal(pdma_sim_alloc(s, 100, &p), 0);
	assert_int_equal((uintptr_t)p % PDMA_SIM_PAGE_SIZE, 0);
	assert_int_equal(pdma_sim_ptr_info(s, (char *)p + 99, &i1), 0);
	assert_int_equal(i1.base, (uintptr_t)p);
	assert_int_equal(i1.size, PDMA_SIM_PAGE_SIZE);
	assert_int_equal(pdma_sim_alloc(s, 3 * PDMA_SIM_PAGE_SIZE, &q), 0);
	assert_int_equal((uintptr_t)q, (uintptr_t)p + PDMA_SIM_PAGE_SIZE);
	/* Free and reallocate: same address, new buffer ID. */
	assert_int_equal(pdma_sim_free(s, p), 0);
	assert_int_equal(pdma_sim_ptr_info(s, p, &i2), -ENOENT);
	assert_int_equal(pdma_sim_free(s, p), -EINVAL);
	assert_int_equal(pdma_sim_free(s, (char *)q + 1), -EINVAL);
	assert_int_equal(pdma_sim_alloc(s, 100, &r), 0);
	assert_ptr_equal(r, p);
	assert_int_equal(pdma_sim_ptr_info(s, r, &i2), 0);
	assert_true(i2.buffer_id != i1.buffer_id);
	/* Fill the rest: 16 pages of 1 MiB, 4 used. */
	assert_int_equal(pdma_sim_alloc(s, 12 * PDMA_SIM_PAGE_SIZE, &p), 0);
	assert_int_equal(pdma_sim_alloc(s, 1, &p), -ENOMEM);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_sim_bar_and_free_callback(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 2 * PDMA_SIM_PAGE_SIZE);
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, s);
	struct pdma_sim_stats st;
	struct pdma_mr *m1, *m2, *m3;
	struct iovec iov;
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = RW,
				  .iface = PDMA_HMEM_SIM };
	char *g1, *g2, *g3, out[8];
	uint64_t k1;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g1), 0);
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g2), 0);
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g3), 0);
	/* 100 bytes inside a 64 KiB page pin the whole page. */
	m1 = reg_sim(d, g1 + 500, 100, RW);
	pdma_sim_get_stats(s, &st);
	assert_int_equal(st.bar_used, PDMA_SIM_PAGE_SIZE);
	m2 = reg_sim(d, g2, PDMA_SIM_PAGE_SIZE, RW);
	/* The BAR holds two pages: a third pin fails. */
	iov.iov_base = g3;
	iov.iov_len = 10;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m3), -ENOMEM);
	/* Device id 1 does not exist; memory outside any allocation is refused. */
	a.device = 1;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m3), -ENODEV);
	a.device = 0;
	iov.iov_base = g3 + PDMA_SIM_PAGE_SIZE - 4;
	assert_int_equal(pdma_mr_regattr(d, &a, 0, &m3), -EFAULT);
	/* A DMA write through the key lands the bytes in GPU memory. */
	k1 = pdma_mr_key(m1);
	assert_int_equal(pdma_sim_dma_write(d, k1, (uintptr_t)g1 + 500, "gpu!", 4), 0);
	assert_memory_equal(g1 + 500, "gpu!", 4);
	/* Free while registered: the free callback revokes the MR. */
	assert_int_equal(pdma_sim_close(s), -EBUSY);
	assert_int_equal(pdma_sim_free(s, g1), 0);
	pdma_sim_get_stats(s, &st);
	assert_int_equal(st.free_callbacks, 1);
	assert_int_equal(st.bar_used, PDMA_SIM_PAGE_SIZE);
	assert_int_equal(st.live_pins, 1);
	assert_int_equal(pdma_sim_dma_write(d, k1, (uintptr_t)g1 + 500, "bad", 3), -EFAULT);
	assert_int_equal(pdma_sim_dma_read(d, k1, (uintptr_t)g1 + 500, out, 3), -EFAULT);
	/* Reallocated at the same address: still no stale write gets through. */
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g3), 0);
	assert_ptr_equal(g3, g1);
	assert_int_equal(pdma_sim_dma_write(d, k1, (uintptr_t)g1 + 500, "bad", 3), -EFAULT);
	assert_memory_equal(g3 + 500, "\0\0\0\0", 4);
	/* The freed BAR space is usable again. */
	m3 = reg_sim(d, g3, 10, RW);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_mr_close(m3), 0);
	pdma_sim_get_stats(s, &st);
	assert_int_equal(st.bar_used, 0);
	assert_int_equal(st.live_pins, 0);
	assert_int_equal(st.pins, 3);
	assert_int_equal(st.unpins, 3);
	assert_int_equal(st.dma_bytes, 4);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_refresh(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 0);
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM | PDMA_MR_MMU_NOTIFY, s);
	struct pdma_domain *n = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, s);
	struct pdma_mr *m, *nm;
	char *g, *g2;
	struct iovec iov;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g), 0);
	m = reg_sim(d, g, 4096, RW);
	nm = reg_sim(n, g, 4096, RW);
	iov.iov_base = g;
	iov.iov_len = 4096;
	assert_int_equal(pdma_mr_refresh(nm, &iov, 1, 0), -EOPNOTSUPP);
	assert_int_equal(pdma_sim_free(s, g), 0);
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g2), 0);
	assert_ptr_equal(g2, g);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)g, "x", 1), -EFAULT);
	iov.iov_len = 4097;
	assert_int_equal(pdma_mr_refresh(m, &iov, 1, 0), -EINVAL);
	iov.iov_len = 4096;
	assert_int_equal(pdma_mr_refresh(m, &iov, 1, 1), -EINVAL);
	assert_int_equal(pdma_mr_refresh(m, &iov, 1, 0), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)g, "x", 1), 0);
	assert_int_equal(g2[0], 'x');
	/* The MR of the domain without MMU_NOTIFY stays dead. */
	assert_int_equal(pdma_sim_dma_write(n, pdma_mr_key(nm), (uintptr_t)g, "y", 1), -EFAULT);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_mr_close(nm), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_domain_close(n), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_rma_event_counter(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_RMA_EVENT, NULL);
	struct pdma_domain *o = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_cntr *c, *c2, *oc;
	struct pdma_mr *m, *om;
	char out[4];

	(void)state;
	assert_int_equal(pdma_cntr_open(d, &c), 0);
	assert_int_equal(pdma_cntr_open(d, &c2), 0);
	assert_int_equal(pdma_cntr_open(o, &oc), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m, NULL), 0);
	/* Disabled until enabled. */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), -EAGAIN);
	assert_int_equal(pdma_mr_bind_cntr(m, c, 0), -EINVAL);
	assert_int_equal(pdma_mr_bind_cntr(m, oc, PDMA_REMOTE_WRITE_EVENTS), -EINVAL);
	assert_int_equal(pdma_mr_bind_cntr(m, c, PDMA_REMOTE_WRITE_EVENTS), 0);
	assert_int_equal(pdma_mr_bind_cntr(m, c2, PDMA_REMOTE_WRITE_EVENTS), -EBUSY);
	assert_int_equal(pdma_mr_enable(m), 0);
	assert_int_equal(pdma_mr_bind_cntr(m, c2, PDMA_REMOTE_WRITE_EVENTS), -EINVAL);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf + 1, "b", 1), 0);
	assert_int_equal(pdma_sim_dma_read(d, pdma_mr_key(m), (uintptr_t)buf, out, 2), 0);
	assert_int_equal(pdma_cntr_read(c), 2);
	assert_int_equal(pdma_cntr_read(c2), 0);
	/* The MR cannot be closed while bound to an open counter. */
	assert_int_equal(pdma_mr_close(m), -EBUSY);
	assert_int_equal(pdma_domain_close(d), -EBUSY);
	assert_int_equal(pdma_cntr_close(c), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_cntr_close(c2), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	/* Without RMA_EVENT: no counter binding, MRs start enabled. */
	assert_int_equal(pdma_mr_reg(o, buf, 64, RW, 0, 0, 0, &om, NULL), 0);
	assert_int_equal(pdma_mr_bind_cntr(om, oc, PDMA_REMOTE_WRITE_EVENTS), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_enable(om), 0);
	assert_int_equal(pdma_sim_dma_write(o, pdma_mr_key(om), (uintptr_t)buf, "a", 1), 0);
	assert_int_equal(pdma_mr_close(om), 0);
	assert_int_equal(pdma_cntr_close(oc), 0);
	assert_int_equal(pdma_domain_close(o), 0);
}

static void test_endpoint_binding(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_ENDPOINT, NULL);
	struct pdma_domain *o = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_ep *ep, *oep;
	struct pdma_mr *m, *om;

	(void)state;
	assert_int_equal(pdma_ep_open(d, &ep), 0);
	assert_int_equal(pdma_ep_open(o, &oep), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_enable(m), -EINVAL); /* must be bound first */
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), -EAGAIN);
	assert_int_equal(pdma_mr_bind_ep(m, oep, 0), -EINVAL);
	assert_int_equal(pdma_mr_bind_ep(m, ep, 1), -EINVAL);
	assert_int_equal(pdma_mr_bind_ep(m, ep, 0), 0);
	assert_int_equal(pdma_mr_bind_ep(m, ep, 0), -EBUSY);
	assert_int_equal(pdma_mr_enable(m), 0);
	assert_int_equal(pdma_sim_dma_write(d, pdma_mr_key(m), (uintptr_t)buf, "a", 1), 0);
	assert_int_equal(pdma_mr_close(m), -EBUSY);
	assert_int_equal(pdma_ep_close(ep), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	assert_int_equal(pdma_mr_reg(o, buf, 64, RW, 0, 0, 0, &om, NULL), 0);
	assert_int_equal(pdma_mr_bind_ep(om, oep, 0), -EOPNOTSUPP);
	assert_int_equal(pdma_mr_close(om), 0);
	assert_int_equal(pdma_ep_close(oep), 0);
	assert_int_equal(pdma_domain_close(o), 0);
}

static void test_eq_registration(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	struct pdma_eq *eq, *eq2;
	struct pdma_eq_entry e;
	struct pdma_mr *m1, *m2, *m3;

	(void)state;
	assert_int_equal(pdma_eq_open(d, 0, &eq), -EINVAL);
	assert_int_equal(pdma_eq_open(d, 2, &eq), 0);
	assert_int_equal(pdma_eq_open(d, 2, &eq2), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, 0), -EINVAL);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_REG_MR), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq2, PDMA_REG_MR), -EBUSY);
	assert_int_equal(pdma_eq_close(eq2), 0);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m1, (void *)0x11), 0);
	/* A failed registration posts nothing. */
	assert_int_equal(pdma_mr_reg(d, buf, 0, RW, 0, 0, 0, &m3, (void *)0x33), -EINVAL);
	assert_int_equal(pdma_mr_reg(d, buf + 64, 64, RW, 0, 0, 0, &m2, (void *)0x22), 0);
	/* The queue holds two: a third registration is refused, not lost. */
	assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m3, (void *)0x33), -EAGAIN);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_COMPLETE);
	assert_ptr_equal(e.mr, m1);
	assert_ptr_equal(e.context, (void *)0x11);
	assert_int_equal(pdma_eq_read(eq, &e, 10), 0);
	assert_ptr_equal(e.mr, m2);
	assert_ptr_equal(e.context, (void *)0x22);
	assert_int_equal(pdma_eq_read(eq, &e, 20), -EAGAIN);
	assert_int_equal(pdma_eq_close(eq), -EBUSY);
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_domain_close(d), -EBUSY); /* EQ still bound */
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_local_desc_rules(void **state)
{
	struct pdma_sim *s = sim_open(1 << 20, 0);
	struct pdma_domain *loc = dom_open(PDMA_MR_BASIC | PDMA_MR_LOCAL | PDMA_MR_HMEM, s);
	struct pdma_domain *hid = dom_open(PDMA_MR_BASIC | PDMA_MR_HMEM, s);
	static char src[4096], ro[64];
	struct pdma_mr *ms, *mr_ro, *g_mr, *hs, *hg;
	char *g, back[8];
	void *stale;

	(void)state;
	assert_int_equal(pdma_sim_alloc(s, PDMA_SIM_PAGE_SIZE, (void **)&g), 0);
	memcpy(src, "payload!", 8);
	assert_int_equal(pdma_mr_reg(loc, src, 64, PDMA_WRITE | PDMA_READ, 0, 0, 0, &ms, NULL), 0);
	assert_int_equal(pdma_mr_reg(loc, ro, 64, PDMA_READ, 0, 0, 0, &mr_ro, NULL), 0);
	g_mr = reg_sim(loc, g, 4096, RW);
	/* LOCAL: the local buffer needs its desc. */
	assert_int_equal(pdma_sim_write(loc, src, 8, NULL, (uintptr_t)g, pdma_mr_key(g_mr)),
			 -EINVAL);
	assert_int_equal(pdma_sim_write(loc, src, 8, pdma_mr_desc(ms), (uintptr_t)g,
					pdma_mr_key(g_mr)), 0);
	assert_memory_equal(g, "payload!", 8);
	/* A desc without WRITE access cannot source a write. */
	assert_int_equal(pdma_sim_write(loc, ro, 8, pdma_mr_desc(mr_ro), (uintptr_t)g,
					pdma_mr_key(g_mr)), -EACCES);
	/* A desc that does not cover the buffer. */
	assert_int_equal(pdma_sim_write(loc, src + 60, 8, pdma_mr_desc(ms), (uintptr_t)g,
					pdma_mr_key(g_mr)), -EINVAL);
	/* Read GPU memory back into a registered host buffer. */
	assert_int_equal(pdma_sim_read(loc, ro, 8, pdma_mr_desc(mr_ro), (uintptr_t)g,
				       pdma_mr_key(g_mr)), 0);
	assert_memory_equal(ro, "payload!", 8);
	/* A closed MR's desc is stale. */
	stale = pdma_mr_desc(ms);
	assert_int_equal(pdma_mr_close(ms), 0);
	assert_int_equal(pdma_sim_write(loc, src, 8, stale, (uintptr_t)g, pdma_mr_key(g_mr)),
			 -EINVAL);

	/* Without LOCAL, host buffers need no desc (registered on the fly)... */
	hg = reg_sim(hid, g, 4096, RW);
	memcpy(src, "hidden!!", 8);
	assert_int_equal(pdma_sim_write(hid, src, 8, NULL, (uintptr_t)g + 8, pdma_mr_key(hg)), 0);
	assert_memory_equal(g + 8, "hidden!!", 8);
	assert_int_equal(pdma_sim_read(hid, back, 8, NULL, (uintptr_t)g + 8, pdma_mr_key(hg)), 0);
	assert_memory_equal(back, "hidden!!", 8);
	/* ...but device memory under HMEM must be registered and described. */
	assert_int_equal(pdma_sim_write(hid, g + 100, 8, NULL, (uintptr_t)g, pdma_mr_key(hg)),
			 -EINVAL);
	hs = reg_sim(hid, g + 100, 8, PDMA_WRITE);
	assert_int_equal(pdma_sim_write(hid, g + 100, 8, pdma_mr_desc(hs), (uintptr_t)g + 200,
					pdma_mr_key(hg)), 0);
	/* A desc of another domain is rejected. */
	assert_int_equal(pdma_sim_write(loc, g + 100, 8, pdma_mr_desc(hs), (uintptr_t)g,
					pdma_mr_key(g_mr)), -EINVAL);
	assert_int_equal(pdma_mr_close(hs), 0);
	assert_int_equal(pdma_mr_close(hg), 0);
	assert_int_equal(pdma_mr_close(mr_ro), 0);
	assert_int_equal(pdma_mr_close(g_mr), 0);
	assert_int_equal(pdma_domain_close(loc), 0);
	assert_int_equal(pdma_domain_close(hid), 0);
	assert_int_equal(pdma_sim_close(s), 0);
}

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(pdma_strerror(-ERANGE), "Buffer too small");
	assert_string_equal(pdma_strerror(-ENOKEY), "Required key not available");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_domain_attrs),
		cmocka_unit_test(test_reg_args),
		cmocka_unit_test(test_hmem_backends),
		cmocka_unit_test(test_requested_keys),
		cmocka_unit_test(test_provider_keys),
		cmocka_unit_test(test_provider_keys_fork),
		cmocka_unit_test(test_raw_keys),
		cmocka_unit_test(test_access_and_bounds),
		cmocka_unit_test(test_iov_dma),
		cmocka_unit_test(test_host_pinning),
		cmocka_unit_test(test_cached_host_unmapped),
		cmocka_unit_test(test_sim_memory),
		cmocka_unit_test(test_sim_bar_and_free_callback),
		cmocka_unit_test(test_refresh),
		cmocka_unit_test(test_rma_event_counter),
		cmocka_unit_test(test_endpoint_binding),
		cmocka_unit_test(test_eq_registration),
		cmocka_unit_test(test_local_desc_rules),
		cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests_name("mr", tests, NULL, NULL);
}
