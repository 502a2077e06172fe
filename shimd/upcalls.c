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

/* Which session a backend's request is for: stdio MCP carries no link between a server's request
 * and the call that caused it, so it goes to the session with the newest call in flight at this
 * backend (exact whenever one session is calling), else to any session the backend serves. */
static Client *pick_client(Instance *i) {
        Client *best = NULL, *any = NULL;
        int64_t newest = -1;

        for (Client *c = i->shim->clients; c; c = c->next) {
                size_t state = 0;
                void *v;

                if (c->instance != i)
                        continue;
                if (!any)
                        any = c;
                while (hashmap_iterate(c->pending, &state, NULL, &v)) {
                        Route *r = v;
                        if (r->backend_id > newest)
                                newest = r->backend_id, best = c;
                }
        }
        return best ?: any;
}

void upcall_forward(Instance *i, const cJSON *msg, const cJSON *id, const char *method) {
        Shim *s = i->shim;
        Client *c = pick_client(i);
        _cleanup_json_ cJSON *copy = NULL;
        char key[64];
        Upcall *u;

        if (!c)
                return reply_backend_error(i, id, "no client session is connected to answer this request");
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
        if (copy && cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_Duplicate(u->backend_id, true)) && u->instance->ch)
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
                        reply_backend_error(u->instance, u->backend_id, "the client session that was asked has gone away");
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
