/* Strings that decode with a NUL (message_span_has_nul(), message_path_has_nul(), era_resource_uris_new()),
 * also when allocations fail: out of memory is never read as "it holds a NUL" nor as "it does not". */
#include <errno.h>
#include <stdbool.h>

#include "era.h"
#include "macros.h"
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

static const char *const LISTEN[] = {"params", "notifications", "resourceSubscriptions", NULL};

static const cJSON *listen_tree(const Message *m) {
        return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m->params, "notifications"),
                                                "resourceSubscriptions");
}

#define ACK "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":"

/* A listen's (or acknowledgement's) URIs, each whole: those with a NUL left out and counted, whatever
 * else is in the array; the rest in order. */
static void check_resource_uris(void) {
        static const struct {
                const char *text, *want;
                size_t n_nul;
        } lists[] = {
                {ACK "{\"notifications\":{\"resourceSubscriptions\":[\"a\",\"a\\u0000b\",1,\"b\\\\u0000\",{\"x\":"
                     "\"\\u0000\"},"
                     "\"\\u0000\",[\"\\u0000\"],\"c\\u00e9\"]}}}",
                 "[\"a\",\"b\\\\u0000\",\"c\u00e9\"]", 2},
                {ACK "{\"notifications\":{\"resourceSubscriptions\":[]}}}", "[]", 0},
                {ACK "{\"notifications\":{\"resourceSubscriptions\":[ \"x\" , \"y\\u0000\" ]}}}", "[\"x\"]", 1},
                {ACK "{\"notifications\":{}}}", "[]", 0},
                {ACK "{\"notifications\":{\"resourceSubscriptions\":\"a\\u0000\"}}}", "[]", 0},
        };

        for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
                _cleanup_message_ Message *m = parse(lists[k].text);
                _cleanup_json_ cJSON *uris = NULL;
                _cleanup_free_ char *printed = NULL;
                size_t n_nul = 99;

                if (!m)
                        continue;
                uris = era_resource_uris_new(m, LISTEN, listen_tree(m), &n_nul);
                printed = uris ? cJSON_PrintUnformatted(uris) : NULL;
                CHECK_STREQ(printed, lists[k].want);
                CHECK(n_nul == lists[k].n_nul);

                /* The Nth allocation failed: NULL, or the same answer. */
                for (unsigned n = 1; n < 64; n++) {
                        _cleanup_json_ cJSON *u = NULL;
                        _cleanup_free_ char *p = NULL;
                        unsigned calls;

                        malloc_calls = 0;
                        malloc_fail_in = n;
                        u = era_resource_uris_new(m, LISTEN, listen_tree(m), &n_nul);
                        calls = malloc_calls;
                        malloc_fail_in = 0;
                        if (u) {
                                p = cJSON_PrintUnformatted(u);
                                CHECK_STREQ(p, lists[k].want);
                                CHECK(n_nul == lists[k].n_nul);
                        }
                        if (calls < n)
                                break;
                }
        }
}

int main(void) {
        check_decoded();
        check_out_of_memory();
        check_resource_uris();
        return tests_finish("test-message-nul");
}
