// SPDX-License-Identifier: MIT
/*
 * libpeerdma_cudart_hook.so: deallocation hooks for the CUDA runtime API.
 *
 * The CUDA runtime (cudaFree, ...) reaches the driver through entry points it
 * fetches itself (cuGetProcAddress), so the driver-level hooks of
 * lib/monitor_cuda.c never see its frees. This small library, loaded before
 * the runtime (LD_PRELOAD=libpeerdma_cudart_hook.so, or dlopen RTLD_GLOBAL
 * before libcudart), defines cudaFree, cudaFreeAsync, cudaFreeHost,
 * cudaHostUnregister and cudaDeviceReset: each tells libpeerdma first (revoke
 * pins, pdma_monitor_notify) and then calls the runtime's own function
 * (dlsym RTLD_NEXT).
 *
 * It does not link libpeerdma: libpeerdma (shared or static) registers its
 * callbacks with pdma_cudart_hook_set() when it opens the cuda backend; until
 * then there is nothing registered to invalidate and the calls pass through.
 * A statically linked CUDA runtime cannot be hooked this way (its cudaFree is
 * not looked up dynamically): use the tag check there.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef int cuda_err;            /* cudaError_t */
typedef void *cuda_stream;       /* cudaStream_t */
#define CUDA_ERROR_INITIALIZATION 3 /* cudaErrorInitializationError */

/* libpeerdma's callbacks: begin (revoke, notify, lock new pins out) returns
 * a token that end takes once the runtime's function has returned. */
typedef void *(*begin_fn)(uint64_t ptr);
typedef void *(*reset_fn)(int device);
typedef void (*end_fn)(void *token);

struct hooks {
	begin_fn begin;
	reset_fn reset;
	end_fn end;
};
static _Atomic(const struct hooks *) cur_hooks;
static struct hooks slots[2];
static atomic_int slot_i;
static atomic_ulong calls;

/* libpeerdma's registration (lib/monitor_cuda.c, at pdma_cuda_open). */
void pdma_cudart_hook_set(begin_fn begin, reset_fn reset, end_fn end);
unsigned long pdma_cudart_hook_calls(void);

void pdma_cudart_hook_set(begin_fn begin, reset_fn reset, end_fn end)
{
	/* Published as a whole, so a call never mixes two registrations.
	 * (Registrations are rare: at most two live at once is plenty.) */
	struct hooks *h = &slots[atomic_fetch_add(&slot_i, 1) & 1];

	h->begin = begin;
	h->reset = reset;
	h->end = end;
	atomic_store(&cur_hooks, h);
}

unsigned long pdma_cudart_hook_calls(void)
{
	return atomic_load(&calls);
}

static const struct hooks *before(const void *p, void **token)
{
	const struct hooks *h = atomic_load(&cur_hooks);

	atomic_fetch_add(&calls, 1);
	*token = h && p ? h->begin((uint64_t)(uintptr_t)p) : NULL;
	return h;
}

static void after(const struct hooks *h, void *token)
{
	if (h && token)
		h->end(token);
}

/* The runtime's own function: the next definition after this library, or,
 * where the runtime was loaded in a way RTLD_NEXT does not reach, the loaded
 * runtime library's own symbol. Never this library's. */
static void *real_sym(const char *name, void *self)
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

cuda_err cudaFree(void *p);
cuda_err cudaFreeAsync(void *p, cuda_stream s);
cuda_err cudaFreeHost(void *p);
cuda_err cudaHostUnregister(void *p);
cuda_err cudaDeviceReset(void);
cuda_err pdma_cudart_hook_cudaFree(void *p);

static void *self_cudaFree(void) { return (void *)pdma_cudart_hook_cudaFree; }
static void *self_cudaFreeAsync(void) { return (void *)cudaFreeAsync; }
static void *self_cudaFreeHost(void) { return (void *)cudaFreeHost; }
static void *self_cudaHostUnregister(void) { return (void *)cudaHostUnregister; }
static void *self_cudaDeviceReset(void) { return (void *)cudaDeviceReset; }
static void *self_cudaGetDevice(void) { return NULL; }

REAL(cudaFree, free_t)
REAL(cudaFreeAsync, free_async_t)
REAL(cudaFreeHost, free_t)
REAL(cudaHostUnregister, free_t)
REAL(cudaDeviceReset, reset_t)
REAL(cudaGetDevice, getdev_t)

static cuda_err release(free_t f, void *p)
{
	void *tok;
	const struct hooks *h = before(p, &tok);
	cuda_err r = f ? f(p) : CUDA_ERROR_INITIALIZATION;

	after(h, tok);
	return r;
}

cuda_err pdma_cudart_hook_cudaFree(void *p)
{
	return release(get_cudaFree(), p);
}

/* The public name is an alias, so that libpeerdma can tell whether the
 * process's cudaFree is this one (pdma_cuda_hooks_installed). */
cuda_err cudaFree(void *p) __attribute__((alias("pdma_cudart_hook_cudaFree")));

cuda_err cudaFreeAsync(void *p, cuda_stream s)
{
	free_async_t f = get_cudaFreeAsync();
	void *tok;
	const struct hooks *h = before(p, &tok);
	cuda_err r = f ? f(p, s) : CUDA_ERROR_INITIALIZATION;

	after(h, tok);
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
	const struct hooks *h = atomic_load(&cur_hooks);
	reset_t f = get_cudaDeviceReset();
	getdev_t g = get_cudaGetDevice();
	void *tok = NULL;
	cuda_err r;
	int dev = -1;

	atomic_fetch_add(&calls, 1);
	if (g && g(&dev) != 0)
		dev = -1;
	if (h)
		tok = h->reset(dev);
	r = f ? f() : CUDA_ERROR_INITIALIZATION;
	after(h, tok);
	return r;
}
