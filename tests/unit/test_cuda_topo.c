// SPDX-License-Identifier: MIT
/*
 * PCIe path classes (lib/cuda/topo.c) and `peerdma info` against a fake sysfs
 * tree built in a temporary directory:
 *
 *   pci0000:00 (NUMA 0)
 *     00:01.0 root port - 01:00.0 switch up
 *        02:08.0 down - 05:00.0  GPU A (10de, 0x030200)
 *        02:10.0 down - 06:00.0  NIC (15b3)               GPU A <-> NIC: PIX
 *        02:18.0 down - 07:00.0 up2 - 08:00.0 down2 - 09:00.0 FPGA   -> PXB
 *        02:20.0 down - 05:00.1 is no: 05:00.1 GPU A's audio (10de, 0x040300)
 *     00:02.0 root port - 0a:00.0 DMA engine                -> PHB
 *   pci0000:40 (NUMA 1)
 *     40:01.0 root port - 41:00.0 GPU B (10de, 0x030000)   NIC <-> GPU B: SYS
 *   pci0000:80 (NUMA 0)
 *     80:01.0 root port - 81:00.0 capture card             -> NODE with GPU A
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/topo.h"

static char root[PATH_MAX];

static void mkdirs(const char *path)
{
	char tmp[3 * PATH_MAX];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = 0;
			mkdir(tmp, 0755);
			*p = '/';
		}
	}
	mkdir(tmp, 0755);
}

static void put(const char *dir, const char *name, const char *val)
{
	char f[3 * PATH_MAX];
	FILE *fp;

	snprintf(f, sizeof(f), "%s/%s", dir, name);
	fp = fopen(f, "w");
	assert_non_null(fp);
	fputs(val, fp);
	fclose(fp);
}

/* Create devices/<rel> (rel ends with the device's BDF) and its bus link. */
static void dev(const char *rel, const char *vendor, const char *cls, const char *numa)
{
	char d[2 * PATH_MAX], link[2 * PATH_MAX], target[2 * PATH_MAX];
	const char *bdf = strrchr(rel, '/') + 1;

	snprintf(d, sizeof(d), "%s/devices/%s", root, rel);
	mkdirs(d);
	put(d, "vendor", vendor);
	put(d, "class", cls);
	put(d, "numa_node", numa);
	snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf);
	snprintf(target, sizeof(target), "../../../devices/%s", rel);
	assert_int_equal(symlink(target, link), 0);
}

static int setup(void **state)
{
	char d[PATH_MAX + 32];
	const char *sw = "pci0000:00/0000:00:01.0/0000:01:00.0";
	char rel[PATH_MAX];

	(void)state;
	snprintf(root, sizeof(root), "%s/pdma-topo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	assert_non_null(mkdtemp(root));
	snprintf(d, sizeof(d), "%s/bus/pci/devices", root);
	mkdirs(d);
	snprintf(rel, sizeof(rel), "%s/0000:02:08.0/0000:05:00.0", sw);
	dev(rel, "0x10de\n", "0x030200\n", "0\n");
	snprintf(rel, sizeof(rel), "%s/0000:02:08.0/0000:05:00.1", sw);
	dev(rel, "0x10de\n", "0x040300\n", "0\n");
	snprintf(rel, sizeof(rel), "%s/0000:02:10.0/0000:06:00.0", sw);
	dev(rel, "0x15b3\n", "0x020000\n", "0\n");
	snprintf(rel, sizeof(rel), "%s/0000:02:18.0/0000:07:00.0/0000:08:00.0/0000:09:00.0", sw);
	dev(rel, "0x10ee\n", "0x058000\n", "0\n");
	dev("pci0000:00/0000:00:02.0/0000:0a:00.0", "0x1234\n", "0x088000\n", "0\n");
	dev("pci0000:40/0000:40:01.0/0000:41:00.0", "0x10de\n", "0x030000\n", "1\n");
	dev("pci0000:80/0000:80:01.0/0000:81:00.0", "0x1d0f\n", "0x048000\n", "0\n");
	/* IOMMU: one unit, passthrough default domain; a command line. */
	snprintf(d, sizeof(d), "%s/class/iommu/dmar0", root);
	mkdirs(d);
	snprintf(d, sizeof(d), "%s/kernel/iommu_groups/0", root);
	mkdirs(d);
	put(d, "type", "identity\n");
	put(root, "cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt quiet\n");
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static enum pdma_pcie_path cls(const char *a, const char *b)
{
	enum pdma_pcie_path p = (enum pdma_pcie_path)-1;

	assert_int_equal(pdma_pcie_path_class(root, a, b, &p), 0);
	return p;
}

static void test_normalize(void **state)
{
	char out[16];

	(void)state;
	assert_int_equal(pdma_pcie_normalize_bdf("3b:00.0", out, sizeof(out)), 0);
	assert_string_equal(out, "0000:3b:00.0");
	assert_int_equal(pdma_pcie_normalize_bdf("00000000:3B:1f.7", out, sizeof(out)), 0);
	assert_string_equal(out, "0000:3b:1f.7");
	assert_int_equal(pdma_pcie_normalize_bdf("0001:00:06.0", out, sizeof(out)), 0);
	assert_string_equal(out, "0001:00:06.0");
	assert_int_equal(pdma_pcie_normalize_bdf("3b:00", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("zz:00.0", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("3b:00.8", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("3b:20.0", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("1:2:3:4.0", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("3b:00.0x", out, sizeof(out)), -EINVAL);
	assert_int_equal(pdma_pcie_normalize_bdf("3b:00.0", out, 12), -EINVAL);
}

static void test_classes(void **state)
{
	enum pdma_pcie_path p;

	(void)state;
	assert_int_equal(cls("0000:05:00.0", "0000:06:00.0"), PDMA_PCIE_PIX);
	assert_int_equal(cls("06:00.0", "05:00.0"), PDMA_PCIE_PIX);       /* symmetric */
	assert_int_equal(cls("05:00.0", "05:00.1"), PDMA_PCIE_PIX);       /* same port */
	assert_int_equal(cls("05:00.0", "09:00.0"), PDMA_PCIE_PXB);       /* nested switch */
	assert_int_equal(cls("09:00.0", "05:00.0"), PDMA_PCIE_PXB);
	assert_int_equal(cls("05:00.0", "0a:00.0"), PDMA_PCIE_PHB);       /* root complex */
	assert_int_equal(cls("06:00.0", "0000:41:00.0"), PDMA_PCIE_SYS);  /* other socket */
	assert_int_equal(cls("05:00.0", "81:00.0"), PDMA_PCIE_NODE);      /* other root, NUMA 0 */
	assert_int_equal(cls("05:00.0", "05:00.0"), PDMA_PCIE_SELF);
	assert_int_equal(pdma_pcie_path_class(root, "05:00.0", "77:00.0", &p), -ENOENT);
	assert_int_equal(pdma_pcie_path_class(root, "bogus", "05:00.0", &p), -EINVAL);
	assert_string_equal(pdma_pcie_path_name(PDMA_PCIE_PIX), "PIX");
	assert_string_equal(pdma_pcie_path_name(PDMA_PCIE_PXB), "PXB");
	assert_string_equal(pdma_pcie_path_name(PDMA_PCIE_PHB), "PHB");
	assert_string_equal(pdma_pcie_path_name(PDMA_PCIE_SYS), "SYS");
	assert_non_null(strstr(pdma_pcie_path_advice(PDMA_PCIE_SYS), "unsupported"));
	assert_non_null(strstr(pdma_pcie_path_advice(PDMA_PCIE_PIX), "best"));
}

static void test_list_gpus(void **state)
{
	char g[4][16];

	(void)state;
	/* The audio function and the other vendors' devices are not GPUs. */
	assert_int_equal(pdma_pcie_list_gpus(root, g, 4), 2);
	assert_string_equal(g[0], "0000:05:00.0");
	assert_string_equal(g[1], "0000:41:00.0");
	assert_int_equal(pdma_pcie_list_gpus(root, g, 1), 2);
	assert_string_equal(g[0], "0000:05:00.0");
	assert_int_equal(pdma_pcie_list_gpus("/nonexistent", g, 4), -ENOENT);
}

/* The tool on the fake tree, no CUDA driver: exit 0 and a clear report. */
static void test_tool_info(void **state)
{
	const char *tool = getenv("PEERDMA_TOOL");
	char cmd[3 * PATH_MAX], out[16384];
	size_t n;
	FILE *p;
	int st;

	(void)state;
	if (!tool) {
		printf("# PEERDMA_TOOL not set (run under ctest): tool not checked\n");
		skip();
	}
	snprintf(cmd, sizeof(cmd),
		 "PEERDMA_LIBCUDA=/nonexistent/libcuda.so.1 PEERDMA_LIBNVML=/nonexistent/libnvidia-ml.so.1 "
		 "'%s' info --sysfs-root '%s' --cmdline '%s/cmdline' --device 06:00.0 2>&1",
		 tool, root, root);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	st = pclose(p);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "CUDA: not available"));
	assert_non_null(strstr(out, "GPUs: none usable"));
	assert_non_null(strstr(out, "NVIDIA GPU in sysfs (no driver): 0000:05:00.0"));
	assert_non_null(strstr(out, "units: dmar0"));
	assert_non_null(strstr(out, "intel_iommu=on iommu=pt"));
	assert_non_null(strstr(out, "state: enabled, passthrough"));
	assert_non_null(strstr(out, "PCIe path from 0000:06:00.0:"));
	assert_non_null(strstr(out, "GPU 0 (0000:05:00.0): PIX: best"));
	assert_non_null(strstr(out, "GPU 1 (0000:41:00.0): SYS:"));

	/* A bad address is a usage error. */
	snprintf(cmd, sizeof(cmd), "'%s' info --device nonsense >/dev/null 2>&1", tool);
	st = system(cmd);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_classes),
		cmocka_unit_test(test_list_gpus),
		cmocka_unit_test(test_tool_info),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
