/* What differs between MCP's handshake era and the 2026-07-28 era: the request envelope, the era's
 * own errors, caching hints. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "era.h"
#include "jsonrpc.h"
#include "macros.h"
#include "message.h"

#ifndef MCP_LAZY_VERSION
#define MCP_LAZY_VERSION "0"
#endif

const char *const era_legacy_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", ERA_NEWEST_LEGACY};
const unsigned era_n_legacy_versions = ELEMENTSOF(era_legacy_versions);

static const char *const removed_methods[] = {
        "initialize",   "ping",       "logging/setLevel", "resources/subscribe", "resources/unsubscribe",
        "tasks/result", "tasks/list",
};

int era_envelope_parse(const cJSON *params, Envelope *ret, const char **ret_problem) {
        const cJSON *meta, *v, *caps, *info, *level;

        *ret = (Envelope){};
        /* No params, or a message read envelope-only (its params have no _meta): no envelope, and no call
         * into libcjson on the warm path. */
        if (!params)
                return 0;
        meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        v = cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION);
        caps = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_CAPABILITIES);
        info = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_INFO);
        level = cJSON_GetObjectItemCaseSensitive(meta, META_LOG_LEVEL);
        if (!v && !caps && !info && !level)
                return 0;
        *ret_problem = NULL;
        if (!cJSON_IsObject(meta))
                *ret_problem = "params._meta must be an object";
        else if (!cJSON_IsString(v))
                *ret_problem = "params._meta must carry the string " META_PROTOCOL_VERSION;
        else if (!cJSON_IsObject(caps))
                *ret_problem = "params._meta must carry the object " META_CLIENT_CAPABILITIES;
        else if (info && !cJSON_IsObject(info))
                *ret_problem = "params._meta." META_CLIENT_INFO " must be an object";
        else if (level && !cJSON_IsString(level))
                *ret_problem = "params._meta." META_LOG_LEVEL " must be a string";
        if (*ret_problem)
                return -EINVAL;
        ret->version = v->valuestring;
        ret->capabilities = caps;
        ret->client_info = info;
        ret->log_level = level ? level->valuestring : NULL;
        if (!streq(v->valuestring, ERA_MODERN_VERSION))
                return -EPROTONOSUPPORT;
        return 1;
}

/* Only what a request's envelope may name. The handshake versions are served too, but only through
 * initialize: listing them here would tell a client to put one in _meta, which this very list
 * refuses with -32022 (a loop); and a dual-era client that got a DiscoverResult or -32022 must not
 * fall back to initialize anyway (basic/transports/stdio.mdx). As the v2 SDK's dual-era server. */
cJSON *era_supported_versions_new(void) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();

        if (!a || !cJSON_AddItemToArray(a, cJSON_CreateString(ERA_MODERN_VERSION)))
                return NULL;
        return TAKE_PTR(a);
}

cJSON *era_unsupported_version_new(const cJSON *id, const char *requested) {
        _cleanup_json_ cJSON *e = jsonrpc_error_new(id, MCP_UNSUPPORTED_VERSION, "Unsupported protocol version");
        cJSON *data = cJSON_CreateObject(), *err = cJSON_GetObjectItemCaseSensitive(e, "error");

        if (!data || !err || !cJSON_AddItemToObject(err, "data", data)) {
                cJSON_Delete(data);
                return NULL;
        }
        if (!cJSON_AddItemToObject(data, "supported", era_supported_versions_new()) ||
            !cJSON_AddStringToObject(data, "requested", requested))
                return NULL;
        return TAKE_PTR(e);
}

cJSON *era_missing_capability_new(const cJSON *id, const char *text, cJSON *required) {
        _cleanup_json_ cJSON *e = jsonrpc_error_new(id, MCP_MISSING_CLIENT_CAPABILITY, text);
        cJSON *data = cJSON_CreateObject(), *err = cJSON_GetObjectItemCaseSensitive(e, "error");

        if (!data || !err || !cJSON_AddItemToObject(err, "data", data)) {
                cJSON_Delete(data);
                cJSON_Delete(required);
                return NULL;
        }
        if (!required || !cJSON_AddItemToObject(data, "requiredCapabilities", required)) {
                cJSON_Delete(required);
                return NULL;
        }
        return TAKE_PTR(e);
}

int era_log_level_rank(const char *level) {
        static const char *const levels[] = {"debug",    "info",  "notice", "warning",
                                             "error",    "critical", "alert", "emergency"};

        for (size_t i = 0; level && i < ELEMENTSOF(levels); i++)
                if (streq(level, levels[i]))
                        return (int) i;
        return -EINVAL;
}

bool era_method_removed(const char *method) {
        for (size_t i = 0; i < ELEMENTSOF(removed_methods); i++)
                if (streq(method, removed_methods[i]))
                        return true;
        return false;
}

int era_result_complete(cJSON *result, uint64_t ttl_ms, bool public, const cJSON *server_info) {
        cJSON *meta;

        if (!result)
                return -ENOMEM;
        if (!cJSON_AddStringToObject(result, "resultType", "complete") ||
            !cJSON_AddNumberToObject(result, "ttlMs", (double) ttl_ms) ||
            !cJSON_AddStringToObject(result, "cacheScope", public ? "public" : "private"))
                return -ENOMEM;
        if (!server_info)
                return 0;
        meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");
        if (!meta && !(meta = cJSON_AddObjectToObject(result, "_meta")))
                return -ENOMEM;
        /* A copy: a batch's answers wait for its slowest member, and a reload may free the manifest. */
        if (!cJSON_AddItemToObject(meta, META_SERVER_INFO, cJSON_Duplicate(server_info, true)))
                return -ENOMEM;
        return 0;
}

cJSON *era_initialize_params_new(const Envelope *e) {
        _cleanup_json_ cJSON *p = cJSON_CreateObject();

        if (!p || !cJSON_AddStringToObject(p, "protocolVersion", ERA_NEWEST_LEGACY) ||
            !cJSON_AddItemToObject(p, "capabilities", cJSON_Duplicate(e->capabilities, true)))
                return NULL;
        /* clientInfo is only recommended in the envelope, but handshake-era servers refuse an initialize
         * without one: mcp-lazy names itself then. */
        if (!cJSON_AddItemToObject(p, "clientInfo",
                                   e->client_info ? cJSON_Duplicate(e->client_info, true) : era_client_info_new()))
                return NULL;
        return TAKE_PTR(p);
}

cJSON *era_client_info_new(void) {
        _cleanup_json_ cJSON *info = cJSON_CreateObject();

        if (!info || !cJSON_AddStringToObject(info, "name", "mcp-lazy") ||
            !cJSON_AddStringToObject(info, "version", MCP_LAZY_VERSION))
                return NULL;
        return TAKE_PTR(info);
}

/* Adds {cap: {sub: {}}} (sub NULL: {cap: {}}) to missing, unless it is there. */
static int require(cJSON *missing, const char *cap, const char *sub) {
        cJSON *c = cJSON_GetObjectItemCaseSensitive(missing, cap);

        if (!c && !(c = cJSON_AddObjectToObject(missing, cap)))
                return -ENOMEM;
        if (sub && !cJSON_GetObjectItemCaseSensitive(c, sub) && !cJSON_AddObjectToObject(c, sub))
                return -ENOMEM;
        return 0;
}

bool era_input_method_known(const char *method) {
        return streq(method, "elicitation/create") || streq(method, "sampling/createMessage") ||
               streq(method, "roots/list");
}

int era_input_missing(const char *method, const cJSON *params, const cJSON *caps, cJSON *missing) {
        if (streq(method, "elicitation/create")) {
                /* A mode the client declared: an empty elicitation object means form only (the spec). */
                const cJSON *e = cJSON_GetObjectItemCaseSensitive(caps, "elicitation");
                const char *mode = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "mode")) ?: "form";
                bool form = streq(mode, "form");

                if (!cJSON_IsObject(e))
                        return require(missing, "elicitation", form ? NULL : mode);
                if (cJSON_GetObjectItemCaseSensitive(e, mode) || (form && !e->child))
                        return 0;
                return require(missing, "elicitation", mode);
        }
        if (streq(method, "sampling/createMessage")) {
                /* Tool use needs sampling.tools. */
                const cJSON *s = cJSON_GetObjectItemCaseSensitive(caps, "sampling");
                bool tools = cJSON_HasObjectItem(params, "tools") || cJSON_HasObjectItem(params, "toolChoice");

                if (!cJSON_IsObject(s))
                        return require(missing, "sampling", tools ? "tools" : NULL);
                if (tools && !cJSON_GetObjectItemCaseSensitive(s, "tools"))
                        return require(missing, "sampling", "tools");
                return 0;
        }
        if (streq(method, "roots/list") && !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(caps, "roots")))
                return require(missing, "roots", NULL);
        return 0;
}

int era_client_era_put(cJSON *params, bool modern) {
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");

        if (!meta || !cJSON_IsObject(meta)) {
                cJSON_DeleteItemFromObjectCaseSensitive(params, "_meta");
                meta = cJSON_AddObjectToObject(params, "_meta");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(meta, META_CLIENT_ERA);
        if (!meta || !cJSON_AddStringToObject(meta, META_CLIENT_ERA, modern ? ERA_MODERN_VERSION : ERA_HANDSHAKE))
                return -ENOMEM;
        return 0;
}

int era_client_era_take(cJSON *params, bool *ret_modern, const char **ret_problem) {
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        const cJSON *era = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT_ERA);
        const char *name = cJSON_GetStringValue(era);

        if (!era) {
                *ret_modern = false;
                return 0;
        }
        if (!name || (!streq(name, ERA_MODERN_VERSION) && !streq(name, ERA_HANDSHAKE))) {
                *ret_problem =
                        "params._meta." META_CLIENT_ERA " must be \"" ERA_MODERN_VERSION "\" or \"" ERA_HANDSHAKE "\"";
                return -EINVAL;
        }
        *ret_modern = streq(name, ERA_MODERN_VERSION);
        cJSON_DeleteItemFromObjectCaseSensitive(meta, META_CLIENT_ERA);
        if (!meta->child)
                cJSON_DeleteItemFromObjectCaseSensitive(params, "_meta");
        return 1;
}

cJSON *era_resource_uris_new(const Message *m, const char *const *path, const cJSON *tree, size_t *ret_n_nul) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();
        _cleanup_free_ Span *el = NULL;
        const cJSON *list = cJSON_IsArray(tree) ? tree : NULL, *it;
        size_t n = 0, k = 0, n_nul = 0;
        Span s = {0, 0};

        if (!a)
                return NULL;
        /* The elements' spans, in the tree's order: the text says whether each holds a NUL. */
        if (list &&
            (message_find(m, path, &s) < 0 || message_split_batch(m->text + s.start, s.len, UINT_MAX, &el, &n) < 0 ||
             n != (size_t) cJSON_GetArraySize(list)))
                return NULL;
        cJSON_ArrayForEach (it, list) {
                Span e = {s.start + el[k].start, el[k].len};

                k++;
                if (!cJSON_IsString(it))
                        continue;
                if (message_span_has_nul(m, e))
                        n_nul++;
                else if (!cJSON_AddItemToArray(a, cJSON_CreateString(it->valuestring)))
                        return NULL;
        }
        if (ret_n_nul)
                *ret_n_nul = n_nul;
        return TAKE_PTR(a);
}
