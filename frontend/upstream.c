/* Upstreams: the frontend's connections to backend shims, with requests forwarded under the client's ids. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "peek.h"

struct UpConn {
        Upstream *up;
        Channel *ch;
        unsigned n_pending;
        bool draining; /* the shim is stopping: nothing new goes here, answers still come */
        UpConn *next;  /* in Upstream.old */
};

struct Upstream {
        Session *s;
        char *name; /* the backend's; its settings are looked up at each connect (the manifest may change) */
        UpConn *current;
        UpConn *old; /* draining connections that still owe answers */
};

typedef struct Upcall {
        UpConn *conn;
        cJSON *shim_id;
        char *key;
} Upcall;

static void upcall_free(Upcall *u) {
        if (!u)
                return;
        cJSON_Delete(u->shim_id);
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

/* Fails every request still owed by c, then forgets c. */
static void upconn_close(UpConn *c, const char *why) {
        Upstream *u = c->up;
        Session *s = u->s;
        char text[512];
        size_t state = 0;
        void *v;

        snprintf(text, sizeof text, "lost the connection to backend '%s' (%s); the call may or may not have run",
                 up_name(u), why);
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
        if (u->current == c)
                u->current = NULL;
        for (UpConn **i = &u->old; *i; i = &(*i)->next)
                if (*i == c) {
                        *i = c->next;
                        break;
                }
        upconn_free(c);
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
        }
        /* Our EOF tells the shim we will send nothing more; it answers what it has and closes. */
        channel_close_write(c->ch);
}

/* Takes *msgp when it answers a pending request: the parsed line goes to the client as it is. */
static void upconn_handle_response(UpConn *c, cJSON **msgp, const JsonRpcMessage *m) {
        const cJSON *msg = *msgp;
        Session *s = c->up->s;
        _cleanup_free_ char *key = NULL;
        Pending *p;

        if (cJSON_IsString(m->id) &&
            strncmp(m->id->valuestring, UPSTREAM_OWN_PREFIX, strlen(UPSTREAM_OWN_PREFIX)) == 0 &&
            !streq(m->id->valuestring, UPSTREAM_INIT_ID))
                return; /* the answer to a replayed logging/setLevel: nobody waits for it */
        if (cJSON_IsString(m->id) && streq(m->id->valuestring, UPSTREAM_INIT_ID)) {
                const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
                if (err)
                        log_warning("Backend '%s' refused initialize: %s", up_name(c->up),
                                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message")) ?: "?");
                return;
        }
        key = jsonrpc_id_key(m->id);
        p = key ? hashmap_get(s->pending, key) : NULL;
        if (!p || p->conn != c) {
                log_debug("Dropping a response from backend '%s' that matches no request.", up_name(c->up));
                return;
        }
        session_complete(s, p, TAKE_PTR(*msgp));
}

/* A backend asks the client something (sampling, elicitation, roots): the client sees it under an
 * id of ours, since two backends may use the same ids. */
static void upconn_forward_upcall(UpConn *c, const cJSON *msg, const JsonRpcMessage *m) {
        Session *s = c->up->s;
        _cleanup_json_ cJSON *copy = cJSON_Duplicate(msg, true);
        Upcall *u = calloc(1, sizeof *u);
        char key[64];

        snprintf(key, sizeof key, UPCALL_PREFIX "%llu", (unsigned long long) ++s->next_upcall);
        if (hashmap_size(s->upcalls) >= SESSION_MAX_PENDING) {
                _cleanup_json_ cJSON *e =
                        jsonrpc_error_new(m->id, JSONRPC_INTERNAL_ERROR, "too many requests waiting for the client");
                free(u);
                if (e)
                        (void) channel_send_json(c->ch, e);
                return;
        }
        if (!copy || !u || !(u->shim_id = cJSON_Duplicate(m->id, true)) || !(u->key = strdup(key)) ||
            hashmap_put(s->upcalls, key, u) < 0) {
                _cleanup_json_ cJSON *e = jsonrpc_error_new(m->id, JSONRPC_INTERNAL_ERROR, "out of memory");
                upcall_free(u);
                if (e)
                        (void) channel_send_json(c->ch, e);
                return;
        }
        u->conn = c;
        cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_CreateString(key));
        session_send(s, copy);
}

bool upstream_answer_upcall(Session *s, const cJSON *msg, const cJSON *id) {
        _cleanup_json_ cJSON *copy = NULL;
        Upcall *u;

        if (!cJSON_IsString(id) || !(u = hashmap_remove(s->upcalls, id->valuestring)))
                return false;
        copy = cJSON_Duplicate(msg, true);
        if (copy && cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_Duplicate(u->shim_id, true)))
                (void) channel_send_json(u->conn->ch, copy);
        upcall_free(u);
        return true;
}

static void upconn_handle_line(UpConn *c, const char *line, size_t len) {
        _cleanup_json_ cJSON *msg = NULL;
        JsonRpcMessage m;

        if (jsonrpc_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &msg) < 0) {
                log_warning("Backend '%s' sent a line that is not JSON, ignoring it.", up_name(c->up));
                return;
        }
        m = jsonrpc_classify(msg);
        switch (m.kind) {
        case JSONRPC_RESPONSE:
                return upconn_handle_response(c, &msg, &m);
        case JSONRPC_NOTIFICATION:
                if (streq(m.method, DRAINING_METHOD))
                        return upconn_drain(c);
                /* The manifest is the contract: a backend's own list changes do not reach the client. */
                if (strstr(m.method, "/list_changed"))
                        return;
                return session_send(c->up->s, msg);
        case JSONRPC_REQUEST:
                return upconn_forward_upcall(c, msg, &m);
        case JSONRPC_INVALID:
                log_warning("Backend '%s' sent an invalid message (%s), ignoring it.", up_name(c->up), m.problem);
                return;
        }
}

/* An answer past the line limit fails the call it answers; a notification is dropped; a message that
 * shows neither an id nor a method could be any call's answer, so the connection is closed (failing
 * its calls) rather than left to hang one of them. */
static void upconn_oversize(UpConn *c, const char *line, size_t len) {
        Session *s = c->up->s;
        _cleanup_json_ cJSON *id = jsonrpc_peek_id(line, len), *method = NULL;
        _cleanup_free_ char *key = id ? jsonrpc_id_key(id) : NULL;
        Pending *p = key ? hashmap_get(s->pending, key) : NULL;
        char text[512];

        snprintf(text, sizeof text,
                 "backend '%s' answered with a message longer than the %zu-byte limit (see --max-line-bytes)",
                 up_name(c->up), s->options->max_line);
        log_warning("%s", text);
        if (p && p->conn == c)
                return session_fail(s, p, text);
        if (!id && !(method = json_peek_member(line, len, "method")))
                upconn_close(c, "it sent a message past the line limit");
}

static void on_upconn(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        UpConn *c = userdata;
        char why[256];

        (void) ch;
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

/* A fresh connection begins with the client's own initialize, so the backend sees who it serves. */
static int upconn_handshake(UpConn *c) {
        Session *s = c->up->s;
        _cleanup_json_ cJSON *id = cJSON_CreateString(UPSTREAM_INIT_ID);
        _cleanup_json_ cJSON *init = NULL, *initialized = NULL;
        cJSON *params = s->client_params ? cJSON_Duplicate(s->client_params, true) : NULL;
        int r;

        if (!params) {
                /* The client skipped initialize: speak for it with the newest version and no capabilities. */
                params = cJSON_CreateObject();
                if (params && (!cJSON_AddStringToObject(params, "protocolVersion", "2025-11-25") ||
                               !cJSON_AddObjectToObject(params, "capabilities")))
                        params = (cJSON_Delete(params), NULL);
        }
        init = jsonrpc_request_new(id, "initialize", params);
        initialized = jsonrpc_notification_new("notifications/initialized", NULL);
        if (!id || !init || !initialized)
                return -ENOMEM;
        r = channel_send_json(c->ch, init);
        if (r >= 0)
                r = channel_send_json(c->ch, initialized);
        if (r >= 0 && s->log_level) {
                /* logging/setLevel came before this backend was reached: it gets the same. */
                _cleanup_json_ cJSON *lid = cJSON_CreateString(UPSTREAM_OWN_PREFIX "setLevel"),
                                     *p = cJSON_CreateObject(), *req = NULL;
                if (!lid || !p || !cJSON_AddStringToObject(p, "level", s->log_level))
                        return -ENOMEM;
                req = jsonrpc_request_new(lid, "logging/setLevel", TAKE_PTR(p));
                r = req ? channel_send_json(c->ch, req) : -ENOMEM;
        }
        return r;
}

static int upstream_connect(Upstream *u, char **ret_text) {
        Session *s = u->s;
        const Backend *b = manifest_find_backend(s->manifest, u->name);
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ UpConn *c = NULL;
        int r;

        if (!b) {
                if (asprintf(ret_text, "backend '%s' is no longer in the manifest", u->name) < 0)
                        *ret_text = NULL;
                return -ENOENT;
        }
        r = activation_connect(s->options, b, s->event, &fd, ret_text);
        if (r < 0)
                return r;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->up = u;
        /* The channel owns the fd from here on, also when it fails. */
        r = channel_new(s->event, fd, fd, s->options->max_line, on_upconn, c, &c->ch);
        fd = -EBADF;
        if (r < 0)
                return r;
        channel_set_backpressure(c->ch, false);
        r = upconn_handshake(c);
        if (r < 0) {
                channel_free(c->ch);
                return r;
        }
        u->current = TAKE_PTR(c);
        return 0;
}

void upstream_forward(Upstream *u, Pending *p) {
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
        r = channel_send_json(p->conn->ch, p->request);
        if (r < 0)
                session_fail(s, p, "backend connection failed while sending the request");
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

void upstream_free_upcalls(Session *s) {
        size_t state = 0;
        void *v;

        while (s->upcalls && hashmap_iterate(s->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                hashmap_remove(s->upcalls, u->key);
                upcall_free(u);
        }
}

void upstream_broadcast(Session *s, const cJSON *message) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->upstreams, &state, NULL, &v)) {
                Upstream *u = v;
                if (u->current)
                        (void) channel_send_json(u->current->ch, message);
        }
}

void upstream_cancel(Session *s, Pending *p, const cJSON *notification) {
        /* Same ids on our side of the socket: the shim translates for the backend. */
        if (p->conn && !channel_write_closed(p->conn->ch))
                (void) channel_send_json(p->conn->ch, notification);
        (void) s;
}
