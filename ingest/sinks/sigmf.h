/* SPDX-License-Identifier: MIT */
/*
 * A SigMF writer (https://sigmf.org, specification 1.2): a consumer of the
 * public ingest API's blocks (include/peerdma/ingest.h) that writes each
 * stream to a recording, <dir>/<prefix>-0x<stream id in hex>.sigmf-data (the
 * samples, complex int16) and .sigmf-meta (JSON, written at the end).
 *
 * Gaps are new captures, not zeros: the dataset holds only the samples that
 * arrived, and each run of samples that follows a discontinuity (packets lost
 * on the way, blocks dropped by a full queue, the first packet) starts a
 * capture segment whose core:sample_start is its place in the dataset and
 * whose core:global_index is its absolute sample index in the stream (the
 * VITA-49 timestamp: integer seconds * rate + sample count), with
 * core:datetime the same instant in UTC. So a reader knows exactly which
 * samples are missing (the difference of global_index and sample_start
 * between two captures) and never mistakes zeros for signal; this is the use
 * the specification gives core:global_index. A change of the context's RF
 * frequency starts a capture too (core:frequency is a capture's field).
 *
 * Metadata: core:datatype ci16_le (ci16_be on a big-endian host: blocks are
 * host order), core:sample_rate from the stream's context packets when they
 * carried one, else the session's rate; core:frequency (captures) from the
 * context's RF reference frequency when it carried one.
 *
 * Data goes out in large sequential write(2)s from a per-stream buffer
 * (buf_bytes, default 4 MiB); pdma_sigmf_finish flushes, fdatasync()s the
 * data (unless nosync) and writes each .sigmf-meta (to a temporary name,
 * then rename(2), so a reader never sees half a file).
 *
 * Memory kinds: host blocks (PDMA_BLOCK_HOST) are copied from where they are
 * into the write buffer (a run as large as the buffer goes to write(2)
 * directly). Blocks in device memory (the GPU paths: PDMA_BLOCK_CUDA,
 * PDMA_BLOCK_CUDA_HOST) are read with pdma_block_read, which waits for the
 * block's event, straight into the write buffer: one device-to-host copy per
 * run of received packets, no CUDA linked here.
 *
 * Thread safety: one writer is driven by one thread at a time.
 */
#ifndef PDMA_INGEST_SINKS_SIGMF_H
#define PDMA_INGEST_SINKS_SIGMF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peerdma/ingest.h"

#define PDMA_SIGMF_VERSION "1.2.0" /* the specification the metadata follows */

struct pdma_sigmf_attr {
	const char *dir;          /* an existing directory */
	const char *prefix;       /* file name prefix */
	uint64_t sample_rate;     /* the session's rate: the timestamps' unit, and
				   * core:sample_rate where no context said */
	size_t buf_bytes;         /* write buffer per stream (0: 4 MiB) */
	const char *description;  /* core:description, optional */
	bool nosync;              /* finish without fdatasync */
};

/* One stream's recording, as pdma_sigmf_stream reports it. */
struct pdma_sigmf_info {
	uint32_t stream_id;
	const char *data_path, *meta_path;
	uint64_t samples;         /* in the dataset */
	uint64_t missing;         /* between its first and last sample, not received */
	uint32_t captures;
	double sample_rate;       /* core:sample_rate written */
	bool rate_from_context;
	int error;                /* the first write error (negative errno), or 0 */
};

struct pdma_sigmf;

/* -EINVAL (no dir or prefix, no rate), -ENOMEM. Files are created as
 * streams appear. */
int pdma_sigmf_open(const struct pdma_sigmf_attr *a, struct pdma_sigmf **w);
/* Append a block's received packets to its stream's recording (gap packets
 * skipped, a capture opened after each). The caller still releases b.
 * -EINVAL for a format other than PDMA_FMT_CI16; -errno of open, write or
 * pdma_block_read: the stream then stops recording, and finish still
 * describes exactly what its dataset holds. */
int pdma_sigmf_write(struct pdma_sigmf *w, const struct pdma_block *b);
/* Flush every stream's data, fdatasync, write the .sigmf-meta files. May be
 * called again after more writes (rewrites the metadata). The first error. */
int pdma_sigmf_finish(struct pdma_sigmf *w);
uint32_t pdma_sigmf_streams(const struct pdma_sigmf *w);
/* Stream i (0 <= i < pdma_sigmf_streams), in order of appearance. */
void pdma_sigmf_stream(const struct pdma_sigmf *w, uint32_t i, struct pdma_sigmf_info *info);
/* Closes the files (without finishing) and frees. */
void pdma_sigmf_close(struct pdma_sigmf *w);

/* The RFC 3339 UTC time of absolute sample index s at rate (sample index =
 * seconds since the epoch * rate + samples): "YYYY-MM-DDTHH:MM:SS.fffffffffZ"
 * (nanoseconds; picoseconds above 1 GS/s). 0, or -EOVERFLOW past year 9999. */
int pdma_sigmf_datetime(uint64_t s, uint64_t rate, char *buf, size_t len);

#endif /* PDMA_INGEST_SINKS_SIGMF_H */
