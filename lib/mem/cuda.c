// SPDX-License-Identifier: MIT
/*
 * The cuda memory backend: see cuda.h for what it does and why, cuda_int.h
 * for how its files divide it. This one: the driver, devices, logging,
 * pointer classification, the flush rule and the tag check.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/cuda_int.h"
#include "monitor/monitor.h"

static _Thread_local char last_err[320];

const char *pdma_cuda_last_error(void)
{
	return last_err;
}

/* Level <= 4 (error, warning) also becomes pdma_cuda_last_error(). */
void pdma_cuda_log(struct pdma_cuda *ctx, int level, const char *fmt, ...)
{
	char buf[sizeof(last_err)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (level <= 4)
		memcpy(last_err, buf, sizeof(buf));
	if (ctx && ctx->log)
		ctx->log(ctx->log_arg, level, buf);
}

int pdma_cuda_cu_fail(struct pdma_cuda *ctx, const char *what, pdma_cu_result r)
{
	pdma_cuda_log(ctx, 3, "cuda: %s failed: %s", what, pdma_cu_errname(r));
	return pdma_cu_errno(r);
}

/* ------------------------------------------------------------------ open */

static int dev_attr(struct pdma_cuda *ctx, int dev, int attr)
{
	int v = 0;

	if (ctx->api->DeviceGetAttribute(&v, attr, dev) != PDMA_CU_SUCCESS)
		return 0;
	return v;
}

static void ctx_free(struct pdma_cuda *ctx)
{
	for (int i = 0; i < ctx->ndev; i++)
		if (ctx->primary && ctx->primary[i])
			ctx->api->DevicePrimaryCtxRelease(i);
	free(ctx->primary);
	free(ctx->devs);
	free(ctx);
}

void pdma_cuda_ctx_put(struct pdma_cuda *ctx)
{
	if (atomic_fetch_sub(&ctx->refs, 1) == 1)
		ctx_free(ctx);
}

/* Pins still live (e.g. regions a cache releases later) keep the context until
 * their unpin. */
void pdma_cuda_close(struct pdma_cuda *ctx)
{
	if (ctx)
		pdma_cuda_ctx_put(ctx);
}

int pdma_cuda_open(struct pdma_cuda **out)
{
	struct pdma_cuda *ctx;
	char msg[256] = "";
	pdma_cu_result r;
	int ret, n = 0;

	*out = NULL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	atomic_init(&ctx->refs, 1);
	ret = pdma_cu_get(&ctx->api, msg, sizeof(msg));
	if (ret) {
		snprintf(last_err, sizeof(last_err), "%s", msg);
		free(ctx);
		return ret;
	}
	r = ctx->api->DeviceGetCount(&n);
	if (r != PDMA_CU_SUCCESS || n <= 0) {
		snprintf(last_err, sizeof(last_err),
			 "CUDA driver loaded but no CUDA device is usable (%s)",
			 r ? pdma_cu_errname(r) : "0 devices");
		free(ctx);
		return -ENODEV;
	}
	ctx->primary = calloc((size_t)n, sizeof(*ctx->primary));
	ctx->devs = calloc((size_t)n, sizeof(*ctx->devs));
	if (!ctx->primary || !ctx->devs) {
		free(ctx->primary);
		free(ctx->devs);
		free(ctx);
		return -ENOMEM;
	}
	ctx->ndev = n;
	for (int i = 0; i < n; i++) {
		struct pdma_cuda_dev_info *d = &ctx->devs[i];

		d->ordinal = i;
		if (ctx->api->DeviceGetName(d->name, (int)sizeof(d->name), i) != PDMA_CU_SUCCESS)
			snprintf(d->name, sizeof(d->name), "CUDA device %d", i);
		if (ctx->api->DeviceGetPCIBusId(d->pci_bus_id, (int)sizeof(d->pci_bus_id), i) !=
		    PDMA_CU_SUCCESS)
			d->pci_bus_id[0] = 0;
		for (char *p = d->pci_bus_id; *p; p++)
			if (*p >= 'A' && *p <= 'F')
				*p = (char)(*p - 'A' + 'a');
		d->cc_major = dev_attr(ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
		d->cc_minor = dev_attr(ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
		d->gdr_supported = dev_attr(ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
		d->dmabuf_supported = dev_attr(ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
		d->writes_ordering =
			dev_attr(ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING);
		d->flush_options =
			dev_attr(ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS);
		d->vmm_gdr_supported = dev_attr(
			ctx, i, PDMA_CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED);
		r = ctx->api->DevicePrimaryCtxRetain(&ctx->primary[i], i);
		if (r != PDMA_CU_SUCCESS) {
			ret = pdma_cuda_cu_fail(ctx, "cuDevicePrimaryCtxRetain", r);
			snprintf(last_err, sizeof(last_err),
				 "CUDA device %d unusable: cuDevicePrimaryCtxRetain failed: %s", i,
				 pdma_cu_errname(r));
			ctx->primary[i] = NULL;
			pdma_cuda_close(ctx);
			return ret == -ENOMEM ? -ENOMEM : -ENODEV;
		}
	}
	pdma_cuda_hooks_attach();
	last_err[0] = 0;
	*out = ctx;
	return 0;
}

void pdma_cuda_set_log(struct pdma_cuda *ctx, pdma_log_fn fn, void *arg)
{
	ctx->log = fn;
	ctx->log_arg = arg;
}

int pdma_cuda_device_count(struct pdma_cuda *ctx)
{
	return ctx->ndev;
}

int pdma_cuda_driver_version(struct pdma_cuda *ctx)
{
	return ctx->api->driver_version;
}

int pdma_cuda_device_info(struct pdma_cuda *ctx, int ordinal, struct pdma_cuda_dev_info *info)
{
	if (ordinal < 0 || ordinal >= ctx->ndev)
		return -ENODEV;
	*info = ctx->devs[ordinal];
	return 0;
}

void pdma_cuda_get_stats(struct pdma_cuda *ctx, struct pdma_cuda_stats *st)
{
	st->sync_memops = atomic_load(&ctx->st_sync);
	st->dmabuf_export = atomic_load(&ctx->st_export);
	st->pins = atomic_load(&ctx->st_pins);
	st->unpins = atomic_load(&ctx->st_unpins);
	st->revoked = atomic_load(&ctx->st_revoked);
	st->flushes = atomic_load(&ctx->st_flushes);
	st->tag_stale = atomic_load(&ctx->st_stale);
}

/* Make a context current for calls that need one, if the thread has none:
 * the primary context of device dev. Returns true if one was pushed. */
bool pdma_cuda_ctx_enter(struct pdma_cuda *ctx, int dev)
{
	pdma_cu_ctx cur = NULL;

	if (ctx->api->CtxGetCurrent(&cur) == PDMA_CU_SUCCESS && cur)
		return false;
	if (dev < 0 || dev >= ctx->ndev)
		dev = 0;
	return ctx->api->CtxPushCurrent(ctx->primary[dev]) == PDMA_CU_SUCCESS;
}

void pdma_cuda_ctx_leave(struct pdma_cuda *ctx, bool pushed)
{
	pdma_cu_ctx c;

	if (pushed)
		ctx->api->CtxPopCurrent(&c);
}

/* -------------------------------------------------------------- pdma_cuda_classify_at */

int pdma_cuda_classify_at(struct pdma_cuda *ctx, uint64_t addr, struct pdma_cuda_ptr_info *info,
			  enum cl_level level)
{
	unsigned int memtype = 0, managed = 0, sync = 0;
	unsigned long long buffer_id = 0;
	int ordinal = -1;
	pdma_cu_ptr start = 0;
	size_t size = 0;
	int attrs[CL_FULL] = {
		PDMA_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      PDMA_CU_POINTER_ATTRIBUTE_IS_MANAGED,
		PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID,        PDMA_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
		PDMA_CU_POINTER_ATTRIBUTE_RANGE_SIZE,       PDMA_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
	};
	void *data[CL_FULL] = { &memtype, &managed, &buffer_id, &start, &size, &ordinal, &sync };
	pdma_cu_result r;

	memset(info, 0, sizeof(*info));
	info->device = -1;
	if (!addr) {
		pdma_cuda_log(ctx, 3, "cuda: NULL pointer");
		return -EFAULT;
	}
	/* Unlike cuPointerGetAttribute, this call succeeds on pointers CUDA does
	 * not know and leaves their attributes zero. */
	r = ctx->api->PointerGetAttributes((unsigned)level, attrs, data, (pdma_cu_ptr)addr);
	if (r != PDMA_CU_SUCCESS)
		return pdma_cuda_cu_fail(ctx, "cuPointerGetAttributes", r);
	info->buffer_id = buffer_id;
	info->device = ordinal;
	info->sync_memops = sync != 0;
	if (managed) {
		info->kind = PDMA_CUDA_KIND_MANAGED;
	} else if (memtype == PDMA_CU_MEMORYTYPE_DEVICE) {
		info->kind = PDMA_CUDA_KIND_DEVICE;
	} else if (memtype == PDMA_CU_MEMORYTYPE_HOST) {
		info->kind = PDMA_CUDA_KIND_HOST;
	} else {
		info->kind = PDMA_CUDA_KIND_UNKNOWN;
		info->device = -1;
		return 0;
	}
	if (level >= CL_ALLOC && !size && info->kind == PDMA_CUDA_KIND_DEVICE) {
		/* Older drivers: no range attributes. */
		bool pushed = pdma_cuda_ctx_enter(ctx, ordinal);

		r = ctx->api->MemGetAddressRange(&start, &size, (pdma_cu_ptr)addr);
		pdma_cuda_ctx_leave(ctx, pushed);
		if (r != PDMA_CU_SUCCESS)
			return pdma_cuda_cu_fail(ctx, "cuMemGetAddressRange", r);
	}
	info->base = start;
	info->size = size;
	return 0;
}

int pdma_cuda_classify(struct pdma_cuda *ctx, uint64_t addr, struct pdma_cuda_ptr_info *info)
{
	return pdma_cuda_classify_at(ctx, addr, info, CL_FULL);
}


int pdma_cuda_check_range(struct pdma_cuda *ctx, const struct pdma_cuda_ptr_info *in, uint64_t addr,
			  size_t len, uint64_t end_limit)
{
	if (!len || addr + len < addr || addr < in->base || addr + len > end_limit) {
		pdma_cuda_log(ctx, 3,
			 "cuda: range [%#llx, +%zu) is not inside one allocation (allocation [%#llx, +%zu))",
			 (unsigned long long)addr, len, (unsigned long long)in->base, in->size);
		return -EFAULT;
	}
	return 0;
}

/* pdma_cuda_ops_for and, with alloc, pdma_cuda_ops_query: the range
 * attributes are then asked for in the same driver call, and GPU memory gets
 * pdma_mem_cuda_query's checks on them. */
static int ops_classify(struct pdma_cuda *ctx, uint64_t addr, size_t len, const struct pdma_mem_ops **ops,
			struct pdma_mem_alloc *alloc)
{
	struct pdma_cuda_ptr_info in;
	int ret = pdma_cuda_classify_at(ctx, addr, &in, alloc ? CL_ALLOC : CL_KIND);

	if (ret)
		return ret;
	switch (in.kind) {
	case PDMA_CUDA_KIND_DEVICE:
		*ops = &pdma_mem_cuda_ops;
		if (!alloc)
			return 0;
		ret = pdma_cuda_check_range(ctx, &in, addr, len, in.base + in.size);
		if (ret)
			return ret;
		pdma_cuda_alloc_from_info(alloc, &in);
		return 1;
	case PDMA_CUDA_KIND_HOST:
	case PDMA_CUDA_KIND_UNKNOWN:
		*ops = &pdma_mem_cuda_host_ops;
		return 0;
	case PDMA_CUDA_KIND_MANAGED:
	default:
		pdma_cuda_log(ctx, 3, PDMA_CUDA_MANAGED_MSG, (unsigned long long)addr);
		return -EINVAL;
	}
}

int pdma_cuda_ops_for(struct pdma_cuda *ctx, uint64_t addr, size_t len,
		      const struct pdma_mem_ops **ops)
{
	return ops_classify(ctx, addr, len, ops, NULL);
}

int pdma_cuda_ops_query(struct pdma_cuda *ctx, uint64_t addr, size_t len,
			const struct pdma_mem_ops **ops, struct pdma_mem_alloc *alloc)
{
	return ops_classify(ctx, addr, len, ops, alloc);
}

/* ------------------------------------------------------- flush, tag check */

int pdma_cuda_flush_rdma_writes(struct pdma_cuda *ctx, int ordinal)
{
	const struct pdma_cuda_dev_info *d;
	pdma_cu_result r;
	bool pushed = false;
	pdma_cu_ctx c;

	if (ordinal < 0 || ordinal >= ctx->ndev)
		return -ENODEV;
	d = &ctx->devs[ordinal];
	if (d->writes_ordering >= PDMA_CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER)
		return 0;
	if (!(d->flush_options & PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST) ||
	    !ctx->api->FlushGPUDirectRDMAWrites) {
		pdma_cuda_log(ctx, 3,
			 "cuda: device %d needs a flush of GPUDirect RDMA writes but cannot flush from the host",
			 ordinal);
		return -EOPNOTSUPP;
	}
	/* The flush targets the current context: make it device ordinal's. */
	if (ctx->api->CtxPushCurrent(ctx->primary[ordinal]) == PDMA_CU_SUCCESS)
		pushed = true;
	r = ctx->api->FlushGPUDirectRDMAWrites(PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
					       PDMA_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
	if (pushed)
		ctx->api->CtxPopCurrent(&c);
	if (r != PDMA_CU_SUCCESS)
		return pdma_cuda_cu_fail(ctx, "cuFlushGPUDirectRDMAWrites", r);
	atomic_fetch_add_explicit(&ctx->st_flushes, 1, memory_order_relaxed);
	return 1;
}

int pdma_cuda_tag_check(struct pdma_cuda *ctx, uint64_t addr, uint64_t buffer_id)
{
	unsigned long long id = 0;
	pdma_cu_result r;

	r = ctx->api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID,
					  (pdma_cu_ptr)addr);
	if (r == PDMA_CU_SUCCESS && id == buffer_id && id != 0)
		return 0;
	atomic_fetch_add_explicit(&ctx->st_stale, 1, memory_order_relaxed);
	return -ESTALE;
}

