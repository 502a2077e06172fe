/* Peeking at a cut-off JSON-RPC message: find its top-level "id" without parsing (or holding) the rest. */
#include <stdbool.h>
#include <string.h>

#include "jsonrpc.h"
#include "macros.h"
#include "message.h"
#include "peek.h"

static size_t skip_ws(const char *s, size_t n, size_t i) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
                i++;
        return i;
}

/* s[i] is '"': returns the index after the closing quote, or n when the string is cut off. */
static size_t skip_string(const char *s, size_t n, size_t i) {
        for (i++; i < n; i++) {
                if (s[i] == '\\')
                        i++;
                else if (s[i] == '"')
                        return i + 1;
        }
        return n;
}

/* Returns the index after the value starting at s[i], or n when it is cut off. */
static size_t skip_value(const char *s, size_t n, size_t i) {
        size_t depth = 0;

        if (i >= n)
                return n;
        if (s[i] == '"')
                return skip_string(s, n, i);
        if (s[i] != '{' && s[i] != '[') {
                while (i < n && !strchr(",}] \t\r\n", s[i]))
                        i++;
                return i;
        }
        for (; i < n; i++) {
                if (s[i] == '"') {
                        i = skip_string(s, n, i);
                        if (i >= n)
                                return n;
                        i--;
                } else if (s[i] == '{' || s[i] == '[')
                        depth++;
                else if ((s[i] == '}' || s[i] == ']') && --depth == 0)
                        return i + 1;
        }
        return n;
}

/* Whether the JSON string token s (quotes included) decodes to one with a NUL in it. */
static bool token_has_nul(const char *s, size_t n) {
        for (size_t i = 1; i + 1 < n; i++)
                if (s[i] == '\\') {
                        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0)
                                return true;
                        i++;
                }
        return false;
}

/* Whether the JSON string token s (quotes included) spells name, escapes decoded: all of it, as the
 * next hop reads it ("id\u0000x" is not "id", though cJSON's string ends at the NUL). */
static bool key_is(const char *s, size_t n, const char *name, size_t name_len) {
        cJSON *k;
        bool r;

        if (!memchr(s, '\\', n))
                return n == name_len + 2 && memcmp(s + 1, name, name_len) == 0;
        if (token_has_nul(s, n))
                return false;
        k = cJSON_ParseWithLength(s, n);
        r = cJSON_IsString(k) && strlen(k->valuestring) == name_len && memcmp(k->valuestring, name, name_len) == 0;
        cJSON_Delete(k);
        return r;
}

/* The span of the member's value: true when found complete and once. */
static bool peek_member_span(const char *s, size_t n, const char *name, size_t *ret_start, size_t *ret_end) {
        size_t i = skip_ws(s, n, 0), id_start = 0, id_end = 0, name_len = strlen(name);
        bool found = false;

        if (i >= n || s[i] != '{')
                return false;
        for (i = skip_ws(s, n, i + 1); i < n && s[i] == '"';) {
                size_t key = i, key_end = skip_string(s, n, i), v, v_end;

                i = skip_ws(s, n, key_end);
                if (key_end >= n || i >= n || s[i] != ':')
                        break;
                v = skip_ws(s, n, i + 1);
                v_end = skip_value(s, n, v);
                /* A value that runs to the end of what we have may be cut off. */
                if (v_end >= n)
                        break;
                if (key_is(s + key, key_end - key, name, name_len)) {
                        if (found)
                                return false; /* twice: neither can be trusted */
                        found = true;
                        id_start = v;
                        id_end = v_end;
                }
                i = skip_ws(s, n, v_end);
                if (i >= n || s[i] != ',')
                        break;
                i = skip_ws(s, n, i + 1);
        }
        if (!found)
                return false;
        *ret_start = id_start;
        *ret_end = id_end;
        return true;
}

bool json_peek_has_key(const char *s, size_t n, const char *name) {
        size_t i = skip_ws(s, n, 0), name_len = strlen(name);

        if (i >= n || s[i] != '{')
                return false;
        for (i = skip_ws(s, n, i + 1); i < n && s[i] == '"';) {
                size_t key = i, key_end = skip_string(s, n, i);

                i = skip_ws(s, n, key_end);
                if (key_end >= n || i >= n || s[i] != ':')
                        break;
                if (key_is(s + key, key_end - key, name, name_len))
                        return true;
                i = skip_ws(s, n, skip_value(s, n, skip_ws(s, n, i + 1)));
                if (i >= n || s[i] != ',')
                        break;
                i = skip_ws(s, n, i + 1);
        }
        return false;
}

cJSON *json_peek_member(const char *s, size_t n, const char *name) {
        size_t a, b;

        if (!peek_member_span(s, n, name, &a, &b))
                return NULL;
        return cJSON_ParseWithLength(s + a, b - a);
}

cJSON *jsonrpc_peek_id_raw(const char *s, size_t n) {
        _cleanup_message_ Message *id = NULL;
        size_t a, b;

        /* An id past the limit is none of ours and is not echoed, as for a message read whole. */
        if (!peek_member_span(s, n, "id", &a, &b) || b - a > MESSAGE_MAX_ID_BYTES)
                return NULL;
        /* Its text goes into a reply as it is: strict JSON only (cJSON alone takes 01, 1., raw
         * control characters and bytes that are not UTF-8). */
        if (message_parse(s + a, b - a, 0, &id) < 0 || !json_id_valid(id->json, id->text, id->len))
                return NULL;
        return cJSON_CreateRaw(id->text);
}

cJSON *jsonrpc_peek_id(const char *s, size_t n) {
        cJSON *id = json_peek_member(s, n, "id");

        if (id && !jsonrpc_id_valid(id))
                id = (cJSON_Delete(id), NULL);
        return id;
}

cJSON *jsonrpc_peek_answer_id(const char *s, size_t n) {
        _cleanup_json_ cJSON *raw = NULL;

        if (json_peek_has_key(s, n, "method") || !(raw = jsonrpc_peek_id_raw(s, n)) ||
            strstr(raw->valuestring, "\\u0000"))
                return NULL;
        return jsonrpc_peek_id(s, n);
}
