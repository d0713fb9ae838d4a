// SPDX-License-Identifier: MIT
/*
 * What kind of mapping a host range is, from /proc/self/maps, read with a
 * stack buffer and no malloc (the memhooks monitor calls this from inside the
 * allocator).
 *
 * Why the cache asks: the user-space monitors see changes made by this process
 * only. Private anonymous memory (heap, anonymous mmap, stacks) can change only
 * through this process's own calls, which they see; a shared or file-backed
 * mapping can lose its pages through another process (ftruncate, fallocate
 * hole punch, madvise(MADV_REMOVE) in a process sharing it), which no monitor
 * here sees. Such memory is registered but not cached. The kernel monitor
 * (peerdma.ko's MMU notifier) sees every change, whoever makes it.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "monitor/monitor.h"

int pdma_vma_walk(int (*fn)(void *arg, const struct pdma_vma *v), void *arg)
{
	char buf[4096];
	size_t have = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -1;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *line = buf, *nl;

		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		while ((nl = strchr(line, '\n'))) {
			struct pdma_vma v;
			unsigned long long s, e, ino;
			char perms[8];
			int off = 0;

			*nl = 0;
			if (sscanf(line, "%llx-%llx %7s %*s %*s %llu %n", &s, &e, perms, &ino, &off) >= 4) {
				v.start = s;
				v.end = e;
				v.inode = ino;
				v.shared = perms[3] == 's';
				v.name = off ? line + off : "";
				ret = fn(arg, &v);
				if (ret)
					goto out;
			}
			line = nl + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* a line longer than the buffer: a path; skip it */
	}
out:
	close(fd);
	return ret;
}

struct anon_walk {
	uint64_t next, end;
};

static int anon_step(void *arg, const struct pdma_vma *v)
{
	struct anon_walk *w = arg;
	bool anon = !v->shared && !v->inode && (!v->name[0] || v->name[0] == '[');

	if (v->end <= w->next)
		return 0;
	if (v->start > w->next || !anon)
		return -1; /* a hole or another kind of mapping */
	w->next = v->end;
	return w->next >= w->end ? 1 : 0;
}

bool pdma_vma_private_anon(uint64_t start, size_t len)
{
	struct anon_walk w = { .next = start, .end = start + len };

	return len && pdma_vma_walk(anon_step, &w) == 1;
}
