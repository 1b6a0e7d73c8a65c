/*
 * JSON text -> json-c tree, the one parser of the process (HTTP bodies,
 * payloads, inbox rows). Strict RFC 8259: no raw control characters in
 * strings, no trailing commas, comments or single quotes, one value and
 * only white space after it. Each call makes its own parser, so an error
 * in one text can never leave state behind for the next (json-c's
 * tokener keeps a pending surrogate across a reset). Lua-free.
 *
 * What json-c would change silently is refused, so that a value always
 * arrives exactly as sent: an object key holding \u0000 (json-c keeps keys
 * as C strings, cut at the NUL), a key given twice in one object (the last
 * would win) and a lone UTF-16 surrogate (it would become U+FFFD). The scan
 * for raw control characters notes the first two kinds and counts the
 * members of all objects; a tree with fewer members has lost one to a
 * duplicate. Only then is the text walked again, to say where.
 */
#include "host/json.h"

#include <ctype.h>
#include <json-c/json_tokener.h>
#include <json-c/linkhash.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting is refused. */
#define MAX_DEPTH 100

#define NONE SIZE_MAX

/* What the scan saw in a text with no raw control character. */
typedef struct scan {
    size_t members;   /* ':' outside strings: one per object member */
    size_t nul_key;   /* offset of the first \u0000 in an object key, or NONE */
    size_t surrogate; /* offset of the first lone surrogate's escape, or NONE */
} scan;

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The code unit of the escape \uXXXX at s[i], or -1 when there is none (the parser says why). */
static long unit_at(const char *s, size_t len, size_t i)
{
    if (i >= len || len - i < 6 || s[i] != '\\' || s[i + 1] != 'u')
        return -1;
    long u = 0;
    for (size_t k = i + 2; k < i + 6; k++) {
        int h = hex(s[k]);
        if (h < 0)
            return -1;
        u = u << 4 | h;
    }
    return u;
}

/*
 * Returns 1 when a raw control character is inside a string, or anywhere
 * but white space (not JSON). Otherwise fills *sc.
 */
static int scan_text(const char *s, size_t len, scan *sc)
{
    int in_string = 0;
    size_t nul = NONE;      /* the \u0000 of the string being read */
    size_t last_nul = NONE; /* the one of the last string read: a key if ':' follows */
    sc->members = 0;
    sc->nul_key = NONE;
    sc->surrogate = NONE;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (in_string) {
            if (c == '\\') {
                long u = unit_at(s, len, i);
                if (u < 0) {
                    i++; /* a one-character escape (or an error json-c reports) */
                    continue;
                }
                if (u == 0 && nul == NONE)
                    nul = i;
                if (u >= 0xD800 && u <= 0xDFFF) {
                    long lo = unit_at(s, len, i + 6);
                    if (u <= 0xDBFF && lo >= 0xDC00 && lo <= 0xDFFF)
                        i += 6; /* a pair */
                    else if (sc->surrogate == NONE)
                        sc->surrogate = i;
                }
                i += 5;
            } else if (c == '"') {
                in_string = 0;
                last_nul = nul;
                nul = NONE;
            } else if (c < 0x20) {
                return 1;
            }
        } else if (c == '"') {
            in_string = 1;
        } else if (c == ':') {
            sc->members++;
            if (last_nul != NONE && sc->nul_key == NONE)
                sc->nul_key = last_nul;
        } else if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            return 1;
        }
    }
    return 0;
}

/*
 * A parse error with where it is: "unexpected character at line 1, column 2 (near 'not
 * json')" — the word or character the tokener stopped in, from its start.
 */
static const char *where(const char *s, size_t len, size_t at, const char *what)
{
    static _Thread_local char msg[200];
    if (at > len)
        at = len;
    size_t from = at;
    while (from > 0 && isalnum((unsigned char)s[from - 1]))
        from--;
    int line = 1, col = 1;
    for (size_t i = 0; i < from; i++) {
        if (s[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    if (from == len) {
        snprintf(msg, sizeof msg, "%s at the end (line %d, column %d)", what, line, col);
        return msg;
    }
    char near[40];
    size_t n = 0;
    for (size_t i = from; i < len && n < 24 && s[i] != '\n' && s[i] != '\r'; i++)
        near[n++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    near[n] = '\0';
    snprintf(msg, sizeof msg, "%s at line %d, column %d (near '%s%s')", what, line, col, near,
             from + n < len && s[from + n] != '\n' && s[from + n] != '\r' ? "..." : "");
    return msg;
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
        return where(s, len, end, json_tokener_error_desc(err));
    }
    for (; end < len; end++) {
        char c = s[end];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            json_object_put(o);
            return where(s, len, end, "unexpected data after the value");
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

/*
 * Whether every number in o is finite (1e999 parses as infinity: not a
 * value we can keep); adds the members of o's objects to *members.
 */
static int check_tree(json_object *o, size_t *members)
{
    switch (json_object_get_type(o)) {
    case json_type_double: return isfinite(json_object_get_double(o));
    case json_type_array: {
        size_t n = json_object_array_length(o);
        for (size_t i = 0; i < n; i++)
            if (!check_tree(json_object_array_get_idx(o, i), members))
                return 0;
        return 1;
    }
    case json_type_object:
        for (struct lh_entry *e = lh_table_head(json_object_get_object(o)); e;
             e = lh_entry_next(e)) {
            ++*members;
            if (!check_tree((json_object *)lh_entry_v(e), members))
                return 0;
        }
        return 1;
    default: return 1;
    }
}

/* ---- saying where: a second walk of a text json-c accepted ---- */

#define PATH_SHOWN 96 /* bytes of the path in a message */
#define KEY_SHOWN 32  /* bytes of one key in it */

typedef struct key_seen {
    const char *raw; /* as written, between the quotes */
    size_t rawlen;
    char *dec; /* decoded, to compare */
    size_t declen;
} key_seen;

typedef struct walker {
    const char *s;
    size_t len, i;
    const scan *sc;
    int dups;         /* look for duplicate keys */
    const char *what; /* the problem found, NULL until then */
    char path[PATH_SHOWN + 8];
    size_t plen;
} walker;

static void skip_space(walker *w)
{
    while (w->i < w->len &&
           (w->s[w->i] == ' ' || w->s[w->i] == '\t' || w->s[w->i] == '\n' || w->s[w->i] == '\r'))
        w->i++;
}

/* The offset just past the string whose opening quote is at s[i]. */
static size_t string_end(const walker *w, size_t i)
{
    for (i++; i < w->len && w->s[i] != '"'; i++)
        if (w->s[i] == '\\')
            i++;
    return i < w->len ? i + 1 : w->len;
}

static void path_add(walker *w, const char *seg, size_t n)
{
    if (w->plen >= 3 && memcmp(w->path + w->plen - 3, "...", 3) == 0)
        return; /* cut already */
    if (w->plen + n > PATH_SHOWN) {
        seg = "...";
        n = 3;
    }
    memcpy(w->path + w->plen, seg, n);
    w->plen += n;
    w->path[w->plen] = '\0';
}

/* Appends .key, or ["key"] as written (its first KEY_SHOWN bytes) when it is not a plain name. */
static void path_key(walker *w, const char *raw, size_t n)
{
    int plain = n > 0 && n <= KEY_SHOWN && !(raw[0] >= '0' && raw[0] <= '9');
    for (size_t k = 0; k < n && plain; k++) {
        char c = raw[k];
        plain =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }
    char seg[KEY_SHOWN + 8];
    size_t m = 0;
    if (plain) {
        seg[m++] = '.';
        memcpy(seg + m, raw, n);
        m += n;
    } else {
        size_t cut = n;
        if (cut > KEY_SHOWN) {
            cut = KEY_SHOWN;
            while (cut > 0 && ((unsigned char)raw[cut] & 0xC0) == 0x80)
                cut--; /* not inside a UTF-8 sequence */
        }
        memcpy(seg, "[\"", 2);
        m = 2;
        memcpy(seg + m, raw, cut);
        m += cut;
        if (cut < n) {
            memcpy(seg + m, "...", 3);
            m += 3;
        }
        memcpy(seg + m, "\"]", 2);
        m += 2;
    }
    path_add(w, seg, m);
}

/* Whether the string s[start..end) holds the problem the scan saw; if so, says which. */
static int holds_problem(walker *w, size_t start, size_t end)
{
    if (w->sc->nul_key >= start && w->sc->nul_key < end)
        w->what = "NUL byte in object key";
    else if (w->sc->surrogate >= start && w->sc->surrogate < end)
        w->what = "lone surrogate";
    return w->what != NULL;
}

static void put_utf8(char *out, size_t *n, unsigned long cp)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | cp >> 18);
        out[(*n)++] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* The bytes of the string content raw[0..n) (escapes decoded) in a new buffer, or NULL. */
static char *decode(const char *raw, size_t n, size_t *outlen)
{
    char *out = malloc(n + 1); /* an escape is never shorter than what it stands for */
    if (!out)
        return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (raw[i] != '\\' || i + 1 >= n) {
            out[m++] = raw[i];
            continue;
        }
        char c = raw[++i];
        long u = unit_at(raw, n, i - 1);
        if (u >= 0) {
            unsigned long cp = (unsigned long)u;
            long lo = unit_at(raw, n, i + 5);
            if (u >= 0xD800 && u <= 0xDBFF && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (unsigned long)(lo - 0xDC00);
                i += 6;
            }
            put_utf8(out, &m, cp);
            i += 4;
            continue;
        }
        switch (c) {
        case 'b': out[m++] = '\b'; break;
        case 'f': out[m++] = '\f'; break;
        case 'n': out[m++] = '\n'; break;
        case 'r': out[m++] = '\r'; break;
        case 't': out[m++] = '\t'; break;
        default: out[m++] = c; /* " \ / */
        }
    }
    *outlen = m;
    return out;
}

static int key_order(const void *a, const void *b)
{
    const key_seen *x = a, *y = b;
    size_t n = x->declen < y->declen ? x->declen : y->declen;
    int r = memcmp(x->dec, y->dec, n);
    if (r == 0 && x->declen != y->declen)
        r = x->declen < y->declen ? -1 : 1;
    if (r == 0) /* equal keys in the order written */
        r = x->raw < y->raw ? -1 : x->raw > y->raw;
    return r;
}

/* The first key of keys[0..n) written again after an equal one, or NULL. */
static const key_seen *first_repeat(key_seen *keys, size_t n)
{
    qsort(keys, n, sizeof *keys, key_order);
    const key_seen *found = NULL;
    for (size_t k = 1; k < n; k++)
        if (keys[k].declen == keys[k - 1].declen &&
            memcmp(keys[k].dec, keys[k - 1].dec, keys[k].declen) == 0 &&
            (!found || keys[k].raw < found->raw))
            found = &keys[k];
    return found;
}

static int walk_value(walker *w);

/* Walks the object at w->i; 1 when the walk is over (a problem found, or out of memory). */
static int walk_object(walker *w)
{
    key_seen *keys = NULL;
    size_t n = 0, cap = 0, here = w->plen;
    int over = 0;
    w->i++; /* '{' */
    for (;;) {
        skip_space(w);
        if (w->i >= w->len || w->s[w->i] == '}') {
            w->i++;
            break;
        }
        if (w->s[w->i] == ',') {
            w->i++;
            skip_space(w);
        }
        size_t start = w->i, end = string_end(w, start);
        const char *raw = w->s + start + 1;
        size_t rawlen = end - start - 2;
        path_key(w, raw, rawlen);
        if (holds_problem(w, start, end)) {
            over = 1;
            break;
        }
        if (w->dups) {
            if (n == cap) {
                size_t ncap = cap ? 2 * cap : 16;
                key_seen *grown = realloc(keys, ncap * sizeof *keys);
                if (!grown) {
                    over = 1;
                    break;
                }
                keys = grown;
                cap = ncap;
            }
            keys[n].raw = raw;
            keys[n].rawlen = rawlen;
            keys[n].dec = decode(raw, rawlen, &keys[n].declen);
            if (!keys[n].dec) {
                over = 1;
                break;
            }
            n++;
        }
        w->i = end;
        skip_space(w);
        w->i++; /* ':' */
        if (walk_value(w)) {
            over = 1;
            break;
        }
        w->plen = here;
        w->path[here] = '\0';
    }
    if (!over && n > 1) {
        const key_seen *again = first_repeat(keys, n);
        if (again) {
            path_key(w, again->raw, again->rawlen);
            w->what = "duplicate object key";
            over = 1;
        }
    }
    for (size_t k = 0; k < n; k++)
        free(keys[k].dec);
    free(keys);
    return over;
}

static int walk_array(walker *w)
{
    size_t here = w->plen;
    w->i++; /* '[' */
    for (size_t idx = 0;; idx++) {
        skip_space(w);
        if (w->i >= w->len || w->s[w->i] == ']') {
            w->i++;
            return 0;
        }
        if (w->s[w->i] == ',') {
            w->i++;
            skip_space(w);
        }
        char seg[32];
        int m = snprintf(seg, sizeof seg, "[%zu]", idx);
        path_add(w, seg, (size_t)m);
        if (walk_value(w))
            return 1;
        w->plen = here;
        w->path[here] = '\0';
    }
}

static int walk_value(walker *w)
{
    skip_space(w);
    if (w->i >= w->len)
        return 0;
    switch (w->s[w->i]) {
    case '{': return walk_object(w);
    case '[': return walk_array(w);
    case '"': {
        size_t end = string_end(w, w->i);
        if (holds_problem(w, w->i, end))
            return 1;
        w->i = end;
        return 0;
    }
    default: /* a number, true, false or null */
        while (w->i < w->len && !strchr(",]} \t\n\r", w->s[w->i]))
            w->i++;
        return 0;
    }
}

/* Why the text s (valid JSON to json-c) cannot be kept exactly, with where. */
static const char *locate(const char *s, size_t len, const scan *sc, int dups)
{
    static _Thread_local char msg[160];
    walker w = {.s = s, .len = len, .sc = sc, .dups = dups, .path = "$", .plen = 1};
    walk_value(&w);
    if (!w.what) /* out of memory while walking */
        return dups                  ? "duplicate object key"
               : sc->nul_key != NONE ? "NUL byte in object key"
                                     : "lone surrogate";
    if (strcmp(w.what, "lone surrogate") == 0)
        snprintf(msg, sizeof msg, "lone surrogate %.6s at %s", s + sc->surrogate, w.path);
    else
        snprintf(msg, sizeof msg, "%s at %s", w.what, w.path);
    return msg;
}

const char *wq_json_parse(const char *s, size_t len, json_object **out)
{
    *out = NULL;
    if (len >= INT_MAX / 2)
        return "text too long";
    scan sc;
    if (scan_text(s, len, &sc))
        return "control character in a string";
    /* json-c saturates integers outside int64: make those literals doubles. */
    size_t count = widen_big_ints(s, len, NULL);
    const char *why;
    if (count == 0) {
        why = parse_once(s, len, out);
    } else {
        size_t n = len + 2 * count;
        char *wide = malloc(n);
        if (!wide)
            return "out of memory";
        widen_big_ints(s, len, wide);
        why = parse_once(wide, n, out);
        free(wide);
    }
    if (why)
        return why;
    size_t members = 0;
    if (*out && !check_tree(*out, &members))
        why = "number out of range";
    else if (sc.nul_key != NONE || sc.surrogate != NONE || members != sc.members)
        why = locate(s, len, &sc, members != sc.members);
    if (why) {
        json_object_put(*out);
        *out = NULL;
    }
    return why;
}
