// SPDX-License-Identifier: MIT
/* peerdma deframe: the CPU frame-ring deframer over a capture of Ethernet
 * frames (a pcap file, e.g. from `peerdma gen --eth --pcap`), with no NIC and
 * no GPU: what a frame ring in the guest or on the GPU would make of the
 * same frames, counted the same way. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "deframe/deframe_cpu.h"
#include "rx/pcap_frames.h"
#include "opt.h"

#define BATCH 1024u /* frames per pass of the deframer */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: peerdma deframe [--pcap FILE] [OPTIONS]\n"
		"Run the CPU frame-ring deframer over a capture of Ethernet frames: each record one\n"
		"frame as a NIC would place it at a receive buffer's start (Ethernet II, optionally one\n"
		"802.1Q tag, IPv4, UDP to --port, checksums checked), its datagram deframed as ingest\n"
		"does; skipped frames are counted per reason.\n\n"
		"  -r, --pcap FILE        the capture (pcap, link type Ethernet; default '-': standard input)\n"
		"  -p, --port N           UDP destination port of the stream frames (default 4991)\n"
		"      --max-frame B      longer frames are skipped as oversize (default 4096)\n"
		"      --sample-rate HZ   stream sample rate (default 10000000)\n"
		"      --max-streams N    stream table size (default 64)\n"
		"      --out-packets N    per-stream output window, packets (default 4096)\n"
		"  -j, --json             print the frame counters and per-stream accounting as JSON\n"
		"  -h, --help\n"
		"Exit status: 0 when the file was read to its end, 1 on failure, 2 on usage errors.\n");
}

struct deframe_args {
	const char *pcap;
	struct pdma_frm_cfg fc;
	struct pdma_dfr_config dfr;
	bool json;
};

static int deframe_parse(int argc, char **argv, struct deframe_args *a)
{
	static const struct option opts[] = {
		{ "pcap", required_argument, NULL, 'r' },
		{ "port", required_argument, NULL, 'p' },
		{ "max-frame", required_argument, NULL, 'F' },
		{ "sample-rate", required_argument, NULL, 'R' },
		{ "max-streams", required_argument, NULL, 'M' },
		{ "out-packets", required_argument, NULL, 'O' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct pdma_opt o;
	uint32_t v;
	int opt;

	memset(a, 0, sizeof(*a));
	a->pcap = "-";
	a->fc = (struct pdma_frm_cfg){ PDMA_FRM_MAX_LEN, 4991, 0 };
	pdma_dfr_config_default(&a->dfr);
	pdma_opt_init(&o, "peerdma deframe", opts, "r:p:jh");
	while ((opt = pdma_opt_next(&o, argc, argv)) != -1) {
		int bad = 0;

		switch (opt) {
		case 'r': bad = pdma_opt_str(&o, &a->pcap); break;
		case 'p':
			bad = pdma_opt_u32(&o, 1, 65535, &v);
			a->fc.port = (uint16_t)(bad ? 0 : v);
			break;
		case 'F': bad = pdma_opt_u32(&o, 64, 65535, &a->fc.max_len); break;
		case 'R': bad = pdma_opt_u64(&o, 1, UINT64_MAX, &a->dfr.sample_rate); break;
		case 'M': bad = pdma_opt_u32(&o, 1, 65534, &a->dfr.max_streams); break;
		case 'O': bad = pdma_opt_u32(&o, 1, 1u << 20, &a->dfr.out_pkts); break;
		case 'j': a->json = true; break;
		case 'h': usage(stdout); return 1;
		default: return 2;
		}
		if (bad)
			return 2;
	}
	if (pdma_opt_end(&o, argc, argv))
		return 2;
	return 0;
}

int pdma_cmd_deframe_check(int argc, char **argv)
{
	struct deframe_args a;

	return deframe_parse(argc, argv, &a) == 2 ? 2 : 0;
}

int pdma_cmd_deframe(int argc, char **argv)
{
	struct deframe_args a;
	struct pdma_pcap_in in;
	struct pdma_dfr d;
	int ret = deframe_parse(argc, argv, &a);

	if (ret)
		return ret == 1 ? 0 : 2;
	FILE *f = strcmp(a.pcap, "-") ? fopen(a.pcap, "rb") : stdin;
	if (!f) {
		fprintf(stderr, "peerdma deframe: cannot read %s: %s\n", a.pcap, strerror(errno));
		return 1;
	}
	/* Buffers as large as the frame limit: an oversize frame is then
	 * counted without a byte read past its buffer. */
	const uint32_t slot = (a.fc.max_len + 63) & ~63u;
	uint8_t *region = malloc((size_t)BATCH * slot);
	struct pdma_frame *fr = calloc(BATCH, sizeof(*fr));
	ret = pdma_pcap_in_open(&in, f);
	if (!ret && (!region || !fr))
		ret = -ENOMEM;
	if (!ret)
		ret = pdma_dfr_init(&d, &a.dfr);
	else
		memset(&d, 0, sizeof(d));
	while (!ret) {
		int n = pdma_pcap_in_frames(&in, region, slot, fr, BATCH);
		if (n <= 0) {
			ret = n;
			break;
		}
		pdma_dfr_process_frames(&d, &a.fc, region, fr, (uint32_t)n);
	}
	if (f != stdin)
		fclose(f);
	free(region);
	free(fr);
	if (ret) {
		fprintf(stderr, "peerdma deframe: %s: %s\n", a.pcap,
			ret == -EPROTO ? "not a pcap file, or a broken one"
				       : ret == -EPROTONOSUPPORT ? "not a capture of Ethernet frames" : strerror(-ret));
		pdma_dfr_fini(&d);
		return 1;
	}
	if (a.json) {
		json_t *o = pdma_frm_stats_json(&d.frames);
		json_object_set_new(o, "port", json_integer(a.fc.port));
		json_object_set_new(o, "records_cut_by_snaplen", json_integer((json_int_t)in.cut));
		json_object_set_new(o, "placed", json_integer((json_int_t)d.placed));
		json_object_set_new(o, "malformed_unattributed", json_integer((json_int_t)d.acct.malformed_unattributed));
		json_object_set_new(o, "streams", pdma_acct_streams_json(&d.acct));
		json_dumpf(o, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(o);
	} else {
		printf("%llu frames: %llu datagrams, %llu skipped (", (unsigned long long)d.frames.frames,
		       (unsigned long long)d.frames.datagrams, (unsigned long long)pdma_frm_skipped_total(&d.frames));
		for (int k = 1; k < PDMA_FRM_E__MAX; k++)
			printf("%s%s %llu", k > 1 ? ", " : "", pdma_frm_reason_name(k),
			       (unsigned long long)d.frames.skipped[k]);
		printf(")\n");
		for (uint32_t i = 0; i < d.cfg.max_streams; i++) {
			struct pdma_stream_stats s;
			if (pdma_acct_stream(&d.acct, i, &s))
				printf("stream 0x%x: received %llu, lost %llu, duplicated %llu, reordered %llu, malformed %llu\n",
				       s.stream_id, (unsigned long long)s.received, (unsigned long long)s.lost,
				       (unsigned long long)s.duplicated, (unsigned long long)s.reordered,
				       (unsigned long long)s.malformed);
		}
	}
	pdma_dfr_fini(&d);
	return 0;
}
