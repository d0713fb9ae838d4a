// SPDX-License-Identifier: MIT
/*
 * MR keys. Provider keys are random (getrandom), so a peer cannot guess the
 * key of another MR from its own; they are checked against the live table so
 * a key is never handed out twice while live. Requested keys are the caller's
 * and only checked for range and uniqueness. Caller holds the domain lock
 * exclusive (pdma_key_new) or shared (pdma_key_lookup).
 */
#include <errno.h>
#include <sys/random.h>

#include "domain.h"

int pdma_random_bytes(void *buf, size_t len)
{
	unsigned char *p = buf;

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
		int ret = pdma_random_bytes(&k, sizeof(k));

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
