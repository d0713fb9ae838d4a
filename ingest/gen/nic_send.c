// SPDX-License-Identifier: MIT
/* peerdma gen --eth --nic: the generator's frames (gen/eth.h) transmitted by
 * a NIC (drivers/e1000/) straight from GPU memory. Each batch of frames
 * (gen/eth_send.c's loop) is composed in a host buffer, copied into GPU
 * memory that libpeerdma registered and peerdma.ko pinned (rx/nic_mem.h),
 * and the NIC reads it from there (PDMA_NIC_IOC_TX): what leaves the wire
 * came from GPU pages. One batch in flight at a time, in order. */
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

#define TX_MIN 60u /* the Ethernet minimum without FCS: shorter frames are padded */

struct tx {
	int nfd;
	struct pdma_nic_mem m;
	char *msg;
	size_t msglen;
};

/* One batch from GPU memory; every frame must be reported sent. */
static int tx_flush(void *arg, uint8_t *buf, uint32_t slot, const uint32_t *len, uint32_t n)
{
	struct pdma_nic_tx_frame f[PDMA_GEN_ETH_BATCH];
	struct tx *t = arg;
	pdma_cu_result r = t->m.cu->MemcpyHtoD(t->m.region, buf, (size_t)n * slot);

	if (r != PDMA_CU_SUCCESS)
		return pdma_nic_fail(t->msg, t->msglen, pdma_cu_errno(r), "cuMemcpyHtoD of a batch: %s",
				     pdma_cu_errname(r));
	for (uint32_t i = 0; i < n; i++)
		f[i] = (struct pdma_nic_tx_frame){ .offset = pdma_nic_mem_pin_off(&t->m, (uint64_t)i * slot),
						   .len = len[i] };
	struct pdma_nic_tx x = {
		.size = sizeof(x),
		.peerdma_fd = t->m.dma.kernel_fd,
		.n = n,
		.handle = t->m.dma.handle,
		.frames = (uintptr_t)f,
		.timeout_ms = 5000,
	};
	if (ioctl(t->nfd, PDMA_NIC_IOC_TX, &x))
		return pdma_nic_fail(t->msg, t->msglen, -errno, "transmit: %s (%u of %u frames sent)",
				     strerror(errno), x.done, n);
	return 0;
}

int pdma_gen_send_nic(struct pdma_gen *g, const struct pdma_gen_send_opts *o, struct pdma_gen_eth *e,
		      const struct pdma_gen_nic *nc, char *msg, size_t msglen)
{
	uint32_t slot = pdma_gen_eth_slot(g, 4096);
	struct tx t = { .nfd = -1, .m.dma.kernel_fd = -1, .msg = msg, .msglen = msglen };
	uint8_t *stage = calloc(PDMA_GEN_ETH_BATCH, slot);
	struct pdma_domain_attr da;
	struct pdma_domain *dom = NULL;
	int ret;

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
	t.nfd = open(nc->dev, O_RDWR | O_CLOEXEC);
	if (t.nfd < 0) {
		ret = pdma_nic_fail(msg, msglen, -errno, "%s: %s (is peerdma_e1000.ko loaded and a NIC bound?)",
				    nc->dev, strerror(errno));
		goto out;
	}
	ret = pdma_nic_mem_open(&t.m, dom, nc->cuda_device, (uint64_t)PDMA_GEN_ETH_BATCH * slot,
				PDMA_SEND | PDMA_READ, msg, msglen);
	if (!ret)
		ret = pdma_gen_eth_batches(g, o, e, stage, slot, TX_MIN, tx_flush, &t);
out:
	if (t.nfd >= 0)
		close(t.nfd);
	pdma_nic_mem_close(&t.m);
	if (dom)
		pdma_domain_close(dom);
	free(stage);
	return ret;
}
