// SPDX-License-Identifier: MIT
/*
 * Host memory monitor through patched C library entry points
 * (PEERDMA_MR_CACHE_MONITOR=memhooks; the fallback when userfaultfd is not
 * available, e.g. under Docker's default seccomp profile or as a non-root
 * user): mmap(MAP_FIXED), munmap, mremap, madvise(MADV_DONTNEED, MADV_FREE,
 * MADV_REMOVE), brk and sbrk (shrinking), shmat(SHM_REMAP) and shmdt call
 * pdma_monitor_notify(PDMA_HMEM_SYSTEM, ...) BEFORE the memory goes, then make
 * the system call themselves.
 *
 * Why the code and not the symbol bindings: the C library calls its own
 * functions internally without going through any GOT slot (free() of an
 * mmap'ed chunk calls __munmap, malloc trimming calls __sbrk and __madvise,
 * thread stacks are unmapped by __munmap), so interposing the symbols misses
 * exactly the unmaps an allocator makes. Like UCX's ucm "bistro" mode, the
 * first bytes of each libc function are overwritten with a jump to the hook
 * (movabs $hook, %r11; jmp *%r11: 13 bytes, inside every one of these
 * functions, which are at least 33 bytes long); internal aliases (__munmap is
 * munmap) share the code and are caught too. The hooks never call the
 * original: they issue the system call with syscall(2) and keep glibc's
 * __curbrk up to date themselves, so no instruction of the original needs to
 * be relocated. The patch is written while other threads may run: the first
 * two bytes become a jump-to-self while the rest is written, then the real
 * first two bytes (a thread arriving meanwhile spins for a moment).
 *
 * Guarantee: synchronous, for every change made through the C library (the
 * program, any library, the allocator): the invalidation is complete before
 * the system call is made. Limits, documented in README.md: raw system calls
 * (syscall(2), inline assembly, statically linked runtimes such as Go's) and
 * the dynamic loader's own unmaps (dlclose) are not seen; and allocators that
 * unmap through raw system calls make the monitor unusable, so it refuses to
 * start (-ENOTSUP) under ASan, TSan, MSan, HWASan, LSan and valgrind, whose
 * allocators replace malloc. It needs a writable+executable mapping of libc's
 * code for a moment (refused by some hardened kernels: -EACCES) and a dynamic
 * libc (-ENOSYS in static programs). x86_64 only.
 *
 * Reentrancy: a hook that fires while the thread is already inside peerdma's
 * invalidation (or inside a cache writer section: pdma_monitor_enter) skips
 * the notification. That is sound because such code only maps and unmaps the
 * library's own memory, never memory an application registered: cache writer
 * sections do not call malloc or free (lib/cache/ allocates with mmap there).
 * Once installed the patches stay (the library is made unloadable, see
 * pin_self()); with no cache using them the hooks only make the system call.
 * Cost: a TLS test and a flag test per call; a notification (a lock per cache)
 * per unmap.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>

#include "monitor/monitor.h"

static pthread_mutex_t mh_lock = PTHREAD_MUTEX_INITIALIZER;
static int mh_refs;
static int mh_installed; /* 0 not tried, 1 installed, -errno failed */
static atomic_int mh_active;
static void **mh_curbrk; /* glibc's __curbrk: sbrk's idea of the break */

/* Initial-exec: a hook may run inside malloc, where the dynamic TLS model
 * could call malloc to allocate the block. */
static __thread int mh_depth __attribute__((tls_model("initial-exec")));

void pdma_monitor_enter(void)
{
	mh_depth++;
}

void pdma_monitor_leave(void)
{
	mh_depth--;
}

static inline void mh_notify(const void *addr, size_t len)
{
	if (!atomic_load_explicit(&mh_active, memory_order_acquire) || !len || mh_depth)
		return;
	mh_depth++;
	pdma_monitor_notify(PDMA_HMEM_SYSTEM, (uint64_t)(uintptr_t)addr, len);
	mh_depth--;
}

static void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (flags & MAP_FIXED)
		mh_notify(addr, len);
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static int hook_munmap(void *addr, size_t len)
{
	mh_notify(addr, len);
	return (int)syscall(SYS_munmap, addr, len);
}

/* mremap is variadic; on x86_64 the fifth argument is in r8 whether or not
 * the caller passed one, and it is only read with MREMAP_FIXED. */
static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	/* The old pages move or shrink (or stay, when growing in place: a
	 * needless invalidation, never a missed one). */
	mh_notify(old, old_len);
	if (flags & MREMAP_FIXED)
		mh_notify(new_addr, new_len);
	return (void *)syscall(SYS_mremap, old, old_len, new_len, flags, new_addr);
}

static int hook_madvise(void *addr, size_t len, int advice)
{
	switch (advice) {
	case MADV_DONTNEED:
	case MADV_REMOVE:
#ifdef MADV_FREE
	case MADV_FREE:
#endif
#ifdef MADV_DONTNEED_LOCKED
	case MADV_DONTNEED_LOCKED:
#endif
		mh_notify(addr, len);
		break;
	default:
		break;
	}
	return (int)syscall(SYS_madvise, addr, len, advice);
}

/* brk(2) returns the new break, or the old one when it cannot move. */
static void *raw_brk(void *addr)
{
	return (void *)syscall(SYS_brk, addr);
}

static int hook_brk(void *addr)
{
	char *cur = *mh_curbrk ? *mh_curbrk : raw_brk(NULL);

	if ((char *)addr < cur)
		mh_notify(addr, (size_t)(cur - (char *)addr));
	*mh_curbrk = raw_brk(addr);
	if ((char *)*mh_curbrk < (char *)addr) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/* glibc's sbrk issues the brk system call inline, not through brk(). */
static void *hook_sbrk(intptr_t incr)
{
	char *old;

	if (!*mh_curbrk)
		*mh_curbrk = raw_brk(NULL);
	old = *mh_curbrk;
	if (!incr)
		return old;
	if (incr > 0 ? (uintptr_t)old + (uintptr_t)incr < (uintptr_t)old
		     : (uintptr_t)old < (uintptr_t)-incr) {
		errno = ENOMEM;
		return (void *)-1;
	}
	if (hook_brk(old + incr))
		return (void *)-1;
	return old;
}

static void *hook_shmat(int id, const void *addr, int flags)
{
	if (addr && (flags & SHM_REMAP)) {
		struct shmid_ds ds;

		if (!syscall(SYS_shmctl, id, IPC_STAT, &ds))
			mh_notify(addr, ds.shm_segsz);
	}
	return (void *)syscall(SYS_shmat, id, addr, flags);
}

/* The extent of the System V segment attached at addr: the run of mappings
 * that starts there with one inode (no malloc: this may run inside the
 * allocator). */
struct shm_walk {
	uint64_t next, inode;
	size_t len;
};

static int shm_step(void *arg, const struct pdma_vma *v)
{
	struct shm_walk *w = arg;

	if (v->start < w->next && !w->len)
		return 0;
	if (v->start != w->next || !v->inode || (w->len && v->inode != w->inode))
		return w->len ? 1 : (v->start > w->next);
	w->inode = v->inode;
	w->len += v->end - v->start;
	w->next = v->end;
	return 0;
}

static size_t shm_extent(uintptr_t addr)
{
	struct shm_walk w = { .next = addr };

	pdma_vma_walk(shm_step, &w);
	return w.len;
}

static int hook_shmdt(const void *addr)
{
	mh_notify(addr, shm_extent((uintptr_t)addr));
	return (int)syscall(SYS_shmdt, addr);
}

static const struct {
	const char *name;
	void *hook;
} mh_syms[] = {
	{ "mmap", (void *)hook_mmap },	   { "munmap", (void *)hook_munmap },
	{ "mremap", (void *)hook_mremap }, { "madvise", (void *)hook_madvise },
	{ "brk", (void *)hook_brk },	   { "sbrk", (void *)hook_sbrk },
	{ "shmat", (void *)hook_shmat },   { "shmdt", (void *)hook_shmdt },
};
#define MH_NSYMS (sizeof(mh_syms) / sizeof(mh_syms[0]))
#define MH_PATCH 13

static void mh_code(uint8_t *code, const void *hook)
{
	uint64_t a = (uint64_t)(uintptr_t)hook;

	code[0] = 0x49; /* movabs $hook, %r11 */
	code[1] = 0xbb;
	memcpy(code + 2, &a, 8);
	code[10] = 0x41; /* jmp *%r11 */
	code[11] = 0xff;
	code[12] = 0xe3;
}

static int mh_patch(uint8_t *fn, const void *hook)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)fn & ~(uintptr_t)(pg - 1);
	size_t span = ((uintptr_t)fn + MH_PATCH - lo + (size_t)pg - 1) & ~(size_t)(pg - 1);
	uint8_t code[MH_PATCH];
	uint16_t head;

	mh_code(code, hook);
	if (!memcmp(fn, code, MH_PATCH))
		return 0; /* an alias already patched (mmap64 is mmap) */
	if (mprotect((void *)lo, span, PROT_READ | PROT_WRITE | PROT_EXEC))
		return -errno;
	memcpy(&head, code, 2);
	__atomic_store_n((uint16_t *)fn, (uint16_t)0xfeeb, __ATOMIC_SEQ_CST); /* jmp . */
	memcpy(fn + 2, code + 2, MH_PATCH - 2);
	__atomic_store_n((uint16_t *)fn, head, __ATOMIC_SEQ_CST);
	__builtin___clear_cache((char *)fn, (char *)fn + MH_PATCH);
	mprotect((void *)lo, span, PROT_READ | PROT_EXEC);
	return 0;
}

/* A runtime that replaces malloc with an allocator unmapping through raw
 * system calls: the hooks would miss its frees. */
static bool foreign_allocator(void)
{
	static const char *const rt[] = { "__asan_init", "__tsan_init", "__msan_init",
					  "__hwasan_init", "__lsan_init" };
	const char *pre = getenv("LD_PRELOAD");

	for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
		if (dlsym(RTLD_DEFAULT, rt[i]))
			return true;
	return pre && strstr(pre, "vgpreload");
}

/* The hooks live in this object: it must never be unloaded while libc jumps
 * into it. */
static void pin_self(void)
{
	Dl_info info;

	if (dladdr((void *)hook_munmap, &info) && info.dli_fname)
		dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static int mh_install(void)
{
	void *libc, *fn[MH_NSYMS];

	if (foreign_allocator())
		return -ENOTSUP;
	libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	if (!libc)
		return -ENOSYS;
	mh_curbrk = dlsym(libc, "__curbrk");
	for (size_t k = 0; k < MH_NSYMS; k++) {
		const ElfW(Sym) *sym = NULL;
		Dl_info info;

		fn[k] = dlsym(libc, mh_syms[k].name);
		/* Every function must be long enough for the patch. */
		if (!fn[k] || !dladdr1(fn[k], &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
		    sym->st_size < MH_PATCH) {
			dlclose(libc);
			return -ENOSYS;
		}
	}
	dlclose(libc);
	if (!mh_curbrk)
		return -ENOSYS;
	pin_self();
	for (size_t k = 0; k < MH_NSYMS; k++) {
		int ret = mh_patch(fn[k], mh_syms[k].hook);

		/* A partial install is still sound for what it patched, but the
		 * cache must not rely on it: report the failure. */
		if (ret)
			return ret;
	}
	return 1;
}

int pdma_memhooks_monitor_start(void)
{
	int ret = 0;

	pthread_mutex_lock(&mh_lock);
	if (!mh_installed)
		mh_installed = mh_install();
	if (mh_installed < 0) {
		ret = mh_installed;
		goto out;
	}
	if (mh_refs++ == 0)
		atomic_store_explicit(&mh_active, 1, memory_order_release);
out:
	pthread_mutex_unlock(&mh_lock);
	return ret;
}

void pdma_memhooks_monitor_stop(void)
{
	pthread_mutex_lock(&mh_lock);
	if (mh_refs > 0 && --mh_refs == 0)
		atomic_store_explicit(&mh_active, 0, memory_order_release);
	pthread_mutex_unlock(&mh_lock);
}
