// SPDX-License-Identifier: MIT
/* The CUDA backend of a domain: TEMPORARY until lib/mem_cuda lands. */
#include <errno.h>

#include "domain.h"

int pdma_domain_cuda_backend(struct pdma_domain *d, int device, const struct pdma_mem_ops **ops,
			     void **be)
{
	(void)device;
	(void)ops;
	(void)be;
	pdma_log(d, 1, "CUDA memory: backend not available");
	return -ENODEV;
}

void pdma_domain_backend_close(struct pdma_domain *d)
{
	(void)d;
}
