// SPDX-License-Identifier: MIT
/*
 * peerdma demo: the whole path on the simulated GPU and DMA device, no
 * hardware needed. Registration (host and GPU memory), DMA through keys and
 * descriptors, access enforcement, revocation on free with address reuse,
 * then the VITA-49 data path on loopback (CPU deframer).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "peerdma/mr.h"
#include "mem/sim.h"
#include "opt.h"
#ifdef PDMA_HAVE_INGEST_DEMO
#include "loopback/demo.h"
#endif

#define RW (PDMA_READ | PDMA_WRITE | PDMA_REMOTE_READ | PDMA_REMOTE_WRITE)

struct demo {
	int failures;
};

/* Report one step: what was expected against what happened. */
static void step(struct demo *dm, const char *what, int got, int want)
{
	int ok = got == want;

	printf("  %-58s %s", what, ok ? "ok" : "FAILED");
	if (want < 0 || got < 0 || !ok)
		printf(" (%s%s)", got ? "" : "0", got ? pdma_strerror(got) : "");
	printf("\n");
	dm->failures += !ok;
}

static void log_line(void *arg, int level, const char *msg)
{
	(void)arg;
	printf("    [libpeerdma %s] %s\n", level <= 1 ? "error" : "info", msg);
}

static int run_registration(struct demo *dm)
{
	struct pdma_sim_attr sa = { .mem_size = 64u << 20, .bar_size = 32u << 20 };
	struct pdma_domain_attr da;
	struct pdma_sim_ptr_info pi;
	struct pdma_sim_stats st;
	struct pdma_sim *sim;
	struct pdma_domain *d;
	struct pdma_mr *host_mr, *back_mr, *gpu_mr, *ro_mr;
	static char host[4096], back[4096];
	struct iovec iov;
	struct pdma_mr_attr ga = { .mr_iov = &iov, .iov_count = 1, .access = RW,
				   .iface = PDMA_HMEM_SIM };
	unsigned char *gpu, *gpu2;
	uint64_t gkey, rkey;
	int ret;

	printf("== registration: host memory and a simulated GPU (64 MiB, 32 MiB BAR)\n");
	ret = pdma_sim_open(&sa, &sim);
	if (ret)
		return ret;
	pdma_domain_attr_init(&da);
	da.sim = sim;
	ret = pdma_domain_open(&da, &d);
	if (ret)
		goto out_sim;
	pdma_domain_set_log(d, log_line, NULL);
	printf("  domain mr_mode BASIC|LOCAL|HMEM, 8-byte provider keys, iov limit %zu\n",
	       (size_t)4);

	for (size_t i = 0; i < sizeof(host); i++)
		host[i] = (char)(i * 7 + 1);
	step(dm, "register host buffer 4 KiB (READ|WRITE)",
	     pdma_mr_reg(d, host, sizeof(host), PDMA_READ | PDMA_WRITE, 0, 0, 0, &host_mr, NULL), 0);
	step(dm, "register host buffer for the read-back",
	     pdma_mr_reg(d, back, sizeof(back), PDMA_READ | PDMA_WRITE, 0, 0, 0, &back_mr, NULL), 0);
	printf("    host key %#018llx (random, provider-chosen)\n",
	       (unsigned long long)pdma_mr_key(host_mr));

	step(dm, "allocate 1 MiB of GPU memory", pdma_sim_alloc(sim, 1u << 20, (void **)&gpu), 0);
	pdma_sim_ptr_info(sim, gpu, &pi);
	printf("    GPU buffer at %#llx (64 KiB-aligned), buffer ID %llu\n",
	       (unsigned long long)pi.base, (unsigned long long)pi.buffer_id);
	iov.iov_base = gpu;
	iov.iov_len = 1u << 20;
	step(dm, "register the GPU buffer (HMEM sim, all access)", pdma_mr_regattr(d, &ga, 0, &gpu_mr),
	     0);
	gkey = pdma_mr_key(gpu_mr);
	pdma_sim_get_stats(sim, &st);
	printf("    GPU key %#018llx, BAR in use %zu KiB of %zu KiB, %llu pin(s)\n",
	       (unsigned long long)gkey, st.bar_used >> 10, st.bar_size >> 10,
	       (unsigned long long)st.live_pins);

	printf("== DMA through the simulated device\n");
	step(dm, "DMA host -> GPU, 4 KiB at GPU+64 KiB (desc + key)",
	     pdma_sim_write(d, host, sizeof(host), pdma_mr_desc(host_mr),
			    (uintptr_t)gpu + 65536, gkey), 0);
	step(dm, "bytes in GPU memory match", memcmp(gpu + 65536, host, sizeof(host)) ? -EIO : 0, 0);
	step(dm, "DMA GPU -> host read-back buffer",
	     pdma_sim_read(d, back, sizeof(back), pdma_mr_desc(back_mr),
			   (uintptr_t)gpu + 65536, gkey), 0);
	step(dm, "read-back bytes match", memcmp(back, host, sizeof(host)) ? -EIO : 0, 0);
	step(dm, "local buffer without its desc (MR_LOCAL) is refused",
	     pdma_sim_write(d, host, 64, NULL, (uintptr_t)gpu, gkey), -EINVAL);
	step(dm, "DMA past the end of the GPU MR is refused",
	     pdma_sim_dma_write(d, gkey, (uintptr_t)gpu + (1u << 20) - 2, "xyz", 3), -EINVAL);
	/* cppcheck-suppress redundantAssignment ; the 1 MiB was read, through ga.mr_iov */
	iov.iov_len = 4096;
	ga.access = PDMA_REMOTE_READ;
	step(dm, "register 4 KiB of it again, REMOTE_READ only", pdma_mr_regattr(d, &ga, 0, &ro_mr),
	     0);
	step(dm, "remote write through the read-only key is refused",
	     pdma_sim_dma_write(d, pdma_mr_key(ro_mr), (uintptr_t)gpu, "x", 1), -EACCES);
	rkey = pdma_mr_key(ro_mr);
	step(dm, "close the read-only MR", pdma_mr_close(ro_mr), 0);
	step(dm, "its key is dead for the device",
	     pdma_sim_dma_write(d, rkey, (uintptr_t)gpu, "x", 1), -ENOKEY);

	printf("== revocation: GPU memory freed while registered, address reused\n");
	step(dm, "free the GPU buffer (free callback revokes the pin)", pdma_sim_free(sim, gpu), 0);
	pdma_sim_get_stats(sim, &st);
	printf("    free callbacks run: %llu, BAR in use now %zu KiB\n",
	       (unsigned long long)st.free_callbacks, st.bar_used >> 10);
	step(dm, "allocate again: same address, new buffer ID",
	     pdma_sim_alloc(sim, 1u << 20, (void **)&gpu2) || gpu2 != gpu ? -EIO : 0, 0);
	pdma_sim_ptr_info(sim, gpu2, &pi);
	printf("    GPU buffer at %#llx, buffer ID %llu\n", (unsigned long long)pi.base,
	       (unsigned long long)pi.buffer_id);
	step(dm, "stale key writing into the new owner's memory is refused",
	     pdma_sim_dma_write(d, gkey, (uintptr_t)gpu2 + 65536, "stale", 5), -EFAULT);
	step(dm, "the new owner's bytes are untouched", gpu2[65536] ? -EIO : 0, 0);

	step(dm, "close the revoked MR", pdma_mr_close(gpu_mr), 0);
	step(dm, "close host MRs", pdma_mr_close(host_mr) | pdma_mr_close(back_mr), 0);
	step(dm, "free GPU memory", pdma_sim_free(sim, gpu2), 0);
	pdma_sim_get_stats(sim, &st);
	printf("    pins taken %llu, released %llu, live %llu; DMA moved %llu bytes\n",
	       (unsigned long long)st.pins, (unsigned long long)st.unpins,
	       (unsigned long long)st.live_pins, (unsigned long long)st.dma_bytes);
	step(dm, "nothing left pinned", st.live_pins || st.bar_used ? -EBUSY : 0, 0);
	step(dm, "close the domain", pdma_domain_close(d), 0);
out_sim:
	if (pdma_sim_close(sim))
		dm->failures++;
	return ret;
}

/* Parse: 0 to run, 1 after --help, 2 after a one-line error. */
static int demo_parse(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct pdma_opt o;
	int c;

	pdma_opt_init(&o, "peerdma demo", opts, "h");
	while ((c = pdma_opt_next(&o, argc, argv)) != -1) {
		if (c != 'h')
			return 2; /* getopt_long said why, in one line */
		printf("usage: peerdma demo\n\nRuns registration, DMA and revocation on the "
		       "simulated GPU, then the VITA-49\ndata path on loopback. Exit 0 when "
		       "every step did what it should.\n");
		return 1;
	}
	return pdma_opt_end(&o, argc, argv);
}

int pdma_cmd_demo_check(int argc, char **argv)
{
	return demo_parse(argc, argv) == 2 ? 2 : 0;
}

int pdma_cmd_demo(int argc, char **argv)
{
	struct demo dm = { 0 };
	int ret = demo_parse(argc, argv);

	if (ret)
		return ret == 1 ? 0 : 2;
	ret = run_registration(&dm);
	if (ret) {
		fprintf(stderr, "peerdma demo: setup failed: %s\n", pdma_strerror(ret));
		return 1;
	}
#ifdef PDMA_HAVE_INGEST_DEMO
	printf("\n");
	fflush(stdout);
	if (pdma_ingest_demo(stdout))
		dm.failures++;
#endif
	printf("\ndemo: %s (%d failed step%s)\n", dm.failures ? "FAILED" : "ok", dm.failures,
	       dm.failures == 1 ? "" : "s");
	return dm.failures ? 1 : 0;
}
