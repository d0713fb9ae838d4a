/* SPDX-License-Identifier: GPL-2.0 */
/*
 * peerdma internals: per-file contexts, pinned handles, pin providers.
 *
 * Ownership of a pin's pages is decided once, atomically, by a cmpxchg on
 * pin->state: LIVE -> REVOKED (the provider's revoke path: nv-p2p free callback,
 * MMU invalidation, dma-buf move_notify) or LIVE -> RELEASING (unpin, close,
 * process exit). The winner quiesces the clients and releases the pages; the
 * loser only waits until the winner has quiesced the clients, so no device DMA
 * reaches pages after their owner reclaimed them. What a client mapping refers
 * to never dies with the loser's return: a free-callback page table does, so
 * those clients are mapped from the physical addresses (pin_nvp2p.c).
 *
 * Lock order: (provider locks: GPU driver lock, dma_resv, mmap_lock, reclaim)
 * -> pin->lock -> client driver locks (quiesce). So nothing under pin->lock
 * calls into a provider or allocates memory: mapping a client runs under
 * pin->map_sem instead, which no revoke path takes under a provider lock
 * (map_sem -> provider locks); release, and the host revoke's deferred half
 * (a work item, no provider lock held), take it for write once, to wait for
 * mappings in flight.
 * file->lock and file->ev_lock are never held while calling into a provider.
 */
#ifndef PEERDMA_INTERNAL_H
#define PEERDMA_INTERNAL_H

#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mmu_notifier.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include <uapi/peerdma.h>
#include "peerdma_client.h"

struct dma_buf;
struct dma_buf_attachment;
struct nvidia_p2p_page_table;
struct pdma_pin;
struct sg_table;

/*
 * A dma-buf attached for one device and mapped: the pin's (peerdma.ko's own
 * device) and each client's (the client's device), pin_dmabuf.c.
 */
struct pdma_buf_att {
	struct dma_buf *dmabuf;	/* ref held */
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
	bool moved;		/* the pin's: move_notify while creating */
};

enum pdma_state {
	PDMA_CREATING = 0,
	PDMA_LIVE,
	PDMA_REVOKED,
	PDMA_RELEASING,
};

/* one open file of /dev/peerdma */
struct pdma_file {
	struct kref ref;		/* the file + every pin it created */
	struct mm_struct *mm;		/* opener; ioctls from another mm: -EACCES */
	struct mutex lock;		/* handle table updates */
	struct xarray handles;		/* handle id -> struct pdma_pin (ref held) */
	u32 nhandles;
	spinlock_t ev_lock;		/* events, closed */
	struct list_head events;	/* pdma_pin.ev_node, ref held */
	bool closed;			/* under ev_lock: no more events */
	wait_queue_head_t wq;
	struct page *counters_page;	/* mapped read-only by the opener */
	struct peerdma_counters *counters;	/* its address; updates under ev_lock */
};

struct peerdma_client {
	struct kref ref;		/* caller + pin->clients list */
	struct list_head node;		/* pin->clients, under pin->lock */
	bool on_list;			/* under pin->lock */
	struct work_struct free_work;	/* final release in process context */
	struct pdma_pin *pin;		/* ref held */
	struct device *dev;
	const struct peerdma_client_ops *ops;
	void *priv;
	u32 flags;
	bool dead;			/* quiesced: map is gone */
	u32 shift;			/* log2 of the reported entry size */
	struct peerdma_dma_map map;	/* addrs points into dma below */
	dma_addr_t *dma;
	/* provider state for this client mapping */
	union {
		struct {
			void *mapping;	/* persistent: nvidia_p2p_dma_mapping */
			bool res;	/* free-callback: dma_map_resource */
		} nv;
		struct pdma_buf_att buf;
	};
};

struct pdma_provider {
	const char *name;
	u32 kind;
	/* pin the range in pin->addr/len (already validated); fill pin->phys etc. */
	int (*pin)(struct pdma_pin *pin, int fd);
	/* state RELEASING, clients gone, no mapping in flight: give the pages back */
	void (*release)(struct pdma_pin *pin);
	/* after release or revoke completed: drop what still refers to the pin */
	void (*destroy)(struct pdma_pin *pin);
	/*
	 * map a client: fill c->dma (page_size entries). Called under
	 * pin->map_sem (read), without pin->lock, the pin LIVE when it began; a
	 * revoke may come at any time (the caller checks the state after).
	 */
	int (*map)(struct pdma_pin *pin, struct peerdma_client *c);
	/*
	 * undo map, without pin->lock; @revoking: from within the provider's
	 * revoke path (its locks held), else under map_sem or by the winner
	 */
	void (*unmap)(struct pdma_pin *pin, struct peerdma_client *c, bool revoking);
	/* last reference to the client gone (process context, no locks) */
	void (*client_free)(struct peerdma_client *c);
};

struct pdma_pin {
	struct kref ref;
	u64 id;				/* handle: unique, never reused */
	atomic_t state;			/* enum pdma_state */
	struct pdma_file *file;		/* ref held */
	const struct pdma_provider *prov;
	u32 flags;			/* PEERDMA_PIN_* */
	u64 addr;			/* pinned (rounded) start */
	u64 len;
	u64 user_data;
	u32 page_shift;			/* native entry size */
	u32 npages;
	u64 *phys;			/* CPU physical address per native entry */
	struct mutex lock;		/* clients list; no allocation under it */
	struct rw_semaphore map_sem;	/* client mappings in flight vs release */
	struct list_head clients;
	struct completion ready;	/* creation finished (success or not) */
	struct completion quiesced;	/* the ownership winner stopped all clients */
	struct completion done;		/* the revoke path finished completely */
	struct list_head ev_node;	/* in file->events */
	u32 reason;			/* PEERDMA_EVENT_* */
	bool counted;			/* pages held: counts in pdma_live_pins */
	bool awaits_callback;		/* under lock: release left the id to a late callback */
	union {
		struct {
			struct nvidia_p2p_page_table *pt;	/* NULL once put */
			struct pid *owner;	/* callback mode: the pinning process */
			bool persistent;
			bool torn;	/* under lock: the callback returned, pt is gone */
			atomic_t armed;	/* the callback may come: holds a module ref */
		} nv;
		struct {
			struct mmu_interval_notifier notifier;
			spinlock_t seq_lock;	/* notifier sequence vs state */
			struct page **pages;
			struct work_struct revoke_work;
			bool registered;
		} host;
		struct pdma_buf_att buf;
	};
};

extern atomic_t pdma_live_pins;
extern atomic_t pdma_orphans;
extern atomic64_t pdma_pins_total;
extern atomic64_t pdma_revokes;
extern struct device *pdma_dev;
extern struct workqueue_struct *pdma_wq;
extern bool pdma_nvp2p_persistent;
extern unsigned int pdma_max_handles;

extern const struct pdma_provider pdma_host_provider;
extern const struct pdma_provider pdma_nvp2p_provider;
extern const struct pdma_provider pdma_dmabuf_provider;

/* file.c */
void pdma_file_put(struct pdma_file *f);
bool pdma_is_peerdma_file(struct file *file);

/* ioctl.c */
long pdma_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

/* pin.c */
int pdma_pin_create(struct pdma_file *f, struct peerdma_pin *req);
struct pdma_pin *pdma_pin_lookup(struct pdma_file *f, u64 handle);
int pdma_pin_unpin(struct pdma_file *f, u64 handle);
void pdma_pin_release(struct pdma_pin *pin);
void pdma_pin_put(struct pdma_pin *pin);
struct pdma_pin *pdma_pin_get_by_id(u64 id);
bool pdma_pin_revoke_begin(struct pdma_pin *pin);
void pdma_pin_revoke_end(struct pdma_pin *pin, u32 reason);
void pdma_pin_wait_mappings(struct pdma_pin *pin);
void pdma_pin_pages_held(struct pdma_pin *pin);
void pdma_pin_pages_gone(struct pdma_pin *pin);
void pdma_pin_forget(struct pdma_pin *pin);
u32 pdma_pin_entries(const struct pdma_pin *pin, u32 flags, u32 *page_size);
void pdma_pins_exit(void);

/* events.c */
void pdma_event_queue(struct pdma_pin *pin, u32 reason);
ssize_t pdma_read(struct file *file, char __user *buf, size_t count, loff_t *ppos);
__poll_t pdma_poll(struct file *file, struct poll_table_struct *wait);
void pdma_events_drain(struct pdma_file *f);

/* counters.c */
int pdma_counters_alloc(struct pdma_file *f);
void pdma_counters_free(struct pdma_file *f);
void pdma_counters_revoke(struct pdma_file *f);
int pdma_mmap(struct file *file, struct vm_area_struct *vma);

/* client.c */
void pdma_clients_quiesce(struct pdma_pin *pin, bool revoking);
void pdma_client_set_addr(struct peerdma_client *c, u32 i, dma_addr_t addr);
u32 pdma_pin_nclients(struct pdma_pin *pin);

#endif /* PEERDMA_INTERNAL_H */
