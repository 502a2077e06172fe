/* What differs between MCP's handshake era (up to 2025-11-25) and the 2026-07-28 era on the wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

typedef struct Message Message;

#define ERA_MODERN_VERSION       "2026-07-28"
#define ERA_NEWEST_LEGACY        "2025-11-25"
#define META_PROTOCOL_VERSION    "io.modelcontextprotocol/protocolVersion"
#define META_CLIENT_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT_INFO         "io.modelcontextprotocol/clientInfo"
#define META_LOG_LEVEL           "io.modelcontextprotocol/logLevel"
#define META_SERVER_INFO         "io.modelcontextprotocol/serverInfo"
#define META_SUBSCRIPTION_ID     "io.modelcontextprotocol/subscriptionId"
/* The era of its client that mcp-lazy's frontend states in the initialize it sends a shim: in
 * params._meta, ERA_MODERN_VERSION or ERA_HANDSHAKE; a shim takes it out before anything else reads
 * the params (it never reaches a backend). */
#define META_CLIENT_ERA "mcp-lazy/clientEra"
#define ERA_HANDSHAKE   "handshake"

#define MCP_MISSING_CLIENT_CAPABILITY -32021
#define MCP_UNSUPPORTED_VERSION       -32022

/* The handshake-era versions, oldest first (served through initialize). */
extern const char *const era_legacy_versions[];
extern const unsigned era_n_legacy_versions;

/* The per-request _meta envelope of a 2026-07-28 request; pointers into the request. */
typedef struct Envelope {
        const char *version;
        const cJSON *capabilities; /* an object */
        const cJSON *client_info;  /* an object, or NULL */
        const char *log_level;     /* or NULL */
} Envelope;

/* 0: the request carries no envelope (a handshake-era request); 1: a valid envelope in *ret;
 * -EINVAL: a malformed one (*ret_problem says what is wrong); -EPROTONOSUPPORT: a version this
 * side does not speak (ret->version names it). */
int era_envelope_parse(const cJSON *params, Envelope *ret, const char **ret_problem);
/* -32022 with data.supported / data.requested. */
cJSON *era_unsupported_version_new(const cJSON *id, const char *requested);
/* -32021 with data.requiredCapabilities (takes required). */
cJSON *era_missing_capability_new(const cJSON *id, const char *text, cJSON *required);
/* What server/discover and -32022 list: the versions a request's envelope may name (2026-07-28). */
cJSON *era_supported_versions_new(void);
/* What answering an input request (elicitation/create, sampling/createMessage, roots/list, with its
 * params) needs of a client's capabilities: added to missing as -32021's requiredCapabilities say it
 * (an elicitation mode, sampling.tools for tool use). -ENOMEM only. */
int era_input_missing(const char *method, const cJSON *params, const cJSON *caps, cJSON *missing);
/* The kinds of input request there are (elicitation/create, sampling/createMessage, roots/list): any
 * other is refused, by the shim's bridge and the frontend alike. */
bool era_input_method_known(const char *method);
/* A log level's rank (debug 0 ... emergency 7), -EINVAL for an unknown one. */
int era_log_level_rank(const char *level);
/* Methods the 2026-07-28 era removed. */
bool era_method_removed(const char *method);
/* resultType "complete", ttlMs and cacheScope on a cacheable result; serverInfo in its _meta. */
int era_result_complete(cJSON *result, uint64_t ttl_ms, bool public, const cJSON *server_info);
/* initialize params speaking for a modern client to a handshake-era server. */
cJSON *era_initialize_params_new(const Envelope *e);
/* Puts META_CLIENT_ERA into initialize params (replacing any the client put there). -ENOMEM only. */
int era_client_era_put(cJSON *params, bool modern);
/* Takes META_CLIENT_ERA out of initialize params: 1 and *ret_modern when it is there, 0 when it is
 * not (*ret_modern false: a peer that does not say is a handshake-era client), -EINVAL when it is not
 * one of the two names (*ret_problem says so; params unchanged). */
int era_client_era_take(cJSON *params, bool *ret_modern, const char **ret_problem);
/* {"name": "mcp-lazy", "version": ...}: the clientInfo of an initialize mcp-lazy sends for a client
 * that gave none. */
cJSON *era_client_info_new(void);
/* The resource URIs of a subscriptions/listen (or of its acknowledgement) at path in m, each whole, as a
 * new array of strings; tree is the array at path in m's tree. A URI that decodes with a NUL (the tree
 * has it cut there, where it reads as another URI) is left out and counted in *ret_n_nul; so is
 * nothing else (anything not a string is left out). NULL when out of memory. */
cJSON *era_resource_uris_new(const Message *m, const char *const *path, const cJSON *tree, size_t *ret_n_nul);
