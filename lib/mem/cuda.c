// SPDX-License-Identifier: MIT
/*
 * The cuda memory backend: see mem_cuda.h for what it does and why.
 *
 * Live pins sit on one process-wide list so that the deallocation hooks
 * (monitor_cuda.c), which know no domain, can revoke them before the memory
 * is released. The list is touched by pin, unpin and the hooks only: never
 * on a cache hit. A pin joins it (pending) before the driver is asked about
 * its memory, and releases in progress are listed too, so that a free racing
 * with a pin makes the pin fail (-EFAULT) rather than outlive the memory.
 * Revocation callbacks run without the list's lock (they wait for DMA).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/api.h"
#include "mem/cuda.h"
#include "monitor/monitor.h"

#define HOST_PAGE 4096u

struct pdma_cuda {
	const struct pdma_cu_api *api;
	int ndev;
	pdma_cu_ctx *primary;           /* retained primary context per device */
	struct pdma_cuda_dev_info *devs;
	pdma_log_fn log;
	void *log_arg;
	atomic_int refs;                /* the opener's + one per live pin */
	atomic_uint_fast64_t st_sync, st_export, st_pins, st_unpins, st_revoked, st_flushes,
		st_stale;
};

struct cuda_pin {
	struct cuda_pin *prev, *next;   /* on pins_head, under pins_lock */
	struct pdma_cuda *ctx;
	enum pdma_cuda_pin_kind kind;
	uint64_t va;
	size_t len;
	int device;
	uint64_t buffer_id;
	uint64_t alloc_base;            /* the allocation the pin belongs to */
	size_t alloc_size;
	void *cuctx;                    /* its CUDA context */
	int fd;                         /* dma-buf, -1 if none or closed */
	uint64_t dmabuf_start;
	size_t dmabuf_len;
	bool revoked;                   /* under pins_lock */
	bool pending;                   /* being pinned: the hooks only mark it revoked */
	int revoking;                   /* callbacks running outside the lock */
	struct cuda_pin *rnext;         /* on a revocation's queue */
	pdma_mem_revoke_fn revoke;
	void *arg;
};

static pthread_mutex_t pins_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pins_cond = PTHREAD_COND_INITIALIZER;
/* Releases in progress (between a hook's start and the driver's return):
 * a pin of their memory that is in progress meanwhile fails. */
static struct pdma_cuda_release *releasing;

/* [b, e) overlaps [addr, addr + len), len saturating at the top. */
static bool overlaps(uint64_t b, uint64_t e, uint64_t addr, size_t len)
{
	uint64_t end = addr + len < addr ? UINT64_MAX : addr + len;

	return b < end && addr < e;
}
static struct cuda_pin pins_head = { .prev = &pins_head, .next = &pins_head };

static _Thread_local char last_err[320];

const char *pdma_cuda_last_error(void)
{
	return last_err;
}

static void cuda_log(struct pdma_cuda *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Level <= 4 (error, warning) also becomes pdma_cuda_last_error(). */
static void cuda_log(struct pdma_cuda *ctx, int level, const char *fmt, ...)
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

static int cu_fail(struct pdma_cuda *ctx, const char *what, pdma_cu_result r)
{
	cuda_log(ctx, 3, "cuda: %s failed: %s", what, pdma_cu_errname(r));
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

static void ctx_put(struct pdma_cuda *ctx)
{
	if (atomic_fetch_sub(&ctx->refs, 1) == 1)
		ctx_free(ctx);
}

/* Pins still live (e.g. regions a cache releases later) keep the context until
 * their unpin. */
void pdma_cuda_close(struct pdma_cuda *ctx)
{
	if (ctx)
		ctx_put(ctx);
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
			ret = cu_fail(ctx, "cuDevicePrimaryCtxRetain", r);
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
static bool ctx_enter(struct pdma_cuda *ctx, int dev)
{
	pdma_cu_ctx cur = NULL;

	if (ctx->api->CtxGetCurrent(&cur) == PDMA_CU_SUCCESS && cur)
		return false;
	if (dev < 0 || dev >= ctx->ndev)
		dev = 0;
	return ctx->api->CtxPushCurrent(ctx->primary[dev]) == PDMA_CU_SUCCESS;
}

static void ctx_leave(struct pdma_cuda *ctx, bool pushed)
{
	pdma_cu_ctx c;

	if (pushed)
		ctx->api->CtxPopCurrent(&c);
}

/* -------------------------------------------------------------- classify */

/* How much to ask the driver (prefixes of one attribute list, one call):
 * kind (ops_for), allocation (query: adds buffer ID and range), full (pin:
 * adds device ordinal and SYNC_MEMOPS). Measured on the H100 (bench_cuda):
 * fewer attributes, cheaper call. */
enum cl_level { CL_KIND = 2, CL_ALLOC = 5, CL_FULL = 7 };

static int classify(struct pdma_cuda *ctx, uint64_t addr, struct pdma_cuda_ptr_info *info,
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
		cuda_log(ctx, 3, "cuda: NULL pointer");
		return -EFAULT;
	}
	/* Unlike cuPointerGetAttribute, this call succeeds on pointers CUDA does
	 * not know and leaves their attributes zero. */
	r = ctx->api->PointerGetAttributes((unsigned)level, attrs, data, (pdma_cu_ptr)addr);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(ctx, "cuPointerGetAttributes", r);
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
		bool pushed = ctx_enter(ctx, ordinal);

		r = ctx->api->MemGetAddressRange(&start, &size, (pdma_cu_ptr)addr);
		ctx_leave(ctx, pushed);
		if (r != PDMA_CU_SUCCESS)
			return cu_fail(ctx, "cuMemGetAddressRange", r);
	}
	info->base = start;
	info->size = size;
	return 0;
}

int pdma_cuda_classify(struct pdma_cuda *ctx, uint64_t addr, struct pdma_cuda_ptr_info *info)
{
	return classify(ctx, addr, info, CL_FULL);
}

static const char managed_msg[] =
	"cuda: %#llx is CUDA managed (unified) memory: refused for device DMA (its pages migrate; "
	"third-party DMA to it can read stale data or lose writes): use cuMemAlloc/cudaMalloc memory";

static int check_range(struct pdma_cuda *ctx, const struct pdma_cuda_ptr_info *in, uint64_t addr,
		       size_t len, uint64_t end_limit)
{
	if (!len || addr + len < addr || addr < in->base || addr + len > end_limit) {
		cuda_log(ctx, 3,
			 "cuda: range [%#llx, +%zu) is not inside one allocation (allocation [%#llx, +%zu))",
			 (unsigned long long)addr, len, (unsigned long long)in->base, in->size);
		return -EFAULT;
	}
	return 0;
}

int pdma_cuda_ops_for(struct pdma_cuda *ctx, uint64_t addr, size_t len,
		      const struct pdma_mem_ops **ops)
{
	struct pdma_cuda_ptr_info in;
	int ret = classify(ctx, addr, &in, CL_KIND);

	(void)len;
	if (ret)
		return ret;
	switch (in.kind) {
	case PDMA_CUDA_KIND_DEVICE:
		*ops = &pdma_mem_cuda_ops;
		return 0;
	case PDMA_CUDA_KIND_HOST:
	case PDMA_CUDA_KIND_UNKNOWN:
		*ops = &pdma_mem_cuda_host_ops;
		return 0;
	case PDMA_CUDA_KIND_MANAGED:
	default:
		cuda_log(ctx, 3, managed_msg, (unsigned long long)addr);
		return -EINVAL;
	}
}

/* ------------------------------------------------------------ GPU memory */

static void alloc_from_info(struct pdma_mem_alloc *alloc, const struct pdma_cuda_ptr_info *in)
{
	alloc->base = in->base;
	alloc->size = in->size;
	alloc->buffer_id = in->buffer_id;
}

/* Is the classified pointer GPU memory that may be pinned? */
static int gpu_kind_ok(struct pdma_cuda *ctx, const struct pdma_cuda_ptr_info *in, uint64_t addr)
{
	switch (in->kind) {
	case PDMA_CUDA_KIND_DEVICE:
		return 0;
	case PDMA_CUDA_KIND_MANAGED:
		cuda_log(ctx, 3, managed_msg, (unsigned long long)addr);
		return -EINVAL;
	case PDMA_CUDA_KIND_HOST:
		cuda_log(ctx, 3,
			 "cuda: %#llx is page-locked host memory, not GPU memory: register it through the host path (pdma_cuda_ops_for)",
			 (unsigned long long)addr);
		return -EINVAL;
	default:
		cuda_log(ctx, 3, "cuda: %#llx is not CUDA memory", (unsigned long long)addr);
		return -EFAULT;
	}
}

static int gpu_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	int ret = classify(ctx, addr, &in, CL_ALLOC);

	if (!ret)
		ret = gpu_kind_ok(ctx, &in, addr);
	if (!ret)
		ret = check_range(ctx, &in, addr, len, in.base + in.size);
	if (!ret)
		alloc_from_info(alloc, &in);
	return ret;
}

/*
 * A pin joins the live list before the driver is asked anything about its
 * memory, marked pending: a free racing with the pin (between classification
 * and the end of pin) then finds it, marks it revoked, and the pin fails with
 * -EFAULT instead of handing out a registration of freed memory. Until it is
 * committed its match range is the requested range itself.
 */
static struct cuda_pin *pin_begin(struct pdma_cuda *ctx, uint64_t addr, size_t len,
				  pdma_mem_revoke_fn revoke, void *arg)
{
	struct cuda_pin *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->ctx = ctx;
	p->va = addr;
	p->len = len;
	p->device = -1;
	p->alloc_base = addr;
	p->alloc_size = len;
	p->fd = -1;
	p->revoke = revoke;
	p->arg = arg;
	p->pending = true;
	pthread_mutex_lock(&pins_lock);
	/* Its memory is being released right now: the pin will fail. */
	for (struct pdma_cuda_release *r = releasing; r; r = r->next)
		if (overlaps(addr, addr + len, r->addr, r->len))
			p->revoked = true;
	p->next = &pins_head;
	p->prev = pins_head.prev;
	pins_head.prev->next = p;
	pins_head.prev = p;
	pthread_mutex_unlock(&pins_lock);
	return p;
}

/* The pin failed: take it off the list and free it (its dma-buf, its host
 * registration). */
static void pin_abort(struct cuda_pin *p)
{
	pthread_mutex_lock(&pins_lock);
	p->prev->next = p->next;
	p->next->prev = p->prev;
	pthread_mutex_unlock(&pins_lock);
	if (p->fd >= 0)
		close(p->fd);
	if (p->kind == PDMA_CUDA_PIN_HOST_REGISTERED) {
		bool pushed = ctx_enter(p->ctx, 0);

		p->ctx->api->MemHostUnregister((void *)(uintptr_t)p->va);
		ctx_leave(p->ctx, pushed);
	}
	free(p);
}

/* The pin failed with ret: -EFAULT instead if its memory was released
 * meanwhile (the driver's error is then a consequence of that). */
static int pin_fail(struct cuda_pin *p, int ret)
{
	bool raced;

	pthread_mutex_lock(&pins_lock);
	raced = p->revoked;
	pthread_mutex_unlock(&pins_lock);
	if (raced) {
		cuda_log(p->ctx, 4, "cuda: [%#llx, +%zu) was freed while it was being pinned",
			 (unsigned long long)p->va, p->len);
		ret = -EFAULT;
	}
	pin_abort(p);
	return ret;
}

/* Publish what classification found (the hooks read it). */
static void pin_set_alloc(struct cuda_pin *p, const struct pdma_cuda_ptr_info *in, void *cuctx)
{
	pthread_mutex_lock(&pins_lock);
	p->device = in->device;
	p->buffer_id = in->buffer_id;
	p->alloc_base = in->base;
	p->alloc_size = in->size;
	p->cuctx = cuctx;
	pthread_mutex_unlock(&pins_lock);
}

/* 0, or -EFAULT if the memory was freed while it was being pinned. */
static int pin_commit(struct cuda_pin *p)
{
	struct pdma_cuda *ctx = p->ctx;
	bool raced;

	pthread_mutex_lock(&pins_lock);
	raced = p->revoked;
	if (!raced)
		p->pending = false;
	pthread_mutex_unlock(&pins_lock);
	if (raced) {
		cuda_log(ctx, 4, "cuda: [%#llx, +%zu) was freed while it was being pinned",
			 (unsigned long long)p->va, p->len);
		pin_abort(p);
		return -EFAULT;
	}
	atomic_fetch_add_explicit(&ctx->st_pins, 1, memory_order_relaxed);
	atomic_fetch_add(&ctx->refs, 1);
	return 0;
}

static int dmabuf_enabled(void)
{
	const char *e = getenv("PEERDMA_CUDA_DMABUF");

	return !(e && !strcmp(e, "0"));
}

/* Export [start, start + len) as a dma-buf. The driver wants host-page
 * alignment and a range inside the allocation: a pin rounded out to 64 KiB may
 * pass the end of an allocation whose size is not a multiple of 64 KiB (the GPU
 * page behind it is still the allocation's), so retry up to the allocation's
 * end rounded to a host page. */
static int export_dmabuf(struct pdma_cuda *ctx, struct cuda_pin *p)
{
	uint64_t alloc_end = p->alloc_base + p->alloc_size;
	pdma_cu_result r;
	bool pushed;
	int fd = -1;

	p->dmabuf_start = p->va;
	p->dmabuf_len = p->len;
	pushed = ctx_enter(ctx, p->device);
	r = ctx->api->MemGetHandleForAddressRange(&fd, p->va, p->len,
						  PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r == PDMA_CU_ERROR_INVALID_VALUE && p->va + p->len > alloc_end) {
		uint64_t end = (alloc_end + HOST_PAGE - 1) & ~(uint64_t)(HOST_PAGE - 1);

		p->dmabuf_len = (size_t)(end - p->va);
		r = ctx->api->MemGetHandleForAddressRange(&fd, p->va, p->dmabuf_len,
							  PDMA_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	}
	ctx_leave(ctx, pushed);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(ctx, "cuMemGetHandleForAddressRange (dma-buf export)", r);
	p->fd = fd;
	atomic_fetch_add_explicit(&ctx->st_export, 1, memory_order_relaxed);
	return 0;
}

static int gpu_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		   void **pin)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	struct cuda_pin *p;
	uint64_t end_limit;
	void *cuctx = NULL;
	int ret;

	if (!len || ((addr | len) & (PDMA_CUDA_GPU_PAGE - 1))) {
		cuda_log(ctx, 3, "cuda: pin of [%#llx, +%zu): not whole 64 KiB GPU pages",
			 (unsigned long long)addr, len);
		return -EINVAL;
	}
	p = pin_begin(ctx, addr, len, revoke, arg);
	if (!p)
		return -ENOMEM;
	ret = pdma_cuda_classify(ctx, addr, &in);
	if (!ret)
		ret = gpu_kind_ok(ctx, &in, addr);
	if (ret)
		goto fail;
	/* The last GPU page of the allocation is the allocation's own. */
	end_limit = (in.base + in.size + PDMA_CUDA_GPU_PAGE - 1) & ~(uint64_t)(PDMA_CUDA_GPU_PAGE - 1);
	ret = check_range(ctx, &in, addr, len, end_limit);
	if (ret)
		goto fail;
	/* The guide: SYNC_MEMOPS on memory a third party will DMA into, so that
	 * synchronous CUDA memory operations on it complete before returning. */
	if (!in.sync_memops) {
		unsigned int one = 1;
		pdma_cu_result r = ctx->api->PointerSetAttribute(
			&one, PDMA_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (pdma_cu_ptr)in.base);

		if (r != PDMA_CU_SUCCESS) {
			ret = cu_fail(ctx, "cuPointerSetAttribute(SYNC_MEMOPS)", r);
			goto fail;
		}
		atomic_fetch_add_explicit(&ctx->st_sync, 1, memory_order_relaxed);
	}
	ctx->api->PointerGetAttribute(&cuctx, PDMA_CU_POINTER_ATTRIBUTE_CONTEXT, (pdma_cu_ptr)addr);
	pin_set_alloc(p, &in, cuctx);
	if (in.device >= 0 && in.device < ctx->ndev && ctx->devs[in.device].dmabuf_supported &&
	    ctx->api->MemGetHandleForAddressRange && dmabuf_enabled()) {
		p->kind = PDMA_CUDA_PIN_DMABUF;
		ret = export_dmabuf(ctx, p);
		if (ret)
			goto fail;
	} else {
		/* The kernel module pins va/len itself (nvidia_p2p_get_pages). */
		p->kind = PDMA_CUDA_PIN_NVP2P;
	}
	ret = pin_commit(p);
	if (ret)
		return ret;
	*pin = p;
	return 0;
fail:
	return pin_fail(p, ret);
}

static void cuda_unpin(void *be, void *pin)
{
	struct cuda_pin *p = pin;
	struct pdma_cuda *ctx = p->ctx;
	bool revoked;
	int fd;

	(void)be;
	pthread_mutex_lock(&pins_lock);
	while (p->revoking)
		pthread_cond_wait(&pins_cond, &pins_lock);
	p->prev->next = p->next;
	p->next->prev = p->prev;
	revoked = p->revoked;
	fd = p->fd;
	p->fd = -1;
	pthread_mutex_unlock(&pins_lock);
	if (fd >= 0)
		close(fd);
	if (p->kind == PDMA_CUDA_PIN_HOST_REGISTERED && !revoked) {
		bool pushed = ctx_enter(ctx, 0);
		pdma_cu_result r = ctx->api->MemHostUnregister((void *)(uintptr_t)p->va);

		ctx_leave(ctx, pushed);
		if (r != PDMA_CU_SUCCESS)
			cuda_log(ctx, 4, "cuda: cuMemHostUnregister(%#llx) failed: %s",
				 (unsigned long long)p->va, pdma_cu_errname(r));
	}
	atomic_fetch_add_explicit(&ctx->st_unpins, 1, memory_order_relaxed);
	free(p);
	ctx_put(ctx);
}

int pdma_cuda_pin_info(void *pin, struct pdma_cuda_pin_info *info)
{
	struct cuda_pin *p = pin;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&pins_lock);
	info->kind = p->kind;
	info->va = p->va;
	info->len = p->len;
	info->device = p->device;
	info->buffer_id = p->buffer_id;
	info->dmabuf_fd = p->fd;
	info->dmabuf_start = p->kind == PDMA_CUDA_PIN_DMABUF ? p->dmabuf_start : 0;
	info->dmabuf_len = p->kind == PDMA_CUDA_PIN_DMABUF ? p->dmabuf_len : 0;
	info->dmabuf_offset = p->kind == PDMA_CUDA_PIN_DMABUF ? p->va - p->dmabuf_start : 0;
	info->revoked = p->revoked;
	pthread_mutex_unlock(&pins_lock);
	return 0;
}

const struct pdma_mem_ops pdma_mem_cuda_ops = {
	.name = "cuda",
	.page_size = PDMA_CUDA_GPU_PAGE,
	.cpu_visible = false, /* GPU memory: not through a CPU pointer */
	.query = gpu_query,
	.pin = gpu_pin,
	.unpin = cuda_unpin,
};

/* ----------------------------------------------------------- host memory */

static int host_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *alloc)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	int ret = classify(ctx, addr, &in, CL_ALLOC);

	if (ret)
		return ret;
	switch (in.kind) {
	case PDMA_CUDA_KIND_HOST:
		ret = check_range(ctx, &in, addr, len, in.base + in.size);
		if (!ret)
			alloc_from_info(alloc, &in);
		return ret;
	case PDMA_CUDA_KIND_UNKNOWN:
		/* Plain host memory: the allocation is not known; the range is. */
		if (!len || addr + len < addr)
			return -EFAULT;
		pdma_page_round(HOST_PAGE, addr, len, &alloc->base, &alloc->size);
		alloc->buffer_id = 0;
		return 0;
	case PDMA_CUDA_KIND_MANAGED:
		cuda_log(ctx, 3, managed_msg, (unsigned long long)addr);
		return -EINVAL;
	default:
		cuda_log(ctx, 3, "cuda: %#llx is GPU memory, not host memory (use pdma_cuda_ops_for)",
			 (unsigned long long)addr);
		return -EINVAL;
	}
}

static int host_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **pin)
{
	struct pdma_cuda *ctx = be;
	struct pdma_cuda_ptr_info in;
	struct cuda_pin *p;
	int ret;

	if (!len || ((addr | len) & (HOST_PAGE - 1))) {
		cuda_log(ctx, 3, "cuda: host pin of [%#llx, +%zu): not whole pages",
			 (unsigned long long)addr, len);
		return -EINVAL;
	}
	ret = host_query(be, addr, len, &(struct pdma_mem_alloc){ 0 });
	if (ret)
		return ret;
	p = pin_begin(ctx, addr, len, revoke, arg);
	if (!p)
		return -ENOMEM;
	ret = classify(ctx, addr, &in, CL_ALLOC);
	if (ret)
		goto fail;
	if (in.kind == PDMA_CUDA_KIND_HOST) {
		p->kind = PDMA_CUDA_PIN_HOST_CUDA;
		pin_set_alloc(p, &in, NULL);
	} else if (in.kind == PDMA_CUDA_KIND_UNKNOWN) {
		ret = pdma_cuda_host_register(ctx, (void *)(uintptr_t)addr, len);
		if (ret)
			goto fail;
		p->kind = PDMA_CUDA_PIN_HOST_REGISTERED;
		if (!classify(ctx, addr, &in, CL_ALLOC)) {
			in.base = addr;
			in.size = len;
			pin_set_alloc(p, &in, NULL);
		}
	} else {
		ret = -EINVAL; /* changed kind since host_query: freed and reused */
		goto fail;
	}
	/* Host pins have no device: the context hooks leave them alone. */
	ret = pin_commit(p);
	if (ret)
		return ret;
	*pin = p;
	return 0;
fail:
	return pin_fail(p, ret);
}

const struct pdma_mem_ops pdma_mem_cuda_host_ops = {
	.name = "cuda-host",
	.page_size = HOST_PAGE,
	.cpu_visible = true,
	.query = host_query,
	.pin = host_pin,
	.unpin = cuda_unpin,
};

int pdma_cuda_host_register(struct pdma_cuda *ctx, void *p, size_t len)
{
	pdma_cu_result r;
	bool pushed = ctx_enter(ctx, 0);

	r = ctx->api->MemHostRegister(p, len,
				      PDMA_CU_MEMHOSTREGISTER_PORTABLE |
					      PDMA_CU_MEMHOSTREGISTER_DEVICEMAP);
	ctx_leave(ctx, pushed);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(ctx, "cuMemHostRegister", r);
	return 0;
}

int pdma_cuda_host_unregister(struct pdma_cuda *ctx, void *p)
{
	pdma_cu_result r;
	bool pushed = ctx_enter(ctx, 0);

	r = ctx->api->MemHostUnregister(p);
	ctx_leave(ctx, pushed);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(ctx, "cuMemHostUnregister", r);
	return 0;
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
		cuda_log(ctx, 3,
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
		return cu_fail(ctx, "cuFlushGPUDirectRDMAWrites", r);
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

/* ------------------------------------------------------------ revocation */

/*
 * Revocation runs the pins' callbacks (which quiesce their regions: they wait
 * for DMA sections in flight) without pins_lock, so that code inside a DMA
 * section may still look at pins. A pin being revoked is held on the list
 * (revoking > 0): its unpin waits until the callback has returned.
 */

/* Under pins_lock: mark p revoked, close its dma-buf, queue it on *list. */
static void revoke_mark(struct cuda_pin *p, struct cuda_pin **list)
{
	p->revoked = true;
	if (p->fd >= 0) {
		close(p->fd);
		p->fd = -1;
	}
	p->revoking++;
	p->rnext = *list;
	*list = p;
}

/* Without pins_lock: run the callbacks of the queued pins, then let go. */
static void revoke_run(struct cuda_pin *list)
{
	for (struct cuda_pin *p = list; p; p = p->rnext) {
		atomic_fetch_add_explicit(&p->ctx->st_revoked, 1, memory_order_relaxed);
		if (p->revoke)
			p->revoke(p->arg);
	}
	if (!list)
		return;
	pthread_mutex_lock(&pins_lock);
	for (struct cuda_pin *p = list, *n; p; p = n) {
		n = p->rnext;
		p->revoking--;
	}
	pthread_cond_broadcast(&pins_cond);
	pthread_mutex_unlock(&pins_lock);
}

void pdma_cuda_release_begin(struct pdma_cuda_release *rel, uint64_t addr, size_t len)
{
	struct cuda_pin *list = NULL;

	if (!len)
		len = 1;
	rel->addr = addr;
	rel->len = len;
	/* Caches first (they drop and revoke their regions), without holding
	 * pins_lock: their callbacks may unpin. */
	pdma_monitor_notify(PDMA_HMEM_CUDA, addr, len);
	pthread_mutex_lock(&pins_lock);
	rel->next = releasing;
	releasing = rel;
	for (struct cuda_pin *p = pins_head.next; p != &pins_head; p = p->next) {
		uint64_t b = p->alloc_base, e = p->alloc_base + (p->alloc_size ? p->alloc_size : p->len);

		if (p->revoked || !overlaps(b, e, addr, len))
			continue;
		if (p->pending)
			p->revoked = true; /* its pin() fails with -EFAULT */
		else
			revoke_mark(p, &list);
	}
	pthread_mutex_unlock(&pins_lock);
	revoke_run(list);
}

void pdma_cuda_release_end(struct pdma_cuda_release *rel)
{
	pthread_mutex_lock(&pins_lock);
	for (struct pdma_cuda_release **r = &releasing; *r; r = &(*r)->next) {
		if (*r == rel) {
			*r = rel->next;
			break;
		}
	}
	pthread_mutex_unlock(&pins_lock);
}

void pdma_cuda_invalidate(uint64_t addr, size_t len)
{
	struct pdma_cuda_release rel;

	pdma_cuda_release_begin(&rel, addr, len);
	pdma_cuda_release_end(&rel);
}

void pdma_cuda_release_context_begin(struct pdma_cuda_release *rel, const void *cuctx,
				     int device)
{
	struct range { uint64_t b; size_t l; } *v = NULL;
	struct cuda_pin *list = NULL;
	size_t n = 0, cap = 0;

	/* Every pin in progress meanwhile fails: its context is not known. */
	rel->addr = 0;
	rel->len = SIZE_MAX;

	/* Collect the ranges first: notify must not run under pins_lock. */
	pthread_mutex_lock(&pins_lock);
	for (struct cuda_pin *p = pins_head.next; p != &pins_head; p = p->next) {
		bool match = cuctx ? p->cuctx == cuctx : (device < 0 || p->device == device);

		if (p->revoked || p->pending || !match || p->device < 0)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct range *nv = realloc(v, nc * sizeof(*v));

			if (!nv)
				break;
			v = nv;
			cap = nc;
		}
		v[n].b = p->alloc_base;
		v[n].l = p->alloc_size ? p->alloc_size : p->len;
		n++;
	}
	pthread_mutex_unlock(&pins_lock);
	for (size_t i = 0; i < n; i++)
		pdma_monitor_notify(PDMA_HMEM_CUDA, v[i].b, v[i].l);
	free(v);
	pthread_mutex_lock(&pins_lock);
	rel->next = releasing;
	releasing = rel;
	for (struct cuda_pin *p = pins_head.next; p != &pins_head; p = p->next) {
		bool match = cuctx ? p->cuctx == cuctx : (device < 0 || p->device == device);

		if (p->revoked)
			continue;
		if (p->pending)
			p->revoked = true; /* its context is not known yet: -EFAULT */
		else if (match && p->device >= 0)
			revoke_mark(p, &list);
	}
	pthread_mutex_unlock(&pins_lock);
	revoke_run(list);
}

void pdma_cuda_invalidate_context(void *cuctx, int device)
{
	struct pdma_cuda_release rel;

	pdma_cuda_release_context_begin(&rel, cuctx, device);
	pdma_cuda_release_end(&rel);
}
