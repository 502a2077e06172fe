/* Strings that decode with a NUL (message_span_has_nul(), message_path_has_nul()), also when allocations
 * fail: out of memory is never read as "it holds a NUL" nor as "it does not". */
#include <errno.h>
#include <stdbool.h>

#include "message.h"
#include "tests.h"

/* Allocations that fail on purpose: this test is linked with -Wl,--wrap=malloc (Makefile), so every
 * malloc() of the message layer comes here. malloc_fail_in > 0 fails the call that many calls on (1: the
 * next one); malloc_fail_all fails every one. malloc_calls counts them. */
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
static unsigned malloc_fail_in, malloc_calls;
static bool malloc_fail_all;

void *__wrap_malloc(size_t size) {
        malloc_calls++;
        if (malloc_fail_all || (malloc_fail_in > 0 && --malloc_fail_in == 0))
                return NULL;
        return __real_malloc(size);
}

static Message *parse(const char *text) {
        Message *m = NULL;

        CHECK(message_parse(text, strlen(text), 64, &m) >= 0 && m && m->kind != JSONRPC_INVALID);
        return m;
}

static const char *const URI[] = {"params", "uri", NULL};

#define SUB_BARE "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/subscribe\""
#define SUB      SUB_BARE ",\"params\":"
/* A uri after an object: finding it scans past the object, which may allocate. */
#define AFTER_OBJECT SUB "{\"_meta\":{\"k\":1,\"\\u006b2\":[{}]},\"uri\":\"a\\u0000b\"}}"

/* Each text's params.uri: 1 if it decodes with a NUL, 0 if not (or it is no string, or absent). */
static const struct {
        const char *text;
        int nul;
} cases[] = {
        {SUB "{\"uri\":\"file:///a\"}}", 0},
        {SUB "{\"uri\":\"a\\u0000b\"}}", 1},
        {SUB "{\"uri\":\"\\u0000\"}}", 1},
        {SUB "{\"uri\":\"ab\\u0000\"}}", 1},
        /* An escaped backslash, then "u0000": no NUL. */
        {SUB "{\"uri\":\"a\\\\u0000b\"}}", 0},
        {SUB "{\"uri\":\"a\\\\\\u0000b\"}}", 1},
        {SUB "{\"uri\":\"\\ud83d\\ude00\\u0001\\n\"}}", 0},
        {SUB "{\"uri\":\"\\u00001\"}}", 1},
        {SUB "{\"uri\":\"\\u0100\\u1000\"}}", 0},
        /* Not a string: nothing a lookup by string would find. */
        {SUB "{\"uri\":[\"\\u0000\"]}}", 0},
        {SUB "{\"uri\":12}}", 0},
        {SUB "{}}", 0},
        {SUB_BARE "}", 0},
        {AFTER_OBJECT, 1},
        {SUB "{\"_meta\":{\"k\":1,\"\\u006b2\":[{}]},\"uri\":\"a\"}}", 0},
};

static void check_decoded(void) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                _cleanup_message_ Message *m = parse(cases[k].text);
                Span s = {0, 0};

                if (!m)
                        continue;
                CHECK(message_path_has_nul(m, URI) == cases[k].nul);
                if (message_find(m, URI, &s) == 0)
                        CHECK(message_span_has_nul(m, s) == (cases[k].nul == 1));
                if (message_path_has_nul(m, URI) != cases[k].nul)
                        fprintf(stderr, "  case %zu: %s\n", k, cases[k].text);
        }
}

/* With every allocation failing, the span check gives the true answer (it allocates nothing), and the
 * path check gives the true answer or -ENOMEM, never the other answer. Then the Nth allocation of the
 * path check failed, for each N it makes. */
static void check_out_of_memory(void) {
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                _cleanup_message_ Message *m = parse(cases[k].text);
                Span s = {0, 0};
                bool found;
                int r;

                if (!m)
                        continue;
                found = message_find(m, URI, &s) == 0;
                malloc_fail_all = true;
                if (found)
                        CHECK(message_span_has_nul(m, s) == (cases[k].nul == 1));
                r = message_path_has_nul(m, URI);
                malloc_fail_all = false;
                CHECK(r == cases[k].nul || r == -ENOMEM);
                if (r != cases[k].nul && r != -ENOMEM)
                        fprintf(stderr, "  case %zu, out of memory: %d\n", k, r);

                for (unsigned n = 1; n < 64; n++) {
                        unsigned calls;

                        malloc_calls = 0;
                        malloc_fail_in = n;
                        r = message_path_has_nul(m, URI);
                        calls = malloc_calls;
                        malloc_fail_in = 0;
                        CHECK(r == cases[k].nul || r == -ENOMEM);
                        if (calls < n) /* the check made fewer allocations than n: none failed */
                                break;
                }
        }
        /* The case that misrouted: a uri after an object, with a NUL in it. Out of memory is said as such
         * (or, with a scan that needs no allocation there, the NUL is found). */
        {
                _cleanup_message_ Message *m = parse(AFTER_OBJECT);
                int r;

                malloc_fail_all = true;
                r = m ? message_path_has_nul(m, URI) : 0;
                malloc_fail_all = false;
                CHECK(r == -ENOMEM || r == 1);
        }
}

int main(void) {
        check_decoded();
        check_out_of_memory();
        return tests_finish("test-message-nul");
}
