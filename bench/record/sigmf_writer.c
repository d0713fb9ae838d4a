// SPDX-License-Identifier: MIT
/* The SigMF writer's own ceiling: host blocks made once in memory (as the
 * ingest API delivers them: block_packets packets of spp samples, one
 * stream after another), written through pdma_sigmf_write until MB
 * megabytes are recorded, then pdma_sigmf_finish (flush, fdatasync, the
 * metadata). Prints one JSON object: bytes, seconds, MBps. No network, no
 * deframer: what the writer and the disk do alone.
 * usage: bench_sigmf_writer DIR MB [STREAMS [BLOCK_PACKETS [SPP]]] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sinks/sigmf.h"

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_sigmf_writer DIR MB [STREAMS [BLOCK_PACKETS [SPP]]]\n");
		return 2;
	}
	uint64_t total = strtoull(argv[2], NULL, 10) * 1000000ull;
	uint32_t streams = argc > 3 ? (uint32_t)atoi(argv[3]) : 2;
	uint32_t bp = argc > 4 ? (uint32_t)atoi(argv[4]) : 64;
	uint32_t spp = argc > 5 ? (uint32_t)atoi(argv[5]) : 2040; /* an 8 KiB packet */
	size_t bytes = (size_t)bp * spp * 4;
	uint32_t *s = malloc(bytes);
	uint64_t mask[1024] = { 0 };
	struct pdma_sigmf_attr a = { .dir = argv[1], .prefix = "writer", .sample_rate = 10000000 };
	struct pdma_sigmf *w;
	int ret;

	if (!streams || !bp || bp > 65536 || !spp || !s)
		return 2;
	for (size_t i = 0; i < bytes / 4; i++)
		s[i] = (uint32_t)(i * 2654435761u);
	ret = pdma_sigmf_open(&a, &w);
	if (ret) {
		fprintf(stderr, "bench_sigmf_writer: %s\n", strerror(-ret));
		return 1;
	}
	struct pdma_block b = {
		.format = PDMA_FMT_CI16, .bytes_per_sample = 4, .samples_per_packet = spp,
		.npackets = bp, .nsamples = (uint64_t)bp * spp, .gap_mask = mask, .data = s,
		.mem = PDMA_BLOCK_HOST,
	};
	uint64_t done = 0;
	double t0 = now_s();
	for (uint64_t seq = 0; done < total && !ret; seq++)
		for (uint32_t k = 0; k < streams && !ret; k++) {
			b.stream_id = 0x1000 + k;
			b.seq = seq;
			b.first_sample = seq * b.nsamples;
			ret = pdma_sigmf_write(w, &b);
			done += bytes;
		}
	if (!ret)
		ret = pdma_sigmf_finish(w);
	double dt = now_s() - t0;
	for (uint32_t i = 0; i < pdma_sigmf_streams(w); i++) {
		struct pdma_sigmf_info in;

		pdma_sigmf_stream(w, i, &in);
		unlink(in.data_path);
		unlink(in.meta_path);
	}
	pdma_sigmf_close(w);
	free(s);
	if (ret) {
		fprintf(stderr, "bench_sigmf_writer: %s\n", strerror(-ret));
		return 1;
	}
	printf("{\"bytes\": %llu, \"seconds\": %.6f, \"MBps\": %.1f}\n", (unsigned long long)done, dt,
	       done / dt / 1e6);
	return 0;
}
