/*
 * Schedule specs (SPEC 7.3): Vixie-style 5-field cron expressions, the
 * @-macros and @every intervals, and "when does it fire next", in UTC or in
 * the process's local time zone.
 *
 * Grammar (whitespace is any run of spaces, tabs or newlines; leading and
 * trailing whitespace is ignored):
 *
 *   spec     = fields | macro | every
 *   fields   = minute WS hour WS dom WS month WS dow      exactly 5 fields
 *   field    = item ("," item)*                          no empty items
 *   item     = "*" ["/" step]                            every value [every step-th]
 *            | value ["-" value] ["/" step]              a value or an inclusive range
 *   step     = 1 .. the field's size (60, 24, 31, 12, 7); "a/n" means "a-last/n"
 *   value    = decimal number, or a name in the fields that have names:
 *
 *     field 1  minute        0-59
 *     field 2  hour          0-23
 *     field 3  day-of-month  1-31
 *     field 4  month         1-12 or jan feb mar apr may jun jul aug sep oct nov dec
 *     field 5  day-of-week   0-7 (0 and 7 are Sunday) or sun mon tue wed thu fri sat
 *
 *   Names are three letters, case-insensitive. A range must not be reversed
 *   ("5-1", "sat-sun" are errors; write "sat,sun"). In day-of-week, "*" and
 *   "a/n" run up to 6 (Saturday); 7 is only ever an explicit Sunday.
 *
 *   Day-of-month and day-of-week combine as in Vixie cron: a field whose text
 *   starts with "*" (including "*" followed by "/n") is "star". If either of
 *   the two is star, a day must match both (so "*" simply defers to the other
 *   field); if neither is, a day matches when EITHER matches ("0 0 13 * fri"
 *   fires on every 13th and on every Friday).
 *
 *   macro    = "@yearly" | "@annually"    0 0 1 1 *
 *            | "@monthly"                 0 0 1 * *
 *            | "@weekly"                  0 0 * * 0
 *            | "@daily" | "@midnight"     0 0 * * *
 *            | "@hourly"                  0 * * * *
 *   every    = "@every" WS duration
 *   duration = (number unit)+, no spaces, Go style: "90s", "5m", "1h30m", "1.5h",
 *              "250ms"; number = digits ["." digits] (or "." digits);
 *              unit = "ms" | "s" | "m" | "h" (lowercase); the total must be > 0.
 *
 *   Macro names are case-insensitive; nothing may follow a macro but @every's
 *   duration.
 *
 * Local time (local == 1): fields are wall-clock times in the zone libc
 * uses (TZ, else /etc/localtime; tzset() is called on each wq_cron_next).
 * A matching wall time that a DST change skips runs once, at the first
 * instant after the gap (all skipped matches collapse into that one run,
 * together with a match at the gap's end itself). A wall time that occurs
 * twice (clocks set back) runs at its first occurrence only, so a schedule
 * never runs twice for one wall time and never leaves a wall time out.
 */
#ifndef WQ_CRON_H
#define WQ_CRON_H

#include <stddef.h>

typedef struct wq_cron wq_cron; /* a parsed schedule spec */

/* Parses spec; 0 and *out (free with wq_cron_free), or WQ_EINVAL with a one-line
 * reason in err (e.g. "field 2 (hour): 24 is out of range 0-23"), WQ_ENOMEM on
 * allocation failure. *out is NULL on error; err may be NULL when errlen is 0. */
int wq_cron_parse(const char *spec, wq_cron **out, char *err, size_t errlen);
/* Frees a parsed spec. NULL is fine. */
void wq_cron_free(wq_cron *c);
/* The first time the schedule fires strictly after `after` (Unix seconds), in UTC
 * (local == 0) or the process's local time zone (local != 0). Returns Unix seconds
 * (whole seconds for cron specs; after + interval for @every), or -1 when there is
 * none within the next 8 years (8 x 366 days; e.g. "0 0 30 2 *"), or when `after`
 * is not finite or outside years 1-9990. */
double wq_cron_next(const wq_cron *c, double after, int local);
/* Whether the spec is an @every interval (then wq_cron_next is after + interval):
 * 1 and *seconds = the interval, or 0 and *seconds = 0. seconds may be NULL. */
int wq_cron_is_every(const wq_cron *c, double *seconds);

#endif
