// SPDX-License-Identifier: MIT
/*
 * The registration cache's attributes from the environment (libfabric's
 * FI_MR_CACHE_* variables, PEERDMA_ prefix) and the default size limit.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache_int.h"

static size_t parse_size(const char *s, bool *ok)
{
	char *end;
	unsigned long long v;

	*ok = false;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-')
		return 0;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return 0;
	*ok = true;
	return (size_t)v;
}

size_t pdma_cache_default_max_size(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (pages <= 0 || psz <= 0)
		return (size_t)1 << 30;
	if (cpus <= 0)
		cpus = 1;
	return (size_t)pages * (size_t)psz / (size_t)cpus / 2;
}

void pdma_cache_attr_from_env(struct pdma_cache_attr *attr)
{
	const char *v;
	bool ok;
	size_t n;

	memset(attr, 0, sizeof(*attr));
	attr->max_size = pdma_cache_default_max_size();
	attr->max_count = 1024;
	n = parse_size(getenv("PEERDMA_MR_CACHE_MAX_SIZE"), &ok);
	if (ok && n)
		attr->max_size = n;
	n = parse_size(getenv("PEERDMA_MR_CACHE_MAX_COUNT"), &ok);
	if (ok)
		attr->max_count = n;
	v = getenv("PEERDMA_MR_CACHE_MONITOR");
	if (v && !strcmp(v, "userfaultfd"))
		attr->monitor = PDMA_CACHE_MONITOR_USERFAULTFD;
	else if (v && !strcmp(v, "memhooks"))
		attr->monitor = PDMA_CACHE_MONITOR_MEMHOOKS;
	else if (v && !strcmp(v, "disabled"))
		attr->monitor = PDMA_CACHE_MONITOR_DISABLED;
	else if (v && !strcmp(v, "kernel"))
		attr->monitor = PDMA_CACHE_MONITOR_KERNEL;
	v = getenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED");
	if (v && !strcmp(v, "0"))
		attr->mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_OFF;
	v = getenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK");
	if (v && !strcmp(v, "0") && attr->mode[PDMA_HMEM_CUDA] != PDMA_CACHE_MODE_OFF)
		attr->mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TRUST;
}
