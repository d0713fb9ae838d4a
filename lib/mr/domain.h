/* SPDX-License-Identifier: MIT */
/*
 * Internal definitions shared by the domain, MR, key, EQ and bind code.
 *
 * Locking: the domain's lock (pdma_dom_lock, below) protects the key and
 * descriptor tables, the MR pool and the object counts. A device access (sim
 * DMA, pdma_mr_dma) resolves its key under it and counts itself in d->busy
 * before dropping it, then moves its bytes without it, holding the MR's
 * regions through their quiesce locks (pdma_dom_access_begin/_end). What
 * takes an MR away from a device (close, refresh, unmapping a key, fork)
 * first waits, under the lock, until no access is in flight
 * (pdma_dom_quiesce): none can start meanwhile, they start under the lock.
 * Binding a counter needs no wait: an access reads it only once the MR is
 * enabled, and binding an enabled MR is refused.
 * Registration changes nothing an access in flight reads, and does not wait.
 * A cached registration takes the lock once and a close once, and nothing on
 * either path walks a table or calls malloc. Why not a rwlock, shared for
 * accesses: glibc's exclusive lock and unlock cost 35-42 ns a pair on the
 * H100 machine's host, a mutex's 23-28 (bench/results/round2c-h100.txt), and
 * a cached reg+close takes two. It is per domain, never global.
 */
#ifndef PDMA_LIB_DOMAIN_H
#define PDMA_LIB_DOMAIN_H

#include <pthread.h>
#include <sched.h>
#include <sys/types.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "peerdma/mr.h"
#include "cache/region.h"
#include "mem/cuda.h"
#include "mem/kdev.h"
#include "mr/fork.h"
#include "mr/lock.h"

struct pdma_cache;
struct pdma_cuda;
struct pdma_kdev;

/* A descriptor (pdma_mr_desc) is an ID, not a pointer into the MR: a stale
 * descriptor used after close is then detected by a table lookup instead of
 * reading freed memory. IDs count up per process and are never reused. An
 * MR gets its ID, and its place in the domain's descriptor table, at the
 * first pdma_mr_desc: a registration whose descriptor is never asked for
 * (a device addresses it by key) pays neither, nor does its close. The
 * table's room for it is reserved at registration, so that first call
 * cannot fail. */

/* One iov entry of an MR and the pinned region that backs it. */
struct pdma_mr_seg {
	uint64_t addr;
	size_t len;
	struct pdma_region *region;
	struct pdma_mr *mr;
	struct pdma_region_user user; /* on region's users while the MR is open */
};

/* Raw keys: the internal key followed by a random tag, so a raw key cannot be
 * forged from a guessed 64-bit key alone. */
#define PDMA_RAW_KEY_MIN 16

struct pdma_key_entry {
	uint64_t key;
	struct pdma_mr *mr;  /* target MR */
	bool mapped;         /* made by pdma_mr_map_raw (not the MR's own key) */
	struct pdma_key_entry *next_alias; /* mapped: the MR's next mapped key */
};

/* A 64-bit ID -> object table, open addressing with linear probing: keys
 * (-> struct pdma_key_entry) and descriptor IDs (-> struct pdma_mr). A slot
 * is free when its value is NULL, so any 64-bit ID (a requested key may be
 * 0) can be stored. Lookups and changes under the domain lock (key.c). */
struct pdma_idmap_slot {
	uint64_t id;
	void *val;
};
struct pdma_idmap {
	struct pdma_idmap_slot *slot; /* NULL until the first insert */
	size_t mask;                  /* slots - 1 (a power of two) */
	size_t n;                     /* used slots, at most half of them */
};
void *pdma_idmap_find(const struct pdma_idmap *t, uint64_t id);
/* -EEXIST when id is in t already (its entries unchanged); -ENOMEM when the
 * table had to grow and could not. */
int pdma_idmap_insert(struct pdma_idmap *t, uint64_t id, void *val);
/* Room for n entries in all, so that inserts up to n cannot fail (-ENOMEM
 * when the table had to grow and could not). */
int pdma_idmap_reserve(struct pdma_idmap *t, size_t n);
/* Removes id (no-op when absent); returns its value or NULL. */
void *pdma_idmap_remove(struct pdma_idmap *t, uint64_t id);
void pdma_idmap_fini(struct pdma_idmap *t);

/* What an MR binds to (counters, endpoints). Such an object stays allocated
 * while an MR is bound to it, even after close, so an MR never points at freed
 * memory; close only marks it. The domain lock orders both. */
struct pdma_bind_target {
	struct pdma_domain *dom;
	atomic_int binds;    /* MRs bound to it */
	atomic_bool closed;  /* freed when closed and no MR is bound */
};

struct pdma_cntr {
	struct pdma_bind_target t; /* first: freed through it */
	atomic_uint_fast64_t value;
};

struct pdma_ep {
	struct pdma_bind_target t;
};

/* domain.c; caller holds the domain lock for unbind. */
void pdma_target_unbind(struct pdma_bind_target *t);

/* MR objects of up to PDMA_MR_POOL_SEGS segments (the default mr_iov_limit)
 * come from their domain's pool (pdma_domain.mr_pool) and go back to it at
 * close; they are freed with the domain, and a pointer to such a closed MR
 * still reads an MR object of the same domain (using an MR after closing it
 * is still undefined). What makes a closed MR unreachable is its key and
 * descriptor leaving the tables, never its memory. Larger MRs get an object
 * of their own size, freed at close, so that a domain with a large
 * mr_iov_limit does not keep that much room for every MR it ever had open. */
#define PDMA_MR_POOL_SEGS 4
struct pdma_mr {
	struct pdma_domain *dom;
	_Atomic uint64_t desc_id;       /* 0 until the first pdma_mr_desc */
	struct pdma_key_entry own_key;
	struct pdma_key_entry *aliases; /* keys pdma_mr_map_raw made for it */
	struct pdma_mr *pool_next;      /* on the domain's pool while closed */
	size_t cap;                     /* room in segs[]: PDMA_MR_POOL_SEGS: pooled */
	uint64_t access;
	void *context;
	enum pdma_hmem_iface iface;
	int device;
	uint64_t base;       /* first iov's address: address 0 of the MR */
	size_t total_len;
	uint8_t raw_tag[8];  /* PDMA_MR_RAW only */
	atomic_bool enabled;
	struct pdma_cntr *cntr;
	uint64_t cntr_flags;
	struct pdma_ep *ep;
	atomic_bool revoked; /* PDMA_MR_REVOKED posted (once per MR) */
	bool watched;        /* segs[].user on their regions (domain lock) */
	size_t nsegs;
	struct pdma_mr_seg segs[];
};

struct pdma_eq {
	struct pdma_domain *dom;
	struct pdma_eq *next, *prev; /* the domain's open EQs (dom->eqs, domain lock) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t size, head, count, reserved;
	bool bound;
	uint64_t flags;       /* of pdma_domain_bind_eq: PDMA_REG_MR, PDMA_MR_REVOKE_EVENTS */
	uint64_t lost;        /* revocation events dropped: queue full */
	struct pdma_eq_entry *ring;
};

/* Random bytes for keys and raw-key tags, a block at a time: ChaCha20
 * keystream under a seed from getrandom(), re-keyed at each block (key.c: one
 * system call per registration cost more than the rest of a cached
 * registration together, and so did the kernel's ChaCha at 4 KiB a call).
 * Bytes are handed out once and wiped. Seed and block live in a
 * MADV_WIPEONFORK page, so a forked child finds it empty and seeds afresh:
 * it never repeats its parent's keys. Without such a page (old kernels) every
 * draw is a getrandom() call. Each registering thread draws from a page of its
 * own (key.c), without a lock; the domain's pool below serves a thread whose
 * page could not be made or is gone (thread exit). */
struct pdma_rand_page;
struct pdma_rand_pool {
	pthread_mutex_t lock;
	struct pdma_rand_page *page; /* NULL: no pool, draw directly */
};

struct pdma_domain {
	struct pdma_domain_attr attr;
	struct pdma_rand_pool rand;
	uint64_t key_mask;           /* keys must fit in mr_key_size bytes */
	struct pdma_bias_lock lock;  /* pdma_dom_lock() */
	atomic_size_t busy;          /* device accesses in flight (see Locking above) */
	struct pdma_idmap keys;      /* live keys, own and mapped -> pdma_key_entry */
	struct pdma_idmap descs;     /* live MRs by desc_id, once asked for (room for all) */
	struct pdma_mr *mr_pool;     /* closed MR objects for reuse (pool_next, cap POOL_SEGS) */
	size_t n_mr, n_cntr, n_ep;
	struct pdma_eq *eq;          /* bound (atomic loads where the domain lock is not held) */
	struct pdma_eq *eqs;         /* every open EQ, bound or not: close and fork reach them */
	struct pdma_cache *cache;    /* NULL unless attr.use_cache */
	struct pdma_cuda *cuda;      /* opened at the first CUDA registration (stored
				      * under cuda_lock with release, read with acquire) */
	struct pdma_kdev *kdev;      /* attr.kernel_device, opened with the domain */
	char *kdev_path;             /* attr.kernel_device points here (our copy) */
	struct pdma_cuda_kdev cuda_kdev; /* GPU memory pinned by the module: {cuda, kdev} */
	pthread_mutex_t cuda_lock;
	pthread_mutex_t log_lock;    /* the pair below changes together (set_log) */
	pdma_log_fn log_fn;
	void *log_arg;
	struct pdma_fork_node fork_node; /* on pdma_fork_domains while open */
};

/*
 * The domain lock (lock.h): a test-and-set lock, whose release is a plain
 * store, biased towards the thread that takes it most.
 * Why not a mutex: glibc's unlock is an atomic exchange too (it must see
 * whether a waiter sleeps), and each atomic costs 9.5 ns on the H100
 * machine's host; a cached reg+close takes the lock twice, so a mutex there
 * is four atomics against two (bench/results/round2d-h100.txt), and the bias
 * takes those two away. Critical sections are short (table operations),
 * except a close waiting for the accesses in flight (microseconds): a waiter
 * spins a little, then yields the CPU, so that a holder that was preempted
 * gets to run.
 */
static inline void pdma_dom_lock(struct pdma_domain *d)
{
	pdma_bias_lock(&d->lock);
}

static inline void pdma_dom_unlock(struct pdma_domain *d)
{
	pdma_bias_unlock(&d->lock);
}

/* A device access: begin with the domain lock held, after its key (and
 * descriptor) resolved; end without it, when its last byte moved. */
static inline void pdma_dom_access_begin(struct pdma_domain *d)
{
	atomic_fetch_add_explicit(&d->busy, 1, memory_order_relaxed);
}

static inline void pdma_dom_access_end(struct pdma_domain *d)
{
	atomic_fetch_sub_explicit(&d->busy, 1, memory_order_release);
}

/* Domain lock held: wait until no device access is in flight. Inline: the
 * fork handlers (fork.c) use it, and some guest test programs link fork.c
 * (and lock.c, the lock's slow path) without the rest of the domain
 * (tests/vm/run: kdevtest). */
static inline void pdma_dom_quiesce(struct pdma_domain *d)
{
	/* Accesses move bytes for microseconds at most: yield, not sleep. */
	while (atomic_load_explicit(&d->busy, memory_order_acquire))
		sched_yield();
}

/* To the domain's log callback (pdma_domain_set_log), if any; any thread. */
void pdma_log(struct pdma_domain *d, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void pdma_log_msg(struct pdma_domain *d, int level, const char *msg);

/* key.c. pdma_key_new: a requested key checked for range and against the
 * live keys, or (PDMA_MR_PROV_KEY) a random one not live now; domain lock
 * held. pdma_key_draw: a random candidate key for
 * PDMA_MR_PROV_KEY, unchecked (no lock needed): the caller checks it under the
 * lock and falls back to pdma_key_fresh if it is taken. */
int pdma_key_new(struct pdma_domain *d, uint64_t requested, uint64_t *key);
/* A random key within mr_key_size, not live now (domain lock held): what
 * pdma_key_new gives under PDMA_MR_PROV_KEY and pdma_mr_map_raw always.
 * -ENOSPC after 64 draws that were all live (a tiny key space, full). */
int pdma_key_fresh(struct pdma_domain *d, uint64_t *key);
int pdma_key_draw(struct pdma_domain *d, uint64_t *key);
struct pdma_mr *pdma_key_lookup(struct pdma_domain *d, uint64_t key);
/* key.c: a new descriptor ID (never 0, never reused in the process). */
uint64_t pdma_desc_id_new(void);
void pdma_rand_init(struct pdma_rand_pool *p);
void pdma_rand_fini(struct pdma_rand_pool *p);
int pdma_random_bytes(struct pdma_rand_pool *p, void *buf, size_t len);

/* eq.c: a registration reserves its event slot first (-EAGAIN when full). */
int pdma_eq_reserve(struct pdma_eq *eq);
void pdma_eq_unreserve(struct pdma_eq *eq);
void pdma_eq_post(struct pdma_eq *eq, const struct pdma_eq_entry *entry);
/* An event no slot was reserved for (revocations): dropped, counted in lost,
 * when the queue is full. Returns false then. */
bool pdma_eq_post_unreserved(struct pdma_eq *eq, const struct pdma_eq_entry *entry);

/* mr_dma.c: an MR's segments watch their regions for revocation, while an
 * EQ with PDMA_MR_REVOKE_EVENTS is bound (m->watched). pdma_mr_watch_all:
 * such an EQ was just bound, domain lock held: every open MR not yet
 * watching starts (one already revoked posts its event now). */
void pdma_mr_watch(struct pdma_mr *m);
void pdma_mr_unwatch(struct pdma_mr *m);
void pdma_mr_watch_all(struct pdma_domain *d);

/* mr.c: resolve [addr, addr + len) of an MR (offset or virtual address per
 * the domain's mode) for device access with the given remote access bit, and
 * run fn over each piece with the pieces' regions held for DMA. The caller
 * holds the domain lock or has begun an access (pdma_dom_access_begin). */
typedef void (*pdma_mr_piece_fn)(void *arg, void *mem, size_t len, size_t done);
int pdma_mr_access(struct pdma_domain *d, struct pdma_mr *mr, uint64_t addr, size_t len,
		   uint64_t access, pdma_mr_piece_fn fn, void *arg);
/* Look up a key under the domain's lock and access its MR as an access in
 * flight (pdma_dom_access_begin), without the lock. */
int pdma_key_access(struct pdma_domain *d, uint64_t key, uint64_t addr, size_t len,
		    uint64_t access, pdma_mr_piece_fn fn, void *arg);
/* The MR a local descriptor names, if it is live and of this domain. */
struct pdma_mr *pdma_desc_mr(struct pdma_domain *d, void *desc);

/* pdma_domain_backend's out-of-line part: CUDA, and the errors. */
int pdma_domain_backend_other(struct pdma_domain *d, enum pdma_hmem_iface iface, int device,
			      uint64_t addr, size_t len, const struct pdma_mem_ops **ops,
			      void **be, struct pdma_mem_alloc *alloc);
/* Backend selection for memory [addr, addr + len) of an iface (CUDA picks GPU
 * or host ops by pointer; len 0 only checks that the iface is usable). With
 * alloc (may be NULL): where choosing the backend already asked the memory
 * what its query would (GPU memory: one driver call for both), *alloc is
 * filled and 1 returned; 0: ops->query is still the caller's to call; < 0:
 * no backend, *ops not set (logged where the backend knows more than the
 * errno says).
 * Inline for host memory and the simulated device, whose backends are fixed
 * when the domain opens: every registration asks, and the call was a
 * twentieth of a cached one. */
static inline int pdma_domain_backend(struct pdma_domain *d, enum pdma_hmem_iface iface,
				      int device, uint64_t addr, size_t len,
				      const struct pdma_mem_ops **ops, void **be,
				      struct pdma_mem_alloc *alloc)
{
	if (iface == PDMA_HMEM_SYSTEM) {
		*ops = d->kdev ? &pdma_mem_kdev_host_ops : &pdma_mem_host_ops;
		*be = d->kdev;
		return 0;
	}
	if (iface == PDMA_HMEM_SIM && device == 0 && d->attr.sim) {
		*ops = &pdma_mem_sim_ops;
		*be = d->attr.sim;
		return 0;
	}
	return pdma_domain_backend_other(d, iface, device, addr, len, ops, be, alloc);
}

/* domain_cuda.c: the CUDA backend, opened at the first CUDA registration. */
int pdma_domain_cuda_backend(struct pdma_domain *d, int device, uint64_t addr, size_t len,
			     const struct pdma_mem_ops **ops, void **be, struct pdma_mem_alloc *alloc);
void pdma_domain_backend_close(struct pdma_domain *d);

#endif /* PDMA_LIB_DOMAIN_H */
