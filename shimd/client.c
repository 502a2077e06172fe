/* Client connections: plain MCP from frontends (or any MCP client) on the backend's socket. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "peek.h"
#include "message.h"
#include "shimd.h"

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
        int r;

        if (client_overflowed(c))
                return;
        r = channel_send(c->ch, text, len);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for connection %llu, dropping it: %m",
                                  (unsigned long long) c->serial);
}

void client_send(Client *c, const cJSON *m) {
        int r;

        if (client_overflowed(c))
                return;
        r = channel_send_json(c->ch, m);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for connection %llu, dropping it: %m",
                                  (unsigned long long) c->serial);
}

static void reply_error(Client *c, const cJSON *id, int code, const char *text) {
        _cleanup_json_ cJSON *m = jsonrpc_error_new(id, code, text);
        if (m)
                client_send(c, m);
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
                        s->n_clients--;
                        break;
                }
        hashmap_free(c->pending);
        channel_free(c->ch);
        cJSON_Delete(c->init_params);
        cJSON_Delete(c->subscriptions);
        free(c->refused);
        free(c);
        shim_update(s);
        return NULL;
}

void client_fail_request(Client *c, const Message *m, const char *text) {
        _cleanup_json_ cJSON *r = NULL;

        if (m->kind != JSONRPC_REQUEST)
                return; /* notifications get no answer, not even a failure */
        r = streq(m->method, "tools/call") ? jsonrpc_result_new(m->id_json, tool_error_result_new(text))
                                           : jsonrpc_error_new(m->id_json, JSONRPC_INTERNAL_ERROR, text);
        if (r)
                client_send(c, r);
}

static void handle_initialize(Client *c, Message *m) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->params, "protocolVersion");
        int r;

        if (!cJSON_IsObject(m->params) || !cJSON_IsString(v))
                return reply_error(c, m->id_json, JSONRPC_INVALID_PARAMS,
                                   "initialize needs params with a string protocolVersion");
        if (c->init_params)
                return reply_error(c, m->id_json, JSONRPC_INVALID_REQUEST, "the connection is already initialized");
        c->init_params = cJSON_Duplicate(m->params, true);
        r = c->init_params ? instance_get(c->shim, c, &c->instance) : -ENOMEM;
        if (r == -EUSERS) {
                c->init_params = (cJSON_Delete(c->init_params), NULL);
                free(c->refused);
                c->refused = strdup("this backend already runs for as many client configurations as it may (8); "
                                    "try again later");
                return reply_error(c, m->id_json, JSONRPC_INTERNAL_ERROR,
                                   c->refused ?: "no room for another client configuration");
        }
        if (r < 0)
                return reply_error(c, m->id_json, JSONRPC_INTERNAL_ERROR, "out of memory");
        instance_submit(c->instance, c, m);
}

static void handle_message(Client *c, Message *m) {
        switch (m->kind) {
        case JSONRPC_REQUEST:
                if (streq(m->method, "initialize"))
                        return handle_initialize(c, m);
                if (streq(m->method, "ping")) {
                        _cleanup_json_ cJSON *r = jsonrpc_result_new(m->id_json, cJSON_CreateObject());
                        if (r)
                                client_send(c, r);
                        return;
                }
                if (!c->instance && c->refused)
                        return client_fail_request(c, m, c->refused);
                if (!c->instance)
                        return reply_error(c, m->id_json, JSONRPC_INVALID_REQUEST, "send initialize first");
                return instance_submit(c->instance, c, m);
        case JSONRPC_NOTIFICATION:
                /* The backend got its own notifications/initialized when it started. */
                if (streq(m->method, "notifications/initialized") || !c->instance)
                        return;
                if (streq(m->method, "notifications/cancelled"))
                        return instance_cancel(c->instance, c, m);
                return instance_submit(c->instance, c, m);
        case JSONRPC_RESPONSE:
                if (!upcall_answer(c, m))
                        log_debug("Dropping a response from connection %llu to a request never sent.",
                                  (unsigned long long) c->serial);
                return;
        case JSONRPC_INVALID:
                return reply_error(c, m->id_json, JSONRPC_INVALID_REQUEST, m->problem);
        }
}

void client_handle_line(Client *c, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        int r;

        if (message_is_batch(line, len))
                return reply_error(c, NULL, JSONRPC_INVALID_REQUEST, "mcp-lazy-shimd does not take JSON-RPC batches");
        r = message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
        if (r == -E2BIG)
                return reply_error(c, NULL, JSONRPC_INVALID_REQUEST, "JSON nested too deeply");
        if (r == -ENOMEM)
                return reply_error(c, NULL, JSONRPC_INTERNAL_ERROR, "out of memory");
        if (r < 0)
                return reply_error(c, NULL, JSONRPC_PARSE_ERROR,
                                   "Parse error: a message must be one line of valid UTF-8 JSON");
        handle_message(c, m);
}

/* A line past the limit: refused under its own id when its beginning shows one. */
static void reply_oversize(Client *c, const char *line, size_t len) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len), *parsed = NULL, *method = NULL;
        char text[160];

        /* The client's answer to a backend's request: that request fails, rather than wait for ever. */
        if (id && !(method = json_peek_member(line, len, "method")) && (parsed = jsonrpc_peek_id(line, len))) {
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

int client_new(Shim *s, int fd) {
        Client *c = calloc(1, sizeof *c);
        int r;

        if (!c) {
                safe_close(fd);
                return -ENOMEM;
        }
        c->shim = s;
        c->serial = ++s->next_client_serial;
        c->pending = hashmap_new();
        if (!c->pending) {
                free(c);
                safe_close(fd);
                return -ENOMEM;
        }
        r = channel_new(s->event, fd, fd, s->max_line, on_client, c, &c->ch);
        if (r < 0) {
                hashmap_free(c->pending);
                free(c);
                return r;
        }
        c->next = s->clients;
        s->clients = c;
        s->n_clients++;
        if (s->draining)
                client_send_draining(c);
        shim_update(s);
        return 0;
}
