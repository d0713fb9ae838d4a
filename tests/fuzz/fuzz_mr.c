// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the registration API: each input is a program of
 * operations (register host or sim GPU memory, close, allocate, free, DMA by
 * key, raw keys, bind, enable, refresh) with fuzzer-chosen arguments, run
 * against a fresh domain. Checks, beyond "no crash, no leak" (ASan/UBSan):
 * every return value is 0 or one of the errno values the API documents, a
 * DMA that succeeded really moved the bytes, and a key is dead once its MR
 * is closed.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peerdma/mr.h"
#include "mem/sim.h"

#define NSLOT 8

struct prog {
	const uint8_t *p;
	size_t n;
};

static uint64_t take(struct prog *g, int bytes)
{
	uint64_t v = 0;

	for (int i = 0; i < bytes; i++) {
		v = (v << 8) | (g->n ? *g->p : 0);
		if (g->n) {
			g->p++;
			g->n--;
		}
	}
	return v;
}

static void check(int ret, const int *allowed)
{
	if (!ret)
		return;
	for (; *allowed; allowed++)
		if (ret == -*allowed)
			return;
	fprintf(stderr, "undocumented return %d (%s)\n", ret, pdma_strerror(ret));
	abort();
}

static const int reg_errs[] = { EINVAL, EFAULT, ENOMEM, ENOKEY, EKEYREJECTED, EOPNOTSUPP,
				ENODEV, EAGAIN, ENOSPC, EOVERFLOW, 0 };
static const int dma_errs[] = { EINVAL, EFAULT, ENOKEY, EACCES, EAGAIN, 0 };
static const int misc_errs[] = { EINVAL, EBUSY, ENOKEY, EKEYREJECTED, EOPNOTSUPP, ENOSYS,
				 ERANGE, ENOMEM, EFAULT, ENOSPC, 0 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t arena[1 << 16];
	struct prog g = { data, size };
	struct pdma_sim_attr sa = { .mem_size = 1 << 20, .bar_size = 1 << 19 };
	struct pdma_domain_attr da;
	struct pdma_domain *d;
	struct pdma_sim *sim;
	struct pdma_cntr *cntr = NULL;
	struct pdma_mr *mr[NSLOT] = { 0 };
	uint64_t dead_key[NSLOT] = { 0 };
	void *gpu[NSLOT] = { 0 };
	int steps = 0;

	if (pdma_sim_open(&sa, &sim))
		abort();
	pdma_domain_attr_init(&da);
	da.mr_mode = (uint32_t)take(&g, 2) & PDMA_MR_MODE_ALL;
	da.mr_key_size = take(&g, 1) % 9;
	da.sim = sim;
	if (pdma_domain_open(&da, &d))
		abort();
	if (pdma_cntr_open(d, &cntr))
		abort();

	while (g.n && steps++ < 64) {
		unsigned op = (unsigned)take(&g, 1) % 11, s = (unsigned)take(&g, 1) % NSLOT;
		uint8_t buf[256], back[256];
		uint64_t key, addr;
		size_t len;
		int ret;

		switch (op) {
		case 0: { /* register host memory */
			size_t off = take(&g, 2) % sizeof(arena);
			uint64_t access = take(&g, 1);

			len = take(&g, 2) % (sizeof(arena) - off + 1);
			if (mr[s])
				break;
			ret = pdma_mr_reg(d, arena + off, len, access, take(&g, 1) % 2,
					  take(&g, 1), 0, &mr[s], NULL);
			check(ret, reg_errs);
			if (ret)
				mr[s] = NULL;
			break;
		}
		case 1: { /* register sim GPU memory */
			struct iovec iov;
			struct pdma_mr_attr a = { .mr_iov = &iov, .iov_count = 1,
						  .iface = PDMA_HMEM_SIM };

			if (mr[s] || !gpu[s])
				break;
			iov.iov_base = (uint8_t *)gpu[s] + take(&g, 2) % 4096;
			iov.iov_len = take(&g, 3) % (1 << 18);
			a.access = take(&g, 1);
			ret = pdma_mr_regattr(d, &a, 0, &mr[s]);
			check(ret, reg_errs);
			if (ret)
				mr[s] = NULL;
			break;
		}
		case 2: /* close */
			if (!mr[s])
				break;
			key = pdma_mr_key(mr[s]);
			ret = pdma_mr_close(mr[s]);
			check(ret, misc_errs);
			if (!ret) {
				mr[s] = NULL;
				dead_key[s] = key;
			}
			break;
		case 3: /* allocate GPU memory */
			if (gpu[s])
				break;
			ret = pdma_sim_alloc(sim, take(&g, 3) % (1 << 19), &gpu[s]);
			check(ret, reg_errs);
			if (ret)
				gpu[s] = NULL;
			break;
		case 4: /* free GPU memory (registered or not) */
			if (!gpu[s])
				break;
			if (pdma_sim_free(sim, gpu[s]))
				abort();
			gpu[s] = NULL;
			break;
		case 5: /* DMA write, then read back what landed */
		case 6:
			if (!mr[s] || pdma_mr_key(mr[s]) == PDMA_KEY_NOTAVAIL)
				break;
			key = pdma_mr_key(mr[s]);
			addr = take(&g, 1) ? take(&g, 3) : take(&g, 8);
			len = take(&g, 1) % sizeof(buf);
			for (size_t i = 0; i < len; i++)
				buf[i] = (uint8_t)(i ^ steps);
			ret = pdma_sim_dma_write(d, key, addr, buf, len);
			check(ret, dma_errs);
			if (!ret && !pdma_sim_dma_read(d, key, addr, back, len) &&
			    memcmp(buf, back, len))
				abort(); /* the bytes did not land */
			break;
		case 7: { /* raw key round trip */
			uint8_t raw[64];
			size_t ks = take(&g, 1) % sizeof(raw);
			uint64_t base, mapped;

			if (!mr[s])
				break;
			ret = pdma_mr_raw_attr(mr[s], &base, raw, &ks, 0);
			check(ret, misc_errs);
			if (ret)
				break;
			raw[take(&g, 1) % ks] ^= (uint8_t)take(&g, 1);
			ret = pdma_mr_map_raw(d, base, raw, ks, &mapped, 0);
			check(ret, misc_errs);
			if (!ret)
				check(pdma_mr_unmap_key(d, mapped), misc_errs);
			break;
		}
		case 8: /* bind a counter, enable */
			if (!mr[s])
				break;
			check(pdma_mr_bind_cntr(mr[s], cntr, take(&g, 1) % 4), misc_errs);
			check(pdma_mr_enable(mr[s]), misc_errs);
			break;
		case 9: { /* refresh */
			struct iovec iov = { arena + take(&g, 2) % sizeof(arena), take(&g, 2) };

			if (mr[s])
				check(pdma_mr_refresh(mr[s], &iov, 1, 0), misc_errs);
			break;
		}
		case 10: /* a closed MR's key stays dead (unless reused by a new MR) */
			if (dead_key[s]) {
				bool live = false;

				for (int i = 0; i < NSLOT; i++)
					live |= mr[i] && pdma_mr_key(mr[i]) == dead_key[s];
				ret = pdma_sim_dma_write(d, dead_key[s], 0, "x", 1);
				if (!live && ret != -ENOKEY)
					abort();
			}
			break;
		}
	}

	/* Tear down: a closed counter lets its MRs close; everything goes. */
	if (pdma_cntr_close(cntr))
		abort();
	for (int i = 0; i < NSLOT; i++)
		if (mr[i] && pdma_mr_close(mr[i]))
			abort();
	for (int i = 0; i < NSLOT; i++)
		if (gpu[i] && pdma_sim_free(sim, gpu[i]))
			abort();
	if (pdma_domain_close(d) || pdma_sim_close(sim))
		abort();
	return 0;
}
