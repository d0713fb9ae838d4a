// SPDX-License-Identifier: MIT
/*
 * A stand-in for libcuda's deallocation entry points, for interpose.c: it
 * counts the frees that reach "the driver".
 */
#include <stdint.h>

int stub_cuda_frees;

int cuMemFree_v2(uint64_t dptr);
int cuMemFree(unsigned int dptr);

int cuMemFree_v2(uint64_t dptr)
{
	(void)dptr;
	stub_cuda_frees++;
	return 0;
}

int cuMemFree(unsigned int dptr)
{
	(void)dptr;
	stub_cuda_frees++;
	return 0;
}
