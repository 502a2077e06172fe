/* Upstreams: the frontend's connections to backend shims, with requests forwarded under the client's ids. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "era.h"
#include "frontend.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "peek.h"
#include "printable.h"

struct UpConn {
        Upstream *up;
        Channel *ch;
        unsigned n_pending;
        bool draining;      /* the shim is stopping: nothing new goes here, answers still come */
        RemoteChild *child; /* ssh, for a backend on another host: its stdio is ch */
        bool established;   /* the shim answered our initialize */
        bool ending;        /* ssh's output ended: waiting for it to exit and say why */
        UpConn *next;       /* in Upstream.old */
};

struct Upstream {
        Session *s;
        char *name; /* the backend's; its settings are looked up at each connect (the manifest may change) */
        UpConn *current;
        UpConn *old; /* draining connections that still owe answers */
};

typedef struct Upcall {
        UpConn *conn;
        char *shim_id; /* the exact text of the shim's id */
        char *key;     /* ours, as the client got it (without quotes) */
} Upcall;

static void upcall_free(Upcall *u) {
        if (!u)
                return;
        free(u->shim_id);
        free(u->key);
        free(u);
}

static const char *up_name(const Upstream *u) {
        return u->name;
}

const char *upstream_name(const Upstream *u) {
        return u->name;
}

Upstream *upstream_new(Session *s, const char *name) {
        Upstream *u = calloc(1, sizeof *u);

        if (!u || !(u->name = strdup(name))) {
                free(u);
                return NULL;
        }
        u->s = s;
        return u;
}

static UpConn *upconn_free(UpConn *c) {
        if (!c)
                return NULL;
        channel_free(c->ch);
        remote_child_free(c->child);
        free(c);
        return NULL;
}

Upstream *upstream_free(Upstream *u) {
        if (!u)
                return NULL;
        upconn_free(u->current);
        while (u->old) {
                UpConn *n = u->old->next;
                upconn_free(u->old);
                u->old = n;
        }
        free(u->name);
        free(u);
        return NULL;
}

void upconn_release(UpConn *c) {
        c->n_pending--;
}

/* Fails every request still owed by c with text, then forgets c. */
static void upconn_fail_all(UpConn *c, const char *text) {
        Upstream *u = c->up;
        Session *s = u->s;
        size_t state = 0;
        void *v;

        while (c->n_pending > 0 && hashmap_iterate(s->pending, &state, NULL, &v)) {
                Pending *p = v;
                if (p->conn == c)
                        session_fail(s, p, text);
        }
        state = 0;
        while (hashmap_iterate(s->upcalls, &state, NULL, &v)) {
                Upcall *up = v;
                if (up->conn == c) {
                        hashmap_remove(s->upcalls, up->key);
                        upcall_free(up);
                }
        }
        if (u->current == c) {
                u->current = NULL;
                modern_upstream_lost(s, u->name);
        }
        for (UpConn **i = &u->old; *i; i = &(*i)->next)
                if (*i == c) {
                        *i = c->next;
                        break;
                }
        upconn_free(c);
}

static void upconn_close(UpConn *c, const char *why) {
        char text[512];

        snprintf(text, sizeof text, "lost the connection to backend '%s' (%s); the call may or may not have run",
                 up_name(c->up), why);
        upconn_fail_all(c, text);
}

/* ssh has exited: its calls fail saying why, in words that name the host and what to do. */
static void upconn_remote_ended(RemoteChild *child, void *userdata) {
        UpConn *c = userdata;
        const Manifest *mf = session_manifest(c->up->s);
        const Backend *b = mf ? manifest_find_backend(mf, c->up->name) : NULL;
        _cleanup_free_ char *text = NULL;

        if (b && b->remote.kind != REMOTE_SSH)
                b = NULL;
        text = remote_child_explain(child, b, c->up->name, c->established);
        if (c->n_pending > 0 && text)
                log_warning("%s", text);
        upconn_fail_all(c, text ?: "lost the connection to a remote backend");
}

/* A connect that was under way failed: its calls fail saying what to do, as a connect that fails at
 * once says it. */
static void upconn_connect_failed(UpConn *c, int error) {
        const Manifest *mf = session_manifest(c->up->s);
        const Backend *b = mf ? manifest_find_backend(mf, c->up->name) : NULL;
        _cleanup_free_ char *text = NULL;

        if (b && b->remote.kind == REMOTE_VSOCK)
                text = activation_vsock_unreachable(b, error);
        else if (asprintf(&text, "backend '%s' is unreachable: %s", up_name(c->up), strerror(-error)) < 0)
                text = NULL;
        log_warning("%s", text ?: "a backend is unreachable");
        upconn_fail_all(c, text ?: "a backend is unreachable");
}

static void upconn_drain(UpConn *c) {
        Upstream *u = c->up;

        if (c->draining)
                return;
        log_debug("Backend '%s' is stopping; the next call reconnects.", up_name(u));
        c->draining = true;
        if (u->current == c) {
                u->current = NULL;
                c->next = u->old;
                u->old = c;
                modern_upstream_lost(u->s, u->name); /* the next connection subscribes again */
        }
        /* Our EOF tells the shim we will send nothing more; it answers what it has and closes. */
        channel_close_write(c->ch);
}

static void upconn_bad_answer(UpConn *c, const char *id_text, const char *problem, const char *line, size_t len);

/* JSON-RPC answers a message whose id could not be read with id null: that names none of our calls
 * (all we send is valid, with its id), and closing the connection would fail calls it does not
 * concern. Such an answer is dropped with a warning, whether it is valid or not (then problem says why). */
static void upconn_null_id(UpConn *c, const Message *m, const char *problem) {
        const cJSON *err = !problem && message_json(m) ? cJSON_GetObjectItemCaseSensitive(m->json, "error") : NULL;
        _cleanup_free_ char *text = NULL;

        if (problem)
                return (void) log_warning("Backend '%s' sent an invalid answer with \"id\": null (%s), ignoring it.",
                                          up_name(c->up), problem);
        text = text_printable(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message")) ?: "no message",
                              200);
        log_warning("Backend '%s' sent %s with \"id\": null (%s), ignoring it.", up_name(c->up),
                    err ? "an error" : "a result", err ? text ?: "?" : "an answer to no request");
}

/* Whether a line's one top-level "id" is null, however broken the rest. */
static bool line_id_null(const char *line, size_t len) {
        _cleanup_json_ cJSON *id = json_peek_member(line, len, "id");
        return cJSON_IsNull(id);
}

/* Whether id_text (an id's JSON text) is the id of our initialize. */
static bool id_text_is_init(const char *id_text) {
        _cleanup_json_ cJSON *v = NULL;

        if (!id_text)
                return false;
        if (streq(id_text, "\"" UPSTREAM_INIT_ID "\""))
                return true;
        /* Spelt with escapes: decoded, as the valid path compares it (a NUL would cut it short). */
        if (!strchr(id_text, '\\') || strstr(id_text, "\\u0000"))
                return false;
        v = cJSON_Parse(id_text);
        return cJSON_IsString(v) && streq(v->valuestring, UPSTREAM_INIT_ID);
}

/* Our initialize got an answer we cannot use: the shim may not have taken this connection as we meant
 * it, so nothing more goes on it. Its calls fail naming the backend and what was wrong; the next call
 * connects again. */
static void upconn_init_failed(UpConn *c, const char *problem) {
        char why[256];

        log_warning("Backend '%s' sent an invalid answer to initialize (%s): closing the connection, failing its "
                    "calls.",
                    up_name(c->up), problem);
        snprintf(why, sizeof why, "it sent an invalid answer to initialize: %s", problem);
        upconn_close(c, why);
}

/* An invalid answer to one of our own requests (a stream's subscribe, logging/setLevel): it ends as a
 * refusal saying why, so that what waits on it (the stream's acknowledgement) does not wait for ever.
 * True when id_text was one of ours. */
static bool upconn_own_bad_answer(UpConn *c, const char *id_text, const char *problem) {
        _cleanup_json_ cJSON *id = NULL, *e = NULL;
        _cleanup_free_ char *line = NULL;
        _cleanup_message_ Message *m = NULL;
        char text[512];

        if (!id_text || strncmp(id_text, "\"" UPSTREAM_OWN_PREFIX, strlen(UPSTREAM_OWN_PREFIX) + 1) != 0)
                return false;
        snprintf(text, sizeof text, "backend '%s' sent an invalid answer (%s)", up_name(c->up), problem);
        log_warning("%s", text);
        id = cJSON_CreateRaw(id_text);
        e = id ? jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text) : NULL;
        line = e ? cJSON_PrintUnformatted(e) : NULL;
        if (line && message_parse(line, strlen(line), JSONRPC_DEFAULT_MAX_DEPTH, &m) >= 0)
                (void) modern_own_answer(c->up->s, m);
        else
                log_oom();
        return true;
}

static void upconn_handle_response(UpConn *c, const Message *m) {
        Session *s = c->up->s;

        if (message_id_is_string(m) && streq(m->id->valuestring, UPSTREAM_INIT_ID)) {
                const cJSON *err;

                c->established = true;
                remote_child_established(c->child);
                err = cJSON_GetObjectItemCaseSensitive(message_json(m), "error");
                if (err)
                        log_warning("Backend '%s' refused initialize: %s", up_name(c->up),
                                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message")) ?: "?");
                return;
        }
        if (message_id_is_string(m) && strncmp(m->id->valuestring, UPSTREAM_OWN_PREFIX, strlen(UPSTREAM_OWN_PREFIX)) == 0) {
                (void) modern_own_answer(s, m); /* a stream's subscribe; our logging/setLevel: nobody waits */
                return;
        }
        /* An id that is no id (an object, true) names no call: it could be any call's answer. One of
         * null is what an error to a message whose id could not be read carries, a notification's too. */
        if (m->id && (m->id->type & 0xFF) == cJSON_NULL) /* cJSON_IsNull(), no call into libcjson per answer */
                return upconn_null_id(c, m, NULL);
        if (!m->id_text)
                return upconn_bad_answer(c, NULL, "\"id\" must be a string or an integer", m->text, m->len);
        if (!session_complete(s, c, m))
                log_debug("Dropping a response from backend '%s' that matches no request.", up_name(c->up));
}

/* A line that shows no id (line, len: all of it, or its beginning) could answer any call: the
 * connection is closed, failing its calls, with the line's beginning in the reason. On ssh before the
 * remote shim's first answer only the remote login can have written it (a shell startup file that
 * prints): the calls fail saying so, and what to do about it. */
static void upconn_no_id(UpConn *c, const char *line, size_t len, const char *problem) {
        const Manifest *mf = c->child && !c->established ? session_manifest(c->up->s) : NULL;
        const Backend *b = mf ? manifest_find_backend(mf, c->up->name) : NULL;
        _cleanup_free_ char *quote = text_printable_n(line, len, 80), *text = NULL;
        char why[384];

        if (b && b->remote.kind == REMOTE_SSH && (text = remote_login_noise_explain(b, c->up->name, line, len))) {
                log_warning("%s", text);
                return upconn_fail_all(c, text);
        }
        log_warning("Backend '%s' sent an invalid message without a readable id (%s), beginning '%s': closing the "
                    "connection, failing its calls.",
                    up_name(c->up), problem, quote ?: "?");
        snprintf(why, sizeof why, "it sent an invalid message without a readable id: %s, beginning '%s'", problem,
                 quote ?: "?");
        upconn_close(c, why);
}

/* A message that breaks the rules but could be an answer: the call its id names (of this connection)
 * fails saying why; one that names no call (no id, or one that cannot be read) could be any call's
 * answer, so the connection is closed, failing its calls, rather than left to hang one of them. An id
 * that reads but names no call here is a late answer: dropped. */
static void upconn_bad_answer(UpConn *c, const char *id_text, const char *problem, const char *line, size_t len) {
        Session *s = c->up->s;
        Pending *p = id_text ? hashmap_get(s->pending, id_text) : NULL;
        char text[512];

        if (!c->established && id_text_is_init(id_text))
                return upconn_init_failed(c, problem);
        if (upconn_own_bad_answer(c, id_text, problem))
                return;
        if (p && p->conn == c) {
                snprintf(text, sizeof text, "backend '%s' sent an invalid answer to this call (%s)", up_name(c->up),
                         problem);
                log_warning("%s", text);
                return session_fail(s, p, text);
        }
        if (id_text)
                return (void) log_warning(
                        "Backend '%s' sent an invalid answer (%s) to no call of this session, ignoring it.",
                        up_name(c->up), problem);
        upconn_no_id(c, line, len, problem);
}

/* An answer that breaks the rules still ends its call, with an error that says so. Keys as the scan
 * reads them, as for a line that is not JSON (upconn_unreadable()): "method\u0000" is no "method". */
static void upconn_handle_invalid(UpConn *c, const Message *m) {
        char text[512];

        if (!json_peek_has_key(m->text, m->len, "method")) {
                if (line_id_null(m->text, m->len))
                        return upconn_null_id(c, m, m->problem);
                return upconn_bad_answer(c, m->id_text, m->problem, m->text, m->len);
        }

        log_warning("Backend '%s' sent an invalid message (%s), ignoring it.", up_name(c->up), m->problem);
        if (json_peek_has_key(m->text, m->len, "id")) {
                /* A request all the same: its sender waits, and gets why (under null if its id is bad). */
                _cleanup_json_ cJSON *e = NULL;
                snprintf(text, sizeof text, "Invalid Request: %s", m->problem);
                e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_REQUEST, text);
                if (e)
                        (void) channel_send_json(c->ch, e);
        }
}

/* The one id a backend's request (or its cancellation) carries across this hop. */
static int map_upcall_id(void *userdata, const IdField *f, char **ret) {
        const char *text = userdata;

        if (f->kind != ID_KIND_REQUEST && f->kind != ID_KIND_CANCELLED)
                return 0;
        *ret = strdup(text);
        return *ret ? 1 : -ENOMEM;
}

static void upconn_reply_error(UpConn *c, const Message *m, const char *text) {
        _cleanup_json_ cJSON *e = jsonrpc_error_new(message_id_json(m), JSONRPC_INTERNAL_ERROR, text);
        if (e)
                (void) channel_send_json(c->ch, e);
}

static void upconn_reply_error_id(UpConn *c, const char *id_text, const char *text) {
        _cleanup_json_ cJSON *id = cJSON_CreateRaw(id_text), *e = NULL;

        e = id ? jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text) : NULL;
        if (e)
                (void) channel_send_json(c->ch, e);
}

#define UPCALL_INPUT_ENDED "the client closed its input (stdin): it can no longer answer requests"

/* A backend asks the client something (sampling, elicitation, roots): the client sees it under an
 * id of ours, since two backends may use the same ids. */
static void upconn_forward_upcall(UpConn *c, const Message *m) {
        Session *s = c->up->s;
        _cleanup_free_ char *id = NULL, *out = NULL;
        Upcall *u;
        size_t len;

        if (s->input_ended)
                return upconn_reply_error(c, m, UPCALL_INPUT_ENDED);
        if (hashmap_size(s->upcalls) >= SESSION_MAX_PENDING)
                return upconn_reply_error(c, m, "too many requests waiting for the client");
        u = calloc(1, sizeof *u);
        id = id_text_string(UPCALL_PREFIX, (unsigned long long) ++s->next_upcall);
        if (!u || !id || !(u->shim_id = strdup(m->id_text)) || !(u->key = strndup(id + 1, strlen(id) - 2)) ||
            hashmap_put(s->upcalls, u->key, u) < 0) {
                upcall_free(u);
                return upconn_reply_error(c, m, "out of memory");
        }
        u->conn = c;
        if (ids_translate(m, map_upcall_id, id, &out, &len) >= 0)
                session_send_text(s, out ?: m->text, len);
}

bool upstream_answer_upcall(Session *s, const Message *m) {
        _cleanup_free_ char *out = NULL;
        size_t len;
        Upcall *u;

        /* Our ids have no escapes: one that decodes with a NUL ("...:3\u0000x") is not ours, though
         * its tree's string ends there. */
        if (!message_id_is_string(m) || strstr(m->id_text, "\\u0000") ||
            !(u = hashmap_remove(s->upcalls, m->id->valuestring)))
                return false;
        if (ids_translate(m, map_upcall_id, u->shim_id, &out, &len) >= 0)
                (void) channel_send(u->conn->ch, out ?: m->text, len);
        upcall_free(u);
        return true;
}

bool upstream_fail_upcall(Session *s, const cJSON *id, const char *text) {
        Upcall *u;

        if (!cJSON_IsString(id) || !(u = hashmap_remove(s->upcalls, id->valuestring)))
                return false;
        upconn_reply_error_id(u->conn, u->shim_id, text);
        upcall_free(u);
        return true;
}

/* The backend cancelled one of its requests to the client: the client hears of it under our id. */
static void upconn_upcall_cancelled(UpConn *c, const Message *m) {
        Session *s = c->up->s;
        IdField f[2];
        size_t n = ids_fields(m, f, ELEMENTSOF(f)), state = 0;
        void *v;

        while (n == 1 && hashmap_iterate(s->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                _cleanup_free_ char *id = NULL, *out = NULL;
                size_t len;

                if (u->conn != c || strlen(u->shim_id) != f[0].len || memcmp(u->shim_id, f[0].text, f[0].len) != 0)
                        continue;
                if (asprintf(&id, "\"%s\"", u->key) >= 0 && ids_translate(m, map_upcall_id, id, &out, &len) >= 0)
                        session_send_text(s, out ?: m->text, len);
                hashmap_remove(s->upcalls, u->key);
                upcall_free(u);
                return;
        }
}

/* A line that cannot be read, but shows a "method": a request or a notification, never an answer, so
 * it fails no call (client ids may look like a shim's request ids). A request's sender is told, under
 * the id its beginning shows, rather than wait for ever. */
static bool upconn_unreadable_request(UpConn *c, const char *line, size_t len, const cJSON *id, const char *problem) {
        char text[512];

        if (!json_peek_has_key(line, len, "method"))
                return false;
        if (!id) {
                log_warning("Backend '%s' sent a notification that cannot be read (%s), ignoring it.", up_name(c->up),
                            problem);
                return true;
        }
        log_warning("Backend '%s' sent a request that cannot be read (%s), refusing it.", up_name(c->up), problem);
        snprintf(text, sizeof text, "mcp-lazy cannot read this request (%s)", problem);
        upconn_reply_error_id(c, id->valuestring, text);
        return true;
}

/* A line that is not JSON: the call whose id its beginning shows fails saying so; with no id to read
 * and no method, it is handled as an invalid answer that names no call. */
static void upconn_unreadable(UpConn *c, const char *line, size_t len, int error) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len);
        char problem[128];

        if (error == -E2BIG)
                snprintf(problem, sizeof problem, "JSON nested deeper than %u levels", JSONRPC_DEFAULT_MAX_DEPTH);
        else
                snprintf(problem, sizeof problem, "%s",
                         error == -ENOMEM ? "out of memory reading it" : "a line that is not valid UTF-8 JSON");

        if (upconn_unreadable_request(c, line, len, id, problem))
                return;
        if (!id && line_id_null(line, len))
                return (void) log_warning("Backend '%s' sent an invalid answer with \"id\": null (%s), ignoring it.",
                                          up_name(c->up), problem);
        upconn_bad_answer(c, id ? id->valuestring : NULL, problem, line, len);
}

static void upconn_handle_line(UpConn *c, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        int r;

        /* The envelope alone: an answer goes on to the client as the shim wrote it, unless something
         * reads past the envelope (message_json()). */
        r = message_parse_envelope(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
        if (r < 0)
                return upconn_unreadable(c, line, len, r);
        switch (m->kind) {
        case JSONRPC_RESPONSE:
                return upconn_handle_response(c, m);
        case JSONRPC_NOTIFICATION:
                if (streq(m->method, DRAINING_METHOD))
                        return upconn_drain(c);
                /* The manifest is the contract: a backend's own list changes do not reach the client. */
                if (strstr(m->method, "/list_changed"))
                        return;
                if (streq(m->method, "notifications/cancelled"))
                        return upconn_upcall_cancelled(c, m);
                if (streq(m->method, "notifications/resources/updated") && modern_resource_updated(c->up->s, m))
                        return;
                /* 2026-07-28: log messages only for requests that set a logLevel (then ours is set). */
                if (streq(m->method, "notifications/message") && !c->up->s->protocol_version && !c->up->s->log_level)
                        return;
                return session_send_text(c->up->s, m->text, m->len);
        case JSONRPC_REQUEST:
                if (!message_json(m))
                        return (void) log_oom();
                return upconn_forward_upcall(c, m);
        case JSONRPC_INVALID:
                return upconn_handle_invalid(c, m);
        }
}

/* An answer past the line limit fails the call it answers; a notification is dropped; a message that
 * shows neither an id nor a method could be any call's answer, so the connection is closed (failing
 * its calls) rather than left to hang one of them. */
static void upconn_oversize(UpConn *c, const char *line, size_t len) {
        Session *s = c->up->s;
        _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len);
        Pending *p = id ? hashmap_get(s->pending, id->valuestring) : NULL;
        char text[512], problem[128];

        snprintf(problem, sizeof problem, "a message longer than the %zu-byte limit (see --max-line-bytes)",
                 s->options->max_line);
        if (upconn_unreadable_request(c, line, len, id, problem))
                return;
        if (!c->established && id && id_text_is_init(id->valuestring))
                return upconn_init_failed(c, problem);
        if (id && upconn_own_bad_answer(c, id->valuestring, problem))
                return;
        snprintf(text, sizeof text, "backend '%s' answered with %s", up_name(c->up), problem);
        log_warning("%s", text);
        if (p && p->conn == c)
                return session_fail(s, p, text);
        if (!id && !line_id_null(line, len))
                upconn_close(c, "it sent a message past the line limit");
}

void upstream_handle_line(Upstream *u, const char *line, size_t len) {
        if (u->current)
                upconn_handle_line(u->current, line, len);
}

static void on_upconn(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        UpConn *c = userdata;
        char why[256];

        switch (ev) {
        case CHANNEL_LINE:
                upconn_handle_line(c, line, len);
                break;
        case CHANNEL_OVERSIZE:
                upconn_oversize(c, line, len);
                break;
        case CHANNEL_EOF:
        case CHANNEL_WRITE_ERROR:
        case CHANNEL_CLOSED:
                if (c->child) {
                        /* ssh's exit status and stderr say what happened: wait for them. */
                        if (!c->ending) {
                                c->ending = true;
                                remote_child_wait(c->child, upconn_remote_ended, c);
                        }
                        break;
                }
                if (ev == CHANNEL_WRITE_ERROR && channel_connecting(ch) && error < 0)
                        return upconn_connect_failed(c, error);
                if (error < 0)
                        snprintf(why, sizeof why, "%s", strerror(-error));
                else
                        snprintf(why, sizeof why, "mcp-lazy-shimd closed it");
                upconn_close(c, why);
                break;
        case CHANNEL_DRAINED:
                break;
        }
}

/* A fresh connection begins with the client's own initialize, so the backend sees who it serves, and
 * the shim hears which era the client speaks (params from a 2026-07-28 request's envelope, not from
 * initialize): a modern one is never asked for roots, and a backend's requests reach it as
 * input_required. */
static int upconn_handshake(UpConn *c) {
        Session *s = c->up->s;
        _cleanup_json_ cJSON *id = cJSON_CreateString(UPSTREAM_INIT_ID);
        _cleanup_json_ cJSON *init = NULL, *initialized = NULL;
        cJSON *params = s->client_params ? cJSON_Duplicate(s->client_params, true) : NULL;
        bool modern = s->client_params && !s->protocol_version;
        int r;

        if (!params) {
                /* The client skipped initialize: speak for it with the newest version and no capabilities. */
                params = cJSON_CreateObject();
                if (params && (!cJSON_AddStringToObject(params, "protocolVersion", "2025-11-25") ||
                               !cJSON_AddObjectToObject(params, "capabilities") ||
                               !cJSON_AddItemToObject(params, "clientInfo", era_client_info_new())))
                        params = (cJSON_Delete(params), NULL);
        }
        if (params && era_client_era_put(params, modern) < 0)
                params = (cJSON_Delete(params), NULL);
        init = jsonrpc_request_new(id, "initialize", params);
        initialized = jsonrpc_notification_new("notifications/initialized", NULL);
        if (!id || !init || !initialized)
                return -ENOMEM;
        r = channel_send_json(c->ch, init);
        if (r >= 0)
                r = channel_send_json(c->ch, initialized);
        if (r >= 0 && s->log_level) {
                /* logging/setLevel came before this backend was reached: it gets the same. */
                _cleanup_json_ cJSON *lid = upstream_own_id(s, "setLevel"), *p = cJSON_CreateObject(), *req = NULL;
                if (!lid || !p || !cJSON_AddStringToObject(p, "level", s->log_level))
                        return -ENOMEM;
                req = jsonrpc_request_new(lid, "logging/setLevel", TAKE_PTR(p));
                r = req ? channel_send_json(c->ch, req) : -ENOMEM;
        }
        return r;
}

/* A connection on in_fd/out_fd (one socket, or ssh's stdout/stdin with child its ssh): takes them.
 * connecting: the socket's connect is still under way. */
static int upstream_attach_pair(Upstream *u, int in_fd, int out_fd, RemoteChild *child, bool connecting) {
        Session *s = u->s;
        _cleanup_free_ UpConn *c = NULL;
        int r;

        c = calloc(1, sizeof *c);
        if (!c) {
                safe_close(in_fd);
                if (out_fd != in_fd)
                        safe_close(out_fd);
                remote_child_free(child);
                return -ENOMEM;
        }
        c->up = u;
        c->child = child;
        /* The channel owns the fds from here on, also when it fails. */
        r = channel_new(s->event, in_fd, out_fd, s->options->max_line, on_upconn, c, &c->ch);
        if (r < 0) {
                remote_child_free(child);
                return r;
        }
        channel_set_backpressure(c->ch, false);
        channel_set_last_line(c->ch, false);
        channel_set_burst_head(c->ch, SESSION_BURST_HEAD);
        r = connecting ? channel_set_connecting(c->ch) : 0;
        if (r >= 0)
                r = upconn_handshake(c);
        /* ssh that has already gone (it could not connect): its exit status and stderr, which the write
         * error is now waiting for, say why; a bare "Broken pipe" would not. */
        if (r == -EPIPE && child)
                r = 0;
        if (r < 0) {
                channel_free(c->ch);
                remote_child_free(child);
                return r;
        }
        u->current = TAKE_PTR(c);
        modern_upstream_attached(s, u->name);
        return 0;
}

int upstream_attach(Upstream *u, int fd) {
        return upstream_attach_pair(u, fd, fd, NULL, false);
}

/* Where u's backend is: a local one the prepared answers route to needs no manifest (buf holds it). */
static const Backend *upstream_backend(Upstream *u, Backend *buf) {
        const Manifest *mf;
        const char *socket;

        if (!u->s->manifest && u->s->answers && answers_backend_socket(u->s->answers, u->name, &socket)) {
                *buf = (Backend){.name = u->name, .socket = (char *) socket};
                return buf;
        }
        mf = session_manifest(u->s);
        return mf ? manifest_find_backend(mf, u->name) : NULL;
}

static int upstream_connect(Upstream *u, char **ret_text) {
        Session *s = u->s;
        Backend prepared;
        const Backend *b = upstream_backend(u, &prepared);
        _cleanup_close_ int fd = -EBADF, out_fd = -EBADF;
        RemoteChild *child = NULL;
        int r;

        if (!b) {
                if (asprintf(ret_text, "backend '%s' is no longer in the manifest", u->name) < 0)
                        *ret_text = NULL;
                return -ENOENT;
        }
        if (b->remote.kind == REMOTE_SSH) {
                r = remote_spawn(b, s->event, &child, &fd, &out_fd, ret_text);
                if (r < 0)
                        return r;
                return upstream_attach_pair(u, TAKE_FD(fd), TAKE_FD(out_fd), child, false);
        }
        r = activation_connect(s->options, b, s->event, &fd, ret_text);
        if (r < 0)
                return r;
        int sock = TAKE_FD(fd);
        return upstream_attach_pair(u, sock, sock, NULL, r > 0);
}

void upstream_forward(Upstream *u, Pending *p, const Message *request) {
        Session *s = u->s;
        int r;

        if (!u->current) {
                _cleanup_free_ char *text = NULL;

                r = upstream_connect(u, &text);
                if (r < 0) {
                        char buf[512];
                        if (!text)
                                snprintf(buf, sizeof buf, "backend '%s' is unreachable: %s", up_name(u), strerror(-r));
                        log_warning("%s", text ?: buf);
                        return session_fail(s, p, text ?: buf);
                }
        }
        p->conn = u->current;
        p->conn->n_pending++;
        r = channel_send(p->conn->ch, request->text, request->len);
        if (r == -EPIPE && p->conn->child)
                return; /* ssh has ended: its explanation fails this call with the others (upconn_remote_ended) */
        if (r < 0)
                session_fail(s, p, "backend connection failed while sending the request");
}

int upstream_send_own(Session *s, const char *backend, const cJSON *m) {
        Upstream *u = session_upstream(s, backend);
        _cleanup_free_ char *text = NULL;
        int r;

        if (!u)
                return -ENOMEM;
        if (!u->current) {
                r = upstream_connect(u, &text);
                if (r < 0) {
                        log_warning("%s", text ?: "cannot reach the backend");
                        return r;
                }
        }
        return channel_send_json(u->current->ch, m);
}

void upstream_era_changed(Session *s) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->upstreams, &state, NULL, &v)) {
                Upstream *u = v;
                if (u->current) {
                        log_debug("Backend '%s' was reached in the other era; the next call reconnects.", up_name(u));
                        upconn_drain(u->current);
                }
        }
}

void upstream_set_reading(Session *s, bool b) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->upstreams, &state, NULL, &v)) {
                Upstream *u = v;
                if (u->current)
                        channel_set_reading(u->current->ch, b);
                for (UpConn *c = u->old; c; c = c->next)
                        channel_set_reading(c->ch, b);
        }
}

/* Every backend request waiting for the client forgotten; with fail_text, each answered with it first. */
static void upcalls_end(Session *s, const char *fail_text) {
        size_t state = 0;
        void *v;

        while (s->upcalls && hashmap_iterate(s->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                hashmap_remove(s->upcalls, u->key);
                if (fail_text)
                        upconn_reply_error_id(u->conn, u->shim_id, fail_text);
                upcall_free(u);
        }
}

void upstream_free_upcalls(Session *s) {
        upcalls_end(s, NULL);
}

void upstream_fail_upcalls(Session *s) {
        upcalls_end(s, UPCALL_INPUT_ENDED);
}

void upstream_broadcast_text(Session *s, const char *text, size_t len) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->upstreams, &state, NULL, &v)) {
                Upstream *u = v;
                if (u->current)
                        (void) channel_send(u->current->ch, text, len);
        }
}

void upstream_broadcast(Session *s, const cJSON *message) {
        _cleanup_free_ char *text = cJSON_PrintUnformatted(message);

        if (text)
                upstream_broadcast_text(s, text, strlen(text));
}

cJSON *upstream_own_id(Session *s, const char *what) {
        char id[128];

        snprintf(id, sizeof id, UPSTREAM_OWN_PREFIX "%s:%llu", what, (unsigned long long) ++s->next_own_id);
        return cJSON_CreateString(id);
}

void upstream_cancel(Session *s, Pending *p, const Message *notification) {
        /* Same ids on our side of the socket: the shim translates for the backend. */
        if (p->conn && !channel_write_closed(p->conn->ch))
                (void) channel_send(p->conn->ch, notification->text, notification->len);
        (void) s;
}
