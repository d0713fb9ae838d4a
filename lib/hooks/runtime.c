// SPDX-License-Identifier: MIT
/*
 * The CUDA runtime API's entry points through which memory leaves the
 * process, hooked: cudaFree, cudaFreeAsync, cudaFreeHost, cudaHostUnregister,
 * cudaIpcCloseMemHandle and cudaDeviceReset; and its allocators whose memory
 * leaves only through those: cudaMalloc, cudaMallocPitch, cudaMallocAsync,
 * cudaMallocFromPoolAsync (their memory is listed as seen, seen.c).
 *
 * The CUDA runtime reaches the driver through entry points it fetches itself
 * (cuGetProcAddress), so the driver hooks of driver.c never see its calls:
 * its cudaIpcCloseMemHandle does not pass through the hooked
 * cuIpcCloseMemHandle, nor its cudaFree through cuMemFree_v2. The runtime
 * has no virtual memory management of its own (programs fetch cuMemMap and
 * cuMemUnmap with cudaGetDriverEntryPoint, which these hooks do not see: such
 * mappings are not listed, so libpeerdma keeps the buffer-ID check for them).
 * These definitions, loaded before the runtime (LD_PRELOAD, or dlopen
 * RTLD_GLOBAL before libcudart), tell libpeerdma first (hooks.c) and then call
 * the runtime's own function (dlsym RTLD_NEXT). A statically linked CUDA
 * runtime cannot be hooked this way (its cudaFree is not looked up
 * dynamically): use the tag check there.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hooks/hooks.h"

typedef int cuda_err;            /* cudaError_t */
typedef void *cuda_stream;       /* cudaStream_t */
#define CUDA_ERROR_INITIALIZATION 3 /* cudaErrorInitializationError */

/* The runtime's own function: the next definition after this library, or,
 * where the runtime was loaded in a way RTLD_NEXT does not reach, the loaded
 * runtime library's own symbol. Never this library's. */
static void *real_sym(const char *name, const void *self)
{
	static const char *const libs[] = { "libcudart.so.13", "libcudart.so.12",
					    "libcudart.so.11.0", "libcudart.so" };
	void *f = dlsym(RTLD_NEXT, name);

	for (size_t i = 0; (!f || f == self) && i < sizeof(libs) / sizeof(libs[0]); i++) {
		void *h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);

		if (h) {
			f = dlsym(h, name);
			dlclose(h);
		}
	}
	return f == self ? NULL : f;
}

#define REAL(name, type)                                                 \
	static _Atomic(type) real_##name;                                \
	static type get_##name(void)                                     \
	{                                                                \
		type f = atomic_load(&real_##name);                      \
		if (!f) {                                                \
			*(void **)&f = real_sym(#name, self_##name());   \
			atomic_store(&real_##name, f);                   \
		}                                                        \
		return f;                                                \
	}

typedef cuda_err (*free_t)(void *);
typedef cuda_err (*free_async_t)(void *, cuda_stream);
typedef cuda_err (*reset_t)(void);
typedef cuda_err (*getdev_t)(int *);
typedef cuda_err (*malloc_t)(void **, size_t);
typedef cuda_err (*pitch_t)(void **, size_t *, size_t, size_t);
typedef cuda_err (*malloc_async_t)(void **, size_t, cuda_stream);
typedef cuda_err (*malloc_pool_t)(void **, size_t, void *, cuda_stream);

cuda_err cudaFree(void *p);
cuda_err cudaFreeAsync(void *p, cuda_stream s);
cuda_err cudaFreeHost(void *p);
cuda_err cudaHostUnregister(void *p);
cuda_err cudaDeviceReset(void);
cuda_err pdma_cuda_hook_cudaFree(void *p);
cuda_err cudaIpcCloseMemHandle(void *p);
cuda_err cudaMalloc(void **p, size_t size);
cuda_err cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height);
cuda_err cudaMallocAsync(void **p, size_t size, cuda_stream s);
cuda_err cudaMallocFromPoolAsync(void **p, size_t size, void *pool, cuda_stream s);

static void *self_cudaFree(void) { return (void *)pdma_cuda_hook_cudaFree; }
static void *self_cudaFreeAsync(void) { return (void *)cudaFreeAsync; }
static void *self_cudaFreeHost(void) { return (void *)cudaFreeHost; }
static void *self_cudaHostUnregister(void) { return (void *)cudaHostUnregister; }
static void *self_cudaDeviceReset(void) { return (void *)cudaDeviceReset; }
static void *self_cudaGetDevice(void) { return NULL; }
static void *self_cudaIpcCloseMemHandle(void) { return (void *)cudaIpcCloseMemHandle; }
static void *self_cudaMalloc(void) { return (void *)cudaMalloc; }
static void *self_cudaMallocPitch(void) { return (void *)cudaMallocPitch; }
static void *self_cudaMallocAsync(void) { return (void *)cudaMallocAsync; }
static void *self_cudaMallocFromPoolAsync(void) { return (void *)cudaMallocFromPoolAsync; }

REAL(cudaFree, free_t)
REAL(cudaFreeAsync, free_async_t)
REAL(cudaFreeHost, free_t)
REAL(cudaHostUnregister, free_t)
REAL(cudaDeviceReset, reset_t)
REAL(cudaGetDevice, getdev_t)
REAL(cudaIpcCloseMemHandle, free_t)
REAL(cudaMalloc, malloc_t)
REAL(cudaMallocPitch, pitch_t)
REAL(cudaMallocAsync, malloc_async_t)
REAL(cudaMallocFromPoolAsync, malloc_pool_t)

static void begin(struct pdma_hook_call *c, const void *p)
{
	pdma_hook_seen_remove((uint64_t)(uintptr_t)p);
	if (p)
		pdma_hook_begin_alloc(c, (uint64_t)(uintptr_t)p);
	else
		pdma_hook_pass(c);
}

static cuda_err release(free_t f, void *p)
{
	struct pdma_hook_call c;
	cuda_err r;

	begin(&c, p);
	r = f ? f(p) : CUDA_ERROR_INITIALIZATION;
	pdma_hook_end(&c);
	return r;
}

cuda_err pdma_cuda_hook_cudaFree(void *p)
{
	return release(get_cudaFree(), p);
}

/* The public name is an alias, so that libpeerdma can tell whether the
 * process's cudaFree is this one (PDMA_CUDA_HOOKS_RUNTIME_FREE). */
cuda_err cudaFree(void *p) __attribute__((alias("pdma_cuda_hook_cudaFree")));

cuda_err cudaFreeAsync(void *p, cuda_stream s)
{
	free_async_t f = get_cudaFreeAsync();
	struct pdma_hook_call c;
	cuda_err r;

	begin(&c, p);
	r = f ? f(p, s) : CUDA_ERROR_INITIALIZATION;
	pdma_hook_end(&c);
	return r;
}

cuda_err cudaFreeHost(void *p)
{
	return release(get_cudaFreeHost(), p);
}

cuda_err cudaHostUnregister(void *p)
{
	return release(get_cudaHostUnregister(), p);
}

cuda_err cudaDeviceReset(void)
{
	reset_t f = get_cudaDeviceReset();
	getdev_t g = get_cudaGetDevice();
	struct pdma_hook_call c;
	cuda_err r;
	int dev = -1;

	if (g && g(&dev) != 0)
		dev = -1;
	pdma_hook_seen_clear(); /* as cuCtxDestroy_v2 (driver.c) */
	pdma_hook_begin_context(&c, NULL, dev);
	r = f ? f() : CUDA_ERROR_INITIALIZATION;
	pdma_hook_end(&c);
	return r;
}

/* The mapping of another process's allocation closes: as a free. */
cuda_err cudaIpcCloseMemHandle(void *p)
{
	return release(get_cudaIpcCloseMemHandle(), p);
}

/* ------------------------------------------------------------ allocators */

static cuda_err allocated(cuda_err r, void **p)
{
	if (r == 0 && p)
		pdma_hook_allocated((uint64_t)(uintptr_t)*p);
	return r;
}

cuda_err cudaMalloc(void **p, size_t size)
{
	malloc_t f = get_cudaMalloc();

	return allocated(f ? f(p, size) : CUDA_ERROR_INITIALIZATION, p);
}

cuda_err cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height)
{
	pitch_t f = get_cudaMallocPitch();

	return allocated(f ? f(p, pitch, width, height) : CUDA_ERROR_INITIALIZATION, p);
}

cuda_err cudaMallocAsync(void **p, size_t size, cuda_stream s)
{
	malloc_async_t f = get_cudaMallocAsync();

	return allocated(f ? f(p, size, s) : CUDA_ERROR_INITIALIZATION, p);
}

cuda_err cudaMallocFromPoolAsync(void **p, size_t size, void *pool, cuda_stream s)
{
	malloc_pool_t f = get_cudaMallocFromPoolAsync();

	return allocated(f ? f(p, size, pool, s) : CUDA_ERROR_INITIALIZATION, p);
}
