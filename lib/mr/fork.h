/* SPDX-License-Identifier: MIT */
/*
 * fork() of a process that uses peerdma (lib/mr/fork.c). What survives in the
 * child, and why:
 *  - Memory: the child gets copies. Host memory registered without the kernel
 *    module is copy-on-write; pages pinned through peerdma.ko are copied for
 *    the child at fork by the kernel itself (it does so for private anonymous
 *    pages pinned with pin_user_pages since Linux 5.9; Debian 12's 6.1.x does it in
 *    copy_present_pte(): page_try_dup_anon_rmap() refuses a page that
 *    page_needs_cow_for_dma(), and copy_present_page() copies it). The parent's
 *    registrations keep the parent's pages; the child cannot write into them.
 *    Nothing is madvise(MADV_DONTFORK)ed: see include/peerdma/mr.h.
 *  - Caches opened before the fork forget every region in the child without
 *    unpinning it (the pins, locks and monitor are the parent's) and become
 *    pass-through: each registration pins afresh. A domain opened in the
 *    child caches again, under a monitor of its own.
 *  - Kernel-device domains opened before the fork refuse new registrations
 *    in the child with -ECHILD: the file's pins belong to the parent, and an
 *    unpin from the child would drop the parent's. Closing their MRs and the
 *    domain in the child releases only the child's memory.
 */
#ifndef PDMA_LIB_FORK_H
#define PDMA_LIB_FORK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The objects the fork handlers must reach (open caches, open domains), each
 * on a list from open to close. Process-wide: fork copies the process. */
struct pdma_fork_node {
	struct pdma_fork_node *next, *prev;
};
struct pdma_fork_list {
	pthread_mutex_t lock; /* the handlers hold it from prepare to parent/child */
	struct pdma_fork_node *head;
};
#define PDMA_FORK_LIST_INIT { PTHREAD_MUTEX_INITIALIZER, NULL }
#define pdma_fork_entry(node, type, member) \
	((type *)((char *)(node) - offsetof(type, member)))
void pdma_fork_list_add(struct pdma_fork_list *l, struct pdma_fork_node *n);
void pdma_fork_list_del(struct pdma_fork_list *l, struct pdma_fork_node *n);

/* Install the fork handlers once per process (idempotent, thread safe). */
void pdma_fork_init(void);
/* Open domains: prepare takes each one's lock and key pool lock, so that a
 * registration or transfer in another thread at the fork cannot leave them
 * held for ever in the child. */
extern struct pdma_fork_list pdma_fork_domains;
/* Forks this process has been through as a child: 0 in the original process,
 * counted up in each child. An object that records it at open knows, by a
 * different value, that it was opened by an ancestor. */
uint64_t pdma_fork_gen(void);

/* The handlers of each part, called by fork.c in a fixed lock order:
 * prepare takes the userfaultfd monitor's lock, the subscriber list's, every
 * cache's locks and then every domain's; parent and child release them (the
 * child after making its state its own). */
void pdma_uffd_fork_prepare(void);
void pdma_uffd_fork_parent(void);
void pdma_uffd_fork_child(void);
void pdma_monitor_fork_prepare(void);
void pdma_monitor_fork_parent(void);
void pdma_monitor_fork_child(void);
void pdma_cache_fork_prepare(void);
void pdma_cache_fork_parent(void);
void pdma_cache_fork_child(void);

#endif /* PDMA_LIB_FORK_H */
