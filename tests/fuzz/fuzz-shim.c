/* Fuzz target: the shim's message handling, for real (shimd/client.c, instance.c, upcalls.c), with two
 * client sessions on one pooled backend. Each input line goes to the shim from the peer its first byte
 * names ('a', 'b': a client; 'k': the backend; a line "Ma" or "Mb" makes that client one whose
 * initialize said 2026-07-28, a handshake-era one otherwise; "xa" or "xb": that client leaves; "T":
 * the backend's timer (init_timeout, a stop's grace) runs out now); everything the shim writes is read
 * back and checked: every line is a valid message, an answer reaches only a session that used its id,
 * a progress notification only the session that named its token, and the backend gets only our
 * request ids.
 *
 * The backend is up (READY) unless the input's first line is "S" or "D": then it is down, and the
 * first call starts it for real (instance_spawn(), its timer armed), the input speaking for the
 * process over the socket it is given (process.c is left out: see process_spawn() below), so that
 * the input answers the first request (well, badly, late or never, "T" making init_timeout run out)
 * while the sessions' calls queue, and a line "C" closes the backend's stdout. "S": an earlier start
 * learned a handshake-era backend, so initialize (id 0) goes first; "D": server/discover (id -100)
 * does, as at a first start. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"
#include "ids.h"
#include "macros.h"
#include "message.h"
#include "peek.h"
#include "process.h"
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

/* process.c's part. A started backend is a socket whose other end the input speaks for
 * (started_fd), and a child of ours that only waits (sd_event_add_child() wants a real child): it is
 * never signalled (process_kill() does nothing), and it ends when this process does (the pipe it
 * reads is closed then: a replay runs each input in a process of its own). One start per input, in
 * the modes "S" and "D" only: any other (a session whose roots changed gets a backend of its own)
 * fails as a spawn can. */
static pid_t waiter = -1;
static int started_fd = -EBADF;
static bool may_spawn;

static void waiter_ensure(void) {
        sigset_t mask;
        int p[2];
        char c;

        if (waiter > 0 && waitpid(waiter, NULL, WNOHANG) == 0)
                return;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        FUZZ_ASSERT(sigprocmask(SIG_BLOCK, &mask, NULL) == 0);
        FUZZ_ASSERT(pipe2(p, O_CLOEXEC) == 0);
        waiter = fork();
        FUZZ_ASSERT(waiter >= 0);
        if (waiter == 0) {
                close(p[1]);
                while (read(p[0], &c, 1) < 0 && errno == EINTR)
                        ;
                _exit(0);
        }
        close(p[0]); /* p[1] stays open, unused, as long as this process runs */
}

int process_spawn(const Backend *b, pid_t *ret_pid, int *ret_stdin, int *ret_stdout, char *err, size_t errlen) {
        int sv[2], out;

        if (!may_spawn) {
                snprintf(err, errlen, "cannot start backend '%s': %s", b->name, strerror(EMFILE));
                return -EMFILE;
        }
        may_spawn = false;
        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
        out = fcntl(sv[0], F_DUPFD_CLOEXEC, 3);
        FUZZ_ASSERT(out >= 0);
        safe_close(started_fd);
        started_fd = sv[1];
        *ret_pid = waiter;
        *ret_stdin = sv[0];
        *ret_stdout = out;
        return 0;
}

void process_kill(pid_t pid, int sig) {
        (void) pid, (void) sig;
}

void process_describe_exit(const siginfo_t *si, char *buf, size_t size) {
        (void) si;
        snprintf(buf, size, "exited");
}

#define MAX_SEEN 4096

typedef struct Peer {
        int fd;                     /* our end */
        const char *seen[MAX_SEEN]; /* id and token texts this peer sent (owned) */
        char *ids[MAX_SEEN];        /* each id text a line of this peer showed, with counts */
        unsigned sent[MAX_SEEN], answered[MAX_SEEN];
        size_t n_ids;
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

static void count_id(Peer *p, const char *t, bool answer) {
        size_t i;
        for (i = 0; i < p->n_ids; i++)
                if (streq(p->ids[i], t))
                        break;
        if (i == p->n_ids) {
                if (answer) {
                        fprintf(stderr, "answer under id %s, which this session never sent\n", t);
                        FUZZ_ASSERT(!"answer under an id never sent");
                }
                if (p->n_ids == MAX_SEEN)
                        return;
                p->ids[p->n_ids] = strdup(t);
                p->sent[p->n_ids] = p->answered[p->n_ids] = 0;
                p->n_ids++;
        }
        if (answer) {
                p->answered[i]++;
                if (p->answered[i] > p->sent[i])
                        fprintf(stderr, "%u answers under id %s, sent %u\n", p->answered[i], t, p->sent[i]);
                FUZZ_ASSERT(p->answered[i] <= p->sent[i]);
        } else
                p->sent[i]++;
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
                if (id)
                        count_id(p, id->valuestring, false);
                return;
        }
        if (m->id_text)
                remember(p, m->id_text, strlen(m->id_text));
        if (m->id_text)
                count_id(p, m->id_text, false);
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
        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                count_id(p, m->id_text, true);
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

/* A line from a started backend, through its socket: what the shim does not read at once waits. */
static void backend_write(Peer *k, sd_event *e, const char *line, size_t len) {
        struct iovec iov[2] = {{(void *) line, len}, {(void *) "\n", 1}};
        size_t left = len + 1;

        for (int tries = 0; left > 0 && tries < 64; tries++) {
                ssize_t n = writev(k->fd, iov, 2);
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return; /* the shim closed it */
                if (n > 0) {
                        left -= (size_t) n;
                        for (unsigned j = 0; j < 2; j++) {
                                size_t d = (size_t) n < iov[j].iov_len ? (size_t) n : iov[j].iov_len;
                                iov[j].iov_base = (char *) iov[j].iov_base + d;
                                iov[j].iov_len -= d;
                                n -= (ssize_t) d;
                        }
                }
                drain(k, true);
                (void) sd_event_run(e, 0);
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

/* The backend's timer runs out now, if it is set. */
static void timer_elapse(Instance *i) {
        if (i->timer_source && sd_event_source_get_enabled(i->timer_source, NULL) > 0)
                FUZZ_ASSERT(sd_event_source_set_time(i->timer_source, 1) >= 0);
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

static bool client_alive(Shim *s, Client *c) {
        for (Client *x = s->clients; x; x = x->next)
                if (x == c)
                        return true;
        return false;
}

/* The session p/c leaves (or left by itself): a fresh session takes its letter, with nothing seen. */
static Client *replace_client(Shim *s, Peer *p, Client *c, bool was_freed) {
        if (!was_freed)
                client_free(c);
        safe_close(p->fd);
        for (size_t j = 0; j < p->n_seen; j++)
                free((char *) p->seen[j]);
        for (size_t j = 0; j < p->n_ids; j++)
                free(p->ids[j]);
        *p = (Peer){.fd = -1};
        return connect_client(s, p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static sd_event *e;
        static Peer a, b, k;
        Shim s = {};
        Client *ca, *cb;
        Instance *i;
        char mode = size > 0 && (data[0] == 'S' || data[0] == 'D') && (size == 1 || data[1] == '\n') ? data[0] : 0;
        int sv[2];

        if (size > 64 * 1024)
                return 0;
        if (!e) {
                /* As the shim's loop does (event_new()): a write to a peer that went is EPIPE, no signal. */
                (void) signal(SIGPIPE, SIG_IGN);
                /* Nowhere to keep a learned era (era-state.c): the target writes no files. */
                unsetenv("STATE_DIRECTORY");
                unsetenv("RUNTIME_DIRECTORY");
                unsetenv("XDG_RUNTIME_DIR");
                FUZZ_ASSERT(sd_event_new(&e) >= 0);
        }
        if (mode)
                waiter_ensure();
        may_spawn = mode;
        for (Peer *p = &a; p; p = p == &a ? &b : p == &b ? &k : NULL) {
                for (size_t j = 0; j < p->n_seen; j++)
                        free((char *) p->seen[j]);
                for (size_t j = 0; j < p->n_ids; j++)
                        free(p->ids[j]);
                *p = (Peer){.fd = -1};
        }
        s.event = e;
        s.manifest = manifest();
        s.backend = &s.manifest->backends[0];
        s.upcalls = hashmap_new();
        FUZZ_ASSERT(s.upcalls);
        /* "S": an earlier start learned a handshake-era backend, so initialize goes first. */
        s.learned_era = mode == 'S' ? BACKEND_ERA_LEGACY : BACKEND_ERA_UNKNOWN;
        ca = connect_client(&s, &a);
        cb = connect_client(&s, &b);
        i = ca->instance;
        FUZZ_ASSERT(cb->instance == i);
        if (!mode) {
                /* A backend that is up: its stdin and stdout are our socket. */
                FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
                FUZZ_ASSERT(channel_new(e, sv[0], sv[0], 0, on_backend_dummy, NULL, &i->ch) == 0);
                channel_set_backpressure(i->ch, false);
                k.fd = sv[1];
                i->state = INSTANCE_READY;
                i->init_result = cJSON_CreateObject();
        }

        for (size_t at = mode ? 2 : 0; at < size;) {
                const char *line = (const char *) data + at, *nl = memchr(line, '\n', size - at);
                size_t len = nl ? (size_t) (nl - line) : size - at;

                at += len + 1;
                if (len < 1)
                        continue;
                if (line[0] == 'M' && len >= 2) {
                        /* "Ma", "Mb": that session's initialize said its client speaks 2026-07-28. */
                        Client *c = line[1] == 'a' ? ca : cb;
                        if (c)
                                c->modern = true;
                        continue;
                }
                if ((line[0] == 'X' || line[0] == 'H') && len >= 2 && (line[1] == 'a' || line[1] == 'b')) {
                        /* "Xa", "Xb": that session leaves and a new one takes its letter; "Ha", "Hb": it
                         * hangs up and the shim finds out on its own read (review 5). */
                        Peer *p = line[1] == 'a' ? &a : &b;
                        Client **cp = line[1] == 'a' ? &ca : &cb;
                        if (line[0] == 'X')
                                *cp = replace_client(&s, p, *cp, false);
                        else {
                                /* The session hangs up: the shim finds out by itself. */
                                (void) shutdown(p->fd, SHUT_RDWR);
                                for (int round = 0; round < 3; round++)
                                        (void) sd_event_run(e, 0);
                                *cp = replace_client(&s, p, *cp, !client_alive(&s, *cp));
                        }
                        FUZZ_ASSERT((*cp)->instance == i);
                        continue;
                }
                if (line[0] == 'x' && len >= 2) {
                        /* "xa", "xb": that session leaves (its connection closed). */
                        Client **c = line[1] == 'a' ? &ca : &cb;
                        *c = client_free(*c);
                } else if (line[0] == 'T')
                        timer_elapse(i);
                else if (line[0] == 'C' && mode && k.fd >= 0)
                        (void) shutdown(k.fd, SHUT_WR); /* the backend closes its stdout */
                else if (line[0] == 'a' || line[0] == 'b') {
                        Peer *p = line[0] == 'a' ? &a : &b;
                        Client *c = line[0] == 'a' ? ca : cb;
                        if (!c)
                                continue;
                        note_sent(p, line + 1, len - 1);
                        client_handle_line(c, line + 1, len - 1);
                } else if (!mode) {
                        note_sent(&k, line + 1, len - 1);
                        instance_handle_backend_line(i, line + 1, len - 1);
                } else if (k.fd >= 0) {
                        /* A started backend's line goes through its pipe, as the shim reads one. */
                        note_sent(&k, line + 1, len - 1);
                        backend_write(&k, e, line + 1, len - 1);
                }
                if (k.fd < 0 && started_fd >= 0)
                        k.fd = TAKE_FD(started_fd);
                for (int round = 0; round < 2; round++) {
                        drain(&a, false);
                        drain(&b, false);
                        drain(&k, true);
                        (void) sd_event_run(e, 0);
                }
        }
        client_free(ca);
        client_free(cb);
        for (Instance *j = s.instances; j; j = j->next)
                j->pid = 0; /* the waiter stays */
        while (s.instances)
                instance_free(s.instances);
        started_fd = safe_close(started_fd);
        hashmap_free(s.upcalls);
        safe_close(a.fd);
        safe_close(b.fd);
        safe_close(k.fd);
        return 0;
}
