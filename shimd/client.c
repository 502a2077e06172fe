/* Client connections: plain MCP from frontends (or any MCP client) on the backend's socket. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "era.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "peek.h"
#include "message.h"
#include "shimd.h"

/* What one peer's connections hold at this shim. The sums walk the connections: they are asked only
 * when a peer other than the shim's own user queues something. */
static size_t peer_queued(const Shim *s, uid_t uid) {
        size_t n = 0;
        for (const Client *c = s->clients; c; c = c->next)
                if (c->uid == uid)
                        n += channel_queued(c->ch);
        return n;
}

static unsigned peer_sessions(const Shim *s, uid_t uid) {
        unsigned n = 0;
        for (const Client *c = s->clients; c; c = c->next)
                if (c->uid == uid && !c->over_limit)
                        n++;
        return n;
}

/* Root and the shim's own user have no share: root could raise max_sessions anyway. */
static bool peer_over_session_share(const Shim *s, uid_t uid) {
        unsigned share = PEER_SESSIONS_SHARE(s->max_clients);
        return uid != s->own_uid && uid != 0 && peer_sessions(s, uid) >= (share > 0 ? share : 1);
}

static unsigned peer_pending(const Shim *s, uid_t uid) {
        unsigned n = 0;
        for (const Client *c = s->clients; c; c = c->next)
                if (c->uid == uid)
                        n += (unsigned) hashmap_size(&c->pending) + c->n_queued;
        return n;
}

/* Bytes of one peer's messages that the shim holds: queued for a backend that is starting, or kept
 * while in flight (a backend that dies before reading a request gets it again from there). */
static size_t peer_held(const Shim *s, uid_t uid) {
        size_t n = 0;
        for (const Client *c = s->clients; c; c = c->next) {
                size_t state = 0;
                void *v;
                if (c->uid != uid)
                        continue;
                while (hashmap_iterate((Hashmap *) &c->pending, &state, NULL, &v))
                        n += ((const Route *) v)->sent_len;
        }
        for (const Instance *i = s->instances; i; i = i->next)
                n += instance_queued_bytes(i, uid);
        return n;
}

/* Past its share of held bytes, a peer's message is refused. Messages up to PEER_MAX_HELD /
 * PEER_MAX_PENDING (64 KiB) are not weighed: the count of requests already bounds what they add
 * (4096 x 64 KiB), and the common call pays no walk over every route. */
static bool peer_over_held(const Client *c, const Message *m) {
        return m->len > PEER_MAX_HELD / PEER_MAX_PENDING && c->uid != c->shim->own_uid &&
               peer_held(c->shim, c->uid) + m->len > PEER_MAX_HELD;
}

bool peer_may_start_instance(Shim *s, uid_t uid, char *text, size_t size) {
        unsigned n = 0;

        if (uid == s->own_uid)
                return true;
        for (Instance *i = s->instances; i; i = i->next)
                if (i->owner_uid == uid && (i->n_clients > 0 || instance_in_flight(i) > 0))
                        n++;
        if (n < PEER_MAX_INSTANCES)
                return true;
        snprintf(text, size,
                 "backend '%s' already runs %u processes for client configurations of uid %u, the most one user may "
                 "(%u of %u); call with the same client configuration as another session of this user, or try again "
                 "when one ends",
                 shim_backend_name(s), n, (unsigned) uid, PEER_MAX_INSTANCES, SHIM_MAX_INSTANCES);
        return false;
}

/* One user's connections together may leave no more than PEER_MAX_QUEUED unread: past it, the
 * connection that just queued more goes. */
static void client_check_peer_queued(Client *c) {
        /* Every connection's queue together is the cheap bound: most of the time nothing is walked. */
        if (channel_queued(c->ch) == 0 || c->uid == c->shim->own_uid || channel_queued_total() <= PEER_MAX_QUEUED ||
            peer_queued(c->shim, c->uid) <= PEER_MAX_QUEUED)
                return;
        log_warning("The connections of uid %u have not read %zu bytes of answers; closing connection %llu.",
                    (unsigned) c->uid, peer_queued(c->shim, c->uid), (unsigned long long) c->serial);
        c->overflow = c->eof = true;
        channel_set_reading(c->ch, false);
        shim_update(c->shim);
}

/* Each connection may be in the middle of a line of up to --max-line-bytes: one user's together hold
 * no more than PEER_MAX_PARTIAL. Weighed each time a connection's unfinished line has grown by a
 * read's worth (64 KiB), so that a peer sending a byte at a time costs no walk per byte. */
static void on_client_read(Channel *ch, void *userdata) {
        Client *c = userdata;
        size_t mine = channel_pending_in(ch), n = 0;

        if (c->uid == c->shim->own_uid || c->overflow)
                return;
        if (mine >= c->partial_seen && mine < c->partial_seen + 64U * 1024U)
                return;
        c->partial_seen = mine;
        for (const Client *o = c->shim->clients; o; o = o->next)
                if (o->uid == c->uid && !o->overflow)
                        n += channel_pending_in(o->ch);
        if (n <= PEER_MAX_PARTIAL)
                return;
        log_warning("The connections of uid %u hold %zu bytes of unfinished messages; closing connection %llu.",
                    (unsigned) c->uid, n, (unsigned long long) c->serial);
        c->overflow = c->eof = true;
        channel_set_reading(ch, false);
        shim_update(c->shim);
}

/* A shared backend cannot wait for one connection that does not read: past the limit the
 * connection goes (its calls are cancelled), and the others carry on. */
static bool client_overflowed(Client *c) {
        if (c->overflow)
                return true;
        if (channel_queued(c->ch) <= CLIENT_MAX_QUEUED)
                return false;
        log_warning("Connection %llu has not read %zu bytes of answers; closing it.", (unsigned long long) c->serial,
                    channel_queued(c->ch));
        c->overflow = c->eof = true;
        channel_set_reading(c->ch, false);
        shim_update(c->shim);
        return true;
}

void client_send_text(Client *c, const char *text, size_t len) {
        client_sendv(c, &(const struct iovec){(void *) text, len}, 1);
}

void client_sendv(Client *c, const struct iovec *iov, size_t n) {
        int r;

        if (client_overflowed(c))
                return;
        r = channel_sendv(c->ch, iov, n);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for connection %llu, dropping it: %m",
                                  (unsigned long long) c->serial);
        client_check_peer_queued(c);
}

void client_send(Client *c, const cJSON *m) {
        int r;

        if (client_overflowed(c))
                return;
        r = channel_send_json(c->ch, m);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for connection %llu, dropping it: %m",
                                  (unsigned long long) c->serial);
        client_check_peer_queued(c);
}

static void reply_error(Client *c, const cJSON *id, int code, const char *text) {
        _cleanup_json_ cJSON *m = jsonrpc_error_new(id, code, text);
        if (m)
                client_send(c, m);
}

static void over_limit_text(const Shim *s, const Client *c, char *text, size_t size) {
        const char *n = shim_backend_name(s);

        if (c->over_share)
                snprintf(text, size,
                         "uid %u already holds %u of the %u sessions backend '%s' serves, the most one user may; call "
                         "again when one of them has ended (or raise max_sessions of backend '%s' in the manifest)",
                         (unsigned) c->uid, PEER_SESSIONS_SHARE(s->max_clients), s->max_clients, n, n);
        else if (s->fd_bound)
                snprintf(text, size,
                         "backend '%s' is serving %u sessions, as many as its file descriptor limit allows: raise "
                         "LimitNOFILE= of mcp-lazy@%s.service ('systemctl edit mcp-lazy@%s.service'), or call again "
                         "when a session has ended",
                         n, s->n_clients, n, n);
        else
                snprintf(text, size,
                         "backend '%s' is serving %u sessions, its limit: raise max_sessions of backend '%s' in the "
                         "manifest, or call again when a session has ended",
                         n, s->n_clients, n);
}

void client_send_draining(Client *c) {
        _cleanup_json_ cJSON *m = jsonrpc_notification_new(DRAINING_METHOD, NULL);
        if (m)
                client_send(c, m);
}

void client_detach(Client *c) {
        if (!c->instance)
                return;
        instance_forget_client(c->instance, c);
        c->instance = NULL;
}

bool client_done(const Client *c) {
        return c->eof && hashmap_size(&c->pending) + c->n_queued + c->n_held == 0 && !subscribe_waiting(c);
}

Client *client_free(Client *c) {
        Shim *s;

        if (!c)
                return NULL;
        s = c->shim;
        upcall_forget_client(s, c);
        client_detach(c);
        for (Client **p = &s->clients; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        if (c->over_limit)
                                s->n_over_limit--;
                        else
                                s->n_clients--;
                        break;
                }
        roots_client_free(c);
        hashmap_done(&c->pending);
        channel_free(c->ch);
        cJSON_Delete(c->init_params);
        cJSON_Delete(c->subscriptions);
        cJSON_Delete(c->mrtr_ended);
        free(c->log_level);
        free(c->refused);
        free(c);
        shim_update(s);
        return NULL;
}

void client_fail_request(Client *c, const Message *m, const char *text) {
        _cleanup_json_ cJSON *r = NULL;

        if (m->kind != JSONRPC_REQUEST)
                return; /* notifications get no answer, not even a failure */
        r = method_is(m->method, "tools/call") ? jsonrpc_result_new(message_id_json(m), tool_error_result_new(text))
                                               : jsonrpc_error_new(message_id_json(m), JSONRPC_INTERNAL_ERROR, text);
        if (r)
                client_send(c, r);
}

int client_attach(Client *c, char *text, size_t size) {
        int r = instance_get(c->shim, c, &c->instance);

        if (r == -EUSERS) {
                c->init_params = (cJSON_Delete(c->init_params), NULL);
                free(c->refused);
                c->refused = strdup("this backend already runs for as many client configurations as it may (8); "
                                    "try again later");
                snprintf(text, size, "%s", c->refused ?: "no room for another client configuration");
        } else if (r == -EDQUOT) {
                c->init_params = (cJSON_Delete(c->init_params), NULL);
                (void) peer_may_start_instance(c->shim, c->uid, text, size);
        } else if (r < 0)
                snprintf(text, size, "out of memory");
        return r;
}

static void handle_initialize(Client *c, Message *m) {
        const char *problem = NULL;
        const cJSON *v;
        char text[512];
        int r;

        if (!message_json(m))
                return reply_error(c, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        v = cJSON_GetObjectItemCaseSensitive(m->params, "protocolVersion");
        if (!cJSON_IsObject(m->params) || !cJSON_IsString(v))
                return reply_error(c, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "initialize needs params with a string protocolVersion");
        if (c->init_params)
                return reply_error(c, message_id_json(m), JSONRPC_INVALID_REQUEST,
                                   "the connection is already initialized");
        c->init_params = cJSON_Duplicate(m->params, true);
        if (!c->init_params)
                return reply_error(c, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        /* The era its frontend says its client speaks (mrtr.c holds the session to it). */
        r = era_client_era_take(c->init_params, &c->modern, &problem);
        if (r < 0) {
                c->init_params = (cJSON_Delete(c->init_params), NULL);
                snprintf(text, sizeof text, "Invalid params: %s", problem);
                return reply_error(c, message_id_json(m), JSONRPC_INVALID_PARAMS, text);
        }
        c->era_known = r > 0;
        /* Its roots are asked for first when they are part of its pool key (roots.c). */
        if (roots_pooled(c))
                return roots_begin(c, m);
        if (roots_modern_key(c) < 0)
                return reply_error(c, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if (client_attach(c, text, sizeof text) < 0)
                return reply_error(c, message_id_json(m), JSONRPC_INTERNAL_ERROR, text);
        instance_submit(c->instance, c, m);
}

/* A session's answer to a backend's request that breaks the rules, or cannot be read: that request
 * fails saying why, rather than wait for ever (an error to the session's own answer would help nobody).
 * A line with a "method" is no answer; an id with a NUL in it is none of ours. True when the line was
 * such an answer. */
static bool client_bad_answer(Client *c, const char *line, size_t len, const char *problem) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_answer_id(line, len);
        char text[256];

        if (!id)
                return false;
        snprintf(text, sizeof text, "the client's answer was invalid (%s)", problem);
        return upcall_fail(c, id, text);
}

void client_handle_message(Client *c, Message *m) {
        char text[512];

        if (c->over_limit) {
                over_limit_text(c->shim, c, text, sizeof text);
                return client_fail_request(c, m, text);
        }
        /* A peer's requests are routes or queued at the instances: all of theirs bound its count, which
         * is walked only when they reach the limit. */
        if (m->kind == JSONRPC_REQUEST && c->uid != c->shim->own_uid && !method_is(m->method, "initialize") &&
            !method_is(m->method, "ping") && shim_in_flight(c->shim) >= PEER_MAX_PENDING &&
            peer_pending(c->shim, c->uid) >= PEER_MAX_PENDING) {
                snprintf(text, sizeof text,
                         "uid %u already has %u requests in flight at backend '%s', the most one user may; call again "
                         "when some have been answered",
                         (unsigned) c->uid, PEER_MAX_PENDING, shim_backend_name(c->shim));
                return client_fail_request(c, m, text);
        }
        if ((m->kind == JSONRPC_REQUEST || m->kind == JSONRPC_NOTIFICATION) && c->instance && peer_over_held(c, m)) {
                snprintf(text, sizeof text,
                         "uid %u already has %u MiB of requests held at backend '%s' (waiting for it, or in flight), "
                         "the most one user may; call again when some have been answered",
                         (unsigned) c->uid, PEER_MAX_HELD / (1024U * 1024U), shim_backend_name(c->shim));
                if (m->kind == JSONRPC_NOTIFICATION)
                        log_warning("Connection %llu: dropping a notification: %s.", (unsigned long long) c->serial,
                                    text);
                return client_fail_request(c, m, text);
        }
        switch (m->kind) {
        case JSONRPC_REQUEST:
                if (!method_is(m->method, "initialize") && mrtr_request_refused(c, m))
                        return;
                if (method_is(m->method, "initialize"))
                        return handle_initialize(c, m);
                if (method_is(m->method, "ping")) {
                        _cleanup_json_ cJSON *r = jsonrpc_result_new(message_id_json(m), cJSON_CreateObject());
                        if (r)
                                client_send(c, r);
                        return;
                }
                if (!c->instance && c->refused)
                        return client_fail_request(c, m, c->refused);
                if (!c->instance && c->init_params && (roots_pooled(c) || roots_pending(c)) && roots_request(c, m))
                        return; /* asked before, or asked again after no answer */
                if (!c->instance)
                        return reply_error(c, message_id_json(m), JSONRPC_INVALID_REQUEST, "send initialize first");
                return instance_submit(c->instance, c, m);
        case JSONRPC_NOTIFICATION:
                /* The backend got its own notifications/initialized when it started. */
                if (method_is(m->method, "notifications/initialized"))
                        return;
                if (!c->instance && roots_pending(c))
                        return (void) roots_hold(c, m);
                if (!c->instance)
                        return;
                /* Roots that key its pool: the shim asks again, and moves it if they changed; a backend
                 * shared with other sessions never hears of one session's roots. */
                if (method_is(m->method, "notifications/roots/list_changed") && roots_pooled(c)) {
                        if (roots_ask(c) < 0)
                                log_warning("Cannot ask connection %llu for its roots again.",
                                            (unsigned long long) c->serial);
                        return;
                }
                if (method_is(m->method, "notifications/cancelled"))
                        return instance_cancel(c->instance, c, m);
                if (method_is(m->method, "notifications/progress"))
                        return client_progress(c, m);
                return instance_submit(c->instance, c, m);
        case JSONRPC_RESPONSE:
                if (!message_json(m))
                        return (void) log_oom();
                if (!upcall_answer(c, m))
                        log_debug("Dropping a response from connection %llu to a request never sent.",
                                  (unsigned long long) c->serial);
                return;
        case JSONRPC_INVALID:
                if (client_bad_answer(c, m->text, m->len, m->problem))
                        return;
                return reply_error(c, message_id_json(m), JSONRPC_INVALID_REQUEST, m->problem);
        }
}

/* Whether what a client sent is read past its envelope on its way. A request is, for its params._meta
 * (a 2026-07-28 client's envelope, mrtr.c) or its params.requestState (a retry), and where a handler
 * builds the tree itself (initialize, subscriptions, a modern backend's bridge: deliver()). The scan
 * notes both members (keys written with escapes included, as it decodes keys): a request without
 * either goes on from its envelope alone. Anything else is read whole, as before. */
static bool client_reads_tree(const Message *m) {
        return m->kind != JSONRPC_REQUEST || message_route(m, ROUTE_PATH_META).len > 0 ||
               message_route(m, ROUTE_PATH_REQUEST_STATE).len > 0;
}

void client_handle_line(Client *c, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        int r;

        if (message_is_batch(line, len))
                return reply_error(c, NULL, JSONRPC_INVALID_REQUEST, "mcp-lazy-shimd does not take JSON-RPC batches");
        /* One scan checks the whole line and takes its envelope; the tree is built only where something
         * reads past it (client_reads_tree()). A backend's answers go the same way (instance.c). */
        r = message_parse_envelope(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
        if (r >= 0 && client_reads_tree(m) && !message_json(m))
                r = -ENOMEM;
        if (r < 0 && client_bad_answer(c, line, len,
                                       r == -E2BIG    ? "JSON nested too deeply"
                                       : r == -ENOMEM ? "out of memory reading it"
                                                      : "not one line of valid UTF-8 JSON"))
                return;
        if (r == -E2BIG)
                return reply_error(c, NULL, JSONRPC_INVALID_REQUEST, "JSON nested too deeply");
        if (r == -ENOMEM)
                return reply_error(c, NULL, JSONRPC_INTERNAL_ERROR, "out of memory");
        if (r < 0)
                return reply_error(c, NULL, JSONRPC_PARSE_ERROR,
                                   "Parse error: a message must be one line of valid UTF-8 JSON");
        client_handle_message(c, m);
}

/* A line past the limit: refused under its own id when its beginning shows one. */
static void reply_oversize(Client *c, const char *line, size_t len) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len), *parsed = NULL;
        char text[160];

        /* The client's answer to a backend's request: that request fails, rather than wait for ever. An
         * answer as client_bad_answer() reads one: no "method" however cut off or repeated, its id whole
         * (one with \u0000 is none of ours). */
        if (id && (parsed = jsonrpc_peek_answer_id(line, len))) {
                snprintf(text, sizeof text, "the client's answer was longer than the %zu-byte limit",
                         c->shim->max_line);
                if (upcall_fail(c, parsed, text))
                        return;
        }

        snprintf(text, sizeof text, "message longer than the %zu-byte limit (see --max-line-bytes)", c->shim->max_line);
        reply_error(c, id, JSONRPC_INVALID_REQUEST, text);
}

/* EOF alone may be a half-close (a frontend that got our draining notice and still wants its
 * answers); POLLHUP says the peer is gone altogether. */
static bool peer_gone(Client *c) {
        struct pollfd p = {.fd = channel_in_fd(c->ch), .events = POLLOUT};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

static void on_client(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Client *c = userdata;

        (void) ch;
        if (ev == CHANNEL_LINE) /* the usual one first: no jump table to read (.rodata) */
                return client_handle_line(c, line, len);
        switch (ev) {
        case CHANNEL_LINE:
                return client_handle_line(c, line, len);
        case CHANNEL_OVERSIZE:
                return reply_oversize(c, line, len);
        case CHANNEL_EOF:
                c->eof = true;
                /* Gone altogether: nothing we send can be read. */
                if (error < 0 || peer_gone(c)) {
                        client_free(c);
                        return;
                }
                /* A half-close: its answers still go out, then ours (see on_update()). */
                shim_update(c->shim);
                return;
        case CHANNEL_WRITE_ERROR:
        case CHANNEL_CLOSED:
                client_free(c);
                return;
        case CHANNEL_DRAINED:
                return;
        }
}

/* The oldest refused connection goes when more wait to be refused: that bounds their descriptors. */
void refused_make_room(Shim *s) {
        Client *oldest = NULL;

        if (s->n_over_limit < SHIM_MAX_REFUSED)
                return;
        for (Client *c = s->clients; c; c = c->next)
                if (c->over_limit)
                        oldest = c; /* new connections go to the head */
        client_free(oldest);
}

int client_new(Shim *s, int fd, bool over_limit) {
        Client *c = calloc_lines(sizeof *c);
        struct ucred cred = {.pid = 0, .uid = (uid_t) -1, .gid = (gid_t) -1};
        socklen_t len = sizeof cred;
        int r;

        if (!c) {
                safe_close(fd);
                return -ENOMEM;
        }
        c->shim = s;
        c->serial = ++s->next_client_serial;
        c->over_limit = over_limit;
        /* Who is on the other end, for the journal and for per-peer shares. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                log_warning_errno(-errno, "Failed to read the peer credentials of connection %llu, ignoring: %m",
                                  (unsigned long long) c->serial);
        c->uid = cred.uid;
        c->pid = cred.pid;
        /* One user's share of the sessions: past it, refused as past max_sessions, with its own reason. */
        if (!over_limit && peer_over_session_share(s, c->uid)) {
                over_limit = c->over_limit = c->over_share = true;
                refused_make_room(s);
        }
        hashmap_init_borrowed(&c->pending); /* keyed by its routes' client_id */
        r = channel_new(s->event, fd, fd, s->max_line, on_client, c, &c->ch);
        if (r < 0) {
                free(c);
                return r;
        }
        channel_set_read_hook(c->ch, on_client_read);
        c->next = s->clients;
        s->clients = c;
        if (over_limit) {
                char text[512];
                s->n_over_limit++;
                over_limit_text(s, c, text, sizeof text);
                log_warning("Connection %llu from pid %d uid %u refused: %s.", (unsigned long long) c->serial,
                            (int) c->pid, (unsigned) c->uid, text);
        } else {
                s->n_clients++;
                log_info("Connection %llu from pid %d uid %u gid %u.", (unsigned long long) c->serial, (int) c->pid,
                         (unsigned) c->uid, (unsigned) cred.gid);
        }
        /* A frontend past the limit half-closes on the notice and connects anew for its next call. */
        if (s->draining || over_limit)
                client_send_draining(c);
        shim_update(s);
        return 0;
}
