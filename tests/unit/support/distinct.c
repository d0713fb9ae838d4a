// SPDX-License-Identifier: MIT
/* The distinctness check of the tests (distinct.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "support/distinct.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void assert_all_distinct(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(v[0]), cmp_u64);
	for (size_t i = 1; i < n; i++)
		assert_true(v[i] != v[i - 1]);
}
