/* SPDX-License-Identifier: MIT */
/* Test support: `peerdma gen -j`'s JSON against `peerdma ingest -j`'s, for
 * the tests that run both commands (test_ingest_cli, test_rx_xdp). */
#ifndef PDMA_TEST_GEN_VS_INGEST_H
#define PDMA_TEST_GEN_VS_INGEST_H

#include <jansson.h>
#include <stdint.h>

/* gen -> ingest as two processes in dir (a directory of the test's own):
 * `tool ingest -p port ingest_args -i 800 -j dir/i.json` in the background;
 * once it says it is listening, `tool gen -p port -s 3 -n 3000` with 5 per
 * mille losses (bursts of 16), duplicates and reorderings at 40,000 packets/s,
 * plus gen_args; then it waits for ingest to stop on its idle timeout. Both
 * JSON outputs are loaded into *gen and *ingest (the caller json_decref()s);
 * a failed command or a missing output fails the running test. */
void gen_to_ingest_run(const char *tool, const char *dir, uint16_t port, const char *ingest_args,
		       const char *gen_args, json_t **gen, json_t **ingest);

/* Traffic that never pauses (a live radio) must not hold a stop up: with
 * gen sending to port for 10 s (20,000 datagrams/s, one stream), `tool
 * ingest -p port ingest_args` ends within its receive loop's drain bound
 * (PDMA_RX_DRAIN_NS, 0.5 s) after its stop: how is "-d 1" (--duration),
 * "-c N" (--count, N under 20,000), or "" for SIGINT at 1 s (`timeout -s
 * INT 1`, status 124). Fails the running test unless ingest stops cleanly
 * (its JSON written) within 2.5 s with datagrams received (at least N for
 * --count), and its JSON's "ended_by" names that stop; prints what it saw. */
void stop_under_traffic(const char *tool, const char *dir, uint16_t port, const char *ingest_args,
			const char *how);

/* Per stream gen sent (packets data packets each; 0: a gen stopped early,
 * each stream as far as its report's "sent"): ingest counted exactly the
 * losses, duplicates and reorderings gen injected, nothing malformed, no
 * class mismatch, and received what was not lost. A failed check fails the
 * running cmocka test; returns how many injections there were in all. */
json_int_t gen_vs_ingest(json_t *gen, json_t *ingest, json_int_t packets);

#endif /* PDMA_TEST_GEN_VS_INGEST_H */
