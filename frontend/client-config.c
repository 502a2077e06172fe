/* Client configs: read with cJSON, locate each server entry's bytes with a small scan over the
 * validated text, and rewrite only those bytes. */
#include <errno.h>
#include <stdarg.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client-config.h"
#include "jsonrpc.h"
#include "macros.h"
#include "manifest-write.h"

#define CONFIG_MAX_SIZE (256U * 1024U * 1024U) /* ~/.claude.json keeps history: it grows */

/* What each client declares in its initialize request today. Sources (README, "Import"): captures
 * of Claude Code 2.1.275 (anthropics/claude-code#96043, #65572), Claude Desktop's roots support
 * without elicitation (modelcontextprotocol/modelcontextprotocol#2398, anthropics/claude-code#96043),
 * and the capability records of VS Code and Cursor in apify/mcp-client-capabilities. */
const ClientInfo client_table[] = {
        {"claude-code", "Claude Code", "{\"roots\":{\"listChanged\":true},\"elicitation\":{}}"},
        {"claude-desktop", "Claude Desktop", "{\"roots\":{}}"},
        {"vscode", "VS Code",
         "{\"roots\":{\"listChanged\":true},\"sampling\":{},\"elicitation\":{\"form\":{},\"url\":{}}}"},
        {"cursor", "Cursor", "{\"roots\":{},\"elicitation\":{}}"},
        {},
};

const ClientInfo *client_info_find(const char *name) {
        for (const ClientInfo *c = client_table; c->name; c++)
                if (streq(c->name, name))
                        return c;
        return NULL;
}

/* ---- where configs live ------------------------------------------------------------------------ */

static int strv_push(char ***l, size_t *n, char *s) {
        char **p;

        if (!s)
                return -ENOMEM;
        p = realloc(*l, (*n + 2) * sizeof(char *));
        if (!p) {
                free(s);
                return -ENOMEM;
        }
        p[(*n)++] = s;
        p[*n] = NULL;
        *l = p;
        return 0;
}

static char *path_join(const char *a, const char *b) {
        char *p;
        return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

int client_config_paths(const char *client, char ***ret_paths, char ***ret_clients) {
        const char *home = getenv("HOME"), *xdg = getenv("XDG_CONFIG_HOME");
        _cleanup_free_ char *config = NULL, *cwd = getcwd(NULL, 0);
        _cleanup_strv_free_ char **paths = NULL, **clients = NULL;
        size_t n = 0, k = 0;
        struct {
                const char *client;
                char *path;
        } cand[8] = {};
        size_t nc = 0;
        int r = 0;

        if (!home || home[0] != '/')
                return -ENXIO;
        config = xdg && xdg[0] == '/' ? strdup(xdg) : path_join(home, ".config");
        if (!config)
                return -ENOMEM;
        cand[nc++] = (typeof(cand[0])){"claude-code", path_join(home, ".claude.json")};
        if (cwd)
                cand[nc++] = (typeof(cand[0])){"claude-code", path_join(cwd, ".mcp.json")};
        cand[nc++] = (typeof(cand[0])){"claude-desktop", path_join(config, "Claude/claude_desktop_config.json")};
        cand[nc++] = (typeof(cand[0])){"vscode", path_join(config, "Code/User/mcp.json")};
        if (cwd)
                cand[nc++] = (typeof(cand[0])){"vscode", path_join(cwd, ".vscode/mcp.json")};
        cand[nc++] = (typeof(cand[0])){"cursor", path_join(home, ".cursor/mcp.json")};
        for (size_t i = 0; i < nc; i++) {
                if (!cand[i].path)
                        r = -ENOMEM;
                else if (r >= 0 && (!client || streq(client, cand[i].client)) && access(cand[i].path, F_OK) == 0) {
                        /* ~/.mcp.json when run from home is the same file only once */
                        bool dup = false;
                        for (size_t j = 0; j < n; j++)
                                dup = dup || streq(paths[j], cand[i].path);
                        if (!dup) {
                                r = strv_push(&paths, &n, TAKE_PTR(cand[i].path));
                                if (r >= 0)
                                        r = strv_push(&clients, &k, strdup(cand[i].client));
                        }
                }
                free(cand[i].path);
        }
        if (r < 0)
                return r;
        *ret_paths = TAKE_PTR(paths);
        *ret_clients = TAKE_PTR(clients);
        return (int) n;
}

/* ---- scanning validated JSON ------------------------------------------------------------------- */

static size_t skip_ws(const char *t, size_t len, size_t i) {
        while (i < len && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
                i++;
        return i;
}

static size_t skip_string(const char *t, size_t len, size_t i) {
        for (i++; i < len && t[i] != '"'; i++)
                if (t[i] == '\\')
                        i++;
        return i + 1;
}

/* The text has been validated: brackets match and strings are terminated. */
static size_t skip_value(const char *t, size_t len, size_t i) {
        unsigned depth = 0;

        if (t[i] == '"')
                return skip_string(t, len, i);
        if (t[i] != '{' && t[i] != '[') {
                while (i < len && !strchr(",}] \t\r\n", t[i]))
                        i++;
                return i;
        }
        for (; i < len; i++) {
                if (t[i] == '"')
                        i = skip_string(t, len, i) - 1;
                else if (t[i] == '{' || t[i] == '[')
                        depth++;
                else if ((t[i] == '}' || t[i] == ']') && --depth == 0)
                        return i + 1;
        }
        return len;
}

typedef struct Member {
        size_t key_start, key_end, value_start, value_end;
        char *key; /* decoded */
} Member;

/* Iterates over an object's members: *pos starts at its '{'. Returns 1 with *m set, 0 at the end. */
static int object_next(const char *t, size_t len, size_t *pos, Member *m) {
        _cleanup_json_ cJSON *k = NULL;
        size_t i = skip_ws(t, len, *pos + (t[*pos] == '{' || t[*pos] == ','));

        free(m->key);
        m->key = NULL;
        if (i >= len || t[i] != '"')
                return 0;
        m->key_start = i;
        m->key_end = i = skip_string(t, len, i);
        k = cJSON_ParseWithLength(t + m->key_start, m->key_end - m->key_start);
        if (!cJSON_IsString(k) || !(m->key = strdup(k->valuestring)))
                return -ENOMEM;
        i = skip_ws(t, len, skip_ws(t, len, i) + 1); /* past ':' */
        m->value_start = i;
        m->value_end = i = skip_value(t, len, i);
        *pos = skip_ws(t, len, i);
        return 1;
}

void text_position(const char *text, size_t len, size_t offset, unsigned *ret_line, unsigned *ret_column) {
        unsigned line = 1, col = 1;

        for (size_t i = 0; i < offset && i < len; i++) {
                if (text[i] == '\n')
                        line++, col = 1;
                else if (((unsigned char) text[i] & 0xC0) != 0x80)
                        col++;
        }
        *ret_line = line;
        *ret_column = col;
}

/* JSONC (VS Code): comments and trailing commas become spaces, so offsets stay those of the file. */
static void blank_jsonc(char *t, size_t len) {
        for (size_t i = 0; i < len; i++) {
                if (t[i] == '"') {
                        i = skip_string(t, len, i) - 1;
                } else if (t[i] == '/' && i + 1 < len && t[i + 1] == '/') {
                        while (i < len && t[i] != '\n')
                                t[i++] = ' ';
                } else if (t[i] == '/' && i + 1 < len && t[i + 1] == '*') {
                        size_t j = i;
                        while (j < len && !(t[j] == '*' && j + 1 < len && t[j + 1] == '/' && j > i + 1))
                                j++;
                        for (; i < len && i <= j + 1; i++)
                                if (t[i] != '\n')
                                        t[i] = ' ';
                        i--;
                } else if (t[i] == ',') {
                        size_t j = skip_ws(t, len, i + 1);
                        /* a comment after the comma is blanked later; look past it now */
                        while (j + 1 < len && t[j] == '/' && (t[j + 1] == '/' || t[j + 1] == '*')) {
                                if (t[j + 1] == '/')
                                        while (j < len && t[j] != '\n')
                                                j++;
                                else {
                                        j += 2;
                                        while (j + 1 < len && !(t[j] == '*' && t[j + 1] == '/'))
                                                j++;
                                        j += 2;
                                }
                                j = skip_ws(t, len, j);
                        }
                        if (j < len && (t[j] == '}' || t[j] == ']'))
                                t[i] = ' ';
                }
        }
}

ClientConfig *client_config_free(ClientConfig *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_entries; i++) {
                free(c->entries[i].name);
                free(c->entries[i].where);
                free(c->entries[i].default_cwd);
                free(c->entries[i].replacement);
        }
        free(c->entries);
        free(c->scan);
        cJSON_Delete(c->approvals);
        cJSON_Delete(c->root);
        free(c->text);
        free(c->path);
        free(c);
        return NULL;
}

_printf_(4, 5) static int config_error(const ClientConfig *c, size_t offset, char **ret_error, const char *fmt, ...) {
        _cleanup_free_ char *msg = NULL;
        unsigned line, col;
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        text_position(c->text, c->len, offset, &line, &col);
        if (asprintf(ret_error, "%s:%u:%u: %s", c->path, line, col, msg ?: "out of memory") < 0)
                *ret_error = NULL;
        return -EINVAL;
}

/* cJSON keeps the first of two equal keys, the scan would see both: an object we act on must not
 * have any (a client might read the other one). */
static int object_check_unique(ClientConfig *c, const char *scan, size_t pos, const char *what, char **ret_error) {
        _cleanup_strv_free_ char **keys = NULL;
        Member m = {};
        size_t p = pos, n = 0;
        int r;

        if (scan[pos] != '{')
                return 0;
        while ((r = object_next(scan, c->len, &p, &m)) > 0) {
                char **l;
                for (size_t i = 0; i < n; i++)
                        if (streq(keys[i], m.key)) {
                                r = config_error(c, m.key_start, ret_error, "key '%s' appears twice in %s", m.key,
                                                 what);
                                free(m.key);
                                return r;
                        }
                l = realloc(keys, (n + 2) * sizeof(char *));
                if (!l) {
                        free(m.key);
                        return -ENOMEM;
                }
                keys = l;
                keys[n++] = TAKE_PTR(m.key);
                keys[n] = NULL;
        }
        return r;
}

/* Adds every member of the object at [pos] as an entry; duplicate names are refused. */
static int add_entries(ClientConfig *c, const char *scan, size_t pos, const cJSON *obj, const char *where,
                       const char *default_cwd, char **ret_error) {
        Member m = {};
        size_t p = pos;
        int r;

        if (scan[pos] != '{')
                return config_error(c, pos, ret_error, "%s must be an object of servers", where);
        while ((r = object_next(scan, c->len, &p, &m)) > 0) {
                ServerEntry *e, *l;
                size_t ls;

                for (size_t i = 0; i < c->n_entries; i++)
                        if (streq(c->entries[i].where, where) && streq(c->entries[i].name, m.key)) {
                                r = config_error(c, m.key_start, ret_error, "server '%s' appears twice in %s", m.key,
                                                 where);
                                free(m.key);
                                return r;
                        }
                l = realloc(c->entries, (c->n_entries + 1) * sizeof *l);
                if (!l) {
                        free(m.key);
                        return -ENOMEM;
                }
                c->entries = l;
                e = &c->entries[c->n_entries++];
                *e = (ServerEntry){
                        .config = c,
                        .name = TAKE_PTR(m.key),
                        .where = strdup(where),
                        .default_cwd = default_cwd ? strdup(default_cwd) : NULL,
                        .value_start = m.value_start,
                        .value_end = m.value_end,
                };
                e->json = cJSON_GetObjectItemCaseSensitive(obj, e->name);
                {
                        _cleanup_free_ char *what = NULL;
                        r = asprintf(&what, "server '%s'", e->name) < 0
                                    ? -ENOMEM
                                    : object_check_unique(c, scan, m.value_start, what, ret_error);
                }
                if (r < 0) {
                        free(m.key);
                        return r;
                }
                for (ls = m.key_start; ls > 0 && c->text[ls - 1] != '\n'; ls--)
                        ;
                e->line_start = ls;
                if (!e->where || (default_cwd && !e->default_cwd))
                        return -ENOMEM;
                if (!cJSON_IsObject(e->json))
                        return config_error(c, m.value_start, ret_error, "server '%s' in %s is not an object", e->name,
                                            where);
        }
        free(m.key);
        return r;
}

static const char *guess_client(const char *path, const cJSON *root) {
        _cleanup_free_ char *copy = strdup(path);
        const char *base = copy ? basename(copy) : path;

        if (streq(base, "claude_desktop_config.json"))
                return "claude-desktop";
        if (streq(base, ".claude.json") || streq(base, ".mcp.json"))
                return "claude-code";
        if (strstr(path, "/.cursor/"))
                return "cursor";
        if (strstr(path, "/.vscode/") || strstr(path, "/Code/User/") ||
            cJSON_GetObjectItemCaseSensitive(root, "servers"))
                return "vscode";
        return "claude-code";
}

static char *dir_of(const char *path, unsigned up) {
        char *d = realpath(path, NULL);

        for (unsigned i = 0; d && i < up; i++) {
                char *s = strrchr(d, '/');
                if (s && s != d)
                        *s = 0;
                else if (s)
                        s[1] = 0;
        }
        return d;
}

static int client_config_parse(ClientConfig *c, const char *client, char **ret_error);

/* Import runs the commands a config names, as us: only from a file that no one else can have written
 * (what ssh asks of its own config). Root importing in another user's project directory would
 * otherwise run that user's .mcp.json as root, and install it as a system backend. */
static int config_owner_check(const char *path, const struct stat *st, char **ret_error) {
        const char *why = NULL;
        char owner[64];

        if (st->st_uid != geteuid() && st->st_uid != 0) {
                snprintf(owner, sizeof owner, "belongs to uid %u", (unsigned) st->st_uid);
                why = owner;
        } else if (st->st_mode & S_IWOTH)
                why = "is writable by every user";
        else if ((st->st_mode & S_IWGRP) && st->st_gid != getegid()) {
                snprintf(owner, sizeof owner, "is writable by group %u", (unsigned) st->st_gid);
                why = owner;
        }
        if (!why)
                return 0;
        if (asprintf(ret_error,
                     "%s %s: someone else may have put the commands in it that import would run as you (chown or "
                     "chmod it, or import it as its owner)",
                     path, why) < 0)
                *ret_error = NULL;
        return -EPERM;
}

int client_config_load(const char *path, const char *client, ClientConfig **ret, char **ret_error) {
        _cleanup_(client_config_freep) ClientConfig *c = calloc(1, sizeof *c);
        int r;

        *ret_error = NULL;
        if (!c || !(c->path = strdup(path)))
                return -ENOMEM;
        r = read_file_stat(path, CONFIG_MAX_SIZE, &c->text, &c->len, &c->st);
        if (r < 0) {
                if (asprintf(ret_error, "%s: %s", path, strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        r = config_owner_check(path, &c->st, ret_error);
        if (r < 0)
                return r;
        r = client_config_parse(c, client, ret_error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

int client_config_load_string(const char *text, size_t len, const char *path, const char *client, ClientConfig **ret,
                              char **ret_error) {
        _cleanup_(client_config_freep) ClientConfig *c = calloc(1, sizeof *c);
        int r;

        *ret_error = NULL;
        if (!c || !(c->path = strdup(path)) || !(c->text = malloc(len + 1)))
                return -ENOMEM;
        memcpy(c->text, text, len);
        c->text[len] = 0;
        c->len = len;
        r = client_config_parse(c, client, ret_error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

/* Checks c->text and finds its server entries. */
static int client_config_parse(ClientConfig *c, const char *client, char **ret_error) {
        _cleanup_free_ char *scan = NULL;
        const char *end = NULL, *path = c->path;
        Member m = {};
        size_t p;
        int r;

        scan = malloc(c->len + 1);
        if (!scan)
                return -ENOMEM;
        memcpy(scan, c->text, c->len + 1);
        if (strlen(c->text) != c->len)
                return config_error(c, strlen(c->text), ret_error, "the file contains a NUL byte");
        if ((client && streq(client, "vscode")) || strstr(path, "/.vscode/") || strstr(path, "/Code/User/"))
                blank_jsonc(scan, c->len);
        /* cJSON takes any control character for whitespace; JSON, and the scan, do not. */
        for (size_t i = 0; i < c->len; i++) {
                if (scan[i] == '"')
                        i = skip_string(scan, c->len, i) - 1;
                else if ((unsigned char) scan[i] < 0x20 && !strchr("\t\n\r", scan[i]))
                        return config_error(c, i, ret_error, "a control character outside a string");
        }
        c->root = cJSON_ParseWithLengthOpts(scan, c->len, &end, false);
        if (!c->root)
                return config_error(c, end ? (size_t) (end - scan) : (size_t) (cJSON_GetErrorPtr() - scan), ret_error,
                                    "not valid JSON here");
        if (skip_ws(scan, c->len, (size_t) (end - scan)) != c->len)
                return config_error(c, skip_ws(scan, c->len, (size_t) (end - scan)), ret_error,
                                    "unexpected text after the JSON value");
        if (!cJSON_IsObject(c->root))
                return config_error(c, skip_ws(scan, c->len, 0), ret_error, "the file must hold a JSON object");
        /* a static string: the caller's may not outlive the config */
        c->client = client && client_info_find(client) ? client_info_find(client)->name : guess_client(path, c->root);

        /* Top level: mcpServers (Claude, Cursor), servers (VS Code), projects.*.mcpServers (Claude Code). */
        p = skip_ws(scan, c->len, 0);
        r = object_check_unique(c, scan, p, "the top level", ret_error);
        if (r < 0)
                return r;
        while ((r = object_next(scan, c->len, &p, &m)) > 0) {
                if (streq(m.key, "mcpServers") || streq(m.key, "servers")) {
                        _cleanup_free_ char *dir = NULL;
                        /* a project's .mcp.json or .vscode/mcp.json runs in its project directory */
                        if (strstr(path, "/.vscode/"))
                                dir = dir_of(path, 2);
                        else if (!strcmp(path + (strlen(path) >= 9 ? strlen(path) - 9 : 0), "/.mcp.json"))
                                dir = dir_of(path, 1);
                        r = add_entries(c, scan, m.value_start, cJSON_GetObjectItemCaseSensitive(c->root, m.key), m.key,
                                        dir, ret_error);
                } else if (streq(m.key, "projects") && scan[m.value_start] == '{') {
                        const cJSON *projects = cJSON_GetObjectItemCaseSensitive(c->root, "projects");
                        Member pm = {}, sm = {};
                        size_t pp = m.value_start;

                        r = object_check_unique(c, scan, pp, "projects", ret_error);
                        while (r >= 0 && (r = object_next(scan, c->len, &pp, &pm)) > 0) {
                                const cJSON *proj = cJSON_GetObjectItemCaseSensitive(projects, pm.key);
                                size_t sp = pm.value_start;
                                if (scan[sp] != '{')
                                        continue;
                                {
                                        _cleanup_free_ char *what = NULL;
                                        r = asprintf(&what, "project '%s'", pm.key) < 0
                                                    ? -ENOMEM
                                                    : object_check_unique(c, scan, sp, what, ret_error);
                                }
                                while (r >= 0 && (r = object_next(scan, c->len, &sp, &sm)) > 0) {
                                        _cleanup_free_ char *where = NULL;
                                        if (!streq(sm.key, "mcpServers"))
                                                continue;
                                        if (asprintf(&where, "projects[\"%s\"].mcpServers", pm.key) < 0)
                                                r = -ENOMEM;
                                        else
                                                r = add_entries(c, scan, sm.value_start,
                                                                cJSON_GetObjectItemCaseSensitive(proj, "mcpServers"),
                                                                where, pm.key, ret_error);
                                }
                                free(sm.key);
                                sm.key = NULL;
                        }
                        free(pm.key);
                }
                if (r < 0)
                        break;
        }
        free(m.key);
        if (r < 0)
                return r;
        c->scan = TAKE_PTR(scan);
        return 0;
}

/* ---- approval of a project's servers ---------------------------------------------------------- */

int client_config_load_approvals(ClientConfig *c) {
        const char *home = getenv("HOME");
        _cleanup_free_ char *path = NULL, *text = NULL, *dir = dir_of(c->path, 1);
        _cleanup_json_ cJSON *root = NULL;
        cJSON *project;
        size_t len;

        c->needs_approval = true;
        if (!home || !dir || asprintf(&path, "%s/.claude.json", home) < 0)
                return 0; /* nothing approved */
        if (read_file_full(path, CONFIG_MAX_SIZE, &text, &len) < 0 || jsonrpc_parse(text, len, 1000, &root) < 0)
                return 0;
        project = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "projects"), dir);
        if (cJSON_IsObject(project))
                c->approvals = cJSON_DetachItemViaPointer(cJSON_GetObjectItemCaseSensitive(root, "projects"), project);
        return 0;
}

static bool name_listed(const cJSON *list, const char *name) {
        const cJSON *it;
        cJSON_ArrayForEach (it, list)
                if (cJSON_IsString(it) && streq(it->valuestring, name))
                        return true;
        return false;
}

bool server_entry_approved(const ServerEntry *e) {
        const cJSON *a = e->config->approvals;

        if (!e->config->needs_approval)
                return true;
        if (name_listed(cJSON_GetObjectItemCaseSensitive(a, "disabledMcpjsonServers"), e->name))
                return false;
        return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "enableAllProjectMcpServers")) ||
               name_listed(cJSON_GetObjectItemCaseSensitive(a, "enabledMcpjsonServers"), e->name);
}

/* ---- what an entry runs ------------------------------------------------------------------------ */

bool server_entry_is_remote(const ServerEntry *entry) {
        const cJSON *e = entry->json;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");

        if (!!cJSON_GetObjectItemCaseSensitive(e, "url") || cJSON_GetObjectItemCaseSensitive(e, "serverUrl"))
                return true;
        return cJSON_IsString(type) && !streq(type->valuestring, "stdio");
}

static bool has_variables(const char *s) {
        return strstr(s, "${") != NULL;
}

/* argv[0] without a slash, found in PATH (the entry's own PATH if it sets one): the shim runs
 * under a service manager whose PATH may be shorter than the user's shell's. */
static char *resolve_command(const char *cmd, char **env) {
        const char *path = getenv("PATH");
        _cleanup_free_ char *copy = NULL;
        char *save = NULL;

        if (strchr(cmd, '/'))
                return strdup(cmd);
        for (char **e = env; e && *e; e++)
                if (strncmp(*e, "PATH=", 5) == 0)
                        path = *e + 5;
        copy = strdup(path ?: "/usr/local/bin:/usr/bin:/bin");
        if (!copy)
                return NULL;
        for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
                char *full;
                if (dir[0] != '/' || asprintf(&full, "%s/%s", dir, cmd) < 0)
                        continue;
                if (access(full, X_OK) == 0)
                        return full;
                free(full);
        }
        return strdup(cmd); /* not found: starting it will say so */
}

/* Why an entry cannot be imported as it is, or NULL; fills argv, env and cwd otherwise. */
const char *server_entry_command(const ServerEntry *e, char ***ret_argv, char ***ret_env, char **ret_cwd) {
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(e->json, "command");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e->json, "args");
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(e->json, "env");
        const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(e->json, "cwd");
        const cJSON *disabled = cJSON_GetObjectItemCaseSensitive(e->json, "disabled");
        _cleanup_strv_free_ char **argv = NULL, **envv = NULL;
        size_t n = 0;
        const cJSON *it;

        if (!cJSON_IsString(cmd) || !cmd->valuestring[0])
                return "it has no command";
        if (cJSON_IsTrue(disabled))
                return "it is disabled in the client";
        if (!!cJSON_GetObjectItemCaseSensitive(e->json, "envFile"))
                return "it reads an envFile, which only the client reads";
        if (args && !cJSON_IsArray(args))
                return "its args are not a list";
        if (env && !cJSON_IsObject(env))
                return "its env is not an object";
        if (cwd && !cJSON_IsString(cwd))
                return "its cwd is not a string";
        if (has_variables(cmd->valuestring) || (cwd && has_variables(cwd->valuestring)))
                return "it uses ${...} variables, which only the client expands";
        argv = calloc((size_t) cJSON_GetArraySize(args) + 2, sizeof(char *));
        envv = calloc((size_t) cJSON_GetArraySize(env) + 1, sizeof(char *));
        if (!argv || !envv || !(argv[0] = strdup(cmd->valuestring))) /* resolved below; set now, so argv frees whole */
                return "out of memory";
        cJSON_ArrayForEach (it, args) {
                if (!cJSON_IsString(it))
                        return "its args are not all strings";
                if (has_variables(it->valuestring))
                        return "it uses ${...} variables, which only the client expands";
                if (!(argv[++n] = strdup(it->valuestring)))
                        return "out of memory";
        }
        n = 0;
        cJSON_ArrayForEach (it, env) {
                size_t k = strlen(it->string);
                if (!cJSON_IsString(it))
                        return "its env values are not all strings";
                if (has_variables(it->valuestring))
                        return "it uses ${...} variables, which only the client expands";
                if (k == 0 ||
                    strspn(it->string, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != k ||
                    (it->string[0] >= '0' && it->string[0] <= '9'))
                        return "its env names a variable that is not a valid name";
                if (asprintf(&envv[n++], "%s=%s", it->string, it->valuestring) < 0)
                        return "out of memory";
        }
        {
                char *resolved = resolve_command(cmd->valuestring, envv);
                if (!resolved)
                        return "out of memory";
                free(argv[0]);
                argv[0] = resolved;
        }
        if (cwd && cwd->valuestring[0] != '/') {
                const char *base = e->default_cwd;
                _cleanup_free_ char *dir = NULL;
                if (!base) {
                        dir = strdup(e->config->path);
                        base = dir ? dirname(dir) : ".";
                }
                if (asprintf(ret_cwd, "%s/%s", base, cwd->valuestring) < 0)
                        return "out of memory";
        } else if (!(*ret_cwd = cwd              ? strdup(cwd->valuestring)
                                : e->default_cwd ? strdup(e->default_cwd)
                                                 : NULL) &&
                   (cwd || e->default_cwd))
                return "out of memory";
        *ret_argv = TAKE_PTR(argv);
        *ret_env = TAKE_PTR(envv);
        return NULL;
}

bool server_entry_is_mcp_lazy(const ServerEntry *e) {
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(e->json, "command");
        const char *slash;

        if (!cJSON_IsString(cmd))
                return false;
        slash = strrchr(cmd->valuestring, '/');
        return streq(slash ? slash + 1 : cmd->valuestring, "mcp-lazy");
}

/* ---- rewriting an entry ------------------------------------------------------------------------ */

typedef struct Out {
        char *s;
        size_t len;
        bool oom;
} Out;

static void out_add(Out *o, const char *s, size_t n) {
        char *p;

        if (o->oom)
                return;
        p = realloc(o->s, o->len + n + 1);
        if (!p) {
                o->oom = true;
                return;
        }
        memcpy(p + o->len, s, n);
        o->len += n;
        p[o->len] = 0;
        o->s = p;
}

static void out_str(Out *o, const char *s) {
        out_add(o, s, strlen(s));
}

static void out_json_string(Out *o, const char *s) {
        _cleanup_json_ cJSON *j = cJSON_CreateString(s);
        _cleanup_free_ char *t = j ? cJSON_PrintUnformatted(j) : NULL;

        if (!t)
                o->oom = true;
        else
                out_str(o, t);
}

typedef struct Layout {
        bool one_line, args_inline;
        const char *nl, *inner, *unit, *sep;
} Layout;

/* "command": "...", "args": [...] laid out like the entry around it. */
static void out_command(Out *o, const Layout *l, const char *command, char *const *args) {
        out_str(o, "\"command\"");
        out_str(o, l->sep);
        out_json_string(o, command);
        out_str(o, ",");
        if (l->one_line)
                out_str(o, " ");
        else {
                out_str(o, l->nl);
                out_str(o, l->inner);
        }
        out_str(o, "\"args\"");
        out_str(o, l->sep);
        out_str(o, "[");
        for (size_t i = 0; args[i]; i++) {
                if (i > 0)
                        out_str(o, ",");
                if (l->one_line || l->args_inline)
                        out_str(o, i > 0 ? " " : "");
                else {
                        out_str(o, l->nl);
                        out_str(o, l->inner);
                        out_str(o, l->unit);
                }
                out_json_string(o, args[i]);
        }
        if (!l->one_line && !l->args_inline) {
                out_str(o, l->nl);
                out_str(o, l->inner);
        }
        out_str(o, "]");
}

int client_config_replace_entry(ServerEntry *e, const char *command, char *const *args) {
        const ClientConfig *c = e->config;
        const char *t = c->scan; /* scanned without comments; bytes copied from c->text */
        _cleanup_free_ char *base = NULL, *unit = NULL, *inner = NULL, *sep = NULL;
        Member m = {};
        size_t p = e->value_start, n;
        bool one_line = memchr(t + e->value_start, '\n', e->value_end - e->value_start) == NULL;
        bool args_inline = false, first = true, padded, command_done = false;
        const char *nl = "\n";
        Out o = {};
        int r;

        /* Layout of the entry as it is: indentation, its unit, separators, line ends. */
        for (n = e->line_start; n < c->len && (t[n] == ' ' || t[n] == '\t'); n++)
                ;
        base = strndup(t + e->line_start, n - e->line_start);
        if (e->value_end > 0 && memchr(t, '\r', c->len))
                nl = "\r\n";
        padded = one_line && t[e->value_start + 1] == ' ';
        while ((r = object_next(t, c->len, &p, &m)) > 0) {
                if (!sep)
                        sep = strndup(t + m.key_end, m.value_start - m.key_end);
                if (!unit && !one_line) {
                        size_t ls = m.key_start, k;
                        while (ls > 0 && t[ls - 1] != '\n')
                                ls--;
                        k = m.key_start - ls;
                        if (k > n - e->line_start && strspn(t + ls, " \t") >= k)
                                unit = strndup(t + ls + (n - e->line_start), k - (n - e->line_start));
                }
                if (streq(m.key, "args"))
                        args_inline = !memchr(t + m.value_start, '\n', m.value_end - m.value_start);
        }
        free(m.key);
        m.key = NULL;
        if (r < 0 || !base)
                return -ENOMEM;
        if (!unit)
                unit = strdup(strchr(base, '\t') ? "\t" : "  ");
        if (!sep)
                sep = strdup(": ");
        if (!unit || !sep || asprintf(&inner, "%s%s", base, unit) < 0)
                return -ENOMEM;

        Layout lay = {
                .one_line = one_line, .args_inline = args_inline, .nl = nl, .inner = inner, .unit = unit, .sep = sep};
        out_str(&o, one_line ? (padded ? "{ " : "{") : "{");
        p = e->value_start;
        while ((r = object_next(t, c->len, &p, &m)) > 0) {
                bool is_command = streq(m.key, "command");
                if (!is_command && (streq(m.key, "args") || streq(m.key, "env") || streq(m.key, "cwd")))
                        continue;
                if (!first)
                        out_str(&o, one_line ? ", " : ",");
                first = false;
                if (!one_line) {
                        out_str(&o, nl);
                        out_str(&o, inner);
                }
                if (!is_command) {
                        out_add(&o, c->text + m.key_start, m.value_end - m.key_start);
                        continue;
                }
                if (command_done)
                        continue; /* refused by the loader: never two */
                out_command(&o, &lay, command, args);
                command_done = true;
        }
        if (r >= 0 && !command_done) { /* an entry without a command gets one, last */
                if (!first)
                        out_str(&o, one_line ? ", " : ",");
                if (!one_line) {
                        out_str(&o, nl);
                        out_str(&o, inner);
                }
                out_command(&o, &lay, command, args);
        }
        free(m.key);
        if (r < 0)
                o.oom = true;
        if (one_line)
                out_str(&o, padded ? " }" : "}");
        else {
                out_str(&o, nl);
                out_str(&o, base);
                out_str(&o, "}");
        }
        if (o.oom) {
                free(o.s);
                return -ENOMEM;
        }
        free(e->replacement);
        e->replacement = o.s;
        return 0;
}

static int cmp_entry(const void *a, const void *b) {
        const ServerEntry *x = *(ServerEntry *const *) a, *y = *(ServerEntry *const *) b;
        return x->value_start < y->value_start ? -1 : x->value_start > y->value_start;
}

int client_config_render(const ClientConfig *c, char **ret, size_t *ret_len) {
        _cleanup_free_ const ServerEntry **order = calloc(c->n_entries + 1, sizeof *order);
        size_t n = 0, at = 0;
        Out o = {};

        if (!order)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_entries; i++)
                if (c->entries[i].replacement)
                        order[n++] = &c->entries[i];
        qsort(order, n, sizeof *order, cmp_entry);
        out_str(&o, "");
        for (size_t i = 0; i < n; i++) {
                out_add(&o, c->text + at, order[i]->value_start - at);
                out_str(&o, order[i]->replacement);
                at = order[i]->value_end;
        }
        out_add(&o, c->text + at, c->len - at);
        if (o.oom) {
                free(o.s);
                return -ENOMEM;
        }
        *ret = o.s;
        *ret_len = o.len;
        return 0;
}
