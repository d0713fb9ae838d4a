/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The in-guest test harness of peerdma.ko (tests/vm/pdtest/): the EXPECT
 * macros, the device wrappers every subject file uses (peerdma, the gpusim GPU
 * stand-in, the edu client) and the suite tables main.c runs.
 */
#ifndef PDTEST_HARNESS_H
#define PDTEST_HARNESS_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include <uapi/peerdma.h>
#include "gpusim_uapi.h"
#include "edu_uapi.h"

#define PAGE 4096UL
#define GPAGE 65536UL
#define SKIP 77		/* exit status of a skipped test */
/* results of a 32-bit build (gcc -m32: the compat ioctl path) are named m32/... */
#define ABI_TAG (sizeof(void *) == 4 ? "m32/" : "")

extern int fails;		/* EXPECT failures of the running test */
extern unsigned int cfg_seed;	/* of the DMA pattern (HOSTCHECK) */

#define FAIL(...)                                                        \
	do {                                                             \
		printf("  FAIL %s:%d: ", __func__, __LINE__);            \
		printf(__VA_ARGS__);                                     \
		printf("\n");                                            \
		fails++;                                                 \
	} while (0)

#define EXPECT(cond)                                                     \
	do {                                                             \
		if (!(cond))                                             \
			FAIL("%s", #cond);                               \
	} while (0)

#define EXPECT_EQ(a, b)                                                  \
	do {                                                             \
		long long _a = (long long)(a), _b = (long long)(b);      \
		if (_a != _b)                                            \
			FAIL("%s == %lld, want %s == %lld", #a, _a, #b, _b); \
	} while (0)

/* expr must fail with errno err */
#define EXPECT_ERR(expr, err)                                            \
	do {                                                             \
		errno = 0;                                               \
		long _r = (long)(expr);                                  \
		int _e = errno;                                          \
		if (_r != -1 || _e != (err))                             \
			FAIL("%s -> %ld errno %d (%s), want %s", #expr, _r, \
			     _e, strerror(_e), #err);                    \
	} while (0)

#define EXPECT_OK(expr)                                                  \
	do {                                                             \
		errno = 0;                                               \
		long _r = (long)(expr);                                  \
		if (_r < 0)                                              \
			FAIL("%s -> %ld errno %d (%s)", #expr, _r, errno, \
			     strerror(errno));                           \
	} while (0)

/* one functional test; each subject file offers a table ending in { NULL } */
struct pd_test {
	const char *name;
	void (*fn)(void);
};

extern const struct pd_test pd_abi_tests[];		/* abi.c */
extern const struct pd_test pd_host_tests[];		/* host.c */
extern const struct pd_test pd_counter_tests[];		/* counters.c */
extern const struct pd_test pd_gpu_tests[];		/* gpu.c */
extern const struct pd_test pd_isolation_tests[];	/* isolation.c */
extern const struct pd_test pd_dmabuf_tests[];		/* dmabuf.c */
extern const struct pd_test pd_client_tests[];		/* client.c */
extern const struct pd_test pd_lifetime_tests[];	/* lifetime.c */
extern const struct pd_test pd_strict_tests[];		/* strict.c */
extern const struct pd_test pd_fault_tests[];		/* faults.c */
/* nic.c: one control frame to tests/vm/nic-host.py (tests/vm/nic-system.sh) */
int nicctl_main(int argc, char **argv);
/* nic.c: zero the start of the GPU memory (tests/vm/nic-system.sh) */
int gpuzero_main(int argc, char **argv);
extern const struct pd_test pd_nic_tests[];		/* nic.c: drivers/e1000 */
extern const struct pd_test pd_final_tests[];		/* dmabuf.c: pdtest final */
void t_faults_alloc(void);			/* faults.c, in pd_final_tests */

/* the other modes of pdtest: failures (0: passed) */
int do_race(int seconds, long rounds);		/* race.c */
int do_fuzz(int seconds, uint64_t seed);	/* fuzz.c */
int do_rmmod(void);				/* lifetime.c */

/* harness.c */
double now(void);
int pd_open(void);
int gs_open(void);
int edu_open(void);
uint64_t gs_alloc(int gfd, uint64_t size, uint64_t *bar_off);
int gs_free(int gfd, uint64_t va);
struct gpusim_info gs_info(void);
int gs_export(int gfd, uint64_t va, uint64_t len);
long live_pins(void);
long orphans(void);		/* free-callback pins released elsewhere, awaiting the GPU free */
long module_refs(const char *mod);
int drop_cap(int cap);		/* from the effective set; 0 or -1 */
int write_file(const char *path, const char *v);
int write_param(const char *mod, const char *p, const char *v);
long read_param(const char *mod, const char *p);
struct peerdma_pin pin_req(uint32_t kind, uint32_t flags, uint64_t addr, uint64_t len);
uint64_t pin(int fd, uint32_t kind, uint32_t flags, uint64_t addr, uint64_t len,
	     struct peerdma_pin *out);
uint64_t pin_buf(int fd, int buf_fd, uint64_t off, uint64_t len, struct peerdma_pin *out);
int unpin(int fd, uint64_t h);
int query(int fd, uint64_t h, struct peerdma_query *q);
int get_pages(int fd, uint64_t h, uint64_t *addrs, uint32_t count, struct peerdma_get_pages *g);
int state_of(int fd, uint64_t h);
int read_event(int fd, struct peerdma_event *ev, int ms);
int xfer(int efd, int pfd, uint64_t sh, uint64_t soff, uint64_t dh, uint64_t doff, uint32_t len);
void *map_anon(size_t len);
void *map_gpu(int gfd, uint64_t bar_off, size_t len);
uint8_t pattern(unsigned int seed, size_t i);
int cmdline_has(const char *word);
int check_clean(const char *when);
void wait_clean(void);

#endif /* PDTEST_HARNESS_H */
