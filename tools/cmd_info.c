// SPDX-License-Identifier: MIT
/*
 * peerdma info: what this machine offers for GPUDirect RDMA.
 *   GPUs (CUDA driver, loaded at run time): PCI address, compute capability,
 *   GPU_DIRECT_RDMA_SUPPORTED, DMA_BUF_SUPPORTED, GPU_DIRECT_RDMA_WRITES_ORDERING,
 *   flush options; BAR1 total/used and the driver version from NVML (also
 *   loaded at run time); the IOMMU state (/sys/class/iommu, iommu groups, the
 *   kernel command line); with --device BDF, the PCIe path class between that
 *   third-party device and each GPU (PIX/PXB/PHB/NODE/SYS) with the GPUDirect
 *   RDMA guide's advice; the kernel module's device node and the host memory
 *   monitor a registration cache gets here, as this user, in this
 *   environment. A machine without GPU or driver gets a clear report and exit
 *   status 0.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peerdma/mr.h"
#include "cmd.h"
#include "cuda/topo.h"
#include "mem/cuda.h"
#include "opt.h"

/* ------------------------------------------------------------------ NVML */

typedef int nvml_ret;
typedef struct nvml_dev_st *nvml_dev;
struct nvml_bar1 { /* nvmlBAR1Memory_t */
	unsigned long long total, free, used;
};

struct nvml {
	void *h;
	nvml_ret (*Init)(void);
	nvml_ret (*Shutdown)(void);
	nvml_ret (*DriverVersion)(char *v, unsigned int len);
	nvml_ret (*Count)(unsigned int *n);
	nvml_ret (*ByIndex)(unsigned int i, nvml_dev *d);
	nvml_ret (*ByPciBusId)(const char *id, nvml_dev *d);
	nvml_ret (*Name)(nvml_dev d, char *name, unsigned int len);
	nvml_ret (*Bar1)(nvml_dev d, struct nvml_bar1 *b);
	char err[256];
};

static int nvml_open(struct nvml *n)
{
	const char *lib = getenv("PEERDMA_LIBNVML");

	memset(n, 0, sizeof(*n));
	n->h = dlopen(lib && *lib ? lib : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!n->h) {
		snprintf(n->err, sizeof(n->err), "NVML not available (%s)", dlerror());
		return -ENODEV;
	}
#define L(f, s) *(void **)&n->f = dlsym(n->h, s)
	L(Init, "nvmlInit_v2");
	L(Shutdown, "nvmlShutdown");
	L(DriverVersion, "nvmlSystemGetDriverVersion");
	L(Count, "nvmlDeviceGetCount_v2");
	L(ByIndex, "nvmlDeviceGetHandleByIndex_v2");
	L(ByPciBusId, "nvmlDeviceGetHandleByPciBusId_v2");
	L(Name, "nvmlDeviceGetName");
	L(Bar1, "nvmlDeviceGetBAR1MemoryInfo");
#undef L
	if (!n->Init || !n->Shutdown || !n->Count || !n->ByIndex || !n->Bar1) {
		snprintf(n->err, sizeof(n->err), "NVML library lacks required entry points");
		dlclose(n->h);
		n->h = NULL;
		return -ENODEV;
	}
	if (n->Init() != 0) {
		snprintf(n->err, sizeof(n->err), "nvmlInit failed (no NVIDIA driver loaded?)");
		dlclose(n->h);
		n->h = NULL;
		return -ENODEV;
	}
	return 0;
}

static void nvml_close(struct nvml *n)
{
	if (n->h) {
		n->Shutdown();
		dlclose(n->h);
	}
}

static int nvml_bar1(struct nvml *n, const char *bdf, struct nvml_bar1 *b)
{
	nvml_dev d;
	char id[48];

	if (!n->h || !n->ByPciBusId)
		return -ENODEV;
	/* NVML's bus IDs carry an 8-digit domain. */
	snprintf(id, sizeof(id), "0000%s", bdf);
	if (n->ByPciBusId(id, &d) != 0 && n->ByPciBusId(bdf, &d) != 0)
		return -ENOENT;
	return n->Bar1(d, b) == 0 ? 0 : -EIO;
}

/* ----------------------------------------------------------------- IOMMU */

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void print_iommu(const char *root, const char *cmdline_path)
{
	char path[PATH_MAX], cmd[4096] = "", type[64] = "", units[512] = "";
	int nunits, ngroups, pt = 0, on_cmd = 0, off_cmd = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/class/iommu", root);
	nunits = count_dir(path);
	if (nunits > 0) {
		DIR *d = opendir(path);
		struct dirent *de;

		while (d && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			if (strlen(units) + strlen(de->d_name) + 2 < sizeof(units)) {
				if (units[0])
					strcat(units, " ");
				strcat(units, de->d_name);
			}
		}
		if (d)
			closedir(d);
	}
	snprintf(path, sizeof(path), "%s/kernel/iommu_groups", root);
	ngroups = count_dir(path);
	if (ngroups > 0) {
		snprintf(path, sizeof(path), "%s/kernel/iommu_groups/0/type", root);
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%63s", type) != 1)
				type[0] = 0;
			fclose(f);
		}
	}
	f = fopen(cmdline_path, "r");
	if (f) {
		if (!fgets(cmd, sizeof(cmd), f))
			cmd[0] = 0;
		fclose(f);
	}
	printf("IOMMU:\n");
	printf("  units: %s\n", nunits > 0 ? units : "none (no /sys/class/iommu entries)");
	printf("  groups: %d%s%s\n", ngroups > 0 ? ngroups : 0, type[0] ? ", default domain type " : "",
	       type);
	printf("  kernel command line:");
	{
		int any = 0;
		static const char *const opts[] = { "intel_iommu=", "amd_iommu=", "iommu=",
						    "iommu.passthrough=", "iommu.strict=" };
		char *save = NULL, *tok, copy[sizeof(cmd)];

		snprintf(copy, sizeof(copy), "%s", cmd);
		for (tok = strtok_r(copy, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
			for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
				if (strncmp(tok, opts[i], strlen(opts[i])))
					continue;
				printf(" %s", tok);
				any = 1;
				if (!strcmp(tok, "iommu=pt") || !strcmp(tok, "iommu.passthrough=1"))
					pt = 1;
				if (strstr(tok, "=on") || strstr(tok, "=force"))
					on_cmd = 1;
				if (strstr(tok, "=off"))
					off_cmd = 1;
			}
		}
		printf("%s\n", any ? "" : " (no IOMMU options)");
	}
	if (!strcmp(type, "identity"))
		pt = 1;
	if (nunits <= 0 && ngroups <= 0) {
		printf("  state: disabled (or absent)%s\n", on_cmd ? ", although the command line asks for it" : "");
		printf("  advice: device DMA addresses are physical addresses; peerdma.ko can hand GPU BAR addresses to the device as they are\n");
	} else if (pt) {
		printf("  state: enabled, passthrough (identity mapping)%s\n", off_cmd ? "?" : "");
		printf("  advice: good for GPUDirect RDMA: DMA addresses equal physical addresses for devices in passthrough domains\n");
	} else {
		printf("  state: enabled, translating (DMA remapping)\n");
		printf("  advice: GPU BAR pages must be mapped for the third-party device (nvidia_p2p_dma_map_pages / dma-buf attachments do it; raw physical addresses fault); NVIDIA recommends iommu=pt or disabling the IOMMU for GPUDirect RDMA on bare metal, and ACS redirection off on the switches\n");
	}
}

/* ----------------------------------------------------- registration cache */

static const char *monitor_text(const char *m)
{
	if (!strcmp(m, "kernel"))
		return "peerdma.ko's MMU notifier: any memory the module pins";
	if (!strcmp(m, "userfaultfd"))
		return "the kernel's unmap, remove and remap events: private anonymous memory";
	if (!strcmp(m, "memhooks"))
		return "libc's mmap, munmap, mremap, madvise... patched: private anonymous memory";
	return "host memory is registered uncached";
}

/* What a registration cache opened here gets: a domain opened as an
 * application would, with the module where its node can be opened. */
static void print_cache(const char *kdev)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	bool have = access(kdev, R_OK | W_OK) == 0;
	const char *m;
	int ret;

	printf("peerdma.ko: %s %s\n", kdev,
	       have ? "present: host memory pinned by the module, GPU memory pinnable for devices"
		    : "absent or not accessible: host memory checked in user space, not pinned");
	pdma_domain_attr_init(&da);
	da.use_cache = 1;
	da.kernel_device = have ? kdev : NULL;
	ret = pdma_domain_open(&da, &d);
	if (ret) {
		printf("Registration cache: no domain (%s)\n", pdma_strerror(ret));
		return;
	}
	m = pdma_domain_cache_monitor(d);
	printf("Registration cache: host memory monitor %s (%s)%s\n", m, monitor_text(m),
	       getenv("PEERDMA_MR_CACHE_MONITOR") ? ", as PEERDMA_MR_CACHE_MONITOR asks" : "");
	pdma_domain_close(d);
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f, "usage: peerdma info [--device BDF] [--sysfs-root DIR] [--cmdline FILE]\n"
		   "  GPUs and their GPUDirect RDMA attributes, BAR1, driver, IOMMU state,\n"
		   "  /dev/peerdma, the host memory monitor a registration cache gets here;\n"
		   "  --device BDF: the PCIe path class between that device and each GPU\n");
}

static const char *ordering_text(int o)
{
	switch (o) {
	case 0:
		return "none (a flush, cuFlushGPUDirectRDMAWrites, is needed before CUDA reads third-party writes)";
	case 100:
		return "owner (no flush needed for the owning GPU)";
	case 200:
		return "all devices (no flush needed)";
	}
	return "unknown";
}

struct info_args {
	const char *device, *root, *cmdline;
	char dev_bdf[16];
};

/* Parse and check: 0 to run, 1 after --help, 2 after a one-line error. */
static int info_parse(int argc, char **argv, struct info_args *a)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "sysfs-root", required_argument, NULL, 's' },
		{ "cmdline", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct pdma_opt o;
	int c;

	a->device = NULL;
	a->root = "/sys";
	a->cmdline = "/proc/cmdline";
	a->dev_bdf[0] = 0;
	pdma_opt_init(&o, "peerdma info", opts, "h");
	while ((c = pdma_opt_next(&o, argc, argv)) != -1) {
		int bad = 0;

		switch (c) {
		case 'd':
			bad = pdma_opt_str(&o, &a->device);
			if (!bad && pdma_pcie_normalize_bdf(a->device, a->dev_bdf, sizeof(a->dev_bdf)))
				bad = pdma_opt_bad(&o, "not a PCI address (expected like 0000:3b:00.0)");
			break;
		case 's': bad = pdma_opt_str(&o, &a->root); break;
		case 'c': bad = pdma_opt_str(&o, &a->cmdline); break;
		case 'h': usage(stdout); return 1;
		default: return 2; /* getopt_long said why, in one line */
		}
		if (bad)
			return 2;
	}
	return pdma_opt_end(&o, argc, argv);
}

int pdma_cmd_info_check(int argc, char **argv)
{
	struct info_args a;

	return info_parse(argc, argv, &a) == 2 ? 2 : 0;
}

int pdma_cmd_info(int argc, char **argv)
{
	struct info_args a;
	char gpus[64][32];
	struct pdma_cuda *cu = NULL;
	struct nvml nv;
	int ngpu = 0, ret = info_parse(argc, argv, &a);

	if (ret)
		return ret == 1 ? 0 : 2;
	const char *device = a.device, *root = a.root, *cmdline = a.cmdline;
	const char *dev_bdf = a.dev_bdf;

	printf("peerdma info\n");
	ret = nvml_open(&nv);
	if (!ret && nv.DriverVersion) {
		char v[96] = "";

		if (nv.DriverVersion(v, sizeof(v)) == 0)
			printf("NVIDIA driver: %s (NVML)\n", v);
	} else if (ret) {
		printf("NVIDIA driver: %s\n", nv.err);
	}
	ret = pdma_cuda_open(&cu);
	if (ret) {
		printf("CUDA: not available: %s\n", pdma_cuda_last_error());
		printf("GPUs: none usable on this machine: the cuda backend and GPUDirect RDMA are "
		       "unavailable (the host and sim backends work)\n");
	} else {
		int v = pdma_cuda_driver_version(cu);

		printf("CUDA driver API: %d.%d\n", v / 1000, (v % 1000) / 10);
		ngpu = pdma_cuda_device_count(cu);
		for (int i = 0; i < ngpu && i < 64; i++) {
			struct pdma_cuda_dev_info d;
			struct nvml_bar1 b;

			if (pdma_cuda_device_info(cu, i, &d))
				continue;
			snprintf(gpus[i], sizeof(gpus[i]), "%s", d.pci_bus_id);
			printf("GPU %d: %s  PCI %s  compute capability %d.%d\n", i, d.name,
			       d.pci_bus_id, d.cc_major, d.cc_minor);
			printf("  GPUDirect RDMA: %s; dma-buf export: %s; with CUDA VMM: %s\n",
			       d.gdr_supported ? "supported" : "NOT supported",
			       d.dmabuf_supported ? "supported" : "not supported",
			       d.vmm_gdr_supported ? "supported" : "not supported");
			printf("  RDMA writes ordering: %d = %s; flush options: %s%s%s\n",
			       d.writes_ordering, ordering_text(d.writes_ordering),
			       d.flush_options & 1 ? "host" : "",
			       (d.flush_options & 3) == 3 ? "+" : "",
			       d.flush_options & 2 ? "memops" : (d.flush_options ? "" : "none"));
			if (!nvml_bar1(&nv, d.pci_bus_id, &b))
				printf("  BAR1: %llu MiB total, %llu MiB used, %llu MiB free\n",
				       b.total >> 20, b.used >> 20, b.free >> 20);
			else
				printf("  BAR1: unknown (%s)\n", nv.h ? "NVML has no such device" : nv.err);
		}
		if (ngpu > 64)
			ngpu = 64;
	}
	if (!cu) {
		/* No CUDA: still list NVIDIA GPUs sysfs knows of, for the path report. */
		char list[64][16];
		int n = pdma_pcie_list_gpus(root, list, 64);

		ngpu = n > 64 ? 64 : (n > 0 ? n : 0);
		for (int i = 0; i < ngpu; i++) {
			snprintf(gpus[i], sizeof(gpus[i]), "%s", list[i]);
			printf("NVIDIA GPU in sysfs (no driver): %s\n", gpus[i]);
		}
	}
	print_iommu(root, cmdline);
	print_cache("/dev/peerdma");

	if (device) {
		printf("PCIe path from %s:\n", dev_bdf);
		if (!ngpu)
			printf("  no GPU to compare with\n");
		for (int i = 0; i < ngpu; i++) {
			enum pdma_pcie_path p;
			char g[16];

			if (pdma_pcie_normalize_bdf(gpus[i], g, sizeof(g)) ||
			    (ret = pdma_pcie_path_class(root, dev_bdf, g, &p))) {
				printf("  GPU %d (%s): unknown (%s not found in %s/bus/pci/devices)\n", i,
				       gpus[i], dev_bdf, root);
				continue;
			}
			printf("  GPU %d (%s): %s: %s\n", i, g, pdma_pcie_path_name(p),
			       pdma_pcie_path_advice(p));
		}
	} else {
		printf("PCIe paths: give --device BDF (the NIC/FPGA/DMA engine) to classify its path to each GPU\n");
	}
	if (cu)
		pdma_cuda_close(cu);
	nvml_close(&nv);
	return 0;
}
