/* JSON-RPC 2.0 message helpers shared by the frontend and the shim. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "framing.h"
#include "jsonrpc.h"
#include "macros.h"

unsigned json_text_depth(const char *text, size_t len) {
        unsigned depth = 0, max = 0;
        bool in_string = false;

        for (size_t i = 0; i < len; i++) {
                char c = text[i];

                /* cJSON takes any control character for white space; JSON allows four. */
                if (!in_string && (unsigned char) c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r')
                        return UINT_MAX;

                if (in_string) {
                        if (c == '\\')
                                i++;
                        else if (c == '"')
                                in_string = false;
                        continue;
                }
                if (c == '"')
                        in_string = true;
                else if (c == '{' || c == '[') {
                        if (++depth > max)
                                max = depth;
                } else if ((c == '}' || c == ']') && depth > 0)
                        depth--;
        }
        return max;
}

int jsonrpc_parse(const char *text, size_t len, unsigned max_depth, cJSON **ret) {
        const char *end = NULL;
        cJSON *j;

        if (memchr(text, 0, len) || !utf8_is_valid(text, len))
                return -EBADMSG;
        /* cJSON recurses; counting first keeps a hostile line from going deep on our stack. */
        unsigned depth = json_text_depth(text, len);
        if (depth == UINT_MAX)
                return -EBADMSG;
        if (depth > max_depth)
                return -E2BIG;
        j = cJSON_ParseWithLengthOpts(text, len, &end, false);
        if (!j)
                return -EBADMSG;
        for (; end && end < text + len; end++)
                if (!strchr(" \t\r\n", *end)) {
                        cJSON_Delete(j);
                        return -EBADMSG;
                }
        *ret = j;
        return 0;
}

int jsonrpc_id_valid(const cJSON *id) {
        if (cJSON_IsString(id))
                return 1;
        if (cJSON_IsNumber(id)) {
                double d = id->valuedouble;
                /* Below 10^15: every such integer survives cJSON's printing (%1.15g) unchanged. */
                return d == floor(d) && fabs(d) < 1e15;
        }
        return 0;
}

JsonRpcMessage jsonrpc_classify(const cJSON *m) {
        JsonRpcMessage r = {.kind = JSONRPC_INVALID};
        const cJSON *v, *method, *id, *params;

        if (!cJSON_IsObject(m)) {
                r.problem = "a message must be a JSON object";
                return r;
        }
        id = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (id && jsonrpc_id_valid(id))
                r.id = id;
        v = cJSON_GetObjectItemCaseSensitive(m, "jsonrpc");
        if (!cJSON_IsString(v) || !streq(v->valuestring, "2.0")) {
                r.problem = "\"jsonrpc\" must be \"2.0\"";
                return r;
        }
        method = cJSON_GetObjectItemCaseSensitive(m, "method");
        if (method) {
                if (!cJSON_IsString(method)) {
                        r.problem = "\"method\" must be a string";
                        return r;
                }
                params = cJSON_GetObjectItemCaseSensitive(m, "params");
                if (params && !cJSON_IsObject(params) && !cJSON_IsArray(params)) {
                        r.problem = "\"params\" must be an object or an array";
                        return r;
                }
                if (id && !jsonrpc_id_valid(id)) {
                        r.problem = "\"id\" must be a string or an integer";
                        return r;
                }
                r.kind = id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION;
                r.method = method->valuestring;
                r.params = params;
                return r;
        }
        if (cJSON_HasObjectItem(m, "result") != cJSON_HasObjectItem(m, "error") && id) {
                /* A response to a request we never sent is dropped by the caller; the id may even be null. */
                r.kind = JSONRPC_RESPONSE;
                r.id = id;
                return r;
        }
        r.problem = "a message needs \"method\", or \"id\" with exactly one of \"result\" and \"error\"";
        return r;
}

static cJSON *id_copy(const cJSON *id) {
        return id ? cJSON_Duplicate(id, true) : cJSON_CreateNull();
}

/* Adds item to o under key; on failure deletes item and returns false. */
static bool add_item(cJSON *o, const char *key, cJSON *item) {
        if (!item)
                return false;
        if (!cJSON_AddItemToObject(o, key, item)) {
                cJSON_Delete(item);
                return false;
        }
        return true;
}

static cJSON *envelope_new(void) {
        cJSON *m = cJSON_CreateObject();

        if (m && !cJSON_AddStringToObject(m, "jsonrpc", "2.0")) {
                cJSON_Delete(m);
                return NULL;
        }
        return m;
}

/* Adds text under key as it is when it is UTF-8; else with '?' for each byte that starts no character
 * (a text of ours cut a peer's value at a byte count, say): a peer drops a line that is not UTF-8,
 * and the call it answers would wait for ever. */
static bool add_text(cJSON *o, const char *key, const char *text) {
        _cleanup_free_ char *copy = NULL;
        size_t n = strlen(text);

        if (!utf8_is_valid(text, n)) {
                copy = strdup(text);
                if (!copy)
                        return false;
                for (size_t i = 0; i < n;) {
                        unsigned char c = (unsigned char) copy[i];
                        size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
                        if (k <= n - i && utf8_is_valid(copy + i, k))
                                i += k;
                        else
                                copy[i++] = '?';
                }
        }
        return cJSON_AddStringToObject(o, key, copy ?: text);
}

cJSON *jsonrpc_error_new(const cJSON *id, int code, const char *message) {
        _cleanup_json_ cJSON *m = envelope_new();
        cJSON *e;

        if (!m || !add_item(m, "id", id_copy(id)))
                return NULL;
        e = cJSON_AddObjectToObject(m, "error");
        if (!e || !cJSON_AddNumberToObject(e, "code", code) || !add_text(e, "message", message))
                return NULL;
        return TAKE_PTR(m);
}

cJSON *jsonrpc_result_new(const cJSON *id, cJSON *result) {
        _cleanup_json_ cJSON *m = envelope_new();

        if (!m || !add_item(m, "id", id_copy(id))) {
                cJSON_Delete(result);
                return NULL;
        }
        if (!add_item(m, "result", result))
                return NULL;
        return TAKE_PTR(m);
}

cJSON *jsonrpc_request_new(const cJSON *id, const char *method, cJSON *params) {
        _cleanup_json_ cJSON *m = envelope_new();

        if (!m || !add_item(m, "id", id_copy(id)) || !cJSON_AddStringToObject(m, "method", method)) {
                cJSON_Delete(params);
                return NULL;
        }
        if (params && !add_item(m, "params", params))
                return NULL;
        return TAKE_PTR(m);
}

cJSON *jsonrpc_notification_new(const char *method, cJSON *params) {
        _cleanup_json_ cJSON *m = envelope_new();

        if (!m || !cJSON_AddStringToObject(m, "method", method)) {
                cJSON_Delete(params);
                return NULL;
        }
        if (params && !add_item(m, "params", params))
                return NULL;
        return TAKE_PTR(m);
}

cJSON *tool_error_result_new(const char *text) {
        _cleanup_json_ cJSON *r = cJSON_CreateObject();
        cJSON *content, *item;

        if (!r)
                return NULL;
        content = cJSON_AddArrayToObject(r, "content");
        if (!content)
                return NULL;
        item = cJSON_CreateObject();
        if (!item)
                return NULL;
        if (!cJSON_AddItemToArray(content, item)) {
                cJSON_Delete(item);
                return NULL;
        }
        if (!cJSON_AddStringToObject(item, "type", "text") || !add_text(item, "text", text) ||
            !cJSON_AddBoolToObject(r, "isError", true))
                return NULL;
        return TAKE_PTR(r);
}

char *jsonrpc_id_key(const cJSON *id) {
        char *s = NULL;

        if (cJSON_IsString(id)) {
                if (asprintf(&s, "s:%s", id->valuestring) < 0)
                        return NULL;
        } else if (cJSON_IsNumber(id)) {
                if (asprintf(&s, "n:%.0f", id->valuedouble) < 0)
                        return NULL;
        } else
                s = strdup("null");
        return s;
}
