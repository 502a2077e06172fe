/* The manifest reader: YAML tree -> Manifest, with every mistake reported at its line and column. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "duration.h"
#include "macros.h"
#include "manifest-internal.h"
#include "manifest.h"
#include "yaml_tree.h"

#define MAX_ERRORS 20U

#ifndef MCP_LAZY_VERSION
#define MCP_LAZY_VERSION "0"
#endif

typedef struct Loader {
        const char *file;
        const char *dir;
        char *errors;
        size_t errors_len;
        unsigned n_errors;
        Manifest *m;
        int oom;
} Loader;

static int loader_error_append(Loader *l, const char *msg) {
        char *line = NULL, *p;

        if (++l->n_errors > MAX_ERRORS)
                return -EINVAL;
        if (asprintf(&line, "%s%s:%s", l->errors ? "\n" : "", l->file, msg) < 0) {
                l->oom = 1;
                return -ENOMEM;
        }
        p = realloc(l->errors, l->errors_len + strlen(line) + 1);
        if (!p) {
                free(line);
                l->oom = 1;
                return -ENOMEM;
        }
        strcpy(p + l->errors_len, line);
        l->errors = p;
        l->errors_len += strlen(line);
        free(line);
        return -EINVAL;
}

_printf_(3, 4) static int loader_error(Loader *l, const YNode *at, const char *fmt, ...) {
        _cleanup_free_ char *msg = NULL, *full = NULL;
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&msg, fmt, ap);
        va_end(ap);
        if (k < 0 || asprintf(&full, "%u:%u: %s", at ? at->line : 1, at ? at->column : 1, msg) < 0) {
                l->oom = 1;
                return -ENOMEM;
        }
        return loader_error_append(l, full);
}

static unsigned edit_distance(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b);
        unsigned row[64];

        if (la >= 63 || lb >= 63)
                return UINT_MAX;
        for (size_t j = 0; j <= lb; j++)
                row[j] = (unsigned) j;
        for (size_t i = 1; i <= la; i++) {
                unsigned prev = row[0];
                row[0] = (unsigned) i;
                for (size_t j = 1; j <= lb; j++) {
                        unsigned cur = row[j];
                        unsigned best = prev + (a[i - 1] != b[j - 1]);
                        if (row[j] + 1 < best)
                                best = row[j] + 1;
                        if (row[j - 1] + 1 < best)
                                best = row[j - 1] + 1;
                        row[j] = best;
                        prev = cur;
                }
        }
        return row[lb];
}

static const char *const top_keys[] = {"server", "backends", "tools", NULL};

/* Every key of map must be in known[]; an unknown one is reported with the closest known key. */
static void check_keys(Loader *l, const YNode *map, const char *const *known, const char *where) {
        for (size_t i = 0; i < map->n_items; i += 2) {
                const YNode *k = map->items[i];
                const char *best = NULL;
                unsigned best_d = 3;
                bool ok = false;

                for (const char *const *c = known; *c && !ok; c++)
                        ok = streq(k->value, *c);
                /* x-anything at the top: a place for anchors (&defaults) that is no setting itself. */
                ok = ok || (known == top_keys && strncmp(k->value, "x-", 2) == 0);
                if (ok)
                        continue;
                /* Only a key we do not know pays for the suggestion. */
                for (const char *const *c = known; *c; c++) {
                        unsigned d = edit_distance(k->value, *c);
                        if (d < best_d)
                                best_d = d, best = *c;
                }
                if (best)
                        loader_error(l, k, "unknown key '%s' in %s; did you mean '%s'?", k->value, where, best);
                else
                        loader_error(l, k, "unknown key '%s' in %s", k->value, where);
        }
}

static bool expect_kind(Loader *l, const YNode *n, YNodeKind kind, const char *what) {
        if (n->kind == kind)
                return true;
        loader_error(l, n, "%s must be %s, not %s", what, ynode_kind_name(kind), ynode_kind_name(n->kind));
        return false;
}

bool tool_name_valid(const char *s) {
        size_t n = strlen(s);
        return n >= 1 && n <= 128 &&
               strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

bool backend_name_valid(const char *s) {
        size_t n = strlen(s);
        /* It becomes a unit instance and a socket file name: keep it to what both take verbatim. */
        return n >= 1 && n <= BACKEND_NAME_MAX && s[0] != '.' && s[0] != '-' &&
               strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

static int strv_from_seq(Loader *l, const YNode *seq, const char *what, char ***ret) {
        char **v = calloc(seq->n_items + 1, sizeof *v);

        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < seq->n_items; i++) {
                const YNode *it = seq->items[i];
                if (!expect_kind(l, it, YNODE_SCALAR, what) || it->length == 0 || strlen(it->value) != it->length) {
                        if (it->kind == YNODE_SCALAR)
                                loader_error(l, it, "%s must be a non-empty string without NUL", what);
                        strv_free(v);
                        return -EINVAL;
                }
                v[i] = strdup(it->value);
                if (!v[i]) {
                        strv_free(v);
                        return -ENOMEM;
                }
        }
        *ret = v;
        return 0;
}

static int parse_timeout(Loader *l, const YNode *n, const char *key, const char *backend, uint64_t *ret) {
        uint64_t usec;
        int r;

        if (!expect_kind(l, n, YNODE_SCALAR, key))
                return -EINVAL;
        r = duration_parse(n->value, &usec);
        if (r < 0)
                return loader_error(l, n,
                                    "%s '%s' of backend '%s' is not a duration; write e.g. 90s, 5m, 2h or 0 for never",
                                    key, n->value, backend);
        *ret = usec == 0 ? USEC_INFINITY : usec;
        return 0;
}

static bool env_name_ok(const YNode *key) {
        return key->length > 0 &&
               strspn(key->value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == key->length &&
               !(key->value[0] >= '0' && key->value[0] <= '9');
}

static int parse_env(Loader *l, const YNode *n, Backend *b) {
        size_t k = 0;

        if (!expect_kind(l, n, YNODE_MAPPING, "env"))
                return -EINVAL;
        b->env = calloc(n->n_items / 2 + 1, sizeof(char *));
        if (!b->env)
                return -ENOMEM;
        for (size_t i = 0; i < n->n_items; i += 2) {
                const YNode *key = n->items[i], *val = n->items[i + 1];

                if (!env_name_ok(key)) {
                        loader_error(l, key, "'%s' is not a valid environment variable name", key->value);
                        continue;
                }
                if (!expect_kind(l, val, YNODE_SCALAR, "an env value"))
                        continue;
                if (asprintf(&b->env[k], "%s=%s", key->value, val->value) < 0)
                        return -ENOMEM;
                k++;
        }
        return 0;
}

/* secret_env: the names of the variables the backend's unit hands it from its secrets file. */
static int parse_secret_env(Loader *l, const YNode *n, Backend *b) {
        int r;

        if (!expect_kind(l, n, YNODE_SEQUENCE, "secret_env"))
                return -EINVAL;
        r = strv_from_seq(l, n, "a secret_env name", &b->secret_env);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n->n_items; i++) {
                if (!env_name_ok(n->items[i]))
                        loader_error(l, n->items[i], "'%s' is not a valid environment variable name",
                                     n->items[i]->value);
                for (size_t k = 0; k < i; k++)
                        if (streq(n->items[k]->value, n->items[i]->value)) {
                                loader_error(l, n->items[i], "secret_env of backend '%s' names '%s' twice", b->name,
                                             n->items[i]->value);
                                break;
                        }
        }
        return 0;
}

static int parse_path(Loader *l, const YNode *n, const char *what, bool relative_ok, char **ret) {
        if (!expect_kind(l, n, YNODE_SCALAR, what))
                return -EINVAL;
        if (n->length == 0 || strlen(n->value) != n->length)
                return loader_error(l, n, "%s must be a non-empty path", what);
        if (n->value[0] == '/')
                *ret = strdup(n->value);
        else if (!relative_ok)
                return loader_error(l, n, "%s must be an absolute path", what);
        else if (asprintf(ret, "%s/%s", l->dir, n->value) < 0)
                *ret = NULL;
        return *ret ? 0 : -ENOMEM;
}

static const char *const backend_keys[] = {
        "command", "env", "cwd", "idle_timeout", "init_timeout", "sharing", "socket", "resources", "resource_templates",
        "prompts", "server_info", "instructions", "capabilities", "client_capabilities", "host", "remote_name", "lifecycle",
        "max_sessions", "protocol", "input_timeout", "secret_env", NULL,
};

/* resources, resource_templates, prompts: lists of objects, passed to the client as they are,
 * each with its identifying string key. */
static int parse_surface(Loader *l, const YNode *n, const char *what, const char *id_key, cJSON **ret) {
        _cleanup_free_ char *err = NULL;
        cJSON *j = NULL, *it;
        int r;

        if (!expect_kind(l, n, YNODE_SEQUENCE, what))
                return -EINVAL;
        for (size_t i = 0; i < n->n_items; i++)
                if (!expect_kind(l, n->items[i], YNODE_MAPPING, what))
                        return -EINVAL;
        r = ynode_to_json(n, &j, &err);
        if (r == -EINVAL)
                return loader_error_append(l, err);
        if (r < 0)
                return r;
        size_t k = 0;
        cJSON_ArrayForEach (it, j) {
                if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, id_key)) ||
                    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "name"))) {
                        loader_error(l, n->items[k], "each of %s needs a string '%s' and a string 'name'", what,
                                     id_key);
                        cJSON_Delete(j);
                        return -EINVAL;
                }
                k++;
        }
        *ret = j;
        return 0;
}

/* server_info: serverInfo as the backend sent it. Its scalar fields (name, version, title, ...) are
 * text, even when written unquoted like 1.0. */
static int parse_server_info(Loader *l, const YNode *n, Backend *b) {
        _cleanup_json_ cJSON *j = NULL;
        _cleanup_free_ char *err = NULL;
        int r;

        if (!expect_kind(l, n, YNODE_MAPPING, "server_info"))
                return -EINVAL;
        j = cJSON_CreateObject();
        if (!j)
                return -ENOMEM;
        for (size_t i = 0; i < n->n_items; i += 2) {
                const YNode *key = n->items[i], *val = n->items[i + 1];
                cJSON *v = NULL;

                if (val->kind == YNODE_SCALAR)
                        v = cJSON_CreateString(val->value);
                else if ((r = ynode_to_json(val, &v, &err)) == -EINVAL)
                        return loader_error_append(l, err);
                else if (r < 0)
                        return r;
                if (!v || !cJSON_AddItemToObject(j, key->value, v)) {
                        cJSON_Delete(v);
                        return -ENOMEM;
                }
        }
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "name")) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "version")))
                return loader_error(l, n, "server_info of backend '%s' needs a string 'name' and a string 'version'",
                                    b->name);
        b->server_info = TAKE_PTR(j);
        return 0;
}

/* instructions and capabilities: the rest of the backend's initialize answer. */
static int parse_identity(Loader *l, const YNode *n, Backend *b) {
        _cleanup_free_ char *err = NULL;
        const YNode *v;
        int r;

        if ((v = ynode_get(n, "server_info")) && parse_server_info(l, v, b) == -ENOMEM)
                return -ENOMEM;
        if ((v = ynode_get(n, "instructions")) && expect_kind(l, v, YNODE_SCALAR, "instructions")) {
                b->instructions = strdup(v->value);
                if (!b->instructions)
                        return -ENOMEM;
        }
        if ((v = ynode_get(n, "capabilities")) && expect_kind(l, v, YNODE_MAPPING, "capabilities")) {
                r = ynode_to_json(v, &b->capabilities, &err);
                if (r == -EINVAL)
                        return loader_error_append(l, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* host: where a backend lives when not here, and remote_name: its name there. */
static int parse_remote(Loader *l, const YNode *n, Backend *b) {
        const YNode *h = ynode_get(n, "host"), *rn = ynode_get(n, "remote_name");
        const char *why = NULL;
        int r;

        if (rn && !h)
                return loader_error(l, rn, "remote_name of backend '%s' needs a host", b->name);
        if (!h || !expect_kind(l, h, YNODE_SCALAR, "host"))
                return 0;
        r = remote_parse(h->value, &b->remote, &why);
        if (r == -EINVAL)
                return loader_error(l, h, "host '%s' of backend '%s' is invalid: %s", h->value, b->name, why);
        if (r < 0)
                return r;
        if (!rn)
                b->remote.remote_name = strdup(b->name);
        else if (!expect_kind(l, rn, YNODE_SCALAR, "remote_name"))
                return -EINVAL;
        else if (!backend_name_valid(rn->value))
                return loader_error(l, rn, "remote_name '%s' of backend '%s' is not a valid backend name", rn->value,
                                    b->name);
        else
                b->remote.remote_name = strdup(rn->value);
        return b->remote.remote_name ? 0 : -ENOMEM;
}

static const char *const lifecycle_names[] = {
        [LIFECYCLE_LAZY] = "lazy",
        [LIFECYCLE_WARM] = "warm",
        [LIFECYCLE_RESIDENT] = "resident",
};

const char *lifecycle_to_string(Lifecycle l) {
        return (size_t) l < ELEMENTSOF(lifecycle_names) ? lifecycle_names[l] : "?";
}

static void parse_lifecycle(Loader *l, const YNode *n, Backend *b) {
        if (!expect_kind(l, n, YNODE_SCALAR, "lifecycle"))
                return;
        for (size_t i = 0; i < ELEMENTSOF(lifecycle_names); i++)
                if (streq(n->value, lifecycle_names[i])) {
                        b->lifecycle = (Lifecycle) i;
                        return;
                }
        loader_error(l, n, "lifecycle of backend '%s' must be 'lazy', 'warm' or 'resident', not '%s'", b->name,
                     n->value);
}

static int parse_backend(Loader *l, const YNode *key, const YNode *n, Backend *b) {
        const YNode *v;
        int r;

        b->idle_timeout_usec = MANIFEST_DEFAULT_IDLE_TIMEOUT_USEC;
        b->init_timeout_usec = MANIFEST_DEFAULT_INIT_TIMEOUT_USEC;
        b->input_timeout_usec = MANIFEST_DEFAULT_INPUT_TIMEOUT_USEC;
        b->max_sessions = MANIFEST_DEFAULT_MAX_SESSIONS;
        b->name = strdup(key->value);
        if (!b->name)
                return -ENOMEM;
        if (!backend_name_valid(key->value))
                loader_error(l, key,
                             "backend name '%s' is invalid: use 1-%u characters of A-Z a-z 0-9 _ . - , not starting "
                             "with . or -",
                             key->value, BACKEND_NAME_MAX);
        if (!expect_kind(l, n, YNODE_MAPPING, "a backend"))
                return -EINVAL;
        check_keys(l, n, backend_keys, "a backend");

        if ((r = parse_remote(l, n, b)) == -ENOMEM)
                return r;
        v = ynode_get(n, "command");
        if (b->remote.kind != REMOTE_NONE) {
                /* Its tools, resources and prompts are listed here; everything else is the remote's. */
                static const char *const remote_only[] = {"command", "env", "secret_env", "cwd", "socket", NULL};
                for (const char *const *k = remote_only; *k; k++)
                        if ((v = ynode_get(n, *k)))
                                loader_error(l, v,
                                             "backend '%s' lives on %s: its %s belongs in that host's manifest, "
                                             "not here",
                                             b->name, b->remote.host, *k);
                v = NULL;
        } else if (!v) {
                if (!ynode_get(n, "host")) /* else an invalid host was reported */
                        loader_error(l, key, "backend '%s' has no command (or host, for a backend on another host)",
                                     b->name);
        } else if (v->kind != YNODE_SEQUENCE)
                loader_error(l, v, "command of backend '%s' must be a list, e.g. [npx, -y, some-mcp-server]", b->name);
        else if (v->n_items == 0)
                loader_error(l, v, "command of backend '%s' is empty", b->name);
        else if ((r = strv_from_seq(l, v, "a command argument", &b->command)) == -ENOMEM)
                return r;

        if ((v = ynode_get(n, "idle_timeout")))
                (void) parse_timeout(l, v, "idle_timeout", b->name, &b->idle_timeout_usec);
        if ((v = ynode_get(n, "init_timeout")))
                (void) parse_timeout(l, v, "init_timeout", b->name, &b->init_timeout_usec);
        if ((v = ynode_get(n, "input_timeout")))
                (void) parse_timeout(l, v, "input_timeout", b->name, &b->input_timeout_usec);
        if ((v = ynode_get(n, "env")) && parse_env(l, v, b) == -ENOMEM)
                return -ENOMEM;
        if ((v = ynode_get(n, "secret_env")) && parse_secret_env(l, v, b) == -ENOMEM)
                return -ENOMEM;
        if ((v = ynode_get(n, "cwd")) && parse_path(l, v, "cwd", true, &b->cwd) == -ENOMEM)
                return -ENOMEM;
        if ((v = ynode_get(n, "socket"))) {
                if (parse_path(l, v, "socket", false, &b->socket) == -ENOMEM)
                        return -ENOMEM;
                if (b->socket && strlen(b->socket) >= 108)
                        loader_error(l, v,
                                     "socket path of backend '%s' is longer than a unix socket allows (107 bytes)",
                                     b->name);
        }
        if ((v = ynode_get(n, "resources")) && parse_surface(l, v, "resources", "uri", &b->resources) == -ENOMEM)
                return -ENOMEM;
        if ((v = ynode_get(n, "resource_templates")) &&
            parse_surface(l, v, "resource_templates", "uriTemplate", &b->resource_templates) == -ENOMEM)
                return -ENOMEM;
        if ((v = ynode_get(n, "prompts")) && parse_surface(l, v, "prompts", "name", &b->prompts) == -ENOMEM)
                return -ENOMEM;
        if (parse_identity(l, n, b) == -ENOMEM)
                return -ENOMEM;
        /* What import and refresh declare to this server (mcp-lazy import writes it; nothing else reads it). */
        if ((v = ynode_get(n, "client_capabilities")))
                (void) expect_kind(l, v, YNODE_MAPPING, "client_capabilities");
        if ((v = ynode_get(n, "max_sessions")) && expect_kind(l, v, YNODE_SCALAR, "max_sessions")) {
                char *end;
                unsigned long k = strtoul(v->value, &end, 10);
                if (*end || !v->length || v->value[0] == '-' || k < 1 || k > MANIFEST_MAX_MAX_SESSIONS)
                        loader_error(l, v, "max_sessions of backend '%s' must be a whole number from 1 to %u", b->name,
                                     MANIFEST_MAX_MAX_SESSIONS);
                else
                        b->max_sessions = (unsigned) k;
        }
        if ((v = ynode_get(n, "sharing")) && expect_kind(l, v, YNODE_SCALAR, "sharing")) {
                if (streq(v->value, "pooled"))
                        b->sharing = SHARING_POOLED;
                else if (streq(v->value, "session"))
                        b->sharing = SHARING_SESSION;
                else
                        loader_error(l, v, "sharing of backend '%s' must be 'pooled' or 'session', not '%s'", b->name,
                                     v->value);
        }
        if ((v = ynode_get(n, "lifecycle")))
                parse_lifecycle(l, v, b);
        if ((v = ynode_get(n, "protocol")) && expect_kind(l, v, YNODE_SCALAR, "protocol")) {
                if (streq(v->value, "auto"))
                        b->protocol = PROTOCOL_AUTO;
                else if (streq(v->value, "modern"))
                        b->protocol = PROTOCOL_MODERN;
                else if (streq(v->value, "legacy"))
                        b->protocol = PROTOCOL_LEGACY;
                else
                        loader_error(l, v, "protocol of backend '%s' must be 'auto', 'modern' or 'legacy', not '%s'",
                                     b->name, v->value);
        }
        return 0;
}

static int parse_backends(Loader *l, const YNode *n) {
        if (!expect_kind(l, n, YNODE_MAPPING, "backends"))
                return -EINVAL;
        l->m->backends = calloc(n->n_items / 2 + 1, sizeof(Backend));
        if (!l->m->backends)
                return -ENOMEM;
        for (size_t i = 0; i < n->n_items; i += 2) {
                int r = parse_backend(l, n->items[i], n->items[i + 1], &l->m->backends[l->m->n_backends++]);
                if (r == -ENOMEM)
                        return r;
        }
        return 0;
}

/* Manifest spelling -> tools/list spelling. Both spellings are accepted. */
static const struct {
        const char *manifest, *mcp;
        YNodeKind kind;
} tool_keys[] = {
        {"name", "name", YNODE_SCALAR},
        {"title", "title", YNODE_SCALAR},
        {"description", "description", YNODE_SCALAR},
        {"input_schema", "inputSchema", YNODE_MAPPING},
        {"inputSchema", "inputSchema", YNODE_MAPPING},
        {"output_schema", "outputSchema", YNODE_MAPPING},
        {"outputSchema", "outputSchema", YNODE_MAPPING},
        {"annotations", "annotations", YNODE_MAPPING},
        {"icons", "icons", YNODE_SEQUENCE},
        {"execution", "execution", YNODE_MAPPING},
        {"_meta", "_meta", YNODE_MAPPING},
        {"backend", NULL, YNODE_SCALAR},
};

static const char *const tool_key_names[] = {
        "name",          "title",        "description", "input_schema", "inputSchema",
        "output_schema", "outputSchema", "annotations", "icons",        "execution",
        "_meta",         "backend",      NULL,
};

static bool schema_is_object(const cJSON *schema) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(schema, "type");
        return cJSON_IsString(t) && streq(t->valuestring, "object");
}

/* Adds one manifest key of a tool to its JSON; the manifest's order is the output's order. */
static int tool_add_key(Loader *l, cJSON *json, const YNode *key, const YNode *val, const char *tool) {
        _cleanup_json_ cJSON *v = NULL;
        _cleanup_free_ char *err = NULL;
        size_t i;
        int r;

        for (i = 0; i < ELEMENTSOF(tool_keys); i++)
                if (streq(key->value, tool_keys[i].manifest))
                        break;
        if (i == ELEMENTSOF(tool_keys) || !tool_keys[i].mcp)
                return 0;
        if (!expect_kind(l, val, tool_keys[i].kind, key->value))
                return 0;
        if (cJSON_HasObjectItem(json, tool_keys[i].mcp))
                return loader_error(l, key, "tool '%s' sets %s twice (as %s and another spelling)", tool,
                                    tool_keys[i].mcp, key->value);
        if (val->kind == YNODE_SCALAR)
                v = cJSON_CreateString(val->value); /* text fields stay text, even "1.0" or "yes" */
        else {
                r = ynode_to_json(val, &v, &err);
                if (r == -EINVAL)
                        return loader_error_append(l, err); /* err carries its own position */
                if (r < 0)
                        return r;
        }
        if (!v)
                return -ENOMEM;
        if ((streq(tool_keys[i].mcp, "inputSchema") || streq(tool_keys[i].mcp, "outputSchema")) && !schema_is_object(v))
                return loader_error(l, val, "%s of tool '%s' must be an object schema (type: object)", key->value,
                                    tool);
        if (!cJSON_AddItemToObject(json, tool_keys[i].mcp, v))
                return -ENOMEM;
        v = NULL;
        return 0;
}

static int parse_tool(Loader *l, const YNode *n, Tool *t) {
        _cleanup_json_ cJSON *json = NULL;
        const YNode *name, *backend;
        const char *tname = "?";
        int r;

        if (!expect_kind(l, n, YNODE_MAPPING, "a tool"))
                return -EINVAL;
        check_keys(l, n, tool_key_names, "a tool");

        name = ynode_get(n, "name");
        if (!name)
                return loader_error(l, n, "tool has no name");
        if (!expect_kind(l, name, YNODE_SCALAR, "a tool name"))
                return -EINVAL;
        tname = name->value;
        if (!tool_name_valid(tname))
                loader_error(l, name, "tool name '%s' is invalid: MCP allows 1-128 characters of A-Z a-z 0-9 _ . -",
                             tname);
        if (!ynode_get(n, "input_schema") && !ynode_get(n, "inputSchema"))
                loader_error(l, n, "tool '%s' has no input_schema", tname);

        backend = ynode_get(n, "backend");
        if (!backend)
                loader_error(l, n, "tool '%s' has no backend", tname);
        else if (expect_kind(l, backend, YNODE_SCALAR, "backend")) {
                const Backend *b = manifest_find_backend(l->m, backend->value);
                if (!b)
                        loader_error(l, backend, "tool '%s' names backend '%s', which is not defined under backends",
                                     tname, backend->value);
                else {
                        t->backend = (size_t) (b - l->m->backends);
                        l->m->backends[t->backend].n_tools++;
                }
        }

        json = cJSON_CreateObject();
        if (!json)
                return -ENOMEM;
        for (size_t i = 0; i < n->n_items; i += 2) {
                r = tool_add_key(l, json, n->items[i], n->items[i + 1], tname);
                if (r == -ENOMEM)
                        return r;
        }
        t->json = TAKE_PTR(json);
        t->name = cJSON_GetObjectItemCaseSensitive(t->json, "name")->valuestring;
        return 0;
}

static int parse_tools(Loader *l, const YNode *n) {
        if (!expect_kind(l, n, YNODE_SEQUENCE, "tools"))
                return -EINVAL;
        l->m->tools = calloc(n->n_items + 1, sizeof(Tool));
        if (!l->m->tools)
                return -ENOMEM;
        for (size_t i = 0; i < n->n_items; i++) {
                Tool *t = &l->m->tools[l->m->n_tools];
                const Tool *dup;
                int r = parse_tool(l, n->items[i], t);

                if (r == -ENOMEM)
                        return r;
                if (!t->json)
                        continue;
                dup = manifest_find_tool(l->m, t->name);
                if (dup) {
                        loader_error(l, ynode_get(n->items[i], "name"),
                                     "duplicate tool name '%s' (tool #%zu has it too)", t->name,
                                     (size_t) (dup - l->m->tools) + 1);
                        t->json = (cJSON_Delete(t->json), NULL);
                        continue;
                }
                l->m->n_tools++;
        }
        return 0;
}

static const char *const server_keys[] = {"name",      "title",     "version",     "instructions",
                                          "page_size", "cache_ttl", "cache_scope", NULL};

static int parse_server(Loader *l, const YNode *n) {
        const YNode *v;
        cJSON *info = l->m->server_info;

        if (!expect_kind(l, n, YNODE_MAPPING, "server"))
                return -EINVAL;
        check_keys(l, n, server_keys, "server");
        for (const char *const *k = server_keys; *k; k++) {
                v = ynode_get(n, *k);
                if (!v || !expect_kind(l, v, YNODE_SCALAR, *k))
                        continue;
                if (streq(*k, "instructions")) {
                        l->m->instructions = strdup(v->value);
                        if (!l->m->instructions)
                                return -ENOMEM;
                } else if (streq(*k, "page_size")) {
                        char *end;
                        unsigned long p = strtoul(v->value, &end, 10);
                        if (*end || !v->length || p > 100000 || v->value[0] == '-')
                                loader_error(l, v, "page_size must be a whole number from 0 (no paging) to 100000");
                        l->m->page_size = p;
                } else if (streq(*k, "cache_ttl")) {
                        uint64_t usec;
                        if (duration_parse(v->value, &usec) < 0)
                                loader_error(l, v, "cache_ttl '%s' is not a duration; write e.g. 0, 30s or 5m",
                                             v->value);
                        else
                                l->m->cache_ttl_ms = usec / 1000;
                } else if (streq(*k, "cache_scope")) {
                        if (!streq(v->value, "public") && !streq(v->value, "private"))
                                loader_error(l, v, "cache_scope must be public or private");
                        l->m->cache_private = streq(v->value, "private");
                } else {
                        cJSON_DeleteItemFromObjectCaseSensitive(info, *k);
                        if (!cJSON_AddStringToObject(info, *k, v->value))
                                return -ENOMEM;
                }
        }
        return 0;
}

static int server_info_default(Manifest *m) {
        m->server_info = cJSON_CreateObject();
        if (!m->server_info || !cJSON_AddStringToObject(m->server_info, "name", "mcp-lazy") ||
            !cJSON_AddStringToObject(m->server_info, "version", MCP_LAZY_VERSION))
                return -ENOMEM;
        return 0;
}

static int load_tree(Loader *l, const YNode *root) {
        const YNode *v;
        int r;

        r = server_info_default(l->m);
        if (r < 0)
                return r;
        if (!expect_kind(l, root, YNODE_MAPPING, "the manifest"))
                return -EINVAL;
        check_keys(l, root, top_keys, "the manifest");
        if ((v = ynode_get(root, "server")) && (r = parse_server(l, v)) == -ENOMEM)
                return r;
        if ((v = ynode_get(root, "backends")) && (r = parse_backends(l, v)) == -ENOMEM)
                return r;
        if ((v = ynode_get(root, "tools")) && (r = parse_tools(l, v)) == -ENOMEM)
                return r;
        for (size_t i = 0; i < l->m->n_backends; i++) {
                l->m->has_resources |= !!l->m->backends[i].resources;
                l->m->has_resource_templates |= !!l->m->backends[i].resource_templates;
                l->m->has_prompts |= !!l->m->backends[i].prompts;
        }
        return 0;
}

static void backend_done(Backend *b);

Manifest *manifest_free(Manifest *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_backends; i++)
                backend_done(&m->backends[i]);
        free(m->backends);
        for (size_t i = 0; i < m->n_tools; i++)
                cJSON_Delete(m->tools[i].json);
        free(m->tools);
        cJSON_Delete(m->server_info);
        free(m->instructions);
        cJSON_Delete(m->capabilities);
        free(m->path);
        free(m);
        return NULL;
}

static void backend_done(Backend *b) {
        free(b->name);
        strv_free(b->command);
        strv_free(b->env);
        strv_free(b->secret_env);
        free(b->cwd);
        free(b->socket);
        remote_done(&b->remote);
        cJSON_Delete(b->resources);
        cJSON_Delete(b->resource_templates);
        cJSON_Delete(b->prompts);
        cJSON_Delete(b->server_info);
        free(b->instructions);
        cJSON_Delete(b->capabilities);
        *b = (Backend){};
}

int manifest_restrict(Manifest *m, const char *backend) {
        const Backend *found = manifest_find_backend(m, backend);
        size_t k, n = 0;
        Backend *b;

        if (!found)
                return -ENOENT;
        k = (size_t) (found - m->backends);
        for (size_t i = 0; i < m->n_tools; i++) {
                if (m->tools[i].backend != k) {
                        cJSON_Delete(m->tools[i].json);
                        continue;
                }
                m->tools[n] = m->tools[i];
                m->tools[n++].backend = 0;
        }
        m->n_tools = n;
        for (size_t i = 0; i < m->n_backends; i++)
                if (i != k)
                        backend_done(&m->backends[i]);
        if (k != 0)
                m->backends[0] = m->backends[k], m->backends[k] = (Backend){};
        m->n_backends = 1;
        b = &m->backends[0];
        m->has_resources = !!b->resources;
        m->has_resource_templates = !!b->resource_templates;
        m->has_prompts = !!b->prompts;
        /* The backend's own identity: its serverInfo comes with its instructions (or none). */
        if (b->server_info) {
                cJSON_Delete(m->server_info);
                m->server_info = TAKE_PTR(b->server_info);
                free(m->instructions);
                m->instructions = TAKE_PTR(b->instructions);
        }
        if (b->capabilities) {
                cJSON_Delete(m->capabilities);
                m->capabilities = TAKE_PTR(b->capabilities);
        }
        return 0;
}

/* Checks a tree and builds the Manifest from it. */
int manifest_from_tree(const YNode *root, const char *name, const char *dir, Manifest **ret, char **ret_error) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        Loader l = {.file = name, .dir = dir};
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->path = strdup(name);
        if (!m->path)
                return -ENOMEM;
        l.m = m;
        r = load_tree(&l, root);
        if (l.oom || r == -ENOMEM) {
                free(l.errors);
                return -ENOMEM;
        }
        if (l.n_errors > 0) {
                if (l.n_errors > MAX_ERRORS) {
                        char *p = NULL;
                        if (asprintf(&p, "%s\n%s: %u more problems not shown", l.errors, name,
                                     l.n_errors - MAX_ERRORS) >= 0) {
                                free(l.errors);
                                l.errors = p;
                        }
                }
                if (ret_error)
                        *ret_error = l.errors;
                else
                        free(l.errors);
                return -EINVAL;
        }
        *ret = TAKE_PTR(m);
        return 0;
}

const Backend *manifest_find_backend(const Manifest *m, const char *name) {
        for (size_t i = 0; i < m->n_backends; i++)
                if (m->backends[i].name && streq(m->backends[i].name, name))
                        return &m->backends[i];
        return NULL;
}

const Tool *manifest_find_tool(const Manifest *m, const char *name) {
        for (size_t i = 0; i < m->n_tools; i++)
                if (streq(m->tools[i].name, name))
                        return &m->tools[i];
        return NULL;
}

static bool list_has_string(const cJSON *list, const char *key, const char *value) {
        const cJSON *it;
        cJSON_ArrayForEach (it, list)
                if (streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, key)) ?: "", value))
                        return true;
        return false;
}

const Backend *manifest_find_resource_backend(const Manifest *m, const char *uri) {
        const Backend *best = NULL;
        size_t best_len = 0;

        for (size_t i = 0; i < m->n_backends; i++)
                if (list_has_string(m->backends[i].resources, "uri", uri))
                        return &m->backends[i];
        /* Templates: the literal part before the first expression must prefix the URI. */
        for (size_t i = 0; i < m->n_backends; i++) {
                const cJSON *it;
                cJSON_ArrayForEach (it, m->backends[i].resource_templates) {
                        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "uriTemplate"));
                        size_t n = t ? strcspn(t, "{") : 0;
                        if (t && n >= best_len && strncmp(uri, t, n) == 0)
                                best = &m->backends[i], best_len = n;
                }
        }
        return best;
}

const Backend *manifest_find_prompt_backend(const Manifest *m, const char *name) {
        for (size_t i = 0; i < m->n_backends; i++)
                if (list_has_string(m->backends[i].prompts, "name", name))
                        return &m->backends[i];
        return NULL;
}
