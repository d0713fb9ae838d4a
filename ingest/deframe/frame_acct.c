// SPDX-License-Identifier: MIT
/* Frame-ring counters: skipped frames by reason, datagrams to the stream
 * accounting. */
#include <jansson.h>

#include "deframe/frame_acct.h"

void pdma_frm_account(struct pdma_frm_stats *fs, struct pdma_acct *a, const struct pdma_dfr_desc *d,
		      uint32_t payload_len)
{
	fs->frames++;
	if (d->status == -PDMA_DFR_E_FRAME) {
		/* The reason comes from the header stage: in range unless a
		 * descriptor was not written by it (then counted as a runt
		 * rather than indexing out of the array). */
		unsigned why = d->count;
		fs->skipped[why > PDMA_FRM_OK && why < PDMA_FRM_E__MAX ? why : PDMA_FRM_E_RUNT]++;
		return;
	}
	fs->datagrams++;
	pdma_acct_add(a, d, payload_len);
}

uint64_t pdma_frm_skipped_total(const struct pdma_frm_stats *fs)
{
	uint64_t n = 0;

	for (int i = 1; i < PDMA_FRM_E__MAX; i++)
		n += fs->skipped[i];
	return n;
}

const char *pdma_frm_reason_name(int reason)
{
	static const char *const names[PDMA_FRM_E__MAX] = {
		[PDMA_FRM_E_OVERSIZE] = "oversize",   [PDMA_FRM_E_RUNT] = "runt",
		[PDMA_FRM_E_ETHERTYPE] = "ethertype", [PDMA_FRM_E_IP_HDR] = "ip_hdr",
		[PDMA_FRM_E_IP_LEN] = "ip_len",       [PDMA_FRM_E_FRAGMENT] = "fragment",
		[PDMA_FRM_E_NOT_UDP] = "not_udp",     [PDMA_FRM_E_PORT] = "port",
		[PDMA_FRM_E_UDP_LEN] = "udp_len",     [PDMA_FRM_E_IP_CSUM] = "ip_csum",
		[PDMA_FRM_E_UDP_CSUM] = "udp_csum",
	};
	return reason > PDMA_FRM_OK && reason < PDMA_FRM_E__MAX ? names[reason] : NULL;
}

json_t *pdma_frm_stats_json(const struct pdma_frm_stats *fs)
{
	json_t *o = json_object(), *sk = json_object();

	json_object_set_new(o, "frames", json_integer((json_int_t)fs->frames));
	json_object_set_new(o, "datagrams", json_integer((json_int_t)fs->datagrams));
	for (int k = 1; k < PDMA_FRM_E__MAX; k++)
		json_object_set_new(sk, pdma_frm_reason_name(k), json_integer((json_int_t)fs->skipped[k]));
	json_object_set_new(o, "skipped", sk);
	return o;
}
