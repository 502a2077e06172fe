/* Fuzz target: one line from a peer through jsonrpc_parse() and jsonrpc_classify(), answered the way the
 * frontend and the shim answer it. Every reply must itself parse back as a response carrying the same id,
 * and an id must keep its map key through the print/parse trip a request makes to a backend and back. */
#include <errno.h>
#include <string.h>

#include "framing.h"
#include "fuzz.h"
#include "jsonrpc.h"
#include "macros.h"

#define MAX_BATCH 64

static unsigned tree_depth(const cJSON *j) {
        unsigned max = 0;
        const cJSON *c;

        if (!cJSON_IsArray(j) && !cJSON_IsObject(j))
                return 0;
        cJSON_ArrayForEach (c, j) {
                unsigned d = tree_depth(c);
                if (d > max)
                        max = d;
        }
        return max + 1;
}

/* A message we would send: printable, parses with our own limits, and is what it claims to be. */
static cJSON *reparse(const cJSON *m) {
        _cleanup_free_ char *s = cJSON_PrintUnformatted(m);
        cJSON *back = NULL;

        FUZZ_ASSERT(s);
        FUZZ_ASSERT(!strchr(s, '\n')); /* one message, one line */
        FUZZ_ASSERT(jsonrpc_parse(s, strlen(s), JSONRPC_DEFAULT_MAX_DEPTH, &back) == 0);
        return back;
}

static void check_response(const cJSON *reply, const cJSON *id) {
        _cleanup_json_ cJSON *back = reparse(reply);
        JsonRpcMessage m = jsonrpc_classify(back);

        FUZZ_ASSERT(m.kind == JSONRPC_RESPONSE);
        if (id)
                FUZZ_ASSERT(cJSON_Compare(m.id, id, true));
        else
                FUZZ_ASSERT(cJSON_IsNull(m.id));
}

static void check_error_reply(const cJSON *id, int code, const char *text) {
        _cleanup_json_ cJSON *e = jsonrpc_error_new(id, code, text);

        FUZZ_ASSERT(e);
        check_response(e, id);
}

/* The shim's trip: the request goes out under a number of ours; the answer comes back, gets the client's
 * id again and is printed; the frontend parses that and looks its pending request up by key. */
static void check_id_round_trip(const cJSON *msg, const JsonRpcMessage *m) {
        _cleanup_json_ cJSON *copy = cJSON_Duplicate(msg, true), *out = NULL, *answer = NULL, *back = NULL;
        _cleanup_free_ char *key = jsonrpc_id_key(m->id), *key_back = NULL;
        JsonRpcMessage mo, mb;

        FUZZ_ASSERT(copy && key);
        FUZZ_ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(copy, "id", cJSON_CreateNumber(42)));
        out = reparse(copy);
        mo = jsonrpc_classify(out);
        FUZZ_ASSERT(mo.kind == JSONRPC_REQUEST && streq(mo.method, m->method));
        FUZZ_ASSERT(cJSON_IsNumber(mo.id) && mo.id->valuedouble == 42);

        answer = jsonrpc_result_new(mo.id, cJSON_CreateObject());
        FUZZ_ASSERT(answer);
        FUZZ_ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(answer, "id", cJSON_Duplicate(m->id, true)));
        back = reparse(answer);
        mb = jsonrpc_classify(back);
        FUZZ_ASSERT(mb.kind == JSONRPC_RESPONSE);
        key_back = jsonrpc_id_key(mb.id);
        FUZZ_ASSERT(key_back);
        if (!streq(key, key_back)) {
                fprintf(stderr, "id key changed on the way: '%s' -> '%s'\n", key, key_back);
                FUZZ_ASSERT(streq(key, key_back));
        }
}

static void handle_message(const cJSON *msg) {
        JsonRpcMessage m = jsonrpc_classify(msg);
        _cleanup_json_ cJSON *r = NULL;
        _cleanup_free_ char *key = NULL;

        switch (m.kind) {
        case JSONRPC_REQUEST:
                FUZZ_ASSERT(m.method && m.id && jsonrpc_id_valid(m.id) && !m.problem);
                FUZZ_ASSERT(!m.params || cJSON_IsObject(m.params) || cJSON_IsArray(m.params));
                check_error_reply(m.id, JSONRPC_METHOD_NOT_FOUND, m.method);
                /* session_fail() of a tools/call: a result with a tool error. */
                r = jsonrpc_result_new(m.id, tool_error_result_new(m.method));
                FUZZ_ASSERT(r);
                check_response(r, m.id);
                check_id_round_trip(msg, &m);
                break;
        case JSONRPC_NOTIFICATION:
                FUZZ_ASSERT(m.method && !m.id && !m.problem);
                FUZZ_ASSERT(!m.params || cJSON_IsObject(m.params) || cJSON_IsArray(m.params));
                r = jsonrpc_notification_new(m.method, m.params ? cJSON_Duplicate(m.params, true) : NULL);
                FUZZ_ASSERT(r);
                {
                        _cleanup_json_ cJSON *back = reparse(r);
                        FUZZ_ASSERT(jsonrpc_classify(back).kind == JSONRPC_NOTIFICATION);
                }
                break;
        case JSONRPC_RESPONSE:
                FUZZ_ASSERT(m.id && !m.problem);
                key = jsonrpc_id_key(m.id);
                FUZZ_ASSERT(key);
                break;
        case JSONRPC_INVALID:
                FUZZ_ASSERT(m.problem && !m.method);
                FUZZ_ASSERT(!m.id || jsonrpc_id_valid(m.id));
                check_error_reply(m.id, JSONRPC_INVALID_REQUEST, m.problem);
                break;
        default:
                FUZZ_ASSERT(!"unknown message kind");
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_json_ cJSON *msg = NULL;
        const char *text = (const char *) data;
        int r;

        if (size > 1024 * 1024)
                return 0;
        r = jsonrpc_parse(text, size, JSONRPC_DEFAULT_MAX_DEPTH, &msg);
        if (r == -E2BIG) {
                FUZZ_ASSERT(json_text_depth(text, size) > JSONRPC_DEFAULT_MAX_DEPTH);
                check_error_reply(NULL, JSONRPC_INVALID_REQUEST, "nested too deeply");
                return 0;
        }
        if (r < 0) {
                FUZZ_ASSERT(r == -EBADMSG);
                check_error_reply(NULL, JSONRPC_PARSE_ERROR, "Parse error");
                return 0;
        }
        FUZZ_ASSERT(r == 0 && msg);
        FUZZ_ASSERT(!memchr(text, 0, size) && utf8_is_valid(text, size));
        /* The depth counted before parsing must never be less than what cJSON then built. */
        FUZZ_ASSERT(tree_depth(msg) <= json_text_depth(text, size));
        FUZZ_ASSERT(json_text_depth(text, size) <= JSONRPC_DEFAULT_MAX_DEPTH);
        {
                _cleanup_json_ cJSON *back = reparse(msg);
                (void) back;
        }

        if (cJSON_IsArray(msg)) {
                const cJSON *item;
                unsigned n = 0;

                cJSON_ArrayForEach (item, msg) {
                        if (++n > MAX_BATCH)
                                break;
                        handle_message(item);
                }
        } else
                handle_message(msg);
        return 0;
}
