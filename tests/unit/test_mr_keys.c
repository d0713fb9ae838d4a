// SPDX-License-Identifier: MIT
/*
 * The fi_mr-style registration API, keys: requested keys, provider keys
 * (unique, random, across fork), raw keys (attr, map, unmap, tampering).
 */
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
#include "support/distinct.h"
#include "support/mr_setup.h"

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

/* N keys span three blocks of a thread's keystream (505 keys each, key.c):
 * unique across the re-keying at each refill too. */
static void test_provider_keys(void **state)
{
	enum { N = 1500 };
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
	assert_all_distinct(keys, N);
	/* 64-bit random keys: nearly all have a non-zero top byte
	 * (P(top byte 0) = 1/256 each); sequential keys would have none. */
	assert_true(high > N * 9 / 10);
	for (int i = 0; i < N; i++)
		assert_int_equal(pdma_mr_close(m[i]), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* One-byte provider keys: 255 usable values (0 is no key), so
 * with 120 MRs open nearly half the draws hit a live key and are drawn again
 * (the key table's insert refuses them). Every MR still gets a key of its
 * own, and a closed MR's key is free for the next. */
static void test_provider_keys_tiny(void **state)
{
	enum { N = 120 };
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	static char buf[4096];
	struct pdma_mr *m[N];
	bool seen[256] = { false };

	(void)state;
	pdma_domain_attr_init(&a);
	a.mr_mode = PDMA_MR_PROV_KEY;
	a.mr_key_size = 1;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			uint64_t k;

			assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m[i], NULL), 0);
			k = pdma_mr_key(m[i]);
			assert_true(k >= 1 && k <= 0xff);
			assert_false(seen[k]);
			seen[k] = true;
			assert_ptr_equal(pdma_key_lookup(d, k), m[i]);
		}
		for (int i = 0; i < N; i++) {
			seen[pdma_mr_key(m[i])] = false;
			assert_int_equal(pdma_mr_close(m[i]), 0);
		}
	}
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

/* Mapped keys fit mr_key_size as the MR's own keys do, are distinct from
 * every live key, and run out with -ENOSPC, not a hang, in a full 1-byte
 * key space (1..255: 0 is never drawn). */
static void test_raw_keys_tiny(void **state)
{
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	static char buf[4096];
	uint8_t raw[16];
	bool seen[256] = { false };
	uint64_t base = 0, key, own, freed;
	size_t ks = sizeof(raw);
	struct pdma_mr *m;
	int mapped = 0, ret = 0;

	(void)state;
	pdma_domain_attr_init(&a);
	a.mr_mode = PDMA_MR_RAW | PDMA_MR_PROV_KEY;
	a.mr_key_size = 1;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 256, RW, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_mr_raw_attr(m, &base, raw, &ks, 0), 0);
	own = raw[0]; /* the MR's own key: little endian, 1 byte here */
	assert_true(own >= 1 && own <= 255);
	assert_int_equal(raw[1], 0);
	seen[own] = true;
	for (int i = 0; i < 1000; i++) {
		ret = pdma_mr_map_raw(d, base, raw, ks, &key, 0);
		if (ret)
			break;
		assert_true(key >= 1 && key <= 255);
		assert_false(seen[key]);
		seen[key] = true;
		mapped++;
	}
	assert_int_equal(ret, -ENOSPC);
	assert_true(mapped > 200 && mapped <= 254);
	/* Fill the rest (a draw finds a free value with some luck), then the
	 * space is full and every call says so. */
	for (int i = 0; i < 100000 && mapped < 254; i++) {
		if (pdma_mr_map_raw(d, base, raw, ks, &key, 0))
			continue;
		assert_false(seen[key]);
		seen[key] = true;
		mapped++;
	}
	assert_int_equal(mapped, 254);
	assert_int_equal(pdma_mr_map_raw(d, base, raw, ks, &key, 0), -ENOSPC);
	/* Unmapping one makes room for exactly that one. */
	freed = own == 77 ? 78 : 77;
	assert_int_equal(pdma_mr_unmap_key(d, freed), 0);
	ret = -ENOSPC;
	for (int i = 0; i < 100000 && ret == -ENOSPC; i++)
		ret = pdma_mr_map_raw(d, base, raw, ks, &key, 0);
	assert_int_equal(ret, 0);
	assert_int_equal(key, freed);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* MR objects are reused from the domain's pool (lib/mr/domain.h): a closed
 * MR's key, mapped keys and descriptor must stay dead when its object comes
 * back as a new MR, which has keys and a descriptor of its own. */
static void test_dead_key_after_reuse(void **state)
{
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC | PDMA_MR_RAW, NULL);
	static char buf[4096], src[4096];
	uint64_t base, alias[3], key2, k;
	uint8_t raw[16];
	size_t ks = sizeof(raw);
	struct pdma_mr *m1, *m2, *old;
	void *desc1;
	char out[4];

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 256, RW, 0, 0, 0, &m1, NULL), 0);
	desc1 = pdma_mr_desc(m1);
	assert_int_equal(pdma_mr_raw_attr(m1, &base, raw, &ks, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pdma_mr_map_raw(d, base, raw, ks, &alias[i], 0), 0);
	/* Unmapping the middle alias keeps the others (the MR's alias list). */
	assert_int_equal(pdma_mr_unmap_key(d, alias[1]), 0);
	assert_int_equal(pdma_sim_dma_read(d, alias[1], base, out, 4), -ENOKEY);
	assert_int_equal(pdma_sim_dma_read(d, alias[0], base, out, 4), 0);
	assert_int_equal(pdma_sim_dma_read(d, alias[2], base, out, 4), 0);
	old = m1;
	assert_int_equal(pdma_mr_close(m1), 0);

	/* The pool hands the object straight back: the case under test. */
	assert_int_equal(pdma_mr_reg(d, buf, 256, RW, 0, 0, 0, &m2, NULL), 0);
	assert_ptr_equal(m2, old);
	assert_true(pdma_mr_desc(m2) != desc1);
	ks = sizeof(raw);
	assert_int_equal(pdma_mr_raw_attr(m2, &base, raw, &ks, 0), 0);
	assert_int_equal(pdma_mr_map_raw(d, base, raw, ks, &key2, 0), 0);
	for (int i = 0; i < 3; i++) {
		assert_true(key2 != alias[i]);
		assert_int_equal(pdma_sim_dma_read(d, alias[i], base, out, 4), -ENOKEY);
		assert_int_equal(pdma_mr_unmap_key(d, alias[i]), -ENOKEY);
	}
	assert_int_equal(pdma_sim_dma_read(d, key2, base, out, 4), 0);
	/* The old descriptor names nothing, the new one the new MR. */
	assert_int_equal(pdma_sim_write(d, src, 16, desc1, base, key2), -EINVAL);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_domain_close(d), 0);

	/* Requested keys: the old key is refused, the reused object answers
	 * only to the new one. */
	d = dom_open(PDMA_MR_VIRT_ADDR, NULL);
	assert_int_equal(pdma_mr_reg(d, buf, 256, RW, 0, 42, 0, &m1, NULL), 0);
	old = m1;
	assert_int_equal(pdma_mr_close(m1), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 256, RW, 0, 43, 0, &m2, NULL), 0);
	assert_ptr_equal(m2, old);
	k = (uint64_t)(uintptr_t)buf;
	assert_int_equal(pdma_sim_dma_read(d, 42, k, out, 4), -ENOKEY);
	assert_int_equal(pdma_sim_dma_read(d, 43, k, out, 4), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_domain_close(d), 0);

	/* MRs of more segments than a pool object holds: objects of their own,
	 * freed at close (valgrind: no leak, no stale read); keys die alike. */
	{
		struct pdma_domain_attr a;
		struct iovec iov[8];

		pdma_domain_attr_init(&a);
		a.mr_iov_limit = 8;
		assert_int_equal(pdma_domain_open(&a, &d), 0);
		for (int i = 0; i < 8; i++) {
			iov[i].iov_base = buf + 512 * i;
			iov[i].iov_len = 512;
		}
		for (int round = 0; round < 2; round++) {
			assert_int_equal(pdma_mr_regv(d, iov, 8, RW, 0, 0, 0, &m1, NULL), 0);
			assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m2, NULL), 0);
			k = pdma_mr_key(m1);
			/* The last segment: the object has room for all eight. */
			assert_int_equal(pdma_sim_dma_read(d, k, (uint64_t)(uintptr_t)buf + 3800,
							   out, 4), 0);
			assert_int_equal(pdma_mr_close(m1), 0);
			assert_int_equal(pdma_sim_dma_read(d, k, (uint64_t)(uintptr_t)buf, out, 4),
					 -ENOKEY);
			assert_int_equal(pdma_mr_close(m2), 0);
		}
		assert_int_equal(pdma_domain_close(d), 0);
	}
}

/* Keys of consecutive registrations are unrelated: no counter, no stride. A
 * CSPRNG's consecutive 64-bit keys differ in 32 bits on average (binomial,
 * s.d. 4 per pair: the mean of N - 1 pairs lies in 32 +- 0.6 with
 * overwhelming probability); a counter or a fixed stride flips a few low
 * bits, and repeats its difference. */
/*
 * A descriptor is made at the first pdma_mr_desc, not at registration
 * (lib/mr/domain.h), into room the registration reserved. 300 MRs open at
 * once, none asked yet (the table's room grows past its first 64 slots
 * meanwhile), then asked from the last: each gets one, the same at every
 * call, naming its MR alone. A closed MR's descriptor names nothing, asked
 * for or not, and a later MR's is new.
 */
static void test_desc_on_demand(void **state)
{
	enum { N = 300 };
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[N][64];
	static struct pdma_mr *m[N];
	static void *desc[N];
	static uint64_t ids[N];
	struct pdma_mr *late;

	(void)state;
	for (int i = 0; i < N; i++)
		assert_int_equal(pdma_mr_reg(d, buf[i], sizeof(buf[i]), RW, 0, 0, 0, &m[i], NULL),
				 0);
	assert_int_equal(d->descs.n, 0);
	for (int i = N - 1; i >= 0; i--) {
		desc[i] = pdma_mr_desc(m[i]);
		assert_non_null(desc[i]);
		assert_ptr_equal(pdma_mr_desc(m[i]), desc[i]);
		assert_ptr_equal(pdma_desc_mr(d, desc[i]), m[i]);
	}
	assert_int_equal(d->descs.n, N);
	for (int i = 0; i < N; i++)
		ids[i] = (uintptr_t)desc[i];
	assert_all_distinct(ids, N);
	for (int i = 0; i < N; i += 2)
		assert_int_equal(pdma_mr_close(m[i]), 0);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(pdma_desc_mr(d, desc[i]), i % 2 ? m[i] : NULL);
	assert_int_equal(d->descs.n, N / 2);
	/* A new MR, never asked for its descriptor, closes without one. */
	assert_int_equal(pdma_mr_reg(d, buf[0], sizeof(buf[0]), RW, 0, 0, 0, &late, NULL), 0);
	assert_int_equal(pdma_mr_close(late), 0);
	assert_int_equal(d->descs.n, N / 2);
	assert_int_equal(pdma_mr_reg(d, buf[0], sizeof(buf[0]), RW, 0, 0, 0, &late, NULL), 0);
	for (int i = 0; i < N; i++)
		assert_ptr_not_equal(pdma_mr_desc(late), desc[i]);
	assert_ptr_equal(pdma_desc_mr(d, pdma_mr_desc(late)), late);
	assert_int_equal(pdma_mr_close(late), 0);
	for (int i = 1; i < N; i += 2)
		assert_int_equal(pdma_mr_close(m[i]), 0);
	assert_int_equal(d->descs.n, 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_provider_keys_unrelated(void **state)
{
	enum { N = 400 };
	struct pdma_domain *d = dom_open(PDMA_MR_BASIC, NULL);
	static char buf[4096];
	uint64_t keys[N];
	long flips = 0;
	int same_diff = 0;

	(void)state;
	for (int i = 0; i < N; i++) {
		struct pdma_mr *m;

		/* Each closed before the next: the same pool object every time. */
		assert_int_equal(pdma_mr_reg(d, buf, 64, RW, 0, 0, 0, &m, NULL), 0);
		keys[i] = pdma_mr_key(m);
		assert_int_equal(pdma_mr_close(m), 0);
	}
	for (int i = 1; i < N; i++) {
		flips += __builtin_popcountll(keys[i] ^ keys[i - 1]);
		if (i > 1)
			same_diff += keys[i] - keys[i - 1] == keys[i - 1] - keys[i - 2];
	}
	assert_true(flips > 29L * (N - 1) && flips < 35L * (N - 1));
	assert_true(same_diff == 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_requested_keys),
		cmocka_unit_test(test_provider_keys),
		cmocka_unit_test(test_provider_keys_tiny),
		cmocka_unit_test(test_provider_keys_fork),
		cmocka_unit_test(test_raw_keys),
		cmocka_unit_test(test_raw_keys_tiny),
		cmocka_unit_test(test_dead_key_after_reuse),
		cmocka_unit_test(test_provider_keys_unrelated),
		cmocka_unit_test(test_desc_on_demand),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
