// SPDX-License-Identifier: MIT
/*
 * MR keys. Provider keys are random (getrandom), so a peer cannot guess the
 * key of another MR from its own; they are checked against the live table so
 * a key is never handed out twice while live. Requested keys are the caller's
 * and only checked for range and uniqueness. Caller holds the domain lock
 * exclusive (pdma_key_new) or shared (pdma_key_lookup).
 */
#include <errno.h>
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
struct pdma_rand_page {
	size_t filled; /* 0 in a fresh page and in a forked child's copy */
	size_t pos;    /* next unused byte of buf */
	unsigned char buf[RAND_PAGE - 2 * sizeof(size_t)];
};

void pdma_rand_init(struct pdma_rand_pool *p)
{
	void *pg = mmap(NULL, RAND_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	p->page = NULL;
	if (pg != MAP_FAILED) {
		if (madvise(pg, RAND_PAGE, MADV_WIPEONFORK) == 0)
			p->page = pg;
		else
			munmap(pg, RAND_PAGE);
	}
	pthread_mutex_init(&p->lock, NULL);
}

void pdma_rand_fini(struct pdma_rand_pool *p)
{
	if (p->page) {
		explicit_bzero(p->page, RAND_PAGE);
		munmap(p->page, RAND_PAGE);
	}
	pthread_mutex_destroy(&p->lock);
}

int pdma_random_bytes(struct pdma_rand_pool *p, void *buf, size_t len)
{
	struct pdma_rand_page *pg = p->page;
	int ret = 0;

	if (!pg || len > sizeof(pg->buf))
		return getrandom_all(buf, len);
	pthread_mutex_lock(&p->lock);
	if (!pg->filled || sizeof(pg->buf) - pg->pos < len) {
		ret = getrandom_all(pg->buf, sizeof(pg->buf));
		pg->filled = !ret;
		pg->pos = 0;
	}
	if (!ret) {
		memcpy(buf, pg->buf + pg->pos, len);
		explicit_bzero(pg->buf + pg->pos, len); /* a key leaves no copy behind */
		pg->pos += len;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

struct pdma_mr *pdma_key_lookup(struct pdma_domain *d, uint64_t key)
{
	struct pdma_key_entry *e;

	HASH_FIND(hh, d->keys, &key, sizeof(key), e);
	return e ? e->mr : NULL;
}

int pdma_key_new(struct pdma_domain *d, uint64_t requested, uint64_t *key)
{
	struct pdma_key_entry *e;

	if (!(d->attr.mr_mode & PDMA_MR_PROV_KEY)) {
		/* PDMA_KEY_NOTAVAIL is reserved: it would read as "no key". */
		if ((requested & ~d->key_mask) || requested == PDMA_KEY_NOTAVAIL)
			return -EKEYREJECTED;
		HASH_FIND(hh, d->keys, &requested, sizeof(requested), e);
		if (e)
			return -ENOKEY;
		*key = requested;
		return 0;
	}
	/* Stricter than libfabric, which ignores requested_key here: a caller
	 * that asks for a key and silently gets another is a bug waiting. */
	if (requested)
		return -EKEYREJECTED;
	for (int tries = 0; tries < 64; tries++) {
		uint64_t k;
		int ret = pdma_random_bytes(&d->rand, &k, sizeof(k));

		if (ret)
			return ret;
		k &= d->key_mask;
		if (k == PDMA_KEY_NOTAVAIL || k == 0)
			continue;
		HASH_FIND(hh, d->keys, &k, sizeof(k), e);
		if (!e) {
			*key = k;
			return 0;
		}
	}
	return -ENOSPC; /* key space of a tiny mr_key_size exhausted */
}
