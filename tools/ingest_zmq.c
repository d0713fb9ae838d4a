// SPDX-License-Identifier: MIT
/* `peerdma ingest --zmq`: the session's blocks to the ZeroMQ sink (ingest_zmq.h). */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ingest_zmq.h"
#include "peerdma/ingest.h"

#ifdef PDMA_HAVE_ZMQ
#include "sinks/zmq.h"

struct pdma_ingest_zmq {
	struct pdma_zmq *z;
	struct pdma_sub *sub;
	struct pdma_ingest_zmq_opts o;
	pthread_t th;
	atomic_bool done;
	atomic_bool abandon; /* the session never started: no -EPIPE will come */
	int err;
	char msg[256];
};

static void *publisher(void *arg)
{
	struct pdma_ingest_zmq *p = arg;

	for (;;) {
		struct pdma_block *b;
		int r = pdma_sub_next(p->sub, &b, 100);
		if (r == -ETIMEDOUT) {
			if (atomic_load(&p->abandon))
				break;
			continue;
		}
		if (r == -EPIPE)
			break; /* stopped and drained */
		if (r) {
			snprintf(p->msg, sizeof(p->msg), "next block: %s", strerror(-r));
			p->err = r;
			break;
		}
		r = pdma_zmq_publish(p->z, b, p->msg, sizeof(p->msg));
		pdma_block_release(b);
		if (r) {
			if (!p->msg[0])
				snprintf(p->msg, sizeof(p->msg), "%s", strerror(-r));
			p->err = r;
			break;
		}
	}
	atomic_store(&p->done, true);
	return NULL;
}

int pdma_ingest_zmq_begin(struct pdma_ingest_zmq **zp, struct pdma_ingest *ing,
			  const struct pdma_ingest_zmq_opts *opts, uint64_t sample_rate,
			  bool quiet, volatile sig_atomic_t *stop)
{
	struct pdma_ingest_zmq *p = calloc(1, sizeof(*p));
	struct pdma_zmq_attr za;
	struct pdma_sub_attr sa;
	char msg[320];
	int ret;

	if (!p) {
		fprintf(stderr, "peerdma ingest: --zmq: out of memory\n");
		return 1;
	}
	p->o = *opts;
	atomic_init(&p->done, false);
	pdma_zmq_attr_init(&za);
	za.endpoint = opts->endpoint;
	za.format = (enum pdma_zmq_format)opts->format;
	za.tags = opts->tags;
	za.sample_rate = sample_rate;
	ret = pdma_zmq_open(&za, &p->z, msg, sizeof(msg));
	if (ret) {
		fprintf(stderr, "peerdma ingest: --zmq: %s\n", msg[0] ? msg : strerror(-ret));
		free(p);
		return 1;
	}
	pdma_sub_attr_init(&sa);
	sa.stream_id = PDMA_SUB_ALL_STREAMS;
	sa.policy = (enum pdma_sub_policy)opts->policy;
	/* One queue for every stream: 8 blocks (the default) is 4 blocks each
	 * of two streams, tens of milliseconds, which a descheduled publisher
	 * overruns on a busy machine; each stream's pool bounds it anyway. */
	sa.depth = 64;
	ret = pdma_ingest_subscribe(ing, &sa, &p->sub);
	if (ret) {
		fprintf(stderr, "peerdma ingest: --zmq: subscribe: %s\n", strerror(-ret));
		goto fail;
	}
	if (opts->wait) {
		if (!quiet)
			fprintf(stderr, "peerdma ingest: waiting for %u ZeroMQ subscriber(s) on %s\n",
				opts->wait, opts->endpoint);
		/* before the publisher thread: a ZeroMQ socket is one thread's */
		do
			ret = pdma_zmq_wait_subscribers(p->z, (int)opts->wait, 200);
		while (ret == -ETIMEDOUT && !*stop);
		if (ret && ret != -ETIMEDOUT)
			fprintf(stderr, "peerdma ingest: --zmq: waiting for subscribers: %s\n",
				strerror(-ret));
	}
	ret = pthread_create(&p->th, NULL, publisher, p);
	if (ret) {
		fprintf(stderr, "peerdma ingest: --zmq: thread: %s\n", strerror(ret));
		pdma_sub_close(p->sub);
		goto fail;
	}
	*zp = p;
	return 0;
fail:
	pdma_zmq_close(p->z);
	free(p);
	return 1;
}

bool pdma_ingest_zmq_failed(struct pdma_ingest_zmq *p)
{
	return atomic_load(&p->done) && p->err;
}

static json_t *zmq_json(struct pdma_ingest_zmq *p)
{
	static const char *const fmts[] = { "ci16", "cf32" };
	struct pdma_zmq_stats st;
	struct pdma_sub_stats ss;
	struct pdma_zmq_stream_stats s;
	json_t *streams = json_array();

	pdma_zmq_stats(p->z, &st);
	pdma_sub_stats(p->sub, &ss);
	for (uint32_t i = 0; pdma_zmq_stream_stats(p->z, i, &s); i++) {
		char topic[PDMA_ZMQ_TOPIC_LEN + 1];
		pdma_zmq_topic(s.stream_id, topic);
		json_array_append_new(streams, json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			"stream_id", (json_int_t)s.stream_id, "topic", topic,
			"first_sample", (json_int_t)s.first_sample, "samples", (json_int_t)s.samples,
			"messages", (json_int_t)s.messages, "gap_samples", (json_int_t)s.gap_samples,
			"fill_samples", (json_int_t)s.fill_samples, "jumps", (json_int_t)s.jumps,
			"stale", (json_int_t)s.stale));
	}
	return json_pack("{s:s, s:s, s:b, s:I, s:I, s:i, s:I, s:I, s:I, s:o}",
			 "endpoint", p->o.endpoint, "format", fmts[p->o.format & 1], "tags", p->o.tags,
			 "messages", (json_int_t)st.messages, "bytes", (json_int_t)st.bytes,
			 "subscribers", (int)st.subscribers, "send_waits", (json_int_t)st.send_waits,
			 "delivered", (json_int_t)ss.delivered, "overruns", (json_int_t)ss.overruns,
			 "streams", streams);
}

void pdma_ingest_zmq_abandon(struct pdma_ingest_zmq *p)
{
	atomic_store(&p->abandon, true);
}

int pdma_ingest_zmq_finish(struct pdma_ingest_zmq *p, struct json_t *j, volatile sig_atomic_t *sig)
{
	sig_atomic_t at_start = *sig;
	int status = 0;

	while (!atomic_load(&p->done)) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		if (*sig != at_start)
			pdma_zmq_cancel(p->z);
	}
	pthread_join(p->th, NULL);
	if (p->err) {
		fprintf(stderr, "peerdma ingest: --zmq: %s\n", p->msg);
		status = 1;
	}
	if (j)
		json_object_set_new(j, "zmq", zmq_json(p));
	pdma_sub_close(p->sub);
	pdma_zmq_close(p->z);
	free(p);
	return status;
}

#else /* !PDMA_HAVE_ZMQ */

int pdma_ingest_zmq_begin(struct pdma_ingest_zmq **zp, struct pdma_ingest *ing,
			  const struct pdma_ingest_zmq_opts *opts, uint64_t sample_rate,
			  bool quiet, volatile sig_atomic_t *stop)
{
	fprintf(stderr, "peerdma ingest: --zmq: this peerdma was built without ZeroMQ "
			"(install libzmq3-dev: scripts/install-deps build, and rebuild)\n");
	return 1;
}

bool pdma_ingest_zmq_failed(struct pdma_ingest_zmq *p)
{
	return false;
}

void pdma_ingest_zmq_abandon(struct pdma_ingest_zmq *p)
{
}

int pdma_ingest_zmq_finish(struct pdma_ingest_zmq *p, struct json_t *j, volatile sig_atomic_t *sig)
{
	return 0;
}

#endif
