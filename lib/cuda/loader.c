// SPDX-License-Identifier: MIT
/*
 * Run-time loading of the CUDA driver (libcuda.so.1): see api.h.
 * libpeerdma never links libcuda; a machine without the NVIDIA driver gets
 * -ENODEV and a message naming what is missing.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/api.h"

static void set_msg(char *msg, size_t msglen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_msg(char *msg, size_t msglen, const char *fmt, ...)
{
	va_list ap;

	if (!msg || !msglen)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, msglen, fmt, ap);
	va_end(ap);
}

struct sym {
	const char *name;
	size_t off;
	int required;
};

#define S(field, name, req) { name, offsetof(struct pdma_cu_api, field), req }
static const struct sym syms[] = {
	S(Init, "cuInit", 1),
	S(DriverGetVersion, "cuDriverGetVersion", 1),
	S(GetErrorName, "cuGetErrorName", 1),
	S(GetErrorString, "cuGetErrorString", 1),
	S(DeviceGetCount, "cuDeviceGetCount", 1),
	S(DeviceGet, "cuDeviceGet", 1),
	S(DeviceGetName, "cuDeviceGetName", 1),
	S(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", 1),
	S(DeviceGetAttribute, "cuDeviceGetAttribute", 1),
	S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1),
	S(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1),
	S(CtxGetCurrent, "cuCtxGetCurrent", 1),
	S(CtxSetCurrent, "cuCtxSetCurrent", 1),
	S(CtxPushCurrent, "cuCtxPushCurrent_v2", 1),
	S(CtxPopCurrent, "cuCtxPopCurrent_v2", 1),
	S(CtxSynchronize, "cuCtxSynchronize", 1),
	S(PointerGetAttribute, "cuPointerGetAttribute", 1),
	S(PointerGetAttributes, "cuPointerGetAttributes", 1),
	S(PointerSetAttribute, "cuPointerSetAttribute", 1),
	S(MemGetAddressRange, "cuMemGetAddressRange_v2", 1),
	S(MemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", 0),
	S(MemHostRegister, "cuMemHostRegister_v2", 1),
	S(MemHostUnregister, "cuMemHostUnregister", 1),
	S(FlushGPUDirectRDMAWrites, "cuFlushGPUDirectRDMAWrites", 0),
	S(MemAlloc, "cuMemAlloc_v2", 1),
	S(MemFree, "cuMemFree_v2", 1),
	S(MemFreeAsync, "cuMemFreeAsync", 0),
	S(MemAllocHost, "cuMemAllocHost_v2", 1),
	S(MemFreeHost, "cuMemFreeHost", 1),
	S(MemAllocManaged, "cuMemAllocManaged", 0),
	S(MemsetD8, "cuMemsetD8_v2", 1),
	S(MemcpyHtoD, "cuMemcpyHtoD_v2", 1),
	S(MemcpyDtoH, "cuMemcpyDtoH_v2", 1),
	S(MemRelease, "cuMemRelease", 0),
	S(MemUnmap, "cuMemUnmap", 0),
	S(MemAddressFree, "cuMemAddressFree", 0),
	S(CtxCreate, "cuCtxCreate_v2", 0),
	S(CtxDestroy, "cuCtxDestroy_v2", 1),
	S(DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", 0),
	S(IpcGetMemHandle, "cuIpcGetMemHandle", 0),
	S(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", 0),
	S(IpcCloseMemHandle, "cuIpcCloseMemHandle", 0),
};
#undef S

int pdma_cu_api_open(const char *path, struct pdma_cu_api *api, char *msg, size_t msglen)
{
	pdma_cu_result r;
	void *h;
	int n = 0;

	memset(api, 0, sizeof(*api));
	if (!path)
		path = getenv("PEERDMA_LIBCUDA");
	if (!path || !*path)
		path = "libcuda.so.1";
	/* RTLD_LOCAL: the process's own symbol lookup (and the interposed
	 * hooks of libpeerdma_cuda_hooks.so) never bind to this copy by accident. */
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *err = dlerror();

		set_msg(msg, msglen,
			"CUDA driver not available: cannot load %s (%s): is the NVIDIA driver installed?",
			path, err ? err : "unknown error");
		return -ENODEV;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *f = dlsym(h, syms[i].name);

		if (!f && syms[i].required) {
			set_msg(msg, msglen,
				"%s is not a usable CUDA driver: entry point %s missing", path,
				syms[i].name);
			dlclose(h);
			memset(api, 0, sizeof(*api));
			return -ENODEV;
		}
		memcpy((char *)api + syms[i].off, &f, sizeof(f));
	}
	api->handle = h;
	r = api->Init(0);
	if (r != PDMA_CU_SUCCESS) {
		const char *name = NULL;

		if (api->GetErrorName(r, &name) != PDMA_CU_SUCCESS || !name)
			name = "?";
		if (r == PDMA_CU_ERROR_STUB_LIBRARY)
			set_msg(msg, msglen,
				"CUDA driver not available: %s is the CUDA toolkit's stub library (%s): no NVIDIA driver installed",
				path, name);
		else
			set_msg(msg, msglen, "CUDA driver not usable: cuInit failed with %s (%d)%s",
				name, r,
				r == PDMA_CU_ERROR_NO_DEVICE ? ": no CUDA-capable device" : "");
		dlclose(h);
		memset(api, 0, sizeof(*api));
		return -ENODEV;
	}
	if (api->DriverGetVersion(&api->driver_version) != PDMA_CU_SUCCESS)
		api->driver_version = 0;
	if (api->DeviceGetCount(&n) != PDMA_CU_SUCCESS || n <= 0) {
		set_msg(msg, msglen, "CUDA driver loaded (%s) but it reports no CUDA device", path);
		dlclose(h);
		memset(api, 0, sizeof(*api));
		return -ENODEV;
	}
	return 0;
}

void *pdma_cu_api_fn(const struct pdma_cu_api *api, const char *name)
{
	void *f = NULL;

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		if (!strcmp(syms[i].name, name)) {
			memcpy(&f, (const char *)api + syms[i].off, sizeof(f));
			break;
		}
	}
	if (!f && api->handle)
		f = dlsym(api->handle, name);
	return f;
}

void pdma_cu_api_close(struct pdma_cu_api *api)
{
	if (api->handle)
		dlclose(api->handle);
	memset(api, 0, sizeof(*api));
}

/* The process-wide table. Published with release order once complete; the
 * library is never unloaded (other threads may hold function pointers). */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pdma_cu_api loaded;
static _Atomic(const struct pdma_cu_api *) current;

int pdma_cu_get(const struct pdma_cu_api **api, char *msg, size_t msglen)
{
	const struct pdma_cu_api *a = atomic_load_explicit(&current, memory_order_acquire);
	struct pdma_cu_api tmp;
	int ret = 0;

	if (a) {
		*api = a;
		return 0;
	}
	pthread_mutex_lock(&load_lock);
	a = atomic_load_explicit(&current, memory_order_acquire);
	if (!a) {
		ret = pdma_cu_api_open(NULL, &tmp, msg, msglen);
		if (!ret) {
			loaded = tmp;
			a = &loaded;
			atomic_store_explicit(&current, a, memory_order_release);
		}
	}
	pthread_mutex_unlock(&load_lock);
	if (!ret)
		*api = a;
	return ret;
}

const struct pdma_cu_api *pdma_cu_peek(void)
{
	return atomic_load_explicit(&current, memory_order_acquire);
}

void pdma_cu_set_api_for_testing(const struct pdma_cu_api *api)
{
	pthread_mutex_lock(&load_lock);
	if (api)
		atomic_store_explicit(&current, api, memory_order_release);
	else if (atomic_load(&current) != &loaded)
		atomic_store_explicit(&current, NULL, memory_order_release);
	pthread_mutex_unlock(&load_lock);
}

const char *pdma_cu_errname(pdma_cu_result r)
{
	static _Thread_local char buf[96];
	const struct pdma_cu_api *a = pdma_cu_peek();
	const char *name = NULL;

	if (!a || !a->GetErrorName || a->GetErrorName(r, &name) != PDMA_CU_SUCCESS || !name)
		name = "CUDA error";
	snprintf(buf, sizeof(buf), "%s (%d)", name, r);
	return buf;
}

int pdma_cu_errno(pdma_cu_result r)
{
	switch (r) {
	case PDMA_CU_SUCCESS:
		return 0;
	case PDMA_CU_ERROR_INVALID_VALUE:
		return -EINVAL;
	case PDMA_CU_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case PDMA_CU_ERROR_NOT_INITIALIZED:
	case PDMA_CU_ERROR_DEINITIALIZED:
	case PDMA_CU_ERROR_STUB_LIBRARY:
	case PDMA_CU_ERROR_NO_DEVICE:
	case PDMA_CU_ERROR_INVALID_DEVICE:
		return -ENODEV;
	case PDMA_CU_ERROR_INVALID_CONTEXT:
		return -EBADF;
	case PDMA_CU_ERROR_NOT_FOUND:
		return -ENOENT;
	case PDMA_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return -EEXIST;
	case PDMA_CU_ERROR_HOST_MEMORY_NOT_REGISTERED:
		return -ENOENT;
	case PDMA_CU_ERROR_NOT_PERMITTED:
		return -EPERM;
	case PDMA_CU_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}
