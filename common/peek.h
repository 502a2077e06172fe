/* The id of a message that cannot be taken whole (past the line limit), read from its beginning. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

/* text is the start of a JSON object, possibly cut off. Returns the value of its top-level member
 * name, parsed, when it lies complete within text and appears there once; NULL otherwise. */
cJSON *json_peek_member(const char *text, size_t len, const char *name);
/* Whether a top-level member name shows in text (its value may be cut off, or repeated): a line with a
 * "method" is a request or a notification, never an answer, whatever else it holds. */
bool json_peek_has_key(const char *text, size_t len, const char *name);
/* text is the start of a JSON object, possibly cut off. Returns its top-level "id" member (a string or
 * a number, parsed) when that member lies complete within text and appears there once; NULL otherwise
 * (no id, a cut-off or repeated id, not an object, or out of memory). The caller deletes it. */
cJSON *jsonrpc_peek_id(const char *text, size_t len);
/* The same id as a raw item of its exact text (valuestring), as replies carry it and maps key it. */
cJSON *jsonrpc_peek_id_raw(const char *text, size_t len);
/* The id (parsed, as jsonrpc_peek_id()) of a line that may answer one of our requests: NULL when it
 * shows a "method" (a request or a notification, never an answer), no single whole id, or an id whose
 * text holds an escaped NUL ("...:3\u0000x" is none of ours). The caller deletes it. */
cJSON *jsonrpc_peek_answer_id(const char *text, size_t len);
