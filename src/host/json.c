/*
 * JSON text -> json-c tree, the one parser of the process (HTTP bodies,
 * payloads, inbox rows). Strict RFC 8259: no raw control characters in
 * strings, no trailing commas, comments or single quotes, one value and
 * only white space after it. Each call makes its own parser, so an error
 * in one text can never leave state behind for the next (json-c's
 * tokener keeps a pending surrogate across a reset). Lua-free.
 */
#include "host/json.h"

#include <json-c/json_tokener.h>
#include <json-c/linkhash.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting is refused. */
#define MAX_DEPTH 100

/* A raw control character inside a string, or anywhere but white space: not JSON. */
static int bad_control(const char *s, size_t len)
{
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
            else if (c < 0x20)
                return 1;
        } else if (c == '"') {
            in_string = 1;
        } else if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            return 1;
        }
    }
    return 0;
}

static const char *parse_once(const char *s, size_t len, json_object **out)
{
    *out = NULL;
    json_tokener *tok = json_tokener_new_ex(MAX_DEPTH + 1); /* + 1: counts from 0 */
    if (!tok)
        return "out of memory";
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tok, s, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    if (err == json_tokener_continue) {
        /* A number, true, false or null ends the text: a NUL byte ends it. */
        o = json_tokener_parse_ex(tok, "", 1);
        err = json_tokener_get_error(tok);
        end = len;
    }
    json_tokener_free(tok);
    if (err != json_tokener_success) {
        json_object_put(o);
        return json_tokener_error_desc(err);
    }
    for (; end < len; end++) {
        char c = s[end];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            json_object_put(o);
            return "unexpected data after the value";
        }
    }
    *out = o;
    return NULL;
}

/* Whether the integer literal s[0..n) (an optional '-', digits) is outside int64. */
static int int_overflows(const char *s, size_t n)
{
    int neg = n > 0 && s[0] == '-';
    s += neg;
    n -= (size_t)neg;
    while (n > 1 && s[0] == '0') {
        s++;
        n--;
    }
    if (n != 19)
        return n > 19;
    return memcmp(s, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0;
}

/*
 * json-c saturates integer literals outside int64 (to INT64_MIN, or to
 * UINT64_MAX above it). Counts those literals outside strings (the parser is
 * strict: there are no comments or single quotes to skip), and when out is
 * not NULL writes the text there with ".0" after each, so that they parse as
 * the nearest double. out needs len + 2 * count bytes.
 */
static size_t widen_big_ints(const char *s, size_t len, char *out)
{
    size_t i = 0, copied = 0, o = 0, count = 0;
    while (i < len) {
        char c = s[i];
        if (c == '"') {
            for (i++; i < len && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i + (c == '-');
            while (j < len && s[j] >= '0' && s[j] <= '9')
                j++;
            if (j < len && (s[j] == '.' || s[j] == 'e' || s[j] == 'E')) {
                while (j < len && ((s[j] >= '0' && s[j] <= '9') || s[j] == '.' || s[j] == 'e' ||
                                   s[j] == 'E' || s[j] == '+' || s[j] == '-'))
                    j++;
            } else if (int_overflows(s + i, j - i)) {
                if (out) {
                    memcpy(out + o, s + copied, j - copied);
                    o += j - copied;
                    memcpy(out + o, ".0", 2);
                    o += 2;
                }
                copied = j;
                count++;
            }
            i = j;
        } else {
            i++;
        }
    }
    if (out)
        memcpy(out + o, s + copied, len - copied);
    return count;
}

/* Whether every number in o is finite (1e999 parses as infinity: not a value we can keep). */
static int all_finite(json_object *o)
{
    switch (json_object_get_type(o)) {
    case json_type_double: return isfinite(json_object_get_double(o));
    case json_type_array: {
        size_t n = json_object_array_length(o);
        for (size_t i = 0; i < n; i++)
            if (!all_finite(json_object_array_get_idx(o, i)))
                return 0;
        return 1;
    }
    case json_type_object:
        for (struct lh_entry *e = lh_table_head(json_object_get_object(o)); e; e = lh_entry_next(e))
            if (!all_finite((json_object *)lh_entry_v(e)))
                return 0;
        return 1;
    default: return 1;
    }
}

static const char *parse_checked(const char *s, size_t len, json_object **out)
{
    const char *why = parse_once(s, len, out);
    if (!why && *out && !all_finite(*out)) {
        json_object_put(*out);
        *out = NULL;
        why = "number out of range";
    }
    return why;
}

const char *wq_json_parse(const char *s, size_t len, json_object **out)
{
    *out = NULL;
    if (len >= INT_MAX / 2)
        return "text too long";
    if (bad_control(s, len))
        return "control character in a string";
    /* json-c saturates integers outside int64: make those literals doubles. */
    size_t count = widen_big_ints(s, len, NULL);
    if (count == 0)
        return parse_checked(s, len, out);
    size_t n = len + 2 * count;
    char *wide = malloc(n);
    if (!wide)
        return "out of memory";
    widen_big_ints(s, len, wide);
    const char *why = parse_checked(wide, n, out);
    free(wide);
    return why;
}
