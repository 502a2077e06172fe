/* MCP client configuration files: where each client keeps them, reading their server entries, and
 * rewriting chosen entries with every other byte kept. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>

typedef struct ClientConfig ClientConfig;

typedef struct ServerEntry {
        ClientConfig *config;
        char *name;                    /* the server's name in the config */
        char *where;                   /* "mcpServers", "projects[\"/src/app\"].mcpServers", "servers" */
        char *default_cwd;             /* where the client runs it when the entry says nothing (a project), or NULL */
        const cJSON *json;             /* the entry (points into config->root) */
        size_t value_start, value_end; /* the entry's value: config->text[value_start, value_end) */
        size_t line_start;             /* start of the line of the entry's key */
        char *replacement;             /* set by client_config_replace_entry() */
} ServerEntry;

struct ClientConfig {
        const char *client; /* "claude-code", "claude-desktop", "vscode", "cursor" */
        char *path;
        char *text;
        char *scan; /* text with JSONC comments and trailing commas blanked (same offsets) */
        size_t len;
        struct stat st;
        cJSON *root;
        ServerEntry *entries;
        size_t n_entries;
        /* A project's .mcp.json found in the current directory: Claude Code runs its servers only once
         * approved, and so does import (projects.<dir> of ~/.claude.json, as Claude Code keeps it). */
        bool needs_approval;
        cJSON *approvals; /* that projects.<dir> object, or NULL: none approved */
};

typedef struct ClientInfo {
        const char *name;         /* for --client */
        const char *title;        /* for messages */
        const char *capabilities; /* JSON: what this client declares in initialize today (README has the sources) */
} ClientInfo;

extern const ClientInfo client_table[];
const ClientInfo *client_info_find(const char *name);

/* The config files of a client (NULL: of every client) that exist for this user, in the order they
 * are read. */
int client_config_paths(const char *client, char ***ret_paths, char ***ret_clients);
/* A server of a config that needs approval: whether Claude Code approved it for its project. */
bool server_entry_approved(const ServerEntry *e);
/* For a project's ./.mcp.json: reads what Claude Code approved of it from ~/.claude.json. */
int client_config_load_approvals(ClientConfig *c);
/* Reads and checks one config; client may be NULL to guess it from the file's name and shape.
 * A file that does not parse: -EINVAL and *ret_error "FILE:LINE:COLUMN: what is wrong". */
int client_config_load(const char *path, const char *client, ClientConfig **ret, char **ret_error);
/* The same on text in memory (path names it in messages and places its projects). */
int client_config_load_string(const char *text, size_t len, const char *path, const char *client, ClientConfig **ret,
                              char **ret_error);
ClientConfig *client_config_free(ClientConfig *c);
static inline void client_config_freep(ClientConfig **c) {
        client_config_free(*c);
}
/* A remote server (url, or a type other than stdio). */
bool server_entry_is_remote(const ServerEntry *e);
/* An entry that already runs mcp-lazy. */
bool server_entry_is_mcp_lazy(const ServerEntry *e);
/* What a stdio entry runs: argv (argv[0] resolved in PATH), env ("KEY=VALUE") and cwd (absolute, or
 * the project's directory, or NULL). Returns NULL, or why import cannot run it as the client would. */
const char *server_entry_command(const ServerEntry *e, char ***ret_argv, char ***ret_env, char **ret_cwd);
/* Makes entry's replacement {"command": command, "args": args...} (other keys but command, args,
 * env and cwd kept), laid out like the entry it replaces. */
int client_config_replace_entry(ServerEntry *e, const char *command, char *const *args);
/* The file's text with every replacement made. */
int client_config_render(const ClientConfig *c, char **ret, size_t *ret_len);
/* The byte offset -> "LINE:COLUMN" of text. */
void text_position(const char *text, size_t len, size_t offset, unsigned *ret_line, unsigned *ret_column);
