/* SPDX-License-Identifier: MIT */
/*
 * "No two of these are equal", for the tests that collect keys, descriptors
 * or entries and check that none was handed out twice.
 */
#ifndef PDMA_TESTS_DISTINCT_H
#define PDMA_TESTS_DISTINCT_H

#include <stddef.h>
#include <stdint.h>

/* Sorts v[0..n) in place and fails the test if any value repeats. */
void assert_all_distinct(uint64_t *v, size_t n);

#endif /* PDMA_TESTS_DISTINCT_H */
