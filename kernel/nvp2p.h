/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Our own declarations of NVIDIA's documented nv-p2p kernel API (x86_64, LP64),
 * written from the facts in NVP2P-ABI.md. The driver owns every structure it
 * hands out: never allocate, copy or free one here.
 */
#ifndef PEERDMA_NVP2P_H
#define PEERDMA_NVP2P_H

#include <linux/build_bug.h>
#include <linux/stddef.h>
#include <linux/types.h>

struct pci_dev;

#define NVIDIA_P2P_UNINITIALIZED 0
#define NVIDIA_P2P_GPU_UUID_LEN 16

#define NVIDIA_P2P_MAJOR(v) ((v) >> 16)
#define NVIDIA_P2P_MINOR(v) ((v) & 0xffff)

#define NVIDIA_P2P_PAGE_TABLE_VERSION		0x00020000
#define NVIDIA_P2P_PAGE_TABLE_VERSION_V1	0x00010002
#define NVIDIA_P2P_DMA_MAPPING_VERSION		0x00020003

#define NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API

#define NVIDIA_P2P_FLAGS_DEFAULT		0
#define NVIDIA_P2P_FLAGS_FORCE_BAR1_MAPPING	1
#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 0x1

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB = 1,
	NVIDIA_P2P_PAGE_SIZE_128KB = 2,
	NVIDIA_P2P_PAGE_SIZE_COUNT = 3,
};

struct nvidia_p2p_page {
	u64 physical_address;
	union {
		struct {
			u32 wreqmb_h;
			u32 rreqmb_h;
			u32 rreqmb_0;
			u32 reserved[3];
		} fermi;
	} registers;
};

struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size;		/* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;
	u32 flags;		/* v2.0 only: never read it from a v1.x table */
};

struct nvidia_p2p_dma_mapping {
	u32 version;
	enum nvidia_p2p_page_size_type page_size_type;
	u32 entries;
	u64 *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
};

static_assert(sizeof(struct nvidia_p2p_page) == 32);
static_assert(offsetof(struct nvidia_p2p_page_table, pages) == 8);
static_assert(offsetof(struct nvidia_p2p_page_table, entries) == 16);
static_assert(offsetof(struct nvidia_p2p_page_table, gpu_uuid) == 24);
static_assert(offsetof(struct nvidia_p2p_page_table, flags) == 32);
static_assert(sizeof(struct nvidia_p2p_page_table) == 40);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, entries) == 8);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, dma_addresses) == 16);
static_assert(offsetof(struct nvidia_p2p_dma_mapping, pci_dev) == 32);
static_assert(sizeof(struct nvidia_p2p_dma_mapping) == 40);

/*
 * Compatible: same major as compiled against and runtime minor >= compiled
 * minor. Page tables: 1.2+ (drivers 515-575) and 2.x (580+).
 */
static inline bool nvidia_p2p_page_table_version_ok(const struct nvidia_p2p_page_table *t)
{
	u32 v = t->version;

	return NVIDIA_P2P_MAJOR(v) == 2 || (NVIDIA_P2P_MAJOR(v) == 1 && NVIDIA_P2P_MINOR(v) >= 2);
}

static inline bool nvidia_p2p_dma_mapping_version_ok(const struct nvidia_p2p_dma_mapping *m)
{
	u32 v = m->version;

	return NVIDIA_P2P_MAJOR(v) == NVIDIA_P2P_MAJOR(NVIDIA_P2P_DMA_MAPPING_VERSION) &&
	       NVIDIA_P2P_MINOR(v) >= NVIDIA_P2P_MINOR(NVIDIA_P2P_DMA_MAPPING_VERSION);
}

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags);
int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_dma_map_pages(struct pci_dev *peer,
			     struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping);
int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer,
			       struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping);
int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping);

#endif /* PEERDMA_NVP2P_H */
