// SPDX-License-Identifier: MIT
/* The SigMF writer (sigmf.h): per stream a data file fed from a write
 * buffer, a list of capture segments, and the metadata written by jansson. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sinks/sigmf.h"

#define DEFAULT_BUF (4u << 20)

struct capture {
	uint64_t sample_start;    /* in the dataset */
	uint64_t global_index;    /* in the stream */
	bool has_freq;
	double freq;
};

struct rec {
	uint32_t stream_id;
	int fd;
	int error;
	char *data_path, *meta_path;
	uint8_t *buf;
	size_t fill, cap;         /* buf's bytes: buf_bytes, or a device packet if larger */
	uint64_t samples;         /* written to the dataset (buffer included) */
	uint64_t file_bytes;      /* in the data file */
	uint64_t next;            /* absolute index the next sample continues */
	uint64_t missing;
	bool started;
	uint32_t bps;             /* bytes per sample */
	bool rate_ctx;
	double rate;
	struct capture *caps;
	uint32_t ncaps, capcap;
};

struct pdma_sigmf {
	struct pdma_sigmf_attr a;
	char *dir, *prefix, *description;
	struct rec *recs;
	uint32_t n, cap;
	uint32_t last;            /* the stream written last: most blocks go to it again */
};

int pdma_sigmf_datetime(uint64_t s, uint64_t rate, char *buf, size_t len)
{
	uint64_t sec, rem;
	struct tm tm;
	time_t t;
	char date[32];

	if (!rate)
		return -EOVERFLOW;
	sec = s / rate;
	rem = s % rate;
	t = (time_t)sec;
	/* year 9999 ends at 253402300800 s */
	if (sec >= 253402300800ull || !gmtime_r(&t, &tm))
		return -EOVERFLOW;
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
	if (rate <= 1000000000u) {
		unsigned long long ns = (unsigned long long)((unsigned __int128)rem * 1000000000u / rate);
		snprintf(buf, len, "%s.%09lluZ", date, ns);
	} else {
		unsigned long long ps =
			(unsigned long long)((unsigned __int128)rem * 1000000000000ull / rate);
		snprintf(buf, len, "%s.%012lluZ", date, ps);
	}
	return 0;
}

int pdma_sigmf_open(const struct pdma_sigmf_attr *a, struct pdma_sigmf **out)
{
	struct pdma_sigmf *w;

	if (!a || !a->dir || !a->prefix || !a->prefix[0] || !a->sample_rate)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->a = *a;
	if (!w->a.buf_bytes)
		w->a.buf_bytes = DEFAULT_BUF;
	w->dir = strdup(a->dir);
	w->prefix = strdup(a->prefix);
	w->description = a->description ? strdup(a->description) : NULL;
	if (!w->dir || !w->prefix || (a->description && !w->description)) {
		pdma_sigmf_close(w);
		return -ENOMEM;
	}
	*out = w;
	return 0;
}

static char *path_of(const struct pdma_sigmf *w, uint32_t id, const char *ext)
{
	char *p;

	if (asprintf(&p, "%s/%s-0x%x.%s", w->dir, w->prefix, id, ext) < 0)
		return NULL;
	return p;
}

/* The recording of stream id, created on its first block. */
static struct rec *rec_of(struct pdma_sigmf *w, uint32_t id, int *err)
{
	struct rec *r;

	if (w->last < w->n && w->recs[w->last].stream_id == id)
		return &w->recs[w->last];
	for (uint32_t i = 0; i < w->n; i++)
		if (w->recs[i].stream_id == id) {
			w->last = i;
			return &w->recs[i];
		}
	if (w->n == w->cap) {
		uint32_t nc = w->cap ? w->cap * 2 : 8;
		struct rec *nr = realloc(w->recs, nc * sizeof(*nr));

		if (!nr) {
			*err = -ENOMEM;
			return NULL;
		}
		w->recs = nr;
		w->cap = nc;
	}
	r = &w->recs[w->n];
	memset(r, 0, sizeof(*r));
	r->stream_id = id;
	r->fd = -1;
	r->data_path = path_of(w, id, "sigmf-data");
	r->meta_path = path_of(w, id, "sigmf-meta");
	/* aligned: the buffer could go to O_DIRECT as it is */
	r->cap = w->a.buf_bytes;
	if (!r->data_path || !r->meta_path || posix_memalign((void **)&r->buf, 4096, r->cap)) {
		free(r->data_path);
		free(r->meta_path);
		*err = -ENOMEM;
		return NULL;
	}
	r->fd = open(r->data_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (r->fd < 0)
		r->error = -errno; /* kept: finish reports it, the stream is listed */
	w->last = w->n++;
	return r;
}

/* After a write error the recording ends where its file ends: the samples
 * and captures counted are cut back to what the file holds, so the metadata
 * finish writes stays true. */
static void rec_fail(struct rec *r, int err)
{
	r->error = err;
	r->fill = 0;
	r->samples = r->file_bytes / r->bps;
	while (r->ncaps && r->caps[r->ncaps - 1].sample_start >= r->samples)
		r->ncaps--;
}

static int write_all(struct rec *r, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = write(r->fd, p, n);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			rec_fail(r, -errno);
			return r->error;
		}
		p += k;
		n -= (size_t)k;
		r->file_bytes += (size_t)k;
	}
	return 0;
}

static int rec_flush(struct rec *r)
{
	int ret;

	if (r->error)
		return r->error;
	ret = write_all(r, r->buf, r->fill);
	r->fill = 0;
	return ret;
}

/* n bytes of samples to the dataset: through the buffer, or straight to the
 * file when they would fill it anyway (one copy less for large blocks). */
static int rec_append(struct rec *r, const uint8_t *p, size_t n)
{
	const size_t cap = r->cap;

	if (r->error)
		return r->error;
	if (r->fill + n > cap && rec_flush(r))
		return r->error;
	if (n >= cap)
		return write_all(r, p, n);
	memcpy(r->buf + r->fill, p, n);
	r->fill += n;
	return 0;
}

static int add_capture(struct rec *r, uint64_t g, const struct pdma_block *b)
{
	struct capture *c;

	if (r->ncaps == r->capcap) {
		uint32_t nc = r->capcap ? r->capcap * 2 : 16;
		struct capture *ncs = realloc(r->caps, nc * sizeof(*ncs));

		if (!ncs)
			return -ENOMEM;
		r->caps = ncs;
		r->capcap = nc;
	}
	c = &r->caps[r->ncaps++];
	c->sample_start = r->samples;
	c->global_index = g;
	c->has_freq = b->ctx_fields & PDMA_CTX_RF_FREQ;
	c->freq = b->ctx_rf_freq;
	return 0;
}

/* Packets [i, j) of a block in device memory to the dataset: read by
 * pdma_block_read (after the block's event) straight into the write buffer,
 * as many whole packets as it has room for at a time. A read error (CUDA)
 * ends the stream's recording like a write error, after what was read. */
static int rec_append_read(struct rec *r, const struct pdma_block *b, uint32_t i, uint32_t j)
{
	const size_t pb = (size_t)b->samples_per_packet * r->bps;

	if (pb > r->cap)
		return -EINVAL; /* pdma_sigmf_write grew the buffer first */
	while (i < j && !r->error) {
		size_t room = (r->cap - r->fill) / pb;
		uint32_t k = j - i < room ? j - i : (uint32_t)room;
		int ret;

		if (!k) {
			rec_flush(r);
			continue;
		}
		ret = pdma_block_read(b, i, k, r->buf + r->fill);
		if (ret) {
			if (!rec_flush(r))
				rec_fail(r, ret);
			return r->error;
		}
		r->fill += k * pb;
		i += k;
	}
	return r->error;
}

/* Packets [i, j) of b are present: append those not already written, after
 * a new capture where they do not continue the last. */
static int write_run(struct rec *r, const struct pdma_block *b, uint32_t i, uint32_t j)
{
	const uint32_t spp = b->samples_per_packet;
	uint64_t g = b->first_sample + (uint64_t)i * spp;
	bool has_freq = b->ctx_fields & PDMA_CTX_RF_FREQ;
	uint64_t n;
	int ret;

	if (r->started && g < r->next) {
		/* blocks never overlap; should a sender's clock step back, the
		 * dataset stays in time order: the packets behind are dropped */
		uint64_t skip = (r->next - g + spp - 1) / spp;

		if (skip >= j - i)
			return 0;
		i += (uint32_t)skip;
		g += skip * spp;
	}
	n = (uint64_t)(j - i) * spp;
	if (!r->started || g != r->next ||
	    has_freq != r->caps[r->ncaps - 1].has_freq ||
	    (has_freq && b->ctx_rf_freq != r->caps[r->ncaps - 1].freq)) {
		if (r->started && g > r->next)
			r->missing += g - r->next;
		ret = add_capture(r, g, b);
		if (ret)
			return ret;
		r->started = true;
	}
	r->samples += n; /* before: a failing append cuts it back */
	if (b->mem == PDMA_BLOCK_HOST)
		ret = rec_append(r, (const uint8_t *)b->data + (size_t)i * spp * r->bps, n * r->bps);
	else
		ret = rec_append_read(r, b, i, j);
	if (ret)
		return ret;
	r->next = g + n;
	return 0;
}

int pdma_sigmf_write(struct pdma_sigmf *w, const struct pdma_block *b)
{
	struct rec *r;
	int ret = 0;

	if (b->format != PDMA_FMT_CI16 || b->bytes_per_sample != 4 || !b->samples_per_packet)
		return -EINVAL;
	r = rec_of(w, b->stream_id, &ret);
	if (!r)
		return ret;
	if (r->error)
		return r->error;
	if (b->mem != PDMA_BLOCK_HOST && (size_t)b->samples_per_packet * b->bytes_per_sample > r->cap) {
		/* device reads go into the buffer whole packets at a time */
		size_t nb = (size_t)b->samples_per_packet * b->bytes_per_sample;
		uint8_t *nbuf;

		if (rec_flush(r))
			return r->error;
		if (posix_memalign((void **)&nbuf, 4096, nb))
			return -ENOMEM;
		free(r->buf);
		r->buf = nbuf;
		r->cap = nb;
	}
	r->bps = b->bytes_per_sample;
	if (!r->rate_ctx && (b->ctx_fields & PDMA_CTX_SAMPLE_RATE) && b->ctx_sample_rate >= 1) {
		r->rate_ctx = true;
		r->rate = b->ctx_sample_rate;
	}
	/* one write per run of received packets */
	for (uint32_t i = 0; i < b->npackets;) {
		bool gap = b->gap_mask[i / 64] >> (i % 64) & 1;
		uint32_t j = i + 1;

		while (j < b->npackets && (b->gap_mask[j / 64] >> (j % 64) & 1) == gap)
			j++;
		if (!gap) {
			ret = write_run(r, b, i, j);
			if (ret)
				return ret;
		}
		i = j;
	}
	return 0;
}

static json_t *meta_json(const struct pdma_sigmf *w, const struct rec *r)
{
	json_t *m = json_object(), *g = json_object(), *caps = json_array();
	char desc[160];

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	json_object_set_new(g, "core:datatype", json_string("ci16_be"));
#else
	json_object_set_new(g, "core:datatype", json_string("ci16_le"));
#endif
	json_object_set_new(g, "core:version", json_string(PDMA_SIGMF_VERSION));
	json_object_set_new(g, "core:sample_rate",
			    json_real(r->rate_ctx ? r->rate : (double)w->a.sample_rate));
	json_object_set_new(g, "core:num_channels", json_integer(1));
	json_object_set_new(g, "core:recorder", json_string("peerdma record"));
	if (w->description)
		json_object_set_new(g, "core:description", json_string(w->description));
	else {
		snprintf(desc, sizeof(desc), "VITA-49 stream 0x%x received by peerdma ingest", r->stream_id);
		json_object_set_new(g, "core:description", json_string(desc));
	}
	for (uint32_t i = 0; i < r->ncaps; i++) {
		const struct capture *c = &r->caps[i];
		json_t *o = json_object();
		char dt[48];

		json_object_set_new(o, "core:sample_start", json_integer((json_int_t)c->sample_start));
		/* a JSON integer here is 63 bits: a larger index cannot be
		 * written exactly, so none is (readers then take sample_start) */
		if (c->global_index <= (uint64_t)INT64_MAX)
			json_object_set_new(o, "core:global_index", json_integer((json_int_t)c->global_index));
		if (!pdma_sigmf_datetime(c->global_index, w->a.sample_rate, dt, sizeof(dt)))
			json_object_set_new(o, "core:datetime", json_string(dt));
		if (c->has_freq)
			json_object_set_new(o, "core:frequency", json_real(c->freq));
		json_array_append_new(caps, o);
	}
	json_object_set_new(m, "global", g);
	json_object_set_new(m, "captures", caps);
	json_object_set_new(m, "annotations", json_array());
	return m;
}

static int write_meta(const struct pdma_sigmf *w, const struct rec *r)
{
	json_t *m = meta_json(w, r);
	char *tmp;
	int ret = 0;

	if (asprintf(&tmp, "%s.tmp", r->meta_path) < 0) {
		json_decref(m);
		return -ENOMEM;
	}
	if (json_dump_file(m, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) ||
	    rename(tmp, r->meta_path)) {
		ret = errno ? -errno : -EIO;
		unlink(tmp);
	}
	free(tmp);
	json_decref(m);
	return ret;
}

int pdma_sigmf_finish(struct pdma_sigmf *w)
{
	int first = 0;

	for (uint32_t i = 0; i < w->n; i++) {
		struct rec *r = &w->recs[i];
		int ret = r->fill ? rec_flush(r) : r->error;

		if (!ret && !w->a.nosync && fdatasync(r->fd)) {
			/* what the file holds is unknown: say what was written */
			ret = r->error = -errno;
		}
		/* the metadata of what the dataset holds, even after an error */
		int mret = write_meta(w, r);

		if (!first)
			first = ret ? ret : mret;
	}
	return first;
}

uint32_t pdma_sigmf_streams(const struct pdma_sigmf *w)
{
	return w->n;
}

void pdma_sigmf_stream(const struct pdma_sigmf *w, uint32_t i, struct pdma_sigmf_info *info)
{
	const struct rec *r = &w->recs[i];

	memset(info, 0, sizeof(*info));
	info->stream_id = r->stream_id;
	info->data_path = r->data_path;
	info->meta_path = r->meta_path;
	info->samples = r->samples;
	info->missing = r->missing;
	info->captures = r->ncaps;
	info->sample_rate = r->rate_ctx ? r->rate : (double)w->a.sample_rate;
	info->rate_from_context = r->rate_ctx;
	info->error = r->error;
}

void pdma_sigmf_close(struct pdma_sigmf *w)
{
	if (!w)
		return;
	for (uint32_t i = 0; i < w->n; i++) {
		struct rec *r = &w->recs[i];

		if (r->fd >= 0)
			close(r->fd);
		free(r->buf);
		free(r->caps);
		free(r->data_path);
		free(r->meta_path);
	}
	free(w->recs);
	free(w->dir);
	free(w->prefix);
	free(w->description);
	free(w);
}
