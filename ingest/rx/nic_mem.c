// SPDX-License-Identifier: MIT
/* GPU memory for a NIC (rx/nic_mem.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "rx/nic_mem.h"

#define GPU_PAGE (64u << 10)

int pdma_nic_fail(char *msg, size_t msglen, int err, const char *fmt, ...)
{
	if (msg && msglen) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(msg, msglen, fmt, ap);
		va_end(ap);
	}
	return err;
}

static int cu_fail(char *msg, size_t msglen, const char *what, pdma_cu_result r)
{
	return pdma_nic_fail(msg, msglen, pdma_cu_errno(r), "%s failed: %s", what, pdma_cu_errname(r));
}

int pdma_nic_mem_open(struct pdma_nic_mem *m, struct pdma_domain *dom, int cuda_device,
		      uint64_t bytes, uint64_t access, char *msg, size_t msglen)
{
	pdma_cu_result r;
	int ret;

	memset(m, 0, sizeof(*m));
	m->dma.kernel_fd = -1;
	ret = pdma_cu_get(&m->cu, msg, msglen);
	if (ret)
		return ret;
	r = m->cu->Init(0);
	if (r == PDMA_CU_SUCCESS)
		r = m->cu->DeviceGet(&m->dev, cuda_device);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(msg, msglen, "CUDA device", r);
	r = m->cu->DevicePrimaryCtxRetain(&m->ctx, m->dev);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(msg, msglen, "cuDevicePrimaryCtxRetain", r);
	m->ctx_retained = true;
	m->cu->CtxSetCurrent(m->ctx);
	m->bytes = (bytes + GPU_PAGE - 1) & ~(uint64_t)(GPU_PAGE - 1);
	r = m->cu->MemAlloc(&m->region, m->bytes);
	if (r != PDMA_CU_SUCCESS) {
		m->region = 0;
		return cu_fail(msg, msglen, "cuMemAlloc", r);
	}
	m->addr = m->region;
	/* zeroed: nothing stale reads as a frame */
	r = m->cu->MemsetD8(m->region, 0, m->bytes);
	if (r != PDMA_CU_SUCCESS)
		return cu_fail(msg, msglen, "cuMemsetD8", r);

	struct iovec iov = { (void *)(uintptr_t)m->region, m->bytes };
	struct pdma_mr_attr a = {
		.mr_iov = &iov,
		.iov_count = 1,
		.access = access,
		.iface = PDMA_HMEM_CUDA,
		.device = cuda_device,
	};
	ret = pdma_mr_regattr(dom, &a, 0, &m->mr);
	if (ret) {
		m->mr = NULL;
		return pdma_nic_fail(msg, msglen, ret, "registering the GPU memory: %s",
				     pdma_strerror(ret));
	}
	ret = pdma_mr_dma(m->mr, 0, &m->dma);
	if (ret || m->dma.kernel_fd < 0)
		return pdma_nic_fail(msg, msglen, ret ? ret : -ENOENT,
				     "the GPU memory has no kernel pin (%s): open the domain with a kernel device",
				     pdma_strerror(ret ? ret : -ENOENT));
	return 0;
}

void pdma_nic_mem_enter(const struct pdma_nic_mem *m)
{
	m->cu->CtxSetCurrent(m->ctx);
}

void pdma_nic_mem_free(struct pdma_nic_mem *m)
{
	if (m->region)
		m->cu->MemFree(m->region);
	m->region = 0;
}

void pdma_nic_mem_close(struct pdma_nic_mem *m)
{
	if (m->mr)
		pdma_mr_close(m->mr);
	m->mr = NULL;
	if (m->region) {
		pdma_nic_mem_enter(m);
		pdma_nic_mem_free(m);
	}
	if (m->ctx_retained)
		m->cu->DevicePrimaryCtxRelease(m->dev);
	m->ctx_retained = false;
}
