/* Framing: partial lines, CRLF, blank lines, oversize lines, embedded NUL, UTF-8. */
#include <errno.h>

#include "framing.h"
#include "jsonrpc.h"
#include "tests.h"

static void feed(LineBuffer *b, const char *s, size_t n) {
        char *p;
        size_t avail;
        CHECK(line_buffer_reserve(b, n, &p, &avail) == 0);
        memcpy(p, s, n);
        line_buffer_commit(b, n);
}

static void test_partial_and_crlf(void) {
        LineBuffer b;
        const char *l;
        size_t n;

        line_buffer_init(&b, 64);
        feed(&b, "{\"a\":", 5);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_NONE);
        feed(&b, "1}\r\n\n{\"b\"", 9);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK);
        CHECK(n == 7 && memcmp(l, "{\"a\":1}", 7) == 0);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_NONE); /* blank line skipped, "{"b"" pending */
        CHECK(line_buffer_pending(&b) == 4);
        feed(&b, ":2}\n", 4);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK);
        CHECK(n == 7 && memcmp(l, "{\"b\":2}", 7) == 0);
        line_buffer_done(&b);
}

static void test_oversize(void) {
        LineBuffer b;
        const char *l;
        size_t n;
        char big[200];

        memset(big, 'x', sizeof big);
        line_buffer_init(&b, 64);
        /* Too long and no newline yet: reported at once, memory dropped, the rest skipped. */
        feed(&b, big, 100);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OVERSIZE);
        CHECK(b.end - b.start == 0);
        feed(&b, big, 100);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_NONE);
        CHECK(b.end == 0);
        feed(&b, "xx\n{\"ok\":1}\n", 12);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK);
        CHECK(n == 8 && memcmp(l, "{\"ok\":1}", 8) == 0);
        /* Too long, but complete in one read. */
        memcpy(big + 150, "\n", 1);
        feed(&b, big, 151);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OVERSIZE);
        feed(&b, "{}\n", 3);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK);
        CHECK(n == 2);
        line_buffer_done(&b);
}

/* Found by fuzzing: a line of exactly max_line bytes whose "\r\n" arrives split is a line. */
static void test_crlf_split_at_limit(void) {
        LineBuffer b;
        const char *l;
        size_t n;

        line_buffer_init(&b, 4);
        feed(&b, "abcd\r", 5);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_NONE);
        feed(&b, "\n", 1);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK);
        CHECK(n == 4 && memcmp(l, "abcd", 4) == 0);
        feed(&b, "abcde", 5); /* no "\r" at the end: over the limit at once */
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OVERSIZE);
        line_buffer_done(&b);
}

static void test_utf8(void) {
        CHECK(utf8_is_valid("plain", 5));
        CHECK(utf8_is_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 15));
        CHECK(!utf8_is_valid("\xc3", 1));             /* truncated */
        CHECK(!utf8_is_valid("\xc0\xaf", 2));         /* overlong */
        CHECK(!utf8_is_valid("\xed\xa0\x80", 3));     /* surrogate */
        CHECK(!utf8_is_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
        CHECK(!utf8_is_valid("\xff", 1));
}

static void test_parse(void) {
        cJSON *j = NULL;
        char deep[400];

        CHECK(jsonrpc_parse("{\"a\":1}", 7, 128, &j) == 0);
        cJSON_Delete(j);
        CHECK(jsonrpc_parse("{\"a\":1} x", 9, 128, &j) == -EBADMSG);
        CHECK(jsonrpc_parse("{\"a\":1}\0", 8, 128, &j) == -EBADMSG);      /* embedded NUL */
        CHECK(jsonrpc_parse("{\"a\":\"\xff\"}", 8, 128, &j) == -EBADMSG); /* invalid UTF-8 */
        CHECK(jsonrpc_parse("{\"a\":", 5, 128, &j) == -EBADMSG);
        memset(deep, '[', 200);
        memset(deep + 200, ']', 200);
        CHECK(jsonrpc_parse(deep, 400, 128, &j) == -E2BIG);
        CHECK(json_text_depth("{\"[[[[\":[1]}", 12) == 2); /* brackets in strings do not count */
        /* Found by fuzzing: cJSON reads control characters as white space. */
        CHECK(jsonrpc_parse("{\"id\":\x11 1}", 10, 128, &j) == -EBADMSG);
}

/* A connection that carried one large line does not keep its room while it waits for the next. */
static void test_room_given_back(void) {
        LineBuffer b;
        const char *l;
        size_t n, big = 4U * 1024U * 1024U;
        char *chunk = malloc(big);

        CHECK(chunk != NULL);
        if (!chunk)
                return;
        memset(chunk, 'x', big);
        line_buffer_init(&b, 8U * 1024U * 1024U);
        feed(&b, chunk, big);
        feed(&b, "\n", 1);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK && n == big);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_NONE);
        CHECK(b.alloc > LINE_BUFFER_KEEP);
        feed(&b, "{}", 2);
        CHECK(b.alloc <= LINE_BUFFER_KEEP);
        CHECK(line_buffer_pending(&b) == 2);
        feed(&b, "\n", 1);
        CHECK(line_buffer_next(&b, &l, &n) == LINE_OK && n == 2 && memcmp(l, "{}", 2) == 0);
        line_buffer_done(&b);
        free(chunk);
}

int main(void) {
        test_room_given_back();
        test_partial_and_crlf();
        test_oversize();
        test_crlf_split_at_limit();
        test_utf8();
        test_parse();
        return tests_finish("test-framing");
}
