/* Fuzz target: the shim's message handling, for real (shimd/client.c, instance.c, upcalls.c), with two
 * client sessions on one pooled backend. Each input line goes to the shim from the peer its first byte
 * names ('a', 'b': a client; 'k': the backend; a line "Ma" or "Mb" makes that client one whose
 * initialize said 2026-07-28, a handshake-era one otherwise); everything the shim writes is read back
 * and checked: every line is a valid message, an answer reaches only a session that used its id, a
 * progress notification only the session that named its token, and the backend gets only our request
 * ids. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "ids.h"
#include "macros.h"
#include "message.h"
#include "peek.h"
#include "shimd.h"

/* main.c's part, which the target leaves out: nothing to re-evaluate here. */
void shim_update(Shim *s) {
        (void) s;
}

void shim_calls_changed(Shim *s, const Client *c) {
        (void) s, (void) c;
}

unsigned shim_in_flight(const Shim *s) {
        (void) s;
        return 0;
}

#define MAX_SEEN 4096

typedef struct Peer {
        int fd;                     /* our end */
        const char *seen[MAX_SEEN]; /* id and token texts this peer sent (owned) */
        size_t n_seen;
        char buf[1 << 16];
        size_t len;
} Peer;

static void remember(Peer *p, const char *text, size_t len) {
        if (p->n_seen < MAX_SEEN)
                p->seen[p->n_seen++] = strndup(text, len);
}

static bool was_seen(const Peer *p, const char *text, size_t len) {
        for (size_t i = 0; i < p->n_seen; i++)
                if (p->seen[i] && strlen(p->seen[i]) == len && memcmp(p->seen[i], text, len) == 0)
                        return true;
        return false;
}

/* What a peer sent: the ids and tokens it may later see again. */
static void note_sent(Peer *p, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        IdField f[16];
        size_t n;

        if (message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m) < 0) {
                /* A line that cannot be read but shows a method is refused under the id its beginning shows. */
                _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len);
                if (id)
                        remember(p, id->valuestring, strlen(id->valuestring));
                return;
        }
        if (m->id_text)
                remember(p, m->id_text, strlen(m->id_text));
        n = ids_fields(m, f, ELEMENTSOF(f));
        for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++)
                remember(p, f[i].text, f[i].len);
}

static bool is_integer(const char *t) {
        if (*t == '-')
                t++;
        if (!*t)
                return false;
        for (; *t; t++)
                if (*t < '0' || *t > '9')
                        return false;
        return true;
}

static void check_to_client(Peer *p, const Message *m) {
        IdField f[16];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                FUZZ_ASSERT(was_seen(p, m->id_text, strlen(m->id_text)));
        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(strncmp(m->id_text, "\"" UPCALL_ID_PREFIX, strlen(UPCALL_ID_PREFIX) + 1) == 0);
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/progress"))
                for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++)
                        FUZZ_ASSERT(was_seen(p, f[i].text, f[i].len));
}

static void check_to_backend(Peer *k, const Message *m) {
        IdField f[16];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(is_integer(m->id_text));
        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                FUZZ_ASSERT(was_seen(k, m->id_text, strlen(m->id_text)));
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/cancelled"))
                for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++)
                        FUZZ_ASSERT(f[i].kind != ID_KIND_CANCELLED || is_integer(strndupa(f[i].text, f[i].len)));
}

/* Reads what the shim wrote to this peer and checks each line. */
static void drain(Peer *p, bool backend) {
        for (;;) {
                ssize_t r = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
                char *nl;

                if (r <= 0)
                        break;
                p->len += (size_t) r;
                while ((nl = memchr(p->buf, '\n', p->len))) {
                        size_t l = (size_t) (nl - p->buf);
                        _cleanup_message_ Message *m = NULL;

                        /* What goes on was checked: it parses, and is a valid message. */
                        FUZZ_ASSERT(message_parse(p->buf, l, JSONRPC_DEFAULT_MAX_DEPTH + 2, &m) == 0);
                        FUZZ_ASSERT(m->kind != JSONRPC_INVALID);
                        if (backend)
                                check_to_backend(p, m);
                        else
                                check_to_client(p, m);
                        memmove(p->buf, nl + 1, p->len - l - 1);
                        p->len -= l + 1;
                }
                if (p->len == sizeof p->buf)
                        p->len = 0; /* a line longer than we keep: skip it */
        }
}

static void on_backend_dummy(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        (void) ch, (void) ev, (void) line, (void) len, (void) error, (void) userdata;
}

static Manifest *manifest(void) {
        static Manifest *m;
        static const char text[] =
                "{\"backends\":{\"echo\":{\"command\":[\"/bin/false\"]}},"
                "\"tools\":[{\"name\":\"t\",\"backend\":\"echo\",\"input_schema\":{\"type\":\"object\"}}]}";
        char *err = NULL;

        if (!m)
                FUZZ_ASSERT(manifest_load_string(text, strlen(text), "fuzz.json", "/", &m, &err) == 0);
        return m;
}

static Client *connect_client(Shim *s, Peer *p) {
        int sv[2];
        Client *c;

        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
        FUZZ_ASSERT(client_new(s, sv[0], false) == 0);
        p->fd = sv[1];
        c = s->clients;
        c->init_params = cJSON_Parse("{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}");
        FUZZ_ASSERT(c->init_params);
        c->era_known = true; /* a handshake-era session, unless a line "M" says otherwise */
        FUZZ_ASSERT(instance_get(s, c, &c->instance) == 0);
        return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static sd_event *e;
        static Peer a, b, k;
        Shim s = {};
        Client *ca, *cb;
        Instance *i;
        int sv[2];

        if (size > 64 * 1024)
                return 0;
        if (!e)
                FUZZ_ASSERT(sd_event_new(&e) >= 0);
        for (Peer *p = &a; p; p = p == &a ? &b : p == &b ? &k : NULL) {
                for (size_t j = 0; j < p->n_seen; j++)
                        free((char *) p->seen[j]);
                *p = (Peer){.fd = -1};
        }
        s.event = e;
        s.manifest = manifest();
        s.backend = &s.manifest->backends[0];
        s.upcalls = hashmap_new();
        FUZZ_ASSERT(s.upcalls);
        ca = connect_client(&s, &a);
        cb = connect_client(&s, &b);
        i = ca->instance;
        FUZZ_ASSERT(cb->instance == i);
        /* A backend that is up: its stdin and stdout are our socket. */
        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
        FUZZ_ASSERT(channel_new(e, sv[0], sv[0], 0, on_backend_dummy, NULL, &i->ch) == 0);
        channel_set_backpressure(i->ch, false);
        k.fd = sv[1];
        i->state = INSTANCE_READY;
        i->init_result = cJSON_CreateObject();

        for (size_t at = 0; at < size;) {
                const char *line = (const char *) data + at, *nl = memchr(line, '\n', size - at);
                size_t len = nl ? (size_t) (nl - line) : size - at;

                at += len + 1;
                if (len < 1)
                        continue;
                if (line[0] == 'M' && len >= 2) {
                        /* "Ma", "Mb": that session's initialize said its client speaks 2026-07-28. */
                        (line[1] == 'a' ? ca : cb)->modern = true;
                        continue;
                }
                if (line[0] == 'a' || line[0] == 'b') {
                        Peer *p = line[0] == 'a' ? &a : &b;
                        note_sent(p, line + 1, len - 1);
                        client_handle_line(line[0] == 'a' ? ca : cb, line + 1, len - 1);
                } else {
                        note_sent(&k, line + 1, len - 1);
                        instance_handle_backend_line(i, line + 1, len - 1);
                }
                for (int round = 0; round < 2; round++) {
                        drain(&a, false);
                        drain(&b, false);
                        drain(&k, true);
                        (void) sd_event_run(e, 0);
                }
        }
        client_free(ca);
        client_free(cb);
        while (s.instances)
                instance_free(s.instances);
        hashmap_free(s.upcalls);
        safe_close(a.fd);
        safe_close(b.fd);
        safe_close(k.fd);
        return 0;
}
