/* A tiny assert for unit tests: prints where and what, counts, and fails the run at the end. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned tests_passed, tests_failed;

#define CHECK(cond)                                                                              \
        do {                                                                                     \
                if (cond)                                                                        \
                        tests_passed++;                                                          \
                else {                                                                           \
                        tests_failed++;                                                          \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
                }                                                                                \
        } while (0)

#define CHECK_STREQ(a, b)                                                                                 \
        do {                                                                                              \
                const char *_a = (a), *_b = (b);                                                          \
                if (_a && _b && strcmp(_a, _b) == 0)                                                      \
                        tests_passed++;                                                                   \
                else {                                                                                    \
                        tests_failed++;                                                                   \
                        fprintf(stderr, "%s:%d: expected\n  \"%s\"\ngot\n  \"%s\"\n", __FILE__, __LINE__, \
                                _b ? _b : "(null)", _a ? _a : "(null)");                                  \
                }                                                                                         \
        } while (0)

/* The closing line CI reads: "N passed, N failed". */
static inline int tests_finish(const char *name) {
        printf("%s: %u passed, %u failed\n", name, tests_passed, tests_failed);
        return tests_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
