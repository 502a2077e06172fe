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
        bool read = streq(p->request->method, "resources/read");
        _cleanup_free_ Member *members = NULL;
        _cleanup_free_ char *obj = NULL;
        const char *t = answer->text;
        size_t n, size = 0, pos;
        FILE *f;
        Span s;
        int r;

        r = message_find(answer, (const char *const[]){"result", NULL}, &s);
        if (r >= 0)
                r = message_members(answer, s, &members, &n);
        if (r < 0)
                return r;
        f = open_memstream(&obj, &size);
        if (!f)
                return -ENOMEM;
        fputs(read ? "{\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"private\""
                   : "{\"resultType\":\"complete\"",
              f);
        /* pos: after the '{', or after the comma that follows the last member seen */
        pos = s.start + 1;
        for (size_t k = 0; k < n; k++) {
                const Span mb = members[k].member;
                if (!adapted_key(answer, &members[k], read)) {
                        fputc(',', f);
                        fwrite(t + pos, 1, mb.start + mb.len - pos, f);
                }
                pos = mb.start + mb.len;
                while (t[pos] == ' ' || t[pos] == '\t' || t[pos] == '\r' || t[pos] == '\n')
                        pos++;
                if (t[pos] == ',')
                        pos++;
        }
        fwrite(t + pos, 1, s.start + s.len - pos, f); /* what is left: whitespace, and the '}' */
        if (fclose(f) != 0)
                return -ENOMEM;
        return message_splice(answer, &(Splice){s, obj, size}, 1, ret, ret_len);
}

cJSON *modern_adapt_response(const Pending *p, const Message *answer) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(answer->json, "result");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(answer->json, "error");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
        const cJSON *resultType = cJSON_GetObjectItemCaseSensitive(result, "resultType");
        const char *type = cJSON_GetStringValue(resultType);
        bool not_found = cJSON_IsNumber(code) && code->valuedouble == RESOURCE_NOT_FOUND_LEGACY;
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r;

        if (type && streq(type, "input_required")) {
                char why[256];
                if (input_requests_invalid(p, result, why, sizeof why))
                        return call_failure_new(p, why);
                return check_input_capabilities(p, answer, result);
        }
        if (!not_found && (!cJSON_IsObject(result) || cJSON_IsString(resultType)))
                return NULL; /* an error, or a modern backend's own answer: as it is */
        /* A handshake-era answer: the backend's bytes, with only what the era requires spliced in. */
        r = not_found ? adapt_not_found(answer, &text, &len) : adapt_result(p, answer, &text, &len);
        if (r < 0) {
                log_warning_errno(r, "Cannot adapt backend '%s''s answer for a modern client, passing it as it is: %m",
                                  p->upstream ? upstream_name(p->upstream) : "?");
                return NULL;
        }
        return cJSON_CreateRaw(text);
}
