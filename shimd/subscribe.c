/* What the handshake era asks of a 2026-07-28 backend with methods that era removed: resources/subscribe
 * and unsubscribe become one subscriptions/listen stream per backend process, held by the shim, for
 * the union of its sessions' subscriptions; logging/setLevel becomes the logLevel of the session's
 * envelopes, and the backend's log messages go to the sessions that asked for that level. A
 * handshake-era backend holds one set of subscriptions for all its sessions too (instance.c forwards a
 * session's subscribe, and its unsubscribe when no other session holds the URI): what a session held goes
 * when the session does (or when it cancels the subscribe), and a new process of the backend is asked for
 * what the sessions hold. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "era.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "printable.h"
#include "shimd.h"

/* fuzz-shim builds this file with lower limits (tests/fuzz/fuzz-shim-subscribe.h), which its inputs reach. */
#ifndef SUBSCRIBE_MAX_WAITERS
#define SUBSCRIBE_MAX_WAITERS 1024U
#endif
#ifndef SUBSCRIBE_MAX_PER_CLIENT
#define SUBSCRIBE_MAX_PER_CLIENT 1024U
#endif
/* A subscription's URI, decoded: a session keeps each one it holds for its life (and a 2026-07-28
 * backend's stream asks for all of them), so without it 1024 URIs of a line's length each would do. */
#define SUBSCRIBE_MAX_URI_BYTES 8192U
/* fuzz-shim counts the URIs that array_has() compares (and the steps along an array's list), to see
 * that no line costs more than the URIs the sessions hold (each session's once). */
#ifndef SUBSCRIBE_URI_COMPARED
#define SUBSCRIBE_URI_COMPARED() ((void) 0)
#endif
/* ... and the URIs it looks up in an instance's count of its sessions' (Instance.held). */
#ifndef SUBSCRIBE_URI_HASHED
#define SUBSCRIBE_URI_HASHED() ((void) 0)
#endif

/* A resources/subscribe answered once the stream that carries its URI is acknowledged. */
struct SubscribeWaiter {
        Client *client;
        char *id_text;
        char *uri;
        bool added; /* this request added the URI to the session's subscriptions */
        SubscribeWaiter *next;
};

static SubscribeWaiter *waiter_free(SubscribeWaiter *w) {
        SubscribeWaiter *next = w->next;

        free(w->id_text);
        free(w->uri);
        free(w);
        return next;
}

static void reply(Client *c, const char *id_text, cJSON *result, const char *error) {
        _cleanup_json_ cJSON *id = cJSON_CreateRaw(id_text), *m = NULL;

        if (!id) {
                cJSON_Delete(result);
                return;
        }
        m = error ? jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, error) : jsonrpc_result_new(id, result);
        if (m)
                client_send(c, m);
        if (c->eof)
                shim_update(c->shim); /* it may be done now (client_done()) */
}

static void reply_empty(Client *c, const char *id_text) {
        reply(c, id_text, cJSON_CreateObject(), NULL);
}

/* Linear: for one session's URIs (at most SUBSCRIBE_MAX_PER_CLIENT), once per line; a set of all
 * sessions' URIs, or of what a backend took, is a hashed set (uri_set_new()). */
static bool array_has(const cJSON *a, const char *s) {
        const cJSON *it;
        cJSON_ArrayForEach (it, a) {
                SUBSCRIBE_URI_COMPARED();
                if (cJSON_IsString(it) && streq(it->valuestring, s))
                        return true;
        }
        return false;
}

/* Adds uri (a borrowed set's key stays the caller's, unchanged while the set is there): 1, or 0 if the
 * set has it already; hashed once, compared only with a URI of the same hash. Any value but NULL says
 * that the set has it. */
static int uri_set_add(Hashmap *set, const char *uri) {
        int r;

        SUBSCRIBE_URI_HASHED();
        r = hashmap_put(set, uri, set);

        return r == -EEXIST ? 0 : r < 0 ? r : 1;
}

/* The strings of a, copied. NULL: out of memory. */
static Hashmap *uri_set_new(const cJSON *a) {
        _cleanup_(hashmap_freep) Hashmap *set = hashmap_new();
        const cJSON *it;

        if (!set)
                return NULL;
        cJSON_ArrayForEach (it, a)
                if (cJSON_IsString(it) && uri_set_add(set, it->valuestring) < 0)
                        return NULL;
        return TAKE_PTR(set);
}

static bool uri_set_has(const Hashmap *set, const char *uri) {
        return set && hashmap_get(set, uri);
}

/* The URIs the sessions of i (but except) subscribed to, each once, in the order the sessions and their
 * subscriptions come (the stream's request is compared as printed with the last one's). */
static cJSON *union_new(Instance *i, const Client *except) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();
        _cleanup_(hashmap_freep) Hashmap *seen = hashmap_new_borrowed();
        const cJSON *it;
        int r;

        if (!a || !seen)
                return NULL;
        for (Client *c = i->shim->clients; c; c = c->next) {
                if (c->instance != i || c == except)
                        continue;
                cJSON_ArrayForEach (it, c->subscriptions) {
                        r = uri_set_add(seen, it->valuestring);
                        if (r < 0 || (r > 0 && !cJSON_AddItemToArray(a, cJSON_CreateString(it->valuestring))))
                                return NULL;
                }
        }
        return TAKE_PTR(a);
}

/* A request of the shim's own to a handshake-era backend for uri; its answer finds no route. */
static int send_uri_request(Instance *i, const char *method, const char *uri) {
        _cleanup_json_ cJSON *id = cJSON_CreateNumber((double) i->next_id), *m = NULL;
        cJSON *params = cJSON_CreateObject();

        if (!id || !params || !cJSON_AddStringToObject(params, "uri", uri)) {
                cJSON_Delete(params);
                return -ENOMEM;
        }
        m = jsonrpc_request_new(id, method, params);
        if (!m)
                return -ENOMEM;
        i->next_id++;
        return instance_send(i, m);
}

static void send_cancel(Instance *i, int64_t id) {
        _cleanup_json_ cJSON *p = cJSON_CreateObject(), *n = NULL;

        if (id == 0 || !p || !cJSON_AddNumberToObject(p, "requestId", (double) id))
                return;
        n = jsonrpc_notification_new("notifications/cancelled", TAKE_PTR(p));
        if (n)
                (void) instance_send(i, n);
}

static void fail_waiters(Instance *i, const char *text) {
        while (i->waiters) {
                SubscribeWaiter *w = i->waiters;
                /* Told that its subscribe failed, the session holds no subscription to the URI that this
                 * request added (no later stream asks for it, no update of it reaches the session); one
                 * it held before the request stays held. */
                if (w->added)
                        (void) subscribe_track(w->client, w->uri, false);
                reply(w->client, w->id_text, NULL, text);
                i->waiters = waiter_free(w);
        }
}

/* The stream asks for what the sessions hold now: a new one replaces the last (cancelled once the new
 * one is acknowledged, so that no update falls between them); none is left when nobody holds any. */
int subscribe_refresh(Instance *i, const Client *except) {
        _cleanup_json_ cJSON *uris = NULL, *req = NULL, *id = NULL;
        _cleanup_free_ char *printed = NULL;
        cJSON *params, *filter;

        if (i->era != BACKEND_ERA_MODERN || i->state != INSTANCE_READY)
                return 0;
        uris = union_new(i, except);
        printed = uris ? cJSON_PrintUnformatted(uris) : NULL;
        if (!printed)
                return -ENOMEM;
        if (i->listen_uris && streq(i->listen_uris, printed))
                return 0;
        free(i->listen_uris);
        i->listen_uris = NULL;
        send_cancel(i, i->listen_old);
        i->listen_old = 0;
        if (cJSON_GetArraySize(uris) == 0) {
                send_cancel(i, i->listen_id);
                i->listen_id = 0;
                i->listen_acked = false;
                return 0;
        }
        if (i->listen_acked)
                i->listen_old = i->listen_id;
        else
                send_cancel(i, i->listen_id);
        params = bridge_contract_params(i);
        filter = params ? cJSON_AddObjectToObject(params, "notifications") : NULL;
        if (!filter || !cJSON_AddItemToObject(filter, "resourceSubscriptions", TAKE_PTR(uris))) {
                cJSON_Delete(params);
                return -ENOMEM;
        }
        id = cJSON_CreateNumber((double) i->next_id);
        req = id ? jsonrpc_request_new(id, "subscriptions/listen", params) : (cJSON_Delete(params), NULL);
        if (!req || instance_send(i, req) < 0)
                return -ENOMEM;
        i->listen_id = i->next_id++;
        i->listen_acked = false;
        i->listen_uris = TAKE_PTR(printed);
        return 0;
}

size_t subscribe_holders(const Instance *i, const char *uri) {
        SUBSCRIBE_URI_HASHED();
        return i && i->held ? (uintptr_t) hashmap_get(i->held, uri) : 0;
}

/* One more session of i holds uri. */
static int held_add(Instance *i, const char *uri) {
        void **v;

        SUBSCRIBE_URI_HASHED();
        if (!i->held && !(i->held = hashmap_new()))
                return -ENOMEM;
        v = hashmap_get_ref(i->held, uri);
        if (v) {
                *v = (void *) ((uintptr_t) *v + 1);
                return 0;
        }
        i->held_gen++;
        return hashmap_put(i->held, uri, (void *) (uintptr_t) 1);
}

/* One session fewer of i holds uri: how many still do. */
static size_t held_drop(Instance *i, const char *uri) {
        void **v;

        SUBSCRIBE_URI_HASHED();
        v = i->held ? hashmap_get_ref(i->held, uri) : NULL;
        if (!v)
                return 0;
        if ((uintptr_t) *v > 1)
                return (uintptr_t) (*v = (void *) ((uintptr_t) *v - 1));
        hashmap_remove(i->held, uri);
        i->held_gen++;
        return 0;
}

/* 1: the URI was added (0: it was held already, or removed, or not held). -ENOBUFS past
 * SUBSCRIBE_MAX_PER_CLIENT URIs: the subscribe is refused, not dropped. What c holds counts at its
 * instance (i->held). */
int subscribe_track(Client *c, const char *uri, bool sub) {
        int n = 0;
        const cJSON *it;

        if (!c->subscriptions && !(c->subscriptions = cJSON_CreateArray()))
                return -ENOMEM;
        cJSON_ArrayForEach (it, c->subscriptions) {
                if (streq(it->valuestring, uri)) {
                        if (!sub) {
                                if (c->instance)
                                        (void) held_drop(c->instance, uri);
                                cJSON_DeleteItemFromArray(c->subscriptions, n);
                        }
                        return 0;
                }
                n++;
        }
        if (!sub)
                return 0;
        if (n >= (int) SUBSCRIBE_MAX_PER_CLIENT)
                return -ENOBUFS;
        if ((c->instance && held_add(c->instance, uri) < 0))
                return -ENOMEM;
        if (!cJSON_AddItemToArray(c->subscriptions, cJSON_CreateString(uri))) {
                if (c->instance)
                        (void) held_drop(c->instance, uri);
                return -ENOMEM;
        }
        return 1;
}

static void reply_not_offered(Instance *i, Client *c, const char *id_text, const char *uri) {
        char text[512];

        snprintf(text, sizeof text,
                 "backend '%s' does not offer updates of '%.200s' (its subscriptions/listen did not take it)",
                 shim_backend_name(i->shim), uri);
        reply(c, id_text, NULL, text);
}

/* A subscribe refused before it waits: the URI it added goes again, and the stream, which may have been
 * asked for it already, asks for what the sessions hold (else the backend would go on watching it, for
 * no session, until the next change). */
static void refuse_subscribe(Instance *i, Client *c, const char *id_text, const char *uri, bool added,
                             const char *text) {
        if (added) {
                (void) subscribe_track(c, uri, false);
                if (subscribe_refresh(i, NULL) < 0)
                        log_oom();
        }
        reply(c, id_text, NULL, text);
}

/* A session that unsubscribes from a URI no longer wants what it asked for before: a subscribe of its to
 * that URI still waiting for the stream is answered first, as failed, and waits no longer (else the
 * stream's acknowledgement would grant it after the unsubscribe was answered, a subscription the
 * shim does not hold). A waiter exists only while its session holds its URI. */
static void end_waiters(Instance *i, Client *c, const char *uri) {
        char text[512];

        for (SubscribeWaiter **w = &i->waiters; *w;) {
                if ((*w)->client != c || !streq((*w)->uri, uri)) {
                        w = &(*w)->next;
                        continue;
                }
                snprintf(text, sizeof text,
                         "resources/subscribe of '%.200s' ended by a later resources/unsubscribe of it on this "
                         "connection: not subscribed",
                         uri);
                reply(c, (*w)->id_text, NULL, text);
                *w = waiter_free(*w);
        }
}

static void handle_subscribe(Instance *i, Client *c, const Message *m, bool sub) {
        const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
        char text[160];
        unsigned n = 0;
        SubscribeWaiter *w;
        int r;

        if (!uri) {
                _cleanup_json_ cJSON *e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_PARAMS,
                                                            "Invalid params: a string uri is required");
                if (e)
                        client_send(c, e);
                return;
        }
        if (!sub)
                end_waiters(i, c, uri);
        r = subscribe_track(c, uri, sub);
        if (r == -ENOBUFS) {
                snprintf(text, sizeof text,
                         "too many resource subscriptions on this connection (limit %u); unsubscribe from one first",
                         SUBSCRIBE_MAX_PER_CLIENT);
                return reply(c, m->id_text, NULL, text);
        }
        if (r < 0 || subscribe_refresh(i, NULL) < 0)
                return refuse_subscribe(i, c, m->id_text, uri, r > 0, "out of memory");
        if (!sub || (i->listen_acked && !i->listen_old && uri_set_has(i->listen_honoured, uri)))
                return reply_empty(c, m->id_text);
        /* Nothing new was asked of an acknowledged stream that did not take the URI: no acknowledgement
         * is coming for it. */
        if (i->listen_acked && !i->listen_old) {
                subscribe_track(c, uri, false);
                if (subscribe_refresh(i, NULL) < 0)
                        log_oom();
                return reply_not_offered(i, c, m->id_text, uri);
        }
        for (w = i->waiters; w; w = w->next)
                n++;
        if (n >= SUBSCRIBE_MAX_WAITERS)
                return refuse_subscribe(i, c, m->id_text, uri, r > 0,
                                        "too many subscriptions waiting for the backend; try again");
        w = calloc(1, sizeof *w);
        if (!w || !(w->id_text = strdup(m->id_text)) || !(w->uri = strdup(uri))) {
                if (w)
                        waiter_free(w);
                return refuse_subscribe(i, c, m->id_text, uri, r > 0, "out of memory");
        }
        w->client = c;
        w->added = r > 0;
        w->next = i->waiters;
        i->waiters = w;
}

int subscribe_uri_has_nul(const Message *m) {
        int r = message_path_has_nul(m, (const char *const[]){"params", "uri", NULL});

        if (r < 0)
                log_oom();
        return r;
}

/* What refuses m's params.uri, from one look-up of it: URI_NUL, URI_TOO_LONG (decoded, more than
 * SUBSCRIBE_MAX_URI_BYTES), 0 if nothing does (or no string is there), or -ENOMEM (logged). */
enum { URI_NUL = 1, URI_TOO_LONG };

static int uri_fault(const Message *m) {
        _cleanup_free_ char *buf = NULL;
        size_t len;
        Span s;
        int r = message_find(m, (const char *const[]){"params", "uri", NULL}, &s);

        if (r == -ENOENT)
                return 0;
        if (r < 0) /* out of memory: the text is one the scan took */
                return log_oom();
        if (message_span_has_nul(m, s))
                return URI_NUL;
        if (s.len <= SUBSCRIBE_MAX_URI_BYTES + 2) /* its text, quotes included: never shorter decoded */
                return 0;
        buf = malloc(s.len - 1); /* decoded, it is no longer than its text: a moment's copy of the line's */
        if (!buf)
                return log_oom();
        if (message_string(m, s, buf, s.len - 1, &len) < 0)
                return 0; /* not a string: the backend says what it makes of it */
        return len > SUBSCRIBE_MAX_URI_BYTES ? URI_TOO_LONG : 0;
}

bool subscribe_refuse_bad_uri(Client *c, const Message *m) {
        _cleanup_json_ cJSON *e = NULL;
        char text[128];
        int r = uri_fault(m);

        if (r == 0)
                return false;
        if (r < 0)
                e = jsonrpc_error_new(message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        else if (r == URI_NUL)
                e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_PARAMS,
                                      "Invalid params: the uri holds a NUL character (\\u0000), which no resource "
                                      "URI has (write it as %00)");
        else {
                (void) snprintf(text, sizeof text,
                                "Invalid params: the uri is longer than %u bytes, the longest one a subscription takes",
                                SUBSCRIBE_MAX_URI_BYTES);
                e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_PARAMS, text);
        }
        if (e)
                client_send(c, e);
        return true;
}

static void handle_set_level(Client *c, const Message *m) {
        const char *level = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "level"));
        _cleanup_json_ cJSON *e = NULL;
        char *copy;

        if (era_log_level_rank(level) < 0) {
                e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_PARAMS,
                                      "Invalid params: level must be one of debug, info, notice, warning, error, "
                                      "critical, alert, emergency");
                if (e)
                        client_send(c, e);
                return;
        }
        copy = strdup(level);
        if (!copy)
                return reply(c, m->id_text, NULL, "out of memory"); /* the level it had stays */
        free(c->log_level);
        c->log_level = copy;
        reply_empty(c, m->id_text);
}

bool subscribe_intercept(Instance *i, Client *c, const Message *m) {
        bool sub = streq(m->method, "resources/subscribe"), unsub = streq(m->method, "resources/unsubscribe");
        bool level = streq(m->method, "logging/setLevel");

        if (!sub && !unsub && !level)
                return false;
        if (!message_json(m)) {
                reply(c, m->id_text, NULL, "out of memory");
                return true;
        }
        if (sub || unsub) {
                handle_subscribe(i, c, m, streq(m->method, "resources/subscribe"));
                return true;
        }
        if (streq(m->method, "logging/setLevel")) {
                handle_set_level(c, m);
                return true;
        }
        return false;
}

static bool subscription_id(const Message *m, int64_t *ret) {
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m->params, "_meta");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(meta, META_SUBSCRIPTION_ID);

        if (!cJSON_IsNumber(id) || id->valuedouble != (double) (int64_t) id->valuedouble)
                return false;
        *ret = (int64_t) id->valuedouble;
        return *ret != 0;
}

/* The stream took (some of) the URIs: the subscribes waiting for them are answered. Each URI it took is
 * compared whole: one that decodes with a NUL is none a session holds (resources/subscribe refuses
 * them), though the tree has it cut where it reads as one. */
static void handle_acknowledged(Instance *i, const Message *m) {
        static const char *const path[] = {"params", "notifications", "resourceSubscriptions", NULL};
        const cJSON *filter = cJSON_GetObjectItemCaseSensitive(m->params, "notifications");
        const cJSON *honoured = cJSON_GetObjectItemCaseSensitive(filter, "resourceSubscriptions");
        _cleanup_json_ cJSON *held = NULL, *taken = NULL;
        size_t n_nul = 0;

        i->listen_acked = true;
        send_cancel(i, i->listen_old);
        i->listen_old = 0;
        taken = era_resource_uris_new(m, path, honoured, &n_nul); /* NULL: out of memory */
        hashmap_free(i->listen_honoured);
        i->listen_honoured = taken ? uri_set_new(taken) : NULL;
        if (!i->listen_honoured)
                log_oom();
        if (n_nul > 0)
                log_warning("Backend '%s' acknowledged %zu resource URI%s with a NUL character (\\u0000), which no "
                            "session subscribed to, ignoring.",
                            shim_backend_name(i->shim), n_nul, n_nul == 1 ? "" : "s");
        while (i->waiters) {
                SubscribeWaiter *w = i->waiters;
                if (uri_set_has(i->listen_honoured, w->uri))
                        reply_empty(w->client, w->id_text);
                else if (i->listen_honoured) {
                        /* Not taken: the session holds no subscription to it, even one it held before. */
                        subscribe_track(w->client, w->uri, false);
                        reply_not_offered(i, w->client, w->id_text, w->uri);
                } else {
                        /* Out of memory: what the stream took is not known. Only what this request added
                         * goes; a URI held before stays held (the next refresh asks for it again). */
                        if (w->added)
                                subscribe_track(w->client, w->uri, false);
                        reply(w->client, w->id_text, NULL, "out of memory");
                }
                i->waiters = waiter_free(w);
        }
        /* What the stream is recorded to ask for is what it took of what the sessions hold: a URI it
         * did not take is asked for again (and answered) by the next subscribe to it. */
        held = union_new(i, NULL);
        if (!held || cJSON_GetArraySize(held) == 0) {
                /* Nobody holds any (the stream is cancelled), or no memory (the next subscribe asks anew). */
                free(i->listen_uris);
                i->listen_uris = NULL;
                if (!held || subscribe_refresh(i, NULL) < 0)
                        log_oom();
                return;
        }
        /* One walk along the list: by index, each step would walk it again from its head. */
        for (cJSON *it = held->child, *next; it; it = next) {
                next = it->next;
                SUBSCRIBE_URI_COMPARED();
                if (!uri_set_has(i->listen_honoured, it->valuestring))
                        cJSON_Delete(cJSON_DetachItemViaPointer(held, it));
        }
        free(i->listen_uris);
        i->listen_uris = cJSON_PrintUnformatted(held);
}

/* An update on our stream, for the sessions that subscribed to its URI, as the handshake era has it. */
static void handle_updated(Instance *i, const Message *m) {
        const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
        _cleanup_json_ cJSON *copy = cJSON_Duplicate(m->json, true);
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(copy, "params"), "_meta");

        /* No session holds such a URI (nor, out of memory, can it be said which one does). */
        if (!uri || !copy || subscribe_uri_has_nul(m) != 0)
                return;
        cJSON_DeleteItemFromObjectCaseSensitive(meta, META_SUBSCRIPTION_ID);
        if (cJSON_IsObject(meta) && !meta->child)
                cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(copy, "params"), "_meta");
        for (Client *c = i->shim->clients; c; c = c->next)
                if (c->instance == i && array_has(c->subscriptions, uri))
                        client_send(c, copy);
}

/* A log message concerns the request that set a level: it goes to the sessions that set one this low. */
static void handle_log(Instance *i, const Message *m) {
        int rank = era_log_level_rank(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "level")));

        for (Client *c = i->shim->clients; c; c = c->next)
                if (c->instance == i && c->log_level && (rank < 0 || rank >= era_log_level_rank(c->log_level)))
                        client_send_text(c, m->text, m->len);
}

bool subscribe_handle_notification(Instance *i, const Message *m) {
        int64_t id;

        /* Only these are read past their envelope. */
        if (!streq(m->method, "notifications/message") && !streq(m->method, "notifications/subscriptions/acknowledged") &&
            !streq(m->method, "notifications/resources/updated") && !strstr(m->method, "/list_changed"))
                return false;
        if (!message_json(m))
                return true;
        if (streq(m->method, "notifications/message")) {
                handle_log(i, m);
                return true;
        }
        if (!subscription_id(m, &id))
                return false;
        /* Ours, or stale: nothing on a stream goes to a session as it is. */
        if (id != i->listen_id && id != i->listen_old)
                return true;
        if (streq(m->method, "notifications/subscriptions/acknowledged")) {
                if (id == i->listen_id)
                        handle_acknowledged(i, m);
        } else if (streq(m->method, "notifications/resources/updated"))
                handle_updated(i, m);
        return true;
}

bool subscribe_handle_response_internal(Instance *i, int64_t id, const Message *m) {
        const cJSON *error;
        char text[512];

        if (!message_json(m))
                return true;
        error = cJSON_GetObjectItemCaseSensitive(m->json, "error");
        if (id == i->listen_old) {
                i->listen_old = 0;
                return true;
        }
        /* The backend ended the stream (or refused it): the next subscribe opens another. */
        snprintf(text, sizeof text, "backend '%s' refused resource subscriptions: %s", shim_backend_name(i->shim),
                 cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(error, "message")) ?: "it ended the stream");
        if (error)
                log_warning("%s", text);
        fail_waiters(i, text);
        i->listen_id = 0;
        i->listen_acked = false;
        free(i->listen_uris);
        i->listen_uris = NULL;
        return true;
}

/* c's subscriptions count at i no longer: each URI no other session of i holds is unsubscribed at a
 * handshake-era process of i (else it would watch it for nobody, for as long as it runs), unless send is
 * false (i's process stops anyway). A subscribe of c's still in flight was sent before, so its URI is let
 * go after it too. Costs c's own URIs, whatever the other sessions hold. */
static void held_release(Instance *i, const Client *c, bool send) {
        const cJSON *it;
        size_t unsent = 0;

        send = send && i->era == BACKEND_ERA_LEGACY && i->state == INSTANCE_READY;
        cJSON_ArrayForEach (it, c->subscriptions)
                if (held_drop(i, it->valuestring) == 0 && send &&
                    (unsent > 0 || send_uri_request(i, "resources/unsubscribe", it->valuestring) == -ENOMEM))
                        unsent++;
        if (unsent > 0)
                log_error("Out of memory: backend '%s' was not asked to unsubscribe from %zu resource URI%s that "
                          "no session holds now.",
                          shim_backend_name(i->shim), unsent, unsent == 1 ? "" : "s");
}

void subscribe_cancelled(Instance *i, const char *uri) {
        if (i->era != BACKEND_ERA_LEGACY || i->state != INSTANCE_READY || subscribe_holders(i, uri) > 0)
                return;
        if (send_uri_request(i, "resources/unsubscribe", uri) == -ENOMEM)
                log_oom();
}

/* c's subscribes waiting at i wait no longer: answered with text (and what each added untracked), or, with
 * no text (c is going), dropped. */
static void drop_waiters(Instance *i, Client *c, const char *text) {
        for (SubscribeWaiter **w = &i->waiters; *w;) {
                if ((*w)->client != c) {
                        w = &(*w)->next;
                        continue;
                }
                if (text) {
                        if ((*w)->added)
                                (void) subscribe_track(c, (*w)->uri, false);
                        reply(c, (*w)->id_text, NULL, text);
                }
                *w = waiter_free(*w);
        }
}

void subscribe_forget_client(Instance *i, Client *c) {
        drop_waiters(i, c, NULL);
        /* The last session of a backend of its own: the process stops, unasked. */
        held_release(i, c, !(i->session_owned && i->n_clients <= 1));
        c->subscriptions = (cJSON_Delete(c->subscriptions), NULL); /* counted nowhere now */
        if (subscribe_refresh(i, c) < 0)
                log_oom();
}

void subscribe_leave(Client *c) {
        Instance *i = c->instance;
        char text[256];

        (void) snprintf(text, sizeof text,
                        "resources/subscribe ended: this connection changed its roots and moved to backend '%s' "
                        "for them; subscribe again",
                        shim_backend_name(i->shim));
        drop_waiters(i, c, text);
        held_release(i, c, true);
        if (subscribe_refresh(i, c) < 0)
                log_oom();
}

void subscribe_join(Client *c) {
        Instance *i = c->instance;
        bool send = i->era == BACKEND_ERA_LEGACY && i->state == INSTANCE_READY;
        size_t unsent = 0;
        cJSON *it, *next;

        for (it = c->subscriptions ? c->subscriptions->child : NULL; it; it = next) {
                next = it->next;
                if (held_add(i, it->valuestring) < 0) {
                        /* Not counted, so not held: no update of it reaches c. */
                        cJSON_Delete(cJSON_DetachItemViaPointer(c->subscriptions, it));
                        unsent++;
                } else if (send && subscribe_holders(i, it->valuestring) == 1 &&
                           send_uri_request(i, "resources/subscribe", it->valuestring) == -ENOMEM) {
                        held_drop(i, it->valuestring);
                        cJSON_Delete(cJSON_DetachItemViaPointer(c->subscriptions, it));
                        unsent++;
                }
        }
        if (unsent > 0)
                log_error("Out of memory: connection %llu lost %zu of its resource subscriptions as it moved.",
                          (unsigned long long) c->serial, unsent);
        if (subscribe_refresh(i, NULL) < 0)
                log_oom();
}

/* A new process of i is ready: what its sessions hold is asked of it (a 2026-07-28 backend's stream, a
 * handshake-era backend's resources/subscribe of each URI, whose answers subscribe_restored() reads). */
/* The restore's answers wait no longer (all came, or the process is gone): one line for what it refused. */
static void restore_end(Instance *i) {
        if (i->restore_refused > 0)
                log_warning("Backend '%s' (pid %d): %zu of %zu resources/subscribe made again after the restart were "
                            "refused; the first: %s. The sessions that hold those URIs get no updates of them until "
                            "they subscribe again.",
                            shim_backend_name(i->shim), (int) i->pid, i->restore_refused, i->restore_sent,
                            i->restore_error ?: "(out of memory)");
        free(i->restore_answered);
        free(i->restore_error);
        i->restore_answered = NULL;
        i->restore_error = NULL;
        i->restore_first = i->restore_last = 0;
        i->restore_pending = i->restore_sent = i->restore_refused = 0;
}

void subscribe_restore(Instance *i) {
        size_t state = 0, n = 0;
        const char *uri;
        void *count;

        if (i->era != BACKEND_ERA_LEGACY) {
                if (subscribe_refresh(i, NULL) < 0)
                        log_oom();
                return;
        }
        restore_end(i);
        i->restore_first = i->next_id;
        i->restore_gen = i->held_gen;
        while (i->held && hashmap_iterate(i->held, &state, &uri, &count)) {
                if (send_uri_request(i, "resources/subscribe", uri) == -ENOMEM) {
                        log_error("Out of memory: backend '%s' (pid %d) was not asked again for %zu of its sessions' "
                                  "resource subscriptions.",
                                  shim_backend_name(i->shim), (int) i->pid, hashmap_size(i->held) - n);
                        break;
                }
                n++;
        }
        if (n == 0)
                return restore_end(i);
        i->restore_last = i->next_id - 1;
        i->restore_answered = calloc((n + 7) / 8, 1);
        if (!i->restore_answered) {
                log_oom();
                return restore_end(i); /* their answers are unknown ones */
        }
        i->restore_pending = i->restore_sent = n;
        log_info("Backend '%s' (pid %d): its sessions' %zu resource subscription%s made again.",
                 shim_backend_name(i->shim), (int) i->pid, n, n == 1 ? "" : "s");
}

/* The URI of the restore's k-th request: the k-th key of held, if its keys have not changed since. */
static const char *restore_uri(Instance *i, size_t k) {
        size_t state = 0;
        const char *uri;
        void *count;

        if (i->held_gen != i->restore_gen)
                return NULL;
        while (hashmap_iterate(i->held, &state, &uri, &count))
                if (k-- == 0)
                        return uri;
        return NULL;
}

bool subscribe_restored(Instance *i, int64_t id, const Message *m) {
        _cleanup_free_ char *uri = NULL, *text = NULL;
        const cJSON *error;
        size_t k;

        if (!i->restore_answered || id < i->restore_first || id > i->restore_last)
                return false; /* none waits (its ids count from INIT_REQUEST_ID + 1) */
        k = (size_t) (id - i->restore_first);
        if (i->restore_answered[k / 8] & (1U << (k % 8)))
                return false; /* answered before: an unknown answer */
        i->restore_answered[k / 8] |= 1U << (k % 8);
        error = message_json(m) ? cJSON_GetObjectItemCaseSensitive(m->json, "error") : NULL;
        if (error && i->restore_refused++ == 0) {
                const char *u = restore_uri(i, k);
                uri = text_printable(u ?: "(a URI no session holds now)", 200);
                text = text_printable(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(error, "message")) ?: "no message",
                                      200);
                if (!uri || !text || asprintf(&i->restore_error, "%s: %s", uri, text) < 0)
                        i->restore_error = NULL;
        }
        if (--i->restore_pending == 0)
                restore_end(i);
        return true;
}

bool subscribe_waiting(const Client *c) {
        for (const SubscribeWaiter *w = c->instance ? c->instance->waiters : NULL; w; w = w->next)
                if (w->client == c)
                        return true;
        return false;
}

void subscribe_reset(Instance *i, const char *text) {
        restore_end(i);
        fail_waiters(i, text);
        i->listen_id = i->listen_old = 0;
        i->listen_acked = false;
        free(i->listen_uris);
        i->listen_uris = NULL;
        i->listen_honoured = hashmap_free(i->listen_honoured);
}
