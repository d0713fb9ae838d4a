// SPDX-License-Identifier: MIT
/* The public session (include/peerdma/ingest.h): its attributes turned into
 * the full configuration of ingest.h, with blocks for subscribers. The nic
 * path's domain (kernel device) and event queue (revocations) are opened
 * here and closed with the session. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ingest.h"
#include "peerdma/mr.h"

void pdma_ingest_attr_init(struct pdma_ingest_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->path = PDMA_INGEST_PATH_CPU;
	a->bind_addr = "127.0.0.1";
	a->threads = 1;
	a->sample_rate = 10000000;
	a->max_streams = 16;
	a->max_payload = 8192;
	a->block_packets = 64;
	a->window_blocks = 16;
	a->late_blocks = 1;
	a->flush_idle_ms = 100;
}

static int fail(char *msg, size_t msglen, int ret, const char *what)
{
	if (msg && msglen)
		snprintf(msg, msglen, "%s", what);
	return ret;
}

/* nic path: a domain whose registrations peerdma.ko pins, and its EQ for
 * revocations of the receive region. */
static int nic_domain(const struct pdma_ingest_attr *a, struct pdma_ingest_config *c, char *msg,
		      size_t msglen)
{
	struct pdma_domain_attr da;
	int ret;

	pdma_domain_attr_init(&da);
	da.kernel_device = a->kernel_device ? a->kernel_device : "/dev/peerdma";
	ret = pdma_domain_open(&da, &c->domain);
	if (ret) {
		if (msg && msglen)
			snprintf(msg, msglen, "%s: %s%s", da.kernel_device, strerror(-ret),
				 ret == -ENODEV || ret == -ENOENT ? " (is peerdma.ko loaded?)" : "");
		return ret;
	}
	ret = pdma_eq_open(c->domain, 16, &c->eq);
	if (!ret)
		ret = pdma_domain_bind_eq(c->domain, c->eq, PDMA_MR_REVOKE_EVENTS);
	if (ret) {
		if (c->eq)
			pdma_eq_close(c->eq);
		pdma_domain_close(c->domain);
		c->domain = NULL;
		c->eq = NULL;
		return fail(msg, msglen, ret, "the domain's event queue");
	}
	return 0;
}

int pdma_ingest_open(const struct pdma_ingest_attr *a, struct pdma_ingest **out, char *msg, size_t msglen)
{
	struct pdma_ingest_config c;
	struct pdma_ingest *ing;
	int ret;

	if (msg && msglen)
		msg[0] = 0;
	if (!a || !out || a->size < sizeof(*a))
		return fail(msg, msglen, -EINVAL, "attributes: NULL or not from pdma_ingest_attr_init");
	if (!a->threads || a->threads > 64)
		return fail(msg, msglen, -EINVAL, "threads: 1 to 64");
	if (!a->sample_rate)
		return fail(msg, msglen, -EINVAL, "sample_rate: not 0");
	if (!a->max_streams || a->max_streams >= PDMA_DFR_NO_STREAM)
		return fail(msg, msglen, -EINVAL, "max_streams: 1 to 65534");
	if (a->max_payload < 4 || a->max_payload % 4 || a->max_payload > 65536)
		return fail(msg, msglen, -EINVAL, "max_payload: a multiple of 4, at most 65536");
	if (!a->block_packets || a->block_packets > 65536)
		return fail(msg, msglen, -EINVAL, "block_packets: 1 to 65536");
	if (a->late_blocks > 64 || a->window_blocks < a->late_blocks + 2 || a->window_blocks > 4096)
		return fail(msg, msglen, -EINVAL, "window_blocks: late_blocks + 2 to 4096 (late_blocks <= 64)");
	struct in_addr ia;
	if (a->bind_addr && inet_pton(AF_INET, a->bind_addr, &ia) != 1)
		return fail(msg, msglen, -EINVAL, "bind_addr: not a dotted-quad IPv4 address");
	pdma_ingest_config_default(&c);
	c.bind_addr = a->bind_addr ? a->bind_addr : "127.0.0.1";
	c.port = a->port;
	c.threads = a->threads;
	c.dfr.sample_rate = a->sample_rate;
	c.dfr.max_streams = a->max_streams;
	c.dfr.max_payload = a->max_payload;
	c.dfr.bytes_per_sample = 4;
	c.dfr.out_pkts = a->window_blocks * a->block_packets;
	/* A slot holds the largest datagram: the payload, the DIFI prologue
	 * (28 bytes) and a trailer. */
	if (c.slot_size < PDMA_SLOT_HDR + 32 + a->max_payload)
		c.slot_size = (PDMA_SLOT_HDR + 32 + a->max_payload + 63) & ~63u;
	switch (a->path) {
	case PDMA_INGEST_PATH_CPU:
		c.path = PDMA_RX_CPU;
		break;
	case PDMA_INGEST_PATH_HOST_STAGED:
	case PDMA_INGEST_PATH_ZERO_COPY:
		c.path = a->path == PDMA_INGEST_PATH_HOST_STAGED ? PDMA_RX_HOST_STAGED : PDMA_RX_ZERO_COPY;
		c.cuda_device = a->cuda_device;
		/* one GPU batch is at most a ring's slots: the window must hold
		 * a batch beyond the blocks still open (below) */
		c.ring_slots = 2048;
		break;
	case PDMA_INGEST_PATH_NIC:
		/* the frame parser skips every frame whose UDP destination port
		 * is not this one: 0 would silently skip them all */
		if (!a->port)
			return fail(msg, msglen, -EINVAL,
				    "port: the nic path needs the frames' UDP destination port (not 0)");
		c.path = PDMA_RX_NIC;
		c.threads = 1;
		c.nic.dev = a->nic_dev;
		c.nic.cuda_device = a->cuda_device;
		c.nic_deframer = PDMA_NIC_DFR_CPU;
		if (c.dfr.max_payload > 2048 - 64)
			c.dfr.max_payload = 2048 - 64;
		ret = nic_domain(a, &c, msg, msglen);
		if (ret)
			return ret;
		break;
	default:
		return fail(msg, msglen, -EINVAL, "path: not a pdma_ingest_path_kind");
	}
	/* The deframer's window: the blocks still open (late_blocks + 2)
	 * plus what one batch can add to a stream (the CPU deframer's 256
	 * slots, a GPU batch's ring) before blocks are published again. */
	{
		uint64_t span = c.path == PDMA_RX_CPU || c.path == PDMA_RX_NIC ? 256 : c.ring_slots;
		uint64_t need = span + (uint64_t)(a->late_blocks + 2) * a->block_packets;

		need = (need + a->block_packets - 1) / a->block_packets * a->block_packets;
		if (c.dfr.out_pkts < need)
			c.dfr.out_pkts = (uint32_t)need;
	}
	ret = pdma_ingest_open_config(&c, &ing, msg, msglen);
	if (ret) {
		if (msg && msglen && !msg[0])
			snprintf(msg, msglen, "the receive session (%s:%u): %s", c.bind_addr, c.port,
				 strerror(-ret));
		if (c.eq)
			pdma_eq_close(c.eq);
		if (c.domain)
			pdma_domain_close(c.domain);
		return ret;
	}
	pdma_ingest_own(ing, c.domain, c.eq);
	ret = pdma_ingest_enable_blocks(ing, a->block_packets, a->late_blocks, a->window_blocks,
					a->flush_idle_ms);
	if (ret) {
		pdma_ingest_close(ing);
		return fail(msg, msglen, ret, "the block pools");
	}
	*out = ing;
	return 0;
}
