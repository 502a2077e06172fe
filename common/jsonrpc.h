/* JSON-RPC 2.0 messages: parsing with limits, classifying, and building replies. */
#pragma once

#include <stddef.h>
#include <cjson/cJSON.h>

#define JSONRPC_PARSE_ERROR      -32700
#define JSONRPC_INVALID_REQUEST  -32600
#define JSONRPC_METHOD_NOT_FOUND -32601
#define JSONRPC_INVALID_PARAMS   -32602
#define JSONRPC_INTERNAL_ERROR   -32603

#define JSONRPC_DEFAULT_MAX_DEPTH 128U

typedef enum JsonRpcKind {
        JSONRPC_REQUEST,
        JSONRPC_NOTIFICATION,
        JSONRPC_RESPONSE,
        JSONRPC_INVALID,
} JsonRpcKind;

typedef struct JsonRpcMessage {
        JsonRpcKind kind;
        const char *method;  /* requests and notifications */
        const cJSON *id;     /* requests and responses; for INVALID, the id if one could be read */
        const cJSON *params; /* NULL when absent */
        const char *problem; /* INVALID: why, as a sentence fragment for the error message */
} JsonRpcMessage;

/* -EBADMSG: not JSON, not UTF-8, or trailing bytes; -E2BIG: nested deeper than max_depth. */
int jsonrpc_parse(const char *text, size_t len, unsigned max_depth, cJSON **ret);
/* Nesting depth of JSON text, counted without parsing (strings skipped); UINT_MAX if a control
 * character stands outside a string, which JSON forbids and cJSON would let through. */
unsigned json_text_depth(const char *text, size_t len);
JsonRpcMessage jsonrpc_classify(const cJSON *m);
/* MCP ids are strings or integers; numbers are kept only where a double holds them exactly. */
int jsonrpc_id_valid(const cJSON *id);

/* Builders return NULL only on OOM. 'id' is copied; NULL id means JSON null. */
cJSON *jsonrpc_error_new(const cJSON *id, int code, const char *message);
cJSON *jsonrpc_result_new(const cJSON *id, cJSON *result);                      /* takes result, also on failure */
cJSON *jsonrpc_request_new(const cJSON *id, const char *method, cJSON *params); /* takes params */
cJSON *jsonrpc_notification_new(const char *method, cJSON *params);             /* takes params */
/* A CallToolResult with isError and one text item: how a model learns a tool failed. */
cJSON *tool_error_result_new(const char *text);
/* Printed form of an id, usable as a map key ("s:abc" / "n:42"); the caller frees it. */
char *jsonrpc_id_key(const cJSON *id);
