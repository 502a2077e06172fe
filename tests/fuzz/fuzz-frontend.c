/* Fuzz target: the frontend's message handling, for real (frontend/session.c and upstream.c), with a
 * client on one socket and a backend's shim on another. Each input line goes in from the peer its
 * first byte names ('c': the client; anything else: the shim); everything the frontend writes is read
 * back and checked: every line is a valid message (or a batch of them), the client gets answers only
 * under ids it used and requests only under ids of ours, and the shim gets only the client's ids or
 * ours, and answers only under ids the shim used. An input that starts with 'A' runs a session served
 * from prepared answers (frontend/answers.c) without a manifest, as one started from the cache is: its
 * tools/call goes by the answers' routes, its tools/list page is large enough to be written from the
 * answers themselves (channel_sendv_borrow()), the client's socket takes little at a time, and a line
 * 'R' loads the answers again (a reload) while the client may not have read that page yet. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "answers.h"
#include "frontend.h"
#include "fuzz.h"
#include "ids.h"
#include "macros.h"
#include "message.h"
#include "peek.h"

#define MAX_SEEN 4096

typedef struct Peer {
        int fd;               /* our end */
        char *seen[MAX_SEEN]; /* id texts this peer sent */
        size_t n_seen;
        char buf[1 << 16];
        size_t len;
} Peer;

static Peer client, shim;

static void remember(Peer *p, const char *text) {
        if (p->n_seen < MAX_SEEN)
                p->seen[p->n_seen++] = strdup(text);
}

static bool was_seen(const Peer *p, const char *text) {
        for (size_t i = 0; i < p->n_seen; i++)
                if (p->seen[i] && streq(p->seen[i], text))
                        return true;
        return false;
}

static bool starts_with(const char *s, const char *prefix) {
        return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static void note_one(Peer *p, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;

        if (message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m) >= 0) {
                if (m->id_text)
                        remember(p, m->id_text);
                return;
        }
        /* A line that cannot be read but shows a method is refused under the id its beginning shows. */
        _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len);
        if (id)
                remember(p, id->valuestring);
}

static void note_sent(Peer *p, const char *line, size_t len) {
        _cleanup_free_ Span *spans = NULL;
        size_t n;

        if (!message_is_batch(line, len))
                return note_one(p, line, len);
        if (message_split_batch(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &spans, &n) == 0)
                for (size_t i = 0; i < n; i++)
                        note_one(p, line + spans[i].start, spans[i].len);
}

static void check_to_client(const Message *m) {
        IdField f[16];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                FUZZ_ASSERT(was_seen(&client, m->id_text));
        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(starts_with(m->id_text, "\"" UPCALL_PREFIX));
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/cancelled"))
                for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++)
                        FUZZ_ASSERT(starts_with(f[i].text, "\"" UPCALL_PREFIX));
}

static void check_to_shim(const Message *m) {
        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(was_seen(&client, m->id_text) || starts_with(m->id_text, "\"" UPSTREAM_OWN_PREFIX));
        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                FUZZ_ASSERT(was_seen(&shim, m->id_text));
}

static void check_one(const char *line, size_t len, bool to_client) {
        _cleanup_message_ Message *m = NULL;

        /* What goes on was checked: it parses, and is a valid message. */
        FUZZ_ASSERT(message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH + 2, &m) == 0);
        FUZZ_ASSERT(m->kind != JSONRPC_INVALID);
        if (to_client)
                check_to_client(m);
        else
                check_to_shim(m);
}

static void check_line(const char *line, size_t len, bool to_client) {
        _cleanup_free_ Span *spans = NULL;
        size_t n;

        if (!message_is_batch(line, len))
                return check_one(line, len, to_client);
        FUZZ_ASSERT(to_client); /* batches are answered as batches; the shim never gets one */
        FUZZ_ASSERT(message_split_batch(line, len, JSONRPC_DEFAULT_MAX_DEPTH + 3, &spans, &n) == 0);
        for (size_t i = 0; i < n; i++)
                check_one(line + spans[i].start, spans[i].len, true);
}

static void drain(Peer *p, bool to_client) {
        for (;;) {
                ssize_t r = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
                char *nl;

                if (r <= 0)
                        break;
                p->len += (size_t) r;
                while ((nl = memchr(p->buf, '\n', p->len))) {
                        size_t l = (size_t) (nl - p->buf);
                        check_line(p->buf, l, to_client);
                        memmove(p->buf, nl + 1, p->len - l - 1);
                        p->len -= l + 1;
                }
                if (p->len == sizeof p->buf)
                        p->len = 0; /* a line longer than we keep: skip it */
        }
}

static char socket_dir[] = "/tmp/mcp-lazy-fuzz-XXXXXX";
static char socket_path[sizeof(struct sockaddr_un)];

static void socket_cleanup(void) {
        (void) unlink(socket_path);
        (void) rmdir(socket_dir);
}

/* The backend's socket is a datagram socket: a reconnect fails at once (EPROTOTYPE), without
 * starting anything or asking systemd why. */
static Manifest *manifest(bool big) {
        static char text[1024], big_text[65536];
        Manifest *m = NULL;
        char *err = NULL;

        if (!text[0]) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

                FUZZ_ASSERT(fd >= 0 && mkdtemp(socket_dir));
                snprintf(sa.sun_path, sizeof sa.sun_path, "%s/echo.sock", socket_dir);
                FUZZ_ASSERT(bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0);
                memcpy(socket_path, sa.sun_path, sizeof sa.sun_path);
                (void) atexit(socket_cleanup);
                snprintf(text, sizeof text,
                         "{\"backends\":{\"echo\":{\"command\":[\"/bin/false\"],\"socket\":\"%s\","
                         "\"resources\":[{\"uri\":\"x://1\",\"name\":\"one\"}],\"prompts\":[{\"name\":\"p\"}]}},"
                         "\"tools\":[{\"name\":\"t\",\"backend\":\"echo\",\"input_schema\":{\"type\":\"object\"}}]}",
                         sa.sun_path);
                /* A second tool whose description makes the tools/list page past ANSWER_LEND_MIN. */
                snprintf(big_text, sizeof big_text,
                         "%.*s,{\"name\":\"u\",\"backend\":\"echo\",\"description\":\"%0*d\","
                         "\"input_schema\":{\"type\":\"object\"}}]}",
                         (int) strlen(text) - 2, text, 40000, 0);
        }
        FUZZ_ASSERT(manifest_load_string(big ? big_text : text, strlen(big ? big_text : text), "fuzz.json", "/", &m,
                                         &err) == 0);
        return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static sd_event *e;
        static const Options o = {
                .manifest_path = "/nonexistent/fuzz.json",
                .shimd_path = "/nonexistent/mcp-lazy-shimd",
                .max_line = 1 << 20,
                .activation = ACTIVATION_SYSTEMD,
        };
        bool prepared = size > 0 && data[0] == 'A';
        Manifest *m;
        Answers *a = NULL;
        Session *s;
        Upstream *u;
        int cs[2], ks[2];

        if (size > 64 * 1024)
                return 0;
        if (!e)
                FUZZ_ASSERT(sd_event_new(&e) >= 0);
        for (Peer *p = &client; p; p = p == &client ? &shim : NULL) {
                for (size_t j = 0; j < p->n_seen; j++)
                        free(p->seen[j]);
                p->n_seen = p->len = 0;
        }
        m = manifest(prepared);
        if (prepared) {
                struct stat st = {};
                FUZZ_ASSERT(answers_build(m, "fuzz-frontend key", &st, &a) >= 0);
                m = manifest_free(m);
        }
        s = session_new(e, m, &o);
        FUZZ_ASSERT(s);
        session_set_answers(s, a);
        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, cs) == 0);
        /* The client takes a few KiB at a time: a large answer stays queued over several lines. */
        if (prepared)
                (void) setsockopt(cs[0], SOL_SOCKET, SO_SNDBUF, &(int){4096}, sizeof(int));
        FUZZ_ASSERT(session_start(s, cs[0], cs[0]) >= 0);
        client.fd = cs[1];
        /* The backend's shim is connected already: its socket is ours. */
        u = upstream_new(s, "echo");
        FUZZ_ASSERT(u && hashmap_put(s->upstreams, "echo", u) == 0);
        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, ks) == 0);
        FUZZ_ASSERT(upstream_attach(u, ks[0]) == 0);
        shim.fd = ks[1];

        for (size_t at = prepared; at < size;) {
                const char *line = (const char *) data + at, *nl = memchr(line, '\n', size - at);
                size_t len = nl ? (size_t) (nl - line) : size - at;

                at += len + 1;
                if (len < 1)
                        continue;
                if (prepared && line[0] == 'R') {
                        /* A reload: new answers, while the channel may still write from the old ones. */
                        _cleanup_(manifest_freep) Manifest *mf = manifest(true);
                        struct stat st = {};
                        Answers *b = NULL;
                        FUZZ_ASSERT(answers_build(mf, "fuzz-frontend key", &st, &b) >= 0);
                        session_set_answers(s, b);
                } else if (line[0] == 'c') {
                        note_sent(&client, line + 1, len - 1);
                        session_handle_line(s, line + 1, len - 1);
                } else {
                        note_sent(&shim, line + 1, len - 1);
                        upstream_handle_line(u, line + 1, len - 1);
                }
                for (int round = 0; round < 2; round++) {
                        drain(&client, true);
                        drain(&shim, false);
                        (void) sd_event_run(e, 0);
                }
        }
        session_free(s);
        safe_close(client.fd);
        safe_close(shim.fd);
        return 0;
}
