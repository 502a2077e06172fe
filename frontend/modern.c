/* The 2026-07-28 era at the frontend: server/discover, the per-request envelope, cacheable lists and
 * subscriptions/listen, all answered from the manifest without starting anything. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "era.h"
#include "frontend.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"

#define MODERN_MAX_LISTENS 1024U
#define MODERN_MAX_RESOURCE_SUBS 1024U /* distinct URIs a session's streams listen to */
#define SUBSCRIBE_ID_PREFIX      UPSTREAM_OWN_PREFIX "subscribe:"

/* One open subscriptions/listen stream: its id names every notification sent on it. */
typedef struct Listen {
        char *key;
        cJSON *id;
        bool tools, prompts, resources;
        cJSON *uris; /* resourceSubscriptions that a backend serves (each holds a SubUri) */
        bool acked;  /* acknowledged: nothing goes on it before (its URIs' subscribes are answered) */
} Listen;

typedef enum SubState {
        SUB_PENDING, /* resources/subscribe sent to the backend, not answered */
        SUB_OK,
        SUB_FAILED, /* refused, or the connection to the backend was lost */
} SubState;

/* A resource URI the session's streams listen to: subscribed once at the backend that serves it (the
 * shim maps that onto a 2026-07-28 backend's own subscriptions/listen), whatever the streams. */
typedef struct SubUri {
        char *uri; /* the key in Session.sub_uris */
        char *backend;
        char *own_id; /* the subscribe in flight, or NULL */
        unsigned refs; /* streams that hold it */
        SubState state;
} SubUri;

static SubUri *sub_free(SubUri *u) {
        if (!u)
                return NULL;
        free(u->uri);
        free(u->backend);
        free(u->own_id);
        free(u);
        return NULL;
}

static Listen *listen_free(Listen *l) {
        if (!l)
                return NULL;
        free(l->key);
        cJSON_Delete(l->id);
        cJSON_Delete(l->uris);
        free(l);
        return NULL;
}

void modern_free(Session *s) {
        size_t state = 0;
        void *v;

        while (s->listens && hashmap_iterate(s->listens, &state, NULL, &v))
                listen_free(v);
        hashmap_free(s->listens);
        s->listens = NULL;
        state = 0;
        while (s->sub_uris && hashmap_iterate(s->sub_uris, &state, NULL, &v))
                sub_free(v);
        hashmap_free(s->sub_uris);
        s->sub_uris = NULL;
}

static void reply_error(Session *s, Batch *batch, const cJSON *id, int code, const char *text) {
        session_reply(s, batch, jsonrpc_error_new(id, code, text));
}

cJSON *modern_discover_result_new(const Manifest *mf) {
        _cleanup_json_ cJSON *r = cJSON_CreateObject();

        if (!r || !cJSON_AddItemToObject(r, "supportedVersions", era_supported_versions_new()) ||
            !cJSON_AddItemToObject(r, "capabilities", session_capabilities_new(mf, true)))
                return NULL;
        if (mf->instructions && !cJSON_AddStringToObject(r, "instructions", mf->instructions))
                return NULL;
        if (era_result_complete(r, mf->cache_ttl_ms, !mf->cache_private, mf->server_info) < 0)
                return NULL;
        return TAKE_PTR(r);
}

static cJSON *subscription_meta_new(const cJSON *id) {
        _cleanup_json_ cJSON *meta = cJSON_CreateObject();

        if (!meta || !cJSON_AddItemToObject(meta, META_SUBSCRIPTION_ID, cJSON_Duplicate(id, true)))
                return NULL;
        return TAKE_PTR(meta);
}

static bool filter_flag(const cJSON *filter, const char *name) {
        return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(filter, name));
}

static bool array_has(const cJSON *a, const char *str) {
        const cJSON *it;
        cJSON_ArrayForEach (it, a)
                if (cJSON_IsString(it) && streq(it->valuestring, str))
                        return true;
        return false;
}

/* resources/subscribe (or unsubscribe) of uri at its backend, as a request of our own. */
static int sub_send(Session *s, SubUri *u, bool subscribe) {
        _cleanup_json_ cJSON *id = upstream_own_id(s, subscribe ? "subscribe" : "unsubscribe"), *req = NULL;
        cJSON *params = cJSON_CreateObject();

        if (!id || !params || !cJSON_AddStringToObject(params, "uri", u->uri)) {
                cJSON_Delete(params);
                return -ENOMEM;
        }
        req = jsonrpc_request_new(id, subscribe ? "resources/subscribe" : "resources/unsubscribe", params);
        if (!req)
                return -ENOMEM;
        if (subscribe) {
                free(u->own_id);
                if (!(u->own_id = strdup(id->valuestring)))
                        return -ENOMEM;
                u->state = SUB_PENDING;
        }
        return upstream_send_own(s, u->backend, req);
}

/* One more stream holds uri: the first subscribes at the backend. */
static int sub_ref(Session *s, const char *uri, const Backend *b) {
        SubUri *u = hashmap_get(s->sub_uris, uri);
        int r;

        if (u) {
                u->refs++;
                return 0;
        }
        if (hashmap_size(s->sub_uris) >= MODERN_MAX_RESOURCE_SUBS)
                return -E2BIG;
        u = calloc(1, sizeof *u);
        if (!u || !(u->uri = strdup(uri)) || !(u->backend = strdup(b->name)) || hashmap_put(s->sub_uris, u->uri, u) < 0) {
                sub_free(u);
                return -ENOMEM;
        }
        u->refs = 1;
        r = sub_send(s, u, true);
        if (r < 0) {
                u->state = SUB_FAILED;
                free(u->own_id);
                u->own_id = NULL;
                log_warning_errno(r, "Cannot subscribe to '%s' at backend '%s': %m", uri, b->name);
        }
        return 0;
}

/* A stream let go of uri: the last one unsubscribes (once the subscribe is answered). */
static void sub_unref(Session *s, const char *uri) {
        SubUri *u = hashmap_get(s->sub_uris, uri);

        if (!u || --u->refs > 0 || u->state == SUB_PENDING)
                return;
        hashmap_remove(s->sub_uris, uri);
        if (u->state == SUB_OK && sub_send(s, u, false) < 0)
                log_oom();
        sub_free(u);
}

/* The acknowledgement, once every URI of the stream has its backend's answer: what it honours. */
static void listen_try_ack(Session *s, Listen *l) {
        _cleanup_json_ cJSON *ack = NULL, *honoured = cJSON_CreateArray();
        cJSON *params, *agreed;
        const cJSON *it;

        if (l->acked || !honoured)
                return;
        cJSON_ArrayForEach (it, l->uris) {
                SubUri *u = hashmap_get(s->sub_uris, it->valuestring);
                if (u && u->state == SUB_PENDING)
                        return;
                if (u && u->state == SUB_OK && !cJSON_AddItemToArray(honoured, cJSON_CreateString(u->uri))) {
                        log_oom();
                        return;
                }
        }
        params = cJSON_CreateObject();
        ack = jsonrpc_notification_new("notifications/subscriptions/acknowledged", params);
        agreed = params ? cJSON_AddObjectToObject(params, "notifications") : NULL;
        if (!ack || !agreed || !cJSON_AddItemToObject(params, "_meta", subscription_meta_new(l->id)) ||
            (l->tools && !cJSON_AddBoolToObject(agreed, "toolsListChanged", true)) ||
            (l->prompts && !cJSON_AddBoolToObject(agreed, "promptsListChanged", true)) ||
            (l->resources && !cJSON_AddBoolToObject(agreed, "resourcesListChanged", true)) ||
            (honoured->child && !cJSON_AddItemToObject(agreed, "resourceSubscriptions", TAKE_PTR(honoured)))) {
                log_oom();
                return;
        }
        l->acked = true;
        session_send(s, ack);
}

/* Whether the backend serving uri takes subscriptions (as recorded; unrecorded: it is asked). */
static const Backend *subscribable_backend(const Manifest *mf, const char *uri) {
        const Backend *b = manifest_find_resource_backend(mf, uri);
        const cJSON *res;

        if (!b)
                return NULL;
        res = cJSON_GetObjectItemCaseSensitive(mf->capabilities ?: b->capabilities, "resources");
        if ((mf->capabilities || b->capabilities) && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "subscribe")))
                return NULL;
        return b;
}

/* resourceSubscriptions: each URI a backend serves is subscribed at that backend (once per session). */
static int listen_resources(Session *s, const Manifest *mf, Listen *l, const cJSON *wanted) {
        const cJSON *it;
        int r;

        if (!(l->uris = cJSON_CreateArray()))
                return -ENOMEM;
        cJSON_ArrayForEach (it, wanted) {
                const Backend *b = subscribable_backend(mf, it->valuestring);
                if (!b || array_has(l->uris, it->valuestring))
                        continue; /* not ours to honour: omitted from the acknowledgement */
                r = sub_ref(s, it->valuestring, b);
                if (r < 0)
                        return r;
                if (!cJSON_AddItemToArray(l->uris, cJSON_CreateString(it->valuestring))) {
                        sub_unref(s, it->valuestring);
                        return -ENOMEM;
                }
        }
        return 0;
}

static bool string_array(const cJSON *a) {
        const cJSON *it;

        if (!cJSON_IsArray(a))
                return false;
        cJSON_ArrayForEach (it, a)
                if (!cJSON_IsString(it))
                        return false;
        return true;
}

#define LISTEN_URIS_PATH ((const char *const[]){"params", "notifications", "resourceSubscriptions", NULL})

/* A stream the client ends with notifications/cancelled; nothing answers the request until then. */
static void handle_listen(Session *s, Message *m, Batch *batch) {
        const cJSON *filter = cJSON_GetObjectItemCaseSensitive(m->params, "notifications");
        const cJSON *wanted = cJSON_GetObjectItemCaseSensitive(filter, "resourceSubscriptions");
        const Manifest *mf = session_manifest(s);
        _cleanup_free_ char *key = strdup(m->id_text);
        _cleanup_json_ cJSON *whole = NULL;
        size_t n_nul = 0;
        Listen *l;
        int r;

        if (!mf)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR,
                                   "the manifest cannot be read: mcp-lazy's log says why");
        if (filter && !cJSON_IsObject(filter))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "subscriptions/listen: params.notifications must be an object");
        if (wanted && !string_array(wanted))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "subscriptions/listen: notifications.resourceSubscriptions must be an array of "
                                   "strings");
        /* Each URI whole, as resources/subscribe takes it: cut at a NUL (as the tree has it) it would
         * be another URI. */
        if (wanted && !(whole = era_resource_uris_new(m, LISTEN_URIS_PATH, wanted, &n_nul)))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if (n_nul > 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "subscriptions/listen: a URI in notifications.resourceSubscriptions holds a NUL "
                                   "character (\\u0000), which no resource URI has (write it as %00)");
        if (!key)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if ((s->listens && hashmap_get(s->listens, key)) || hashmap_get(s->pending, key))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_REQUEST,
                                   "request id is already used by a request still in flight");
        if (hashmap_size(s->listens) >= MODERN_MAX_LISTENS)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR,
                                   "too many subscriptions open (1024); cancel some first");
        if ((!s->sub_uris && !(s->sub_uris = hashmap_new())) || (!s->listens && !(s->listens = hashmap_new())))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        l = calloc(1, sizeof *l);
        if (!l || !(l->id = cJSON_Duplicate(message_id_json(m), true)) || !(l->key = TAKE_PTR(key)) ||
            hashmap_put(s->listens, l->key, l) < 0) {
                listen_free(l);
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        }
        /* What we honour: list changes of what the manifest declares (a reload announces them), and
         * updates of the resources whose backends take subscriptions. */
        l->tools = filter_flag(filter, "toolsListChanged") && session_announces(mf, "tools");
        l->prompts = filter_flag(filter, "promptsListChanged") && session_announces(mf, "prompts");
        l->resources = filter_flag(filter, "resourcesListChanged") && session_announces(mf, "resources");
        r = listen_resources(s, mf, l, whole);
        if (r < 0) {
                modern_cancel(s, l->key);
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR,
                                   r == -E2BIG ? "too many resources subscribed (1024 URIs); cancel some streams first"
                                               : "out of memory");
        }
        listen_try_ack(s, l);
}

bool modern_cancel(Session *s, const char *key) {
        Listen *l = s->listens ? hashmap_remove(s->listens, key) : NULL;
        const cJSON *it;

        if (!l)
                return false;
        cJSON_ArrayForEach (it, l->uris)
                sub_unref(s, it->valuestring);
        /* The stream ends; the spec forbids sending anything more for a cancelled request. */
        listen_free(l);
        return true;
}

/* Streams waiting for a backend's answer may be acknowledged now. */
static void listens_try_ack(Session *s) {
        size_t state = 0;
        void *v;

        while (s->listens && hashmap_iterate(s->listens, &state, NULL, &v))
                listen_try_ack(s, v);
}

bool modern_own_answer(Session *s, const Message *m) {
        const char *id = cJSON_GetStringValue(m->id);
        size_t state = 0;
        void *v;

        if (!id || strncmp(id, SUBSCRIBE_ID_PREFIX, strlen(SUBSCRIBE_ID_PREFIX)) != 0)
                return false;
        if (!message_json(m))
                return true;
        while (s->sub_uris && hashmap_iterate(s->sub_uris, &state, NULL, &v)) {
                SubUri *u = v;
                if (!u->own_id || !streq(u->own_id, id))
                        continue;
                free(u->own_id);
                u->own_id = NULL;
                u->state = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m->json, "result")) ? SUB_OK : SUB_FAILED;
                if (u->state == SUB_FAILED)
                        log_warning("Backend '%s' refused a subscription to '%s': %s", u->backend, u->uri,
                                    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                            cJSON_GetObjectItemCaseSensitive(m->json, "error"), "message"))
                                            ?: "no result");
                if (u->refs == 0) {
                        /* Every stream that wanted it ended meanwhile. */
                        u->refs = 1;
                        sub_unref(s, u->uri);
                }
                break;
        }
        listens_try_ack(s);
        return true;
}

void modern_upstream_lost(Session *s, const char *backend) {
        size_t state = 0;
        void *v;

        /* The shim forgot this connection's subscriptions: the next connection subscribes again. */
        while (s->sub_uris && hashmap_iterate(s->sub_uris, &state, NULL, &v)) {
                SubUri *u = v;
                if (!streq(u->backend, backend))
                        continue;
                free(u->own_id);
                u->own_id = NULL;
                u->state = SUB_FAILED;
        }
        if (s->listens)
                listens_try_ack(s);
}

void modern_upstream_attached(Session *s, const char *backend) {
        size_t state = 0;
        void *v;

        while (s->sub_uris && hashmap_iterate(s->sub_uris, &state, NULL, &v)) {
                SubUri *u = v;
                if (streq(u->backend, backend) && u->refs > 0 && u->state == SUB_FAILED && !u->own_id &&
                    sub_send(s, u, true) < 0)
                        u->state = SUB_FAILED;
        }
}

bool modern_resource_updated(Session *s, const Message *m) {
        const char *uri = message_json(m) ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"))
                                          : NULL;
        /* A uri that decodes with a NUL is no URI a stream holds (handle_listen() refuses them), though
         * the tree has it cut where it reads as one: it goes on no stream (nor, out of memory, can it be
         * said whose it is). */
        int nul = uri ? message_path_has_nul(m, (const char *const[]){"params", "uri", NULL}) : 0;
        size_t state = 0;
        void *v;

        if (nul < 0)
                log_oom();
        if (nul != 0)
                uri = NULL;

        while (uri && s->listens && hashmap_iterate(s->listens, &state, NULL, &v)) {
                Listen *l = v;
                SubUri *u = hashmap_get(s->sub_uris, uri);
                _cleanup_json_ cJSON *n = NULL;
                cJSON *params, *meta;

                if (!l->acked || !u || u->state != SUB_OK || !array_has(l->uris, uri))
                        continue;
                n = cJSON_Duplicate(m->json, true);
                params = cJSON_GetObjectItemCaseSensitive(n, "params");
                meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
                if (!meta)
                        meta = cJSON_AddObjectToObject(params, "_meta");
                if (!cJSON_IsObject(meta)) {
                        log_oom();
                        continue;
                }
                cJSON_DeleteItemFromObjectCaseSensitive(meta, META_SUBSCRIPTION_ID);
                if (!cJSON_AddItemToObject(meta, META_SUBSCRIPTION_ID, cJSON_Duplicate(l->id, true))) {
                        log_oom();
                        continue;
                }
                session_send(s, n);
        }
        /* A modern client gets updates on its streams only; a handshake-era one as they come. */
        return !s->protocol_version;
}

void modern_list_changed(Session *s, const char *method) {
        size_t state = 0;
        void *v;

        while (s->listens && hashmap_iterate(s->listens, &state, NULL, &v)) {
                Listen *l = v;
                _cleanup_json_ cJSON *n = NULL;
                cJSON *params;

                if (!l->acked)
                        continue; /* nothing on a stream before its acknowledgement */
                if (!(streq(method, "notifications/tools/list_changed") && l->tools) &&
                    !(streq(method, "notifications/prompts/list_changed") && l->prompts) &&
                    !(streq(method, "notifications/resources/list_changed") && l->resources))
                        continue;
                params = cJSON_CreateObject();
                n = jsonrpc_notification_new(method, params);
                if (!n || !cJSON_AddItemToObject(params, "_meta", subscription_meta_new(l->id))) {
                        log_oom();
                        continue;
                }
                session_send(s, n);
        }
}

bool modern_request(const Message *m) {
        /* What the scan noted: params._meta's protocolVersion member, as the tree would have it. */
        return message_route(m, ROUTE_PATH_META_VERSION).len > 0;
}

void modern_list_result(Session *s, const Message *m, cJSON *result) {
        const Manifest *mf = s->manifest;

        if (result && modern_request(m) &&
            era_result_complete(result, mf->cache_ttl_ms, !mf->cache_private, mf->server_info) < 0)
                log_oom();
}

/* A request's logLevel is the session's from now on: the backends hear it as logging/setLevel (a
 * modern backend's shim puts it back into the envelopes of our requests), and their log messages
 * reach the client from then on. */
static void set_log_level(Session *s, const char *level) {
        _cleanup_json_ cJSON *id = upstream_own_id(s, "setLevel"), *req = NULL;
        cJSON *params = cJSON_CreateObject();

        free(s->log_level);
        s->log_level = strdup(level);
        if (!s->log_level || !params || !cJSON_AddStringToObject(params, "level", level)) {
                cJSON_Delete(params);
                log_oom();
                return;
        }
        req = jsonrpc_request_new(id, "logging/setLevel", params);
        if (req)
                upstream_broadcast(s, req);
}

/* The string at span decodes to exactly text (no NUL, nothing more). */
static bool route_string_is(const Message *m, Span span, const char *text) {
        char buf[32];
        size_t len;

        return message_string(m, span, buf, sizeof buf, &len) == 0 && len == strlen(text) && streq(buf, text);
}

bool modern_envelope_settled(const Session *s, const Message *m) {
        Span version = message_route(m, ROUTE_PATH_META_VERSION), caps = message_route(m, ROUTE_PATH_META_CAPABILITIES),
             info = message_route(m, ROUTE_PATH_META_CLIENT_INFO),
             log_level = message_route(m, ROUTE_PATH_META_LOG_LEVEL);
        char level[32];
        size_t len;

        /* What modern_intercept() checks, from the spans the scan noted (params and its _meta are
         * objects, or none would be noted): a valid 2026-07-28 envelope... */
        if (!route_string_is(m, version, ERA_MODERN_VERSION) || caps.len == 0 || m->text[caps.start] != '{' ||
            (info.len > 0 && m->text[info.start] != '{'))
                return false;
        /* ... that changes nothing: the backends already speak for this client, and its log level is
         * the one in force. */
        if (!s->client_params)
                return false;
        if (log_level.len == 0)
                return true;
        return s->log_level && message_string(m, log_level, level, sizeof level, &len) == 0 && len == strlen(level) &&
               streq(level, s->log_level) && era_log_level_rank(level) >= 0;
}

/* -32022, naming the version as the client wrote it (the tree's ends at a decoded NUL): the scan's
 * text of that string. */
static cJSON *unsupported_version_new(const Message *m, const Envelope *e) {
        cJSON *err = era_unsupported_version_new(message_id_json(m), e->version);
        cJSON *data = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(err, "error"), "data");
        _cleanup_free_ char *raw = NULL;
        Span vs;

        if (data && message_find(m, (const char *const[]){"params", "_meta", META_PROTOCOL_VERSION, NULL}, &vs) >= 0 &&
            (raw = message_span_dup(m, vs))) {
                cJSON *item = cJSON_CreateRaw(raw);
                if (!cJSON_ReplaceItemInObjectCaseSensitive(data, "requested", item))
                        cJSON_Delete(item);
        }
        return err;
}

bool modern_intercept(Session *s, Message *m, Batch *batch) {
        const char *problem = NULL;
        bool discover = streq(m->method, "server/discover");
        Envelope e;
        Span vs;
        int r;

        r = era_envelope_parse(m->params, &e, &problem);
        /* The tree's version ends at a decoded NUL; the next hop reads all of it: "2026-07-28\u0000x"
         * is a version we do not speak. */
        if (r == 1 &&
            (message_find(m, (const char *const[]){"params", "_meta", META_PROTOCOL_VERSION, NULL}, &vs) < 0 ||
             !route_string_is(m, vs, ERA_MODERN_VERSION)))
                r = -EPROTONOSUPPORT;
        if (r == 0 && !discover)
                return false; /* a handshake-era request: served as always */
        if (r == 0)
                problem = cJSON_HasObjectItem(m->params, "_meta") &&
                                          !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m->params, "_meta"))
                                  ? "params._meta must be an object"
                                  : "server/discover needs params._meta with " META_PROTOCOL_VERSION
                                    " and " META_CLIENT_CAPABILITIES;
        if (r == 0 || r == -EINVAL) {
                char text[512];
                snprintf(text, sizeof text, "Invalid params: %s", problem);
                reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS, text);
                return true;
        }
        if (r == -EPROTONOSUPPORT) {
                session_reply(s, batch, unsupported_version_new(m, &e));
                return true;
        }
        if (discover) {
                const Manifest *mf;

                if (session_reply_answer(s, batch, m, ANSWER_DISCOVER, 0))
                        return true;
                if (!(mf = session_manifest(s)))
                        reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR,
                                    "the manifest cannot be read: mcp-lazy's log says why");
                else
                        session_reply(s, batch, jsonrpc_result_new(message_id_json(m), modern_discover_result_new(mf)));
                return true;
        }
        if (era_method_removed(m->method)) {
                char text[256];
                snprintf(text, sizeof text,
                         "Method not found: '%.100s' is not part of protocol version " ERA_MODERN_VERSION, m->method);
                reply_error(s, batch, message_id_json(m), JSONRPC_METHOD_NOT_FOUND, text);
                return true;
        }
        if (e.log_level && era_log_level_rank(e.log_level) < 0) {
                reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                            "Invalid params: " META_LOG_LEVEL " must be one of debug, info, notice, warning, "
                            "error, critical, alert, emergency");
                return true;
        }
        if (e.log_level && !streq(s->log_level ?: "", e.log_level))
                set_log_level(s, e.log_level);
        /* Backends still reached with a handshake speak for this client as its envelope says (also for
         * a listen stream's subscribes). */
        if (!s->client_params) {
                upstream_era_changed(s); /* shims reached before (no initialize, no envelope) heard otherwise */
                if (!(s->client_params = era_initialize_params_new(&e)))
                        log_oom();
        }
        if (streq(m->method, "subscriptions/listen")) {
                handle_listen(s, m, batch);
                return true;
        }
        return false;
}

#define RESOURCE_NOT_FOUND_LEGACY -32002

/* An input_required answer the shim's bridge would refuse for a handshake-era client (shimd/bridge.c):
 * the same rule for a modern one. Writes why into text. */
static bool input_requests_invalid(const Pending *p, const cJSON *result, char *text, size_t size) {
        const cJSON *requests = cJSON_GetObjectItemCaseSensitive(result, "inputRequests"), *it;
        const char *name = p->upstream ? upstream_name(p->upstream) : "?";

        if (requests && !cJSON_IsObject(requests)) {
                snprintf(text, size, "backend '%s' answered input_required with inputRequests that is not an object",
                         name);
                return true;
        }
        cJSON_ArrayForEach (it, requests) {
                const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "method"));
                const cJSON *params = cJSON_GetObjectItemCaseSensitive(it, "params");
                if (!method || !era_input_method_known(method)) {
                        snprintf(text, size, "backend '%s' asked for input of an unknown kind ('%.64s')", name,
                                 method ?: "?");
                        return true;
                }
                if (params && !cJSON_IsObject(params)) {
                        snprintf(text, size, "backend '%s' asked for input (%s) with params that are not an object",
                                 name, method);
                        return true;
                }
        }
        return false;
}

/* The call fails with text, as session_fail() says it to a modern client. */
static cJSON *call_failure_new(const Pending *p, const char *text) {
        const cJSON *id = message_id_json(p->request);
        _cleanup_json_ cJSON *m = p->is_tool_call ? jsonrpc_result_new(id, tool_error_result_new(text))
                                                  : jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text);

        if (!m || (p->is_tool_call &&
                   !cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(m, "result"), "resultType", "complete")))
                return NULL;
        return TAKE_PTR(m);
}

/* An input_required answer may only ask for what the request's envelope declared: else -32021. */
static cJSON *check_input_capabilities(const Pending *p, const Message *answer, const cJSON *result) {
        const cJSON *params = message_json(p->request) ? p->request->params : NULL;
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(params, "_meta"),
                                                             META_CLIENT_CAPABILITIES);
        _cleanup_json_ cJSON *missing = cJSON_CreateObject();
        const cJSON *it;

        if (!missing)
                return NULL;
        cJSON_ArrayForEach (it, cJSON_GetObjectItemCaseSensitive(result, "inputRequests"))
                if (era_input_missing(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "method")) ?: "",
                                      cJSON_GetObjectItemCaseSensitive(it, "params"), caps, missing) < 0)
                        return NULL;
        if (!missing->child)
                return NULL;
        return era_missing_capability_new(message_id_json(answer),
                                          "the backend needs input of a kind this request's client capabilities do "
                                          "not declare",
                                          TAKE_PTR(missing));
}

/* Resource not found was -32002 before; it is -32602 now. */
static int adapt_not_found(const Message *answer, char **ret, size_t *ret_len) {
        static const char code[] = "-32602";
        Span s;
        int r = message_find(answer, (const char *const[]){"error", "code", NULL}, &s);

        if (r < 0)
                return r;
        return message_splice(answer, &(Splice){s, code, strlen(code)}, 1, ret, ret_len);
}

static bool adapted_key(const Message *answer, const Member *mb, bool read) {
        return message_key_is(answer, mb, "resultType") ||
               (read && (message_key_is(answer, mb, "ttlMs") || message_key_is(answer, mb, "cacheScope")));
}

/* The result with resultType "complete" first (and for resources/read ttlMs 0, cacheScope "private":
 * a handshake-era server gave no hint, so nothing may be kept), in place of any the backend wrote:
 * each key once. Every other byte is the backend's (a dropped member goes with its comma). */
static int adapt_result(const Pending *p, const Message *answer, char **ret, size_t *ret_len) {
        static const char complete[] = "{\"resultType\":\"complete\"",
                          read_complete[] = "{\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"private\"";
        bool read = streq(p->request->method, "resources/read");
        const char *head = read ? read_complete : complete;
        _cleanup_free_ Member *members = NULL;
        _cleanup_free_ char *obj = NULL;
        const char *t = answer->text;
        size_t n, o, pos;
        Span s = message_route(answer, ROUTE_PATH_RESULT); /* the scan noted where the result is */
        int r;

        if (s.len == 0 && (r = message_find(answer, (const char *const[]){"result", NULL}, &s)) < 0)
                return r;
        r = message_members(answer, s, &members, &n);
        if (r < 0)
                return r;
        /* The head, then at most each member with a comma, and what follows the last. */
        obj = malloc(strlen(head) + s.len + n + 1);
        if (!obj)
                return -ENOMEM;
        o = stpcpy(obj, head) - obj;
        /* pos: after the '{', or after the comma that follows the last member seen */
        pos = s.start + 1;
        for (size_t k = 0; k < n; k++) {
                const Span mb = members[k].member;
                if (!adapted_key(answer, &members[k], read)) {
                        obj[o++] = ',';
                        memcpy(obj + o, t + pos, mb.start + mb.len - pos);
                        o += mb.start + mb.len - pos;
                }
                pos = mb.start + mb.len;
                while (t[pos] == ' ' || t[pos] == '\t' || t[pos] == '\r' || t[pos] == '\n')
                        pos++;
                if (t[pos] == ',')
                        pos++;
        }
        memcpy(obj + o, t + pos, s.start + s.len - pos); /* what is left: whitespace, and the '}' */
        o += s.start + s.len - pos;
        return message_splice(answer, &(Splice){s, obj, o}, 1, ret, ret_len);
}

/* A result with a resultType that is not input_required (cut at a NUL, as the tree has it): a modern
 * backend's own answer, passed as it is. */
static bool own_complete_answer(const Message *answer) {
        char type[32];
        size_t len;

        return message_string(answer, message_route(answer, ROUTE_PATH_RESULT_TYPE), type, sizeof type, &len) == 0 &&
               !streq(type, "input_required");
}

/* The usual answers, told from the spans the scan noted, without the tree: 1 when it goes on as it
 * is, 0 when it is a handshake-era result to adapt (adapt_result()), -EAGAIN when the tree decides. */
static int answer_kind(const Message *answer) {
        Span result = message_route(answer, ROUTE_PATH_RESULT);

        if (message_route(answer, ROUTE_PATH_ERROR).len > 0)
                return -EAGAIN; /* an error: -32002 is adapted */
        if (result.len == 0 || answer->text[result.start] != '{')
                return 1;
        if (message_route(answer, ROUTE_PATH_RESULT_TYPE).len == 0 ||
            answer->text[message_route(answer, ROUTE_PATH_RESULT_TYPE).start] != '"')
                return 0;
        return own_complete_answer(answer) ? 1 : -EAGAIN;
}

static cJSON *adapted_new(const Pending *p, const Message *answer, bool not_found) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r;

        /* A handshake-era answer: the backend's bytes, with only what the era requires spliced in. */
        r = not_found ? adapt_not_found(answer, &text, &len) : adapt_result(p, answer, &text, &len);
        if (r < 0) {
                log_warning_errno(r, "Cannot adapt backend '%s''s answer for a modern client, passing it as it is: %m",
                                  p->upstream ? upstream_name(p->upstream) : "?");
                return NULL;
        }
        return cJSON_CreateRaw(text);
}

cJSON *modern_adapt_response(const Pending *p, const Message *answer) {
        const cJSON *result, *error, *code, *resultType;
        const char *type;
        bool not_found;
        int k = answer_kind(answer);

        if (k >= 0)
                return k ? NULL : adapted_new(p, answer, false);
        if (!message_json(answer))
                return NULL;
        result = cJSON_GetObjectItemCaseSensitive(answer->json, "result");
        error = cJSON_GetObjectItemCaseSensitive(answer->json, "error");
        code = cJSON_GetObjectItemCaseSensitive(error, "code");
        resultType = cJSON_GetObjectItemCaseSensitive(result, "resultType");
        type = cJSON_GetStringValue(resultType);
        not_found = cJSON_IsNumber(code) && code->valuedouble == RESOURCE_NOT_FOUND_LEGACY;
        if (type && streq(type, "input_required")) {
                char why[256];
                if (input_requests_invalid(p, result, why, sizeof why))
                        return call_failure_new(p, why);
                return check_input_capabilities(p, answer, result);
        }
        if (!not_found && (!cJSON_IsObject(result) || cJSON_IsString(resultType)))
                return NULL; /* an error, or a modern backend's own answer: as it is */
        return adapted_new(p, answer, not_found);
}
