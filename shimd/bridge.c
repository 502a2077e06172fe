/* A backend's era, and what the shim translates for clients of the other one: the shim learns the era
 * as a dual-era client does (server/discover, else initialize), gives a 2026-07-28 backend each
 * request with its client's envelope, and serves handshake-era clients of such a backend: their
 * initialize from the DiscoverResult, and an input_required answer as requests to that client, whose
 * answers go back to the backend in the retried request. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "era.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

#define BRIDGE_MAX_ROUNDS 8U

/* The envelope a handshake-era client's initialize params stand for. */
static cJSON *envelope_new(const cJSON *init_params) {
        const cJSON *caps = cJSON_GetObjectItemCaseSensitive(init_params, "capabilities");
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(init_params, "clientInfo");
        _cleanup_json_ cJSON *meta = cJSON_CreateObject();

        if (!meta || !cJSON_AddStringToObject(meta, META_PROTOCOL_VERSION, ERA_MODERN_VERSION) ||
            !cJSON_AddItemToObject(meta, META_CLIENT_CAPABILITIES,
                                   cJSON_IsObject(caps) ? cJSON_Duplicate(caps, true) : cJSON_CreateObject()))
                return NULL;
        if (cJSON_IsObject(info) && !cJSON_AddItemToObject(meta, META_CLIENT_INFO, cJSON_Duplicate(info, true)))
                return NULL;
        return TAKE_PTR(meta);
}

static cJSON *enveloped_params_new(const cJSON *init_params) {
        _cleanup_json_ cJSON *p = cJSON_CreateObject();

        if (!p || !cJSON_AddItemToObject(p, "_meta", envelope_new(init_params)))
                return NULL;
        return TAKE_PTR(p);
}

cJSON *bridge_first_request_new(Instance *i, const cJSON *init_params) {
        _cleanup_json_ cJSON *id = NULL;
        const Backend *b = i->shim->backend;

        i->probing = b->protocol == PROTOCOL_MODERN ||
                     (b->protocol == PROTOCOL_AUTO && i->shim->learned_era != BACKEND_ERA_LEGACY);
        i->probe_pending = i->probing;
        if (!i->probing)
                return bridge_initialize_request_new(init_params);
        id = cJSON_CreateNumber(PROBE_REQUEST_ID);
        return id ? jsonrpc_request_new(id, "server/discover", enveloped_params_new(init_params)) : NULL;
}

cJSON *bridge_initialize_request_new(const cJSON *init_params) {
        _cleanup_json_ cJSON *id = cJSON_CreateNumber(INIT_REQUEST_ID);
        return jsonrpc_request_new(id, "initialize", cJSON_Duplicate(init_params, true));
}

static bool speaks_modern(const cJSON *versions) {
        const cJSON *v;
        cJSON_ArrayForEach (v, versions)
                if (streq(cJSON_GetStringValue(v) ?: "", ERA_MODERN_VERSION))
                        return true;
        return false;
}

int bridge_probe_verdict(Instance *i, const cJSON *msg, char *text, size_t size) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(msg, "error");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
        const char *name = i->shim->backend->name;

        i->probing = i->probe_pending = false;
        if (cJSON_IsObject(result) && speaks_modern(cJSON_GetObjectItemCaseSensitive(result, "supportedVersions"))) {
                log_info("Backend '%s' speaks " ERA_MODERN_VERSION " (it answered server/discover).", name);
                return BACKEND_ERA_MODERN;
        }
        /* A recognised modern error means a modern server: do not fall back (the spec), but we have no
         * version in common. */
        if ((cJSON_IsNumber(code) && code->valuedouble == MCP_UNSUPPORTED_VERSION) ||
            cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(result, "supportedVersions"))) {
                snprintf(text, size, "backend '%s' is a modern MCP server without protocol version " ERA_MODERN_VERSION,
                         name);
                return -EPROTO;
        }
        if (i->shim->backend->protocol == PROTOCOL_MODERN) {
                snprintf(text, size,
                         "backend '%s' is pinned to protocol: modern in the manifest, but did not answer "
                         "server/discover as a " ERA_MODERN_VERSION " server: %s",
                         name,
                         cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(error, "message"))
                                 ?: "no DiscoverResult");
                return -EPROTO;
        }
        /* Any other error, or an answer that is no DiscoverResult (some servers answer every unknown
         * method with {}): a handshake-era server. */
        log_info("Backend '%s' did not answer server/discover as a modern server: a handshake-era server, "
                 "initializing it.",
                 name);
        return BACKEND_ERA_LEGACY;
}

cJSON *bridge_initialize_result_new(const Instance *i, const cJSON *init_params) {
        const cJSON *d = i->init_result, *v = cJSON_GetObjectItemCaseSensitive(init_params, "protocolVersion");
        const cJSON *info =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "_meta"), META_SERVER_INFO);
        const char *instructions = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "instructions"));
        _cleanup_json_ cJSON *r = cJSON_CreateObject();

        /* The frontend asks with a version it negotiated itself, one of the handshake era's. */
        if (!r || !cJSON_AddStringToObject(r, "protocolVersion", cJSON_GetStringValue(v) ?: ERA_NEWEST_LEGACY) ||
            !cJSON_AddItemToObject(r, "capabilities",
                                   cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(d, "capabilities"), true)) ||
            !cJSON_AddItemToObject(r, "serverInfo", info ? cJSON_Duplicate(info, true) : cJSON_CreateObject()))
                return NULL;
        if (instructions && !cJSON_AddStringToObject(r, "instructions", instructions))
                return NULL;
        return TAKE_PTR(r);
}

cJSON *bridge_contract_params(const Instance *i) {
        return i->era == BACKEND_ERA_MODERN ? enveloped_params_new(i->init_params) : NULL;
}

static bool bridgeable(const char *method) {
        return streq(method, "tools/call") || streq(method, "prompts/get") || streq(method, "resources/read");
}

/* r->sent with the envelope added (a handshake-era client's request to a modern backend): printed again
 * from what was parsed; a modern client's own envelope leaves the bytes as they are. */
int bridge_prepare_request(Instance *i, Client *c, Route *r) {
        _cleanup_json_ cJSON *j = NULL, *env = NULL;
        cJSON *params, *meta, *it;
        char *text;

        if (i->era != BACKEND_ERA_MODERN)
                return 0;
        j = cJSON_ParseWithLength(r->sent, r->sent_len);
        if (!j)
                return -ENOMEM;
        params = cJSON_GetObjectItemCaseSensitive(j, "params");
        if (!params && !(params = cJSON_AddObjectToObject(j, "params")))
                return -ENOMEM;
        if (!cJSON_IsObject(params))
                return 0; /* the backend will say what is wrong with it */
        meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        if (!meta && !(meta = cJSON_AddObjectToObject(params, "_meta")))
                return -ENOMEM;
        if (!cJSON_IsObject(meta) || cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION))
                return 0; /* a modern client's own envelope, or nonsense the backend refuses */
        /* A handshake-era client: its initialize said what the envelope says. */
        env = envelope_new(c->init_params);
        if (!env)
                return -ENOMEM;
        while ((it = env->child)) {
                cJSON_DetachItemViaPointer(env, it);
                cJSON_DeleteItemFromObjectCaseSensitive(meta, it->string);
                cJSON_AddItemToObject(meta, it->string, it);
        }
        text = cJSON_PrintUnformatted(j);
        if (!text)
                return -ENOMEM;
        free(r->sent);
        r->sent = text;
        r->sent_len = strlen(text);
        r->legacy_client = true;
        if (bridgeable(r->method))
                r->request = TAKE_PTR(j);
        return 0;
}

/* What the handshake era does not have leaves a modern answer before a legacy client sees it. */
static void strip_modern(cJSON *result) {
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");

        if (streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "resultType")) ?: "", "complete"))
                cJSON_DeleteItemFromObjectCaseSensitive(result, "resultType");
        cJSON_DeleteItemFromObjectCaseSensitive(result, "ttlMs");
        cJSON_DeleteItemFromObjectCaseSensitive(result, "cacheScope");
        if (cJSON_IsObject(meta)) {
                cJSON_DeleteItemFromObjectCaseSensitive(meta, META_SERVER_INFO);
                if (!meta->child)
                        cJSON_DeleteItemFromObjectCaseSensitive(result, "_meta");
        }
}

static void bridge_retry(Instance *i, Route *r) {
        _cleanup_json_ cJSON *copy = cJSON_Duplicate(r->request, true);
        cJSON *params = cJSON_GetObjectItemCaseSensitive(copy, "params");
        char *text;

        if (!copy || !cJSON_IsObject(params))
                return route_fail(i, r, "out of memory");
        cJSON_DeleteItemFromObjectCaseSensitive(params, "inputResponses");
        cJSON_DeleteItemFromObjectCaseSensitive(params, "requestState");
        if (!cJSON_AddItemToObject(params, "inputResponses", TAKE_PTR(r->input_responses)) ||
            (r->request_state && !cJSON_AddStringToObject(params, "requestState", r->request_state)))
                return route_fail(i, r, "out of memory");
        free(r->request_state);
        r->request_state = NULL;
        /* A retry is a new request: a new id (the progress token stays: the last request has ended). */
        if (route_retarget(i, r) < 0)
                return route_fail(i, r, "out of memory");
        cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_CreateNumber((double) r->backend_id));
        text = cJSON_PrintUnformatted(copy);
        if (!text)
                return route_fail(i, r, "out of memory");
        free(r->sent);
        r->sent = text;
        r->sent_len = strlen(text);
        if (route_send(i, r) < 0)
                route_fail(i, r, "the backend's stdin is closed");
}

static bool input_method_known(const char *m) {
        return streq(m, "elicitation/create") || streq(m, "sampling/createMessage") || streq(m, "roots/list");
}

/* input_required for a legacy client: each input request becomes a request to that client. */
static void bridge_start(Instance *i, Route *r, const cJSON *result) {
        const cJSON *requests = cJSON_GetObjectItemCaseSensitive(result, "inputRequests");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(result, "requestState");
        const cJSON *it;
        char text[256];

        if (++r->rounds > BRIDGE_MAX_ROUNDS) {
                snprintf(text, sizeof text, "backend '%s' still asked for input after %u rounds; giving up",
                         i->shim->backend->name, BRIDGE_MAX_ROUNDS);
                return route_fail(i, r, text);
        }
        cJSON_Delete(r->input_responses);
        r->input_responses = cJSON_CreateObject();
        free(r->request_state);
        r->request_state = cJSON_IsString(state) ? strdup(state->valuestring) : NULL;
        if (!r->input_responses || (cJSON_IsString(state) && !r->request_state))
                return route_fail(i, r, "out of memory");
        r->awaiting = 0;
        /* A map from keys to requests (the spec): each answer goes back under its request's key. */
        if (requests && !cJSON_IsObject(requests)) {
                snprintf(text, sizeof text,
                         "backend '%s' answered input_required with inputRequests that is not an object",
                         i->shim->backend->name);
                return route_fail(i, r, text);
        }
        cJSON_ArrayForEach (it, requests) {
                const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "method"));
                if (!method || !input_method_known(method)) {
                        snprintf(text, sizeof text, "backend '%s' asked for input of an unknown kind ('%.64s')",
                                 i->shim->backend->name, method ?: "?");
                        return route_fail(i, r, text);
                }
                r->awaiting++;
        }
        if (r->awaiting == 0)
                return bridge_retry(i, r);
        cJSON_ArrayForEach (it, requests)
                if (upcall_bridge(i, r, it->string, cJSON_GetObjectItemCaseSensitive(it, "method")->valuestring,
                                  cJSON_GetObjectItemCaseSensitive(it, "params")) < 0)
                        return route_fail(i, r, "out of memory");
}

int bridge_response(Instance *i, Route *r, const Message *m) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(m->json, "result");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "resultType"));
        _cleanup_json_ cJSON *copy = NULL;

        if (!r->legacy_client || !cJSON_IsObject(result))
                return BRIDGE_PASS;
        if (type && streq(type, "input_required") && r->request) {
                bridge_start(i, r, result);
                return BRIDGE_CONTINUES;
        }
        /* Printed again from what was parsed, with the client's id (its exact text) in place. */
        copy = cJSON_Duplicate(m->json, true);
        if (!copy || !cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_CreateRaw(r->client_id)))
                return BRIDGE_PASS;
        strip_modern(cJSON_GetObjectItemCaseSensitive(copy, "result"));
        if (r->client)
                client_send(r->client, copy);
        return BRIDGE_SENT;
}

void bridge_input_answer(Instance *i, int64_t route_id, const char *input_key, const cJSON *msg) {
        Route *r = instance_route(i, route_id);
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(msg, "error");
        char text[512];

        if (!r || !r->input_responses || cJSON_GetObjectItemCaseSensitive(r->input_responses, input_key))
                return; /* the call is over (cancelled, failed), or a duplicate */
        if (!cJSON_IsObject(result)) {
                snprintf(text, sizeof text, "the client refused what backend '%s' asked (%s): %s",
                         i->shim->backend->name, input_key,
                         cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(error, "message")) ?: "no result");
                return route_fail(i, r, text);
        }
        if (!cJSON_AddItemToObject(r->input_responses, input_key, cJSON_Duplicate(result, true)))
                return route_fail(i, r, "out of memory");
        if (--r->awaiting == 0)
                bridge_retry(i, r);
}

void bridge_route_gone(Instance *i, Route *r) {
        if (r->legacy_client && r->awaiting > 0)
                upcall_withdraw_bridged(i, r->backend_id, "the call that asked for it has ended");
}
