// SPDX-License-Identifier: MIT
/* Subscriptions: their queues, the two policies, references, and the
 * delivery threads of callback subscriptions. One mutex (bl->lock) guards
 * the pools' free lists and every queue: blocks are coarse (block_packets
 * packets each), so it is taken a few times per block, never per packet.
 *
 * A block buffer can sit in several subscriptions' queues at once; its
 * reference count (pdma_blk.refs) counts them. What a consumer gets is its
 * subscription's own reference (struct sub_ref, one per buffer and
 * subscription): its count is the consumer's (pdma_block_retain, DLPack
 * views), and its last release drops the buffer's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blocks/blocks.h"

struct sub_ref {
	struct pdma_block pub;    /* first: the public pointer is the ref's */
	struct pdma_blk *blk;
	struct pdma_sub *sub;
	atomic_uint refs;
};

static size_t blk_index(struct pdma_blocks *bl, const struct pdma_blk *b)
{
	return (size_t)((const uint8_t *)b - bl->blk_mem) / bl->blk_size;
}

static bool matches(const struct pdma_sub *sub, uint32_t stream_id)
{
	return !sub->closed && (sub->a.stream_id == PDMA_SUB_ALL_STREAMS || sub->a.stream_id == stream_id);
}

/* Drop one of a buffer's references (lock held): the last one frees it. */
static void blk_put(struct pdma_blocks *bl, struct pdma_blk *b)
{
	if (atomic_fetch_sub(&b->refs, 1) == 1) {
		struct pdma_blk_stream *s = &bl->st[b->stream];

		b->next = s->free;
		s->free = b;
		s->nfree++;
		pthread_cond_broadcast(&bl->room);
	}
}

/* bl->lock held. A poll(2)-sleeping taker (pdma_sub_arm) is woken once:
 * the write is a system call, made only when someone sleeps on it. */
static void wake(struct pdma_sub *sub)
{
	const uint64_t one = 1;

	if (sub->wake_fd < 0)
		return;
	/* an eventfd's write fails only when its count would overflow,
	 * and then it is readable anyway */
	(void)!write(sub->wake_fd, &one, sizeof(one));
	sub->wake_fd = -1;
}

static struct pdma_blk *q_at(const struct pdma_sub *sub, uint32_t i)
{
	return sub->q[(sub->qhead + i) % sub->a.depth];
}

/* Remove queue entry i (lock held), keeping the order of the others. */
static void q_remove(struct pdma_sub *sub, uint32_t i)
{
	for (uint32_t j = i; j > 0; j--)
		sub->q[(sub->qhead + j) % sub->a.depth] = sub->q[(sub->qhead + j - 1) % sub->a.depth];
	sub->qhead = (sub->qhead + 1) % sub->a.depth;
	sub->qlen--;
}

void pdma_sub_attr_init(struct pdma_sub_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->stream_id = PDMA_SUB_ALL_STREAMS;
	a->policy = PDMA_SUB_DROP_OLDEST;
	a->depth = 8;
}

bool pdma_blocks_wanted(struct pdma_blocks *bl, uint32_t stream_id)
{
	bool w = false;

	pthread_mutex_lock(&bl->lock);
	for (struct pdma_sub *sub = bl->subs; sub && !w; sub = sub->next)
		w = matches(sub, stream_id);
	pthread_mutex_unlock(&bl->lock);
	return w;
}

static bool backpressured(struct pdma_blocks *bl, uint32_t stream_id)
{
	for (struct pdma_sub *sub = bl->subs; sub; sub = sub->next)
		if (sub->a.policy == PDMA_SUB_BACKPRESSURE && matches(sub, stream_id))
			return true;
	return false;
}

struct pdma_blk *pdma_blocks_get_buf(struct pdma_blocks *bl, uint32_t idx)
{
	struct pdma_blk_stream *s = &bl->st[idx];

	for (;;) {
		if (s->free) {
			struct pdma_blk *b = s->free;

			s->free = b->next;
			s->nfree--;
			atomic_store(&b->refs, 1); /* the producer's, until delivered */
			return b;
		}
		if (!atomic_load(&bl->stopping) && backpressured(bl, s->stream_id)) {
			for (struct pdma_sub *sub = bl->subs; sub; sub = sub->next)
				if (sub->a.policy == PDMA_SUB_BACKPRESSURE && matches(sub, s->stream_id))
					sub->st.waits++;
			pthread_cond_wait(&bl->room, &bl->lock);
			continue;
		}
		/* Drop-oldest: the subscription that queues most (the slowest)
		 * loses its oldest block of this stream; the others keep
		 * theirs. Repeated until a buffer comes free. */
		struct pdma_sub *victim = NULL;
		uint32_t vi = 0;
		for (struct pdma_sub *sub = bl->subs; sub; sub = sub->next) {
			if (victim && sub->qlen <= victim->qlen)
				continue;
			for (uint32_t i = 0; i < sub->qlen; i++)
				if (q_at(sub, i)->stream == idx) {
					victim = sub;
					vi = i;
					break;
				}
		}
		if (!victim)
			return NULL; /* every buffer held by a consumer */
		struct pdma_blk *old = q_at(victim, vi);
		q_remove(victim, vi);
		victim->st.overruns++;
		victim->st.overrun_packets += old->pub.npackets;
		blk_put(bl, old);
	}
}

uint32_t pdma_blocks_deliver(struct pdma_blocks *bl, struct pdma_blk *b)
{
	uint32_t n = 0;

	for (struct pdma_sub *sub = bl->subs; sub; sub = sub->next) {
		if (!matches(sub, b->pub.stream_id))
			continue;
		while (sub->qlen == sub->a.depth && sub->a.policy == PDMA_SUB_BACKPRESSURE &&
		       !sub->closed && !atomic_load(&bl->stopping)) {
			sub->st.waits++;
			pthread_cond_wait(&bl->room, &bl->lock);
		}
		if (sub->closed)
			continue;
		if (sub->qlen == sub->a.depth) {
			struct pdma_blk *old = q_at(sub, 0);

			q_remove(sub, 0);
			sub->st.overruns++;
			sub->st.overrun_packets += old->pub.npackets;
			blk_put(bl, old);
		}
		sub->q[(sub->qhead + sub->qlen) % sub->a.depth] = b;
		sub->qlen++;
		atomic_fetch_add(&b->refs, 1);
		n++;
		pthread_cond_signal(&sub->avail);
		wake(sub);
	}
	/* The producer's reference goes last: a backpressure wait above
	 * drops the lock, and a subscription already given the block may
	 * release it meanwhile; the buffer must not come free (and be
	 * written again) while later subscriptions still get it. */
	blk_put(bl, b);
	return n;
}

void pdma_blocks_put_buf(struct pdma_blocks *bl, struct pdma_blk *b)
{
	blk_put(bl, b);
}

void pdma_blocks_end_subs(struct pdma_blocks *bl)
{
	pthread_mutex_lock(&bl->lock);
	for (struct pdma_sub *sub = bl->subs; sub; sub = sub->next) {
		sub->ended = true;
		pthread_cond_broadcast(&sub->avail);
		wake(sub);
	}
	pthread_mutex_unlock(&bl->lock);
}

int pdma_sub_arm(struct pdma_sub *sub, int fd)
{
	int ret = 1;

	pthread_mutex_lock(&sub->bl->lock);
	if (!sub->qlen && !sub->ended && !sub->closed) {
		sub->wake_fd = fd;
		ret = 0;
	}
	pthread_mutex_unlock(&sub->bl->lock);
	return ret;
}

/* Next block, lock held; -ETIMEDOUT, -EPIPE. */
static int next_locked(struct pdma_sub *sub, struct pdma_block **out, int timeout_ms)
{
	struct pdma_blocks *bl = sub->bl;
	struct timespec dl;

	if (timeout_ms > 0) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
	}
	while (sub->qlen == 0) {
		if (sub->ended || sub->closed)
			return -EPIPE;
		if (timeout_ms == 0)
			return -ETIMEDOUT;
		if (timeout_ms < 0)
			pthread_cond_wait(&sub->avail, &bl->lock);
		else if (pthread_cond_timedwait(&sub->avail, &bl->lock, &dl) == ETIMEDOUT && sub->qlen == 0)
			return sub->ended || sub->closed ? -EPIPE : -ETIMEDOUT;
	}
	struct pdma_blk *b = q_at(sub, 0);
	struct sub_ref *r = (struct sub_ref *)sub->refs_mem + blk_index(bl, b);

	sub->qhead = (sub->qhead + 1) % sub->a.depth;
	sub->qlen--;
	r->pub = b->pub;
	r->blk = b;
	r->sub = sub;
	atomic_store(&r->refs, 1);
	sub->held++;
	bl->held_total++;
	sub->st.delivered++;
	pthread_cond_broadcast(&bl->room); /* queue room (backpressure) */
	*out = &r->pub;
	return 0;
}

static void *cb_main(void *arg)
{
	struct pdma_sub *sub = arg;
	struct pdma_blocks *bl = sub->bl;
	struct pdma_block *b;

	for (;;) {
		pthread_mutex_lock(&bl->lock);
		int e = next_locked(sub, &b, -1);
		pthread_mutex_unlock(&bl->lock);
		if (e)
			break;
		sub->a.cb(b, sub->a.cb_arg);
	}
	return NULL;
}

int pdma_blocks_subscribe(struct pdma_blocks *bl, const struct pdma_sub_attr *a, struct pdma_sub **out)
{
	struct pdma_sub *sub;
	size_t nbuf = (size_t)bl->cfg.max_streams * bl->pool;

	if (!a || a->size < sizeof(*a) || !out || a->depth == 0 || a->depth > 65536 ||
	    (a->policy != PDMA_SUB_DROP_OLDEST && a->policy != PDMA_SUB_BACKPRESSURE) ||
	    (a->stream_id != PDMA_SUB_ALL_STREAMS && a->stream_id > UINT32_MAX))
		return -EINVAL;
	if (bl->started)
		return -EBUSY;
	sub = calloc(1, sizeof(*sub));
	if (!sub)
		return -ENOMEM;
	sub->bl = bl;
	sub->wake_fd = -1;
	sub->a = *a;
	sub->a.size = sizeof(sub->a);
	sub->q = calloc(a->depth, sizeof(*sub->q));
	sub->refs_mem = calloc(nbuf, sizeof(struct sub_ref));
	if (!sub->q || !sub->refs_mem) {
		free(sub->q);
		free(sub->refs_mem);
		free(sub);
		return -ENOMEM;
	}
	pthread_cond_init(&sub->avail, NULL);
	if (a->cb) {
		int e = pthread_create(&sub->th, NULL, cb_main, sub);
		if (e) {
			pthread_cond_destroy(&sub->avail);
			free(sub->q);
			free(sub->refs_mem);
			free(sub);
			return -e;
		}
		sub->has_th = true;
	}
	pthread_mutex_lock(&bl->lock);
	sub->next = bl->subs;
	bl->subs = sub;
	if (a->policy == PDMA_SUB_BACKPRESSURE)
		bl->any_backpressure = true;
	pthread_mutex_unlock(&bl->lock);
	*out = sub;
	return 0;
}

void pdma_blocks_start(struct pdma_blocks *bl, bool on)
{
	bl->started = on;
}

/* Session close: every subscription's memory (closed by then). */
void pdma_blocks_free_subs(struct pdma_blocks *bl)
{
	while (bl->subs) {
		struct pdma_sub *sub = bl->subs;

		bl->subs = sub->next;
		pthread_cond_destroy(&sub->avail);
		free(sub->q);
		free(sub->refs_mem);
		free(sub);
	}
}

int pdma_sub_next(struct pdma_sub *sub, struct pdma_block **b, int timeout_ms)
{
	int e;

	if (!sub || !b)
		return -EINVAL;
	if (sub->a.cb)
		return -EINVAL;
	pthread_mutex_lock(&sub->bl->lock);
	e = next_locked(sub, b, timeout_ms);
	pthread_mutex_unlock(&sub->bl->lock);
	return e;
}

void pdma_sub_stats(struct pdma_sub *sub, struct pdma_sub_stats *s)
{
	pthread_mutex_lock(&sub->bl->lock);
	*s = sub->st;
	s->queued = sub->qlen;
	s->held = sub->held;
	pthread_mutex_unlock(&sub->bl->lock);
}

void pdma_sub_close(struct pdma_sub *sub)
{
	struct pdma_blocks *bl;

	if (!sub)
		return;
	bl = sub->bl;
	pthread_mutex_lock(&bl->lock);
	if (sub->has_th && sub->ended) {
		/* The session has stopped: the delivery thread calls back
		 * every block still queued, as pdma_sub_next would return
		 * them, and then ends by itself. */
		pthread_mutex_unlock(&bl->lock);
		pthread_join(sub->th, NULL);
		sub->has_th = false;
		pthread_mutex_lock(&bl->lock);
	}
	sub->closed = true;
	while (sub->qlen) {
		struct pdma_blk *b = q_at(sub, 0);

		q_remove(sub, 0);
		blk_put(bl, b);
	}
	pthread_cond_broadcast(&sub->avail);
	pthread_cond_broadcast(&bl->room);
	wake(sub);
	pthread_mutex_unlock(&bl->lock);
	if (sub->has_th) {
		pthread_join(sub->th, NULL);
		sub->has_th = false;
	}
}

void pdma_block_retain(struct pdma_block *b)
{
	struct sub_ref *r = (struct sub_ref *)b;

	atomic_fetch_add(&r->refs, 1);
}

void pdma_block_release(struct pdma_block *b)
{
	struct sub_ref *r = (struct sub_ref *)b;

	if (!b || atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	struct pdma_blocks *bl = r->sub->bl;

	pthread_mutex_lock(&bl->lock);
	r->sub->held--;
	blk_put(bl, r->blk);
	bool last = --bl->held_total == 0 && bl->closing;
	pthread_mutex_unlock(&bl->lock);
	if (last)
		pdma_blocks_free(bl); /* the session was closed before this view died */
}

int pdma_block_read(const struct pdma_block *b, uint32_t first_packet, uint32_t npackets, void *dst)
{
	const struct sub_ref *r = (const struct sub_ref *)b;

	if (!b || !dst || first_packet > b->npackets || npackets > b->npackets - first_packet)
		return -EINVAL;
	const struct pdma_blk_mem *m = &r->sub->bl->mem;
	size_t pkt = (size_t)b->samples_per_packet * b->bytes_per_sample;

	if (!npackets)
		return 0;
	return m->read(m->arg, dst, (const uint8_t *)b->data + first_packet * pkt, npackets * pkt,
		       b->cuda_event);
}

int pdma_blocks_ready(const struct pdma_block *b)
{
	const struct sub_ref *r = (const struct sub_ref *)b;
	const struct pdma_blk_mem *m = &r->sub->bl->mem;
	char none;

	/* a read of no bytes: each kind's read waits for the event first */
	return m->read(m->arg, &none, b->data, 0, b->cuda_event);
}

int pdma_blocks_stream_wait(struct pdma_block *b, intptr_t stream)
{
	struct sub_ref *r = (struct sub_ref *)b;
	struct pdma_blk_mem *m = &r->sub->bl->mem;

	return m->stream_wait ? m->stream_wait(m->arg, stream, b->cuda_event) : -EOPNOTSUPP;
}
