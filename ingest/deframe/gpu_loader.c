// SPDX-License-Identifier: MIT
/* dlopen() of the GPU deframer module, only after libcuda reports a device. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"

#define MODULE "libpeerdma_vrt_cuda.so"

/* Is there a CUDA device? Asked of libcuda directly so that a machine
 * without the driver never loads the module (or the CUDA runtime in it). */
static int cuda_device_present(void)
{
	void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int n = 0;
	if (!cu)
		return 0;
	int (*init)(unsigned) = (int (*)(unsigned))dlsym(cu, "cuInit");
	int (*count)(int *) = (int (*)(int *))dlsym(cu, "cuDeviceGetCount");
	if (init && count && init(0) == 0 && count(&n) != 0)
		n = 0;
	/* libcuda stays loaded: the module's runtime will use it. */
	return n > 0;
}

static void *try_open(const char *path)
{
	return path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
}

int pdma_gpu_load(struct pdma_gpu_ops *ops, void **handle)
{
	return pdma_gpu_load_module(MODULE, "PEERDMA_VRT_CUDA", ops, handle);
}

/* dir/rel/module */
static void *try_dir(const char *dir, const char *rel, const char *module)
{
	char path[PATH_MAX * 2];

	snprintf(path, sizeof(path), "%s/%s%s%s", dir, rel, *rel ? "/" : "", module);
	return try_open(path);
}

#ifndef PDMA_BIN_TO_LIB
#define PDMA_BIN_TO_LIB "../lib"
#endif

int pdma_gpu_load_module(const char *module, const char *env, struct pdma_gpu_ops *ops, void **handle)
{
	char exe[PATH_MAX];
	void *h = NULL;
	Dl_info di;

	if (!cuda_device_present())
		return -ENODEV;
	h = try_open(getenv(env));
	/* Beside the object this loader is in: an installed
	 * libpeerdma_ingest.so and the module share the libdir. Then the
	 * executable's install, and the build tree's layout. */
	if (!h && dladdr((void *)pdma_gpu_load_module, &di) && di.dli_fname && strchr(di.dli_fname, '/')) {
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s", di.dli_fname);
		*strrchr(dir, '/') = 0;
		h = try_dir(dir, "", module);
	}
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (!h && n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		/* the installed tool (statically linked): its install's libdir */
		if (slash) {
			*slash = 0;
			h = try_dir(exe, PDMA_BIN_TO_LIB, module);
			*slash = '/';
		}
		for (int up = 0; !h && slash && up < 3; up++) {
			char path[PATH_MAX + 64];

			*slash = 0;
			snprintf(path, sizeof(path), "%s/%s", exe, module);
			h = try_open(path);
			slash = strrchr(exe, '/');
		}
	}
	if (!h)
		h = try_open(module);
	if (!h)
		return -ENOENT;
	pdma_vrt_cuda_api_fn fn = (pdma_vrt_cuda_api_fn)dlsym(h, "pdma_vrt_cuda_api");
	memset(ops, 0, sizeof(*ops));
	if (!fn || fn(ops, PDMA_GPU_API_VERSION) != 0) {
		dlclose(h);
		return -EPROTO;
	}
	*handle = h;
	return 0;
}

void pdma_gpu_unload(void *handle)
{
	if (handle)
		dlclose(handle);
}
