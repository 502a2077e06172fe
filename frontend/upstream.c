/* Upstreams: the frontend's connections to backend shims, with requests forwarded under the client's ids. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"

struct UpConn {
        Upstream *up;
        Channel *ch;
        unsigned n_pending;
        bool draining; /* the shim is stopping: nothing new goes here, answers still come */
        UpConn *next;  /* in Upstream.old */
};

struct Upstream {
        Session *s;
        size_t backend;
        UpConn *current;
        UpConn *old; /* draining connections that still owe answers */
};

static const char *up_name(const Upstream *u) {
        return u->s->manifest->backends[u->backend].name;
}

Upstream *upstream_new(Session *s, size_t backend) {
        Upstream *u = calloc(1, sizeof *u);

        if (!u)
                return NULL;
        u->s = s;
        u->backend = backend;
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

static void upconn_handle_response(UpConn *c, const cJSON *msg, const JsonRpcMessage *m) {
        Session *s = c->up->s;
        _cleanup_free_ char *key = NULL;
        Pending *p;

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
        session_complete(s, p, cJSON_Duplicate(msg, true));
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
                return upconn_handle_response(c, msg, &m);
        case JSONRPC_NOTIFICATION:
                if (streq(m.method, DRAINING_METHOD))
                        return upconn_drain(c);
                /* The manifest is the contract: a backend's own list changes do not reach the client. */
                if (strstr(m.method, "/list_changed"))
                        return;
                return session_send(c->up->s, msg);
        case JSONRPC_REQUEST: {
                _cleanup_json_ cJSON *e =
                        jsonrpc_error_new(m.id, JSONRPC_METHOD_NOT_FOUND, "mcp-lazy does not forward this request");
                if (e)
                        (void) channel_send_json(c->ch, e);
                return;
        }
        case JSONRPC_INVALID:
                log_warning("Backend '%s' sent an invalid message (%s), ignoring it.", up_name(c->up), m.problem);
                return;
        }
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
                log_warning("Backend '%s' sent a message past the line limit, dropped it.", up_name(c->up));
                break;
        case CHANNEL_EOF:
        case CHANNEL_WRITE_ERROR:
                if (error < 0)
                        snprintf(why, sizeof why, "%s", strerror(-error));
                else
                        snprintf(why, sizeof why, "mcp-lazy-shimd closed it");
                upconn_close(c, why);
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
        return r;
}

static int upstream_connect(Upstream *u, char **ret_text) {
        Session *s = u->s;
        const Backend *b = &s->manifest->backends[u->backend];
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ UpConn *c = NULL;
        int r;

        r = activation_connect(s->options, b, s->event, &fd, ret_text);
        if (r < 0)
                return r;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->up = u;
        r = channel_new(s->event, fd, fd, s->options->max_line, on_upconn, c, &c->ch);
        if (r < 0)
                return r;
        fd = -EBADF;
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
