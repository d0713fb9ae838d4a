// SPDX-License-Identifier: MIT
/*
 * Error codes against libfabric's (include/rdma/fi_errno.h): every code
 * peerdma returns converts to the number libfabric uses for it and back, and
 * no libfabric-only number (>= 256) is ever mistaken for an errno value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "peerdma/mr.h"

/* libfabric's own numbers, copied from fi_errno.h to check ours against. */
#define FI_EOTHER 256
#define FI_ETOOSMALL 257
#define FI_EOPBADSTATE 258
#define FI_EBADFLAGS 260
#define FI_ETRUNC 265
#define FI_ENOKEY 266

/* Every errno value libpeerdma returns (grep -E '-E[A-Z]+' lib), with the
 * number libfabric gives the same condition. */
static const struct {
	int err, fi;
} codes[] = {
	{ EINVAL, EINVAL },
	{ ENOMEM, ENOMEM },
	{ EFAULT, EFAULT },
	{ ENODEV, ENODEV },
	{ ENOENT, ENOENT },
	{ EBUSY, EBUSY },
	{ EOPNOTSUPP, EOPNOTSUPP },
	{ EAGAIN, EAGAIN },
	{ ENOSYS, ENOSYS },
	{ EKEYREJECTED, EKEYREJECTED },
	{ EACCES, EACCES },
	{ EPERM, EPERM },
	{ EOVERFLOW, EOVERFLOW },
	{ ENOSPC, ENOSPC },
	{ EIO, EIO },
	{ EBADF, EBADF },
	{ ENOKEY, FI_ENOKEY },     /* libfabric: 266, not errno's 126 */
	{ ERANGE, FI_ETOOSMALL },  /* a caller's buffer too small: 257 */
	{ ESTALE, FI_EOTHER },     /* no libfabric code */
	{ EPROTO, FI_EOTHER },
	{ EEXIST, FI_EOTHER },
	{ ECHILD, FI_EOTHER },     /* a kernel-device domain used in a forked child */
};

static void test_to_fi_every_code(void **state)
{
	(void)state;
	assert_int_equal(pdma_errno_to_fi(0), 0);
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		assert_int_equal(pdma_errno_to_fi(-codes[i].err), -codes[i].fi);
		assert_int_equal(pdma_errno_to_fi(codes[i].err), codes[i].fi); /* sign kept */
	}
}

static void test_round_trip(void **state)
{
	(void)state;
	assert_int_equal(pdma_errno_from_fi(0), 0);
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		if (codes[i].fi == FI_EOTHER)
			continue;
		assert_int_equal(pdma_errno_from_fi(-codes[i].fi), -codes[i].err);
	}
	/* libfabric-only codes become errno values, never pass through. */
	assert_int_equal(pdma_errno_from_fi(-FI_EBADFLAGS), -EINVAL);
	assert_int_equal(pdma_errno_from_fi(-FI_EOPBADSTATE), -EBUSY);
	assert_int_equal(pdma_errno_from_fi(-FI_ETRUNC), -EMSGSIZE);
	assert_int_equal(pdma_errno_from_fi(-FI_EOTHER), -EIO);
	assert_int_equal(pdma_errno_from_fi(-269), -EIO); /* FI_ENORX */
	assert_int_equal(pdma_errno_from_fi(FI_ENOKEY), ENOKEY);
}

static void test_raw_attr_too_small(void **state)
{
	static char buf[4096];
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	struct pdma_mr *m;
	uint8_t raw[64]; /* larger than ks says: the size passed is what counts */
	uint64_t base = 7;
	size_t ks = 1;
	int r;

	(void)state;
	memset(raw, 0xa5, sizeof(raw));
	pdma_domain_attr_init(&a);
	a.mr_mode |= PDMA_MR_RAW;
	assert_int_equal(pdma_domain_open(&a, &d), 0);
	assert_int_equal(pdma_mr_reg(d, buf, 64, PDMA_READ, 0, 0, 0, &m, NULL), 0);
	r = pdma_mr_raw_attr(m, &base, raw, &ks, 0);
	assert_int_equal(r, -ERANGE);
	assert_int_equal(ks, 16); /* the size needed (the default raw key) */
	for (size_t i = 0; i < sizeof(raw); i++) /* nothing written */
		assert_int_equal(raw[i], 0xa5);
	assert_int_equal(base, 7);
	assert_int_equal(pdma_errno_to_fi(r), -FI_ETOOSMALL);
	assert_string_equal(pdma_strerror(r), "Buffer too small");
	assert_int_equal(pdma_mr_close(m), 0);
	assert_int_equal(pdma_domain_close(d), 0);
}

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(pdma_strerror(-ERANGE), "Buffer too small");
	assert_string_equal(pdma_strerror(-ENOKEY), "Required key not available");
	/* libc's text speaks of wait(2). */
	assert_string_equal(pdma_strerror(-ECHILD),
			    "Kernel-device domain was opened by the parent process");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_to_fi_every_code),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_raw_attr_too_small),
		cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
