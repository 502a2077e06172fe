/* Durations as the manifest writes them. */
#include "duration.h"
#include "macros.h"
#include "tests.h"

static uint64_t parse(const char *s) {
        uint64_t u = 12345;
        return duration_parse(s, &u) < 0 ? UINT64_MAX - 1 : u;
}

int main(void) {
        char buf[32];

        CHECK(parse("0") == 0);
        CHECK(parse("90s") == 90 * USEC_PER_SEC);
        CHECK(parse("5m") == 300 * USEC_PER_SEC);
        CHECK(parse("2h") == 7200 * USEC_PER_SEC);
        CHECK(parse("1h30m") == 5400 * USEC_PER_SEC);
        CHECK(parse("500ms") == 500 * USEC_PER_MSEC);
        CHECK(parse("3min") == 180 * USEC_PER_SEC);
        CHECK(parse("45") == 45 * USEC_PER_SEC);
        CHECK(parse("") == UINT64_MAX - 1);
        CHECK(parse("5x") == UINT64_MAX - 1);
        CHECK(parse("m") == UINT64_MAX - 1);
        CHECK(parse("-5s") == UINT64_MAX - 1);
        CHECK(parse("5 m") == UINT64_MAX - 1);
        CHECK(parse("99999999999h") == UINT64_MAX - 1);
        CHECK_STREQ(duration_format(300 * USEC_PER_SEC, buf, sizeof buf), "5m");
        CHECK_STREQ(duration_format(90 * USEC_PER_SEC, buf, sizeof buf), "90s");
        CHECK_STREQ(duration_format(USEC_INFINITY, buf, sizeof buf), "never");
        return tests_finish("test-duration");
}
