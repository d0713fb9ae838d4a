// SPDX-License-Identifier: MIT
/*
 * Host memory monitor through interposed calls (PEERDMA_MR_CACHE_MONITOR=
 * memhooks): munmap, mremap, madvise (MADV_DONTNEED, MADV_FREE, MADV_REMOVE),
 * brk and sbrk (shrinking) call pdma_monitor_notify(PDMA_HMEM_SYSTEM, ...)
 * BEFORE the memory goes, then the real function.
 *
 * How: when the first cache asks for it, the GOT/PLT slots that bind these
 * symbols in every loaded object (dl_iterate_phdr: JUMP_SLOT and GLOB_DAT
 * relocations) are rewritten to point here; dlopen is hooked the same way so
 * objects loaded later are patched too. The real functions are what normal
 * symbol lookup finds (dlsym(RTLD_DEFAULT)), so sanitizer interceptors stay in
 * the chain. Once installed the hooks stay (unpatching could race callers that
 * already loaded a slot); with no cache using them they only forward.
 *
 * Guarantee: synchronous: the invalidation is complete before the memory is
 * released, for every call that goes through a dynamic symbol binding.
 * Limits (why userfaultfd is the default): calls that do not go through a
 * GOT slot are not seen: the C library's internal unmaps (free() of an
 * mmap'ed chunk, malloc trimming, thread stacks), direct system calls, calls
 * inside a program that defines these symbols itself (sanitizer runtimes
 * linked into the program), and objects loaded by other means than dlopen.
 * Memory from malloc is therefore not safely cacheable under memhooks unless
 * the program keeps large chunks on the heap. Cost: one indirect call and a
 * flag test per hooked call; a notification (a lock per cache) per unmap.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "monitor/monitor.h"

static pthread_mutex_t mh_lock = PTHREAD_MUTEX_INITIALIZER;
static int mh_refs;
static bool mh_installed;
static atomic_int mh_active;

static int (*real_munmap)(void *, size_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static int (*real_madvise)(void *, size_t, int);
static int (*real_brk)(void *);
static void *(*real_sbrk)(intptr_t);
static void *(*real_dlopen)(const char *, int);

static inline void mh_notify(const void *addr, size_t len)
{
	if (atomic_load_explicit(&mh_active, memory_order_acquire) && len)
		pdma_monitor_notify(PDMA_HMEM_SYSTEM, (uint64_t)(uintptr_t)addr, len);
}

static int hook_munmap(void *addr, size_t len)
{
	mh_notify(addr, len);
	return real_munmap(addr, len);
}

static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *new_addr = NULL;

	if (flags & MREMAP_FIXED) {
		va_list ap;

		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	/* The old pages move or shrink: drop every registration of them (and of
	 * whatever a fixed target replaces). */
	mh_notify(old, old_len);
	if (flags & MREMAP_FIXED) {
		mh_notify(new_addr, new_len);
		return real_mremap(old, old_len, new_len, flags, new_addr);
	}
	return real_mremap(old, old_len, new_len, flags);
}

static int hook_madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_DONTNEED || advice == MADV_REMOVE
#ifdef MADV_FREE
	    || advice == MADV_FREE
#endif
	)
		mh_notify(addr, len);
	return real_madvise(addr, len, advice);
}

static int hook_brk(void *addr)
{
	char *cur = real_sbrk(0);

	if (cur != (void *)-1 && (char *)addr < cur)
		mh_notify(addr, (size_t)(cur - (char *)addr));
	return real_brk(addr);
}

static void *hook_sbrk(intptr_t incr)
{
	if (incr < 0) {
		char *cur = real_sbrk(0);

		if (cur != (void *)-1)
			mh_notify(cur + incr, (size_t)-incr);
	}
	return real_sbrk(incr);
}

static void mh_patch_all(void);

static void *hook_dlopen(const char *file, int mode)
{
	void *h = real_dlopen(file, mode);

	if (h) {
		pthread_mutex_lock(&mh_lock);
		mh_patch_all();
		pthread_mutex_unlock(&mh_lock);
	}
	return h;
}

static const struct {
	const char *name;
	void *hook;
	void **real;
} mh_syms[] = {
	{ "munmap", (void *)hook_munmap, (void **)&real_munmap },
	{ "mremap", (void *)hook_mremap, (void **)&real_mremap },
	{ "madvise", (void *)hook_madvise, (void **)&real_madvise },
	{ "brk", (void *)hook_brk, (void **)&real_brk },
	{ "sbrk", (void *)hook_sbrk, (void **)&real_sbrk },
	{ "dlopen", (void *)hook_dlopen, (void **)&real_dlopen },
};
#define MH_NSYMS (sizeof(mh_syms) / sizeof(mh_syms[0]))

static void mh_write_slot(void **slot, void *val, uintptr_t relro_lo, uintptr_t relro_hi)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(pg - 1);
	bool ro = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;

	if (*slot == val)
		return;
	if (ro && mprotect((void *)page, (size_t)pg, PROT_READ | PROT_WRITE))
		return;
	__atomic_store_n(slot, val, __ATOMIC_RELEASE);
	if (ro)
		mprotect((void *)page, (size_t)pg, PROT_READ);
}

/* cppcheck does not know glibc's ElfW() (link.h): the types are right here. */
// cppcheck-suppress unknownMacro
static void mh_patch_relocs(ElfW(Addr) base, const ElfW(Rela) *rel, size_t n,
			    const ElfW(Sym) *symtab, const char *strtab, uintptr_t relro_lo,
			    uintptr_t relro_hi)
{
	for (size_t i = 0; i < n; i++) {
		unsigned long type = ELF64_R_TYPE(rel[i].r_info);
		const char *name;

		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
		for (size_t k = 0; k < MH_NSYMS; k++) {
			if (!strcmp(name, mh_syms[k].name)) {
				mh_write_slot((void **)(base + rel[i].r_offset), mh_syms[k].hook,
					      relro_lo, relro_hi);
				break;
			}
		}
	}
}

static int mh_patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	ElfW(Addr) base = info->dlpi_addr;
	const ElfW(Dyn) *dyn = NULL;
	const ElfW(Rela) *jmprel = NULL, *rela = NULL;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	size_t pltrelsz = 0, relasz = 0;
	uintptr_t relro_lo = 0, relro_hi = 0;

	(void)size, (void)arg;
	if (info->dlpi_name && (strstr(info->dlpi_name, "linux-vdso") ||
				strstr(info->dlpi_name, "ld-linux")))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
		else if (ph->p_type == PT_GNU_RELRO) {
			relro_lo = base + ph->p_vaddr;
			relro_hi = relro_lo + ph->p_memsz;
		}
	}
	if (!dyn)
		return 0;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		/* glibc relocates these in place; some objects (vdso) do not */
		ElfW(Addr) p = dyn->d_un.d_ptr < base ? dyn->d_un.d_ptr + base : dyn->d_un.d_ptr;

		switch (dyn->d_tag) {
		case DT_JMPREL: jmprel = (const ElfW(Rela) *)p; break;
		case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
		case DT_RELA: rela = (const ElfW(Rela) *)p; break;
		case DT_RELASZ: relasz = dyn->d_un.d_val; break;
		case DT_SYMTAB: symtab = (const ElfW(Sym) *)p; break;
		case DT_STRTAB: strtab = (const char *)p; break;
		default: break;
		}
	}
	if (!symtab || !strtab)
		return 0;
	if (jmprel)
		mh_patch_relocs(base, jmprel, pltrelsz / sizeof(*jmprel), symtab, strtab, relro_lo,
				relro_hi);
	if (rela)
		mh_patch_relocs(base, rela, relasz / sizeof(*rela), symtab, strtab, relro_lo,
				relro_hi);
	return 0;
}

static void mh_patch_all(void)
{
	dl_iterate_phdr(mh_patch_object, NULL);
}

int pdma_memhooks_monitor_start(void)
{
	int ret = 0;

	pthread_mutex_lock(&mh_lock);
	if (!mh_installed) {
		for (size_t k = 0; k < MH_NSYMS; k++) {
			*mh_syms[k].real = dlsym(RTLD_DEFAULT, mh_syms[k].name);
			if (!*mh_syms[k].real || *mh_syms[k].real == mh_syms[k].hook) {
				ret = -ENOSYS;
				goto out;
			}
		}
		mh_patch_all();
		mh_installed = true;
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
