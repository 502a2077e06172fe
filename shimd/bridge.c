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
#define BRIDGE_MAX_INPUT_REQUESTS 16U /* per round: upcall slots are shared by every session of the shim */

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

/* The object at obj in m's text with the members named in drop left out, the member replace_key (if
 * any) given replace_text as its value, and 'prepend' (members' text, or NULL) first; every other
 * member keeps its bytes. *ret_n: how many members it has. */
static char *object_edit(const Message *m, Span obj, const char *const *drop, const char *replace_key,
                         const char *replace_text, const char *prepend, size_t *ret_n) {
        _cleanup_free_ Member *members = NULL;
        _cleanup_free_ char *out = NULL;
        size_t n = 0, len = 0, kept = prepend ? 1 : 0;
        FILE *f;

        if (message_members(m, obj, &members, &n) < 0)
                return NULL;
        f = open_memstream(&out, &len);
        if (!f)
                return NULL;
        fputc('{', f);
        if (prepend)
                fputs(prepend, f);
        for (size_t k = 0; k < n; k++) {
                const Member *mb = &members[k];
                bool skip = false;
                for (const char *const *d = drop; d && *d && !skip; d++)
                        skip = message_key_is(m, mb, *d);
                if (skip)
                        continue;
                if (kept++ > 0)
                        fputc(',', f);
                if (replace_key && message_key_is(m, mb, replace_key)) {
                        fwrite(m->text + mb->member.start, 1, mb->value.start - mb->member.start, f);
                        fputs(replace_text, f);
                } else
                        fwrite(m->text + mb->member.start, 1, mb->member.len, f);
        }
        fputc('}', f);
        if (fclose(f) != 0)
                return NULL;
        *ret_n = kept;
        return TAKE_PTR(out);
}

/* An object's members as text, without its braces: what object_edit() puts first. */
static char *members_text(const cJSON *obj) {
        char *t = cJSON_PrintUnformatted(obj);
        size_t n = t ? strlen(t) : 0;

        if (n < 2) {
                free(t);
                return NULL;
        }
        memmove(t, t + 1, n - 2);
        t[n - 2] = 0;
        return t;
}

static int splice_sorted(const Message *m, Splice *s, size_t n, char **ret, size_t *ret_len) {
        if (n == 2 && s[1].span.start < s[0].span.start) {
                Splice t = s[0];
                s[0] = s[1], s[1] = t;
        }
        return message_splice(m, s, n, ret, ret_len);
}

/* r->sent with the envelope added (a handshake-era client's request to a modern backend): the request's
 * own bytes with the envelope put into its _meta; a modern client's own envelope leaves it as it is. */
int bridge_prepare_request_internal(Instance *i, Client *c, Route *r, const Message *request) {
        static const char *const envelope_keys[] = {META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, NULL};
        static const char *const at_meta[] = {"params", "_meta", NULL}, *const at_params[] = {"params", NULL},
                                 *const at_top[] = {NULL};
        _cleanup_message_ Message *m = NULL;
        _cleanup_json_ cJSON *env = NULL;
        _cleanup_free_ char *members = NULL, *wrapped = NULL, *edited = NULL, *text = NULL;
        const cJSON *params, *meta;
        const char *const *at;
        size_t n, len;
        Span obj;
        int k;

        /* Decided on the request as parsed already: r->sent differs only in the ids we translated. */
        params = request->params;
        meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        if ((params && !cJSON_IsObject(params)) ||
            (meta && (!cJSON_IsObject(meta) || cJSON_GetObjectItemCaseSensitive(meta, META_PROTOCOL_VERSION))))
                return 0; /* a modern client's own envelope, or nonsense the backend refuses */
        k = message_parse(r->sent, r->sent_len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
        if (k < 0)
                return k == -ENOMEM ? k : 0; /* what the client sent was checked: this cannot be */
        /* A handshake-era client: its initialize said what the envelope says. */
        env = envelope_new(c->init_params);
        if (env && c->log_level && !cJSON_AddStringToObject(env, META_LOG_LEVEL, c->log_level))
                return -ENOMEM; /* logging/setLevel's level travels with each request (subscribe.c) */
        members = env ? members_text(env) : NULL;
        if (!members)
                return -ENOMEM;
        if (meta)
                at = at_meta;
        else if (params) {
                at = at_params;
                if (asprintf(&wrapped, "\"_meta\":{%s}", members) < 0)
                        return -ENOMEM;
        } else {
                at = at_top;
                if (asprintf(&wrapped, "\"params\":{\"_meta\":{%s}}", members) < 0)
                        return -ENOMEM;
        }
        if (message_find(m, at, &obj) < 0)
                return -EINVAL;
        edited = object_edit(m, obj, meta ? envelope_keys : NULL, NULL, NULL, wrapped ?: members, &n);
        if (!edited || message_splice(m, &(Splice){obj, edited, strlen(edited)}, 1, &text, &len) < 0)
                return -ENOMEM;
        route_set_sent(r, TAKE_PTR(text), len);
        r->legacy_client = true;
        if (bridgeable(r->method)) {
                free(r->request);
                if (!(r->request = strndup(r->sent, r->sent_len)))
                        return -ENOMEM;
                r->request_len = r->sent_len;
        }
        return 0;
}

/* The answer of a modern backend as a legacy client gets it: the client's id, and the result without
 * what the handshake era does not have (resultType "complete", ttlMs, cacheScope, the server info);
 * every other byte is the backend's. */
static int legacy_answer_text(const Message *m, const char *client_id, char **ret, size_t *ret_len) {
        static const char *const gone[] = {"ttlMs", "cacheScope", NULL};
        static const char *const gone_complete[] = {"resultType", "ttlMs", "cacheScope", NULL};
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(m->json, "result");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");
        bool complete =
                streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "resultType")) ?: "", "complete");
        _cleanup_free_ char *meta_text = NULL, *edited = NULL;
        const char *const *drop = complete ? gone_complete : gone;
        const char *drop_meta[5] = {};
        Splice s[2] = {{message_span(m, ID_PATH_ID), client_id, strlen(client_id)}};
        Span rs, ms;
        size_t n;

        if (message_find(m, (const char *const[]){"result", NULL}, &rs) < 0)
                return -EINVAL;
        if (cJSON_IsObject(meta) && cJSON_GetObjectItemCaseSensitive(meta, META_SERVER_INFO)) {
                if (message_find(m, (const char *const[]){"result", "_meta", NULL}, &ms) < 0 ||
                    !(meta_text =
                              object_edit(m, ms, (const char *const[]){META_SERVER_INFO, NULL}, NULL, NULL, NULL, &n)))
                        return -ENOMEM;
                if (n == 0) {
                        /* Nothing is left of _meta: it goes too. */
                        for (size_t k = 0; drop[k]; k++)
                                drop_meta[k] = drop[k];
                        drop_meta[complete ? 3 : 2] = "_meta";
                        drop = drop_meta;
                        meta_text = (free(meta_text), NULL);
                }
        }
        edited = object_edit(m, rs, drop, meta_text ? "_meta" : NULL, meta_text, NULL, &n);
        if (!edited)
                return -ENOMEM;
        s[1] = (Splice){rs, edited, strlen(edited)};
        return splice_sorted(m, s, 2, ret, ret_len);
}

/* The request again, with the client's answers, the backend's requestState (its bytes) and a new id:
 * every other byte is what the first request had. */
static void bridge_retry(Instance *i, Route *r) {
        static const char *const replaced[] = {"inputResponses", "requestState", NULL};
        _cleanup_message_ Message *m = NULL;
        _cleanup_json_ cJSON *add = cJSON_CreateObject();
        _cleanup_free_ char *members = NULL, *params = NULL, *id = NULL, *text = NULL;
        Splice s[2];
        Span ps;
        size_t n, len;
        int k;

        if (!add || message_parse(r->request, r->request_len, JSONRPC_DEFAULT_MAX_DEPTH, &m) < 0 ||
            message_find(m, (const char *const[]){"params", NULL}, &ps) < 0 ||
            !cJSON_AddItemToObject(add, "inputResponses", TAKE_PTR(r->input_responses)) ||
            (r->request_state && !cJSON_AddItemToObject(add, "requestState", cJSON_CreateRaw(r->request_state))) ||
            !(members = members_text(add)) || !(params = object_edit(m, ps, replaced, NULL, NULL, members, &n)))
                return route_fail(i, r, "out of memory");
        r->request_state = (free(r->request_state), NULL);
        /* A retry is a new request: a new id (the progress token stays: the last request has ended). */
        if (route_retarget(i, r) < 0 || !(id = id_text_integer(r->backend_id)))
                return route_fail(i, r, "out of memory");
        s[0] = (Splice){message_span(m, ID_PATH_ID), id, strlen(id)};
        s[1] = (Splice){ps, params, strlen(params)};
        if (splice_sorted(m, s, 2, &text, &len) < 0)
                return route_fail(i, r, "out of memory");
        route_set_sent(r, TAKE_PTR(text), len);
        k = route_send(i, r);
        if (k < 0)
                route_fail(i, r, route_send_strerror(k));
}

/* One input request's params as the backend wrote them (NULL: none, or a key we cannot find by its text). */
static char *input_params_text(const Message *m, const char *key, const cJSON *params) {
        Span s;

        if (!params)
                return NULL;
        if (message_find(m, (const char *const[]){"result", "inputRequests", key, "params", NULL}, &s) >= 0)
                return message_span_dup(m, s);
        return cJSON_PrintUnformatted(params); /* a key written with escapes: printed again */
}

/* input_required for a legacy client: each input request becomes a request to that client. */
static void bridge_start(Instance *i, Route *r, const Message *m) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(m->json, "result");
        const cJSON *requests = cJSON_GetObjectItemCaseSensitive(result, "inputRequests");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(result, "requestState");
        const cJSON *it;
        char text[256];
        Span ss;

        if (++r->rounds > BRIDGE_MAX_ROUNDS) {
                snprintf(text, sizeof text, "backend '%s' still asked for input after %u rounds; giving up",
                         i->shim->backend->name, BRIDGE_MAX_ROUNDS);
                return route_fail(i, r, text);
        }
        cJSON_Delete(r->input_responses);
        r->input_responses = cJSON_CreateObject();
        free(r->request_state);
        /* Echoed exactly: the backend's own bytes. */
        r->request_state =
                cJSON_IsString(state) &&
                                message_find(m, (const char *const[]){"result", "requestState", NULL}, &ss) >= 0
                        ? message_span_dup(m, ss)
                        : NULL;
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
                const cJSON *params = cJSON_GetObjectItemCaseSensitive(it, "params");
                if (!method || !era_input_method_known(method)) {
                        snprintf(text, sizeof text, "backend '%s' asked for input of an unknown kind ('%.64s')",
                                 i->shim->backend->name, method ?: "?");
                        return route_fail(i, r, text);
                }
                if (params && !cJSON_IsObject(params)) {
                        snprintf(text, sizeof text,
                                 "backend '%s' asked for input (%s) with params that are not an object",
                                 i->shim->backend->name, method);
                        return route_fail(i, r, text);
                }
                if (++r->awaiting > BRIDGE_MAX_INPUT_REQUESTS) {
                        snprintf(text, sizeof text,
                                 "backend '%s' asked for more than %u inputs in one input_required answer "
                                 "(mcp-lazy's limit per round)",
                                 i->shim->backend->name, BRIDGE_MAX_INPUT_REQUESTS);
                        return route_fail(i, r, text);
                }
        }
        if (r->awaiting == 0)
                return bridge_retry(i, r);
        cJSON_ArrayForEach (it, requests) {
                const cJSON *params = cJSON_GetObjectItemCaseSensitive(it, "params");
                _cleanup_free_ char *params_text = input_params_text(m, it->string, params);
                int k = params && !params_text
                                ? -ENOMEM
                                : upcall_bridge(i, r, it->string,
                                                cJSON_GetObjectItemCaseSensitive(it, "method")->valuestring,
                                                params_text);
                if (k == -ENOBUFS)
                        return route_fail(i, r, "too many requests are waiting for clients at this backend's shim");
                if (k < 0)
                        return route_fail(i, r, "out of memory");
        }
}

int bridge_response_internal(Instance *i, Route *r, const Message *m) {
        const cJSON *result;
        const char *type;
        _cleanup_free_ char *text = NULL;
        size_t len;

        result = cJSON_GetObjectItemCaseSensitive(m->json, "result");
        type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "resultType"));
        if (!cJSON_IsObject(result))
                return BRIDGE_PASS;
        if (type && streq(type, "input_required") && r->request) {
                bridge_start(i, r, m);
                return BRIDGE_CONTINUES;
        }
        if (legacy_answer_text(m, r->client_id, &text, &len) < 0)
                return BRIDGE_PASS;
        if (r->client)
                client_send_text(r->client, text, len);
        return BRIDGE_SENT;
}

void bridge_input_answer(Instance *i, int64_t route_id, const char *input_key, const cJSON *msg,
                         const char *result_text) {
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
        /* The client's own bytes, where the message layer found them. */
        if (!cJSON_AddItemToObject(r->input_responses, input_key,
                                   result_text ? cJSON_CreateRaw(result_text) : cJSON_Duplicate(result, true)))
                return route_fail(i, r, "out of memory");
        if (--r->awaiting == 0)
                bridge_retry(i, r);
}

void bridge_route_gone_internal(Instance *i, Route *r) {
        upcall_withdraw_bridged(i, r->backend_id, "the call that asked for it has ended");
}
