// SPDX-License-Identifier: MIT
/*
 * What runs without peerdma.ko (the module's side is tests/vm/guest_gpu_mr.c):
 * GPU registrations in a domain without a kernel device, over the fake driver
 * (support/fake_cuda.c). A dma-buf export is the handle (pdma_mr_dma names it,
 * no kernel handle, no pages); memory without one (PEERDMA_CUDA_DMABUF=0, or a
 * device that cannot export) is refused with -EOPNOTSUPP and a log line, and
 * leaves no pin behind. PDMA_MR_REVOKED: a revocation of the memory (here
 * pdma_cuda_invalidate, what the deallocation hooks call) reaches an EQ bound
 * with PDMA_MR_REVOKE_EVENTS once per open MR, the MR answers -ENODEV and its
 * cache entry is gone; closed MRs and EQs without the flag get no event.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "mr/domain.h"
#include "support/fake_cuda.h"

/* Every line logged since the test began (cleared by open_domain). */
static char last_log[2048];

static void logfn(void *arg, int level, const char *msg)
{
	size_t n = strlen(last_log);

	(void)arg;
	(void)level;
	snprintf(last_log + n, sizeof(last_log) - n, "%s\n", msg);
}

static struct pdma_domain *open_domain(int cache)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d = NULL;

	last_log[0] = 0;
	pdma_domain_attr_init(&da);
	da.use_cache = cache;
	assert_int_equal(pdma_domain_open(&da, &d), 0);
	pdma_domain_set_log(d, logfn, NULL);
	return d;
}

static int reg(struct pdma_domain *d, uint64_t va, size_t len, void *ctx, struct pdma_mr **m)
{
	struct iovec iov = { (void *)(uintptr_t)va, len };
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = PDMA_REMOTE_WRITE,
				  .iface = PDMA_HMEM_CUDA, .context = ctx };

	return pdma_mr_regattr(d, &a, 0, m);
}

static void test_dmabuf_without_kdev(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_domain *d = open_domain(0);
	struct pdma_mr_dma dma;
	struct pdma_mr *m;
	uint64_t pages[8];
	uint32_t count = 8;

	(void)state;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(reg(d, base + 64 * KiB + 100, 1000, NULL, &m), 0);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_mr_dma(m, 0, &dma), 0);
	assert_int_equal(dma.kernel_fd, -1);
	assert_int_equal(dma.kind, 0);
	assert_int_equal(dma.handle, 0);
	assert_int_equal(dma.addr, base + 64 * KiB + 100);
	assert_int_equal(dma.pinned_addr, base + 64 * KiB);
	assert_int_equal(dma.pinned_len, 64 * KiB);
	assert_int_equal(dma.page_size, 64 * KiB);
	assert_int_equal(dma.entries, 1);
	assert_true(fd_open(dma.dmabuf_fd));
	assert_int_equal(dma.dmabuf_offset, 0);
	assert_int_equal(pdma_mr_dma_pages(m, 0, pages, &count), -ENOENT);
	/* Arguments. */
	assert_int_equal(pdma_mr_dma(m, 1, &dma), -EINVAL);
	assert_int_equal(dma.kernel_fd, -1);
	assert_int_equal(pdma_mr_dma(NULL, 0, &dma), -EINVAL);
	assert_int_equal(pdma_mr_dma(m, 0, NULL), -EINVAL);
	assert_int_equal(pdma_mr_dma_pages(m, 0, pages, NULL), -EINVAL);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_nvp2p_without_kdev_refused(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_domain *d = open_domain(1);
	struct pdma_cuda_stats st;
	struct pdma_mr *m = NULL;

	(void)state;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	setenv("PEERDMA_CUDA_DMABUF", "0", 1);
	assert_int_equal(reg(d, base, MiB, NULL, &m), -EOPNOTSUPP);
	unsetenv("PEERDMA_CUDA_DMABUF");
	assert_null(m);
	assert_non_null(strstr(last_log, "kernel_device"));
	assert_non_null(strstr(last_log, "PEERDMA_CUDA_DMABUF=0"));
	pdma_cuda_get_stats(d->cuda, &st);
	assert_int_equal(st.pins, st.unpins); /* nothing held */
	/* With dma-buf back on, the same range registers. */
	assert_int_equal(reg(d, base, MiB, NULL, &m), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* A cached registration of GPU memory in a domain whose cache checks buffer
 * IDs (no deallocation hooks: TAG_CHECK) asks the driver one attribute, on
 * one call; a reallocation at the same address is caught by it; a range that
 * leaves the allocation inside its pinned pages is refused as on a miss and
 * leaves the cached region alone. */
static void test_cached_tag_check(void **state)
{
	uint64_t base = 0x7f0000000000ull, small = base + 4 * MiB;
	struct pdma_domain *d = open_domain(1);
	struct pdma_cache_stats cs;
	struct pdma_cuda_stats st;
	struct falloc *a;
	struct pdma_mr *m = NULL;
	int calls, attrs;

	(void)state;
	pdma_cache_get_stats(d->cache, &cs);
	assert_int_equal(cs.mode[PDMA_HMEM_CUDA], PDMA_CACHE_MODE_TAG_CHECK);
	a = fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(reg(d, base + 100, 1000, NULL, &m), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(F.exports, 1);
	for (int i = 0; i < 3; i++) {
		calls = F.attr_calls;
		attrs = F.attrs_asked;
		assert_int_equal(reg(d, base + 200, 900, NULL, &m), 0);
		assert_int_equal(F.attr_calls, calls + 1);
		assert_int_equal(F.attrs_asked, attrs + 1);
		assert_int_equal(pdma_mr_close(m), 0);
	}
	assert_int_equal(F.exports, 1);

	/* Freed behind the hooks' back and reallocated at the same address. */
	a->live = 0;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(reg(d, base + 200, 900, NULL, &m), 0);
	assert_int_equal(F.exports, 2);
	pdma_cuda_get_stats(d->cuda, &st);
	assert_int_equal(st.tag_stale, 1);
	pdma_cache_get_stats(d->cache, &cs);
	assert_int_equal(cs.stale_rejected, 1);
	assert_int_equal(pdma_mr_close(m), 0);

	/* 100 KiB: pinned as two 64 KiB pages, the last 28 KiB not its own. */
	fadd(small, 100 * KiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(reg(d, small, 100 * KiB, NULL, &m), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(F.exports, 3);
	assert_int_equal(reg(d, small + 100 * KiB - 10, 20, NULL, &m), -EFAULT);
	assert_non_null(strstr(last_log, "not inside one allocation"));
	assert_int_equal(reg(d, small + 10, 100 * KiB - 10, NULL, &m), 0);
	assert_int_equal(F.exports, 3); /* still cached */
	assert_int_equal(pdma_mr_close(m), 0);
	pdma_cache_get_stats(d->cache, &cs);
	assert_int_equal(cs.stale_rejected, 1);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_device_without_dmabuf_refused(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_domain *d = open_domain(0);
	struct pdma_mr *m = NULL;

	(void)state;
	fadd(base, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(reg(d, base, MiB, NULL, &m), -EOPNOTSUPP);
	assert_non_null(strstr(last_log, "the driver offers none"));
	assert_int_equal(F.exports, 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* Memory the CUDA backend refuses (managed memory) is refused with the
 * backend's log lines alone: seg_pin once added its own, naming the memory
 * by the ops the backend never chose (an uninitialised pointer: a crash in
 * the LTO build on the H100, a line with a garbage name before). */
static void test_managed_refused_logged(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_domain *d;
	struct pdma_mr *m = NULL;

	(void)state;
	fadd(base, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 1);
	for (int cache = 0; cache <= 1; cache++) {
		d = open_domain(cache);
		assert_int_equal(reg(d, base, 4096, NULL, &m), -EINVAL);
		assert_null(m);
		assert_non_null(strstr(last_log, "managed"));
		/* Every line is the backend's: it names what was refused. */
		for (char *l = last_log, *nl; *l; l = nl + 1) {
			nl = strchr(l, '\n');
			assert_non_null(nl);
			*nl = 0;
			assert_non_null(strstr(l, "managed"));
		}
		assert_int_equal(F.exports, 0);
		assert_int_equal(pdma_domain_close(d), 0);
	}
}

static void count_log(void *arg, int level, const char *msg)
{
	(void)level;
	if (strstr(msg, "managed"))
		++*(int *)arg;
}

/* mr.h: pdma_domain_set_log routes every line from then on, the CUDA
 * backend's too, though the backend was opened under the callback before
 * (it kept that one). */
static void test_set_log_later(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_domain *d;
	struct pdma_mr *m = NULL;
	int n = 0;

	(void)state;
	fadd(base, MiB, PDMA_CU_MEMORYTYPE_DEVICE, 1);
	d = open_domain(0);
	assert_int_equal(reg(d, base, 4096, NULL, &m), -EINVAL); /* opens the backend */
	assert_non_null(strstr(last_log, "managed"));
	last_log[0] = 0;
	pdma_domain_set_log(d, count_log, &n);
	assert_int_equal(reg(d, base, 4096, NULL, &m), -EINVAL);
	assert_true(n >= 1);
	assert_string_equal(last_log, ""); /* nothing to the old callback */
	pdma_domain_set_log(d, NULL, NULL);
	n = 0;
	assert_int_equal(reg(d, base, 4096, NULL, &m), -EINVAL);
	assert_int_equal(n, 0);
	assert_string_equal(last_log, "");
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_host_mr_has_no_dma(void **state)
{
	struct pdma_domain *d = open_domain(0);
	struct pdma_mr_dma dma;
	struct pdma_mr *m;
	uint32_t count = 4;
	uint64_t pages[4];
	char *buf = malloc(8192);

	(void)state;
	assert_int_equal(pdma_mr_reg(d, buf, 8192, PDMA_READ, 0, 0, 0, &m, NULL), 0);
	/* Checked, not pinned: nothing a driver could hold. */
	assert_int_equal(pdma_mr_dma(m, 0, &dma), -ENOENT);
	assert_int_equal(dma.kernel_fd, -1);
	assert_int_equal(dma.dmabuf_fd, -1);
	assert_int_equal(pdma_mr_dma_pages(m, 0, pages, &count), -ENOENT);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
	free(buf);
}

static void test_bind_eq_flags(void **state)
{
	struct pdma_domain *d = open_domain(0);
	struct pdma_eq *eq;
	struct pdma_eq_entry e;
	struct pdma_mr *m;
	char buf[64];

	(void)state;
	assert_int_equal(pdma_eq_open(d, 4, &eq), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, 0), -EINVAL);
	assert_int_equal(pdma_domain_bind_eq(d, eq, 1ull << 40), -EINVAL);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_MR_REVOKE_EVENTS), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_REG_MR), -EBUSY);
	/* Revocations only: registrations complete synchronously, no event. */
	assert_int_equal(pdma_mr_reg(d, buf, sizeof(buf), PDMA_READ, 0, 0, 0, &m, NULL), 0);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_int_equal(pdma_eq_close(eq), -EBUSY); /* an MR may still post */
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* Both kinds of event on one EQ: completion first, then the revocation. */
static void test_revoked_event(void **state)
{
	uint64_t base = 0x7f0000000000ull, other = 0x7f0000800000ull;
	struct pdma_domain *d = open_domain(1);
	struct pdma_eq *eq;
	struct pdma_eq_entry e;
	struct pdma_mr_dma dma;
	struct pdma_mr *m, *m2, *mo;
	int tag;

	(void)state;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	fadd(other, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_eq_open(d, 8, &eq), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_REG_MR | PDMA_MR_REVOKE_EVENTS), 0);
	assert_int_equal(reg(d, base, MiB, &tag, &m), 0);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_COMPLETE);
	/* A second MR on the same (cached) region, and one elsewhere. */
	assert_int_equal(reg(d, base, MiB, NULL, &m2), 0);
	assert_int_equal(F.exports, 1);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(reg(d, other, MiB, NULL, &mo), 0);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(pdma_mr_dma(m, 0, &dma), 0);

	/* The memory goes (as the hooks report a cuMemFree): both MRs on it
	 * get one event each, the other MR none. */
	pdma_cuda_invalidate(base, 2 * MiB);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_REVOKED);
	assert_true(e.mr == m || e.mr == m2);
	if (e.mr == m)
		assert_ptr_equal(e.context, &tag);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_REVOKED);
	assert_true(e.mr == m || e.mr == m2);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	pdma_cuda_invalidate(base, 2 * MiB); /* again: nothing new */
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_int_equal(pdma_mr_dma(m, 0, &dma), -ENODEV);
	assert_int_equal(dma.dmabuf_fd, -1);
	assert_int_equal(pdma_mr_dma(m2, 0, &dma), -ENODEV);
	assert_int_equal(pdma_mr_dma(mo, 0, &dma), 0);
	/* The cache entry is gone: the same range pins afresh. */
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(reg(d, base, MiB, NULL, &m), 0);
	assert_int_equal(F.exports, 3);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_COMPLETE);
	assert_int_equal(pdma_mr_dma(m, 0, &dma), 0);
	assert_int_equal(pdma_mr_close(m), 0);
	/* A closed, cached registration's revocation posts nothing. */
	pdma_cuda_invalidate(base, 2 * MiB);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_int_equal(pdma_mr_close(mo), 0);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* An EQ bound after the registrations: MRs watch their memory only while
 * such an EQ is bound (lib/mr/mr_dma.c), so the bind must start the watch of
 * every open MR, and report one whose memory went before it. */
static void test_revoked_bind_late(void **state)
{
	uint64_t base = 0x7f0000000000ull, gone = 0x7f0000800000ull;
	struct pdma_domain *d = open_domain(0);
	struct pdma_eq *eq;
	struct pdma_eq_entry e;
	struct pdma_mr *m, *mg, *closed;

	(void)state;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	fadd(gone, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(reg(d, base, MiB, NULL, &m), 0);
	assert_int_equal(reg(d, gone, MiB, NULL, &mg), 0);
	assert_int_equal(reg(d, base + MiB, MiB, NULL, &closed), 0);
	assert_int_equal(pdma_mr_close(closed), 0);
	pdma_cuda_invalidate(gone, 2 * MiB);
	assert_int_equal(pdma_eq_open(d, 8, &eq), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_MR_REVOKE_EVENTS), 0);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_REVOKED);
	assert_ptr_equal(e.mr, mg);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	pdma_cuda_invalidate(base, 2 * MiB);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_REVOKED);
	assert_ptr_equal(e.mr, m);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_mr_close(mg), 0);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

/* A full EQ drops a revocation (and says so) rather than block the thread
 * that revokes. */
static void test_revoked_eq_full(void **state)
{
	uint64_t base = 0x7f0000000000ull;
	struct pdma_domain *d = open_domain(0);
	struct pdma_eq *eq;
	struct pdma_eq_entry e;
	struct pdma_mr *m, *m2;

	(void)state;
	fadd(base, 2 * MiB, PDMA_CU_MEMORYTYPE_DEVICE, 0);
	assert_int_equal(pdma_eq_open(d, 1, &eq), 0);
	assert_int_equal(pdma_domain_bind_eq(d, eq, PDMA_MR_REVOKE_EVENTS), 0);
	assert_int_equal(reg(d, base, MiB, NULL, &m), 0);
	assert_int_equal(reg(d, base + MiB, MiB, NULL, &m2), 0);
	last_log[0] = 0;
	pdma_cuda_invalidate(base, 2 * MiB);
	assert_int_equal(pdma_eq_read(eq, &e, 0), 0);
	assert_int_equal(e.event, PDMA_MR_REVOKED);
	assert_int_equal(pdma_eq_read(eq, &e, 0), -EAGAIN);
	assert_non_null(strstr(last_log, "lost"));
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_mr_close(m2), 0);
	assert_int_equal(pdma_eq_close(eq), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dmabuf_without_kdev, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nvp2p_without_kdev_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cached_tag_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_without_dmabuf_refused, setup_no_dmabuf,
						teardown),
		cmocka_unit_test_setup_teardown(test_managed_refused_logged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_log_later, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_mr_has_no_dma, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bind_eq_flags, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoked_bind_late, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoked_event, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoked_eq_full, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
