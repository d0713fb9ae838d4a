/* SPDX-License-Identifier: MIT */
/*
 * PCIe topology for GPUDirect RDMA (`peerdma info`): the path class between a
 * third-party device and a GPU, read from sysfs, with the classes and advice
 * of NVIDIA's GPUDirect RDMA guide and `nvidia-smi topo -m`.
 * sysfs_root is normally "/sys"; tests pass a fake tree.
 */
#ifndef PDMA_LIB_CUDA_TOPO_H
#define PDMA_LIB_CUDA_TOPO_H

#include <stddef.h>

enum pdma_pcie_path {
	PDMA_PCIE_SELF = 0, /* the same device */
	PDMA_PCIE_PIX,  /* through at most one PCIe switch (bridge) */
	PDMA_PCIE_PXB,  /* through several PCIe switches, no host bridge */
	PDMA_PCIE_PHB,  /* through a PCIe host bridge (the CPU's root complex) */
	PDMA_PCIE_NODE, /* between host bridges of one NUMA node */
	PDMA_PCIE_SYS,  /* across the interconnect between NUMA nodes (or unknown) */
};

/* "PIX", "PXB", ... */
const char *pdma_pcie_path_name(enum pdma_pcie_path p);
/* One line of advice for the class (the GPUDirect RDMA guide's). */
const char *pdma_pcie_path_advice(enum pdma_pcie_path p);

/* "3b:00.0", "0000:3b:00.0" or "00000000:3B:00.0" -> "0000:3b:00.0" in out
 * (at least 13 bytes). -EINVAL if it is not a PCI address. */
int pdma_pcie_normalize_bdf(const char *in, char *out, size_t outlen);

/* The path class between two PCI devices. -ENOENT if one is not in sysfs. */
int pdma_pcie_path_class(const char *sysfs_root, const char *bdf_a, const char *bdf_b,
			 enum pdma_pcie_path *path);

/* NVIDIA GPUs (vendor 0x10de, class 0x03xxxx) in sysfs, sorted by address:
 * up to max addresses ("0000:3b:00.0") written to bdfs. Returns how many
 * there are (may exceed max), or -errno. */
int pdma_pcie_list_gpus(const char *sysfs_root, char (*bdfs)[16], int max);

#endif /* PDMA_LIB_CUDA_TOPO_H */
