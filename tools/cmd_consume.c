// SPDX-License-Identifier: MIT
/* peerdma consume: the remote side of peerdma forward. Connects over UCX,
 * asks for stream IDs, and reads the blocks through the same subscription
 * API as a local consumer (include/peerdma/forward.h); with --dir it writes
 * them as peerdma record does (one SigMF recording per stream), else it
 * counts them. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd.h"
#include "forward/consume.h"
#include "forward/wire.h"
#include "opt.h"
#include "peerdma/forward.h"
#include "sinks/sigmf.h"

struct consume_opts {
	char host[16];
	uint16_t port;
	const char *name, *dir, *prefix, *json;
	uint32_t streams[PDMA_FWD_MAX_SUBS], nstreams;
	uint32_t pool_blocks, depth, max_streams;
	enum pdma_sub_policy policy;
	bool quiet, nosync;
	struct pdma_consume_faults fl;
};

enum { O_CONNECT = 256, O_STREAMS, O_NAME, O_DIR, O_PREFIX, O_POOL_BLOCKS, O_DEPTH, O_POLICY,
       O_MAX_STREAMS, O_JSON, O_NO_SYNC, O_TEST_VERSION, O_TEST_NO_CREDITS, O_TEST_GARBAGE };

static const struct option consume_opts_tab[] = {
	{ "connect", required_argument, NULL, O_CONNECT },
	{ "streams", required_argument, NULL, O_STREAMS },
	{ "name", required_argument, NULL, O_NAME },
	{ "dir", required_argument, NULL, O_DIR },
	{ "prefix", required_argument, NULL, O_PREFIX },
	{ "pool-blocks", required_argument, NULL, O_POOL_BLOCKS },
	{ "depth", required_argument, NULL, O_DEPTH },
	{ "policy", required_argument, NULL, O_POLICY },
	{ "max-streams", required_argument, NULL, O_MAX_STREAMS },
	{ "json", required_argument, NULL, O_JSON },
	{ "no-sync", no_argument, NULL, O_NO_SYNC },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "test-version", required_argument, NULL, O_TEST_VERSION },
	{ "test-no-credits", no_argument, NULL, O_TEST_NO_CREDITS },
	{ "test-garbage-hello", no_argument, NULL, O_TEST_GARBAGE },
	{ 0 }
};

static const char consume_usage[] =
	"usage: peerdma consume [OPTIONS]\n"
	"Receive sample blocks from a peerdma forward over UCX: the same blocks, tags,\n"
	"gaps and context as a local subscriber gets. Ends when the forwarder's session\n"
	"ends (exit 0), on SIGINT or SIGTERM (exit 0, the summary says \"stopped\") or when\n"
	"the forwarder goes away (exit 1).\n\n"
	"      --connect A:P     the forwarder's UCX listener (default 127.0.0.1:4992,\n"
	"                        peerdma forward's; it prints the one it has)\n"
	"      --streams IDS     stream IDs, comma-separated (default: every stream)\n"
	"      --name NAME       this consumer's name (default consumer); a consumer that\n"
	"                        restarts under its name takes its place again\n"
	"      --dir DIR         write each stream to a SigMF recording there, as peerdma\n"
	"                        record does (default: count only)\n"
	"      --prefix NAME     recordings' file name prefix (default rec)\n"
	"      --pool-blocks N   buffers per stream, and the credits granted (default 16)\n"
	"      --depth N         blocks queued for the reader (default 32)\n"
	"      --policy P        backpressure (default: a slow reader holds its credits back\n"
	"                        and the forwarder counts the blocks it could not send) or\n"
	"                        drop-oldest (dropped here, counted: overruns)\n"
	"      --max-streams N   streams at most (default 16)\n"
	"      --json FILE       summary as JSON\n"
	"      --no-sync         no fdatasync before the recordings' metadata\n"
	"  -q, --quiet           no per-stream lines\n"
	"For the tests of a forwarder's defences: --test-version N (HELLO with protocol\n"
	"version N), --test-no-credits (grant the pool at start, never return a credit),\n"
	"--test-garbage-hello.\n"
	"UCX's own settings apply (UCX_TLS=tcp: the TCP transport only).\n";

static int parse_streams(const struct pdma_opt *o, struct consume_opts *c)
{
	char buf[4096], *save = NULL;

	if (strlen(optarg) >= sizeof(buf))
		return pdma_opt_bad(o, "too long");
	strcpy(buf, optarg);
	c->nstreams = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (pdma_opt_parse_u64(t, &v) || v > UINT32_MAX)
			return pdma_opt_bad(o, "want stream IDs (0..4294967295), comma-separated");
		if (c->nstreams == PDMA_FWD_MAX_SUBS)
			return pdma_opt_bad(o, "at most %d stream IDs", PDMA_FWD_MAX_SUBS);
		c->streams[c->nstreams++] = (uint32_t)v;
	}
	return c->nstreams ? 0 : pdma_opt_bad(o, "no stream ID");
}

/* 0, 1 (help printed), or 2 (usage error printed). */
static int parse(int argc, char **argv, struct consume_opts *c)
{
	static const char *const policies[] = { "drop-oldest", "backpressure", NULL };
	struct pdma_opt o;
	int v, k, bad = 0;

	memset(c, 0, sizeof(*c));
	strcpy(c->host, "127.0.0.1");
	c->port = 4992; /* peerdma forward's default */
	c->name = "consumer";
	c->prefix = "rec";
	c->pool_blocks = 16;
	c->depth = 32;
	c->max_streams = 16;
	c->policy = PDMA_SUB_BACKPRESSURE;
	pdma_opt_init(&o, "peerdma consume", consume_opts_tab, "qh");
	while (!bad && (v = pdma_opt_next(&o, argc, argv)) != -1) {
		switch (v) {
		case O_CONNECT:
			bad = pdma_opt_ipv4_port(&o, c->host, &c->port);
			break;
		case O_STREAMS: bad = parse_streams(&o, c); break;
		case O_NAME:
			bad = pdma_opt_str(&o, &c->name);
			if (!bad && strlen(c->name) > PDMA_FWD_NAME_LEN)
				bad = pdma_opt_bad(&o, "at most %d characters", PDMA_FWD_NAME_LEN);
			for (const char *p = c->name; !bad && *p; p++)
				if (*p < 0x21 || *p > 0x7e)
					bad = pdma_opt_bad(&o, "printable ASCII without spaces");
			break;
		case O_DIR: bad = pdma_opt_str(&o, &c->dir); break;
		case O_PREFIX: bad = pdma_opt_str(&o, &c->prefix); break;
		case O_POOL_BLOCKS: bad = pdma_opt_u32(&o, 2, 4096, &c->pool_blocks); break;
		case O_DEPTH: bad = pdma_opt_u32(&o, 1, 65536, &c->depth); break;
		case O_POLICY:
			bad = pdma_opt_choice(&o, policies, &k);
			if (!bad)
				c->policy = k ? PDMA_SUB_BACKPRESSURE : PDMA_SUB_DROP_OLDEST;
			break;
		case O_MAX_STREAMS: bad = pdma_opt_u32(&o, 1, 65535, &c->max_streams); break;
		case O_JSON: bad = pdma_opt_str(&o, &c->json); break;
		case O_NO_SYNC: c->nosync = true; break;
		case 'q': c->quiet = true; break;
		case 'h': fputs(consume_usage, stdout); return 1;
		case O_TEST_VERSION: bad = pdma_opt_u32(&o, 1, UINT32_MAX, &c->fl.version); break;
		case O_TEST_NO_CREDITS: c->fl.no_credits = true; break;
		case O_TEST_GARBAGE: c->fl.garbage_hello = true; break;
		default: return 2;
		}
	}
	if (bad)
		return 2;
	if (pdma_opt_end(&o, argc, argv))
		return 2;
	return 0;
}

static volatile sig_atomic_t got_signal;

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void on_signal(int s)
{
	(void)s;
	got_signal = 1;
}

static json_t *summary_json(const struct consume_opts *o, const struct pdma_consume_stats *s,
			    const struct pdma_sub_stats *ss, struct pdma_sigmf *w, double secs)
{
	json_t *j = json_object(), *a = json_array();

	/* first block taken to the last one released */
	json_object_set_new(j, "seconds", json_real(secs));
	json_object_set_new(j, "MBps", json_real(secs > 0 ? s->bytes / secs / 1e6 : 0));
	json_object_set_new(j, "name", json_string(o->name));
	json_object_set_new(j, "blocks", json_integer((json_int_t)s->blocks));
	json_object_set_new(j, "bytes", json_integer((json_int_t)s->bytes));
	json_object_set_new(j, "gap_packets", json_integer((json_int_t)s->gap_packets));
	json_object_set_new(j, "local_drops", json_integer((json_int_t)s->local_drops));
	json_object_set_new(j, "overruns", json_integer((json_int_t)ss->overruns));
	json_object_set_new(j, "fwd_dropped_blocks", json_integer((json_int_t)s->fwd_dropped_blocks));
	json_object_set_new(j, "fwd_dropped_packets", json_integer((json_int_t)s->fwd_dropped_packets));
	json_object_set_new(j, "ended", json_boolean(s->ended));
	json_object_set_new(j, "lost", json_boolean(s->lost));
	for (uint32_t i = 0; w && i < pdma_sigmf_streams(w); i++) {
		struct pdma_sigmf_info in;
		json_t *r = json_object();

		pdma_sigmf_stream(w, i, &in);
		json_object_set_new(r, "stream_id", json_integer(in.stream_id));
		json_object_set_new(r, "samples", json_integer((json_int_t)in.samples));
		json_object_set_new(r, "missing", json_integer((json_int_t)in.missing));
		json_object_set_new(r, "captures", json_integer(in.captures));
		json_array_append_new(a, r);
	}
	json_object_set_new(j, "streams", a);
	return j;
}

int pdma_cmd_consume(int argc, char **argv)
{
	struct consume_opts o;
	struct pdma_consume_attr ca;
	struct pdma_consume *c = NULL;
	struct pdma_sub_attr sa;
	struct pdma_sub *sub = NULL;
	struct pdma_sigmf *w = NULL;
	struct pdma_consume_stats s;
	struct pdma_sub_stats ss;
	char msg[256];
	int ret, status = 0, werr = 0;
	double t_first = 0, t_last = 0;
	uint64_t nblocks = 0;
	struct stat st;

	ret = parse(argc, argv, &o);
	if (ret)
		return ret == 1 ? 0 : 2;
	/* a signal during the setup ends the run once it has started */
	pdma_cmd_catch_stop(on_signal);
	if (o.dir && (stat(o.dir, &st) || !S_ISDIR(st.st_mode))) {
		fprintf(stderr, "peerdma consume: --dir %s: not a directory\n", o.dir);
		return 1;
	}
	pdma_consume_attr_init(&ca);
	ca.addr = o.host;
	ca.port = o.port;
	ca.name = o.name;
	ca.streams = o.streams;
	ca.nstreams = o.nstreams;
	ca.pool_blocks = o.pool_blocks;
	ca.max_streams = o.max_streams;
	ret = pdma_consume_open_faults(&ca, &o.fl, &c, msg, sizeof(msg));
	if (ret) {
		fprintf(stderr, "peerdma consume: %s\n", msg[0] ? msg : strerror(-ret));
		return 1;
	}
	pdma_sub_attr_init(&sa);
	sa.policy = o.policy;
	sa.depth = o.depth;
	ret = pdma_consume_subscribe(c, &sa, &sub);
	if (!ret && o.dir) {
		struct pdma_sigmf_attr wa = { .dir = o.dir, .prefix = o.prefix,
					      .sample_rate = pdma_consume_sample_rate(c), .nosync = o.nosync };
		ret = pdma_sigmf_open(&wa, &w);
	}
	if (!ret)
		ret = pdma_consume_start(c);
	if (ret) {
		fprintf(stderr, "peerdma consume: %s\n", strerror(-ret));
		pdma_sub_close(sub);
		pdma_sigmf_close(w);
		pdma_consume_close(c);
		return 1;
	}
	/* always printed: the tests wait for it before gen starts */
	fprintf(stderr, "peerdma consume: '%s' receiving from %s:%u (%u packets a block)\n", o.name, o.host,
		o.port, pdma_consume_block_packets(c));
	while (!got_signal) {
		struct pdma_block *b;

		ret = pdma_sub_next(sub, &b, 200);
		if (ret == -ETIMEDOUT)
			continue;
		if (ret)
			break; /* -EPIPE: END (or the forwarder gone), drained */
		if (!nblocks++)
			t_first = now_s();
		if (w && (ret = pdma_sigmf_write(w, b)) && !werr)
			werr = ret;
		pdma_block_release(b);
		t_last = now_s();
	}
	pdma_sub_stats(sub, &ss);
	pdma_sub_close(sub);
	pdma_consume_stats(c, &s);
	if (w && (ret = pdma_sigmf_finish(w)) && !werr)
		werr = ret;
	if (werr) {
		fprintf(stderr, "peerdma consume: writing the recordings failed: %s\n", strerror(-werr));
		status = 1;
	}
	for (uint32_t i = 0; w && !o.quiet && i < pdma_sigmf_streams(w); i++) {
		struct pdma_sigmf_info in;

		pdma_sigmf_stream(w, i, &in);
		fprintf(stderr, "0x%-8x %12llu samples %10llu missing %6u captures  %s\n", in.stream_id,
			(unsigned long long)in.samples, (unsigned long long)in.missing, in.captures,
			in.meta_path);
	}
	/* a stop asked for by a signal is neither the end nor a loss */
	if (!s.ended && !got_signal) {
		fprintf(stderr, "peerdma consume: the forwarder went away before the end%s%s\n",
			s.error ? ": " : "", s.error ? strerror(-s.error) : "");
		status = 1;
	}
	fprintf(stderr, "peerdma consume: '%s' %llu blocks, %llu bytes, %llu gap packets; dropped: %llu "
		"here, %llu overruns, %llu blocks (%llu packets) by the forwarder; %s\n", o.name,
		(unsigned long long)s.blocks, (unsigned long long)s.bytes,
		(unsigned long long)s.gap_packets, (unsigned long long)s.local_drops,
		(unsigned long long)ss.overruns, (unsigned long long)s.fwd_dropped_blocks,
		(unsigned long long)s.fwd_dropped_packets, s.ended ? "ended" : got_signal ? "stopped" : "lost");
	if (o.json) {
		json_t *j = summary_json(&o, &s, &ss, w, nblocks > 1 ? t_last - t_first : 0);

		if (json_dump_file(j, o.json, JSON_INDENT(2))) {
			fprintf(stderr, "peerdma consume: cannot write %s\n", o.json);
			status = 1;
		}
		json_decref(j);
	}
	pdma_sigmf_close(w);
	pdma_consume_close(c);
	return status;
}

int pdma_cmd_consume_check(int argc, char **argv)
{
	struct consume_opts o;
	int ret = parse(argc, argv, &o);

	return ret == 1 ? 0 : ret;
}
