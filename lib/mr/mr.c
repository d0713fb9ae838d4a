// SPDX-License-Identifier: MIT
/*
 * Memory regions: registration, keys, descriptors, raw keys, binding,
 * enabling, refresh, and the access check every device transfer goes through.
 *
 * An MR is a list of segments (one per iov entry), each backed by a pinned
 * region (lib/cache/region.h) obtained from the domain's cache or pinned directly.
 * Addressing: the MR's byte space is the concatenation of its segments; a
 * transfer names offset 0.. in it, or under PDMA_MR_VIRT_ADDR the virtual
 * address base + offset where base is the first segment's address.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "mr/domain.h"

/* Segments remember whether their region came from the cache. */
#define SEG_CACHED(r) ((r)->owner != NULL)

static void region_release(struct pdma_domain *d, struct pdma_region *r)
{
	if (!r)
		return;
	if (SEG_CACHED(r))
		pdma_cache_put(d->cache, r);
	else if (atomic_fetch_sub(&r->refcnt, 1) == 1)
		pdma_region_destroy(r);
}

/* Pin one iov entry: the pages of its allocation that it covers, after
 * querying the memory (pdma_mr_regattr has tried pdma_cache_find first);
 * through the domain's cache where it has one and cached is set. */
static int seg_pin(struct pdma_domain *d, enum pdma_hmem_iface iface, int device, uint64_t addr,
		   size_t len, bool cached, struct pdma_region **out)
{
	const struct pdma_mem_ops *ops;
	struct pdma_mem_alloc alloc = { 0 };
	uint64_t start;
	size_t plen;
	void *be;
	int ret;

	/* > 0: queried with the backend's choice (CUDA: one driver call). < 0:
	 * no backend, and no ops to name: the backend logged why (CUDA:
	 * managed memory, an unknown pointer). */
	ret = pdma_domain_backend(d, iface, device, addr, len, &ops, &be, &alloc);
	if (ret < 0)
		return ret;
	if (ret == 0 && (ret = ops->query(be, addr, len, &alloc))) {
		pdma_log(d, 1, "%s memory [%#llx, +%zu) cannot be registered: %s", ops->name,
			 (unsigned long long)addr, len, pdma_strerror(ret));
		return ret;
	}
	if (cached && d->cache)
		return pdma_cache_get(d->cache, ops, be, iface, addr, len, &alloc, out);
	pdma_page_round(ops->page_size, addr, len, &start, &plen);
	ret = pdma_region_create(ops, be, iface, start, plen, alloc.buffer_id, out);
	if (ret)
		pdma_log(d, 1, "pinning %s memory [%#llx, +%zu) failed: %s", ops->name,
			 (unsigned long long)start, plen, pdma_strerror(ret));
	return ret;
}

static int check_iov(const struct pdma_domain *d, const struct iovec *iov, size_t count,
		     size_t *total)
{
	size_t sum = 0;

	if (!iov || !count || count > d->attr.mr_iov_limit)
		return -EINVAL;
	for (size_t i = 0; i < count; i++) {
		uintptr_t b = (uintptr_t)iov[i].iov_base;

		if (!b || !iov[i].iov_len || b + iov[i].iov_len < b)
			return -EINVAL;
		if (sum + iov[i].iov_len < sum)
			return -EOVERFLOW;
		sum += iov[i].iov_len;
	}
	*total = sum;
	return 0;
}

/* An MR object for nsegs segments: from the domain's pool if it fits there,
 * else a new one (see struct pdma_mr). Domain lock held. The pool saves
 * an allocation on every registration; it holds as many objects as were
 * ever open at once. A reused object keeps its old fields: the caller sets
 * every one (a memset here cost a tenth of a cached registration). */
static struct pdma_mr *mr_get(struct pdma_domain *d, size_t nsegs)
{
	struct pdma_mr *m = d->mr_pool;
	size_t cap = nsegs > PDMA_MR_POOL_SEGS ? nsegs : PDMA_MR_POOL_SEGS;

	if (m && nsegs <= PDMA_MR_POOL_SEGS) {
		d->mr_pool = m->pool_next;
		return m;
	}
	m = calloc(1, sizeof(*m) + cap * sizeof(m->segs[0]));
	if (m)
		m->cap = cap;
	return m;
}

/* Domain lock held. False: not a pool object, the caller frees it (after
 * dropping the lock). */
static bool mr_put(struct pdma_domain *d, struct pdma_mr *m)
{
	if (m->cap != PDMA_MR_POOL_SEGS)
		return false;
	m->pool_next = d->mr_pool;
	d->mr_pool = m;
	return true;
}

int pdma_mr_regattr(struct pdma_domain *d, const struct pdma_mr_attr *attr, uint64_t flags,
		    struct pdma_mr **out)
{
	struct pdma_region *regs[64]; /* mr_iov_limit <= 64: pdma_domain_open */
	const struct pdma_mem_ops *ops;
	struct pdma_eq *eq = NULL;
	uint8_t tag[sizeof(((struct pdma_mr *)0)->raw_tag)] = { 0 };
	struct pdma_mr *m = NULL;
	size_t total, npinned = 0;
	uint64_t key = 0;
	bool prov, watch = false;
	void *be;
	int ret;

	if (!d || !attr || !out || flags)
		return -EINVAL;
	ret = check_iov(d, attr->mr_iov, attr->iov_count, &total);
	if (ret)
		return ret;
	if (!attr->access || (attr->access & ~(uint64_t)PDMA_ACCESS_ALL) || attr->offset)
		return -EINVAL;
	if (attr->auth_key_size || attr->auth_key)
		return -EINVAL; /* no authorization keys in this provider */
	if (attr->iface != PDMA_HMEM_SYSTEM && !(d->attr.mr_mode & PDMA_MR_HMEM)) {
		pdma_log(d, 1, "device memory registration needs PDMA_MR_HMEM");
		return -EOPNOTSUPP;
	}
	/* Is the iface usable at all (device present, backend loadable)? */
	ret = pdma_domain_backend(d, attr->iface, attr->device, 0, 0, &ops, &be, NULL);
	if (ret)
		return ret;

	/* Fail on a bad requested key before paying for any pin. The EQ slot is
	 * reserved under the domain lock: pdma_eq_close (under the lock) then
	 * sees the reservation and cannot free the EQ under us. A provider key
	 * with no EQ bound needs neither, and skips this lock (a cached
	 * registration then takes the domain lock once): its key is drawn after
	 * the pins, without the domain lock (random pages need none), and
	 * checked against the live keys by its insert, under the lock below.
	 * An EQ bound meanwhile is caught there too. d->eq is only compared
	 * with NULL here, never followed: the EQ may be closing. */
	prov = d->attr.mr_mode & PDMA_MR_PROV_KEY;
	if (prov && attr->requested_key)
		return -EKEYREJECTED; /* pdma_key_new's rule, without the lock */
	if (!prov || __atomic_load_n(&d->eq, __ATOMIC_ACQUIRE)) {
		pdma_dom_lock(d);
		if (!prov)
			ret = pdma_key_new(d, attr->requested_key, &key);
		eq = d->eq && (d->eq->flags & PDMA_REG_MR) ? d->eq : NULL;
		if (!ret && eq)
			ret = pdma_eq_reserve(eq);
		pdma_dom_unlock(d);
		if (ret)
			return ret;
	}
	for (; npinned < attr->iov_count; npinned++) {
		uint64_t addr = (uint64_t)(uintptr_t)attr->mr_iov[npinned].iov_base;
		size_t len = attr->mr_iov[npinned].iov_len;

		/* A pinned region is found without querying the memory (mincore
		 * over the range for host memory, a five-attribute driver call for
		 * CUDA). Where the cache trusts its invalidations (host memory
		 * under a monitor, CUDA with the free hooks live, sim), a region
		 * of unmapped or freed memory would be gone from it; where it
		 * checks buffer IDs (CUDA without the hooks), the find asks the
		 * driver for that one attribute. For CUDA the lookup tries the
		 * GPU-memory ops, the common case; host memory registered as
		 * CUDA takes the full path. Inline, not in seg_pin: a cached
		 * registration is mostly this call. */
		if (d->cache && !pdma_cache_find(d->cache, ops, be, attr->iface, addr, len,
						 &regs[npinned]))
			continue;
		ret = seg_pin(d, attr->iface, attr->device, addr, len, true, &regs[npinned]);
		if (ret)
			goto err_regs;
	}
	/* Random bytes after the pins: memory that cannot be registered costs
	 * none, and a thread's first draw maps its random page (key.c) after
	 * the memory was checked, not in a hole the caller expects to fail. */
	if (prov)
		ret = pdma_key_draw(d, &key);
	/* The raw-key tag is only ever read under PDMA_MR_RAW. */
	if (!ret && (d->attr.mr_mode & PDMA_MR_RAW))
		ret = pdma_random_bytes(&d->rand, tag, sizeof(tag));
	if (ret)
		goto err_regs;

	pdma_dom_lock(d);
	if (!eq && d->eq && (d->eq->flags & PDMA_REG_MR)) {
		/* Bound since the check above: this registration completes after
		 * the bind, so it owes the EQ its event. */
		ret = pdma_eq_reserve(d->eq);
		if (!ret)
			eq = d->eq;
	}
	if (!ret) {
		m = mr_get(d, npinned);
		if (!m)
			ret = -ENOMEM;
	}
	if (!ret) {
		/* Every field but cap and segs[nsegs..]: m may be a pool object. */
		m->dom = d;
		m->own_key = (struct pdma_key_entry){ .key = key, .mr = m };
		m->aliases = NULL;
		m->pool_next = NULL;
		m->cntr = NULL;
		m->cntr_flags = 0;
		m->ep = NULL;
		m->access = attr->access;
		m->context = attr->context;
		m->iface = attr->iface;
		m->device = attr->device;
		m->base = (uint64_t)(uintptr_t)attr->mr_iov[0].iov_base;
		m->total_len = total;
		memcpy(m->raw_tag, tag, sizeof(m->raw_tag));
		atomic_init(&m->enabled,
			    !(d->attr.mr_mode & (PDMA_MR_RMA_EVENT | PDMA_MR_ENDPOINT)));
		atomic_init(&m->revoked, false);
		for (size_t i = 0; i < npinned; i++)
			m->segs[i] = (struct pdma_mr_seg){
				.addr = (uint64_t)(uintptr_t)attr->mr_iov[i].iov_base,
				.len = attr->mr_iov[i].iov_len,
				.region = regs[i],
				.mr = m,
			};
		m->nsegs = npinned;
		/* Only an EQ for revocations needs them: a watch is a lock and a
		 * list insert per segment, a tenth of a cached registration. One
		 * bound later watches the open MRs then (pdma_mr_watch_all). */
		watch = d->eq && (d->eq->flags & PDMA_MR_REVOKE_EVENTS);
		m->watched = watch;
		/* No descriptor until one is asked for (domain.h): room for it. */
		atomic_store_explicit(&m->desc_id, 0, memory_order_relaxed);
		ret = pdma_idmap_reserve(&d->descs, d->n_mr + 1);
		if (!ret)
			ret = pdma_idmap_insert(&d->keys, key, &m->own_key);
		if (ret == -EEXIST) {
			/* The key is live: a drawn one (tiny key sizes) is drawn
			 * again; a requested one lost a race for it. */
			ret = prov ? pdma_key_fresh(d, &key) : -ENOKEY;
			m->own_key.key = key;
			if (!ret)
				ret = pdma_idmap_insert(&d->keys, key, &m->own_key);
		}
		if (ret && !mr_put(d, m))
			free(m);
	}
	if (!ret)
		d->n_mr++;
	pdma_dom_unlock(d);
	if (ret)
		goto err_regs;

	*out = m;
	if (watch)
		pdma_mr_watch(m);
	if (eq) {
		/* The handle is stored above, before a reader can see the event. */
		struct pdma_eq_entry e = { .event = PDMA_MR_COMPLETE, .mr = m,
					   .context = attr->context };

		pdma_eq_post(eq, &e);
	}
	return 0;

err_regs:
	for (size_t i = 0; i < npinned; i++)
		region_release(d, regs[i]);
	if (eq)
		pdma_eq_unreserve(eq);
	return ret;
}

int pdma_mr_regv(struct pdma_domain *d, const struct iovec *iov, size_t count, uint64_t access,
		 uint64_t offset, uint64_t requested_key, uint64_t flags, struct pdma_mr **mr,
		 void *context)
{
	struct pdma_mr_attr attr = {
		.mr_iov = iov,
		.iov_count = count,
		.access = access,
		.offset = offset,
		.requested_key = requested_key,
		.context = context,
		.iface = PDMA_HMEM_SYSTEM,
	};

	return pdma_mr_regattr(d, &attr, flags, mr);
}

int pdma_mr_reg(struct pdma_domain *d, const void *buf, size_t len, uint64_t access,
		uint64_t offset, uint64_t requested_key, uint64_t flags, struct pdma_mr **mr,
		void *context)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return pdma_mr_regv(d, &iov, 1, access, offset, requested_key, flags, mr, context);
}

/* Drop a closed counter/endpoint once its last MR lets go. Domain lock held. */
static void unbind_all(struct pdma_mr *m)
{
	if (m->cntr)
		pdma_target_unbind(&m->cntr->t);
	if (m->ep)
		pdma_target_unbind(&m->ep->t);
	m->cntr = NULL;
	m->ep = NULL;
}

int pdma_mr_close(struct pdma_mr *m)
{
	struct pdma_region *regs[64];
	struct pdma_key_entry *e;
	struct pdma_domain *d;
	uint64_t desc_id;
	bool pooled;
	size_t nsegs;

	if (!m)
		return -EINVAL;
	d = m->dom;
	pdma_dom_lock(d);
	if ((m->cntr && !atomic_load(&m->cntr->t.closed)) ||
	    (m->ep && !atomic_load(&m->ep->t.closed))) {
		pdma_dom_unlock(d);
		return -EBUSY;
	}
	/* Once the accesses in flight are done none is (they start under the
	 * lock), and once the keys are gone none can start: the device can no
	 * longer reach the memory. The MR's own key and its mapped keys (its
	 * alias list) are all it has in the table: nothing else is searched. */
	pdma_dom_quiesce(d);
	pdma_idmap_remove(&d->keys, m->own_key.key);
	while ((e = m->aliases)) {
		m->aliases = e->next_alias;
		pdma_idmap_remove(&d->keys, e->key);
		free(e);
	}
	desc_id = atomic_load_explicit(&m->desc_id, memory_order_relaxed);
	if (desc_id)
		pdma_idmap_remove(&d->descs, desc_id);
	unbind_all(m);
	if (m->watched) /* before n_mr drops: the EQ outlives every callback */
		pdma_mr_unwatch(m);
	d->n_mr--;
	/* The object may be reused as soon as the lock is dropped: keep what
	 * is released after it (outside the lock: an uncached unpin is slow). */
	nsegs = m->nsegs;
	for (size_t i = 0; i < nsegs; i++)
		regs[i] = m->segs[i].region;
	pooled = mr_put(d, m);
	pdma_dom_unlock(d);
	if (!pooled)
		free(m);
	for (size_t i = 0; i < nsegs; i++)
		region_release(d, regs[i]);
	return 0;
}

uint64_t pdma_mr_key(const struct pdma_mr *m)
{
	if (!m || (m->dom->attr.mr_mode & PDMA_MR_RAW))
		return PDMA_KEY_NOTAVAIL;
	return m->own_key.key;
}

/* The first call gives the MR its descriptor (domain.h says why then):
 * under the domain lock, which orders it with another thread's first call
 * and with the table's other changes; the room was reserved at registration.
 * The MR is the caller's, not const: only this field changes. */
void *pdma_mr_desc(const struct pdma_mr *mr)
{
	struct pdma_mr *m = (struct pdma_mr *)mr;
	uint64_t id;

	if (!m)
		return NULL;
	id = atomic_load_explicit(&m->desc_id, memory_order_acquire);
	if (id)
		return (void *)(uintptr_t)id;
	pdma_dom_lock(m->dom);
	id = atomic_load_explicit(&m->desc_id, memory_order_relaxed);
	if (!id) {
		id = pdma_desc_id_new();
		if (pdma_idmap_insert(&m->dom->descs, id, m))
			id = 0; /* not reached: room reserved, IDs never repeat */
		else
			atomic_store_explicit(&m->desc_id, id, memory_order_release);
	}
	pdma_dom_unlock(m->dom);
	return (void *)(uintptr_t)id;
}

void *pdma_mr_context(const struct pdma_mr *m)
{
	return m ? m->context : NULL;
}

struct pdma_mr *pdma_desc_mr(struct pdma_domain *d, void *desc)
{
	return pdma_idmap_find(&d->descs, (uint64_t)(uintptr_t)desc);
}

/* Raw key layout: key (8 bytes, little endian), random tag (8), zero padding. */
int pdma_mr_raw_attr(const struct pdma_mr *m, uint64_t *base_addr, uint8_t *raw_key,
		     size_t *key_size, uint64_t flags)
{
	size_t need;

	if (!m || !key_size || flags)
		return -EINVAL;
	if (!(m->dom->attr.mr_mode & PDMA_MR_RAW))
		return -ENOSYS;
	need = m->dom->attr.raw_key_size;
	if (*key_size < need) {
		*key_size = need;
		return -ERANGE; /* libfabric: FI_ETOOSMALL (pdma_errno_to_fi) */
	}
	if (!raw_key)
		return -EINVAL;
	memset(raw_key, 0, need);
	for (int i = 0; i < 8; i++)
		raw_key[i] = (uint8_t)(m->own_key.key >> (8 * i));
	memcpy(raw_key + 8, m->raw_tag, sizeof(m->raw_tag));
	*key_size = need;
	if (base_addr)
		*base_addr = (m->dom->attr.mr_mode & PDMA_MR_VIRT_ADDR) ? m->base : 0;
	return 0;
}

int pdma_mr_map_raw(struct pdma_domain *d, uint64_t base_addr, const uint8_t *raw_key,
		    size_t key_size, uint64_t *key, uint64_t flags)
{
	struct pdma_key_entry *e;
	struct pdma_mr *m;
	uint64_t k = 0, expect_base;
	int ret;

	if (!d || !raw_key || !key || flags)
		return -EINVAL;
	if (!(d->attr.mr_mode & PDMA_MR_RAW))
		return -ENOSYS;
	if (key_size != d->attr.raw_key_size)
		return -EINVAL;
	for (size_t i = 8 + sizeof(m->raw_tag); i < key_size; i++)
		if (raw_key[i])
			return -EKEYREJECTED;
	for (int i = 0; i < 8; i++)
		k |= (uint64_t)raw_key[i] << (8 * i);
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	pdma_dom_lock(d);
	m = pdma_key_lookup(d, k);
	if (!m || m->own_key.key != k) {
		ret = -ENOKEY;
		goto out;
	}
	if (memcmp(raw_key + 8, m->raw_tag, sizeof(m->raw_tag))) {
		ret = -EKEYREJECTED;
		goto out;
	}
	expect_base = (d->attr.mr_mode & PDMA_MR_VIRT_ADDR) ? m->base : 0;
	if (base_addr != expect_base) {
		ret = -EINVAL;
		goto out;
	}
	/* A key a device can carry: within mr_key_size like the MR's own. */
	ret = pdma_key_fresh(d, &e->key);
	if (ret)
		goto out;
	e->mr = m;
	e->mapped = true;
	ret = pdma_idmap_insert(&d->keys, e->key, e);
	if (ret)
		goto out;
	e->next_alias = m->aliases; /* pdma_mr_close drops it with the MR */
	m->aliases = e;
	*key = e->key;
	pdma_dom_unlock(d);
	return 0;
out:
	pdma_dom_unlock(d);
	free(e);
	return ret;
}

int pdma_mr_unmap_key(struct pdma_domain *d, uint64_t key)
{
	struct pdma_key_entry *e, **p;

	if (!d)
		return -EINVAL;
	if (!(d->attr.mr_mode & PDMA_MR_RAW))
		return -ENOSYS;
	pdma_dom_lock(d);
	e = pdma_idmap_find(&d->keys, key);
	if (!e || !e->mapped) {
		pdma_dom_unlock(d);
		return e ? -EINVAL : -ENOKEY;
	}
	pdma_dom_quiesce(d); /* no access through the key outlives the call */
	pdma_idmap_remove(&d->keys, key);
	for (p = &e->mr->aliases; *p != e; p = &(*p)->next_alias)
		;
	*p = e->next_alias;
	pdma_dom_unlock(d);
	free(e);
	return 0;
}

static bool needs_enable(const struct pdma_domain *d)
{
	return d->attr.mr_mode & (PDMA_MR_RMA_EVENT | PDMA_MR_ENDPOINT);
}

int pdma_mr_bind_cntr(struct pdma_mr *m, struct pdma_cntr *c, uint64_t flags)
{
	struct pdma_domain *d;
	int ret = 0;

	if (!m || !c || c->t.dom != m->dom || atomic_load(&c->t.closed))
		return -EINVAL;
	d = m->dom;
	if (!(d->attr.mr_mode & PDMA_MR_RMA_EVENT))
		return -EOPNOTSUPP;
	if (flags != PDMA_REMOTE_WRITE_EVENTS)
		return -EINVAL;
	pdma_dom_lock(d);
	/* No wait for accesses in flight: one reads m->cntr only after it saw
	 * the MR enabled (pdma_mr_access), and from then on bindings are
	 * refused. */
	if (atomic_load(&m->enabled))
		ret = -EINVAL; /* bindings are fixed once enabled */
	else if (m->cntr)
		ret = -EBUSY;
	else {
		m->cntr = c;
		m->cntr_flags = flags;
		atomic_fetch_add(&c->t.binds, 1);
	}
	pdma_dom_unlock(d);
	return ret;
}

int pdma_mr_bind_ep(struct pdma_mr *m, struct pdma_ep *ep, uint64_t flags)
{
	struct pdma_domain *d;
	int ret = 0;

	if (!m || !ep || ep->t.dom != m->dom || atomic_load(&ep->t.closed) || flags)
		return -EINVAL;
	d = m->dom;
	if (!(d->attr.mr_mode & PDMA_MR_ENDPOINT))
		return -EOPNOTSUPP;
	pdma_dom_lock(d);
	if (atomic_load(&m->enabled))
		ret = -EINVAL;
	else if (m->ep)
		ret = -EBUSY;
	else {
		m->ep = ep; /* no access reads it */
		atomic_fetch_add(&ep->t.binds, 1);
	}
	pdma_dom_unlock(d);
	return ret;
}

int pdma_mr_enable(struct pdma_mr *m)
{
	struct pdma_domain *d;
	int ret = 0;

	if (!m)
		return -EINVAL;
	d = m->dom;
	if (!needs_enable(d))
		return 0; /* MRs of this domain are enabled at registration */
	pdma_dom_lock(d);
	if ((d->attr.mr_mode & PDMA_MR_ENDPOINT) && !m->ep)
		ret = -EINVAL; /* an endpoint MR must be bound before enable */
	else
		atomic_store(&m->enabled, true);
	pdma_dom_unlock(d);
	return ret;
}

int pdma_mr_refresh(struct pdma_mr *m, const struct iovec *iov, size_t count, uint64_t flags)
{
	struct pdma_region *fresh[64] = { 0 };
	struct pdma_domain *d;
	int ret = 0;

	if (!m || !iov || !count || flags)
		return -EINVAL;
	d = m->dom;
	if (!(d->attr.mr_mode & PDMA_MR_MMU_NOTIFY))
		return -EOPNOTSUPP;
	/* Each range must lie inside one segment; mark the segments to re-pin. */
	for (size_t i = 0; i < count; i++) {
		uint64_t a = (uint64_t)(uintptr_t)iov[i].iov_base;
		size_t j;

		for (j = 0; j < m->nsegs; j++)
			if (a >= m->segs[j].addr && iov[i].iov_len &&
			    iov[i].iov_len <= m->segs[j].addr + m->segs[j].len - a)
				break;
		if (j == m->nsegs)
			return -EINVAL;
		fresh[j] = (struct pdma_region *)1; /* marker, replaced below */
	}
	/* Re-pin outside the lock (pins may be slow); bypass the cache so the
	 * pages are resolved now, not served from an entry of the old ones. */
	for (size_t j = 0; j < m->nsegs; j++) {
		if (!fresh[j])
			continue;
		fresh[j] = NULL;
		ret = seg_pin(d, m->iface, m->device, m->segs[j].addr, m->segs[j].len, false,
			      &fresh[j]);
		if (ret) {
			for (size_t k = 0; k < j; k++)
				region_release(d, fresh[k]);
			return ret;
		}
	}
	pdma_dom_lock(d);
	pdma_dom_quiesce(d); /* accesses in flight read the old regions */
	for (size_t j = 0; j < m->nsegs; j++) {
		if (fresh[j]) {
			struct pdma_region *old = m->segs[j].region;

			if (m->watched)
				pdma_region_del_user(old, &m->segs[j].user);
			m->segs[j].region = fresh[j];
			if (m->watched)
				pdma_region_add_user(fresh[j], &m->segs[j].user);
			fresh[j] = old;
		}
	}
	pdma_dom_unlock(d);
	for (size_t j = 0; j < m->nsegs; j++)
		region_release(d, fresh[j]);
	return 0;
}

int pdma_mr_access(struct pdma_domain *d, struct pdma_mr *m, uint64_t addr, size_t len,
		   uint64_t access, pdma_mr_piece_fn fn, void *arg)
{
	uint64_t off;
	size_t first, last, done = 0;

	if (!(m->access & access))
		return -EACCES;
	if (!atomic_load(&m->enabled))
		return -EAGAIN;
	if (d->attr.mr_mode & PDMA_MR_VIRT_ADDR) {
		if (addr < m->base)
			return -EINVAL;
		off = addr - m->base;
	} else {
		off = addr;
	}
	if (!len || off > m->total_len || len > m->total_len - off)
		return -EINVAL;

	/* Find the segments the transfer touches and hold them all for DMA
	 * before moving a byte, so a revoked one fails the whole transfer. */
	for (first = 0; off >= m->segs[first].len; first++)
		off -= m->segs[first].len;
	{
		size_t rem = len + off;

		for (last = first; rem > m->segs[last].len; last++)
			rem -= m->segs[last].len;
	}
	for (size_t i = first; i <= last; i++) {
		struct pdma_region *r = m->segs[i].region;

		if (!r->ops->cpu_visible || !pdma_region_dma_begin(r)) {
			for (size_t k = first; k < i; k++)
				pdma_region_dma_end(m->segs[k].region);
			return !r->ops->cpu_visible ? -EOPNOTSUPP : -EFAULT;
		}
	}
	for (size_t i = first; i <= last; i++) {
		size_t n = m->segs[i].len - off;

		if (n > len - done)
			n = len - done;
		fn(arg, (void *)(uintptr_t)(m->segs[i].addr + off), n, done);
		done += n;
		off = 0;
	}
	for (size_t i = first; i <= last; i++)
		pdma_region_dma_end(m->segs[i].region);
	if ((access & PDMA_REMOTE_WRITE) && m->cntr &&
	    (m->cntr_flags & PDMA_REMOTE_WRITE_EVENTS))
		atomic_fetch_add(&m->cntr->value, 1);
	return 0;
}

int pdma_key_access(struct pdma_domain *d, uint64_t key, uint64_t addr, size_t len,
		    uint64_t access, pdma_mr_piece_fn fn, void *arg)
{
	struct pdma_mr *m;
	int ret;

	pdma_dom_lock(d);
	m = pdma_key_lookup(d, key);
	if (m)
		pdma_dom_access_begin(d);
	pdma_dom_unlock(d);
	if (!m)
		return -ENOKEY;
	ret = pdma_mr_access(d, m, addr, len, access, fn, arg);
	pdma_dom_access_end(d);
	return ret;
}
