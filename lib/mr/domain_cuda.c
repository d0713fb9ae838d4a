// SPDX-License-Identifier: MIT
/*
 * The CUDA backend of a domain, opened at its first CUDA registration so a
 * process that never registers CUDA memory never loads libcuda. GPU memory is
 * registered through what pins it (lib/mem/cuda_kdev.c): peerdma.ko in a
 * domain with a kernel device, else its dma-buf export alone.
 */
#include <errno.h>

#include "mr/domain.h"
#include "mem/cuda.h"

static void cuda_log(void *arg, int level, const char *msg)
{
	pdma_log_msg(arg, level, msg);
}

static int cuda_open(struct pdma_domain *d, struct pdma_cuda **out)
{
	int ret = 0;

	pthread_mutex_lock(&d->cuda_lock);
	if (!d->cuda) {
		struct pdma_cuda *cu;

		ret = pdma_cuda_open(&cu);
		if (ret) {
			pdma_log(d, 1, "CUDA memory: %s", pdma_cuda_last_error());
		} else {
			/* Through the domain, so that a later
			 * pdma_domain_set_log reaches these lines too. */
			pdma_cuda_set_log(cu, cuda_log, d);
			d->cuda_kdev.kdev = d->kdev;
			d->cuda_kdev.cuda = cu;
			__atomic_store_n(&d->cuda, cu, __ATOMIC_RELEASE);
		}
	}
	*out = d->cuda;
	pthread_mutex_unlock(&d->cuda_lock);
	return ret;
}

int pdma_domain_cuda_backend(struct pdma_domain *d, int device, uint64_t addr, size_t len,
			     const struct pdma_mem_ops **ops, void **be, struct pdma_mem_alloc *alloc)
{
	struct pdma_cuda *cu;
	int queried = 0, ret;

	if (device < 0)
		return -EINVAL;
	/* Opened once; after that no lock: a mutex pair is two atomics, 9.5 ns
	 * each on the H100 machine's host (domain.h), on every registration of
	 * CUDA memory. cuda_open's release store publishes cuda_kdev too. */
	cu = __atomic_load_n(&d->cuda, __ATOMIC_ACQUIRE);
	if (!cu) {
		ret = cuda_open(d, &cu);
		if (ret)
			return ret;
	}
	*be = cu;
	if (!len) {
		*ops = &pdma_mem_cuda_ops;
	} else {
		/* GPU memory or host memory the GPU uses: the pointer decides. */
		ret = alloc ? pdma_cuda_ops_query(cu, addr, len, ops, alloc) :
			      pdma_cuda_ops_for(cu, addr, len, ops);
		if (ret > 0) {
			queried = 1;
			ret = 0;
		}
		if (ret) {
			pdma_log(d, 1, "CUDA memory at %#llx cannot be registered: %s",
				 (unsigned long long)addr, pdma_cuda_last_error());
			return ret;
		}
	}
	if (*ops == &pdma_mem_cuda_ops) {
		if (d->kdev) {
			*ops = &pdma_mem_cuda_kdev_ops;
			*be = &d->cuda_kdev;
		} else {
			*ops = &pdma_mem_cuda_export_ops;
		}
	}
	return queried;
}

void pdma_domain_backend_close(struct pdma_domain *d)
{
	if (d->cuda)
		pdma_cuda_close(d->cuda);
	d->cuda = NULL;
}
