/* SPDX-License-Identifier: MIT */
/*
 * The kdev backend (lib/mem/kdev.c): pins through /dev/peerdma, revocations
 * arrive as kernel events. Thread safety: all calls from any thread.
 */
#ifndef PDMA_LIB_MEM_KDEV_H
#define PDMA_LIB_MEM_KDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mem/mem.h"

struct pdma_kdev;

extern const struct pdma_mem_ops pdma_mem_kdev_host_ops;

/* path NULL: /dev/peerdma. -ENODEV when the module is not loaded, -EPROTO for
 * an ABI major we do not speak, -EACCES/-EPERM from open(). */
int pdma_kdev_open(const char *path, struct pdma_kdev **kdev);
/* -EBUSY while pins are live. */
int pdma_kdev_close(struct pdma_kdev *kdev);
uint64_t pdma_kdev_caps(const struct pdma_kdev *kdev);
/* Revocation events received and handled so far (callbacks returned). */
uint64_t pdma_kdev_events(struct pdma_kdev *kdev);

/*
 * The kernel as a synchronous host memory monitor (the cache's "kernel"
 * monitor). True when the module counts revocations in a page this backend
 * could map (PEERDMA_CAP_REVOKE_COUNT, ABI 1.2); older modules: false.
 */
bool pdma_kdev_monitor_ok(const struct pdma_kdev *kdev);
/*
 * Every revocation of this file's pins that began before the call (for host
 * memory: every munmap, madvise, mremap... that has returned) has been handled
 * when it returns 0: the region's revoke callback and pdma_monitor_notify()
 * have run. One load and a compare when nothing is pending; otherwise the
 * caller reads and handles the events itself (callbacks run in its thread, as
 * under the memhooks monitor). -ETIMEDOUT if an event counted by the module
 * did not arrive within PDMA_KDEV_SYNC_WAIT_MS (a module bug; the caller must
 * then assume anything may be stale). Needs pdma_kdev_monitor_ok().
 */
#define PDMA_KDEV_SYNC_WAIT_MS 5000
int pdma_kdev_sync(struct pdma_kdev *kdev);

/* The module's view of a pin of this backend (tests, diagnostics): its state
 * (PEERDMA_STATE_*) and, with phys non-NULL, the physical address of each of
 * its n pages (needs CAP_SYS_RAWIO; -EINVAL if n is not its page count). */
int pdma_kdev_pin_pages(struct pdma_kdev *kdev, const void *pin, uint32_t *state,
			uint64_t *phys, uint32_t n);

/*
 * A pin of any kind (GPU memory of a kdev domain, lib/mem/cuda_kdev.c, pins
 * through it): kind PEERDMA_KIND_*, flags PEERDMA_PIN_*, fd the dma-buf (KIND_DMABUF, addr
 * then an offset in it) or -1, va the user or GPU virtual address the pin
 * stands for (what the monitor is told when the kernel revokes it). Errors are
 * the module's, except host memory it refuses (EINVAL): -EFAULT.
 */
int pdma_kdev_pin(struct pdma_kdev *kdev, uint32_t kind, uint32_t flags, int fd,
		  enum pdma_hmem_iface iface, uint64_t addr, size_t len, uint64_t va,
		  pdma_mem_revoke_fn revoke, void *arg, void **pin);
void pdma_kdev_unpin(void *kdev, void *pin);
/* pdma_mr_dma of a pin: kernel_fd, kind, handle, pinned_addr/len (the va
 * range), page_size, entries; dmabuf_fd -1. -ENODEV once the module revoked
 * it (asked with PEERDMA_IOC_QUERY: before its event is handled too). */
int pdma_kdev_dma(struct pdma_kdev *kdev, const void *pin, struct pdma_mr_dma *dma);
/* pdma_mr_dma_pages of a pin: -ERANGE with *count set when the room is too
 * small, -EPERM without CAP_SYS_RAWIO, -ENODEV once revoked. */
int pdma_kdev_dma_pages(struct pdma_kdev *kdev, const void *pin, uint64_t *addrs,
			uint32_t *count);

#endif /* PDMA_LIB_MEM_KDEV_H */
