/*
 * Cron specs (see cron.h for the grammar): a parsed spec is one bit set per
 * field, and "next" walks the calendar field by field, jumping to the next
 * set bit of a field instead of stepping minute by minute, so a search is a
 * few dozen steps even for a spec that never fires (about 30 per year).
 *
 * The walk runs over "wall seconds": a civil date and time counted like Unix
 * time but without a zone. In UTC a wall second is the instant. In local
 * time each matching wall time is turned into an instant by probing the
 * zone's offsets with localtime_r around it, rather than by mktime: what
 * mktime does with tm_isdst = -1 for a skipped or a repeated wall time is
 * unspecified (glibc moves 02:30 in a gap to 03:30 or 01:30, and picks
 * either occurrence of 01:30 depending on earlier calls), while the SPEC
 * asks for the end of the gap and the first occurrence. The resulting map
 * from wall time to instant never decreases, so the first matching wall
 * time whose instant lies after `after` is the answer.
 */
#include "engine/cron.h"

#include "engine/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define DAY 86400
#define HORIZON_DAYS (8 * 366)
#define NONE INT64_MAX /* no match / no instant */
#define FAIL INT64_MIN /* localtime_r failed */
/* Years 1 to 9990 in Unix seconds: the civil arithmetic and time_t are safe there. */
#define T_MIN (-62135596800.0)
#define T_MAX (253087545600.0 - (double)HORIZON_DAYS * DAY)

enum { DOM_STAR = 1, DOW_STAR = 2 };

struct wq_cron {
    uint64_t min;  /* bit n: minute n (0-59) */
    uint32_t hour; /* bit n: hour n (0-23) */
    uint32_t dom;  /* bit n: day n of the month (1-31) */
    uint16_t mon;  /* bit n: month n (1-12) */
    uint8_t dow;   /* bit n: weekday n, Sunday = 0 (a parsed 7 is folded into 0) */
    uint8_t flags; /* DOM_STAR, DOW_STAR: the field's text starts with '*' */
    double every;  /* > 0: an @every spec, the interval in seconds */
};

/* ---- parsing ---------------------------------------------------------- */

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static const struct field {
    const char *name;
    int lo, hi;               /* accepted values */
    int star_hi;              /* where "*" and "a/n" stop (day-of-week: 6, 7 is a second Sunday) */
    const char *const *names; /* names[i] is value i + name_base */
    int nnames, name_base;
    const char *name_hint;
} fields[5] = {
    {"minute", 0, 59, 59, NULL, 0, 0, NULL},
    {"hour", 0, 23, 23, NULL, 0, 0, NULL},
    {"day-of-month", 1, 31, 31, NULL, 0, 0, NULL},
    {"month", 1, 12, 12, month_names, 12, 1, "jan-dec"},
    {"day-of-week", 0, 7, 6, day_names, 7, 0, "sun-sat"},
};

static const struct macro {
    const char *name, *expansion;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes the reason into err (when there is room) and returns WQ_EINVAL. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return WQ_EINVAL;
}

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static char lower(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

/* Case-insensitive comparison of s[0..n) with the NUL-terminated word. */
static int same_word(const char *s, size_t n, const char *word)
{
    size_t i;
    for (i = 0; i < n && word[i]; i++)
        if (lower(s[i]) != word[i])
            return 0;
    return i == n && word[i] == '\0';
}

/* Field parsing state: the field, its number (1-5), and where errors go. */
struct fctx {
    const struct field *f;
    int num;
    char *err;
    size_t errlen;
};

static int field_fail(const struct fctx *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* fail() with the "field N (name): " prefix. */
static int field_fail(const struct fctx *x, const char *fmt, ...)
{
    if (x->err && x->errlen) {
        int n = snprintf(x->err, x->errlen, "field %d (%s): ", x->num, x->f->name);
        if (n > 0 && (size_t)n < x->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return WQ_EINVAL;
}

/* A value (number or name) at *p, before end; advances *p. */
static int parse_value(const struct fctx *x, const char **p, const char *end, int *out)
{
    const struct field *f = x->f;
    const char *s = *p, *q = s;
    if (q < end && is_digit(*q)) {
        long v = 0;
        while (q < end && is_digit(*q)) {
            if (v < 1000000)
                v = v * 10 + (*q - '0');
            q++;
        }
        if (v < f->lo || v > f->hi)
            return field_fail(x, "%.*s is out of range %d-%d", (int)(q - s), s, f->lo, f->hi);
        *out = (int)v;
        *p = q;
        return 0;
    }
    if (q < end && is_alpha(*q)) {
        while (q < end && is_alpha(*q))
            q++;
        size_t n = (size_t)(q - s);
        if (!f->names)
            return field_fail(x, "expected a number, got \"%.*s\"", (int)n, s);
        for (int i = 0; i < f->nnames; i++) {
            if (same_word(s, n, f->names[i])) {
                *out = i + f->name_base;
                *p = q;
                return 0;
            }
        }
        return field_fail(x, "unknown name \"%.*s\" (use %s)", (int)n, s, f->name_hint);
    }
    if (q == end)
        return field_fail(x, "missing value");
    return field_fail(x, "unexpected \"%c\"", *q);
}

/* One list item [s, end) into *bits. */
static int parse_item(const struct fctx *x, const char *s, const char *end, uint64_t *bits)
{
    const struct field *f = x->f;
    const char *p = s;
    int lo, hi, step = 1, rc;
    int single = 0;
    if (p == end)
        return field_fail(x, "empty list item");
    if (*p == '*') {
        lo = f->lo;
        hi = f->star_hi;
        p++;
    } else {
        if ((rc = parse_value(x, &p, end, &lo)))
            return rc;
        hi = lo;
        single = 1;
        if (p < end && *p == '-') {
            p++;
            if ((rc = parse_value(x, &p, end, &hi)))
                return rc;
            single = 0;
            if (lo > hi)
                return field_fail(x, "range %.*s is reversed (start after end)", (int)(p - s), s);
        }
    }
    if (p < end && *p == '/') {
        p++;
        const char *q = p;
        long v = 0;
        while (p < end && is_digit(*p)) {
            if (v < 1000000)
                v = v * 10 + (*p - '0');
            p++;
        }
        int span = f->star_hi - f->lo + 1;
        if (p == q)
            return field_fail(x, "missing step after \"/\" in \"%.*s\"", (int)(end - s), s);
        if (v < 1 || v > span)
            return field_fail(x, "step %.*s is out of range 1-%d", (int)(p - q), q, span);
        step = (int)v;
        if (single && hi < f->star_hi)
            hi = f->star_hi; /* "a/n" is "a-last/n" */
    }
    if (p < end)
        return field_fail(x, "unexpected \"%c\" in \"%.*s\"", *p, (int)(end - s), s);
    for (int v = lo; v <= hi; v += step)
        *bits |= (uint64_t)1 << v;
    return 0;
}

/* Field number i (0-4), text [s, end). */
static int parse_field(wq_cron *c, int i, const char *s, const char *end, char *err, size_t errlen)
{
    struct fctx x = {&fields[i], i + 1, err, errlen};
    uint64_t bits = 0;
    for (const char *p = s;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        int rc = parse_item(&x, p, e, &bits);
        if (rc)
            return rc;
        if (!comma)
            break;
        p = comma + 1;
    }
    switch (i) {
    case 0: c->min = bits; break;
    case 1: c->hour = (uint32_t)bits; break;
    case 2:
        c->dom = (uint32_t)bits;
        if (*s == '*')
            c->flags |= DOM_STAR;
        break;
    case 3: c->mon = (uint16_t)bits; break;
    default:
        c->dow = (uint8_t)((bits | bits >> 7) & 0x7f);
        if (*s == '*')
            c->flags |= DOW_STAR;
        break;
    }
    return 0;
}

static int parse_fields(wq_cron *c, const char *spec, char *err, size_t errlen)
{
    const char *tok[5], *tend[5];
    int n = 0;
    for (const char *p = spec;;) {
        while (is_space(*p))
            p++;
        if (!*p)
            break;
        const char *s = p;
        while (*p && !is_space(*p))
            p++;
        if (n < 5) {
            tok[n] = s;
            tend[n] = p;
        }
        n++;
    }
    if (n == 0)
        return fail(err, errlen, "empty schedule");
    if (n != 5)
        return fail(err, errlen,
                    "expected 5 fields (minute hour day-of-month month day-of-week), got %d", n);
    for (int i = 0; i < 5; i++) {
        int rc = parse_field(c, i, tok[i], tend[i], err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* A Go-style duration [s, end) in seconds. */
static int parse_duration(const char *s, const char *end, double *out, char *err, size_t errlen)
{
    const int n = (int)(end - s);
    const char *p = s;
    double total = 0;
    if (p < end && (*p == '-' || *p == '+'))
        return fail(err, errlen,
                    "@every: \"%.*s\" is not a valid duration (a positive number with a unit, "
                    "e.g. 90s, 5m, 1h30m)",
                    n, s);
    while (p < end) {
        double v = 0, scale = 1;
        int digits = 0;
        while (p < end && is_digit(*p)) {
            v = v * 10 + (*p++ - '0');
            digits++;
        }
        if (p < end && *p == '.') {
            p++;
            while (p < end && is_digit(*p)) {
                scale /= 10;
                v += (*p++ - '0') * scale;
                digits++;
            }
        }
        if (!digits)
            return fail(err, errlen,
                        "@every: \"%.*s\" is not a valid duration (expected e.g. 90s, 5m, 1h30m)",
                        n, s);
        const char *u = p;
        while (p < end && !is_digit(*p) && *p != '.')
            p++;
        size_t un = (size_t)(p - u);
        double mult;
        if (un == 0)
            return fail(err, errlen, "@every: missing unit in \"%.*s\" (use ms, s, m or h)", n, s);
        else if (un == 2 && !memcmp(u, "ms", 2))
            mult = 0.001;
        else if (un == 1 && *u == 's')
            mult = 1;
        else if (un == 1 && *u == 'm')
            mult = 60;
        else if (un == 1 && *u == 'h')
            mult = 3600;
        else
            return fail(err, errlen,
                        "@every: unknown unit \"%.*s\" in \"%.*s\" (use ms, s, m or h)", (int)un, u,
                        n, s);
        total += v * mult;
    }
    if (!isfinite(total))
        return fail(err, errlen, "@every: duration \"%.*s\" is too large", n, s);
    if (!(total > 0))
        return fail(err, errlen, "@every: duration \"%.*s\" must be greater than zero", n, s);
    *out = total;
    return 0;
}

static int parse_macro(wq_cron *c, const char *s, char *err, size_t errlen)
{
    const char *p = s;
    while (*p && !is_space(*p))
        p++;
    size_t n = (size_t)(p - s);
    while (is_space(*p))
        p++;
    const char *arg = p;
    while (*p && !is_space(*p))
        p++;
    const char *arg_end = p;
    while (is_space(*p))
        p++;
    if (same_word(s, n, "@every")) {
        if (arg == arg_end)
            return fail(err, errlen, "@every: missing duration (e.g. @every 5m)");
        if (*p)
            return fail(err, errlen, "@every: unexpected \"%s\" after the duration", p);
        return parse_duration(arg, arg_end, &c->every, err, errlen);
    }
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++) {
        if (same_word(s, n, macros[i].name)) {
            if (arg != arg_end)
                return fail(err, errlen, "%s takes no arguments, got \"%s\"", macros[i].name, arg);
            return parse_fields(c, macros[i].expansion, err, errlen);
        }
    }
    return fail(err, errlen,
                "unknown macro \"%.*s\" (use @yearly, @annually, @monthly, @weekly, @daily, "
                "@midnight, @hourly or @every)",
                (int)n, s);
}

int wq_cron_parse(const char *spec, wq_cron **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (out)
        *out = NULL;
    if (!spec || !out)
        return fail(err, errlen, "no schedule given");
    wq_cron *c = wq_malloc(sizeof *c);
    if (!c) {
        fail(err, errlen, "out of memory");
        return WQ_ENOMEM;
    }
    memset(c, 0, sizeof *c);
    const char *s = spec;
    while (is_space(*s))
        s++;
    int rc = *s == '@' ? parse_macro(c, s, err, errlen) : parse_fields(c, s, err, errlen);
    if (rc) {
        wq_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void wq_cron_free(wq_cron *c)
{
    wq_free(c);
}

int wq_cron_is_every(const wq_cron *c, double *seconds)
{
    int every = c && c->every > 0;
    if (seconds)
        *seconds = every ? c->every : 0;
    return every;
}

/* ---- the calendar ----------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m)
{
    static const int len[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))
        return 29;
    return len[m];
}

/* The lowest set bit of mask at or above `from`, or -1. */
static int next_bit(uint64_t mask, int from)
{
    if (from > 63)
        return -1;
    mask >>= from;
    return mask ? from + __builtin_ctzll(mask) : -1;
}

/*
 * Vixie cron's day rule (its cron.c): when either day field starts with '*',
 * a day must match both (a plain "*" matches every day, so the other field
 * decides); when both are restricted, either one is enough.
 */
static int day_matches(const wq_cron *c, int64_t days, int d)
{
    int wd = (int)(days + 4 - floor_div(days + 4, 7) * 7); /* 1970-01-01 was a Thursday */
    int dom = (int)(c->dom >> d & 1), dow = c->dow >> wd & 1;
    if (c->flags & (DOM_STAR | DOW_STAR))
        return dom && dow;
    return dom || dow;
}

/*
 * The first matching wall time at or after the minute-aligned wall second w,
 * or NONE once the walk passes day dlimit.
 */
static int64_t next_wall(const wq_cron *c, int64_t w, int64_t dlimit)
{
    int64_t days = floor_div(w, DAY), y;
    int sec = (int)(w - days * DAY);
    int h = sec / 3600, mi = sec % 3600 / 60, mo, d;
    civil_from_days(days, &y, &mo, &d);
    for (;;) {
        if (days > dlimit)
            return NONE;
        if (!(c->mon >> mo & 1)) {
            int n = next_bit(c->mon, mo + 1);
            if (n < 0) {
                y++;
                n = next_bit(c->mon, 1);
            }
            mo = n;
            d = 1;
            h = mi = 0;
            days = days_from_civil(y, mo, d);
            continue;
        }
        int nh = -1;
        if (day_matches(c, days, d))
            nh = next_bit(c->hour, h);
        if (nh < 0) {
            days++;
            h = mi = 0;
            if (++d > days_in_month(y, mo)) {
                d = 1;
                if (++mo > 12) {
                    mo = 1;
                    y++;
                }
            }
            continue;
        }
        if (nh != h) {
            h = nh;
            mi = 0;
        }
        int nm = next_bit(c->min, mi);
        if (nm < 0) {
            h++; /* past 23: next_bit finds nothing and the day advances */
            mi = 0;
            continue;
        }
        return days * DAY + h * 3600 + nm * 60;
    }
}

/* ---- local time ------------------------------------------------------- */

/* The local wall second at instant t, or FAIL. */
static int64_t wall_at(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!localtime_r(&tt, &tm))
        return FAIL;
    return days_from_civil((int64_t)tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday) * DAY +
           tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec;
}

/* The zone's UTC offset at instant t (wall - t), or FAIL. */
static int64_t offset_at(int64_t t)
{
    int64_t w = wall_at(t);
    return w == FAIL ? FAIL : w - t;
}

/* mktime's answer, for zones with two changes within two days (none today). */
static int64_t by_mktime(int64_t w)
{
    int64_t days = floor_div(w, DAY), y;
    int sec = (int)(w - days * DAY), m, d;
    civil_from_days(days, &y, &m, &d);
    struct tm tm = {.tm_year = (int)(y - 1900),
                    .tm_mon = m - 1,
                    .tm_mday = d,
                    .tm_hour = sec / 3600,
                    .tm_min = sec % 3600 / 60,
                    .tm_isdst = -1};
    time_t t = mktime(&tm);
    return t == (time_t)-1 ? FAIL : (int64_t)t;
}

/*
 * The instant at which wall time w runs: its only instant, the first of two
 * (clocks set back), or the end of the gap that skips it (clocks set
 * forward). Every instant t with wall time w lies within 26 hours of w, so
 * the offsets a day before and a day after are the only candidates while a
 * zone changes at most once in two days.
 */
static int64_t resolve(int64_t w)
{
    int64_t oa = offset_at(w - DAY), ob = offset_at(w + DAY);
    if (oa == FAIL || ob == FAIL)
        return FAIL;
    int64_t best = NONE;
    int64_t cand[2] = {oa, ob};
    for (int i = 0; i < (oa == ob ? 1 : 2); i++) {
        int64_t t = w - cand[i], o = offset_at(t);
        if (o == FAIL)
            return FAIL;
        if (o == cand[i] && t < best)
            best = t;
    }
    if (best != NONE)
        return best;
    if (ob <= oa)
        return by_mktime(w);
    /* Skipped: find the change, the first instant at offset ob. */
    int64_t lo = w - DAY, hi = w + DAY; /* offset_at(lo) == oa, offset_at(hi) != oa */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2, o = offset_at(mid);
        if (o == FAIL)
            return FAIL;
        if (o == oa)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

double wq_cron_next(const wq_cron *c, double after, int local)
{
    if (!c || !isfinite(after))
        return -1;
    if (c->every > 0)
        return after + c->every;
    if (after < T_MIN || after > T_MAX)
        return -1;
    /* Fire times are whole seconds, so "after `after`" is "after floor(after)". */
    int64_t a = (int64_t)floor(after);
    int64_t limit = a + (int64_t)HORIZON_DAYS * DAY;
    if (!local) {
        int64_t t = next_wall(c, floor_div(a, 60) * 60 + 60, floor_div(limit, DAY));
        return t == NONE || t > limit ? -1 : (double)t;
    }
    tzset();
    int64_t wa = wall_at(a);
    if (wa == FAIL)
        return -1;
    int64_t w = floor_div(wa, 60) * 60 + 60;
    int64_t dlimit = floor_div(wa, DAY) + HORIZON_DAYS + 2;
    for (;;) {
        int64_t m = next_wall(c, w, dlimit);
        if (m == NONE)
            return -1;
        int64_t t = resolve(m);
        if (t == FAIL)
            return -1;
        /* Only the second occurrence of a repeated hour can map back to or before
         * `after` (its first occurrence has passed): skip those wall times. */
        if (t > a)
            return t > limit ? -1 : (double)t;
        w = m + 60;
    }
}
