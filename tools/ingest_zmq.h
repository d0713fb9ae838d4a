/* SPDX-License-Identifier: MIT */
/*
 * `peerdma ingest --zmq`: a subscription to every stream of the session
 * (public API, peerdma/ingest.h) whose blocks a thread publishes through the
 * ZeroMQ sink (ingest/sinks/zmq.h) for GNU Radio. Kept out of cmd_ingest.c so
 * the command only parses, calls these and reports.
 *
 * Thread safety: the controlling thread calls everything; the publisher runs
 * on its own thread between pdma_ingest_zmq_begin and _finish.
 */
#ifndef PDMA_TOOLS_INGEST_ZMQ_H
#define PDMA_TOOLS_INGEST_ZMQ_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct pdma_ingest;
struct json_t;

struct pdma_ingest_zmq_opts {
	const char *endpoint;     /* --zmq (NULL: off) */
	int format;               /* --zmq-format: 0 ci16, 1 cf32 (enum pdma_zmq_format) */
	bool tags;                /* --zmq-tags */
	uint32_t wait;            /* --zmq-wait: subscribers before receiving starts */
	int policy;               /* --zmq-policy (enum pdma_sub_policy) */
};

struct pdma_ingest_zmq;

/* Before pdma_ingest_start: binds the endpoint, subscribes to every stream,
 * starts the publisher thread, then waits for opts->wait subscribers while
 * *stop stays 0 (a signal). 0, or 1 after one line on stderr. */
int pdma_ingest_zmq_begin(struct pdma_ingest_zmq **zp, struct pdma_ingest *ing,
			  const struct pdma_ingest_zmq_opts *opts, uint64_t sample_rate,
			  bool quiet, volatile sig_atomic_t *stop);
/* The publisher stopped on an error (said on stderr): the run should end. */
bool pdma_ingest_zmq_failed(struct pdma_ingest_zmq *z);
/* The session will never start (a later setup step failed): the publisher
 * ends at its next empty wait instead of waiting for the stop's end of the
 * subscription. Before pdma_ingest_zmq_finish. */
void pdma_ingest_zmq_abandon(struct pdma_ingest_zmq *z);
/* After pdma_ingest_stop: waits for the publisher to drain the subscription
 * (a new signal after this call began cancels a publish stuck on a
 * subscriber that does not read), adds "zmq" to the summary j, closes. 0, or
 * 1 when the publisher failed. */
int pdma_ingest_zmq_finish(struct pdma_ingest_zmq *z, struct json_t *j, volatile sig_atomic_t *sig);

#endif /* PDMA_TOOLS_INGEST_ZMQ_H */
