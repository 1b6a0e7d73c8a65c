/*
 * libFuzzer target: the JSON decoder of HTTP bodies, payloads and inbox
 * rows (wq_json_parse, src/host/json.c). The first byte picks the mode:
 *
 *   even  the rest is one body. Decoding never crashes; a body that decodes
 *         re-encodes to text that decodes to an equal value.
 *   odd   the rest is several bodies separated by 0xFF bytes, decoded one
 *         after another in this process, as requests arrive. After each, a
 *         fixed valid body must decode exactly as it does in a fresh process:
 *         state one decode leaves behind for the next (json-c's shared
 *         tokener once kept a pending surrogate) shows here.
 *
 * Any difference aborts with both texts. Run by scripts/fuzz.sh.
 */
#include "host/json.h"

#include <json-c/json_object.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* Escapes, surrogate pairs, a control character, numbers of each kind. */
static const char probe[] =
    "{\"key\":\"caf\\u00e9\",\"payload\":\"A\\u0001B\\ud83d\\ude00\\\"\\\\\\/\","
    "\"n\":[0,-1,2.5e-3,9223372036854775807,9223372036854775808,-0.0,"
    "true,false,null,{},[]],\"g\":{\"\\u00e9\":\"\\t\"}}";

static char *probe_text; /* the probe, decoded fresh and encoded again */

static void fail(const char *what, const char *a, const char *b)
{
    fprintf(stderr, "fuzz_json: %s\n  first:  %s\n  second: %s\n", what, a ? a : "(null)",
            b ? b : "(null)");
    abort();
}

static char *encode(json_object *o)
{
    const char *t = json_object_to_json_string_ext(o, FLAGS);
    return t ? strdup(t) : NULL;
}

static void check_probe(void)
{
    json_object *o;
    const char *why = wq_json_parse(probe, sizeof probe - 1, &o);
    if (why)
        fail("the probe no longer decodes", why, probe);
    char *t = encode(o);
    json_object_put(o);
    if (!probe_text) {
        probe_text = t; /* the first decode is the fresh one */
        return;
    }
    if (!t || strcmp(t, probe_text) != 0)
        fail("a decode changed how the next body decodes", probe_text, t);
    free(t);
}

/* One body: no crash; a value re-encodes to text that decodes to an equal value. */
static void one(const char *s, size_t n)
{
    json_object *o;
    const char *why = wq_json_parse(s, n, &o);
    if (why) {
        if (o)
            fail("an error with a value", why, "");
        return;
    }
    char *t = encode(o);
    if (t) {
        json_object *back;
        const char *why2 = wq_json_parse(t, strlen(t), &back);
        if (why2)
            fail("the encoding of a decoded body does not decode", t, why2);
        if (!json_object_equal(o, back)) {
            char *u = encode(back);
            fail("a decoded body does not survive encoding", t, u);
        }
        json_object_put(back);
        free(t);
    }
    json_object_put(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!probe_text)
        check_probe();
    if (size == 0)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (!(data[0] & 1)) {
        one(s, n);
        return 0;
    }
    while (n > 0 || s == (const char *)data + 1) {
        const char *sep = memchr(s, 0xff, n);
        size_t len = sep ? (size_t)(sep - s) : n;
        one(s, len);
        check_probe();
        if (!sep)
            break;
        s = sep + 1;
        n -= len + 1;
    }
    return 0;
}
