/* A small MCP client over a child's stdio: start a server once, read what it offers, stop it. */
#pragma once

#include <stdint.h>
#include <cjson/cJSON.h>

#define MCP_CLIENT_DEFAULT_TIMEOUT_USEC (60ULL * 1000000ULL)
#define MCP_CLIENT_MAX_PAGES            1000U
#define MCP_CLIENT_MAX_ITEMS            100000U /* per list */
#define MCP_CLIENT_STDERR_LINES         10U

typedef enum McpEra {
        MCP_ERA_AUTO,   /* as a dual-era client: server/discover first, initialize if it is no modern server */
        MCP_ERA_MODERN, /* 2026-07-28 only */
        MCP_ERA_LEGACY, /* initialize only */
} McpEra;

typedef struct McpServerCommand {
        char **argv;     /* NULL-terminated, argv[0] looked up in PATH */
        char **env;      /* "KEY=VALUE" added to our environment, may be NULL */
        const char *cwd; /* NULL: ours */
        McpEra era;
} McpServerCommand;

typedef struct McpDiscovery {
        cJSON *server_info;        /* initialize's serverInfo (an object, maybe empty) */
        char *instructions;        /* NULL if none */
        cJSON *capabilities;       /* the server's capabilities (an object) */
        char *protocol_version;    /* what it negotiated (2026-07-28 for a modern server) */
        const char *era;           /* "modern" or "legacy": what it turned out to speak */
        cJSON *tools;              /* every page of tools/list (an array, maybe empty) */
        cJSON *resources;          /* resources/list, or NULL when not declared */
        cJSON *resource_templates; /* resources/templates/list, or NULL */
        cJSON *prompts;            /* prompts/list, or NULL */
} McpDiscovery;

/* Starts the command in its own process group, speaks MCP to it declaring client_capabilities (in
 * the era cmd->era says: by default it probes with server/discover as a dual-era client does, falls
 * back to initialize after an error or 2 s of silence, and starts a server that exits on the probe
 * once more for initialize), reads initialize (or the DiscoverResult) and every page of each list it declares, then stops it: stdin closed, then
 * SIGTERM, then SIGKILL to the group. On failure returns a negative errno and *ret_error says what
 * happened in a sentence, followed by the last lines the server wrote to stderr (if any).
 * -ENOENT/-EACCES: cannot be executed; -ETIMEDOUT: no answer in time; -EPROTO: it exited, crashed
 * or said something that is not MCP. */
int mcp_discover(const McpServerCommand *cmd, const cJSON *client_capabilities, uint64_t timeout_usec,
                 McpDiscovery **ret, char **ret_error);
McpDiscovery *mcp_discovery_free(McpDiscovery *d);
static inline void mcp_discovery_freep(McpDiscovery **d) {
        mcp_discovery_free(*d);
}
