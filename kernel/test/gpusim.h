/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gpusim internals, shared by its three parts: gpusim_main.c (allocations of
 * "GPU memory" in the ivshmem BAR, /dev/gpusim, the PCI driver),
 * gpusim_p2p.c (the nv-p2p API) and gpusim_dmabuf.c (the dma-buf exporter).
 *
 * gs.lock plays the NVIDIA driver's own lock: free callbacks run with it held,
 * and get_pages, put_pages, dma_map_pages and dma_unmap_pages take it, so a
 * caller that holds a lock its free callback also takes is an inversion
 * lockdep sees. gs.tlock (a spinlock) guards the list of live page tables, so
 * that every call can check the table it is given is still live.
 * Everything below is under gs.lock unless it is atomic or says otherwise.
 */
#ifndef GPUSIM_H
#define GPUSIM_H

#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>

#include "../nvp2p.h"
#include "gpusim_uapi.h"

#define GS_PAGE GPUSIM_PAGE
#define GS_PAGE_SHIFT 16

struct dentry;
struct dma_buf;
struct mm_struct;
struct pci_dev;
struct pid;
struct task_struct;

struct gs_file;

struct gs_alloc {
	struct kref ref;	/* owner list + persistent tables + dma-bufs */
	struct list_head node;	/* in gs_file.allocs while not freed */
	struct mm_struct *mm;	/* allocating process (mmgrab) */
	u64 va;
	u64 len;
	u64 bar_off;
	bool freed;
	struct list_head bufs;	/* gs_buf.node */
};

struct gs_table {
	struct list_head node;	/* gs.tables, under gs.tlock */
	struct list_head maps;	/* gs_map.node, under gs.tlock */
	struct gs_alloc *alloc;
	struct nvidia_p2p_page_table pt;
	struct nvidia_p2p_page *page_store;
	struct nvidia_p2p_page **page_ptrs;
	u64 va;
	u64 len;
	struct pid *owner;	/* the process that got it: only it may put it */
	bool persistent;
	bool freed_by_client;
	bool in_callback;	/* under gs.tlock: its free callback is running */
	bool legacy_put;	/* under gs.tlock: put while in_callback (legacy_race) */
	void (*free_cb)(void *data);
	void *data;
};

/* a DMA mapping of a page table for one peer */
struct gs_map {
	struct nvidia_p2p_dma_mapping m;
	struct list_head node;	/* gs_table.maps, under gs.tlock */
};

struct gs_buf {
	struct list_head node;	/* gs_alloc.bufs */
	struct gs_alloc *alloc;
	struct dma_buf *dmabuf;
	u64 bar_off;
	u64 len;
	bool revoked;		/* under the dma-buf's resv lock */
};

struct gs_file {
	struct list_head allocs;
};

/* the one device */
struct gs_state {
	struct pci_dev *pdev;
	phys_addr_t bar_phys;
	u64 bar_size;
	unsigned long *map;	/* one bit per 64 KiB */
	unsigned long nbits;
	struct mutex lock;	/* the driver lock: see above */
	spinlock_t tlock;	/* tables and their maps lists */
	struct list_head tables;
	u64 used;
	u64 pinned;
	struct task_struct *in_callback;
	atomic_t ntables;
	atomic_t nmappings;
	atomic_t nbufs;
	atomic_t nbufmaps;
	atomic_t ncallbacks;
	atomic_t violations;	/* of the documented rules, by a caller */
	atomic_t legacy_hits;	/* the 515-535 race, when legacy_race is on */
	struct dentry *dbg;
};

extern struct gs_state gs;

/* a caller broke a documented rule: logged (the VM harness fails on it), counted */
#define gs_violation(fmt, ...)						\
	do {								\
		atomic_inc(&gs.violations);				\
		pr_err("VIOLATION: " fmt, ##__VA_ARGS__);		\
	} while (0)

/* gpusim_main.c */
void gs_alloc_put(struct gs_alloc *a);
struct gs_alloc *gs_find(struct gs_file *f, u64 va, u64 len);
struct gs_alloc *gs_find_any(u64 va, u64 len);

/* gpusim_p2p.c */
bool gs_fail(void);
void gs_delay(unsigned int ms);
void gs_p2p_free_callbacks(struct gs_alloc *a);
int gs_selftest(u64 va);

/* gpusim_dmabuf.c */
int gs_export(struct gs_file *f, struct gpusim_export *e);
void gs_bufs_revoke(struct gs_alloc *a);

#endif /* GPUSIM_H */
