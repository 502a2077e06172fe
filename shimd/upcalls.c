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
        cJSON *backend_id;
        char *key; /* our id, as given to the client */
} Upcall;

static void upcall_free(Upcall *u) {
        if (!u)
                return;
        cJSON_Delete(u->backend_id);
        free(u->key);
        free(u);
}

static void reply_backend_error(Instance *i, const cJSON *id, const char *text) {
        _cleanup_json_ cJSON *e = jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text);
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
                if (hashmap_size(c->pending) > 0)
                        n_calling++, calling = c;
        }
        *ret_calling = n_calling;
        if (n_calling == 1)
                return calling;
        if (n_calling == 0 && n_attached == 1)
                return attached;
        return NULL;
}

/* roots/list carries nothing of a session to another: it only asks, and every session of a pooled
 * backend shares what that backend keeps. Any session it serves may answer. */
static Client *any_client(Instance *i) {
        for (Client *c = i->shim->clients; c; c = c->next)
                if (c->instance == i)
                        return c;
        return NULL;
}

void upcall_forward(Instance *i, const cJSON *msg, const cJSON *id, const char *method) {
        Shim *s = i->shim;
        unsigned calling;
        Client *c = pick_client(i, &calling);
        _cleanup_json_ cJSON *copy = NULL;

        if (!c && streq(method, "roots/list"))
                c = any_client(i);
        char key[64];
        Upcall *u;

        if (!c) {
                log_warning("Backend '%s' sent %s while %u sessions were calling it; refused it, since mcp-lazy cannot "
                            "tell which session it is for (use sharing: session for this backend).",
                            shim_backend_name(s), method, calling);
                return reply_backend_error(i, id,
                                           calling > 1 ? "several client sessions share this backend; "
                                                         "mcp-lazy cannot tell which one this request is for"
                                                       : "no client session is connected to answer this request");
        }
        if (hashmap_size(s->upcalls) >= CLIENT_MAX_PENDING)
                return reply_backend_error(i, id, "too many requests waiting for clients");
        u = calloc(1, sizeof *u);
        snprintf(key, sizeof key, UPCALL_ID_PREFIX "%llu", (unsigned long long) ++s->next_upcall);
        copy = cJSON_Duplicate(msg, true);
        if (!u || !copy || !(u->backend_id = cJSON_Duplicate(id, true)) || !(u->key = strdup(key)) ||
            hashmap_put(s->upcalls, key, u) < 0) {
                upcall_free(u);
                return reply_backend_error(i, id, "out of memory");
        }
        u->instance = i;
        u->client = c;
        cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_CreateString(key));
        log_debug("Forwarding %s from backend '%s' to connection %llu as %s.", method, shim_backend_name(s),
                  (unsigned long long) c->serial, key);
        client_send(c, copy);
}

bool upcall_answer(Client *c, const cJSON *msg, const cJSON *id) {
        Shim *s = c->shim;
        _cleanup_json_ cJSON *copy = NULL;
        Upcall *u;

        if (!cJSON_IsString(id) || strncmp(id->valuestring, UPCALL_ID_PREFIX, strlen(UPCALL_ID_PREFIX)) != 0)
                return false;
        u = hashmap_get(s->upcalls, id->valuestring);
        if (!u || u->client != c)
                return false;
        hashmap_remove(s->upcalls, u->key);
        copy = cJSON_Duplicate(msg, true);
        if (copy && cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_Duplicate(u->backend_id, true)) &&
            u->instance->ch)
                (void) channel_send_json(u->instance->ch, copy);
        upcall_free(u);
        return true;
}

/* Forgets the upcalls matching (c or i); those with a live backend and a gone client are failed. */
static void forget(Shim *s, Client *c, Instance *i) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                if ((c && u->client != c) || (i && u->instance != i))
                        continue;
                if (c)
                        reply_backend_error(u->instance, u->backend_id,
                                            "the client session that was asked has gone away");
                hashmap_remove(s->upcalls, u->key);
                upcall_free(u);
        }
}

void upcall_forget_client(Shim *s, Client *c) {
        forget(s, c, NULL);
}

void upcall_forget_instance(Shim *s, Instance *i) {
        forget(s, NULL, i);
}

void upcall_cancelled(Instance *i, const cJSON *params) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
        size_t state = 0;
        void *v;

        while (rid && hashmap_iterate(i->shim->upcalls, &state, NULL, &v)) {
                Upcall *u = v;
                _cleanup_json_ cJSON *p = NULL, *m = NULL;

                if (u->instance != i || !cJSON_Compare(u->backend_id, rid, true))
                        continue;
                p = cJSON_Duplicate(params, true);
                if (p && cJSON_ReplaceItemInObjectCaseSensitive(p, "requestId", cJSON_CreateString(u->key)) &&
                    (m = jsonrpc_notification_new("notifications/cancelled", TAKE_PTR(p))))
                        client_send(u->client, m);
                hashmap_remove(i->shim->upcalls, u->key);
                upcall_free(u);
                return;
        }
}
