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

int pdma_domain_cuda_backend(struct pdma_domain *d, int device, uint64_t addr, size_t len,
			     const struct pdma_mem_ops **ops, void **be, struct pdma_mem_alloc *alloc)
{
	int queried = 0, ret = 0;

	if (device < 0)
		return -EINVAL;
	pthread_mutex_lock(&d->cuda_lock);
	if (!d->cuda) {
		ret = pdma_cuda_open(&d->cuda);
		if (ret)
			pdma_log(d, 1, "CUDA memory: %s", pdma_cuda_last_error());
		else if (d->log_fn)
			pdma_cuda_set_log(d->cuda, d->log_fn, d->log_arg);
	}
	if (!ret && !d->cuda_kdev.cuda) {
		d->cuda_kdev.kdev = d->kdev;
		d->cuda_kdev.cuda = d->cuda;
	}
	pthread_mutex_unlock(&d->cuda_lock);
	if (ret)
		return ret;
	*be = d->cuda;
	if (!len) {
		*ops = &pdma_mem_cuda_ops;
	} else {
		/* GPU memory or host memory the GPU uses: the pointer decides. */
		ret = alloc ? pdma_cuda_ops_query(d->cuda, addr, len, ops, alloc) :
			      pdma_cuda_ops_for(d->cuda, addr, len, ops);
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
