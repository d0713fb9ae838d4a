// SPDX-License-Identifier: MIT
/* peerdma ingest: receive VITA-49 streams into registered rings, deframe,
 * account per stream, print live progress and a JSON summary. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"
#include "ingest.h"
#include "ingest_zmq.h"
#include "ingest_ext.h"
#include "opt.h"
#include "peerdma/mr.h"
#include "mem/sim.h"

/* The one global: a signal handler can reach nothing else. */
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	got_signal = sig;
}

/* Why a session ended: the JSON's "ended_by" and the report's last line. */
enum ended_by { BY_SIGNAL, BY_DURATION, BY_COUNT, BY_IDLE, BY_RECEIVE, BY_SUBSCRIBER };
static const struct {
	const char *name, *says;
} ended_by_names[] = {
	[BY_SIGNAL] = { "signal", "a signal" },
	[BY_DURATION] = { "duration", "--duration" },
	[BY_COUNT] = { "count", "--count" },
	[BY_IDLE] = { "idle", "--idle (no datagram for that long)" },
	[BY_RECEIVE] = { "receive", "the receive path (an error, above)" }, /* its threads ended */
	[BY_SUBSCRIBER] = { "subscriber", "the --zmq subscriber path failing" },
};

static void usage(FILE *f, const struct pdma_ingest_ext *x)
{
	if (x)
		fputs(x->usage, f);
	else
		fprintf(f,
		"usage: peerdma ingest [OPTIONS]\n"
		"Receive VITA-49 streams over UDP into registered ring buffers, deframe them into\n"
		"per-stream sample buffers and account received, lost, duplicated, reordered and\n"
		"malformed packets per stream (exactly, from the sample-count timestamps); a data\n"
		"packet whose class ID differs from its stream's first is refused and counted\n"
		"(class_mismatch, the table's \"class\" column).\n\n");
	fprintf(f,
		"  -p, --port N          UDP port (default 4991)\n"
		"  -b, --bind ADDR       IPv4 address to bind (default 127.0.0.1)\n"
		"  -t, --threads N       receive threads / sockets (SO_REUSEPORT, default 1)\n"
		"      --path P          cpu (default: CPU deframer), host-staged (pinned ring copied\n"
		"                        to the GPU in --chunk bytes, deframed there), zero-copy (the\n"
		"                        GPU deframer reads the mapped ring), direct (ring in simulated\n"
		"                        GPU memory written by the simulated DMA device), nic (a NIC\n"
		"                        writes Ethernet frames into GPU memory pinned by peerdma.ko;\n"
		"                        frames to --port are deframed, others skipped and counted)\n"
		"      --chunk B         host-staged copy size (default 4194304)\n"
		"      --ring-slots N    slots per ring (default 8192)\n"
		"      --slot-size B     bytes per slot (default 9216)\n"
		"      --slot-layout L   auto (default: tiny for 80-byte slots, packed for slots of\n"
		"                        84-128 bytes, but neither with --rx io_uring; 81-83 bytes\n"
		"                        fit no layout), full\n"
		"                        (the datagram at byte 36, slots rounded to 64 bytes),\n"
		"                        packed (at byte 20, slots rounded to 16: small datagrams\n"
		"                        move fewer bytes) or tiny (at byte 4 of an 80-byte slot:\n"
		"                        datagrams of at most 76 bytes)\n"
		"      --batch N         recvmmsg batch (default 64)\n"
		"      --rx IO           recvmmsg (default), io_uring (multishot recvmsg into the\n"
		"                        ring's slots; needs Linux 5.19), gro (UDP GRO: coalesced\n"
		"                        buffers split into one slot per datagram; Linux 5.0) or\n"
		"                        xdp (AF_XDP: an XDP program hands the datagrams to an XDP\n"
		"                        socket per thread, on receive queues 0..threads-1; root);\n"
		"                        only recvmmsg with --path direct\n"
		"      --xdp-dev DEV     --rx xdp: the network device (default: the one holding\n"
		"                        --bind's address)\n"
		"      --no-register     do not register the rings with a peerdma domain\n"
		"nic path:\n"
		"      --nic DEV         the NIC (default /dev/peerdma_nic0, drivers/e1000)\n"
		"      --nic-bufs N      receive buffers in GPU memory (default 1024)\n"
		"      --nic-buf-size B  2048 (default) or 4096 bytes a buffer\n"
		"      --kernel-device F peerdma.ko's device (default /dev/peerdma)\n"
		"      --cuda-device N   the GPU (default 0): the nic path's buffers, and the\n"
		"                        deframer's on every GPU path (host-staged, zero-copy)\n"
		"      --deframer D      auto (default: GPU where its module loads), gpu or cpu\n"
		"      --revoke-after N  fault injection: free the buffers' GPU memory after N\n"
		"                        frames, as a buggy application would; ingest must stop\n"
		"                        cleanly (exit status 1) with the NIC quiesced\n"
		"      --sample-rate HZ  stream sample rate (default 10000000)\n"
		"      --max-streams N   stream table size (default 64)\n"
		"      --out-packets N   per-stream output window, packets (default 4096)\n"
		"GNU Radio:\n"
		"      --zmq ENDPOINT    publish every stream's samples on a ZeroMQ PUB socket bound to\n"
		"                        ENDPOINT (e.g. tcp://127.0.0.1:5555) for GNU Radio's ZMQ SUB\n"
		"                        Source: key \"stream-\" + the stream ID in 8 hex digits; lost\n"
		"                        packets are zeros (README, \"GNU Radio\")\n"
		"      --zmq-format F    ci16 (default: int16 I, Q: itemsize short, vlen 2) or cf32\n"
		"                        (gr_complex, 32768 = 1.0)\n"
		"      --zmq-tags        gr-zeromq tag header (SUB Source: Pass Tags): rx_time, rx_rate,\n"
		"                        rx_freq at the start, pdma_gap at lost packets, pdma_drop\n"
		"      --zmq-wait N      start receiving once N subscribers have subscribed\n"
		"      --zmq-policy P    drop-oldest (default: a slow flowgraph loses whole blocks,\n"
		"                        published as zeros) or backpressure (the receive path drops)\n"
		"  -d, --duration S      stop after S seconds\n"
		"  -c, --count N         stop after N datagrams (at least: every stop still takes in\n"
		"                        what is queued, up to 0.5 s more under traffic that goes on)\n"
		"  -i, --idle MS         stop MS milliseconds after the last datagram arrived (received,\n"
		"                        or dropped by a full receive ring; default: never)\n"
		"  -j, --json FILE       write the JSON summary to FILE ('-' = stdout, the default)\n"
		"  -q, --quiet           nothing on stderr but errors: no progress line, no\n"
		"                        report (the JSON has everything)\n"
		"  -h, --help\n"
		"Stops on SIGINT/SIGTERM too. Exit status 0 when the run completed (loss is reported,\n"
		"not an error), 1 on failure, 2 on usage errors.\n");
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

struct ingest_args {
	struct pdma_ingest_config c;
	const char *json_path;
	const char *kernel_device;
	bool quiet, reg;
	double duration, idle_s;
	uint64_t count;
	struct pdma_ingest_zmq_opts zmq;
};

/* Parse and check: 0 to run, 1 after --help, 2 after a one-line error. */
static int ingest_parse(int argc, char **argv, struct ingest_args *a, const struct pdma_ingest_ext *x)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "bind", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' },
		{ "path", required_argument, NULL, 'P' },
		{ "ring-slots", required_argument, NULL, 'r' },
		{ "slot-size", required_argument, NULL, 'z' },
		{ "slot-layout", required_argument, NULL, 'L' },
		{ "batch", required_argument, NULL, 'B' },
		{ "rx", required_argument, NULL, 'X' },
		{ "xdp-dev", required_argument, NULL, 'x' },
		{ "chunk", required_argument, NULL, 'K' },
		{ "no-register", no_argument, NULL, 'N' },
		{ "sample-rate", required_argument, NULL, 'R' },
		{ "max-streams", required_argument, NULL, 'M' },
		{ "out-packets", required_argument, NULL, 'O' },
		{ "duration", required_argument, NULL, 'd' },
		{ "count", required_argument, NULL, 'c' },
		{ "idle", required_argument, NULL, 'i' },
		{ "json", required_argument, NULL, 'j' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "nic", required_argument, NULL, 'n' },
		{ "nic-bufs", required_argument, NULL, 'u' },
		{ "nic-buf-size", required_argument, NULL, 'U' },
		{ "kernel-device", required_argument, NULL, 'k' },
		{ "cuda-device", required_argument, NULL, 'g' },
		{ "deframer", required_argument, NULL, 'D' },
		{ "revoke-after", required_argument, NULL, 'V' },
		{ "zmq", required_argument, NULL, 'Z' },
		{ "zmq-format", required_argument, NULL, 'F' },
		{ "zmq-tags", no_argument, NULL, 'T' },
		{ "zmq-wait", required_argument, NULL, 'W' },
		{ "zmq-policy", required_argument, NULL, 'Y' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const paths[] = { "cpu", "direct", "host-staged", "zero-copy", "nic", NULL };
	static const enum pdma_rx_path path_v[] = { PDMA_RX_CPU, PDMA_RX_DIRECT, PDMA_RX_HOST_STAGED,
						    PDMA_RX_ZERO_COPY, PDMA_RX_NIC };
	static const char *const dfrs[] = { "auto", "cpu", "gpu", NULL };
	static const char *const bufsizes[] = { "2048", "4096", NULL };
	static const char *const layouts[] = { "auto", "full", "packed", "tiny", NULL };
	static const char *const rxs[] = { "recvmmsg", "io_uring", "gro", "xdp", NULL };
	static const enum pdma_rx_io rx_v[] = { PDMA_RX_IO_RECVMMSG, PDMA_RX_IO_URING, PDMA_RX_IO_GRO,
						PDMA_RX_IO_XDP };
	static const char *const zfmts[] = { "ci16", "cf32", NULL };
	static const char *const zpols[] = { "drop-oldest", "backpressure", NULL };
	struct pdma_ingest_config *c = &a->c;
	struct option all[64];
	struct pdma_opt o;
	uint32_t u, idle_ms;
	uint64_t chunk;
	int opt, k;

	memset(a, 0, sizeof(*a));
	pdma_ingest_config_default(c);
	a->json_path = "-";
	a->reg = true;
	a->kernel_device = "/dev/peerdma";
	if (x) { /* ingest's options, then x's */
		size_t n = 0;

		for (size_t i = 0; opts[i].name; i++)
			all[n++] = opts[i];
		for (size_t i = 0; x->opts[i].name && n + 1 < sizeof(all) / sizeof(all[0]); i++)
			all[n++] = x->opts[i];
		all[n] = (struct option){ 0 };
	}
	pdma_opt_init(&o, x ? x->cmd : "peerdma ingest", x ? all : opts, "p:b:t:d:c:i:j:qh");
	while ((opt = pdma_opt_next(&o, argc, argv)) != -1) {
		int bad = 0; /* flags leave it 0 */

		switch (opt) {
		case 'p':
			bad = pdma_opt_u32(&o, 0, 65535, &u);
			if (!bad)
				c->port = (uint16_t)u;
			break;
		case 'b': bad = pdma_opt_ipv4(&o, &c->bind_addr); break;
		case 't': bad = pdma_opt_u32(&o, 1, 64, &c->threads); break;
		case 'P':
			bad = pdma_opt_choice(&o, paths, &k);
			if (!bad)
				c->path = path_v[k];
			break;
		case 'r': bad = pdma_opt_u32(&o, 1, 1u << 24, &c->ring_slots); break;
		case 'z': bad = pdma_opt_u32(&o, 80, 1u << 20, &c->slot_size); break;
		case 'L':
			bad = pdma_opt_choice(&o, layouts, &k);
			if (!bad)
				c->slot_layout = (enum pdma_slot_choice)k;
			break;
		case 'B': bad = pdma_opt_u32(&o, 1, 256, &c->batch); break;
		case 'X':
			bad = pdma_opt_choice(&o, rxs, &k);
			if (!bad)
				c->rx_io = rx_v[k];
			break;
		case 'x': bad = pdma_opt_str(&o, &c->xdp_dev); break;
		case 'K':
			bad = pdma_opt_u64(&o, 4096, 1u << 30, &chunk);
			if (!bad)
				c->gpu_chunk = (size_t)chunk;
			break;
		case 'N': a->reg = false; break;
		case 'R': bad = pdma_opt_u64(&o, 1, UINT64_MAX, &c->dfr.sample_rate); break;
		case 'M': bad = pdma_opt_u32(&o, 1, 65534, &c->dfr.max_streams); break;
		case 'O': bad = pdma_opt_u32(&o, 1, 1u << 20, &c->dfr.out_pkts); break;
		/* A year at most: the loop adds it to a clock in seconds. */
		case 'd': bad = pdma_opt_double(&o, 0, 366 * 86400.0, 1, &a->duration); break;
		case 'c': bad = pdma_opt_u64(&o, 1, UINT64_MAX, &a->count); break;
		case 'i':
			bad = pdma_opt_u32(&o, 1, 3600000, &idle_ms);
			if (!bad)
				a->idle_s = (double)idle_ms / 1000;
			break;
		case 'j': bad = pdma_opt_str(&o, &a->json_path); break;
		case 'q': a->quiet = true; break;
		case 'n': bad = pdma_opt_str(&o, &c->nic.dev); break;
		case 'u': bad = pdma_opt_u32(&o, 8, 65536, &c->nic.nbufs); break;
		case 'U':
			bad = pdma_opt_choice(&o, bufsizes, &k);
			if (!bad)
				c->nic.buf_size = k ? 4096 : 2048;
			break;
		case 'k': bad = pdma_opt_str(&o, &a->kernel_device); break;
		case 'g':
			bad = pdma_opt_u32(&o, 0, 1023, &u);
			if (!bad)
				c->nic.cuda_device = c->cuda_device = (int)u;
			break;
		case 'D':
			bad = pdma_opt_choice(&o, dfrs, &k);
			if (!bad)
				c->nic_deframer = (enum pdma_nic_deframer)k;
			break;
		case 'V': bad = pdma_opt_u64(&o, 1, UINT64_MAX, &c->nic.revoke_after); break;
		case 'Z': bad = pdma_opt_str(&o, &a->zmq.endpoint); break;
		case 'F': bad = pdma_opt_choice(&o, zfmts, &a->zmq.format); break;
		case 'T': a->zmq.tags = true; break;
		case 'W': bad = pdma_opt_u32(&o, 1, 1024, &a->zmq.wait); break;
		case 'Y': bad = pdma_opt_choice(&o, zpols, &a->zmq.policy); break;
		case 'h': usage(stdout, x); return 1;
		default:
			if (x && opt >= 256) {
				bad = x->opt(x->arg, &o, opt);
				break;
			}
			return 2; /* getopt_long said why, in one line */
		}
		if (bad)
			return 2;
	}
	if (pdma_opt_end(&o, argc, argv))
		return 2;
	if (c->rx_io != PDMA_RX_IO_RECVMMSG && (c->path == PDMA_RX_DIRECT || c->path == PDMA_RX_NIC))
		return pdma_opt_fail(&o, c->rx_io == PDMA_RX_IO_URING
				     ? "--rx io_uring needs a host ring: not with --path direct or nic"
				     : c->rx_io == PDMA_RX_IO_GRO
				     ? "--rx gro needs a host ring: not with --path direct or nic"
				     : "--rx xdp needs a host ring: not with --path direct or nic");
	/* The session's own slot rule, asked here so that a slot it would
	 * refuse is a usage error (exit 2, the options named) before anything
	 * opens. */
	char why[200];
	if (pdma_ingest_check_slots(c, why, sizeof(why)))
		return pdma_opt_fail(&o, "--slot-size %u --slot-layout %s%s: %s", c->slot_size,
				     layouts[c->slot_layout], c->rx_io == PDMA_RX_IO_URING ? " --rx io_uring" : "", why);
	if (c->xdp_dev && c->rx_io != PDMA_RX_IO_XDP)
		return pdma_opt_fail(&o, "--xdp-dev is for --rx xdp");
	if (c->path == PDMA_RX_NIC && c->threads != 1)
		return pdma_opt_fail(&o, "--path nic: one NIC, one receive thread (--threads 1)");
	/* --zmq's blocks (64 packets, published one behind: three in the
	 * window); record and forward check their own block options. */
	if (a->zmq.endpoint && !x && (c->dfr.out_pkts % 64 || c->dfr.out_pkts < 192))
		return pdma_opt_fail(&o, "--zmq: --out-packets (%u) must be a multiple of 64, at least 192",
				     c->dfr.out_pkts);
	return x && x->check ? x->check(x->arg, &o, c) : 0;
}

int pdma_ingest_ext_blocks(const char *cmd, struct pdma_ingest *ing,
			   const struct pdma_ingest_config *c, uint32_t block_packets,
			   uint32_t late_blocks, uint32_t pool_blocks, uint32_t flush_idle_ms)
{
	int ret = pdma_ingest_enable_blocks(ing, block_packets, late_blocks, pool_blocks,
					    flush_idle_ms);
	/* every stream's pool is made at once, pool_blocks blocks of
	 * block_packets full payloads each (ingest/blocks/blocks.c) */
	double pool;

	if (!ret)
		return 0;
	pool = (double)c->dfr.max_streams * pool_blocks * block_packets * c->dfr.max_payload;
	if (ret == -ENOMEM)
		fprintf(stderr, "%s: sample blocks on this path: %s (the block pools: %u streams x %u "
			"blocks x %u packets x %u bytes = %.1f MiB; lower --max-streams, --pool-blocks, "
			"--block-packets or --slot-size)\n", cmd, strerror(-ret), c->dfr.max_streams, pool_blocks,
			block_packets, c->dfr.max_payload, pool / (1 << 20));
	else
		fprintf(stderr, "%s: sample blocks on this path: %s%s\n", cmd, strerror(-ret),
			ret == -EOPNOTSUPP && c->path == PDMA_RX_NIC ?
			" (the GPU deframer reads the frames in place: --deframer cpu)" : "");
	return 1;
}

int pdma_ingest_main_check(int argc, char **argv, const struct pdma_ingest_ext *x)
{
	struct ingest_args a;

	return ingest_parse(argc, argv, &a, x) == 2 ? 2 : 0;
}

int pdma_cmd_ingest_check(int argc, char **argv)
{
	return pdma_ingest_main_check(argc, argv, NULL);
}

int pdma_cmd_ingest(int argc, char **argv)
{
	return pdma_ingest_main(argc, argv, NULL);
}

int pdma_ingest_main(int argc, char **argv, const struct pdma_ingest_ext *x)
{
	const char *me = x ? x->cmd : "peerdma ingest";
	struct ingest_args a;
	int ret = ingest_parse(argc, argv, &a, x), status = 0;

	if (ret)
		return ret == 1 ? 0 : 2;

	/* Caught from here on, not once the session is open (ring
	 * registration, the CUDA driver, the NIC take up to seconds): a
	 * signal during setup ends the session as soon as it has started. */
	pdma_cmd_catch_stop(on_signal);

	struct pdma_ingest_config c = a.c;
	const char *json_path = a.json_path;
	bool quiet = a.quiet, reg = a.reg;
	double duration = a.duration, idle_s = a.idle_s;
	uint64_t count = a.count;

	/* Slots (receive buffers on the nic path) hold whole datagrams; the
	 * output keeps whole payloads: as long as the longest a slot holds, so
	 * that the default 9216-byte slots take jumbo datagrams (a 9000-byte
	 * one carries up to 8968 bytes of payload), up to UDP's 65507 bytes. */
	if (c.path == PDMA_RX_NIC) {
		uint32_t bs = c.nic.buf_size ? c.nic.buf_size : 2048;
		if (c.dfr.max_payload > bs)
			c.dfr.max_payload = bs & ~3u;
	} else {
		uint32_t room = c.slot_size > PDMA_SLOT_HDR ? c.slot_size - PDMA_SLOT_HDR : 0;
		c.dfr.max_payload = (room < 65507 ? room : 65507) & ~3u;
	}

	struct pdma_sim *sim = NULL;
	struct pdma_domain *dom = NULL;
	struct pdma_eq *eq = NULL;
	if (c.path == PDMA_RX_DIRECT || c.path == PDMA_RX_NIC || reg) {
		struct pdma_domain_attr da;
		pdma_domain_attr_init(&da);
		if (c.path == PDMA_RX_NIC)
			da.kernel_device = a.kernel_device; /* the NIC needs a kernel pin */
		if (c.path == PDMA_RX_DIRECT) {
			struct pdma_sim_attr sa = { .mem_size = (size_t)c.threads * c.ring_slots *
								((c.slot_size + 63u) & ~63u) + (1u << 20) };
			ret = pdma_sim_open(&sa, &sim);
			if (ret) {
				fprintf(stderr, "%s: simulated GPU: %s\n", me, strerror(-ret));
				return 1;
			}
			da.sim = sim;
		}
		ret = pdma_domain_open(&da, &dom);
		if (ret) {
			if (da.kernel_device)
				fprintf(stderr, "%s: --path nic: %s: %s%s\n", me, da.kernel_device,
					strerror(-ret), ret == -ENODEV || ret == -ENOENT ?
					" (is peerdma.ko loaded?)" : "");
			else
				fprintf(stderr, "%s: domain: %s\n", me, strerror(-ret));
			pdma_sim_close(sim);
			return 1;
		}
		if (c.path == PDMA_RX_NIC) {
			/* revocations of the receive region reach us here */
			ret = pdma_eq_open(dom, 16, &eq);
			if (!ret)
				ret = pdma_domain_bind_eq(dom, eq, PDMA_MR_REVOKE_EVENTS);
			if (ret) {
				fprintf(stderr, "%s: event queue: %s\n", me, strerror(-ret));
				status = 1;
				goto out_dom;
			}
			c.eq = eq;
		}
		c.domain = dom;
		c.sim = sim;
	}

	struct pdma_ingest *ing;
	char msg[256] = "";
	ret = pdma_ingest_open_config(&c, &ing, msg, sizeof(msg));
	if (ret) {
		if (c.path == PDMA_RX_NIC)
			fprintf(stderr, "%s: --path nic: %s\n", me, msg[0] ? msg : strerror(-ret));
		else if (ret == -ENODEV)
			fprintf(stderr, "%s: --path %s needs a CUDA device; none found\n", me,
				c.path == PDMA_RX_HOST_STAGED ? "host-staged" : "zero-copy");
		else if (c.rx_io == PDMA_RX_IO_URING && ret == -EOPNOTSUPP)
			fprintf(stderr, "%s: io_uring receive unavailable here: needs Linux 5.19 "
					"and io_uring allowed; --rx recvmmsg works everywhere\n", me);
		else if ((c.rx_io == PDMA_RX_IO_XDP || ret == -EINVAL) && msg[0])
			fprintf(stderr, "%s: %s\n", me, msg);
		else if (c.rx_io == PDMA_RX_IO_GRO && ret == -EOPNOTSUPP)
			fprintf(stderr, "%s: UDP GRO receive unavailable here: needs Linux 5.0; "
					"--rx recvmmsg works everywhere\n", me);
		else if (ret == -ENOENT)
			fprintf(stderr, "%s: the GPU deframer module (libpeerdma_vrt_cuda.so) "
					"was not built or not found (set PEERDMA_VRT_CUDA)\n", me);
		else
			fprintf(stderr, "%s: cannot set up port %u: %s%s\n", me, c.port,
				strerror(-ret),
				ret == -ENOMEM ? " (ring registration: check RLIMIT_MEMLOCK, --ring-slots)" : "");
		status = 1;
		goto out_dom;
	}
	if (!quiet && isatty(STDERR_FILENO))
		pdma_ingest_set_progress(ing, stderr);
	struct pdma_ingest_zmq *zmq = NULL;
	/* record and forward first: they enable the session's blocks, with
	 * their own block options, and --zmq publishes those same blocks. */
	if (x && x->attach(x->arg, ing, &c, quiet)) {
		status = 1;
		goto out_ing;
	}
	if (a.zmq.endpoint) {
		/* Plain ingest: the public API's block defaults
		 * (pdma_ingest_attr_init): 64 packets a block, published one
		 * block behind the newest packet or 100 ms after the last
		 * datagram, 16 pool buffers a stream. */
		ret = x ? 0 : pdma_ingest_enable_blocks(ing, 64, 1, 16, 100);
		if (ret) {
			fprintf(stderr, "peerdma ingest: --zmq: blocks: %s%s\n", strerror(-ret),
				ret == -EINVAL ? " (--out-packets: a multiple of 64, at least 192)"
				: ret == -EOPNOTSUPP ? " on this path (--path nic: with --deframer cpu)" : "");
			status = 1;
			goto out_x;
		}
		if (pdma_ingest_zmq_begin(&zmq, ing, &a.zmq, c.dfr.sample_rate, quiet, &got_signal)) {
			status = 1;
			goto out_x;
		}
	}
	ret = pdma_ingest_start(ing);
	if (ret) {
		fprintf(stderr, "%s: start: %s\n", me, strerror(-ret));
		status = 1;
		goto out_x;
	}
	if (!quiet && c.path == PDMA_RX_NIC) {
		json_t *nj = pdma_ingest_json(ing, 0);
		const json_t *nic = json_object_get(nj, "nic");

		fprintf(stderr, "%s: receiving on %s into %lld x %lld-byte buffers of GPU "
				"memory (pinned by %s, %s), UDP port %u, %s deframer\n", me,
			c.nic.dev ? c.nic.dev : "/dev/peerdma_nic0",
			json_integer_value(json_object_get(nic, "nbufs")),
			json_integer_value(json_object_get(nic, "buf_size")), a.kernel_device,
			json_string_value(json_object_get(nic, "pin")), c.port,
			json_string_value(json_object_get(nic, "deframer")));
		json_decref(nj);
	} else if (!quiet)
		fprintf(stderr, "%s: listening on %s:%u, %u thread(s), path %s\n", me,
			c.bind_addr, pdma_ingest_port(ing), c.threads,
			c.path == PDMA_RX_DIRECT ? "direct (sim)" : c.path == PDMA_RX_HOST_STAGED ? "host-staged (GPU)"
			: c.path == PDMA_RX_ZERO_COPY ? "zero-copy (GPU)" : "cpu");
	double t0 = now_s(), t_last = t0;
	uint64_t last_n = 0;
	enum ended_by by = BY_SIGNAL; /* unless a condition below ends it */
	while (!got_signal) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		struct pdma_ingest_totals t;
		pdma_ingest_totals(ing, &t);
		double now = now_s();
		/* Idle: nothing arrived. A datagram a full ring dropped arrived
		 * too: a deframer stalled by a backpressure subscriber (a slow
		 * disk, a paused flowgraph) must not look like quiet traffic. */
		uint64_t arrived = t.datagrams + t.ring_overruns;
		if (arrived != last_n) {
			last_n = arrived;
			t_last = now;
		}
		if (duration > 0 && now - t0 >= duration)
			by = BY_DURATION;
		else if (count && t.datagrams >= count)
			by = BY_COUNT;
		else if (idle_s > 0 && last_n && now - t_last >= idle_s)
			by = BY_IDLE;
		else if (pdma_ingest_ended(ing))
			by = BY_RECEIVE;
		else if (zmq && pdma_ingest_zmq_failed(zmq))
			by = BY_SUBSCRIBER;
		else
			continue;
		break;
	}
	ret = pdma_ingest_stop(ing);
	if (ret == -ENODEV && c.path == PDMA_RX_NIC) {
		fprintf(stderr, "%s: the receive buffers' GPU memory was revoked (freed or "
				"moved): peerdma.ko stopped the NIC before the memory went; stopped\n", me);
		status = 1;
	} else if (ret) {
		fprintf(stderr, "%s: receive failed: %s\n", me, strerror(-ret));
		status = 1;
	}
	json_t *j = pdma_ingest_json(ing, now_s() - t0);
	json_object_set_new(j, "ended_by", json_string(ended_by_names[by].name));
	if (zmq) {
		/* the stop published every open block: drain them to the subscribers */
		if (pdma_ingest_zmq_finish(zmq, j, &got_signal))
			status = 1;
	}
	if (x && x->detach(x->arg, ing, j))
		status = 1;
	if (!quiet) {
		const json_t *streams = json_object_get(j, "streams");
		fprintf(stderr, "%-10s %10s %8s %8s %8s %8s %8s %8s\n", "stream", "received", "lost", "dup",
			"reorder", "malformed", "class", "late");
		for (size_t n = 0; n < json_array_size(streams); n++) {
			const json_t *s = json_array_get(streams, n);
			fprintf(stderr, "0x%-8llx %10lld %8lld %8lld %8lld %8lld %8lld %8lld\n",
				(unsigned long long)json_integer_value(json_object_get(s, "stream_id")),
				json_integer_value(json_object_get(s, "received")),
				json_integer_value(json_object_get(s, "lost")),
				json_integer_value(json_object_get(s, "duplicated")),
				json_integer_value(json_object_get(s, "reordered")),
				json_integer_value(json_object_get(s, "malformed")),
				json_integer_value(json_object_get(s, "class_mismatch")),
				json_integer_value(json_object_get(s, "late")));
		}
		/* Drops before the deframer: a stream's "lost" sees them only
		 * where a later packet of it came through, never at its end. */
		json_int_t ovr = json_integer_value(json_object_get(j, "ring_overruns")),
			   sdr = json_integer_value(json_object_get(j, "socket_drops"));
		if (ovr || sdr)
			fprintf(stderr, "dropped before the deframer: %lld datagram(s) by a full receive "
					"ring (the deframer fell behind), %lld by the kernel (socket buffer full)\n",
				(long long)ovr, (long long)sdr);
		fprintf(stderr, "%s: ended by %s after %.2f s\n", me, ended_by_names[by].says,
			json_real_value(json_object_get(j, "seconds")));
	}
	FILE *jf = strcmp(json_path, "-") ? fopen(json_path, "w") : stdout;
	if (!jf) {
		fprintf(stderr, "%s: cannot write %s: %s\n", me, json_path, strerror(errno));
		status = 1;
	} else {
		json_dumpf(j, jf, JSON_INDENT(2));
		fputc('\n', jf);
		if (jf != stdout && fclose(jf)) {
			fprintf(stderr, "%s: writing %s failed\n", me, json_path);
			status = 1;
		}
	}
	json_decref(j);
	goto out_ing;
out_x:
	/* Set up, never started: nothing will end the subscriptions. */
	if (zmq) {
		pdma_ingest_zmq_abandon(zmq);
		pdma_ingest_zmq_finish(zmq, NULL, &got_signal);
	}
	if (x)
		x->detach(x->arg, ing, NULL);
out_ing:
	pdma_ingest_close(ing);
out_dom:
	if (eq)
		pdma_eq_close(eq);
	if (dom)
		pdma_domain_close(dom);
	if (sim)
		pdma_sim_close(sim);
	return status;
}
