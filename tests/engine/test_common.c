/*
 * The message helpers of engine/common.c: wq_utf8_cut never splits a UTF-8
 * sequence, wq_show_line keeps the first line only, turns control bytes
 * into spaces and cuts a long line to its buffer with "...".
 */
#include <criterion/criterion.h>

#include "engine/common.h"

#include <string.h>

Test(utf8_cut, keeps_a_string_that_fits)
{
    cr_assert_eq(wq_utf8_cut("abc", 3, 3), 3);
    cr_assert_eq(wq_utf8_cut("abc", 3, 10), 3);
}

Test(utf8_cut, cuts_ascii_at_max)
{
    cr_assert_eq(wq_utf8_cut("abcdef", 6, 4), 4);
    cr_assert_eq(wq_utf8_cut("abcdef", 6, 0), 0);
}

Test(utf8_cut, backs_up_over_a_sequence_that_crosses_max)
{
    const char *s = "ab\xc3\xa9"    /* é: 2 bytes at 2..3 */
                    "\xe2\x82\xac"; /* €: 3 bytes at 4..6 */
    size_t n = strlen(s);
    cr_assert_eq(wq_utf8_cut(s, n, 3), 2, "é would be split");
    cr_assert_eq(wq_utf8_cut(s, n, 4), 4, "é fits whole");
    cr_assert_eq(wq_utf8_cut(s, n, 5), 4, "€ would be split after one byte");
    cr_assert_eq(wq_utf8_cut(s, n, 6), 4, "€ would be split after two bytes");
    cr_assert_eq(wq_utf8_cut(s, n, 7), 7);
}

Test(show_line, keeps_the_first_line_only)
{
    char out[64];
    cr_assert_str_eq(wq_show_line(out, sizeof out, "boom\nstack traceback:\n..."), "boom");
    cr_assert_str_eq(wq_show_line(out, sizeof out, "crlf\r\nnext"), "crlf");
    cr_assert_str_eq(wq_show_line(out, sizeof out, NULL), "");
    cr_assert_str_eq(wq_show_line(out, sizeof out, " \n\t\n"), "");
}

Test(show_line, takes_the_first_line_with_something_on_it)
{
    char out[64];
    /* gzip's stderr as an error: "\ngzip: x: not in gzip format\n" */
    cr_assert_str_eq(wq_show_line(out, sizeof out, "\nsecond"), "second");
    cr_assert_str_eq(wq_show_line(out, sizeof out, "\r\n  \n\tthird\nfourth"), " third");
    /* a position prefix alone on its line takes the message of the next one */
    cr_assert_str_eq(wq_show_line(out, sizeof out, "jobs.lua:3: \ngzip: x: bad\nmore"),
                     "jobs.lua:3: gzip: x: bad");
    cr_assert_str_eq(wq_show_line(out, sizeof out, "failed:"), "failed:");
}

Test(show_line, cuts_a_joined_line_with_dots)
{
    char out[12];
    cr_assert_str_eq(wq_show_line(out, sizeof out, "a.lua:3:\nmessage"), "a.lua:3:...");
    cr_assert_str_eq(wq_show_line(out, sizeof out, "a:\nmessages!"), "a: messa...");
    cr_assert_str_eq(wq_show_line(out, sizeof out, "a:\nmsg"), "a: msg");
    cr_assert_str_eq(wq_show_line(out, sizeof out, "abcdefghij:\nm"), "abcdefgh...");
}

Test(show_line, turns_control_bytes_into_spaces)
{
    char out[64];
    cr_assert_str_eq(wq_show_line(out, sizeof out, "a\tb\x1b[31mc\x7f"), "a b [31mc ");
}

Test(show_line, keeps_a_line_that_fits_exactly)
{
    char out[8];
    cr_assert_str_eq(wq_show_line(out, sizeof out, "1234567"), "1234567");
}

Test(show_line, cuts_a_long_line_with_dots)
{
    char out[8];
    cr_assert_str_eq(wq_show_line(out, sizeof out, "12345678"), "1234...");
    cr_assert_eq(strlen(out), sizeof out - 1);
}

Test(show_line, cuts_before_a_split_character)
{
    char out[8];
    /* 4 bytes fit before "...": the third character (é at 3..4) would be split */
    cr_assert_str_eq(wq_show_line(out, sizeof out, "abc\xc3\xa9xyz!"), "abc...");
}
