// SPDX-License-Identifier: GPL-2.0
/*
 * peerdma revocation counter: one zeroed page per open file, mapped read-only
 * into the opener (include/uapi/peerdma.h, PEERDMA_CAP_REVOKE_COUNT). The
 * revoking path counts a revocation the moment it owns the pages, inside the
 * call that revoked them (for host memory the MMU notifier, so before munmap()
 * returns), while the event follows once the pages are released. A library
 * compares the counter with the events it has read before each cache lookup
 * and so never hands out a registration whose memory a returned munmap() took.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/mm.h>

#include "peerdma.h"

int pdma_counters_alloc(struct pdma_file *f)
{
	f->counters_page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	if (!f->counters_page)
		return -ENOMEM;
	f->counters = page_address(f->counters_page);
	return 0;
}

/* the file is gone; a mapping still holds its own page reference */
void pdma_counters_free(struct pdma_file *f)
{
	if (f->counters_page)
		put_page(f->counters_page);
	f->counters_page = NULL;
	f->counters = NULL;
}

/*
 * Under ev_lock so that concurrent revokers publish in order: the counter a
 * reader sees never goes backwards. One 64-bit store (WRITE_ONCE) per update.
 */
void pdma_counters_revoke(struct pdma_file *f)
{
	spin_lock(&f->ev_lock);
	WRITE_ONCE(f->counters->revokes, f->counters->revokes + 1);
	spin_unlock(&f->ev_lock);
}

int pdma_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct pdma_file *f = file->private_data;

	if (f->mm != current->mm)
		return -EACCES;
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;
	if (!(vma->vm_flags & VM_SHARED) || vma->vm_pgoff != PEERDMA_MMAP_COUNTERS ||
	    vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	/* read-only for good: mprotect() cannot add write or exec access */
	vma->vm_flags &= ~(VM_MAYWRITE | VM_MAYEXEC);
	vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP;
	return vm_insert_page(vma, vma->vm_start, f->counters_page);
}
