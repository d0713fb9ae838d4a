// SPDX-License-Identifier: MIT
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "support/gen_vs_ingest.h"

void gen_to_ingest_run(const char *tool, const char *dir, uint16_t port, const char *ingest_args,
		       const char *gen_args, json_t **gen, json_t **ingest)
{
	char cmd[2048], p[256];
	json_error_t err;
	int st;

	/* Start gen only once ingest says it is listening (its socket is
	 * bound), then wait for ingest to stop on its idle timeout. */
	snprintf(cmd, sizeof(cmd),
		 "rm -f %s/err; (%s ingest -p %u %s -i 800 -j %s/i.json 2>%s/err >/dev/null & echo $! > %s/pid); "
		 "for k in $(seq 200); do grep -q listening %s/err 2>/dev/null && break; sleep 0.05; done; "
		 "%s gen -p %u -s 3 -n 3000 --loss 5 --loss-burst 16 --dup 5 --reorder 5 -r 40000 %s -j > %s/g.json && "
		 "while kill -0 $(cat %s/pid) 2>/dev/null; do sleep 0.1; done",
		 dir, tool, port, ingest_args, dir, dir, dir, dir, tool, port, gen_args, dir, dir);
	st = system(cmd);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	snprintf(p, sizeof(p), "%s/g.json", dir);
	*gen = json_load_file(p, 0, &err);
	snprintf(p, sizeof(p), "%s/i.json", dir);
	*ingest = json_load_file(p, 0, &err);
	assert_non_null(*gen);
	assert_non_null(*ingest);
	assert_string_equal(json_string_value(json_object_get(*ingest, "ended_by")), "idle");
}

void stop_under_traffic(const char *tool, const char *dir, uint16_t port, const char *ingest_args,
			const char *how)
{
	char cmd[2048], p[256];
	json_error_t err;
	json_t *j;
	int st, want = *how ? 0 : 124;

	snprintf(cmd, sizeof(cmd), "%s gen -p %u -s 1 -n 200000 -r 20000 >/dev/null 2>&1 & echo $! >%s/gen.pid",
		 tool, port, dir);
	assert_int_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s %s ingest -p %u %s %s -q -j %s/stop.json 2>%s/stop.err",
		 *how ? "" : "timeout -s INT 1", tool, port, ingest_args, how, dir, dir);
	st = system(cmd);
	st = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	/* gen may be gone already (it sent its 10 s: ingest ran as long) */
	snprintf(cmd, sizeof(cmd), "kill $(cat %s/gen.pid) 2>/dev/null; [ %d = %d ] || cat %s/stop.err; true",
		 dir, st, want, dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(st, want);
	snprintf(p, sizeof(p), "%s/stop.json", dir);
	j = json_load_file(p, 0, &err);
	assert_non_null(j);
	double secs = json_real_value(json_object_get(j, "seconds"));
	json_int_t n = json_integer_value(json_object_get(j, "datagrams"));
	printf("ingest %s, %s: stopped after %.2f s, %lld datagrams\n", ingest_args,
	       *how ? how : "SIGINT at 1 s", secs, (long long)n);
	/* datagrams came (the stop had traffic to wait for); 1 s, the
	 * bound, and 1 s for a loaded machine or a sanitizer */
	assert_true(n > 0);
	assert_true(secs < 2.5);
	const char *by = json_string_value(json_object_get(j, "ended_by"));
	assert_non_null(by);
	if (!strncmp(how, "-c ", 3)) {
		assert_string_equal(by, "count");
		assert_true(n >= atoll(how + 3));
	} else {
		assert_string_equal(by, *how ? "duration" : "signal");
	}
	json_decref(j);
}

static json_t *stream_by_id(json_t *arr, json_int_t id)
{
	size_t i;
	json_t *s;

	json_array_foreach(arr, i, s)
		if (json_integer_value(json_object_get(s, "stream_id")) == id)
			return s;
	return NULL;
}

json_int_t gen_vs_ingest(json_t *gen, json_t *ingest, json_int_t packets)
{
	static const char *const keys[] = { "lost", "duplicated", "reordered" };
	json_int_t injected = 0;
	size_t i;
	json_t *s;

	json_array_foreach(json_object_get(gen, "streams"), i, s) {
		json_t *d = stream_by_id(json_object_get(ingest, "streams"),
					 json_integer_value(json_object_get(s, "stream_id")));
		assert_non_null(d);
		for (int k = 0; k < 3; k++) {
			assert_int_equal(json_integer_value(json_object_get(d, keys[k])),
					 json_integer_value(json_object_get(s, keys[k])));
			injected += json_integer_value(json_object_get(s, keys[k]));
		}
		assert_int_equal(json_integer_value(json_object_get(d, "malformed")), 0);
		/* gen keeps each stream's class ID: the report has the counter,
		 * and it is 0 */
		assert_non_null(json_object_get(d, "class_mismatch"));
		assert_int_equal(json_integer_value(json_object_get(d, "class_mismatch")), 0);
		/* a stream of packets data packets lost some; one gen stopped
		 * (packets 0) sent what its report says, duplicates counted */
		assert_int_equal(json_integer_value(json_object_get(d, "received")),
				 packets ? packets - json_integer_value(json_object_get(s, "lost"))
					 : json_integer_value(json_object_get(s, "sent")) -
					   json_integer_value(json_object_get(s, "duplicated")));
	}
	return injected;
}
