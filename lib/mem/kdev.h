/* SPDX-License-Identifier: MIT */
/*
 * The kdev backend (lib/mem/kdev.c): pins through /dev/peerdma, revocations
 * arrive as kernel events. Thread safety: all calls from any thread.
 */
#ifndef PDMA_LIB_MEM_KDEV_H
#define PDMA_LIB_MEM_KDEV_H

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
/* Revocation events received so far. */
uint64_t pdma_kdev_events(struct pdma_kdev *kdev);

#endif /* PDMA_LIB_MEM_KDEV_H */
