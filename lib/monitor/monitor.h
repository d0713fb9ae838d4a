/* SPDX-License-Identifier: MIT */
/*
 * Process-wide invalidation fan-out. Sources that learn memory is going away
 * (allocation hooks on munmap/cuMemFree/..., userfaultfd events, kernel events
 * from /dev/peerdma, the sim backend's free) call pdma_monitor_notify() BEFORE
 * the memory is released; subscribers (registration caches) drop every region
 * overlapping the range. Process-wide because the sources are: an interposed
 * free() knows no domain.
 *
 * Thread safety: all calls from any thread. Callbacks run in the notifying
 * thread and must not call subscribe/unsubscribe.
 */
#ifndef PDMA_LIB_MONITOR_H
#define PDMA_LIB_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerdma/mr.h"

typedef void (*pdma_monitor_fn)(void *arg, enum pdma_hmem_iface iface, uint64_t addr,
				size_t len);
struct pdma_monitor_sub;

int pdma_monitor_subscribe(pdma_monitor_fn fn, void *arg, struct pdma_monitor_sub **sub);
void pdma_monitor_unsubscribe(struct pdma_monitor_sub *sub);
void pdma_monitor_notify(enum pdma_hmem_iface iface, uint64_t addr, size_t len);

/*
 * Host memory monitors (uffd.c, memhooks.c), process-wide, reference counted
 * by the caches that use them. They report through pdma_monitor_notify().
 */
/* userfaultfd: -errno if the kernel refuses it (then nothing was started). */
int pdma_uffd_monitor_start(void);
void pdma_uffd_monitor_stop(void);
/* Watch a page-aligned host range; -errno if it cannot be watched (the
 * cache then does not index the region). */
int pdma_uffd_monitor_watch(uint64_t start, size_t len);
/* memhooks: -ENOSYS if libc's functions cannot be found or patched (static
 * program), -ENOTSUP under a runtime whose allocator unmaps behind the hooks
 * (sanitizers, valgrind), -EACCES if libc's code cannot be made writable. */
int pdma_memhooks_monitor_start(void);
void pdma_memhooks_monitor_stop(void);
/* Between enter and leave the calling thread maps and unmaps only peerdma's
 * own memory: the memhooks monitor does not report those calls (it could not:
 * the thread may hold a cache lock). Nests. */
void pdma_monitor_enter(void);
void pdma_monitor_leave(void);
/* vma.c: the mappings of this process, from /proc/self/maps without malloc.
 * walk calls fn for each in address order until it returns nonzero, and
 * returns that (0 at the end, -1 if the file cannot be read). */
struct pdma_vma {
	uint64_t start, end, inode;
	bool shared;
	const char *name; /* "" for anonymous, "[heap]", a path... */
};
int pdma_vma_walk(int (*fn)(void *arg, const struct pdma_vma *v), void *arg);
/* True if [start, start + len) is all private anonymous memory, the only kind
 * whose changes this process's own calls account for (see vma.c). */
bool pdma_vma_private_anon(uint64_t start, size_t len);

/* Odd while the monitor thread is between reading events and finishing their
 * invalidation: a lookup that sees it odd waits, so an munmap that returned
 * (the kernel waits until its event is read) can never be followed by a hit
 * on the old pages. */
extern _Atomic unsigned pdma_uffd_seq;

#endif /* PDMA_LIB_MONITOR_H */
