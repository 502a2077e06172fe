/* Roots on pooled backends: roots are a session's own, like a database connection's startup
 * parameters in PgBouncer, so they are part of the pool key. A session whose client declares roots
 * is asked for them by the shim itself before it is given a backend, and pooled only with sessions
 * that answered the same; a backend's roots/list is answered by the shim from its pool's answer,
 * never by one of its sessions. A 2026-07-28 client is never asked: its frontend says so in the
 * initialize (mrtr.c holds the session to the era it says). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

/* Queued by the shim until a session's roots are known: requests and notifications, oldest first. */
struct HeldItem {
        Message *message;
        HeldItem *next;
};

static bool roots_declared(const Client *c) {
        const Shim *s = c->shim;
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(c->init_params, "capabilities");

        /* One session per backend (sharing: session, or a shim of one connection): its backend asks
         * it directly, as without mcp-lazy. A modern backend gets roots with each request. */
        return s->backend->sharing == SHARING_POOLED && !s->inetd && !shim_expects_modern(s) &&
               cJSON_GetObjectItemCaseSensitive(caps, "roots");
}

bool roots_pooled(const Client *c) {
        /* A 2026-07-28 client takes no requests from a server: its sessions are pooled apart (see
         * roots_modern_key()). */
        return !c->modern && roots_declared(c);
}

bool roots_pending(const Client *c) {
        return c->held_init || c->roots_asking;
}

static void held_free(Client *c) {
        while (c->held) {
                HeldItem *h = c->held;
                c->held = h->next;
                message_unref(h->message);
                free(h);
        }
        c->n_held = 0;
        c->held_init = message_unref(c->held_init);
}

int roots_hold(Client *c, Message *m) {
        HeldItem *h, **tail;

        if (m->kind == JSONRPC_REQUEST && streq(m->method, "initialize")) {
                c->held_init = message_ref(m);
                return 0;
        }
        if (c->n_held + hashmap_size(&c->pending) >= CLIENT_MAX_PENDING) {
                client_fail_request(c, m, "too many requests in flight on this connection");
                return -ENOBUFS;
        }
        h = calloc(1, sizeof *h);
        if (!h) {
                client_fail_request(c, m, "out of memory");
                return -ENOMEM;
        }
        h->message = message_ref(m);
        for (tail = &c->held; *tail; tail = &(*tail)->next)
                ;
        *tail = h;
        c->n_held++;
        return 0;
}

static int arm(Client *c, uint64_t usec);

static int on_roots_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        Client *c = userdata;
        char text[256];

        (void) source, (void) usec;
        snprintf(text, sizeof text,
                 "the client did not answer mcp-lazy's roots/list within %llu s (backend '%s' is pooled by its "
                 "sessions' roots); call again",
                 (unsigned long long) (ROOTS_TIMEOUT_USEC / USEC_PER_SEC), shim_backend_name(c->shim));
        upcall_drop_roots(c);
        roots_failed(c, text);
        return 0;
}

int roots_ask(Client *c) {
        int r;

        if (c->roots_asking) {
                c->roots_stale = true; /* the answer on its way may predate what changed */
                return 0;
        }
        r = upcall_roots(c);
        if (r < 0)
                return r;
        c->roots_asking = true;
        c->roots_stale = false;
        return arm(c, ROOTS_TIMEOUT_USEC);
}

static int arm(Client *c, uint64_t usec) {
        int r;

        if (!c->roots_timer)
                return sd_event_add_time_relative(c->shim->event, &c->roots_timer, CLOCK_MONOTONIC, usec, 0,
                                                  on_roots_timeout, c);
        r = sd_event_source_set_time_relative(c->roots_timer, usec);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->roots_timer, SD_EVENT_ONESHOT);
        return r;
}

/* A handshake-era session (its frontend said so, or it did not say): asked at once, its initialize held. */
void roots_begin(Client *c, Message *init) {
        (void) roots_hold(c, init);
        if (roots_ask(c) < 0)
                roots_failed(c, "cannot ask the client for its roots");
}

/* The held messages go on (or fail, with text). */
static void release_held(Client *c, const char *text) {
        _cleanup_(message_unrefp) Message *init = TAKE_PTR(c->held_init);
        HeldItem *list = TAKE_PTR(c->held);

        c->n_held = 0;
        if (init && text)
                client_fail_request(c, init, text);
        else if (init && c->instance)
                instance_submit(c->instance, c, init);
        while (list) {
                HeldItem *h = list;
                list = h->next;
                if (text)
                        client_fail_request(c, h->message, text);
                else
                        client_handle_message(c, h->message);
                message_unref(h->message);
                free(h);
        }
}

void roots_failed(Client *c, const char *text) {
        c->roots_asking = false;
        (void) sd_event_source_set_enabled(c->roots_timer, SD_EVENT_OFF);
        if (c->instance) {
                log_warning("Connection %llu: %s; it stays with its backend.", (unsigned long long) c->serial, text);
                return;
        }
        log_warning("Connection %llu: %s.", (unsigned long long) c->serial, text);
        release_held(c, text);
}

/* The answer as the pool keeps it ({"result":{"roots":[...]}} or {"error":{...}}), and its canonical
 * text, the roots part of the pool key. -E2BIG past ROOTS_MAX_BYTES. */
static int roots_record(const cJSON *answer, cJSON **ret, char **ret_key) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(answer, "result");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(answer, "error");
        const cJSON *roots = cJSON_GetObjectItemCaseSensitive(result, "roots");
        _cleanup_json_ cJSON *rec = cJSON_CreateObject();
        _cleanup_free_ char *text = NULL, *key = NULL;
        cJSON *item;

        if (!rec)
                return -ENOMEM;
        if (cJSON_IsArray(roots)) {
                cJSON *res = cJSON_AddObjectToObject(rec, "result");
                item = cJSON_Duplicate(roots, true);
                if (!res || !item || !cJSON_AddItemToObject(res, "roots", item)) {
                        cJSON_Delete(item);
                        return -ENOMEM;
                }
        } else {
                /* An error (or an answer without roots) is a key too: the backend gets the same. */
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
                const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(error, "message"));
                cJSON *e = cJSON_AddObjectToObject(rec, "error");
                if (!e || !cJSON_AddNumberToObject(e, "code", cJSON_IsNumber(code) ? code->valuedouble : -32603) ||
                    !cJSON_AddStringToObject(e, "message", msg ?: "the client answered roots/list without roots"))
                        return -ENOMEM;
        }
        text = cJSON_PrintUnformatted(rec);
        if (!text)
                return -ENOMEM;
        if (strlen(text) > ROOTS_MAX_BYTES)
                return -E2BIG;
        if (asprintf(&key, " roots:%s", text) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(rec);
        *ret_key = TAKE_PTR(key);
        return 0;
}

/* A session whose roots changed: its next calls go to the backend for its new key; its calls in
 * flight finish where they are. A backend it has to itself just takes the new roots (and hears of
 * the change, as it would from its client). */
static void roots_changed(Client *c) {
        Instance *old = c->instance;
        Instance *other = NULL;
        _cleanup_free_ char *key = pool_key(c->init_params, c->roots_key);
        int r;

        if (!key)
                return;
        for (Instance *i = c->shim->instances; i; i = i->next)
                if (i != old && !i->session_owned && streq(i->key, key))
                        other = i;
        if (!other && old->n_clients == 1) {
                _cleanup_json_ cJSON *note = jsonrpc_notification_new("notifications/roots/list_changed", NULL);
                free(old->key);
                old->key = TAKE_PTR(key);
                cJSON_Delete(old->roots);
                old->roots = cJSON_Duplicate(c->roots, true);
                log_info("Connection %llu changed its roots; its backend (pid %d) serves only it and takes them.",
                         (unsigned long long) c->serial, (int) old->pid);
                if (note && old->state == INSTANCE_READY)
                        (void) instance_send(old, note);
                return;
        }
        subscribe_leave(c);
        instance_leave(old, c);
        c->instance = NULL;
        r = instance_get(c->shim, c, &c->instance);
        if (r < 0) {
                /* No room for another backend: it stays where it was (its own earlier roots). */
                log_warning("Connection %llu changed its roots, but backend '%s' has no room for another "
                            "process; it stays with the one it had.",
                            (unsigned long long) c->serial, shim_backend_name(c->shim));
                old->n_clients++;
                c->instance = old;
                subscribe_join(c);
                return;
        }
        subscribe_join(c);
        log_info("Connection %llu changed its roots; its next calls go to the backend for them.",
                 (unsigned long long) c->serial);
}

void roots_answered(Client *c, const cJSON *answer) {
        _cleanup_json_ cJSON *rec = NULL;
        _cleanup_free_ char *key = NULL;
        char text[256];
        int r;

        c->roots_asking = false;
        (void) sd_event_source_set_enabled(c->roots_timer, SD_EVENT_OFF);
        r = roots_record(answer, &rec, &key);
        if (r == -E2BIG) {
                snprintf(text, sizeof text, "the client's roots/list answer is longer than %u bytes, the limit",
                         ROOTS_MAX_BYTES);
                return roots_failed(c, text);
        }
        if (r < 0)
                return roots_failed(c, "out of memory");
        if (c->instance && c->roots_key && streq(c->roots_key, key)) {
                if (c->roots_stale)
                        (void) roots_ask(c);
                return;
        }
        free(c->roots_key);
        c->roots_key = TAKE_PTR(key);
        cJSON_Delete(c->roots);
        c->roots = TAKE_PTR(rec);
        if (c->instance) {
                roots_changed(c);
                if (c->roots_stale)
                        (void) roots_ask(c);
                return;
        }
        r = client_attach(c, text, sizeof text);
        release_held(c, r < 0 ? text : NULL);
}

/* A 2026-07-28 client that declares roots: no roots/list for it (it takes no requests from a server).
 * It is pooled only with others of its kind, and their backend's roots/list gets "no roots" from the
 * shim: a roots question of the backend that mrtr.c would carry to one of them would set them for all. */
int roots_modern_key(Client *c) {
        if (!c->modern || !roots_declared(c))
                return 0;
        free(c->roots_key);
        c->roots_key = strdup(" roots:(a 2026-07-28 client: not asked)");
        return c->roots_key ? 0 : -ENOMEM;
}

bool roots_request(Client *c, Message *m) {
        if (roots_hold(c, m) < 0)
                return true;
        if (!c->roots_asking && roots_ask(c) < 0)
                roots_failed(c, "cannot ask the client for its roots");
        return true;
}

/* A backend's roots/list: answered from what its pool's sessions answered. */
bool roots_answer_backend(Instance *i, const Message *m) {
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(i->roots, "result");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(i->roots, "error");
        _cleanup_json_ cJSON *reply = NULL;

        if (i->shim->backend->sharing != SHARING_POOLED || i->shim->inetd || i->session_owned)
                return false; /* its one session answers */
        if (res)
                reply = jsonrpc_result_new(message_id_json(m), cJSON_Duplicate(res, true));
        else if (err)
                reply = jsonrpc_error_new(message_id_json(m),
                                          (int) cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(err, "code")),
                                          cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message")));
        else
                reply = jsonrpc_error_new(message_id_json(m), JSONRPC_METHOD_NOT_FOUND,
                                          "Method not found: the clients this backend serves declared no roots");
        if (reply)
                (void) instance_send(i, reply);
        return true;
}

void roots_client_free(Client *c) {
        held_free(c);
        c->roots_timer = sd_event_source_disable_unref(c->roots_timer);
        cJSON_Delete(c->roots);
        free(c->roots_key);
}
