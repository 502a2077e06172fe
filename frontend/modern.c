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

/* One open subscriptions/listen stream: its id names every notification sent on it. */
typedef struct Listen {
        char *key;
        cJSON *id;
        bool tools, prompts, resources;
} Listen;

static Listen *listen_free(Listen *l) {
        if (!l)
                return NULL;
        free(l->key);
        cJSON_Delete(l->id);
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

/* A stream the client ends with notifications/cancelled; nothing answers the request until then. */
static void handle_listen(Session *s, Message *m, Batch *batch) {
        const cJSON *filter = cJSON_GetObjectItemCaseSensitive(m->params, "notifications");
        const Manifest *mf = session_manifest(s);
        _cleanup_free_ char *key = strdup(m->id_text);
        _cleanup_json_ cJSON *ack = NULL;
        cJSON *params, *agreed;
        Listen *l;

        if (!mf)
                return reply_error(s, batch, m->id_json, JSONRPC_INTERNAL_ERROR,
                                   "the manifest cannot be read: mcp-lazy's log says why");
        if (filter && !cJSON_IsObject(filter))
                return reply_error(s, batch, m->id_json, JSONRPC_INVALID_PARAMS,
                                   "subscriptions/listen: params.notifications must be an object");
        if (!key)
                return reply_error(s, batch, m->id_json, JSONRPC_INTERNAL_ERROR, "out of memory");
        if (hashmap_get(s->listens, key) || hashmap_get(s->pending, key))
                return reply_error(s, batch, m->id_json, JSONRPC_INVALID_REQUEST,
                                   "request id is already used by a request still in flight");
        if (hashmap_size(s->listens) >= MODERN_MAX_LISTENS)
                return reply_error(s, batch, m->id_json, JSONRPC_INTERNAL_ERROR,
                                   "too many subscriptions open (1024); cancel some first");
        l = calloc(1, sizeof *l);
        if (!l || !(l->id = cJSON_Duplicate(m->id_json, true)) || !(l->key = TAKE_PTR(key)) ||
            hashmap_put(s->listens, l->key, l) < 0) {
                listen_free(l);
                return reply_error(s, batch, m->id_json, JSONRPC_INTERNAL_ERROR, "out of memory");
        }
        /* What we honour: list changes of what the manifest declares (a reload announces them). Resource
         * updates are the backends' and are not carried on a stream yet: omitted, as the spec says. */
        l->tools = filter_flag(filter, "toolsListChanged") && session_announces(mf, "tools");
        l->prompts = filter_flag(filter, "promptsListChanged") && session_announces(mf, "prompts");
        l->resources = filter_flag(filter, "resourcesListChanged") && session_announces(mf, "resources");
        params = cJSON_CreateObject();
        ack = jsonrpc_notification_new("notifications/subscriptions/acknowledged", params);
        agreed = params ? cJSON_AddObjectToObject(params, "notifications") : NULL;
        if (!ack || !agreed || !cJSON_AddItemToObject(params, "_meta", subscription_meta_new(m->id_json)) ||
            (l->tools && !cJSON_AddBoolToObject(agreed, "toolsListChanged", true)) ||
            (l->prompts && !cJSON_AddBoolToObject(agreed, "promptsListChanged", true)) ||
            (l->resources && !cJSON_AddBoolToObject(agreed, "resourcesListChanged", true))) {
                log_oom();
                return;
        }
        session_send(s, ack);
}

bool modern_cancel(Session *s, const char *key) {
        Listen *l = hashmap_remove(s->listens, key);

        /* The stream ends; the spec forbids sending anything more for a cancelled request. */
        listen_free(l);
        return l != NULL;
}

void modern_list_changed(Session *s, const char *method) {
        size_t state = 0;
        void *v;

        while (hashmap_iterate(s->listens, &state, NULL, &v)) {
                Listen *l = v;
                _cleanup_json_ cJSON *n = NULL;
                cJSON *params;

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
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m->params, "_meta");
        return cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION) != NULL;
}

void modern_list_result(Session *s, const Message *m, cJSON *result) {
        const Manifest *mf = s->manifest;

        if (result && modern_request(m) &&
            era_result_complete(result, mf->cache_ttl_ms, !mf->cache_private, mf->server_info) < 0)
                log_oom();
}

bool modern_intercept(Session *s, Message *m, Batch *batch) {
        const char *problem = NULL;
        bool discover = streq(m->method, "server/discover");
        Envelope e;
        int r;

        r = era_envelope_parse(m->params, &e, &problem);
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
                reply_error(s, batch, m->id_json, JSONRPC_INVALID_PARAMS, text);
                return true;
        }
        if (r == -EPROTONOSUPPORT) {
                session_reply(s, batch, era_unsupported_version_new(m->id_json, e.version));
                return true;
        }
        if (discover) {
                const Manifest *mf;

                if (session_reply_answer(s, batch, m, ANSWER_DISCOVER, 0))
                        return true;
                if (!(mf = session_manifest(s)))
                        reply_error(s, batch, m->id_json, JSONRPC_INTERNAL_ERROR,
                                    "the manifest cannot be read: mcp-lazy's log says why");
                else
                        session_reply(s, batch, jsonrpc_result_new(m->id_json, modern_discover_result_new(mf)));
                return true;
        }
        if (era_method_removed(m->method)) {
                char text[256];
                snprintf(text, sizeof text,
                         "Method not found: '%.100s' is not part of protocol version " ERA_MODERN_VERSION, m->method);
                reply_error(s, batch, m->id_json, JSONRPC_METHOD_NOT_FOUND, text);
                return true;
        }
        if (streq(m->method, "subscriptions/listen")) {
                handle_listen(s, m, batch);
                return true;
        }
        /* Backends still reached with a handshake speak for this client as its envelope says. */
        if (!s->client_params && !(s->client_params = era_initialize_params_new(&e)))
                log_oom();
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
        const cJSON *id = p->request->id_json;
        _cleanup_json_ cJSON *m = p->is_tool_call ? jsonrpc_result_new(id, tool_error_result_new(text))
                                                  : jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text);

        if (!m || (p->is_tool_call &&
                   !cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(m, "result"), "resultType", "complete")))
                return NULL;
        return TAKE_PTR(m);
}

/* An input_required answer may only ask for what the request's envelope declared: else -32021. */
static cJSON *check_input_capabilities(const Pending *p, const Message *answer, const cJSON *result) {
        const cJSON *params = p->request->params;
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
        return era_missing_capability_new(answer->id_json,
                                          "the backend needs input of a kind this request's client capabilities do "
                                          "not declare",
                                          TAKE_PTR(missing));
}

/* A handshake-era backend's answer as the 2026-07-28 era wants it, as the backend's bytes with what
 * that era adds put in (a raw item of that text): resultType, for resources/read no caching, and
 * -32602 for -32002. NULL if the message layer cannot place it (then it is printed again). */
static cJSON *adapt_in_place(const Pending *p, const Message *answer, bool not_found) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(answer->json, "result");
        bool read = streq(p->request->method, "resources/read") && !cJSON_HasObjectItem(result, "ttlMs") &&
                    !cJSON_HasObjectItem(result, "cacheScope");
        _cleanup_free_ char *text = NULL, *insert = NULL;
        Span at;
        size_t len;
        Splice sp;

        if (not_found) {
                if (message_find(answer, (const char *const[]){"error", "code", NULL}, &at) < 0)
                        return NULL;
                sp = (Splice){at, "-32602", strlen("-32602")};
        } else {
                size_t k;
                if (message_find(answer, (const char *const[]){"result", NULL}, &at) < 0)
                        return NULL;
                for (k = at.start + 1; k < at.start + at.len && strchr(" \t\r\n", answer->text[k]); k++)
                        ;
                if (asprintf(&insert, "\"resultType\":\"complete\"%s%s",
                             read ? ",\"ttlMs\":0,\"cacheScope\":\"private\"" : "",
                             answer->text[k] == '}' ? "" : ",") < 0)
                        return NULL;
                sp = (Splice){{at.start + 1, 0}, insert, strlen(insert)};
        }
        if (message_splice(answer, &sp, 1, &text, &len) < 0)
                return NULL;
        return cJSON_CreateRaw(text);
}

cJSON *modern_adapt_response(const Pending *p, const Message *answer) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(answer->json, "result");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(answer->json, "error");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "resultType"));
        bool not_found = cJSON_IsNumber(code) && code->valuedouble == RESOURCE_NOT_FOUND_LEGACY;
        _cleanup_json_ cJSON *copy = NULL;
        cJSON *r;

        if (type && streq(type, "input_required")) {
                char text[256];
                if (input_requests_invalid(p, result, text, sizeof text))
                        return call_failure_new(p, text);
                return check_input_capabilities(p, answer, result);
        }
        if (!not_found && (!cJSON_IsObject(result) || type))
                return NULL; /* an error, or a modern backend's own answer: as it is */
        r = adapt_in_place(p, answer, not_found);
        if (r)
                return r;
        /* A handshake-era answer: printed again from what was parsed, with the id's exact text. */
        copy = cJSON_Duplicate(answer->json, true);
        if (!copy || !cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_Duplicate(answer->id_json, true)))
                return NULL;
        /* Resource not found was -32002 before; it is -32602 now. */
        if (not_found) {
                cJSON_SetNumberValue(
                        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(copy, "error"), "code"),
                        JSONRPC_INVALID_PARAMS);
                return TAKE_PTR(copy);
        }
        r = cJSON_GetObjectItemCaseSensitive(copy, "result");
        if (!cJSON_AddStringToObject(r, "resultType", "complete"))
                return NULL;
        /* resources/read is cacheable: a handshake-era server gave no hint, so nothing may be kept. */
        if (streq(p->request->method, "resources/read") &&
            (!cJSON_AddNumberToObject(r, "ttlMs", 0) || !cJSON_AddStringToObject(r, "cacheScope", "private")))
                return NULL;
        return TAKE_PTR(copy);
}
