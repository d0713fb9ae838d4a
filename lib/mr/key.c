// SPDX-License-Identifier: MIT
/*
 * MR keys. Provider keys are random, so a peer cannot guess the key of
 * another MR from its own; they are checked against the live table so a key
 * is never handed out twice while live. Requested keys are the caller's and
 * only checked for range and uniqueness. Caller holds the domain lock
 * (pdma_key_new, pdma_key_lookup and table changes alike).
 *
 * The random bytes are ChaCha20 keystream (libsodium) under a 32-byte seed
 * from getrandom(), re-keyed at every refill with fast key erasure, as the
 * kernel's own CRNG does per CPU: the first 32 bytes of each block of output
 * become the next seed and the old seed is overwritten, so the state of a
 * thread seen now reveals none of the keys it handed out before. Why not
 * getrandom() for all of it: the kernel's generic (not vectorised) ChaCha
 * took a fifth of a cached registration, one 4 KiB call per 510 keys.
 */
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "mr/domain.h"

static int getrandom_all(unsigned char *p, size_t len)
{
	while (len) {
		ssize_t n = getrandom(p, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

#define RAND_PAGE 4096
#define RAND_SEED randombytes_SEEDBYTES
/* Fresh seed from the kernel after this many refills (1 MiB of keystream):
 * a state that leaked once stops predicting keys within a bounded count. */
#define RAND_RESEED 256
struct pdma_rand_page {
	size_t filled;  /* 0 in a fresh page and in a forked child's copy */
	size_t pos;     /* next unused byte of buf */
	size_t refills; /* since the seed last came from the kernel */
	/* One keystream block: the next seed, then the bytes handed out. */
	unsigned char seed[RAND_SEED];
	unsigned char buf[RAND_PAGE - 3 * sizeof(size_t) - RAND_SEED];
};
_Static_assert(sizeof(struct pdma_rand_page) == RAND_PAGE, "one page");
_Static_assert(offsetof(struct pdma_rand_page, buf) ==
	       offsetof(struct pdma_rand_page, seed) + RAND_SEED, "seed and buf adjacent");

/* A page the child of a fork finds zeroed (filled 0: it draws a new seed and
 * never repeats its parent's bytes), or NULL where the kernel cannot do that. */
static struct pdma_rand_page *rand_page_new(void)
{
	void *pg = mmap(NULL, RAND_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (pg == MAP_FAILED)
		return NULL;
	if (madvise(pg, RAND_PAGE, MADV_WIPEONFORK)) {
		munmap(pg, RAND_PAGE);
		return NULL;
	}
	return pg;
}

static void rand_page_free(struct pdma_rand_page *pg)
{
	sodium_memzero(pg, RAND_PAGE);
	munmap(pg, RAND_PAGE);
}

/* The next block of keystream into seed and buf, from the current seed (a
 * new one from the kernel first in a fresh page, or every RAND_RESEED). */
static int rand_page_refill(struct pdma_rand_page *pg)
{
	unsigned char seed[RAND_SEED];

	pg->filled = 0;
	if (!pg->refills) {
		int ret = getrandom_all(pg->seed, sizeof(pg->seed));

		if (ret)
			return ret;
	}
	memcpy(seed, pg->seed, sizeof(seed));
	randombytes_buf_deterministic(pg->seed, sizeof(pg->seed) + sizeof(pg->buf), seed);
	sodium_memzero(seed, sizeof(seed));
	pg->refills = (pg->refills + 1) % RAND_RESEED;
	pg->pos = 0;
	pg->filled = 1;
	return 0;
}

/* Caller owns pg (its thread's, or the domain pool's under its lock). */
static int rand_page_draw(struct pdma_rand_page *pg, void *buf, size_t len)
{
	if (!pg->filled || sizeof(pg->buf) - pg->pos < len) {
		int ret;

		if (!pg->filled)
			pg->refills = 0; /* fresh or forked: a seed from the kernel */
		ret = rand_page_refill(pg);
		if (ret)
			return ret;
	}
	memcpy(buf, pg->buf + pg->pos, len);
	sodium_memzero(pg->buf + pg->pos, len); /* a key leaves no copy behind */
	pg->pos += len;
	return 0;
}

/*
 * Each thread that registers draws from a page of its own: the common draw
 * takes no lock and shares no cache line with other threads (the domain
 * pool's mutex was a tenth of a cached registration, and contended between
 * registering threads). Each page is its own keystream under its own seed
 * from the kernel, each byte handed out once: which thread draws them changes
 * nothing an observer of the keys could use. The page is wiped and unmapped at
 * thread exit; after that, or where no such page can be made, the domain pool
 * serves. One thread-local object, and initial-exec: an offset from the thread
 * pointer, where the default model for a shared library calls __tls_get_addr
 * on every access (2-3% of a cached registration, twice). Its 32 bytes fit
 * the static TLS glibc keeps for libraries loaded by dlopen, as the cache's
 * thread-local state does (cache_int.h).
 */
static pthread_key_t rand_tls_key;
static pthread_once_t rand_tls_once = PTHREAD_ONCE_INIT;
static bool rand_tls_key_ok;
static __thread struct {
	struct pdma_rand_page *pg;
	bool tried;
	uint64_t desc_next, desc_end; /* pdma_desc_id_new's block */
} rand_tls __attribute__((tls_model("initial-exec")));

static void rand_tls_exit(void *pg)
{
	rand_tls.pg = NULL; /* destructors run in the exiting thread itself */
	rand_page_free(pg);
}

static void rand_tls_key_init(void)
{
	rand_tls_key_ok = !pthread_key_create(&rand_tls_key, rand_tls_exit);
}

static struct pdma_rand_page *rand_tls_page(void)
{
	struct pdma_rand_page *pg;

	if (rand_tls.pg || rand_tls.tried)
		return rand_tls.pg;
	rand_tls.tried = true; /* once per thread: a failure stays on the pool */
	pthread_once(&rand_tls_once, rand_tls_key_init);
	if (!rand_tls_key_ok)
		return NULL;
	pg = rand_page_new();
	if (pg && pthread_setspecific(rand_tls_key, pg)) {
		rand_page_free(pg);
		pg = NULL;
	}
	rand_tls.pg = pg;
	return pg;
}

void pdma_rand_init(struct pdma_rand_pool *p)
{
	/* Picks libsodium's vectorised ChaCha20 (idempotent, thread-safe). Where
	 * it fails (< 0) the portable code runs: the same keystream, slower. */
	int sodium = sodium_init();

	(void)sodium;
	p->page = rand_page_new();
	pthread_mutex_init(&p->lock, NULL);
}

void pdma_rand_fini(struct pdma_rand_pool *p)
{
	if (p->page)
		rand_page_free(p->page);
	pthread_mutex_destroy(&p->lock);
}

int pdma_random_bytes(struct pdma_rand_pool *p, void *buf, size_t len)
{
	struct pdma_rand_page *pg = rand_tls_page();
	int ret;

	if (pg && len <= sizeof(pg->buf))
		return rand_page_draw(pg, buf, len);
	pg = p->page;
	if (!pg || len > sizeof(pg->buf))
		return getrandom_all(buf, len);
	pthread_mutex_lock(&p->lock);
	ret = rand_page_draw(pg, buf, len);
	pthread_mutex_unlock(&p->lock);
	return ret;
}

/*
 * Descriptor IDs are unique in the process, not just the domain, so a desc
 * handed to the wrong domain can never name one of its MRs; they are never
 * reused. Each thread takes them a block at a time from the process-wide
 * count, in the thread-local object above: one shared atomic per DESC_BLOCK
 * registrations instead of each (a lock xadd on a line every registering
 * thread writes, 9.5 ns on the H100 machine's host alone). IDs then do not
 * follow the order of registration across threads; nothing needs them to. A
 * forked child goes on with its parent's block: another process, whose
 * descriptors never meet the parent's.
 */
#define DESC_BLOCK 1024
static atomic_uint_fast64_t desc_ids;

uint64_t pdma_desc_id_new(void)
{
	if (rand_tls.desc_next == rand_tls.desc_end) {
		/* 0 is no descriptor: the first block starts at 1 */
		rand_tls.desc_next = atomic_fetch_add_explicit(&desc_ids, DESC_BLOCK,
							       memory_order_relaxed) + 1;
		rand_tls.desc_end = rand_tls.desc_next + DESC_BLOCK;
	}
	return rand_tls.desc_next++;
}

/*
 * The ID tables. Fibonacci hashing spreads both random keys and IDs that
 * count up (descriptors, requested keys 1, 2, 3...) over the slots. At most
 * half the slots are used, so a probe ends after a couple of slots on
 * average. Removal shifts the following entries of the probe run back (no
 * tombstones), so a table that sees registrations come and go for ever never
 * degrades and never needs a rebuild.
 */
#define IDMAP_MIN 64

static size_t idmap_home(const struct pdma_idmap *t, uint64_t id)
{
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & t->mask;
}

void *pdma_idmap_find(const struct pdma_idmap *t, uint64_t id)
{
	if (!t->slot)
		return NULL;
	for (size_t i = idmap_home(t, id);; i = (i + 1) & t->mask) {
		if (!t->slot[i].val)
			return NULL;
		if (t->slot[i].id == id)
			return t->slot[i].val;
	}
}

/* False: id is in t already. The probe passes every slot of id's run, so
 * this check costs nothing beside it (a lookup before the insert was a second
 * probe on every registration). */
static bool idmap_place(struct pdma_idmap *t, uint64_t id, void *val)
{
	size_t i = idmap_home(t, id);

	for (; t->slot[i].val; i = (i + 1) & t->mask)
		if (t->slot[i].id == id)
			return false;
	t->slot[i].id = id;
	t->slot[i].val = val;
	t->n++;
	return true;
}

/* True: n entries in all fit (at most half the slots used). */
static inline bool idmap_fits(const struct pdma_idmap *t, size_t n)
{
	return t->slot && 2 * n <= t->mask + 1;
}

/* Double the slots (IDMAP_MIN for the first) until n entries fit. */
static int idmap_grow(struct pdma_idmap *t, size_t n)
{
	size_t size = t->slot ? 2 * (t->mask + 1) : IDMAP_MIN;
	struct pdma_idmap old = *t;

	while (2 * n > size)
		size *= 2;
	t->slot = calloc(size, sizeof(*t->slot));
	if (!t->slot) {
		*t = old;
		return -ENOMEM;
	}
	t->mask = size - 1;
	t->n = 0;
	for (size_t i = 0; old.slot && i <= old.mask; i++)
		if (old.slot[i].val)
			idmap_place(t, old.slot[i].id, old.slot[i].val);
	free(old.slot);
	return 0;
}

/* pdma_idmap_insert into a grown table. Out of line, and called last:
 * inline, its registers made every insert save and restore six of them. */
static __attribute__((noinline)) int idmap_grow_insert(struct pdma_idmap *t, uint64_t id,
						       void *val)
{
	int ret = idmap_grow(t, t->n + 1);

	if (ret)
		return ret;
	return idmap_place(t, id, val) ? 0 : -EEXIST;
}

int pdma_idmap_reserve(struct pdma_idmap *t, size_t n)
{
	return idmap_fits(t, n) ? 0 : idmap_grow(t, n);
}

int pdma_idmap_insert(struct pdma_idmap *t, uint64_t id, void *val)
{
	if (!idmap_fits(t, t->n + 1))
		return idmap_grow_insert(t, id, val);
	return idmap_place(t, id, val) ? 0 : -EEXIST;
}

void *pdma_idmap_remove(struct pdma_idmap *t, uint64_t id)
{
	size_t i, j;
	void *val;

	if (!t->slot)
		return NULL;
	for (i = idmap_home(t, id); t->slot[i].id != id || !t->slot[i].val;
	     i = (i + 1) & t->mask)
		if (!t->slot[i].val)
			return NULL;
	val = t->slot[i].val;
	/* Backward shift: an entry further along the run moves into the hole
	 * unless its home slot lies cyclically in (hole, its slot], where the
	 * probe from its home would not pass the hole. */
	for (j = (i + 1) & t->mask; t->slot[j].val; j = (j + 1) & t->mask) {
		size_t h = idmap_home(t, t->slot[j].id);

		if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
			continue;
		t->slot[i] = t->slot[j];
		i = j;
	}
	t->slot[i].val = NULL;
	t->n--;
	return val;
}

void pdma_idmap_fini(struct pdma_idmap *t)
{
	free(t->slot);
	*t = (struct pdma_idmap){ 0 };
}

struct pdma_mr *pdma_key_lookup(struct pdma_domain *d, uint64_t key)
{
	struct pdma_key_entry *e = pdma_idmap_find(&d->keys, key);

	return e ? e->mr : NULL;
}

/* 8 bytes from this thread's page, inline; false where the general draw
 * must serve (no page yet, a fresh or forked one, or one used up). That
 * draw is three calls deep (it ends in memcpy and sodium_memzero of a
 * variable length): a key cost about 10 ns through it on the development VM,
 * 3 ns here. The wipe is a plain store: the page outlives this call, so no
 * compiler may drop it as dead, and the barrier says so. */
static inline bool rand_u64_fast(uint64_t *out)
{
	struct pdma_rand_page *pg = rand_tls.pg;
	unsigned char *b;
	uint64_t v;

	if (!pg || !pg->filled || sizeof(pg->buf) - pg->pos < sizeof(v))
		return false;
	b = pg->buf + pg->pos;
	memcpy(&v, b, sizeof(v));
	memset(b, 0, sizeof(v));
	__asm__ volatile("" : : "r"(b) : "memory");
	pg->pos += sizeof(v);
	*out = v;
	return true;
}

static inline bool key_ok(const struct pdma_domain *d, uint64_t *k)
{
	*k &= d->key_mask;
	return *k != PDMA_KEY_NOTAVAIL && *k != 0;
}

/* Every draw the inline one cannot serve, and the retries: the general draw. */
static __attribute__((noinline)) int key_draw_slow(struct pdma_domain *d, uint64_t *key)
{
	for (int tries = 0; tries < 64; tries++) {
		uint64_t k;
		int ret = pdma_random_bytes(&d->rand, &k, sizeof(k));

		if (ret)
			return ret;
		if (key_ok(d, &k)) {
			*key = k;
			return 0;
		}
	}
	return -ENOSPC; /* only 0 and all-ones drawn: a 1-byte key space, unlucky */
}

/* The first draw is nearly always a key: it alone is inline, so the common
 * case pays neither the loop's frame nor a call. */
int pdma_key_draw(struct pdma_domain *d, uint64_t *key)
{
	uint64_t k;

	if (rand_u64_fast(&k) && key_ok(d, &k)) {
		*key = k;
		return 0;
	}
	return key_draw_slow(d, key);
}

int pdma_key_new(struct pdma_domain *d, uint64_t requested, uint64_t *key)
{
	if (!(d->attr.mr_mode & PDMA_MR_PROV_KEY)) {
		/* PDMA_KEY_NOTAVAIL is reserved: it would read as "no key". */
		if ((requested & ~d->key_mask) || requested == PDMA_KEY_NOTAVAIL)
			return -EKEYREJECTED;
		if (pdma_idmap_find(&d->keys, requested))
			return -ENOKEY;
		*key = requested;
		return 0;
	}
	/* Stricter than libfabric, which ignores requested_key here: a caller
	 * that asks for a key and silently gets another is a bug waiting. */
	if (requested)
		return -EKEYREJECTED;
	return pdma_key_fresh(d, key);
}

int pdma_key_fresh(struct pdma_domain *d, uint64_t *key)
{
	for (int tries = 0; tries < 64; tries++) {
		uint64_t k;
		int ret = pdma_key_draw(d, &k);

		if (ret)
			return ret;
		if (!pdma_idmap_find(&d->keys, k)) {
			*key = k;
			return 0;
		}
	}
	return -ENOSPC; /* key space of a tiny mr_key_size exhausted */
}
