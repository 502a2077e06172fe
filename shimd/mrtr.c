/* 2026-07-28 clients of handshake-era backends (multi round-trip requests): a backend's request to its
 * client (elicitation, sampling, roots) during such a client's call becomes an input_required answer to
 * that call, with a requestState only this shim can have made, naming that session, that call and that
 * round; the client's retry carries its answers to the backend's waiting requests, and the backend's
 * result (or its next question) answers the retry. A call whose client never comes back is cancelled at
 * the backend after input_timeout. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "duration.h"
#include "era.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

#define MRTR_STATE_PREFIX "mcp-lazy-mrtr:"
/* A waiting call's key in Client.pending (and its client_id): an id the frontend lets no client use. */
#define MRTR_PARKED_PREFIX "\"mcp-lazy/mrtr:"
#define MRTR_MAX_INPUTS    16U /* a backend's requests waiting in one call */
#define MRTR_MAX_ENDED     16U /* calls of one connection that ended while their retry was awaited */
#define MRTR_SECRET_BYTES  16U

typedef struct Input {
        char *key;        /* in inputRequests and inputResponses */
        char *backend_id; /* the backend's request id, its exact text */
        char *method;
        char *params;       /* the backend's params, its own bytes; NULL: none */
        cJSON *params_json; /* the same, parsed: what answering needs (era_input_missing()) */
} Input;

struct Mrtr {
        Instance *instance;
        Route *route;
        uint64_t serial;
        char secret[2 * MRTR_SECRET_BYTES + 1];
        bool parked;    /* answered with input_required: the client's retry is awaited */
        cJSON *salient; /* the call's method and params, less _meta, inputResponses and requestState */
        cJSON *caps;    /* clientCapabilities of the request the client waits on */
        Input inputs[MRTR_MAX_INPUTS];
        unsigned n_inputs;
        Message *answer; /* the backend's, come while the retry was awaited */
        char *end_text;  /* why the call failed while the retry was awaited */
        sd_event_source *timer;
};

static void input_clear(Input *in) {
        free(in->key);
        free(in->backend_id);
        free(in->method);
        free(in->params);
        cJSON_Delete(in->params_json);
        *in = (Input){};
}

Mrtr *mrtr_free(Mrtr *x) {
        if (!x)
                return NULL;
        for (unsigned k = 0; k < x->n_inputs; k++)
                input_clear(&x->inputs[k]);
        sd_event_source_disable_unref(x->timer);
        cJSON_Delete(x->salient);
        cJSON_Delete(x->caps);
        message_unref(x->answer);
        free(x->end_text);
        free(x);
        return NULL;
}

bool mrtr_parked(const Route *r) {
        return r->mrtr && r->mrtr->parked;
}

bool mrtr_progress_dropped(const Route *r) {
        return r->mrtr && (r->mrtr->parked || !r->client_token);
}

static const cJSON *meta_of(const cJSON *params) {
        return cJSON_GetObjectItemCaseSensitive(params, "_meta");
}

bool mrtr_request_modern(const cJSON *params) {
        return cJSON_IsString(cJSON_GetObjectItemCaseSensitive(meta_of(params), META_PROTOCOL_VERSION));
}

/* Requests of the handshake era that a frontend sends for a 2026-07-28 client itself: its logLevel, its
 * listen stream's resourceSubscriptions (subscribe.c maps them at a modern backend). */
static bool own_handshake_request(const char *method) {
        return streq(method, "logging/setLevel") || streq(method, "resources/subscribe") ||
               streq(method, "resources/unsubscribe") || streq(method, "ping");
}

static bool refuse(Client *c, const Message *m, int code, const char *text) {
        _cleanup_json_ cJSON *err = jsonrpc_error_new(message_id_json(m), code, text);

        if (err)
                client_send(c, err);
        return true;
}

bool mrtr_request_refused(Client *c, const Message *m) {
        const char *problem = NULL;
        Envelope e;
        char text[512];
        int r;

        /* The envelope is checked where it arrives, as a 2026-07-28 server checks it: what the bridge
         * reads of it later (clientCapabilities for -32021, a retry's) is there. */
        r = era_envelope_parse(m->params, &e, &problem);
        if (r == -EINVAL) {
                snprintf(text, sizeof text, "Invalid params: %s", problem);
                return refuse(c, m, JSONRPC_INVALID_PARAMS, text);
        }
        if (!c->init_params)
                return false; /* it gets "send initialize first" */
        /* A peer that said nothing (an mcp-lazy from before the member, or another client) speaks the era
         * of its first request, unless the shim asked it something first (roots, a backend's request),
         * which only a handshake-era client is asked: until then nothing the shim did for it depended on
         * its era (upcalls.c, roots.c settle it). */
        if (!c->era_known && !own_handshake_request(m->method)) {
                c->modern = r != 0;
                c->era_known = true;
        }
        /* One era per connection: what the shim does for the session (ask it for roots, pool it by them,
         * send it a backend's requests or input_required) follows from it, so a session that spoke one
         * and speaks the other is told so, and nothing more. */
        if (r != 0 && !c->modern) {
                log_warning("Connection %llu speaks the handshake era, then sent a 2026-07-28 request; refused it.",
                            (unsigned long long) c->serial);
                return refuse(
                        c, m, JSONRPC_INVALID_REQUEST,
                        "this connection speaks the handshake era (its initialize said so in "
                        "params._meta." META_CLIENT_ERA
                        ", or it said nothing and its first request had no 2026-07-28 envelope, or it was asked a "
                        "request), but this request carries a 2026-07-28 envelope (params._meta." META_PROTOCOL_VERSION
                        "): a connection speaks one era; open another for the other");
        }
        if (r == 0 && c->modern && !own_handshake_request(m->method)) {
                log_warning("Connection %llu speaks 2026-07-28, then sent a request without its envelope; refused it.",
                            (unsigned long long) c->serial);
                return refuse(
                        c, m, JSONRPC_INVALID_REQUEST,
                        "this connection speaks 2026-07-28 (its initialize said so in params._meta." META_CLIENT_ERA
                        ", or it said nothing and its first request had the envelope), but this request has no "
                        "2026-07-28 envelope (params._meta." META_PROTOCOL_VERSION " and " META_CLIENT_CAPABILITIES
                        "): a connection speaks one era; open another for the other");
        }
        return false;
}

static bool bridgeable(const char *method) {
        return streq(method, "tools/call") || streq(method, "prompts/get") || streq(method, "resources/read");
}

/* What a retry must repeat: the method and params of the call, less what changes between rounds. */
static cJSON *salient_new(const char *method, const cJSON *params) {
        _cleanup_json_ cJSON *s = cJSON_CreateObject();
        cJSON *p = cJSON_IsObject(params) ? cJSON_Duplicate(params, true) : cJSON_CreateObject();

        if (!s || !cJSON_AddStringToObject(s, "method", method) || !cJSON_AddItemToObject(s, "params", p)) {
                if (s && !cJSON_GetObjectItemCaseSensitive(s, "params"))
                        cJSON_Delete(p);
                return NULL;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(p, "_meta");
        cJSON_DeleteItemFromObjectCaseSensitive(p, "inputResponses");
        cJSON_DeleteItemFromObjectCaseSensitive(p, "requestState");
        return TAKE_PTR(s);
}

static void reply_backend_error(Instance *i, const char *id_text, const char *text) {
        _cleanup_json_ cJSON *id = cJSON_CreateRaw(id_text), *e = NULL;

        e = id ? jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text) : NULL;
        if (e && i->ch)
                (void) instance_send(i, e);
}

static void cancel_at_backend(Instance *i, int64_t backend_id, const char *reason) {
        _cleanup_json_ cJSON *n = NULL;
        cJSON *params = cJSON_CreateObject();

        if (!params || !cJSON_AddNumberToObject(params, "requestId", (double) backend_id) ||
            !cJSON_AddStringToObject(params, "reason", reason)) {
                cJSON_Delete(params);
                return;
        }
        n = jsonrpc_notification_new("notifications/cancelled", params);
        if (n && i->ch)
                (void) instance_send(i, n);
}

/* A new MRTR state for r, a 2026-07-28 client's call (what the backend got says so): -ENOENT if it is not
 * one, -EBADMSG if its envelope has no clientCapabilities (refused where it arrived: cannot be). */
static int mrtr_new(Instance *i, Route *r) {
        _cleanup_json_ cJSON *sent = r->sent ? cJSON_ParseWithLength(r->sent, r->sent_len) : NULL;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(sent, "params");
        Mrtr *x;

        if (r->sent && !sent)
                return -ENOMEM;
        if (!mrtr_request_modern(params))
                return -ENOENT;
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(meta_of(params), META_CLIENT_CAPABILITIES)))
                return -EBADMSG;
        x = calloc(1, sizeof *x);
        if (!x)
                return -ENOMEM;
        x->instance = i;
        x->route = r;
        x->serial = ++i->shim->next_upcall;
        x->salient = salient_new(r->method, params);
        x->caps = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(meta_of(params), META_CLIENT_CAPABILITIES), true);
        if (!x->salient || !x->caps) {
                mrtr_free(x);
                return -ENOMEM;
        }
        r->mrtr = x;
        return 0;
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Mrtr *x = userdata;
        Instance *i = x->instance;
        Route *r = x->route;
        int64_t backend_id = r->backend_id;
        char text[512], d[32];

        (void) s, (void) usec;
        duration_format(i->shim->backend->input_timeout_usec, d, sizeof d);
        log_warning("Connection %llu did not retry its %s at backend '%s' within %s (input_timeout) of being asked "
                    "for input; cancelling it there.",
                    r->client ? (unsigned long long) r->client->serial : 0ULL, r->method, shim_backend_name(i->shim),
                    d);
        snprintf(text, sizeof text,
                 "this call was not retried within %s (input_timeout of backend '%s') after it asked for input; "
                 "it was cancelled at the backend",
                 d, shim_backend_name(i->shim));
        /* The backend's requests get their errors first (route_gone), then the call is cancelled. */
        route_fail(i, r, text);
        cancel_at_backend(i, backend_id, "the client did not come back with the input asked for");
        return 0;
}

static int arm_timer(Mrtr *x) {
        uint64_t usec = x->instance->shim->backend->input_timeout_usec;

        if (usec == USEC_INFINITY)
                return 0;
        if (!x->timer)
                return sd_event_add_time_relative(x->instance->shim->event, &x->timer, CLOCK_MONOTONIC, usec, 0,
                                                  on_timeout, x);
        if (sd_event_source_set_time_relative(x->timer, usec) < 0)
                return -EINVAL;
        return sd_event_source_set_enabled(x->timer, SD_EVENT_ONESHOT);
}

/* The route waits under a key of ours, and its client's id is free again. */
static int park(Mrtr *x) {
        Route *r = x->route;
        char *key = NULL;

        if (asprintf(&key, MRTR_PARKED_PREFIX "%" PRIu64 "\"", x->serial) < 0)
                return -ENOMEM;
        if (hashmap_put(&r->client->pending, key, r) < 0) {
                free(key);
                return -ENOMEM;
        }
        hashmap_remove(&r->client->pending, r->client_id);
        route_set_client_id(r, key);
        x->parked = true;
        return 0;
}

static int new_secret(Mrtr *x) {
        uint8_t b[MRTR_SECRET_BYTES];

        if (getrandom(b, sizeof b, 0) != (ssize_t) sizeof b)
                return -EIO;
        for (size_t k = 0; k < sizeof b; k++)
                snprintf(x->secret + 2 * k, 3, "%02x", b[k]);
        return 0;
}

static cJSON *input_required_new(Mrtr *x) {
        _cleanup_json_ cJSON *result = cJSON_CreateObject();
        cJSON *requests;
        char state[128];

        snprintf(state, sizeof state, MRTR_STATE_PREFIX "%" PRIu64 ".%s", x->serial, x->secret);
        if (!result || !cJSON_AddStringToObject(result, "resultType", "input_required") ||
            !(requests = cJSON_AddObjectToObject(result, "inputRequests")))
                return NULL;
        for (unsigned k = 0; k < x->n_inputs; k++) {
                const Input *in = &x->inputs[k];
                cJSON *req = cJSON_CreateObject();
                /* The backend's params go on as its own bytes. */
                if (!req || !cJSON_AddItemToObject(requests, in->key, req) ||
                    !cJSON_AddStringToObject(req, "method", in->method) ||
                    (in->params && !cJSON_AddItemToObject(req, "params", cJSON_CreateRaw(in->params))))
                        return NULL;
        }
        if (!cJSON_AddStringToObject(result, "requestState", state))
                return NULL;
        return TAKE_PTR(result);
}

/* The client waiting on r hears what the backend asks: input_required, or -32021 when the request did
 * not declare what answering needs (the call then ends at the backend). */
static void ask(Mrtr *x) {
        Instance *i = x->instance;
        Route *r = x->route;
        _cleanup_json_ cJSON *missing = cJSON_CreateObject(), *id = cJSON_CreateRaw(r->client_id), *msg = NULL;
        int64_t backend_id = r->backend_id;

        if (!missing || !id)
                return route_fail(i, r, "out of memory");
        for (unsigned k = 0; k < x->n_inputs; k++)
                if (era_input_missing(x->inputs[k].method, x->inputs[k].params_json, x->caps, missing) < 0)
                        return route_fail(i, r, "out of memory");
        if (missing->child) {
                log_info("Backend '%s' asked connection %llu for input its request did not declare a capability for; "
                         "the call fails with -32021.",
                         shim_backend_name(i->shim), (unsigned long long) r->client->serial);
                msg = era_missing_capability_new(id,
                                                 "the backend needs input of a kind this request's client "
                                                 "capabilities do not declare",
                                                 TAKE_PTR(missing));
                if (msg)
                        client_send(r->client, msg);
                route_end(i, r);
                return cancel_at_backend(i, backend_id, "the client cannot give the input asked for");
        }
        if (new_secret(x) < 0)
                return route_fail(i, r, "cannot make a requestState: getrandom() failed");
        msg = jsonrpc_result_new(id, input_required_new(x));
        if (!msg || park(x) < 0)
                return route_fail(i, r, "out of memory");
        if (arm_timer(x) < 0)
                log_warning("Cannot arm input_timeout for a call at backend '%s'; it waits for its retry.",
                            shim_backend_name(i->shim));
        log_debug("Asked connection %llu for %u inputs for backend '%s'.", (unsigned long long) r->client->serial,
                  x->n_inputs, shim_backend_name(i->shim));
        client_send(r->client, msg);
}

static int input_add(Mrtr *x, const Message *m) {
        Input *in;
        Span params;

        if (x->n_inputs >= MRTR_MAX_INPUTS)
                return -ENOBUFS;
        in = &x->inputs[x->n_inputs];
        if (asprintf(&in->key, UPCALL_ID_PREFIX "%llu", (unsigned long long) ++x->instance->shim->next_upcall) < 0) {
                in->key = NULL;
                return -ENOMEM;
        }
        in->backend_id = strdup(m->id_text);
        in->method = strdup(m->method);
        if (message_find(m, (const char *const[]){"params", NULL}, &params) >= 0)
                in->params = message_span_dup(m, params);
        in->params_json = m->params ? cJSON_Duplicate(m->params, true) : NULL;
        if (!in->backend_id || !in->method || (m->params && (!in->params || !in->params_json))) {
                input_clear(in);
                return -ENOMEM;
        }
        x->n_inputs++;
        return 0;
}

/* The one call of c in flight at i, if it has exactly one. */
static Route *sole_call(Client *c) {
        size_t state = 0;
        void *v = NULL;

        if (hashmap_size(&c->pending) != 1)
                return NULL;
        (void) hashmap_iterate(&c->pending, &state, NULL, &v);
        return v;
}

bool mrtr_upcall(Instance *i, Client *c, const Message *m) {
        const char *name = shim_backend_name(i->shim);
        Route *r;
        char text[512];
        int k;

        if (i->era == BACKEND_ERA_MODERN || !c)
                return false;
        r = sole_call(c);
        k = r && !r->mrtr ? mrtr_new(i, r) : r ? 0 : -ENOENT;
        if (k == -ENOMEM) {
                reply_backend_error(i, m->id_text, "out of memory");
                return true;
        }
        if (k == -EBADMSG)
                snprintf(text, sizeof text, "the client's call carries no " META_CLIENT_CAPABILITIES);
        else if (k < 0) {
                if (!c->modern)
                        return false; /* a handshake-era client: asked as itself (upcalls.c) */
                if (hashmap_size(&c->pending) == 0)
                        snprintf(text, sizeof text,
                                 "the client speaks 2026-07-28, where a server asks for input only in its answer to "
                                 "a call, and it has no call in flight at this backend");
                else
                        snprintf(text, sizeof text,
                                 "the client speaks 2026-07-28, where a server asks for input only in its answer to "
                                 "one call, and it has %zu calls in flight at this backend: mcp-lazy cannot tell "
                                 "which one this request is for",
                                 hashmap_size(&c->pending));
        } else if (!bridgeable(r->method))
                snprintf(text, sizeof text,
                         "the client speaks 2026-07-28, where a server asks for input only while it answers "
                         "tools/call, prompts/get or resources/read, not %.64s",
                         r->method);
        else if ((k = input_add(r->mrtr, m)) < 0)
                snprintf(text, sizeof text, "%s",
                         k == -ENOBUFS ? "too many requests of this call wait for the client already"
                                       : "out of memory");
        else {
                /* While the client thinks about earlier questions, this one waits for its retry. */
                if (!r->mrtr->parked)
                        ask(r->mrtr);
                return true;
        }
        log_warning("Backend '%s' sent %s for connection %llu; refused it: %s.", name, m->method,
                    (unsigned long long) c->serial, text);
        reply_backend_error(i, m->id_text, text);
        return true;
}

static void refuse_retry(Client *c, const Message *m, const char *why) {
        _cleanup_json_ cJSON *e = NULL;
        char text[512];

        snprintf(text, sizeof text, "Invalid params: requestState %s", why);
        log_warning("Connection %llu sent a requestState that %s; refused.", (unsigned long long) c->serial, why);
        e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_PARAMS, text);
        if (e)
                client_send(c, e);
}

static bool secret_equal(const char *a, const char *b) {
        unsigned char d = 0;

        if (strlen(b) != 2 * MRTR_SECRET_BYTES)
                return false;
        for (size_t k = 0; k < 2 * MRTR_SECRET_BYTES; k++)
                d |= (unsigned char) (a[k] ^ b[k]);
        return d == 0;
}

/* A call that ended while its retry was awaited: the retry gets how it ended. */
static bool answer_ended(Client *c, const Message *m, const char *state) {
        cJSON *reply = cJSON_DetachItemFromObjectCaseSensitive(c->mrtr_ended, state);

        if (!reply)
                return false;
        if (cJSON_ReplaceItemInObjectCaseSensitive(reply, "id", cJSON_Duplicate(message_id_json(m), true)))
                client_send(c, reply);
        cJSON_Delete(reply);
        return true;
}

/* Each answer of the retry goes to the backend request it answers, as the client's own bytes. */
static int deliver_answers(Mrtr *x, const Message *m) {
        _cleanup_free_ Member *members = NULL;
        size_t n = 0;
        Span responses;

        if (message_find(m, (const char *const[]){"params", "inputResponses", NULL}, &responses) < 0 ||
            message_members(m, responses, &members, &n) < 0)
                return 0; /* none: everything is asked again */
        for (unsigned k = 0; k < x->n_inputs;) {
                Input *in = &x->inputs[k];
                const Member *hit = NULL;
                for (size_t j = 0; j < n && !hit; j++)
                        if (message_key_is(m, &members[j], in->key))
                                hit = &members[j];
                if (!hit) {
                        k++;
                        continue;
                }
                _cleanup_free_ char *value = message_span_dup(m, hit->value);
                _cleanup_json_ cJSON *id = cJSON_CreateRaw(in->backend_id), *reply = NULL;
                reply = value && id ? jsonrpc_result_new(id, cJSON_CreateRaw(value)) : NULL;
                if (!reply || instance_send(x->instance, reply) < 0)
                        return -ENOMEM;
                input_clear(in);
                x->inputs[k] = x->inputs[--x->n_inputs];
                x->inputs[x->n_inputs] = (Input){};
        }
        return 0;
}

/* The call is the retry's now: its id, its progress token, its capabilities. */
static int rebind(Client *c, Route *r, const Message *m) {
        const cJSON *declared = cJSON_GetObjectItemCaseSensitive(meta_of(m->params), META_CLIENT_CAPABILITIES);
        _cleanup_free_ char *id = strdup(m->id_text), *token = NULL;
        _cleanup_json_ cJSON *caps = cJSON_Duplicate(declared, true);
        IdField f[4];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        if (!cJSON_IsObject(declared))
                return -EBADMSG; /* refused where it arrived (mrtr_request_refused()): cannot be */
        for (size_t k = 0; k < n && k < ELEMENTSOF(f); k++)
                if (f[k].kind == ID_KIND_PROGRESS && !(token = strndup(f[k].text, f[k].len)))
                        return -ENOMEM;
        if (!id || !caps || hashmap_put(&c->pending, id, r) < 0)
                return -ENOMEM;
        hashmap_remove(&c->pending, r->client_id);
        route_set_client_id(r, TAKE_PTR(id));
        free(r->client_token);
        r->client_token = TAKE_PTR(token);
        cJSON_Delete(r->mrtr->caps);
        r->mrtr->caps = TAKE_PTR(caps);
        return 0;
}

/* A 2026-07-28 backend's requestStates are its own: what it speaks, or, while no process of it runs, what
 * the shim learned it speaks. */
static bool backend_modern(const Instance *i) {
        if (i->era != BACKEND_ERA_UNKNOWN)
                return i->era == BACKEND_ERA_MODERN;
        return shim_expects_modern(i->shim);
}

bool mrtr_retry_internal(Instance *i, Client *c, const Message *m) {
        const char *state;
        _cleanup_free_ char *key = NULL;
        _cleanup_json_ cJSON *salient = NULL;
        const char *secret;
        unsigned long long serial;
        char *end;
        Route *r;
        Mrtr *x;
        int k;

        state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "requestState"));

        if (backend_modern(i) || !state || strncmp(state, MRTR_STATE_PREFIX, strlen(MRTR_STATE_PREFIX)) != 0)
                return false; /* not ours: a modern backend's own, or nothing for a handshake-era one */
        errno = 0;
        serial = strtoull(state + strlen(MRTR_STATE_PREFIX), &end, 10);
        secret = *end == '.' ? end + 1 : "";
        if (errno != 0 || asprintf(&key, MRTR_PARKED_PREFIX "%llu\"", serial) < 0) {
                key = NULL;
                refuse_retry(c, m, "is malformed");
                return true;
        }
        r = hashmap_get(&c->pending, key);
        x = r ? r->mrtr : NULL;
        if (!x) {
                if (!answer_ended(c, m, state))
                        refuse_retry(c, m,
                                     "names no call of this session that waits for input (made up, another "
                                     "session's, or used already)");
                return true;
        }
        if (!x->parked || !secret_equal(x->secret, secret)) {
                refuse_retry(c, m, "is not the current one of its call (an earlier round's, or made up)");
                return true;
        }
        salient = salient_new(m->method, m->params);
        if (!salient || !cJSON_Compare(salient, x->salient, true)) {
                refuse_retry(c, m, "belongs to another request: a retry repeats the method and params of its call");
                return true;
        }
        if (hashmap_get(&c->pending, m->id_text)) {
                _cleanup_json_ cJSON *e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_REQUEST,
                                                            "request id is already used by a request still in flight");
                if (e)
                        client_send(c, e);
                return true;
        }
        k = rebind(c, r, m);
        if (k == -EBADMSG) {
                refuse_retry(c, m, "comes without " META_CLIENT_CAPABILITIES);
                return true;
        }
        if (k < 0) {
                _cleanup_json_ cJSON *e =
                        jsonrpc_error_new(message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
                if (e)
                        client_send(c, e);
                return true;
        }
        x->parked = false;
        (void) sd_event_source_set_enabled(x->timer, SD_EVENT_OFF);
        if (x->answer) {
                /* The backend answered while the client was away: that answers the retry. */
                _cleanup_message_ Message *a = TAKE_PTR(x->answer);
                instance_handle_backend_line(i, a->text, a->len);
                return true;
        }
        if (deliver_answers(x, m) < 0) {
                route_fail(i, r, "cannot hand the client's answers to the backend: its stdin is closed");
                return true;
        }
        /* Unanswered questions, and any the backend asked meanwhile, make another round. */
        if (x->n_inputs > 0)
                ask(x);
        return true;
}

bool mrtr_hold_answer_internal(Route *r, const Message *m) {
        if (!mrtr_parked(r))
                return false;
        if (!r->mrtr->answer)
                r->mrtr->answer = message_ref((Message *) m);
        return true;
}

bool mrtr_failure(Client *c, const char *id_text, const char *text) {
        Route *r;

        if (!c || strncmp(id_text, MRTR_PARKED_PREFIX, strlen(MRTR_PARKED_PREFIX)) != 0)
                return false;
        r = hashmap_get(&c->pending, id_text);
        if (!r || !mrtr_parked(r))
                return false;
        if (!r->mrtr->end_text)
                r->mrtr->end_text = strdup(text);
        return true; /* nobody waits under that id: the retry hears of it */
}

/* What the retry of a call that ended meanwhile gets (its id put in then). */
static void note_ended(Client *c, const Mrtr *x, bool tool_call) {
        const char *text = x->end_text ?: "the call ended while mcp-lazy waited for this retry";
        _cleanup_json_ cJSON *reply = tool_call ? jsonrpc_result_new(NULL, tool_error_result_new(text))
                                                : jsonrpc_error_new(NULL, JSONRPC_INTERNAL_ERROR, text);
        char state[128];

        if (!reply || (!c->mrtr_ended && !(c->mrtr_ended = cJSON_CreateObject())))
                return;
        if (tool_call &&
            !cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(reply, "result"), "resultType", "complete"))
                return;
        if (cJSON_GetArraySize(c->mrtr_ended) >= (int) MRTR_MAX_ENDED)
                cJSON_DeleteItemFromArray(c->mrtr_ended, 0);
        snprintf(state, sizeof state, MRTR_STATE_PREFIX "%" PRIu64 ".%s", x->serial, x->secret);
        if (cJSON_AddItemToObject(c->mrtr_ended, state, reply))
                reply = NULL;
}

void mrtr_route_gone_internal(Instance *i, Route *r) {
        Mrtr *x = r->mrtr;

        /* The backend's requests that wait for this call's client never will. */
        for (unsigned k = 0; k < x->n_inputs; k++)
                reply_backend_error(i, x->inputs[k].backend_id, "the call this request was part of has ended");
        if (x->parked && r->client)
                note_ended(r->client, x, r->is_tool_call);
        (void) sd_event_source_set_enabled(x->timer, SD_EVENT_OFF);
}

bool mrtr_cancelled(Instance *i, const Message *m) {
        IdField f[4];
        size_t n = ids_fields(m, f, ELEMENTSOF(f)), state = 0;
        const IdField *rid = NULL;
        void *v;

        for (size_t k = 0; k < n && k < ELEMENTSOF(f); k++)
                if (f[k].kind == ID_KIND_CANCELLED)
                        rid = &f[k];
        while (rid && idmap_iterate(&i->routes, &state, NULL, &v)) {
                Mrtr *x = ((Route *) v)->mrtr;
                for (unsigned k = 0; x && k < x->n_inputs; k++) {
                        Input *in = &x->inputs[k];
                        if (strlen(in->backend_id) != rid->len || memcmp(in->backend_id, rid->text, rid->len) != 0)
                                continue;
                        /* Withdrawn: an answer the client may still send for it is dropped. */
                        input_clear(in);
                        x->inputs[k] = x->inputs[--x->n_inputs];
                        x->inputs[x->n_inputs] = (Input){};
                        return true;
                }
        }
        return false;
}
