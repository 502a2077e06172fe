/* Upcalls: requests a backend sends to its client (sampling, elicitation, roots/list), forwarded to
 * one client under an id of ours, and the client's answer taken back. Every one is answered or failed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

typedef struct Upcall {
        Instance *instance;
        Client *client;
        char *backend_id; /* the exact text of the backend's id */
        char *key;        /* our id, as given to the client (without quotes) */
        /* the backend's _meta.progressToken in it (its text), if any */
        char *progress_token;
        /* An input request of a bridged call (bridge.c): the call's route and the request's key. */
        int64_t bridge_route;
        char *input_key;
        bool roots; /* the shim's own roots/list (roots.c): no backend waits for it */
} Upcall;

static void upcall_free(Upcall *u) {
        if (!u)
                return;
        free(u->backend_id);
        free(u->input_key);
        free(u->key);
        free(u->progress_token);
        free(u);
}

static void reply_backend_error(Instance *i, const char *id_text, const char *text) {
        _cleanup_json_ cJSON *id = cJSON_CreateRaw(id_text), *e = NULL;

        e = id ? jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text) : NULL;
        if (e && i->ch)
                (void) channel_send_json(i->ch, e);
}
/* Which session a backend's request is for. stdio MCP carries no link between a server's request
 * and the call that caused it, so it goes only where there is no doubt: to the one session with
 * calls in flight at this backend, or, with none in flight, to its one session. Anything else could
 * show one user's sampling prompt to another, so it is refused. */
static Client *pick_client(Instance *i, unsigned *ret_calling) {
        Client *calling = NULL, *attached = NULL;
        unsigned n_calling = 0, n_attached = 0;

        for (Client *c = i->shim->clients; c; c = c->next) {
                if (c->instance != i)
                        continue;
                n_attached++, attached = c;
                if (hashmap_size(&c->pending) > 0)
                        n_calling++, calling = c;
        }
        *ret_calling = n_calling;
        if (n_calling == 1)
                return calling;
        if (n_calling == 0 && n_attached == 1)
                return attached;
        return NULL;
}

/* The one id an upcall's message carries across this hop: ours toward the client, the backend's back. */
static int map_upcall_id(void *userdata, const IdField *f, char **ret) {
        const char *text = userdata;

        if (f->kind != ID_KIND_REQUEST && f->kind != ID_KIND_CANCELLED)
                return 0;
        *ret = strdup(text);
        return *ret ? 1 : -ENOMEM;
}

static void send_translated(const Message *m, const char *id_text, Client *c, Instance *i) {
        _cleanup_free_ char *out = NULL;
        size_t len;

        if (ids_translate(m, map_upcall_id, (void *) id_text, &out, &len) < 0)
                return;
        if (c)
                client_send_text(c, out ?: m->text, len);
        else if (i->ch)
                (void) instance_send_text(i, out ?: m->text, len);
}

void upcall_forward(Instance *i, const Message *m) {
        Shim *s = i->shim;
        unsigned calling;
        Client *c = pick_client(i, &calling);
        _cleanup_free_ char *id = NULL;
        Upcall *u;

        if (mrtr_upcall(i, c, m))
                return;
        if (c)
                c->era_known = true; /* asked as a handshake-era client: it is one from now on */
        if (!c) {
                log_warning("Backend '%s' sent %s while %u sessions were calling it; refused it, since mcp-lazy cannot "
                            "tell which session it is for (use sharing: session for this backend).",
                            shim_backend_name(s), m->method, calling);
                return reply_backend_error(i, m->id_text,
                                           calling > 1 ? "several client sessions share this backend; "
                                                         "mcp-lazy cannot tell which one this request is for"
                                                       : "no client session is connected to answer this request");
        }
        if (hashmap_size(s->upcalls) >= CLIENT_MAX_PENDING)
                return reply_backend_error(i, m->id_text, "too many requests waiting for clients");
        u = calloc(1, sizeof *u);
        id = id_text_string(UPCALL_ID_PREFIX, (unsigned long long) ++s->next_upcall);
        if (!u || !id || !(u->backend_id = strdup(m->id_text)) || !(u->key = strndup(id + 1, strlen(id) - 2)) ||
            hashmap_put(s->upcalls, u->key, u) < 0) {
                upcall_free(u);
                return reply_backend_error(i, m->id_text, "out of memory");
        }
        u->instance = i;
        u->client = c;
        IdField f[4];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));
        for (size_t k = 0; k < n && k < ELEMENTSOF(f); k++)
                if (f[k].kind == ID_KIND_PROGRESS && !u->progress_token)
                        u->progress_token = strndup(f[k].text, f[k].len);
        log_debug("Forwarding %s from backend '%s' to connection %llu as %s.", m->method, shim_backend_name(s),
                  (unsigned long long) c->serial, u->key);
        send_translated(m, id, c, NULL);
}

int upcall_bridge(Instance *i, Route *r, const char *input_key, const char *method, const char *params_text) {
        Shim *s = i->shim;
        _cleanup_json_ cJSON *req = NULL, *id = NULL;
        Upcall *u;
        char key[64];

        if (!r->client)
                return -ENOTCONN; /* routes go with their client: a bridged call without one asks no one */
        if (hashmap_size(s->upcalls) >= CLIENT_MAX_PENDING)
                return -ENOBUFS;
        snprintf(key, sizeof key, UPCALL_ID_PREFIX "%llu", (unsigned long long) ++s->next_upcall);
        u = calloc(1, sizeof *u);
        id = cJSON_CreateString(key);
        /* The backend's params go on as its bytes. */
        req = id ? jsonrpc_request_new(id, method, params_text ? cJSON_CreateRaw(params_text) : NULL) : NULL;
        if (!u || !req || !(u->key = strdup(key)) || !(u->input_key = strdup(input_key)) ||
            hashmap_put(s->upcalls, u->key, u) < 0) {
                upcall_free(u);
                return -ENOMEM;
        }
        u->instance = i;
        u->client = r->client;
        u->bridge_route = r->backend_id;
        log_debug("Asking connection %llu for %s ('%s') for backend '%s'.", (unsigned long long) r->client->serial,
                  method, input_key, shim_backend_name(s));
        client_send(r->client, req);
        return 0;
}

Instance *upcall_progress_target(Client *c, const char *text, size_t len) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(c->shim->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                if (u->client == c && u->progress_token && strlen(u->progress_token) == len &&
                    memcmp(u->progress_token, text, len) == 0)
                        return u->instance;
        }
        return NULL;
}

int upcall_roots(Client *c) {
        Shim *s = c->shim;
        _cleanup_json_ cJSON *req = NULL, *id = NULL;
        Upcall *u;
        char key[64];

        if (hashmap_size(s->upcalls) >= CLIENT_MAX_PENDING)
                return -ENOBUFS;
        snprintf(key, sizeof key, UPCALL_ID_PREFIX "%llu", (unsigned long long) ++s->next_upcall);
        u = calloc(1, sizeof *u);
        id = cJSON_CreateString(key);
        req = id ? jsonrpc_request_new(id, "roots/list", NULL) : NULL;
        if (!u || !req || !(u->key = strdup(key)) || hashmap_put(s->upcalls, u->key, u) < 0) {
                upcall_free(u);
                return -ENOMEM;
        }
        u->client = c;
        u->roots = true;
        c->era_known = true; /* asked as a handshake-era client: it is one from now on */
        log_debug("Asking connection %llu for its roots as %s.", (unsigned long long) c->serial, key);
        client_send(c, req);
        return 0;
}

void upcall_drop_roots(Client *c) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(c->shim->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                if (u->roots && u->client == c) {
                        hashmap_remove(c->shim->upcalls, u->key);
                        upcall_free(u);
                }
        }
}

bool upcall_answer(Client *c, const Message *m) {
        Shim *s = c->shim;
        Upcall *u;

        /* Our ids have no escapes: one that decodes with a NUL ("...:3\u0000x") is not ours, though its
         * tree's string ends there. */
        if (!cJSON_IsString(m->id) || strncmp(m->id->valuestring, UPCALL_ID_PREFIX, strlen(UPCALL_ID_PREFIX)) != 0 ||
            strstr(m->id_text, "\\u0000"))
                return false;
        u = hashmap_get(s->upcalls, m->id->valuestring);
        if (!u || u->client != c)
                return false;
        hashmap_remove(s->upcalls, u->key);
        if (u->roots)
                roots_answered(c, m->json);
        else if (u->input_key) {
                Span rs;
                _cleanup_free_ char *result = message_find(m, (const char *const[]){"result", NULL}, &rs) >= 0
                                                      ? message_span_dup(m, rs)
                                                      : NULL;
                bridge_input_answer(u->instance, u->bridge_route, u->input_key, m->json, result);
        } else
                send_translated(m, u->backend_id, NULL, u->instance);
        upcall_free(u);
        return true;
}

bool upcall_fail(Client *c, const cJSON *id, const char *text) {
        Shim *s = c->shim;
        Upcall *u;

        if (!cJSON_IsString(id) || !(u = hashmap_get(s->upcalls, id->valuestring)) || u->client != c)
                return false;
        hashmap_remove(s->upcalls, u->key);
        if (u->roots)
                roots_failed(c, text);
        else if (u->input_key) {
                /* An input request of a bridged call: that call fails, saying why. */
                _cleanup_json_ cJSON *m = cJSON_CreateObject();
                cJSON *e = m ? cJSON_AddObjectToObject(m, "error") : NULL;
                if (e && cJSON_AddStringToObject(e, "message", text))
                        bridge_input_answer(u->instance, u->bridge_route, u->input_key, m, NULL);
        } else
                reply_backend_error(u->instance, u->backend_id, text);
        upcall_free(u);
        return true;
}

/* The client hears that our request u is withdrawn; its late answer finds nothing. */
static void withdraw_at_client(const Upcall *u, const char *reason) {
        _cleanup_json_ cJSON *n = NULL;
        cJSON *params = cJSON_CreateObject();

        if (params && (!cJSON_AddStringToObject(params, "requestId", u->key) ||
                       !cJSON_AddStringToObject(params, "reason", reason)))
                params = (cJSON_Delete(params), NULL);
        n = params ? jsonrpc_notification_new("notifications/cancelled", params) : NULL;
        if (n && u->client)
                client_send(u->client, n);
}

/* Forgets the upcalls matching (c or i); those with a live backend and a gone client are failed,
 * those with a live client and a gone backend withdrawn (the client would go on asking its user or
 * its model for nobody). */
static void forget(Shim *s, Client *c, Instance *i) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                if ((c && u->client != c) || (i && u->instance != i))
                        continue;
                if (c && u->backend_id)
                        reply_backend_error(u->instance, u->backend_id,
                                            "the client session that was asked has gone away");
                if (i && u->client)
                        withdraw_at_client(u, "the backend that asked for it has stopped");
                hashmap_remove(s->upcalls, u->key);
                upcall_free(u);
        }
}

void upcall_withdraw_bridged(Instance *i, int64_t route_id, const char *reason) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(i->shim->upcalls, &state, NULL, &v)) {
                Upcall *u = v;

                if (!u->input_key || u->instance != i || u->bridge_route != route_id)
                        continue;
                withdraw_at_client(u, reason);
                log_debug("Withdrew %s ('%s') from connection %llu.", u->key, u->input_key,
                          u->client ? (unsigned long long) u->client->serial : 0ULL);
                hashmap_remove(i->shim->upcalls, u->key);
                upcall_free(u);
        }
}

void upcall_forget_client(Shim *s, Client *c) {
        forget(s, c, NULL);
}

void upcall_forget_instance(Shim *s, Instance *i) {
        forget(s, NULL, i);
}

void upcall_cancelled(Instance *i, const Message *m) {
        IdField f[4];
        size_t n = ids_fields(m, f, ELEMENTSOF(f)), state = 0;
        const IdField *rid = NULL;
        void *v;

        if (mrtr_cancelled(i, m))
                return;
        for (size_t k = 0; k < n && k < ELEMENTSOF(f); k++)
                if (f[k].kind == ID_KIND_CANCELLED)
                        rid = &f[k];
        while (rid && hashmap_iterate(i->shim->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                _cleanup_free_ char *id = NULL;

                if (u->instance != i || !u->backend_id || strlen(u->backend_id) != rid->len ||
                    memcmp(u->backend_id, rid->text, rid->len) != 0)
                        continue;
                if (asprintf(&id, "\"%s\"", u->key) >= 0)
                        send_translated(m, id, u->client, NULL);
                hashmap_remove(i->shim->upcalls, u->key);
                upcall_free(u);
                return;
        }
}
