// SPDX-License-Identifier: MIT
/*
 * CUDA IPC memory in the registration cache, between two processes, with the
 * deallocation hooks in place (this program links libpeerdma_cuda_hooks.so as
 * LD_PRELOAD would load it: tests/CMakeLists.txt, PDMA_HOOKED_TESTS) and the
 * default `auto` mode.
 *
 * The parent allocates a buffer (cuMemAlloc), fills it and exports it
 * (cuIpcGetMemHandle). The child, a second instance of this program started
 * with fork + exec (CUDA cannot be used in a forked child before exec),
 * opens the handle (cuIpcOpenMemHandle), registers it through libpeerdma with
 * the cache on, closes the MR and closes the mapping. The parent frees the
 * buffer, allocates a new one, fills it with other bytes and exports it; the
 * child opens it, often at the same address, and registers again. That
 * registration must be a fresh one: its pin's buffer ID is the new mapping's
 * and reading at the registered address (cuMemcpyDtoH) gives the new bytes.
 *   round 1  first buffer; the close goes through the hooked
 *            cuIpcCloseMemHandle
 *   round 2  second buffer: fresh? The close this time goes straight to the
 *            driver (libcuda's own function, as a program that fetched it
 *            with cuGetProcAddress would call it): the hooks never see it
 *   round 3  third buffer: fresh all the same (auto keeps the buffer-ID
 *            check for IPC mappings)
 * Before the cuIpcCloseMemHandle hook and the per-allocation `auto`, round 2
 * (when its mapping lands at round 1's address) got round 1's cached region.
 * PDMA_IPC_TRUST_ALL=1 runs the child under the old trust-everything policy
 * (PEERDMA_CUDA_MONITOR=hooks): round 3 then gets round 2's region, closed
 * past the hooks, and the test fails (the negative control).
 *
 * Commands go to the child over a pipe on its stdin, one line each:
 *   "OPEN <round> <128 hex digits of the handle> <fill byte>"
 * and its answers come back over a pipe on its stdout:
 *   "DONE <passed> <failed>" after the last round.
 * Each check prints one PASS/FAIL line; the parent ends with
 * "N passed, N failed". Elsewhere: "skipped: no CUDA device", exit 77.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cuda/api.h"
#include "mem/cuda.h"
#include "mr/domain.h"
#include "peerdma/mr.h"

#define PEERDMA_DEVICE_PATH "/dev/peerdma"

/* The hooked entry point (lib/hooks/driver.c, in libpeerdma_cuda_hooks.so). */
pdma_cu_result cuIpcCloseMemHandle(pdma_cu_ptr dptr);

#define SIZE (4u << 20)
#define ROUNDS 3

static const struct pdma_cu_api *api;
static int passed, failed;
/* Rounds whose mapping could not be pinned at all: no dma-buf export of IPC
 * mappings (the H100's driver) and no peerdma.ko to pin them with nv-p2p. */
static int unpinnable;
static bool kernel_device; /* the child's domain has one */
static const char *who = "parent";

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s: ", ok ? "PASS" : "FAIL", who);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (ok)
		passed++;
	else
		failed++;
}

static int cuda_up(void)
{
	pdma_cu_ctx ctx;
	char msg[256];

	if (pdma_cu_get(&api, msg, sizeof(msg))) {
		printf("skipped: no CUDA device (%s)\n", msg);
		return 77;
	}
	if (!api->IpcGetMemHandle || !api->IpcOpenMemHandle || !api->IpcCloseMemHandle) {
		printf("skipped: this driver exports no CUDA IPC entry points\n");
		return 77;
	}
	if (api->DevicePrimaryCtxRetain(&ctx, 0) != PDMA_CU_SUCCESS ||
	    api->CtxSetCurrent(ctx) != PDMA_CU_SUCCESS) {
		printf("FAIL %s: cannot make device 0's primary context current\n", who);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------ child */

static uint64_t buffer_id_of(pdma_cu_ptr p)
{
	unsigned long long id = 0;

	if (api->PointerGetAttribute(&id, PDMA_CU_POINTER_ATTRIBUTE_BUFFER_ID, p))
		return 0;
	return id;
}

static int unhex(const char *s, pdma_cu_ipc_mem_handle *h)
{
	for (int i = 0; i < PDMA_CU_IPC_HANDLE_SIZE; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		h->reserved[i] = (char)v;
	}
	return 0;
}

static struct pdma_cache_stats stats(struct pdma_domain *d)
{
	struct pdma_cache_stats st;

	pdma_cache_get_stats(d->cache, &st);
	return st;
}

/* One round: open the handle, register, check, close the MR and the mapping. */
static void child_round(struct pdma_domain *d, int round, const pdma_cu_ipc_mem_handle *h,
			unsigned fill, pdma_cu_ptr *prev_va, uint64_t *prev_id)
{
	struct iovec iov;
	struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1, .access = PDMA_REMOTE_WRITE,
				  .iface = PDMA_HMEM_CUDA };
	struct pdma_cache_stats s0, s1;
	struct pdma_cuda_pin_info pi;
	struct pdma_region *r;
	unsigned char buf[4096];
	pdma_cu_ptr va = 0;
	struct pdma_mr *m;
	pdma_cu_result cr;
	uint64_t id;
	int ret, same, cached;

	cr = api->IpcOpenMemHandle(&va, *h, PDMA_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	check(cr == PDMA_CU_SUCCESS, "round %d: cuIpcOpenMemHandle: %s", round, pdma_cu_errname(cr));
	if (cr)
		return;
	id = buffer_id_of(va);
	same = round > 1 && va == *prev_va;
	printf("# %s: round %d: mapped at %#llx, buffer ID %llu%s\n", who, round,
	       (unsigned long long)va, (unsigned long long)id,
	       round == 1 ? "" : same ? " (the previous round's address)" :
			      " (not the previous round's address: staleness not exercised)");
	check(!pdma_cuda_alloc_seen(va, id),
	      "round %d: IPC mapping not listed as seen by the hooks (auto keeps its check)", round);
	s0 = stats(d);
	iov.iov_base = (void *)(uintptr_t)va;
	iov.iov_len = SIZE;
	ret = pdma_mr_regattr(d, &a, 0, &m);
	if (ret && !getenv("PEERDMA_CUDA_DMABUF")) {
		/* Not this test's question, but worth knowing: say it, and go
		 * on without the dma-buf export (the nv-p2p kind of pin). */
		printf("NOTE %s: round %d: registering the IPC mapping with a dma-buf export failed (%d: %s); again with PEERDMA_CUDA_DMABUF=0\n",
		       who, round, ret, pdma_cuda_last_error());
		setenv("PEERDMA_CUDA_DMABUF", "0", 1);
		s0 = stats(d);
		ret = pdma_mr_regattr(d, &a, 0, &m);
	}
	if (ret == -EOPNOTSUPP && !getenv("PDMA_IPC_NEED_KDEV") && !kernel_device) {
		/* Nothing succeeds without a pin: the refusal is the answer,
		 * and a registration never made cannot go stale. */
		ret = pdma_mr_regattr(d, &a, 0, &m);
		check(ret == -EOPNOTSUPP,
		      "round %d: without a dma-buf export or peerdma.ko the IPC mapping is refused (-EOPNOTSUPP), again on a second try (%d): nothing cached",
		      round, ret);
		unpinnable++;
		api->IpcCloseMemHandle(va);
		return;
	}
	check(ret == 0, "round %d: register the IPC mapping: %d%s", round, ret,
	      ret == -EOPNOTSUPP ? " (no dma-buf export and no kernel device: load peerdma.ko)" : "");
	if (ret) {
		api->IpcCloseMemHandle(va);
		return;
	}
	s1 = stats(d);
	cached = s1.uncached == s0.uncached;
	r = m->segs[0].region;
	check(s1.misses == s0.misses + 1, "round %d: fresh registration (cache misses %llu -> %llu)",
	      round, (unsigned long long)s0.misses, (unsigned long long)s1.misses);
	if (round == 3 && same)
		check(s1.stale_rejected == s0.stale_rejected + 1,
		      "round %d: the buffer-ID check turned away the region of the mapping closed past the hooks",
		      round);
	check(r->buffer_id == id && id && id != *prev_id,
	      "round %d: region's buffer ID %llu is the new mapping's %llu (previous %llu)", round,
	      (unsigned long long)r->buffer_id, (unsigned long long)id,
	      (unsigned long long)*prev_id);
	ret = pdma_cuda_pin_info(r->pin, &pi);
	check(ret == 0 && pi.buffer_id == id && !pi.revoked,
	      "round %d: the pin is of the new allocation, live (pin buffer ID %llu, dma-buf fd %d)",
	      round, (unsigned long long)pi.buffer_id, pi.dmabuf_fd);
	memset(buf, 0, sizeof(buf));
	cr = api->MemcpyDtoH(buf, r->start, sizeof(buf));
	check(cr == PDMA_CU_SUCCESS && buf[0] == fill && buf[sizeof(buf) - 1] == fill,
	      "round %d: cuMemcpyDtoH at the registered address reads the new data (%#x, want %#x)",
	      round, buf[0], fill);
	check(pdma_mr_close(m) == 0, "round %d: close the MR", round);

	s0 = stats(d);
	if (round == 2) {
		/* Past the hooks: libcuda's own function. */
		cr = api->IpcCloseMemHandle(va);
		check(cr == PDMA_CU_SUCCESS, "round %d: cuIpcCloseMemHandle past the hooks: %s",
		      round, pdma_cu_errname(cr));
	} else {
		cr = cuIpcCloseMemHandle(va);
		s1 = stats(d);
		/* A region of memory without a buffer ID is not cached in
		 * auto mode: then there is nothing to drop. */
		check(cr == PDMA_CU_SUCCESS && (!cached || s1.invalidations > s0.invalidations),
		      "round %d: hooked cuIpcCloseMemHandle dropped the cached region (%s; invalidations %llu -> %llu)",
		      round, cached ? "cached" : "was not cached", (unsigned long long)s0.invalidations,
		      (unsigned long long)s1.invalidations);
	}
	*prev_va = va;
	*prev_id = id;
}

static int child_main(void)
{
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	pdma_cu_ptr prev_va = 0;
	uint64_t prev_id = 0;
	char line[512];
	int ret;

	who = "child";
	/* The negative control (run-h100.sh): PDMA_IPC_TRUST_ALL=1 gives the
	 * child the policy `auto` had before per-allocation trust, trusting
	 * the hooks for all CUDA memory; round 3 must then fail. */
	if (getenv("PDMA_IPC_TRUST_ALL"))
		setenv("PEERDMA_CUDA_MONITOR", "hooks", 1);
	ret = cuda_up();
	if (ret)
		return ret;
	pdma_domain_attr_init(&da);
	da.use_cache = 1;
	/* An IPC mapping the driver will not export as a dma-buf is pinned
	 * with nv-p2p, which only peerdma.ko can do: use it where it is
	 * loaded (without it such a registration fails with -EOPNOTSUPP). */
	if (!access(PEERDMA_DEVICE_PATH, R_OK | W_OK))
		da.kernel_device = PEERDMA_DEVICE_PATH;
	printf("# child: domain %s a kernel device\n", da.kernel_device ? "with" : "without");
	kernel_device = da.kernel_device != NULL;
	ret = pdma_domain_open(&da, &d);
	if (ret) {
		check(0, "pdma_domain_open: %d", ret);
		return 1;
	}
	check(pdma_cuda_monitor_mode() == PDMA_CUDA_MON_AUTO, "hooks detected: auto mode");
	check(stats(d).mode[PDMA_HMEM_CUDA] == PDMA_CACHE_MODE_TRUST_WATCHED,
	      "the cache trusts only what the hooks saw made (TRUST_WATCHED)");
	while (fgets(line, sizeof(line), stdin)) {
		pdma_cu_ipc_mem_handle h;
		char hex[2 * PDMA_CU_IPC_HANDLE_SIZE + 1];
		unsigned fill;
		int round;

		if (sscanf(line, "OPEN %d %128s %x", &round, hex, &fill) != 3 ||
		    strlen(hex) != 2 * PDMA_CU_IPC_HANDLE_SIZE || unhex(hex, &h)) {
			check(0, "bad command: %s", line);
			break;
		}
		child_round(d, round, &h, fill, &prev_va, &prev_id);
		/* The parent frees the buffer only after this answer. */
		fprintf(stderr, "ROUND %d\n", round);
		fflush(stderr);
	}
	check(pdma_domain_close(d) == 0, "close the domain");
	fprintf(stderr, "DONE %d %d %d\n", passed, failed, unpinnable);
	return failed ? 1 : 0;
}

/* ----------------------------------------------------------------- parent */

/* The child's line starting with word, up to three numbers after it (c may
 * be NULL); its other lines are its diagnostics, passed on. */
static int expect(FILE *from_child, const char *word, int *a, int *b, int *c)
{
	char line[256];
	int dummy;

	while (fgets(line, sizeof(line), from_child)) {
		if (!strncmp(line, word, strlen(word)) &&
		    sscanf(line + strlen(word), "%d %d %d", a, b, c ? c : &dummy) >= 1)
			return 0;
		fputs(line, stderr); /* the child's own diagnostics */
	}
	return -EPIPE;
}

int main(int argc, char **argv)
{
	int to_child[2], from_child[2], ret, status, cp = 0, cf = 0, x;
	FILE *to, *from;
	pid_t pid;

	alarm(240); /* a hung driver call or child fails the test, not the run */
	signal(SIGPIPE, SIG_IGN); /* a child that died early: EPIPE, reported */
	if (argc > 1 && !strcmp(argv[1], "--child"))
		return child_main();
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = cuda_up();
	if (ret)
		return ret;
	if (pipe(to_child) || pipe(from_child)) {
		perror("pipe");
		return 1;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		/* No CUDA call here: straight to exec. The child's PASS/FAIL
		 * lines share our stdout; its answers come on stderr's pipe. */
		char *args[] = { argv[0], "--child", NULL };

		dup2(to_child[0], 0);
		dup2(from_child[1], 2);
		close(to_child[0]);
		close(to_child[1]);
		close(from_child[0]);
		close(from_child[1]);
		unsetenv("PEERDMA_CUDA_MONITOR");
		unsetenv("PEERDMA_MR_CUDA_CACHE_TAG_CHECK");
		unsetenv("PEERDMA_MR_CUDA_CACHE_MONITOR_ENABLED");
		execv("/proc/self/exe", args);
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	to = fdopen(to_child[1], "w");
	from = fdopen(from_child[0], "r");
	for (int round = 1; round <= ROUNDS; round++) {
		unsigned fill = 0xa0 + (unsigned)round * 0x11;
		pdma_cu_ipc_mem_handle h;
		pdma_cu_ptr p = 0;
		pdma_cu_result cr;

		cr = api->MemAlloc(&p, SIZE);
		if (!cr)
			cr = api->MemsetD8(p, (unsigned char)fill, SIZE);
		if (!cr)
			cr = api->CtxSynchronize();
		if (!cr)
			cr = api->IpcGetMemHandle(&h, p);
		check(cr == PDMA_CU_SUCCESS,
		      "round %d: cuMemAlloc + fill %#x + cuIpcGetMemHandle at %#llx: %s", round, fill,
		      (unsigned long long)p, pdma_cu_errname(cr));
		if (cr)
			break;
		fprintf(to, "OPEN %d ", round);
		for (int i = 0; i < PDMA_CU_IPC_HANDLE_SIZE; i++)
			fprintf(to, "%02x", (unsigned char)h.reserved[i]);
		fprintf(to, " %x\n", fill);
		fflush(to);
		check(expect(from, "ROUND", &x, &x, NULL) == 0, "round %d: the child answered", round);
		/* The child has closed its mapping: free, so the next buffer
		 * may take this one's place. */
		cr = api->MemFree(p);
		check(cr == PDMA_CU_SUCCESS, "round %d: cuMemFree: %s", round, pdma_cu_errname(cr));
	}
	fclose(to);
	check(expect(from, "DONE", &cp, &cf, &unpinnable) == 0, "the child reported its results");
	fclose(from);
	if (waitpid(pid, &status, 0) != pid)
		status = -1;
	check(WIFEXITED(status) && WEXITSTATUS(status) == (cf ? 1 : 0),
	      "the child exited with %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	printf("%d passed, %d failed\n", passed + cp, failed + cf);
	if (!failed && !cf && unpinnable) {
		/* What this test is for (a stale cache hit after the mapping
		 * closed past the hooks) needs registrations: say so, and count
		 * it as skipped, not passed. PDMA_IPC_NEED_KDEV=1 makes the
		 * refusal a failure instead. */
		printf("skipped: %d of %d rounds' IPC mappings cannot be pinned here (no dma-buf export, no peerdma.ko): the staleness rounds need peerdma.ko\n",
		       unpinnable, ROUNDS);
		return 77;
	}
	return failed + cf ? 1 : 0;
}
