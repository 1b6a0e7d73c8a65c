/*
 * The JSON parser (host/json.c): what json-c would change silently (a key
 * twice in one object, a key holding \u0000, a lone surrogate) is refused
 * with a message saying where; everything else is kept exactly. A random
 * model test writes objects whose keys it knows decoded, each written a
 * random way (raw or escaped), and checks the verdict against the model.
 */
#include <criterion/criterion.h>

#include "host/json.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *parse(const char *text, json_object **out)
{
    return wq_json_parse(text, strlen(text), out);
}

static void refused(const char *text, const char *why)
{
    json_object *o = (json_object *)1;
    const char *got = parse(text, &o);
    cr_assert_null(o, "%s: no tree", text);
    cr_assert(got && strcmp(got, why) == 0, "%s: expected '%s', got '%s'", text, why,
              got ? got : "(accepted)");
}

Test(json, refuses_what_json_c_would_change_saying_where)
{
    refused("{\"a\\u0000b\":1,\"a\\u0000c\":2}", "NUL byte in object key at $[\"a\\u0000b\"]");
    refused("{\"key\":\"k\",\"key\\u0000x\":\"n2\"}",
            "NUL byte in object key at $[\"key\\u0000x\"]");
    refused("{\"a\":1,\"a\":2}", "duplicate object key at $.a");
    refused("[{\"k\":1},{\"k\":2,\"p\":{\"x\":[0,{\"y\":1,\"y\":2}]}}]",
            "duplicate object key at $[1].p.x[1].y");
    refused("{\"n\":99999999999999999999,\"n\":1}", "duplicate object key at $.n"); /* widened */
    refused("\"\\ud800\"", "lone surrogate \\ud800 at $");
    refused("{\"s\":[\"\\ud800\\u0041\"]}", "lone surrogate \\ud800 at $.s[0]");
    refused("\"\\udc00\"", "lone surrogate \\udc00 at $");
    refused("\"x\\ud83d\\ude00\\ude00\"", "lone surrogate \\ude00 at $");
}

Test(json, keeps_nul_in_values_pairs_and_equal_keys_in_other_objects)
{
    json_object *o;
    const char *text = "{\"a\":\"x\\u0000y\",\"b\":{\"a\":1},\"c\":[{\"a\":2},{\"a\":3}],\"d\":"
                       "\"\\ud83d\\ude00\",\"e:f\":\":\"}";
    cr_assert_null(parse(text, &o));
    cr_assert_eq(json_object_object_length(o), 5);
    json_object *a = json_object_object_get(o, "a");
    cr_assert_eq(json_object_get_string_len(a), 3);
    cr_assert_eq(memcmp(json_object_get_string(a), "x\0y", 3), 0);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "d")), "\xf0\x9f\x98\x80");
    json_object_put(o);
}

Test(json, a_refused_text_leaves_nothing_for_the_next)
{
    for (int i = 0; i < 100; i++) {
        json_object *o;
        cr_assert_not_null(parse("{\"a\":1,\"a\":2}", &o));
        cr_assert_not_null(parse("\"\\ud800", &o));
        cr_assert_null(parse("{\"a\":\"caf\\u00e9\"}", &o));
        cr_assert_str_eq(json_object_get_string(json_object_object_get(o, "a")), "caf\xc3\xa9");
        json_object_put(o);
    }
}

/* ---- the random model ---- */

typedef struct text {
    char buf[1 << 16];
    size_t n;
    int dup, nul_key, lone; /* the problems written */
} text;

static void put(text *t, const char *s)
{
    size_t n = strlen(s);
    cr_assert(t->n + n < sizeof t->buf);
    memcpy(t->buf + t->n, s, n);
    t->n += n;
}

/* Key pieces: decoded form (len) and ways to write it. */
static const struct piece {
    const char *dec;
    size_t declen;
    const char *ways[3];
} pieces[] = {
    {"a", 1, {"a", "\\u0061", "\\u0041" /* not a: 'A' */}},
    {"\xc3\xa9", 2, {"\xc3\xa9", "\\u00e9", "\\u00E9"}},
    {"\xf0\x9f\x98\x80", 4, {"\xf0\x9f\x98\x80", "\\ud83d\\ude00", "\\uD83D\\uDE00"}},
    {"\0", 1, {"\\u0000", "\\u0000", "\\u0000"}},
    {"\"", 1, {"\\\"", "\\u0022", "\\\""}},
    {":", 1, {":", "\\u003a", ":"}},
};

static void random_value(text *t, int depth);

static void random_object(text *t, int depth)
{
    char keys[8][16];
    size_t lens[8];
    int n = rand() % 5;
    put(t, "{");
    for (int i = 0; i < n; i++) {
        if (i)
            put(t, ",");
        put(t, "\"");
        size_t len = 0;
        int m = rand() % 3;
        for (int j = 0; j < m; j++) {
            const struct piece *p = &pieces[rand() % 6];
            int way = rand() % 3;
            if (p == &pieces[0] && way == 2) { /* 'A' */
                keys[i][len++] = 'A';
            } else {
                memcpy(keys[i] + len, p->dec, p->declen);
                len += p->declen;
                if (p->dec[0] == '\0')
                    t->nul_key = 1;
            }
            put(t, p->ways[way]);
        }
        if (rand() % 40 == 0) {
            put(t, "\\udbff");
            t->lone = 1;
            keys[i][len++] = '?';
        }
        lens[i] = len;
        for (int k = 0; k < i; k++)
            if (lens[k] == len && memcmp(keys[k], keys[i], len) == 0)
                t->dup = 1;
        put(t, "\":");
        random_value(t, depth + 1);
    }
    put(t, "}");
}

static void random_value(text *t, int depth)
{
    switch (depth >= 4 ? 3 + rand() % 3 : rand() % 6) {
    case 0:
    case 1: random_object(t, depth); break;
    case 2: {
        put(t, "[");
        int n = rand() % 4;
        for (int i = 0; i < n; i++) {
            if (i)
                put(t, ", ");
            random_value(t, depth + 1);
        }
        put(t, "]");
        break;
    }
    case 3: {
        static const char *strs[] = {"\"x\\u0000y\"", "\"\\ud83d\\ude00\"", "\"a:b\"",
                                     "\"\\\\ud800\"" /* an escaped backslash */};
        if (rand() % 50 == 0) {
            put(t, "\"\\udc00x\"");
            t->lone = 1;
        } else {
            put(t, strs[rand() % 4]);
        }
        break;
    }
    case 4: put(t, rand() % 2 ? "123456789012345678901" : "-1.5e3"); break;
    default: put(t, rand() % 2 ? "true" : "null");
    }
}

Test(json, random_texts_are_refused_exactly_when_they_would_change)
{
    srand(20261124);
    int refusals[3] = {0};
    text *t = malloc(sizeof *t);
    cr_assert_not_null(t);
    for (int i = 0; i < 20000; i++) {
        t->n = 0;
        t->dup = t->nul_key = t->lone = 0;
        random_object(t, 0);
        t->buf[t->n] = '\0';
        json_object *o;
        const char *why = wq_json_parse(t->buf, t->n, &o);
        int bad = t->dup || t->nul_key || t->lone;
        cr_assert_eq(why != NULL, bad, "%s: %s (dup %d nul %d lone %d)", t->buf,
                     why ? why : "accepted", t->dup, t->nul_key, t->lone);
        if (why) {
            int kind = strncmp(why, "duplicate object key at $", 25) == 0     ? 0
                       : strncmp(why, "NUL byte in object key at $", 27) == 0 ? 1
                       : strncmp(why, "lone surrogate \\u", 17) == 0          ? 2
                                                                              : -1;
            cr_assert((kind == 0 && t->dup) || (kind == 1 && t->nul_key) || (kind == 2 && t->lone),
                      "%s: %s (dup %d nul %d lone %d)", t->buf, why, t->dup, t->nul_key, t->lone);
            refusals[kind]++;
        }
        json_object_put(o);
    }
    free(t);
    for (int k = 0; k < 3; k++)
        cr_assert_gt(refusals[k], 100, "each kind of refusal was tried (%d: %d)", k, refusals[k]);
}
