// SPDX-License-Identifier: MIT
/*
 * Event queue for asynchronous registration (PDMA_REG_MR) and revocations
 * (PDMA_MR_REVOKE_EVENTS, posted by lib/mr/mr_dma.c). A registration
 * reserves its event slot before it starts, so a full queue fails the call
 * (-EAGAIN, nothing registered, no event) instead of losing a completion; the
 * MR handle is stored for the caller before the event is posted, so a reader
 * that sees the event always finds the handle written.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "mr/domain.h"

int pdma_eq_open(struct pdma_domain *d, size_t size, struct pdma_eq **out)
{
	struct pdma_eq *eq;

	if (!d || !out || !size || size > (1u << 20))
		return -EINVAL;
	eq = calloc(1, sizeof(*eq));
	if (!eq)
		return -ENOMEM;
	eq->ring = calloc(size, sizeof(*eq->ring));
	if (!eq->ring) {
		free(eq);
		return -ENOMEM;
	}
	eq->dom = d;
	eq->size = size;
	pthread_mutex_init(&eq->lock, NULL);
	pthread_cond_init(&eq->cond, NULL);
	pdma_dom_lock(d);
	eq->next = d->eqs;
	if (d->eqs)
		d->eqs->prev = eq;
	d->eqs = eq;
	pdma_dom_unlock(d);
	*out = eq;
	return 0;
}

int pdma_domain_bind_eq(struct pdma_domain *d, struct pdma_eq *eq, uint64_t flags)
{
	int ret = 0;

	if (!d || !eq || eq->dom != d || !flags ||
	    (flags & ~(PDMA_REG_MR | PDMA_MR_REVOKE_EVENTS)))
		return -EINVAL;
	pdma_dom_lock(d);
	if (d->eq)
		ret = -EBUSY;
	else {
		eq->flags = flags;
		eq->bound = true;
		/* Revocation callbacks read it without the domain lock. */
		__atomic_store_n(&d->eq, eq, __ATOMIC_RELEASE);
		if (flags & PDMA_MR_REVOKE_EVENTS)
			pdma_mr_watch_all(d);
	}
	pdma_dom_unlock(d);
	return ret;
}

int pdma_eq_reserve(struct pdma_eq *eq)
{
	int ret = 0;

	pthread_mutex_lock(&eq->lock);
	if (eq->count + eq->reserved >= eq->size)
		ret = -EAGAIN;
	else
		eq->reserved++;
	pthread_mutex_unlock(&eq->lock);
	return ret;
}

void pdma_eq_unreserve(struct pdma_eq *eq)
{
	pthread_mutex_lock(&eq->lock);
	eq->reserved--;
	pthread_mutex_unlock(&eq->lock);
}

void pdma_eq_post(struct pdma_eq *eq, const struct pdma_eq_entry *e)
{
	pthread_mutex_lock(&eq->lock);
	eq->reserved--;
	eq->ring[(eq->head + eq->count) % eq->size] = *e;
	eq->count++;
	pthread_cond_signal(&eq->cond);
	pthread_mutex_unlock(&eq->lock);
}

bool pdma_eq_post_unreserved(struct pdma_eq *eq, const struct pdma_eq_entry *e)
{
	bool ok;

	pthread_mutex_lock(&eq->lock);
	ok = eq->count + eq->reserved < eq->size;
	if (ok) {
		eq->ring[(eq->head + eq->count) % eq->size] = *e;
		eq->count++;
		pthread_cond_signal(&eq->cond);
	} else {
		eq->lost++;
	}
	pthread_mutex_unlock(&eq->lock);
	return ok;
}

int pdma_eq_read(struct pdma_eq *eq, struct pdma_eq_entry *entry, int timeout_ms)
{
	struct timespec dl;
	int ret = 0;

	if (!eq || !entry)
		return -EINVAL;
	if (timeout_ms > 0) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&eq->lock);
	while (!eq->count && !ret) {
		if (timeout_ms == 0)
			ret = -EAGAIN;
		else if (timeout_ms < 0)
			pthread_cond_wait(&eq->cond, &eq->lock);
		else if (pthread_cond_timedwait(&eq->cond, &eq->lock, &dl) == ETIMEDOUT)
			ret = eq->count ? 0 : -EAGAIN;
	}
	if (!ret) {
		*entry = eq->ring[eq->head];
		eq->head = (eq->head + 1) % eq->size;
		eq->count--;
	}
	pthread_mutex_unlock(&eq->lock);
	return ret;
}

int pdma_eq_close(struct pdma_eq *eq)
{
	struct pdma_domain *d;

	if (!eq)
		return -EINVAL;
	d = eq->dom;
	pdma_dom_lock(d);
	pthread_mutex_lock(&eq->lock);
	if (d->eq == eq && (d->n_mr || eq->reserved)) {
		/* Registrations may still post to it. */
		pthread_mutex_unlock(&eq->lock);
		pdma_dom_unlock(d);
		return -EBUSY;
	}
	pthread_mutex_unlock(&eq->lock);
	if (d->eq == eq)
		__atomic_store_n(&d->eq, NULL, __ATOMIC_RELEASE);
	if (eq->prev)
		eq->prev->next = eq->next;
	else
		d->eqs = eq->next;
	if (eq->next)
		eq->next->prev = eq->prev;
	pdma_dom_unlock(d);
	pthread_cond_destroy(&eq->cond);
	pthread_mutex_destroy(&eq->lock);
	free(eq->ring);
	free(eq);
	return 0;
}
