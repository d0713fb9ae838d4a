// SPDX-License-Identifier: MIT
/*
 * PCIe path classes from sysfs: see topo.h.
 *
 * A device's sysfs path lists the bridges above it:
 *   /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0
 *   root complex ^          root port ^   switch up ^   switch down ^  device ^
 * Two devices under different roots go through host bridges (NODE if both
 * roots sit on one NUMA node, else SYS). Under one root, the components they
 * share are the bridges common to both paths: none shared -> PHB (the root
 * complex connects them); else each device's own bridges below the last
 * shared one count its side: at most one on each side -> PIX (one switch),
 * more -> PXB.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/topo.h"

#define MAXC 32

const char *pdma_pcie_path_name(enum pdma_pcie_path p)
{
	static const char *const n[] = { "X", "PIX", "PXB", "PHB", "NODE", "SYS" };

	return (unsigned)p < sizeof(n) / sizeof(n[0]) ? n[p] : "?";
}

const char *pdma_pcie_path_advice(enum pdma_pcie_path p)
{
	switch (p) {
	case PDMA_PCIE_SELF:
		return "the same device";
	case PDMA_PCIE_PIX:
		return "best: both behind one PCIe switch; peer-to-peer traffic stays in the switch (full bandwidth, lowest latency)";
	case PDMA_PCIE_PXB:
		return "good: behind a tree of PCIe switches, no CPU on the path; bandwidth is that of the narrowest link";
	case PDMA_PCIE_PHB:
		return "works on many CPUs but peer-to-peer through the root complex is often slower (reads especially); prefer a switch; check the platform";
	case PDMA_PCIE_NODE:
		return "through host bridges of one CPU socket: peer-to-peer may be slow or unsupported; consider staging through host memory";
	case PDMA_PCIE_SYS:
		return "across the CPU interconnect (QPI/UPI/Infinity Fabric): GPUDirect RDMA is generally unsupported or very slow; stage through host memory or move a device";
	}
	return "?";
}

int pdma_pcie_normalize_bdf(const char *in, char *out, size_t outlen)
{
	unsigned long dom = 0, bus, dev, fn;
	const char *s = in;
	char *end;
	int colons = 0;

	if (!in || outlen < 13)
		return -EINVAL;
	for (const char *c = in; *c; c++)
		colons += *c == ':';
	if (colons == 2) {
		dom = strtoul(s, &end, 16);
		if (end == s || *end != ':' || dom > 0xffff)
			return -EINVAL;
		s = end + 1;
	} else if (colons != 1) {
		return -EINVAL;
	}
	if (!isxdigit((unsigned char)*s))
		return -EINVAL;
	bus = strtoul(s, &end, 16);
	if (end == s || *end != ':' || bus > 0xff)
		return -EINVAL;
	s = end + 1;
	if (!isxdigit((unsigned char)*s))
		return -EINVAL;
	dev = strtoul(s, &end, 16);
	if (end == s || *end != '.' || dev > 0x1f)
		return -EINVAL;
	s = end + 1;
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	fn = strtoul(s, &end, 16);
	if (end == s || *end || fn > 7)
		return -EINVAL;
	snprintf(out, outlen, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
	return 0;
}

/* Is s a "dddd:bb:dd.f" component? */
static int is_bdf(const char *s)
{
	char tmp[16];

	return strlen(s) == 12 && !pdma_pcie_normalize_bdf(s, tmp, sizeof(tmp));
}

struct chain {
	char root[32];      /* "pci0000:00" */
	char comp[MAXC][16];/* bridges then the device itself */
	int n;
	char path[PATH_MAX];
};

static int read_chain(const char *root, const char *bdf_in, struct chain *c)
{
	char link[PATH_MAX], bdf[16], *save = NULL, *tok, *p;
	int in_root = 0;

	if (pdma_pcie_normalize_bdf(bdf_in, bdf, sizeof(bdf)))
		return -EINVAL;
	snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf);
	if (!realpath(link, c->path))
		return -ENOENT;
	memset(c->root, 0, sizeof(c->root));
	c->n = 0;
	snprintf(link, sizeof(link), "%s", c->path);
	for (tok = strtok_r(link, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		if (!strncmp(tok, "pci", 3) && strchr(tok, ':') && !is_bdf(tok)) {
			snprintf(c->root, sizeof(c->root), "%s", tok);
			c->n = 0;
			in_root = 1;
			continue;
		}
		if (in_root && is_bdf(tok) && c->n < MAXC) {
			snprintf(c->comp[c->n], sizeof(c->comp[0]), "%s", tok);
			for (p = c->comp[c->n]; *p; p++)
				*p = (char)tolower((unsigned char)*p);
			c->n++;
		}
	}
	if (!in_root || !c->n || strcmp(c->comp[c->n - 1], bdf))
		return -ENOENT;
	return 0;
}

static int numa_node(const char *devpath)
{
	char f[PATH_MAX + 16];
	FILE *fp;
	int n = -1;

	snprintf(f, sizeof(f), "%s/numa_node", devpath);
	fp = fopen(f, "r");
	if (!fp)
		return -1;
	if (fscanf(fp, "%d", &n) != 1)
		n = -1;
	fclose(fp);
	return n;
}

int pdma_pcie_path_class(const char *sysfs_root, const char *bdf_a, const char *bdf_b,
			 enum pdma_pcie_path *path)
{
	struct chain *a, *b;
	int ret = 0, k = 0;

	a = malloc(sizeof(*a));
	b = malloc(sizeof(*b));
	if (!a || !b) {
		free(a);
		free(b);
		return -ENOMEM;
	}
	if ((ret = read_chain(sysfs_root, bdf_a, a)) || (ret = read_chain(sysfs_root, bdf_b, b)))
		goto out;
	if (a->n == b->n && !strcmp(a->comp[a->n - 1], b->comp[b->n - 1])) {
		*path = PDMA_PCIE_SELF;
		goto out;
	}
	if (strcmp(a->root, b->root)) {
		int na = numa_node(a->path), nb = numa_node(b->path);

		*path = na >= 0 && na == nb ? PDMA_PCIE_NODE : PDMA_PCIE_SYS;
		goto out;
	}
	while (k < a->n - 1 && k < b->n - 1 && !strcmp(a->comp[k], b->comp[k]))
		k++;
	if (k == 0) {
		*path = PDMA_PCIE_PHB;
	} else {
		/* Bridges below the last shared one, on each side (the device
		 * itself not counted). */
		int sa = a->n - 1 - k, sb = b->n - 1 - k;

		*path = sa <= 1 && sb <= 1 ? PDMA_PCIE_PIX : PDMA_PCIE_PXB;
	}
out:
	free(a);
	free(b);
	return ret;
}

static int read_hex(const char *dir, const char *name, unsigned long *v)
{
	char f[PATH_MAX + 400];
	FILE *fp;
	int ok;

	snprintf(f, sizeof(f), "%s/%s", dir, name);
	fp = fopen(f, "r");
	if (!fp)
		return -1;
	ok = fscanf(fp, "%lx", v) == 1;
	fclose(fp);
	return ok ? 0 : -1;
}

static int cmp_bdf(const void *x, const void *y)
{
	return strcmp(x, y);
}

int pdma_pcie_list_gpus(const char *sysfs_root, char (*bdfs)[16], int max)
{
	char dir[PATH_MAX], d2[PATH_MAX + 300];
	struct dirent *de;
	DIR *dp;
	int n = 0, kept = 0;

	snprintf(dir, sizeof(dir), "%s/bus/pci/devices", sysfs_root);
	dp = opendir(dir);
	if (!dp)
		return -errno;
	while ((de = readdir(dp))) {
		unsigned long vendor = 0, cls = 0;

		if (!is_bdf(de->d_name))
			continue;
		snprintf(d2, sizeof(d2), "%s/%s", dir, de->d_name);
		if (read_hex(d2, "vendor", &vendor) || read_hex(d2, "class", &cls))
			continue;
		if (vendor != 0x10de || (cls >> 16) != 0x03)
			continue;
		if (kept < max)
			pdma_pcie_normalize_bdf(de->d_name, bdfs[kept++], 16);
		n++;
	}
	closedir(dp);
	qsort(bdfs, (size_t)kept, sizeof(bdfs[0]), cmp_bdf);
	return n;
}
