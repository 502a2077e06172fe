/* mcp-lazy import: read the user's MCP client configs, ask each stdio server what it offers, write
 * the manifest, point the config entries at mcp-lazy, enable the sockets. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client-config.h"
#include "duration.h"
#include "envfile.h"
#include "import.h"
#include "macros.h"
#include "manifest.h"
#include "printable.h"
#include "undo.h"

typedef enum EntryState {
        ENTRY_CANDIDATE,
        ENTRY_REMOTE,
        ENTRY_SKIPPED, /* already mcp-lazy, or not something import can run */
        ENTRY_FAILED,
        ENTRY_IMPORTED,
} EntryState;

/* One server to start: entries with the same command, env, cwd and capabilities share it. */
typedef struct Target {
        char *backend;
        char **argv, **env;
        char *cwd;
        cJSON *caps;
        McpDiscovery *d;
        char *error;
        bool failed;
} Target;

typedef struct Item {
        ServerEntry *entry;
        EntryState state;
        char *why;
        Target *target;
} Item;

typedef struct Import {
        const char *manifest_path;
        bool manifest_is_default, dry_run, enable;
        const cJSON *caps_override;
        uint64_t timeout_usec;
        ClientConfig **configs;
        size_t n_configs;
        Item *items;
        size_t n_items;
        Target **targets;
        size_t n_targets;
        ManifestDoc *doc;
        char *self;
        unsigned failures;
} Import;

static void target_free(Target *t) {
        if (!t)
                return;
        free(t->backend);
        strv_free(t->argv);
        strv_free(t->env);
        free(t->cwd);
        cJSON_Delete(t->caps);
        mcp_discovery_free(t->d);
        free(t->error);
        free(t);
}

static void import_done(Import *im) {
        for (size_t i = 0; i < im->n_items; i++)
                free(im->items[i].why);
        free(im->items);
        for (size_t i = 0; i < im->n_targets; i++)
                target_free(im->targets[i]);
        free(im->targets);
        for (size_t i = 0; i < im->n_configs; i++)
                client_config_free(im->configs[i]);
        free(im->configs);
        manifest_doc_free(im->doc);
        free(im->self);
}

/* What a client config or a server said (names, arguments, errors with their stderr lines), printed
 * without the escape sequences it may hold: each line made printable, the newlines kept. */
#define SHOWN_MAX 4096
static void print_printable(const char *s) {
        while (s) {
                const char *nl = strchr(s, '\n');
                _cleanup_free_ char *line = strndup(s, nl ? (size_t) (nl - s) : strlen(s));
                _cleanup_free_ char *shown = line ? text_printable(line, SHOWN_MAX) : NULL;

                fputs(shown ?: "?", stdout);
                if (nl)
                        fputc('\n', stdout);
                s = nl ? nl + 1 : NULL;
        }
}

_printf_(3, 4) static void item_set(Item *it, EntryState state, const char *fmt, ...) {
        va_list ap;

        it->state = state;
        free(it->why);
        va_start(ap, fmt);
        if (vasprintf(&it->why, fmt, ap) < 0)
                it->why = NULL;
        va_end(ap);
}

/* ---- planning: which servers to start, under which backend names ------------------------------- */

static bool strv_equal(char *const *a, char *const *b) {
        for (; a && b && *a && *b; a++, b++)
                if (!streq(*a, *b))
                        return false;
        return (!a || !*a) && (!b || !*b);
}

static bool same_server(const Target *t, char *const *argv, char *const *env, const char *cwd, const cJSON *caps) {
        return strv_equal(t->argv, argv) && strv_equal(t->env, env) &&
               ((!t->cwd && !cwd) || (t->cwd && cwd && streq(t->cwd, cwd))) && cJSON_Compare(t->caps, caps, true);
}

/* Does the manifest's backend NAME run this very command (so re-importing it replaces it)? */
static bool manifest_backend_runs(const ManifestDoc *doc, const char *name, char *const *argv) {
        const YNode *b = manifest_doc_backend(doc, name), *cmd = ynode_get(b, "command");
        size_t i = 0;

        if (!cmd || cmd->kind != YNODE_SEQUENCE)
                return false;
        for (; i < cmd->n_items && argv[i]; i++)
                if (cmd->items[i]->kind != YNODE_SCALAR || !streq(cmd->items[i]->value, argv[i]))
                        return false;
        return i == cmd->n_items && !argv[i];
}

static bool scalar_seq_equal(const YNode *seq, char *const *v) {
        size_t i = 0;

        if (!seq)
                return !v || !v[0];
        if (seq->kind != YNODE_SEQUENCE)
                return false;
        for (; i < seq->n_items && v && v[i]; i++)
                if (seq->items[i]->kind != YNODE_SCALAR || !streq(seq->items[i]->value, v[i]))
                        return false;
        return i == seq->n_items && (!v || !v[i]);
}

/* The whole env backend b runs with: the manifest's env over what its secrets file holds (when the
 * manifest names some: secret_env); NULL when that file cannot be read. */
static char **backend_env(const ManifestDoc *doc, const char *name, const YNode *b) {
        const YNode *e = ynode_get(b, "env");
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *err = NULL;
        size_t n = 0;

        if (ynode_get(b, "secret_env") && secrets_manifest_is_system(doc->path) &&
            secrets_read(doc->path, name, &env, &err) < 0)
                return NULL;
        for (char **v = env; v && *v; v++)
                n++;
        for (size_t k = 0; e && e->kind == YNODE_MAPPING && k + 1 < e->n_items; k += 2) {
                const YNode *key = e->items[k], *val = e->items[k + 1];
                char **l = realloc(env, (n + 2) * sizeof(char *));
                if (!l)
                        return NULL;
                env = l;
                env[n] = NULL;
                if (val->kind != YNODE_SCALAR || asprintf(&env[n], "%s=%s", key->value, val->value) < 0)
                        return NULL;
                /* Over the file's value of the same name. */
                for (size_t i = 0; i < n; i++)
                        if (strncmp(env[i], env[n], key->length + 1) == 0) {
                                free(env[i]);
                                env[i] = env[n];
                                env[n--] = NULL;
                                break;
                        }
                env[++n] = NULL;
        }
        if (!env)
                env = calloc(1, sizeof(char *));
        return TAKE_PTR(env);
}

/* The same variables with the same values, in any order. */
static bool env_equal(char *const *a, char *const *b) {
        size_t na = 0, nb = 0;

        for (char *const *v = a; v && *v; v++)
                na++;
        for (char *const *v = b; v && *v; v++)
                nb++;
        if (na != nb)
                return false;
        for (char *const *v = a; v && *v; v++) {
                bool found = false;
                for (char *const *w = b; w && *w && !found; w++)
                        found = streq(*v, *w);
                if (!found)
                        return false;
        }
        return true;
}

/* A backend of the manifest that runs exactly this (command, env, cwd): importing it again
 * refreshes that backend instead of adding a twin whose tool names would clash. */
static const char *manifest_backend_running(const ManifestDoc *doc, char *const *argv, char *const *env,
                                            const char *cwd) {
        const YNode *backends = ynode_get(doc->root, "backends");

        if (!backends || backends->kind != YNODE_MAPPING)
                return NULL;
        for (size_t i = 0; i + 1 < backends->n_items; i += 2) {
                const YNode *b = backends->items[i + 1], *c = ynode_get(b, "cwd");
                _cleanup_strv_free_ char **has = NULL;

                if (!scalar_seq_equal(ynode_get(b, "command"), argv) ||
                    !(!c ? !cwd : cwd && c->kind == YNODE_SCALAR && streq(c->value, cwd)))
                        continue;
                has = backend_env(doc, backends->items[i]->value, b);
                if (has && env_equal(has, env))
                        return backends->items[i]->value;
        }
        return NULL;
}

static bool name_taken(const Import *im, const char *name) {
        for (size_t i = 0; i < im->n_targets; i++)
                if (streq(im->targets[i]->backend, name))
                        return true;
        return false;
}

/* A unit-safe name from the server's: [A-Za-z0-9_.-], up to 64, not starting with . or -, unique. */
static char *backend_name_for(const Import *im, const char *server, char *const *argv) {
        char base[BACKEND_NAME_MAX + 1];
        size_t n = 0;

        for (const char *s = server; *s && n < BACKEND_NAME_MAX; s++) {
                char c = *s;
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '.' || c == '-'))
                        c = '-';
                if (n == 0 && (c == '.' || c == '-'))
                        continue;
                if (c == '-' && n > 0 && base[n - 1] == '-')
                        continue;
                base[n++] = c;
        }
        while (n > 0 && base[n - 1] == '-')
                n--;
        if (n == 0)
                n = (size_t) snprintf(base, sizeof base, "server");
        base[n] = 0;
        for (unsigned k = 1; k < 1000; k++) {
                char cand[BACKEND_NAME_MAX + 1], suffix[16] = "";
                if (k > 1)
                        snprintf(suffix, sizeof suffix, "-%u", k);
                snprintf(cand, sizeof cand, "%.*s%s", (int) (BACKEND_NAME_MAX - strlen(suffix)), base, suffix);
                if (name_taken(im, cand))
                        continue;
                if (manifest_doc_backend(im->doc, cand) && !manifest_backend_runs(im->doc, cand, argv))
                        continue;
                return strdup(cand);
        }
        return NULL;
}

static int import_plan(Import *im) {
        for (size_t i = 0; i < im->n_items; i++) {
                Item *it = &im->items[i];
                const ServerEntry *e = it->entry;
                _cleanup_strv_free_ char **argv = NULL, **env = NULL;
                _cleanup_free_ char *cwd = NULL;
                _cleanup_json_ cJSON *caps = NULL;
                const char *why;
                Target *t = NULL;

                if (server_entry_is_remote(e)) {
                        item_set(it, ENTRY_REMOTE, "a remote server: left as it is");
                        continue;
                }
                if (server_entry_is_mcp_lazy(e)) {
                        item_set(it, ENTRY_SKIPPED, "already goes through mcp-lazy");
                        continue;
                }
                if (!server_entry_approved(e)) {
                        item_set(it, ENTRY_SKIPPED,
                                 "not imported: Claude Code has not approved this project's server (approve it there, "
                                 "with /mcp, or import it with --from %s); left as it is",
                                 e->config->path);
                        continue;
                }
                why = server_entry_command(e, &argv, &env, &cwd);
                if (why) {
                        item_set(it, ENTRY_SKIPPED, "not imported: %s; left as it is", why);
                        continue;
                }
                caps = im->caps_override ? cJSON_Duplicate(im->caps_override, true)
                                         : cJSON_Parse(client_info_find(e->config->client)->capabilities);
                if (!caps)
                        return -ENOMEM;
                for (size_t k = 0; k < im->n_targets && !t; k++)
                        if (same_server(im->targets[k], argv, env, cwd, caps))
                                t = im->targets[k];
                if (!t) {
                        Target **l = realloc(im->targets, (im->n_targets + 1) * sizeof *l);
                        if (!l)
                                return -ENOMEM;
                        im->targets = l;
                        t = calloc(1, sizeof *t);
                        if (!t)
                                return -ENOMEM;
                        im->targets[im->n_targets] = t;
                        const char *known = manifest_backend_running(im->doc, argv, env, cwd);
                        t->backend =
                                known && !name_taken(im, known) ? strdup(known) : backend_name_for(im, e->name, argv);
                        im->n_targets++;
                        if (!t->backend)
                                return -ENOMEM;
                        t->argv = TAKE_PTR(argv);
                        t->env = TAKE_PTR(env);
                        t->cwd = TAKE_PTR(cwd);
                        t->caps = TAKE_PTR(caps);
                }
                it->target = t;
        }
        return 0;
}

/* ---- discovery --------------------------------------------------------------------------------- */

/* A tool name the manifest (or this import) already has for another backend. */
static const char *tool_conflict(const Import *im, const Target *t, const char **ret_owner) {
        const cJSON *tool;

        cJSON_ArrayForEach (tool, t->d->tools) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(tool, "name");
                const char *owner;
                if (!cJSON_IsString(name))
                        continue;
                owner = manifest_doc_tool_owner(im->doc, name->valuestring);
                if (owner && !streq(owner, t->backend)) {
                        *ret_owner = owner;
                        return name->valuestring;
                }
                for (size_t i = 0; i < im->n_targets && im->targets[i] != t; i++) {
                        const Target *o = im->targets[i];
                        const cJSON *ot;
                        if (!o->d)
                                continue;
                        cJSON_ArrayForEach (ot, o->d->tools)
                                if (cJSON_Compare(cJSON_GetObjectItemCaseSensitive(ot, "name"), name, true)) {
                                        *ret_owner = o->backend;
                                        return name->valuestring;
                                }
                }
        }
        return NULL;
}

static int store_command(ManifestDoc *doc, const Target *t);

/* The server alone in a manifest: does that read back? A tool name MCP does not allow, a schema
 * nested past the manifest's 64 levels...: then this server is not imported, and the others are. */
static int target_check(const Import *im, Target *t) {
        _cleanup_(manifest_doc_freep) ManifestDoc *scratch = NULL;
        _cleanup_free_ char *text = NULL, *err = NULL;
        size_t len;
        int r;

        r = manifest_doc_new(im->manifest_path, &scratch);
        if (r >= 0)
                r = store_command(scratch, t);
        if (r >= 0)
                r = import_store_backend(scratch, t->backend, t->d, t->caps, true);
        if (r == -EINVAL && !err)
                err = strdup("it sends JSON nested deeper than a manifest takes (64 levels), or with two equal keys");
        if (r >= 0)
                r = manifest_doc_emit(scratch, &text, &len, &err);
        if (r >= 0)
                return 0;
        t->failed = true;
        /* The reader's positions are in the scratch text, not in any file: leave them out. */
        for (char *line = err, *next; line; line = next) {
                size_t plen = strlen(im->manifest_path);
                next = strchr(line, '\n');
                if (strncmp(line, im->manifest_path, plen) == 0 && line[plen] == ':') {
                        char *msg = strstr(line + plen + 1, ": ");
                        if (msg && (!next || msg < next))
                                memmove(line, msg + 2, strlen(msg + 2) + 1);
                        next = strchr(line, '\n');
                }
                if (next)
                        *next++ = ';', *next = ' ';
        }
        if (asprintf(&t->error, "what it lists does not fit a manifest: %s", err ?: strerror(-r)) < 0)
                t->error = NULL;
        return r;
}

/* Under the system manager, the env values that will go into the server's secrets file: one that
 * file cannot hold (systemd would drop the whole file) fails this server alone, named, never shown. */
static int target_check_secrets(const Import *im, Target *t) {
        if (!secrets_wanted(im->manifest_path))
                return 0;
        for (char **v = t->env; v && *v; v++) {
                const char *reason = NULL;
                size_t n = strcspn(*v, "=");
                int r;

                if (secrets_env_name_stays(*v, n))
                        continue;
                r = envfile_assignment_check(*v, &reason);
                if (r < 0) {
                        t->failed = true;
                        if (asprintf(&t->error, "its env %.*s cannot go into its secrets file: %s", (int) n, *v,
                                     reason) < 0)
                                t->error = NULL;
                        return r;
                }
        }
        return 0;
}

static void target_discover(Import *im, Target *t) {
        McpServerCommand cmd = {.argv = t->argv, .env = t->env, .cwd = t->cwd};
        const char *owner = NULL, *clash;
        size_t n;
        int r;

        if (target_check_secrets(im, t) < 0)
                return;

        printf("Starting '%s':", t->backend);
        for (char **a = t->argv; *a; a++) {
                fputc(' ', stdout);
                print_printable(*a);
        }
        printf("\n");
        fflush(stdout);
        r = mcp_discover(&cmd, t->caps, im->timeout_usec, &t->d, &t->error);
        if (r < 0) {
                t->failed = true;
                if (!t->error)
                        t->error = strdup(strerror(-r));
                return;
        }
        clash = tool_conflict(im, t, &owner);
        if (clash) {
                t->failed = true;
                if (asprintf(&t->error,
                             "its tool '%s' is already served by backend '%s' of the manifest; import it into a "
                             "manifest of its own with --manifest",
                             clash, owner) < 0)
                        t->error = NULL;
                return;
        }
        if (target_check(im, t) < 0)
                return;
        n = (size_t) cJSON_GetArraySize(t->d->tools);
        printf("  ");
        print_printable(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t->d->server_info, "name")) ?: "?");
        printf(" ");
        print_printable(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t->d->server_info, "version")) ?: "");
        printf(": %zu tool%s", n, n == 1 ? "" : "s");
        if (t->d->resources)
                printf(", %d resource(s)", cJSON_GetArraySize(t->d->resources));
        if (t->d->resource_templates)
                printf(", %d resource template(s)", cJSON_GetArraySize(t->d->resource_templates));
        if (t->d->prompts)
                printf(", %d prompt(s)", cJSON_GetArraySize(t->d->prompts));
        printf("\n");
}

static int store_command(ManifestDoc *doc, const Target *t) {
        _cleanup_json_ cJSON *argv = cJSON_CreateArray(), *env = NULL;
        int r;

        for (char **a = t->argv; argv && *a; a++)
                if (!cJSON_AddItemToArray(argv, cJSON_CreateString(*a)))
                        return -ENOMEM;
        if (!argv)
                return -ENOMEM;
        if (t->env && t->env[0]) {
                env = cJSON_CreateObject();
                for (char **e = t->env; env && *e; e++) {
                        _cleanup_free_ char *k = strndup(*e, strcspn(*e, "="));
                        if (!k || !cJSON_AddStringToObject(env, k, strchr(*e, '=') + 1))
                                return -ENOMEM;
                }
                if (!env)
                        return -ENOMEM;
        }
        r = manifest_doc_set_backend_key(doc, t->backend, "command", TAKE_PTR(argv));
        if (r >= 0)
                r = manifest_doc_set_backend_key(doc, t->backend, "env", TAKE_PTR(env));
        if (r >= 0)
                r = manifest_doc_set_backend_key(doc, t->backend, "cwd", t->cwd ? cJSON_CreateString(t->cwd) : NULL);
        /* The era import found (it probes as a dual-era client): the shim need not probe again. */
        if (r >= 0 && t->d && t->d->era)
                r = manifest_doc_set_backend_key(doc, t->backend, "protocol", cJSON_CreateString(t->d->era));
        return r;
}

/* ---- the client configs ------------------------------------------------------------------------ */

/* Discovery takes up to --timeout per server, and a running client rewrites its config when it likes
 * (~/.claude.json on every session): what we rewrite must still be what we read, or its change is lost. */
static int config_unchanged(const ClientConfig *c) {
        _cleanup_free_ char *now = NULL;
        struct stat st;
        size_t len;
        int r = read_file_stat(c->path, c->len + 1, &now, &len, &st);

        if (r == -EFBIG || (r >= 0 && (len != c->len || memcmp(now, c->text, len) != 0 || st.st_dev != c->st.st_dev ||
                                       st.st_ino != c->st.st_ino)))
                return -ESTALE;
        return r < 0 ? r : 0;
}

static int rewrite_config(Import *im, ClientConfig *c) {
        _cleanup_free_ char *text = NULL;
        bool any = false;
        size_t len;
        int r;

        for (size_t i = 0; i < im->n_items; i++) {
                Item *it = &im->items[i];
                char *args[5] = {(char *) "--backend", NULL, NULL, NULL, NULL};

                if (it->entry->config != c || !it->target || it->target->failed)
                        continue;
                args[1] = it->target->backend;
                if (!im->manifest_is_default) {
                        args[2] = (char *) "--manifest";
                        args[3] = (char *) im->manifest_path;
                }
                r = client_config_replace_entry(it->entry, im->self, args);
                if (r < 0)
                        return r;
                any = true;
        }
        if (!any)
                return 0;
        r = client_config_render(c, &text, &len);
        if (r < 0)
                return r;
        if (im->dry_run) {
                printf("--- %s (would be rewritten)\n%s", c->path, text);
                return 0;
        }
        r = config_unchanged(c);
        if (r < 0)
                return r;
        r = undo_save_and_write(c->path, c->text, c->len, text, len, c->st.st_mode & 07777);
        if (r < 0)
                return r;
        for (size_t i = 0; i < im->n_items; i++)
                if (im->items[i].entry->config == c && im->items[i].target && !im->items[i].target->failed)
                        im->items[i].state = ENTRY_IMPORTED;
        return 1;
}

/* ---- the command ------------------------------------------------------------------------------- */

static int enable_imported(const Import *im) {
        _cleanup_strv_free_ char **names = calloc(im->n_targets + 1, sizeof(char *));
        size_t n = 0;

        if (!names)
                return -ENOMEM;
        for (size_t i = 0; i < im->n_targets; i++)
                if (!im->targets[i]->failed && !(names[n++] = strdup(im->targets[i]->backend)))
                        return -ENOMEM;
        return enable_sockets(names);
}

static void help(void) {
        printf("Usage: mcp-lazy import [OPTIONS]\n"
               "       mcp-lazy import --undo [--force]\n\n"
               "Reads your MCP client configs, starts each stdio server once to read what it offers, writes\n"
               "it into the manifest and points each entry at 'mcp-lazy --backend NAME'.\n\n"
               "  --client NAME        claude-code, claude-desktop, vscode or cursor (default: every config found)\n"
               "  --from FILE          a config file of any of those shapes (repeatable)\n"
               "  --manifest FILE      default: $XDG_CONFIG_HOME/mcp-lazy/manifest.yaml (root: /etc/mcp-lazy/)\n"
               "  --capabilities JSON  the client capabilities to declare (default: what the client declares)\n"
               "  --timeout DURATION   how long a server may take to answer (default 60s)\n"
               "  --no-enable          do not enable the sockets\n"
               "  --dry-run            print what would be written and changed; change nothing\n"
               "  --undo               put back every client config import changed\n"
               "  --force              with --undo: also configs changed since\n");
}

static bool is_project_mcp_json(const char *path) {
        _cleanup_free_ char *cwd = getcwd(NULL, 0), *mine = NULL;
        return cwd && asprintf(&mine, "%s/.mcp.json", cwd) >= 0 && streq(path, mine);
}

/* One config: read and added, or its problem said (and counted); -ENOMEM only. */
static int load_config(Import *im, const char *path, const char *client) {
        _cleanup_free_ char *err = NULL;
        ClientConfig *c = NULL, **l;
        int r = client_config_load(path, client, &c, &err);

        if (r < 0) {
                fprintf(stderr, "mcp-lazy: %s; left untouched\n", err ?: strerror(-r));
                im->failures++;
                return 0;
        }
        l = realloc(im->configs, (im->n_configs + 1) * sizeof *l);
        if (!l) {
                client_config_free(c);
                return -ENOMEM;
        }
        im->configs = l;
        im->configs[im->n_configs++] = c;
        return 0;
}

static int load_configs(Import *im, char **from, const char *client) {
        _cleanup_strv_free_ char **paths = NULL, **clients = NULL;
        int r = 0;

        if (from && from[0]) {
                for (char **f = from; r >= 0 && *f; f++)
                        r = load_config(im, *f, client);
                return r;
        }
        r = client_config_paths(client, &paths, &clients);
        if (r == -ENXIO) {
                fprintf(stderr, "mcp-lazy: HOME is not set; name a config with --from FILE\n");
                return r;
        }
        if (r < 0)
                return r;
        if (r == 0) {
                fprintf(stderr,
                        "mcp-lazy: no MCP client config found%s%s%s (looked for ~/.claude.json, ./.mcp.json, "
                        "~/.config/Claude/claude_desktop_config.json, ~/.config/Code/User/mcp.json, "
                        "./.vscode/mcp.json, "
                        "~/.cursor/mcp.json); name one with --from FILE\n",
                        client ? " for '" : "", client ?: "", client ? "'" : "");
                return -ENOENT;
        }
        r = 0;
        for (size_t i = 0; r >= 0 && paths[i]; i++) {
                size_t n = im->n_configs;
                r = load_config(im, paths[i], clients[i]);
                /* The current directory's .mcp.json is a project's, perhaps just cloned: its servers
                 * run only as far as Claude Code approved them (--from names one to take as it is). */
                if (r >= 0 && im->n_configs > n && is_project_mcp_json(paths[i]))
                        r = client_config_load_approvals(im->configs[n]);
        }
        return r;
}

static int collect_items(Import *im) {
        size_t n = 0;

        for (size_t i = 0; i < im->n_configs; i++)
                n += im->configs[i]->n_entries;
        im->items = calloc(n + 1, sizeof *im->items);
        if (!im->items)
                return -ENOMEM;
        for (size_t i = 0; i < im->n_configs; i++)
                for (size_t k = 0; k < im->configs[i]->n_entries; k++)
                        im->items[im->n_items++].entry = &im->configs[i]->entries[k];
        return 0;
}

static void report(const Import *im) {
        printf("\n%-24s %-16s %s\n", "SERVER", "CLIENT", "RESULT");
        for (size_t i = 0; i < im->n_items; i++) {
                const Item *it = &im->items[i];
                const ServerEntry *e = it->entry;
                _cleanup_free_ char *label = NULL, *name = text_printable(e->name, SHOWN_MAX);

                if (asprintf(&label, "%s%s%s", name ?: "?", strchr(e->where, '[') ? " (project)" : "", "") < 0)
                        label = NULL;
                printf("%-24s %-16s ", label ?: "?", e->config->client);
                if (it->target && it->target->failed) {
                        printf("FAILED, left as it is: ");
                        print_printable(it->target->error ?: "?");
                        printf("\n");
                } else if (it->target && it->state == ENTRY_IMPORTED)
                        printf("-> backend '%s'\n", it->target->backend);
                else if (it->target)
                        printf("-> backend '%s'%s\n", it->target->backend,
                               im->dry_run ? " (dry run)" : " (config not rewritten)");
                else {
                        print_printable(it->why ?: "?");
                        printf("\n");
                }
        }
}

/* The variables a backend keeps from its secrets file that the config imported now does not set (an
 * earlier import's, or written by hand): import no longer revokes them, so it says so. */
static void report_kept_secrets(const Import *im) {
        for (size_t i = 0; i < im->n_targets; i++) {
                const Target *t = im->targets[i];
                const YNode *se = t->failed ? NULL : ynode_get(manifest_doc_backend(im->doc, t->backend), "secret_env");
                _cleanup_free_ char *path = NULL, *kept = NULL;

                for (size_t k = 0; se && se->kind == YNODE_SEQUENCE && k < se->n_items; k++) {
                        char *l = NULL;
                        if (se->items[k]->kind != YNODE_SCALAR || strv_env_get(t->env, se->items[k]->value))
                                continue;
                        if (asprintf(&l, "%s%s%s", kept ?: "", kept ? ", " : "", se->items[k]->value) < 0)
                                return;
                        free(kept);
                        kept = l;
                }
                if (kept && secrets_path(im->doc->path, t->backend, &path) >= 0)
                        printf("Backend '%s' keeps %s from %s, which this config does not set (an earlier import's, or "
                               "written by hand): remove them there to revoke them.\n",
                               t->backend, kept, path);
        }
}

/* Every discovered server into the manifest; 0 when at least one made it (or there were none). */
static int import_store_all(Import *im) {
        bool any = im->n_targets == 0;
        int r;

        for (size_t i = 0; i < im->n_targets; i++) {
                Target *t = im->targets[i];
                if (t->failed) {
                        im->failures++;
                        continue;
                }
                r = store_command(im->doc, t);
                if (r >= 0)
                        r = import_store_backend(im->doc, t->backend, t->d, t->caps, false);
                if (r < 0) {
                        fprintf(stderr, "mcp-lazy: cannot add backend '%s' to the manifest: %s\n", t->backend,
                                strerror(-r));
                        return r;
                }
                any = true;
        }
        if (!any) {
                report(im);
                fprintf(stderr, "mcp-lazy: no server could be imported; nothing was changed\n");
                return -ENOENT;
        }
        return 0;
}

static void import_rewrite_configs(Import *im) {
        for (size_t i = 0; i < im->n_configs; i++) {
                int r = rewrite_config(im, im->configs[i]);
                if (r == -ESTALE) {
                        fprintf(stderr,
                                "mcp-lazy: %s changed while import ran (its client rewrote it?); left as it is now: "
                                "quit the client and run 'mcp-lazy import' again (the manifest has the backends "
                                "already)\n",
                                im->configs[i]->path);
                        im->failures++;
                } else if (r < 0) {
                        fprintf(stderr, "mcp-lazy: cannot rewrite %s: %s; left as it was\n", im->configs[i]->path,
                                strerror(-r));
                        im->failures++;
                } else if (r > 0)
                        printf("Rewrote %s (the original is %s.mcp-lazy-backup; 'mcp-lazy import --undo' puts it "
                               "back)\n",
                               im->configs[i]->path, im->configs[i]->path);
        }
}

static void import_enable(Import *im) {
        if (im->dry_run || im->n_targets == 0)
                return;
        if (im->enable) {
                if (enable_imported(im) < 0)
                        im->failures++;
                return;
        }
        printf("\nNot enabling sockets (--no-enable). Without systemd the entries start their backends\n"
               "directly; with it, share them with:\n  %s enable --now",
               geteuid() == 0 ? "systemctl" : "systemctl --user");
        for (size_t i = 0; i < im->n_targets; i++)
                if (!im->targets[i]->failed)
                        printf(" mcp-lazy@%s.socket", im->targets[i]->backend);
        printf("\n");
}

/* Read, plan, discover, write the manifest, then the configs, then enable: each step only once the
 * one before worked, so a failure leaves everything after it untouched. */
static int import_run(Import *im, char **from, const char *client) {
        _cleanup_free_ char *err = NULL;
        int r;

        r = manifest_doc_load(im->manifest_path, &im->doc, &err);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: %s; nothing was changed\n", err ?: strerror(-r));
                return 1;
        }
        r = load_configs(im, from, client);
        if (r < 0)
                return 1;
        r = collect_items(im);
        if (r >= 0 && im->n_items == 0) {
                if (im->n_configs > 0) /* else each config's problem has been said */
                        fprintf(stderr, "mcp-lazy: no MCP servers in the config%s read; nothing to import\n",
                                im->n_configs == 1 ? "" : "s");
                return 1;
        }
        if (r >= 0)
                r = import_plan(im);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: out of memory\n");
                return 1;
        }
        for (size_t i = 0; i < im->n_targets; i++)
                target_discover(im, im->targets[i]);
        if (import_store_all(im) < 0)
                return 1;
        if (im->n_targets > 0) {
                if (import_write_manifest(im->doc, im->dry_run) < 0)
                        return 1;
                if (!im->dry_run)
                        printf("Wrote %s\n", im->manifest_path);
        }
        import_rewrite_configs(im);
        report(im);
        report_kept_secrets(im);
        import_enable(im);
        return im->failures > 0 ? 1 : 0;
}

int import_main(int argc, char *argv[]) {
        enum {
                ARG_CLIENT = 0x100,
                ARG_FROM,
                ARG_MANIFEST,
                ARG_CAPS,
                ARG_TIMEOUT,
                ARG_NO_ENABLE,
                ARG_DRY_RUN,
                ARG_UNDO,
                ARG_FORCE
        };
        static const struct option options[] = {
                {"client", required_argument, NULL, ARG_CLIENT},
                {"from", required_argument, NULL, ARG_FROM},
                {"manifest", required_argument, NULL, ARG_MANIFEST},
                {"capabilities", required_argument, NULL, ARG_CAPS},
                {"timeout", required_argument, NULL, ARG_TIMEOUT},
                {"no-enable", no_argument, NULL, ARG_NO_ENABLE},
                {"dry-run", no_argument, NULL, ARG_DRY_RUN},
                {"undo", no_argument, NULL, ARG_UNDO},
                {"force", no_argument, NULL, ARG_FORCE},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        _cleanup_(import_done) Import im = {.enable = true, .timeout_usec = MCP_CLIENT_DEFAULT_TIMEOUT_USEC};
        _cleanup_free_ char *manifest = NULL, *default_manifest = NULL;
        _cleanup_json_ cJSON *caps = NULL;
        _cleanup_strv_free_ char **from = NULL;
        const char *client = NULL;
        bool undo = false, force = false;
        size_t n_from = 0;
        int c;

        /* A server that dies while we write to it must not take us along. */
        (void) signal(SIGPIPE, SIG_IGN);
        optind = 0;
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case ARG_CLIENT:
                        if (!client_info_find(optarg)) {
                                fprintf(stderr,
                                        "mcp-lazy: --client takes claude-code, claude-desktop, vscode or cursor\n");
                                return 2;
                        }
                        client = optarg;
                        break;
                case ARG_FROM: {
                        char **l = realloc(from, (n_from + 2) * sizeof(char *));
                        if (!l)
                                return 1;
                        from = l;
                        from[n_from++] = strdup(optarg);
                        from[n_from] = NULL;
                        break;
                }
                case ARG_MANIFEST:
                        free(manifest);
                        manifest = strdup(optarg);
                        break;
                case ARG_CAPS:
                        cJSON_Delete(caps);
                        caps = cJSON_Parse(optarg);
                        if (!cJSON_IsObject(caps)) {
                                fprintf(stderr,
                                        "mcp-lazy: --capabilities takes a JSON object, e.g. '{\"roots\":{}}'\n");
                                return 2;
                        }
                        break;
                case ARG_TIMEOUT:
                        if (parse_timeout_arg(optarg, &im.timeout_usec) < 0) {
                                fprintf(stderr, "mcp-lazy: --timeout takes a duration, e.g. 30s or 2m\n");
                                return 2;
                        }
                        break;
                case ARG_NO_ENABLE:
                        im.enable = false;
                        break;
                case ARG_DRY_RUN:
                        im.dry_run = true;
                        break;
                case ARG_UNDO:
                        undo = true;
                        break;
                case ARG_FORCE:
                        force = true;
                        break;
                case 'h':
                        help();
                        return 0;
                default:
                        return 2;
                }
        if (optind != argc) {
                fprintf(stderr, "mcp-lazy: import takes no arguments besides its options (see --help)\n");
                return 2;
        }
        if (undo)
                return undo_run(force, im.dry_run) < 0 ? 1 : 0;

        default_manifest = manifest_default_path();
        if (!manifest && !default_manifest) {
                fprintf(stderr,
                        "mcp-lazy: neither HOME nor XDG_CONFIG_HOME is set; name the manifest with --manifest\n");
                return 2;
        }
        if (manifest && manifest[0] != '/') {
                char *abs = NULL, *cwd = getcwd(NULL, 0);
                if (!cwd || asprintf(&abs, "%s/%s", cwd, manifest) < 0)
                        abs = NULL;
                free(cwd);
                free(manifest);
                manifest = abs;
        }
        im.manifest_path = manifest ?: default_manifest;
        im.manifest_is_default = default_manifest && streq(im.manifest_path, default_manifest);
        im.caps_override = caps;
        {
                char self[PATH_MAX];
                ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
                if (n <= 0) {
                        fprintf(stderr, "mcp-lazy: cannot tell where the mcp-lazy binary is: %m\n");
                        return 1;
                }
                self[n] = 0;
                im.self = strdup(self);
        }

        return import_run(&im, from, client);
}
