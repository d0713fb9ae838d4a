// SPDX-License-Identifier: MIT
/*
 * Host memory backend without the kernel module: a "pin" validates the range
 * (every page mapped: the ALLOCATED check) and hands out a handle; it neither
 * locks nor pins the pages.
 *
 * Why not mlock (what this backend did before): user space cannot make a DMA
 * pin. mlock keeps pages resident, but the kernel may still migrate them
 * (compaction, NUMA balancing), so a device holding their physical addresses
 * could write into pages that now belong to someone else; the only devices
 * that reach host memory registered here go through the process's virtual
 * addresses (the sim device), or pin it themselves (cuMemHostRegister, VFIO,
 * a kernel driver). And a lock is what made the cache fight the application:
 * a closed but cached registration kept its pages locked, so the
 * application's madvise(MADV_DONTNEED) failed with EINVAL (glibc's trim,
 * jemalloc and tcmalloc return memory that way) and the pages counted against
 * RLIMIT_MEMLOCK (8 MiB for users by default) after the last MR was closed.
 * Locking only while an MR is open would make every cache hit an mlock plus
 * an munlock at close: 5 us for 4 KiB, 66 us for 1 MiB (measured on the
 * 2-core test machine), against 0.3-0.5 us for a whole cached reg+close
 * (peerdma bench reg), which is most of what the cache saves. Without mlock
 * an uncached reg+close of 1 MiB went from 146 us to 2.3 us.
 *
 * What a registration guarantees here: the range was mapped when registered;
 * with the cache on, a monitor (userfaultfd or memhooks) drops the cached
 * region when the range is unmapped, remapped or discarded, so a later
 * registration is never handed the old one. Residency is the application's
 * business (mlock(2) it yourself, as the ingest ring does). A DMA pin needs
 * peerdma.ko: the kdev backend (lib/mem/kdev.c) pins with
 * pin_user_pages(FOLL_LONGTERM) and revokes through the MMU notifier.
 *
 * fork(): nothing to undo or protect. The child gets a copy-on-write copy of
 * the memory; its writes never reach the parent's pages, which the parent's
 * registrations go on addressing by the parent's virtual addresses.
 */
#include <errno.h>
#include <sys/mman.h>

#include "mem/mem.h"

#define HOST_PAGE 4096ull /* x86_64 and the pin granularity we report */

/* Every pin's handle: a pin owns nothing, so unpin has nothing to free. */
static char host_pin_handle;

static int host_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *out)
{
	static const size_t chunk = 4096; /* pages per mincore call */
	unsigned char vec[4096];
	uint64_t start, page = HOST_PAGE;
	size_t plen;

	(void)be;
	if (!len || addr + len < addr)
		return -EINVAL;
	pdma_page_round(page, addr, len, &start, &plen);
	/* mincore fails with ENOMEM on any unmapped page: the ALLOCATED check. */
	for (size_t off = 0; off < plen; off += chunk * page) {
		size_t n = plen - off < chunk * page ? plen - off : chunk * page;

		if (mincore((void *)(uintptr_t)(start + off), n, vec))
			return -EFAULT;
	}
	out->base = start;
	out->size = plen;
	out->buffer_id = 0;
	return 0;
}

static int host_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **out)
{
	(void)be;
	(void)revoke; /* host registrations are revoked by monitors, not by this backend */
	(void)arg;
	if ((addr | len) & (HOST_PAGE - 1) || !len)
		return -EINVAL;
	*out = &host_pin_handle;
	return 0;
}

static void host_unpin(void *be, void *pin)
{
	(void)be;
	(void)pin;
}

const struct pdma_mem_ops pdma_mem_host_ops = {
	.name = "host",
	.page_size = HOST_PAGE,
	.cpu_visible = true,
	.query = host_query,
	.pin = host_pin,
	.unpin = host_unpin,
};
