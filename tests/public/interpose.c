// SPDX-License-Identifier: MIT
/*
 * Linking libpeerdma does not interpose the application's CUDA frees; the
 * opt-in hook library does. This program is linked against libpeerdma.so and
 * a stub driver (stub_cuda.c), uses libpeerdma, and frees through cuMemFree_v2
 * and cuMemFree:
 *   interpose          the frees go straight to the driver;
 *   interpose hooked   (run with LD_PRELOAD=libpeerdma_cuda_hooks.so) each
 *                      free passes through the hook library first, then
 *                      reaches the driver.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "peerdma/mr.h"

int cuMemFree_v2(uint64_t dptr);
int cuMemFree(unsigned int dptr);
extern int stub_cuda_frees;

#define CHECK(c)                                                        \
	do {                                                            \
		if (!(c)) {                                             \
			fprintf(stderr, "interpose: failed: %s\n", #c); \
			return 1;                                       \
		}                                                       \
	} while (0)

int main(int argc, char **argv)
{
	int want_hooked = argc > 1 && !strcmp(argv[1], "hooked");
	unsigned long (*hook_calls)(void);
	struct pdma_domain_attr a;
	struct pdma_domain *d;
	void *lib;
	unsigned long c0;

	/* A real user of libpeerdma. */
	pdma_domain_attr_init(&a);
	CHECK(pdma_domain_open(&a, &d) == 0);
	/* libpeerdma defines no CUDA name at all. */
	lib = dlopen("libpeerdma.so.0", RTLD_NOW | RTLD_NOLOAD);
	CHECK(lib != NULL);
	CHECK(dlsym(lib, "cuMemFree_v2") == NULL || dlsym(lib, "cuMemFree_v2") ==
	      dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
	CHECK(dlsym(lib, "pdma_cu_set_api_for_testing") == NULL);

	*(void **)&hook_calls = dlsym(RTLD_DEFAULT, "pdma_cuda_hooks_calls");
	CHECK(!hook_calls == !want_hooked);
	c0 = hook_calls ? hook_calls() : 0;
	CHECK(cuMemFree_v2(0x10000) == 0);
	CHECK(cuMemFree(0x20000) == 0);
	/* The driver gets every free either way. */
	CHECK(stub_cuda_frees == 2);
	if (want_hooked) {
		/* Both passed through the hook library. */
		CHECK(hook_calls() == c0 + 2);
	} else {
		/* Nothing stands between the program and the driver: its
		 * cuMemFree_v2 is the stub's own. */
		void *stub = dlopen("libpdma_stub_cuda.so", RTLD_NOW | RTLD_NOLOAD);

		CHECK(stub != NULL);
		CHECK(dlsym(RTLD_DEFAULT, "cuMemFree_v2") == dlsym(stub, "cuMemFree_v2"));
		dlclose(stub);
	}
	dlclose(lib);
	CHECK(pdma_domain_close(d) == 0);
	printf("interpose: %s\n", want_hooked ? "hooked through libpeerdma_cuda_hooks.so" :
						 "not interposed");
	return 0;
}
