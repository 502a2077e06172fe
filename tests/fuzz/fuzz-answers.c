/* Fuzz target: a prepared answers file as a damaged disk or a forger could leave it. The input patches
 * a valid file (frontend/answers.c, built once from a small manifest): each 3 bytes are a 2-byte
 * little-endian offset and the byte to put there; with the input's first byte odd, the file is sealed
 * again (size and checksum recomputed, as a forger would). answers_load() must refuse the file, or
 * hand out only answers that lie within it, are one line without NUL, and are JSON objects; its routes
 * name only valid backend names on this host, each with an absolute socket path or none. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "answers.h"
#include "fuzz.h"
#include "macros.h"

#define KEY "fuzz-answers key"

static const char manifest[] =
        "server: {name: fuzz, version: '1', page_size: 2, instructions: 'a \"quoted\" line'}\n"
        "backends:\n"
        "  b: {command: [x], resources: [{uri: 'a://b', name: b}], prompts: [{name: p}]}\n"
        "  c: {command: [y], socket: /run/c.sock}\n"
        "  r: {host: 'ssh://h'}\n"
        "tools:\n"
        "  - {name: t1, backend: b, input_schema: {type: object}}\n"
        "  - {name: t2, backend: b, input_schema: {type: object}, description: \"two\\nlines\"}\n"
        "  - {name: t3, backend: b, input_schema: {type: object}}\n"
        "  - {name: t4, backend: c, input_schema: {type: object}}\n"
        "  - {name: t5, backend: r, input_schema: {type: object}}\n";

static char *valid, path[] = "/tmp/mcp-lazy-fuzz-answers-XXXXXX";
static size_t valid_len;
static struct stat st;

static void setup(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        Answers *a = NULL;
        int fd;

        FUZZ_ASSERT(manifest_load_string(manifest, sizeof manifest - 1, "fuzz.yaml", "/", &m, NULL) >= 0);
        FUZZ_ASSERT(answers_build(m, KEY, &st, &a) >= 0);
        fd = mkstemp(path);
        FUZZ_ASSERT(fd >= 0);
        close(fd);
        FUZZ_ASSERT(answers_save(a, path) >= 0);
        answers_free(a);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        FUZZ_ASSERT(fd >= 0);
        valid_len = (size_t) lseek(fd, 0, SEEK_END);
        valid = malloc(valid_len);
        FUZZ_ASSERT(valid && pread(fd, valid, valid_len, 0) == (ssize_t) valid_len);
        close(fd);
}

static void check(const char *text, size_t len, bool object) {
        FUZZ_ASSERT(len >= 2);
        FUZZ_ASSERT(!memchr(text, '\n', len) && !memchr(text, 0, len));
        if (object)
                FUZZ_ASSERT(text[0] == '{' && text[len - 1] == '}');
}

/* A route the answers give: a valid backend name of this host, and where its socket is. */
static void check_route(Answers *a, const char *tool, const char *want, const char *want_socket, bool untouched) {
        const char *backend = NULL, *socket = NULL;
        bool found = answers_tool_backend(a, tool, &backend);

        if (found) {
                FUZZ_ASSERT(backend && backend_name_valid(backend));
                FUZZ_ASSERT(answers_backend_socket(a, backend, &socket));
                FUZZ_ASSERT(!socket || socket[0] == '/');
        }
        if (!untouched)
                return;
        FUZZ_ASSERT(found == !!want);
        if (want) {
                FUZZ_ASSERT(streq(backend, want));
                FUZZ_ASSERT(want_socket ? socket && streq(socket, want_socket) : !socket);
        }
}

static const char *const tools[] = {"t1", "t2", "t3", "t4", "t5", "nope", "", "b", "1"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_free_ char *buf = NULL;
        Answers *a = NULL;
        const char *text;
        size_t len, page;
        int fd;

        if (!valid)
                setup();
        buf = malloc(valid_len);
        FUZZ_ASSERT(buf);
        memcpy(buf, valid, valid_len);
        for (size_t i = 1; i + 3 <= size; i += 3) {
                size_t off = (size_t) data[i] | (size_t) data[i + 1] << 8;
                if (off < valid_len)
                        buf[off] = (char) data[i + 2];
        }
        if (size > 0 && (data[0] & 1))
                answers_seal(buf, valid_len);
        fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        FUZZ_ASSERT(fd >= 0 && write(fd, buf, valid_len) == (ssize_t) valid_len);
        close(fd);
        if (answers_load(path, KEY, &st, &a) < 0)
                return 0;
        for (AnswerKind k = 0; k < _ANSWER_KIND_MAX; k++)
                for (size_t i = 0; i < 8; i++)
                        if (answers_get(a, k, i, &text, &len)) {
                                check(text, len, k != ANSWER_MODERN_TAIL);
                        }
        for (size_t off = 0; off < 12; off++)
                if (answers_tools_page(a, off, &page))
                        FUZZ_ASSERT(answers_get(a, ANSWER_TOOLS, page, &text, &len));
        /* A local backend's tools are routed (with or without a socket path), a remote one's are not. */
        check_route(a, "t1", "b", NULL, size <= 1);
        check_route(a, "t4", "c", "/run/c.sock", size <= 1);
        check_route(a, "t5", NULL, NULL, size <= 1);
        check_route(a, "nope", NULL, NULL, size <= 1);
        /* By now a's routes are indexed: each tool's route is the one a walk of them finds (the first
         * look-up of fresh answers). */
        for (size_t i = 0; i < ELEMENTSOF(tools); i++) {
                Answers *w = NULL;
                const char *indexed = NULL, *walked = NULL;

                FUZZ_ASSERT(answers_load(path, KEY, &st, &w) >= 0);
                FUZZ_ASSERT(answers_tool_backend(w, tools[i], &walked) == answers_tool_backend(a, tools[i], &indexed));
                FUZZ_ASSERT(!walked == !indexed && (!walked || streq(walked, indexed)));
                answers_free(w);
        }
        /* Untouched, it is taken as it was made. */
        if (size <= 1)
                FUZZ_ASSERT(answers_get(a, ANSWER_TOOLS, 2, NULL, NULL) && answers_n_tools(a) == 5);
        answers_free(a);
        return 0;
}
