// SPDX-License-Identifier: MIT
/*
 * Linking libpeerdma does not interpose the application's CUDA frees; the
 * opt-in hook library does. This program is linked against libpeerdma.so and
 * a stub driver (stub_cuda.c), uses libpeerdma, and frees through cuMemFree_v2
 * and cuMemFree, then allocates, maps the allocation a second time through
 * IPC and closes that mapping, maps and unmaps VMM memory and destroys a
 * context, and allocates, closes an IPC mapping and frees through the
 * runtime (cudaMalloc, cudaIpcCloseMemHandle, cudaFree of the stub):
 *   interpose          every call goes straight to the driver;
 *   interpose hooked   (run with LD_PRELOAD=libpeerdma_cuda_hooks.so) each
 *                      way memory arrives or leaves that the hook library
 *                      hooks (free, cuMemAlloc_v2, IPC close, VMM unmap,
 *                      context destroy) passes through it first, then
 *                      reaches the driver with the driver's answer coming
 *                      back; IPC open and VMM create/map/release pass by it.
 *                      The allocations it saw made are listed with their
 *                      buffer IDs (pdma_cuda_hooks_seen) until their free or
 *                      a context destroy.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "peerdma/mr.h"
#include "stub_cuda.h"

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
	int (*seen)(uint64_t base, uint64_t buffer_id);
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
	*(void **)&seen = dlsym(RTLD_DEFAULT, "pdma_cuda_hooks_seen");
	CHECK(!seen == !want_hooked);
	c0 = hook_calls ? hook_calls() : 0;
	CHECK(cuMemFree_v2(0x10000) == 0);
	CHECK(cuMemFree(0x20000) == 0);
	/* The driver gets every free either way. */
	CHECK(stub_cuda_frees == 2);
	if (want_hooked) {
		/* Both passed through the hook library. */
		CHECK(hook_calls() == c0 + 2);
	}
	{
		uint64_t p = 0, q = 0, h = 0;
		stub_ipc_handle ih;

		c0 = hook_calls ? hook_calls() : 0;
		CHECK(cuMemAlloc_v2(&p, 1 << 20) == 0 && p == 0x10000);
		if (want_hooked) {
			/* Listed with its buffer ID, until its free. */
			CHECK(seen(p, stub_cuda_alloc_id) && !seen(p, stub_cuda_alloc_id + 1));
			CHECK(cuMemAlloc_v2(&p, 1 << 20) == 0 && seen(p, stub_cuda_alloc_id));
			CHECK(cuMemFree_v2(p) == 0 && !seen(p, stub_cuda_alloc_id));
			CHECK(cuMemAlloc_v2(&p, 1 << 20) == 0 && seen(p, stub_cuda_alloc_id));
			c0 += 1;
		}
		CHECK(cuIpcGetMemHandle(&ih, p) == 0);
		CHECK(cuIpcOpenMemHandle_v2(&q, ih, 1) == 0 && q == 0x7000000);
		CHECK(cuIpcCloseMemHandle(q) == 0);
		CHECK(cuIpcCloseMemHandle(q) == 1); /* the driver's error comes back */
		CHECK(cuMemCreate(&h, 1 << 21, NULL, 0) == 0);
		CHECK(cuMemMap(0x9000000, 1 << 21, 0, h, 0) == 0);
		CHECK(cuMemUnmap(0x9000000, 1 << 21) == 0);
		CHECK(cuMemRelease(h) == 0);
		CHECK(cuCtxDestroy_v2((void *)0x5555) == 0);
		/* The driver got every call either way. */
		CHECK(stub_cuda_allocs == (want_hooked ? 3 : 1));
		CHECK(stub_cuda_ipc_opens == 1 && stub_cuda_ipc_closes == 1);
		CHECK(stub_cuda_vmm_creates == 1 && stub_cuda_vmm_maps == 1);
		CHECK(stub_cuda_vmm_unmaps == 1 && stub_cuda_vmm_releases == 1);
		CHECK(stub_cuda_ctx_destroys == 1);
		/* Hooked: the two IPC closes, the unmap and the context destroy
		 * (the allocation is listed, not counted as a release). */
		if (want_hooked) {
			CHECK(hook_calls() == c0 + 4);
			/* The context destroy forgot every listed allocation. */
			CHECK(!seen(p, stub_cuda_alloc_id));
		}
	}
	{
		/* The runtime's allocation, IPC close and free: hooked in the
		 * runtime itself (its calls into the driver bypass the driver's
		 * hooked names). */
		void *r = NULL;

		c0 = hook_calls ? hook_calls() : 0;
		CHECK(cudaMalloc(&r, 1 << 20) == 0 && (uintptr_t)r == 0x30000);
		if (want_hooked)
			CHECK(seen((uintptr_t)r, stub_cudart_alloc_id));
		CHECK(cudaIpcCloseMemHandle((void *)0x7000000) == 0);
		CHECK(cudaIpcCloseMemHandle(r) == 1); /* the runtime's error comes back */
		CHECK(cudaFree(r) == 0);
		CHECK(stub_cudart_ipc_closes == 1 && stub_cudart_frees == 1);
		if (want_hooked) {
			CHECK(!seen((uintptr_t)r, stub_cudart_alloc_id));
			CHECK(hook_calls() == c0 + 3);
		}
	}
	if (!want_hooked) {
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
