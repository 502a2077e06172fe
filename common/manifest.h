/* The manifest: backends to run and the tools they serve, read from YAML (or JSON) and checked. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>

#define MANIFEST_MAX_SIZE                  (64U * 1024U * 1024U)
#define MANIFEST_DEFAULT_IDLE_TIMEOUT_USEC (5ULL * 60ULL * 1000000ULL)
#define MANIFEST_DEFAULT_INIT_TIMEOUT_USEC (120ULL * 1000000ULL) /* a cold npx fetches a package first */
#define MANIFEST_DEFAULT_INPUT_TIMEOUT_USEC (600ULL * 1000000ULL) /* a person fills in a form */
#define BACKEND_NAME_MAX                   64U
#define MANIFEST_DEFAULT_MAX_SESSIONS      4096U /* connections one shim serves at once */
#define MANIFEST_MAX_MAX_SESSIONS          65536U

typedef enum Sharing {
        SHARING_POOLED,
        SHARING_SESSION,
} Sharing;

/* Where a backend runs: here (its command), or on another host reached through ssh or vsock. */
typedef enum RemoteKind {
        REMOTE_NONE,
        REMOTE_SSH,   /* host: ssh://[user@]HOST[:PORT] */
        REMOTE_VSOCK, /* host: vsock:CID:PORT */
} RemoteKind;

typedef struct Remote {
        RemoteKind kind;
        char *host;        /* the manifest's text, for messages */
        char *ssh_user;    /* or NULL: ssh's own choice */
        char *ssh_host;    /* a host name or address (without brackets) */
        unsigned port;     /* ssh: 0 for ssh's own choice; vsock: the port */
        unsigned cid;      /* vsock */
        char *remote_name; /* the backend's name there (default: the same name) */
} Remote;

typedef enum Lifecycle {
        LIFECYCLE_LAZY,     /* started by the first call, stopped after idle_timeout */
        LIFECYCLE_WARM,     /* started with the shim, stopped after idle_timeout */
        LIFECYCLE_RESIDENT, /* started with the shim, never idle, restarted after a crash */
} Lifecycle;

/* Which era of MCP the shim speaks to a backend: found out (server/discover, else initialize), or pinned. */
typedef enum Protocol {
        PROTOCOL_AUTO,
        PROTOCOL_MODERN, /* 2026-07-28: no handshake, the envelope on every request */
        PROTOCOL_LEGACY, /* initialize first */
} Protocol;

typedef struct Backend {
        char *name;
        char **command;             /* argv, NULL-terminated, never empty; NULL for a remote backend */
        char **env;                 /* "KEY=VALUE", NULL-terminated, may be NULL */
        char **secret_env;          /* names its unit sets from the backend's secrets file, or NULL */
        char *cwd;                  /* absolute, or NULL */
        char *socket;               /* absolute socket path, or NULL for the default */
        uint64_t idle_timeout_usec; /* UINT64_MAX: never */
        uint64_t init_timeout_usec; /* UINT64_MAX: never */
        uint64_t input_timeout_usec; /* a 2026-07-28 client's retry after input_required; UINT64_MAX: never */
        Sharing sharing;
        Lifecycle lifecycle;
        unsigned max_sessions; /* connections served at once; more get a clear refusal */
        Protocol protocol;
        size_t n_tools;
        cJSON *resources;          /* resources/list entries, or NULL */
        cJSON *resource_templates; /* resources/templates/list entries, or NULL */
        cJSON *prompts;            /* prompts/list entries, or NULL */
        /* The backend's own initialize answer, for `mcp-lazy --backend NAME`; each NULL if not recorded. */
        cJSON *server_info;  /* serverInfo, every field it had */
        char *instructions;  /* instructions */
        cJSON *capabilities; /* capabilities as the backend declared them */
        Remote remote;       /* kind REMOTE_NONE: a local backend */
} Backend;

typedef struct Tool {
        const char *name; /* points into json */
        size_t backend;   /* index into Manifest.backends */
        cJSON *json;      /* the tools/list entry, MCP spelling */
} Tool;

typedef struct Manifest {
        char *path;
        Backend *backends;
        size_t n_backends;
        Tool *tools;
        size_t n_tools;
        cJSON *server_info;    /* initialize's serverInfo */
        char *instructions;    /* NULL if none */
        size_t page_size;      /* tools per tools/list page; 0: all in one */
        cJSON *capabilities;   /* initialize's capabilities as recorded (one backend's), or NULL: derived */
        uint64_t cache_ttl_ms; /* ttlMs of lists answered to 2026-07-28 requests */
        bool cache_private;    /* cacheScope "private" instead of "public" */
        /* Whether any backend declares these: decided once at load, for initialize and routing. */
        bool has_resources, has_resource_templates, has_prompts;
} Manifest;

/* On a manifest mistake: -EINVAL and *ret_error holds every problem found, one per line, each as
 * "FILE:LINE:COLUMN: sentence". Other negative errnos are I/O or OOM (with *ret_error saying which file). */
int manifest_load_file(const char *path, Manifest **ret, char **ret_error);
/* The same for a shim: backend and its tools, and no other backend when the cache had the file
 * (read faster: the rest of the tree is never decoded). */
int manifest_load_file_backend(const char *path, const char *backend, Manifest **ret, char **ret_error);
/* The same, also saying which version of the file was read (*ret_st, from the descriptor read), and
 * leaving its tree in the manifest cache (a JSON manifest's too) for manifest_load_cached(). */
int manifest_load_file_stat(const char *path, Manifest **ret, struct stat *ret_st, char **ret_error);
/* The manifest at path as it was when stat'ed as *st, from the manifest cache only: -ENOENT when
 * the cache holds no valid tree of that version. */
int manifest_load_cached(const char *path, const struct stat *st, Manifest **ret);
/* 'name' is used in messages, 'dir' to resolve a relative cwd. */
int manifest_load_string(const char *text, size_t len, const char *name, const char *dir, Manifest **ret,
                         char **ret_error);
Manifest *manifest_free(Manifest *m);
/* Keeps only the named backend and its tools, resources and prompts, and takes on its recorded
 * initialize answer (server_info with its instructions, capabilities) where it has one: what
 * `mcp-lazy --backend NAME` serves. -ENOENT if there is no such backend. */
int manifest_restrict(Manifest *m, const char *backend);
/* One of a backend's declared lists by its offsetof(Backend, resources / resource_templates / prompts). */
static inline const cJSON *backend_list(const Backend *b, size_t offset) {
        return *(cJSON *const *) ((const char *) b + offset);
}

static inline void manifest_freep(Manifest **m) {
        /* Not a call for NULL: a start from prepared answers has no manifest, and its code stays cold. */
        if (*m)
                manifest_free(*m);
}
const Backend *manifest_find_backend(const Manifest *m, const char *name);
/* Whether backend b runs otherwise than a (its command, env, secret_env, cwd, host, protocol, sharing,
 * lifecycle, max_sessions or a timeout differ; not its socket, which the frontend connects to, nor its
 * declared lists): 1, and *ret_what (if not NULL) names each part that differs, "command, env TOKEN"
 * (names, never a value); 0 if none; -ENOMEM. */
int backend_definition_diff(const Backend *a, const Backend *b, char **ret_what);
const Tool *manifest_find_tool(const Manifest *m, const char *name);
/* The backend serving a resource URI (exact, else by the longest template prefix), or a prompt. */
const Backend *manifest_find_resource_backend(const Manifest *m, const char *uri);
const Backend *manifest_find_prompt_backend(const Manifest *m, const char *name);
bool tool_name_valid(const char *s);
bool backend_name_valid(const char *s);
/* Parses "ssh://[user@]HOST[:PORT]" or "vsock:CID:PORT" into r (its strings allocated); -EINVAL
 * with *ret_why saying what is wrong (a static string). */
int remote_parse(const char *text, Remote *r, const char **ret_why);
void remote_done(Remote *r);
const char *lifecycle_to_string(Lifecycle l);
