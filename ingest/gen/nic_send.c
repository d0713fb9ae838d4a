// SPDX-License-Identifier: MIT
/* peerdma gen --eth --nic: the generator's frames (gen/eth.h) transmitted by
 * a NIC (drivers/e1000/) straight from GPU memory. The frames are composed
 * in a batch of slots of a host buffer, copied into GPU memory that
 * libpeerdma registered and peerdma.ko pinned (rx/nic_mem.h), and the NIC
 * reads them from there (PDMA_NIC_IOC_TX): what leaves the wire came from
 * GPU pages. One batch in flight at a time, in pdma_gen_eth_next's order. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "gen/eth.h"
#include "gen/gen.h"
#include "gen/gen_int.h"
#include "rx/nic_mem.h"
#include "uapi/peerdma_nic.h"

#define TX_BATCH 64u
#define TX_MIN 60u /* the Ethernet minimum without FCS: shorter frames are padded */

/* One batch from GPU memory; every frame must be reported sent. */
static int tx_batch(int nfd, const struct pdma_nic_mem *m, const uint8_t *stage, uint32_t slot,
		    const uint32_t *len, uint32_t n, char *msg, size_t msglen)
{
	struct pdma_nic_tx_frame f[TX_BATCH];
	pdma_cu_result r = m->cu->MemcpyHtoD(m->region, stage, (size_t)n * slot);

	if (r != PDMA_CU_SUCCESS)
		return pdma_nic_fail(msg, msglen, pdma_cu_errno(r), "cuMemcpyHtoD of a batch: %s",
				     pdma_cu_errname(r));
	for (uint32_t i = 0; i < n; i++)
		f[i] = (struct pdma_nic_tx_frame){ .offset = pdma_nic_mem_pin_off(m, (uint64_t)i * slot),
						   .len = len[i] };
	struct pdma_nic_tx t = {
		.size = sizeof(t),
		.peerdma_fd = m->dma.kernel_fd,
		.n = n,
		.handle = m->dma.handle,
		.frames = (uintptr_t)f,
		.timeout_ms = 5000,
	};
	if (ioctl(nfd, PDMA_NIC_IOC_TX, &t))
		return pdma_nic_fail(msg, msglen, -errno, "transmit: %s (%u of %u frames sent)",
				     strerror(errno), t.done, n);
	return 0;
}

int pdma_gen_send_nic(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e,
		      const struct pdma_gen_nic *nc, char *msg, size_t msglen)
{
	const struct pdma_gen_config *c = pdma_gen_get_config(g);
	/* A slot per frame of the batch: the largest frame, good or malformed. */
	uint32_t slot = c->packet_size + PDMA_ETH_HDRS;
	slot = slot < PDMA_ETH_OVERSIZE_LEN ? PDMA_ETH_OVERSIZE_LEN : slot;
	slot = (slot + 4095) & ~4095u;
	struct pdma_domain_attr da;
	struct pdma_domain *dom = NULL;
	struct pdma_nic_mem m = { .dma.kernel_fd = -1 };
	uint32_t len[TX_BATCH], nb = 0, si;
	uint8_t *stage = calloc(TX_BATCH, slot);
	uint64_t sent = 0;
	int nfd = -1, ret, n;

	if (!stage)
		return -ENOMEM;
	pdma_domain_attr_init(&da);
	da.kernel_device = nc->kernel_device ? nc->kernel_device : "/dev/peerdma";
	ret = pdma_domain_open(&da, &dom);
	if (ret) {
		ret = pdma_nic_fail(msg, msglen, ret, "%s: %s (is peerdma.ko loaded?)", da.kernel_device,
				    strerror(-ret));
		goto out;
	}
	nfd = open(nc->dev, O_RDWR | O_CLOEXEC);
	if (nfd < 0) {
		ret = pdma_nic_fail(msg, msglen, -errno, "%s: %s (is peerdma_e1000.ko loaded and a NIC bound?)",
				    nc->dev, strerror(errno));
		goto out;
	}
	ret = pdma_nic_mem_open(&m, dom, nc->cuda_device, (uint64_t)TX_BATCH * slot, PDMA_SEND | PDMA_READ,
				msg, msglen);
	if (ret)
		goto out;
	if (o->pcap)
		pdma_gen_pcap_header(o->pcap);
	double t0 = pdma_gen_now();
	do {
		uint8_t *b = stage + (size_t)nb * slot;

		n = pdma_gen_eth_next(e, g, b, slot, &si);
		if (n < 0) {
			ret = n;
			break;
		}
		if (n > 0) {
			if ((uint32_t)n < TX_MIN) { /* as the MAC would pad it */
				memset(b + n, 0, TX_MIN - (uint32_t)n);
				n = TX_MIN;
			}
			if (o->pcap && (ret = pdma_gen_pcap_frame(o->pcap, b, (uint32_t)n, b + n, 0, sent + nb)))
				break;
			len[nb++] = (uint32_t)n;
		}
		if (nb && (n == 0 || nb == TX_BATCH)) {
			ret = tx_batch(nfd, &m, stage, slot, len, nb, msg, msglen);
			if (ret)
				break;
			sent += nb;
			nb = 0;
			pdma_gen_pace(t0, sent, o->rate_pps);
		}
	} while (n > 0);
out:
	if (nfd >= 0)
		close(nfd);
	pdma_nic_mem_close(&m);
	if (dom)
		pdma_domain_close(dom);
	free(stage);
	return ret;
}
