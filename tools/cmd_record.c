// SPDX-License-Identifier: MIT
/* peerdma record: peerdma ingest (its options, paths and loop: ingest_ext.h)
 * with a subscription whose blocks a writer thread appends to one SigMF
 * recording per stream (ingest/sinks/sigmf.h). */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd.h"
#include "ingest.h"
#include "ingest_ext.h"
#include "sinks/sigmf.h"

struct record {
	/* options */
	const char *dir, *prefix, *description;
	uint64_t stream;
	enum pdma_sub_policy policy;
	uint32_t depth, block_packets, pool_blocks, late_blocks, flush_idle_ms;
	uint64_t buf_bytes;
	bool nosync, quiet;
	/* run */
	struct pdma_sigmf *w;
	struct pdma_sub *sub;
	pthread_t th;
	bool has_th;
	_Atomic bool quit;
	/* the writer thread's, read after the join */
	uint64_t blocks, refused;
	int werr;
	double t_first, t_done;   /* first block taken, last block written */
};

enum { O_DIR = 256, O_PREFIX, O_STREAM, O_POLICY, O_DEPTH, O_BLOCK_PACKETS, O_POOL_BLOCKS,
       O_LATE_BLOCKS, O_FLUSH_IDLE, O_BUFFER, O_NO_SYNC, O_DESCRIPTION };

static const struct option record_opts[] = {
	{ "dir", required_argument, NULL, O_DIR },
	{ "prefix", required_argument, NULL, O_PREFIX },
	{ "stream", required_argument, NULL, O_STREAM },
	{ "policy", required_argument, NULL, O_POLICY },
	{ "depth", required_argument, NULL, O_DEPTH },
	{ "block-packets", required_argument, NULL, O_BLOCK_PACKETS },
	{ "pool-blocks", required_argument, NULL, O_POOL_BLOCKS },
	{ "late-blocks", required_argument, NULL, O_LATE_BLOCKS },
	{ "flush-idle", required_argument, NULL, O_FLUSH_IDLE },
	{ "buffer", required_argument, NULL, O_BUFFER },
	{ "no-sync", no_argument, NULL, O_NO_SYNC },
	{ "description", required_argument, NULL, O_DESCRIPTION },
	{ 0 }
};

static const char record_usage[] =
	"usage: peerdma record [OPTIONS]\n"
	"Receive VITA-49 streams as peerdma ingest does and write each stream to a SigMF\n"
	"recording: DIR/PREFIX-0xID.sigmf-data (complex int16, ci16_le) and .sigmf-meta.\n"
	"Only received samples are written; each run after a gap (packets lost, blocks\n"
	"dropped) starts a new capture whose core:global_index is its absolute sample\n"
	"index and core:datetime its UTC time. core:sample_rate and core:frequency come\n"
	"from the streams' context packets when they carry them (else --sample-rate).\n\n"
	"      --dir DIR         where the recordings go (default .; must exist)\n"
	"      --prefix NAME     file name prefix (default rec)\n"
	"      --stream ID       record only this stream ID (default: every stream)\n"
	"      --policy P        backpressure (default: a slow disk stalls the deframer and\n"
	"                        the receive path drops, counted) or drop-oldest (blocks\n"
	"                        dropped from the writer's queue, counted: overruns)\n"
	"      --depth N         blocks queued for the writer (default 32)\n"
	"      --block-packets N packets per block (default 64)\n"
	"      --pool-blocks N   blocks per stream the writer may hold or have queued\n"
	"                        (default 64; the stream's window is --out-packets)\n"
	"      --late-blocks N   blocks a packet may arrive late (default 1)\n"
	"      --flush-idle MS   write out open blocks after MS idle (default 100)\n"
	"      --buffer B        write buffer per stream (default 4194304)\n"
	"      --no-sync         no fdatasync before the metadata is written\n"
	"      --description T   core:description\n"
	"The JSON summary (--json) has a \"record\" object: per stream its files, samples,\n"
	"missing samples and captures; the writer's blocks, overruns, bytes and MB/s.\n\n"
	"On the GPU paths (host-staged, zero-copy) the blocks are in GPU memory: each run\n"
	"of received packets is copied to the write buffer (pdma_block_read) once its\n"
	"copy-out on the GPU is done.\n\n"
	"Receive options (as peerdma ingest):\n";

static int record_opt(void *arg, const struct pdma_opt *o, int val)
{
	static const char *const policies[] = { "drop-oldest", "backpressure", NULL };
	struct record *r = arg;
	int k, bad;

	switch (val) {
	case O_DIR: return pdma_opt_str(o, &r->dir);
	case O_PREFIX: return pdma_opt_str(o, &r->prefix);
	case O_STREAM: return pdma_opt_u64(o, 0, UINT32_MAX, &r->stream);
	case O_POLICY:
		bad = pdma_opt_choice(o, policies, &k);
		if (!bad)
			r->policy = k ? PDMA_SUB_BACKPRESSURE : PDMA_SUB_DROP_OLDEST;
		return bad;
	case O_DEPTH: return pdma_opt_u32(o, 1, 65536, &r->depth);
	case O_BLOCK_PACKETS: return pdma_opt_u32(o, 1, 65536, &r->block_packets);
	case O_POOL_BLOCKS: return pdma_opt_u32(o, 2, 4096, &r->pool_blocks);
	case O_LATE_BLOCKS: return pdma_opt_u32(o, 0, 64, &r->late_blocks);
	case O_FLUSH_IDLE: return pdma_opt_u32(o, 0, 3600000, &r->flush_idle_ms);
	case O_BUFFER: return pdma_opt_u64(o, 4096, 1ull << 30, &r->buf_bytes);
	case O_NO_SYNC: r->nosync = true; return 0;
	case O_DESCRIPTION: return pdma_opt_str(o, &r->description);
	default: return -EINVAL;
	}
}

static int record_check(void *arg, const struct pdma_opt *o, const struct pdma_ingest_config *c)
{
	struct record *r = arg;

	if (c->dfr.out_pkts % r->block_packets ||
	    (uint64_t)(r->late_blocks + 2) * r->block_packets > c->dfr.out_pkts)
		return pdma_opt_fail(o, "--out-packets (%u) must be a multiple of --block-packets "
				     "and hold --late-blocks + 2 blocks", c->dfr.out_pkts);
	return 0;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The writer: every block to the recordings, in publication order. */
static void *writer(void *arg)
{
	struct record *r = arg;

	for (;;) {
		struct pdma_block *b;
		int ret = pdma_sub_next(r->sub, &b, 200);

		if (ret == -ETIMEDOUT) {
			if (r->quit)
				break; /* the session never started */
			continue;
		}
		if (ret)
			break; /* -EPIPE: stopped and drained */
		if (!r->blocks++)
			r->t_first = now_s();
		ret = pdma_sigmf_write(r->w, b);
		if (ret) {
			/* keep draining: the receive path must not stall on us */
			r->refused++;
			if (!r->werr)
				r->werr = ret;
		}
		pdma_block_release(b);
		r->t_done = now_s();
	}
	return NULL;
}

static int record_attach(void *arg, struct pdma_ingest *ing, const struct pdma_ingest_config *c,
			 bool quiet)
{
	struct record *r = arg;
	struct pdma_sigmf_attr wa = {
		.dir = r->dir, .prefix = r->prefix, .sample_rate = c->dfr.sample_rate,
		.buf_bytes = (size_t)r->buf_bytes, .description = r->description, .nosync = r->nosync,
	};
	struct pdma_sub_attr sa;
	struct stat st;
	int ret;

	r->quiet = quiet;
	if (stat(r->dir, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "peerdma record: --dir %s: not a directory\n", r->dir);
		return 1;
	}
	if (pdma_ingest_ext_blocks("peerdma record", ing, c, r->block_packets, r->late_blocks,
				   r->pool_blocks, r->flush_idle_ms))
		return 1;
	pdma_sub_attr_init(&sa);
	sa.stream_id = r->stream;
	sa.policy = r->policy;
	sa.depth = r->depth;
	ret = pdma_ingest_subscribe(ing, &sa, &r->sub);
	if (!ret)
		ret = pdma_sigmf_open(&wa, &r->w);
	if (!ret)
		ret = -pthread_create(&r->th, NULL, writer, r);
	if (ret) {
		fprintf(stderr, "peerdma record: %s\n", strerror(-ret));
		pdma_sigmf_close(r->w);
		pdma_sub_close(r->sub);
		return 1;
	}
	r->has_th = true;
	return 0;
}

static json_t *recordings_json(struct record *r, const struct pdma_sub_stats *ss, uint64_t bytes,
			       double secs)
{
	json_t *o = json_object(), *a = json_array();

	for (uint32_t i = 0; i < pdma_sigmf_streams(r->w); i++) {
		struct pdma_sigmf_info in;
		json_t *s = json_object();

		pdma_sigmf_stream(r->w, i, &in);
		json_object_set_new(s, "stream_id", json_integer(in.stream_id));
		json_object_set_new(s, "data", json_string(in.data_path));
		json_object_set_new(s, "meta", json_string(in.meta_path));
		json_object_set_new(s, "samples", json_integer((json_int_t)in.samples));
		json_object_set_new(s, "missing", json_integer((json_int_t)in.missing));
		json_object_set_new(s, "captures", json_integer(in.captures));
		json_object_set_new(s, "sample_rate", json_real(in.sample_rate));
		json_object_set_new(s, "rate_from_context", json_boolean(in.rate_from_context));
		if (in.error)
			json_object_set_new(s, "error", json_string(strerror(-in.error)));
		json_array_append_new(a, s);
	}
	json_object_set_new(o, "streams", a);
	json_object_set_new(o, "blocks", json_integer((json_int_t)r->blocks));
	json_object_set_new(o, "overruns", json_integer((json_int_t)ss->overruns));
	json_object_set_new(o, "overrun_packets", json_integer((json_int_t)ss->overrun_packets));
	json_object_set_new(o, "waits", json_integer((json_int_t)ss->waits));
	json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
	/* first block taken to the data on disk (fdatasync included) */
	json_object_set_new(o, "seconds", json_real(secs));
	json_object_set_new(o, "MBps", json_real(secs > 0 ? bytes / secs / 1e6 : 0));
	return o;
}

static int record_detach(void *arg, struct pdma_ingest *ing, json_t *summary)
{
	struct record *r = arg;
	struct pdma_sub_stats ss;
	uint64_t bytes = 0;
	int status = 0, ret;

	(void)ing;
	r->quit = true;
	if (r->has_th)
		pthread_join(r->th, NULL);
	pdma_sub_stats(r->sub, &ss);
	pdma_sub_close(r->sub);
	double t0 = now_s();
	ret = pdma_sigmf_finish(r->w);
	/* the writer's time: its blocks, then the flush and fdatasync (not the
	 * idle wait before the session stopped) */
	double secs = r->blocks ? r->t_done - r->t_first + now_s() - t0 : 0;

	if (ret || r->werr) {
		int e = r->werr ? r->werr : ret;

		fprintf(stderr, "peerdma record: writing the recordings failed: %s%s\n", strerror(-e),
			e == -EOPNOTSUPP ? " (blocks in device memory)" : "");
		status = 1;
	}
	for (uint32_t i = 0; i < pdma_sigmf_streams(r->w); i++) {
		struct pdma_sigmf_info in;

		pdma_sigmf_stream(r->w, i, &in);
		bytes += in.samples * 4;
		if (!r->quiet)
			fprintf(stderr, "0x%-8x %12llu samples %10llu missing %6u captures  %s\n",
				in.stream_id, (unsigned long long)in.samples,
				(unsigned long long)in.missing, in.captures, in.meta_path);
	}
	if (summary)
		json_object_set_new(summary, "record", recordings_json(r, &ss, bytes, secs));
	pdma_sigmf_close(r->w);
	return status;
}

static void record_init(struct record *r, struct pdma_ingest_ext *x)
{
	memset(r, 0, sizeof(*r));
	r->dir = ".";
	r->prefix = "rec";
	r->stream = PDMA_SUB_ALL_STREAMS;
	/* a recorder keeps what arrived: when the disk falls behind, the loss
	 * happens at the socket, counted there, and shows as a gap */
	r->policy = PDMA_SUB_BACKPRESSURE;
	r->depth = 32;
	r->block_packets = 64;
	r->pool_blocks = 64;
	r->late_blocks = 1;
	r->flush_idle_ms = 100;
	r->buf_bytes = 4u << 20;
	*x = (struct pdma_ingest_ext){
		.cmd = "peerdma record", .usage = record_usage, .opts = record_opts,
		.opt = record_opt, .check = record_check, .attach = record_attach,
		.detach = record_detach, .arg = r,
	};
}

int pdma_cmd_record(int argc, char **argv)
{
	struct pdma_ingest_ext x;
	struct record r;

	record_init(&r, &x);
	return pdma_ingest_main(argc, argv, &x);
}

int pdma_cmd_record_check(int argc, char **argv)
{
	struct pdma_ingest_ext x;
	struct record r;

	record_init(&r, &x);
	return pdma_ingest_main_check(argc, argv, &x);
}
