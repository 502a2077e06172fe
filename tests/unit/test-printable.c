/* Peer text made safe for a terminal. */
#include <stdlib.h>
#include <string.h>

#include "printable.h"
#include "tests.h"

static char *p(const char *s, size_t max) {
        static char *last;
        free(last);
        return last = text_printable(s, max);
}

int main(void) {
        CHECK_STREQ(p("plain text", 100), "plain text");
        CHECK_STREQ(p("caf\xc3\xa9 \xe2\x9c\x93", 100), "caf\xc3\xa9 \xe2\x9c\x93");
        /* ESC sequences: a title, the clipboard (OSC 52), a cursor move, a C1 CSI */
        CHECK_STREQ(p("a\x1b]0;pwned\x07z", 100), "a?]0;pwned?z");
        CHECK_STREQ(p("\x1b]52;c;ZXZpbA==\x1b\\", 100), "?]52;c;ZXZpbA==?\\");
        CHECK_STREQ(p("row\r\nfake row\t\x7f", 100), "row??fake row??");
        CHECK_STREQ(p("\xc2\x9b"
                      "31m",
                      100),
                    "??31m");
        /* invalid UTF-8: a lone continuation, an overlong '/', a surrogate, a cut sequence */
        CHECK_STREQ(p("\x80x\xc0\xafy\xed\xa0\x80z\xe2\x9c", 100), "?x??y???z??");
        /* bounded: cut at a character, then "..." */
        CHECK_STREQ(p("abcdef", 4), "abcd...");
        CHECK_STREQ(p("ab\xc3\xa9", 3), "ab...");
        CHECK_STREQ(p("abc", 3), "abc");
        CHECK(text_is_printable("fine, 100%", 64));
        CHECK(!text_is_printable("no\x1b[2J", 64));
        CHECK(!text_is_printable("\xff", 64));
        CHECK(!text_is_printable("too long", 3));
        p("", 0);

        /* a line of a given length, not NUL-terminated, NULs in it: read no further than needed */
        {
                char *line = malloc(6), *q;
                memcpy(line,
                       "ab\0c\x1b"
                       "d",
                       6);
                q = text_printable_n(line, 6, 100);
                CHECK_STREQ(q, "ab?c?d");
                free(q);
                q = text_printable_n(line, 6, 3);
                CHECK_STREQ(q, "ab?...");
                free(q);
                q = text_printable_n(line, 0, 3);
                CHECK_STREQ(q, "");
                free(q);
                free(line);
        }

        /* a tail keeps the last cap bytes of what it is given */
        char tail[8];
        size_t len = 0;
        text_tail_append(tail, &len, sizeof tail, "abc", 3);
        CHECK(len == 3 && memcmp(tail, "abc", 3) == 0);
        text_tail_append(tail, &len, sizeof tail, "defgh", 5);
        CHECK(len == 8 && memcmp(tail, "abcdefgh", 8) == 0);
        text_tail_append(tail, &len, sizeof tail, "ij", 2);
        CHECK(len == 8 && memcmp(tail, "cdefghij", 8) == 0);
        text_tail_append(tail, &len, sizeof tail, "0123456789", 10);
        CHECK(len == 8 && memcmp(tail, "23456789", 8) == 0);
        return tests_finish("test-printable");
}
