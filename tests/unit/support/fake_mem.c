// SPDX-License-Identifier: MIT
/* The fake memory backend of the cache's unit tests (fake_mem.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/fake_mem.h"

static int fake_query(void *be, uint64_t addr, size_t len, struct pdma_mem_alloc *a)
{
	struct fake_mem *f = be;

	f->queries++;
	a->base = addr & ~(PG - 1);
	a->size = len;
	a->buffer_id = f->buffer_id;
	return 0;
}

static int fake_same_alloc(void *be, uint64_t addr, uint64_t buffer_id)
{
	struct fake_mem *f = be;

	(void)addr;
	f->id_checks++;
	return f->buffer_id == buffer_id ? 0 : -ESTALE;
}

static int fake_pin(void *be, uint64_t addr, size_t len, pdma_mem_revoke_fn revoke, void *arg,
		    void **pin)
{
	struct fake_mem *f = be;
	struct fpin *p;

	if ((addr | len) & (PG - 1) || !len)
		return -EINVAL;
	if (f->fail_once) {
		int e = f->fail_once;

		f->fail_once = 0;
		return e;
	}
	if (f->used + len > f->bar)
		return -ENOMEM;
	p = calloc(1, sizeof(*p));
	assert_non_null(p);
	p->start = addr;
	p->len = len;
	p->revoke = revoke;
	p->arg = arg;
	p->gen = f->buffer_id;
	p->next = f->list;
	f->list = p;
	f->used += len;
	f->pins++;
	f->live++;
	*pin = p;
	return 0;
}

static void fake_unpin(void *be, void *pin)
{
	struct fake_mem *f = be;
	struct fpin *p = pin, **pp;

	for (pp = &f->list; *pp && *pp != p; pp = &(*pp)->next)
		;
	assert_ptr_equal(*pp, p); /* never unpinned twice */
	*pp = p->next;
	if (!p->revoked)
		f->used -= p->len;
	f->unpins++;
	f->live--;
	if (f->nunpinned < 256)
		f->unpinned[f->nunpinned++] = p->start;
	free(p);
}

const struct pdma_mem_ops fake_ops = {
	.name = "fake", .page_size = PG, .query = fake_query, .same_alloc = fake_same_alloc,
	.pin = fake_pin, .unpin = fake_unpin,
};

void fake_free(struct fake_mem *f, uint64_t start, size_t len)
{
	for (struct fpin *p = f->list; p; p = p->next) {
		if (p->revoked || p->start >= start + len || p->start + p->len <= start)
			continue;
		p->revoked = 1;
		f->used -= p->len;
		f->revokes++;
		p->revoke(p->arg);
	}
}

void fake_init(struct fake_mem *f, size_t bar_pages)
{
	memset(f, 0, sizeof(*f));
	f->bar = bar_pages * PG;
	f->buffer_id = 1;
}

struct pdma_cache *open_cache(size_t max_count, size_t max_size)
{
	struct pdma_cache_attr a;
	struct pdma_cache *c = NULL;

	memset(&a, 0, sizeof(a));
	a.max_count = max_count;
	a.max_size = max_size;
	a.monitor = PDMA_CACHE_MONITOR_DISABLED;
	a.mode[PDMA_HMEM_SIM] = PDMA_CACHE_MODE_TRUST;
	a.mode[PDMA_HMEM_CUDA] = PDMA_CACHE_MODE_TAG_CHECK;
	assert_int_equal(pdma_cache_open(&a, &c), 0);
	return c;
}

struct pdma_region *get_ok(struct pdma_cache *c, struct fake_mem *f, uint64_t addr, size_t len)
{
	struct pdma_region *r = NULL;

	assert_int_equal(pdma_cache_get(c, &fake_ops, f, PDMA_HMEM_SIM, addr, len, NULL, &r), 0);
	assert_non_null(r);
	assert_true(r->start <= addr && r->start + r->len >= addr + len);
	assert_true(atomic_load(&r->valid));
	return r;
}

void stats(struct pdma_cache *c, struct pdma_cache_stats *s)
{
	pdma_cache_get_stats(c, s);
}
