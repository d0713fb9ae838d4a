// SPDX-License-Identifier: MIT
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/gen_vs_ingest.h"

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
		assert_int_equal(json_integer_value(json_object_get(d, "received")),
				 packets - json_integer_value(json_object_get(s, "lost")));
	}
	return injected;
}
