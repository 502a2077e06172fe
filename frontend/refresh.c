/* mcp-lazy refresh: start each backend once as import does, say what changed against the manifest,
 * and write it (or, with --check, only say so and fail). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "client-config.h"
#include "envfile.h"
#include "frontend.h"
#include "hashmap.h"
#include "log.h"
#include "import.h"
#include "macros.h"
#include "manifest.h"
#include "printable.h"

#define DIFF_NAMES_SHOWN 20U /* names listed per list; the rest are counted */

typedef struct Diff {
        unsigned added, removed, changed;
        char *names; /* "+a -b ~c" */
} Diff;

/* The names go to a terminal and a journal: the first few, each made printable, and how many more. */
static void diff_note(Diff *d, char sign, const char *name) {
        _cleanup_free_ char *shown = NULL;
        unsigned n = d->added + d->removed + d->changed; /* this one included */
        char *s = NULL;

        if (n > DIFF_NAMES_SHOWN)
                return;
        shown = text_printable(name, 200);
        if (shown && asprintf(&s, "%s%s%c%s", d->names ?: "", d->names ? " " : "", sign, shown) >= 0) {
                free(d->names);
                d->names = s;
        }
}

static void diff_done(Diff *d) {
        unsigned n = d->added + d->removed + d->changed;
        char *s = NULL;

        if (n > DIFF_NAMES_SHOWN && asprintf(&s, "%s (+%u more)", d->names ?: "", n - DIFF_NAMES_SHOWN) >= 0) {
                free(d->names);
                d->names = s;
        }
}

/* Each list's items by key (the first of two with one key, as before): lists of up to 100000 items
 * are compared in linear time, not item by item against each other. */
static Hashmap *index_list(const cJSON *list, const char *key) {
        Hashmap *h = hashmap_new();
        const cJSON *it;

        cJSON_ArrayForEach (it, list) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, key));
                if (h && id && hashmap_put(h, id, (void *) it) == -ENOMEM)
                        h = hashmap_free(h);
        }
        return h;
}

/* Two lists of objects keyed by 'key': which are only in 'now', only in 'was', or differ. */
static void diff_lists(const cJSON *was, const cJSON *now, const char *key, Diff *d) {
        Hashmap *in_was = index_list(was, key), *in_now = index_list(now, key);
        const cJSON *a, *b;

        if (!in_was || !in_now) {
                hashmap_free(in_was);
                hashmap_free(in_now);
                log_oom();
                return;
        }
        cJSON_ArrayForEach (b, now) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, key));
                a = id ? hashmap_get(in_was, id) : NULL;
                if (!a) {
                        d->added++;
                        diff_note(d, '+', id ?: "?");
                } else if (!cJSON_Compare(a, b, true)) {
                        d->changed++;
                        diff_note(d, '~', id);
                }
        }
        cJSON_ArrayForEach (a, was) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, key));
                if (!id || !hashmap_get(in_now, id)) {
                        d->removed++;
                        diff_note(d, '-', id ?: "?");
                }
        }
        diff_done(d);
        hashmap_free(in_was);
        hashmap_free(in_now);
}

/* A backend key of the manifest as JSON (NULL if absent or not convertible). */
static cJSON *doc_key_json(const ManifestDoc *doc, const char *backend, const char *key) {
        const YNode *n = ynode_get(manifest_doc_backend(doc, backend), key);
        _cleanup_free_ char *err = NULL;
        cJSON *j = NULL;

        if (!n)
                return NULL;
        if (n->kind == YNODE_SCALAR && streq(key, "instructions"))
                return cJSON_CreateString(n->value);
        return ynode_to_json(n, &j, &err) < 0 ? NULL : j;
}

static bool json_equal(const cJSON *a, const cJSON *b) {
        if (!a || !b)
                return !a && !b;
        return cJSON_Compare(a, b, true);
}

/* Prints what differs; returns the number of differences. */
static unsigned backend_compare(const Manifest *m, const Backend *b, const McpDiscovery *d, const cJSON *tools_now) {
        static const struct {
                const char *label, *key;
                size_t discovery, backend;
        } lists[] = {
                {"resources", "uri", offsetof(McpDiscovery, resources), offsetof(Backend, resources)},
                {"resource templates", "uriTemplate", offsetof(McpDiscovery, resource_templates),
                 offsetof(Backend, resource_templates)},
                {"prompts", "name", offsetof(McpDiscovery, prompts), offsetof(Backend, prompts)},
        };
        static const char *const identity[] = {"server_info", "instructions", "capabilities"};
        _cleanup_json_ cJSON *tools_was = cJSON_CreateArray();
        unsigned n = 0;
        Diff td = {};

        for (size_t i = 0; tools_was && i < m->n_tools; i++)
                if (&m->backends[m->tools[i].backend] == b)
                        cJSON_AddItemReferenceToArray(tools_was, m->tools[i].json);
        diff_lists(tools_was, tools_now, "name", &td);
        if (td.added + td.removed + td.changed > 0) {
                printf("  tools: %u added, %u removed, %u changed: %s\n", td.added, td.removed, td.changed, td.names);
                n += td.added + td.removed + td.changed;
        }
        free(td.names);
        for (size_t i = 0; i < ELEMENTSOF(lists); i++) {
                const cJSON *was = backend_list(b, lists[i].backend);
                const cJSON *now = *(cJSON *const *) ((const char *) d + lists[i].discovery);
                Diff ld = {};
                diff_lists(was, now, lists[i].key, &ld);
                if (ld.added + ld.removed + ld.changed > 0) {
                        printf("  %s: %u added, %u removed, %u changed: %s\n", lists[i].label, ld.added, ld.removed,
                               ld.changed, ld.names);
                        n += ld.added + ld.removed + ld.changed;
                }
                free(ld.names);
        }
        for (size_t i = 0; i < ELEMENTSOF(identity); i++) {
                _cleanup_json_ cJSON *instr = NULL;
                const cJSON *was, *now;
                if (i == 1 && b->instructions && !(instr = cJSON_CreateString(b->instructions)))
                        return n;
                was = i == 0 ? b->server_info : i == 1 ? instr : b->capabilities;
                now = i == 0 ? d->server_info : i == 1 ? NULL : d->capabilities;
                if (i == 1) {
                        bool same = (!b->instructions && !d->instructions) ||
                                    (b->instructions && d->instructions && streq(b->instructions, d->instructions));
                        if (same)
                                continue;
                        printf("  instructions: %s\n", !b->instructions   ? "added"
                                                       : !d->instructions ? "removed"
                                                                          : "changed");
                        n++;
                        continue;
                }
                if (!json_equal(was, now)) {
                        _cleanup_free_ char *a = was ? cJSON_PrintUnformatted(was) : NULL;
                        _cleanup_free_ char *c = now ? cJSON_PrintUnformatted(now) : NULL;
                        printf("  %s: %.200s -> %.200s\n", identity[i], a ?: "(none)", c ?: "(none)");
                        n++;
                }
        }
        return n;
}

/* The env backend b runs with under its unit: its secrets file, the manifest's env on top. A file
 * that cannot be read (refresh not run as root) will do when our own environment has every variable
 * secret_env names: the server inherits them. */
static int backend_env_with_secrets(const char *manifest_path, const Backend *b, char ***ret, char **ret_error) {
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *err = NULL, *path = NULL;
        size_t n = 0;
        int r;

        r = secrets_read(manifest_path, b->name, &env, &err);
        if (r == -ENOMEM || (r < 0 && secrets_path(manifest_path, b->name, &path) < 0))
                return -ENOMEM;
        if (r == -EBADMSG) {
                *ret_error = TAKE_PTR(err);
                return r;
        }
        if (r < 0) {
                for (char **v = b->secret_env; *v; v++)
                        if (!getenv(*v) && !strv_env_get(b->env, *v)) {
                                if (asprintf(ret_error,
                                             "it gets %s from %s, which cannot be read (%s): run refresh as root, or "
                                             "with the variable in refresh's own environment",
                                             *v, path, strerror(-r)) < 0)
                                        return -ENOMEM;
                                return r;
                        }
                *ret = NULL;
                return 0;
        }
        for (char **v = env; *v; v++)
                n++;
        for (char **v = b->env; v && *v; v++) {
                char **l = realloc(env, (n + 2) * sizeof(char *));
                if (!l)
                        return -ENOMEM;
                env = l;
                if (!(env[n] = strdup(*v)))
                        return -ENOMEM;
                env[++n] = NULL;
        }
        *ret = TAKE_PTR(env);
        return 0;
}

static void help(void) {
        printf("Usage: mcp-lazy refresh [OPTIONS] [NAME...]\n\n"
               "Starts each named backend (default: all) once, prints what changed against the manifest\n"
               "(tools, resources, prompts, serverInfo, instructions, capabilities) and writes the manifest.\n\n"
               "  --manifest FILE      default: $XDG_CONFIG_HOME/mcp-lazy/manifest.yaml (root: /etc/mcp-lazy/)\n"
               "  --check              only print; exit 1 when anything differs\n"
               "  --capabilities JSON  client capabilities to declare (default: the backend's\n"
               "                       client_capabilities, else Claude Code's)\n"
               "  --timeout DURATION   how long a server may take to answer (default 60s)\n"
               "  --dry-run            print the manifest that would be written\n");
}

int refresh_main(int argc, char *argv[]) {
        enum { ARG_MANIFEST = 0x100, ARG_CHECK, ARG_CAPS, ARG_TIMEOUT, ARG_DRY_RUN };
        static const struct option options[] = {
                {"manifest", required_argument, NULL, ARG_MANIFEST},
                {"check", no_argument, NULL, ARG_CHECK},
                {"capabilities", required_argument, NULL, ARG_CAPS},
                {"timeout", required_argument, NULL, ARG_TIMEOUT},
                {"dry-run", no_argument, NULL, ARG_DRY_RUN},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        _cleanup_free_ char *manifest_path = NULL, *err = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_(manifest_doc_freep) ManifestDoc *doc = NULL;
        _cleanup_json_ cJSON *caps_override = NULL;
        uint64_t timeout = MCP_CLIENT_DEFAULT_TIMEOUT_USEC;
        bool check = false, dry_run = false;
        unsigned differences = 0, failures = 0, refreshed = 0;
        int c, r;

        (void) signal(SIGPIPE, SIG_IGN);
        optind = 0;
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case ARG_MANIFEST:
                        free(manifest_path);
                        manifest_path = strdup(optarg);
                        break;
                case ARG_CHECK:
                        check = true;
                        break;
                case ARG_CAPS:
                        cJSON_Delete(caps_override);
                        caps_override = cJSON_Parse(optarg);
                        if (!cJSON_IsObject(caps_override)) {
                                fprintf(stderr, "mcp-lazy: --capabilities takes a JSON object\n");
                                return 2;
                        }
                        break;
                case ARG_TIMEOUT:
                        if (parse_timeout_arg(optarg, &timeout) < 0) {
                                fprintf(stderr, "mcp-lazy: --timeout takes a duration, e.g. 30s or 2m\n");
                                return 2;
                        }
                        break;
                case ARG_DRY_RUN:
                        dry_run = true;
                        break;
                case 'h':
                        help();
                        return 0;
                default:
                        return 2;
                }
        if (!manifest_path && !(manifest_path = manifest_default_path())) {
                fprintf(stderr,
                        "mcp-lazy: neither HOME nor XDG_CONFIG_HOME is set; name the manifest with --manifest\n");
                return 2;
        }
        r = manifest_load_file(manifest_path, &m, &err);
        if (r < 0) {
                fprintf(stderr, "%s\n", err ?: strerror(-r));
                return 1;
        }
        free(err);
        err = NULL;
        r = manifest_doc_load(manifest_path, &doc, &err);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: %s\n", err ?: strerror(-r));
                return 1;
        }
        for (int i = optind; i < argc; i++)
                if (!manifest_find_backend(m, argv[i])) {
                        fprintf(stderr, "mcp-lazy: %s has no backend '%s'\n", manifest_path, argv[i]);
                        return 2;
                }

        for (size_t i = 0; i < m->n_backends; i++) {
                const Backend *b = &m->backends[i];
                _cleanup_(mcp_discovery_freep) McpDiscovery *d = NULL;
                _cleanup_json_ cJSON *caps = NULL, *tools_now = NULL;
                _cleanup_free_ char *derr = NULL;
                _cleanup_strv_free_ char **remote_argv = NULL, **env = NULL;
                /* In the era the manifest says (import recorded it), else probed as import does. */
                McpServerCommand cmd = {.argv = b->command,
                                        .env = b->env,
                                        .cwd = b->cwd,
                                        .era = b->protocol == PROTOCOL_MODERN   ? MCP_ERA_MODERN
                                               : b->protocol == PROTOCOL_LEGACY ? MCP_ERA_LEGACY
                                                                                : MCP_ERA_AUTO};
                bool wanted = optind == argc;
                unsigned n;

                for (int k = optind; k < argc && !wanted; k++)
                        wanted = streq(argv[k], b->name);
                if (!wanted)
                        continue;
                caps = caps_override ? cJSON_Duplicate(caps_override, true)
                                     : doc_key_json(doc, b->name, "client_capabilities");
                if (!caps)
                        caps = cJSON_Parse(client_info_find("claude-code")->capabilities);
                printf("%s:\n", b->name);
                fflush(stdout);
                /* A backend on another host: the pooled backend there, through ssh as the frontend reaches it. */
                if (b->remote.kind == REMOTE_VSOCK) {
                        printf("  FAILED: %s is a vsock address: refresh it on that host\n", b->remote.host);
                        failures++;
                        continue;
                }
                if (b->remote.kind == REMOTE_SSH) {
                        r = remote_ssh_argv(b, &remote_argv);
                        if (r < 0)
                                return (fprintf(stderr, "mcp-lazy: out of memory\n"), 1);
                        cmd.argv = remote_argv;
                }
                /* Only the system manager's unit reads a secrets file: beside another manifest, the
                 * backend runs without it, and so does refresh. */
                bool is_system = secrets_manifest_is_system(manifest_path);
                if (b->secret_env && b->secret_env[0] && !is_system)
                        printf("  secret_env is ignored: only the units of the system manager's manifest read a "
                               "secrets file, so this backend starts without %s%s\n",
                               b->secret_env[0], b->secret_env[1] ? " and the others it names" : "");
                if (b->secret_env && is_system) {
                        r = backend_env_with_secrets(manifest_path, b, &env, &derr);
                        if (r == -ENOMEM)
                                return (fprintf(stderr, "mcp-lazy: out of memory\n"), 1);
                        if (r < 0) {
                                printf("  FAILED: %s\n", derr);
                                failures++;
                                continue;
                        }
                        if (env)
                                cmd.env = env;
                }
                r = mcp_discover(&cmd, caps, timeout, &d, &derr);
                if (r < 0) {
                        printf("  FAILED: %s\n", derr ?: strerror(-r));
                        failures++;
                        continue;
                }
                tools_now = tools_for_manifest(d->tools, b->name, true);
                if (!tools_now)
                        return 1;
                n = backend_compare(m, b, d, tools_now);
                if (n == 0) {
                        printf("  matches the manifest\n");
                        continue;
                }
                differences += n;
                if (check)
                        continue;
                r = import_store_backend(doc, b->name, d, caps_override ? caps : NULL, false);
                if (r < 0) {
                        fprintf(stderr, "mcp-lazy: cannot update backend '%s': %s\n", b->name, strerror(-r));
                        return 1;
                }
                refreshed++;
        }
        /* A manifest from before secret_env (or one edited by hand) with values the group can read; a
         * secrets file written by hand to adopt, or one no backend owns to put aside. */
        if (secrets_wanted(manifest_path)) {
                bool pending = secrets_pending(doc);
                int files = secrets_files_pending(doc, check);

                if (files == -ENOMEM)
                        return (fprintf(stderr, "mcp-lazy: out of memory\n"), 1);
                if (check && pending) {
                        printf("The manifest holds env values that the socket group can read: 'mcp-lazy refresh' "
                               "moves them into secrets files.\n");
                        differences++;
                }
                if (check && files != 0)
                        differences += files > 0 ? (unsigned) files : 1;
                if (!check && (pending || files != 0))
                        refreshed++;
        }
        if (!check && refreshed > 0) {
                r = import_write_manifest(doc, dry_run);
                if (r < 0)
                        return 1;
                if (!dry_run)
                        printf("Wrote %s: running frontends reload it and tell their clients the lists changed.\n",
                               manifest_path);
        }
        if (check && differences > 0)
                printf("The manifest differs from the servers (%u difference%s): run 'mcp-lazy refresh'.\n",
                       differences, differences == 1 ? "" : "s");
        return failures > 0 || (check && differences > 0) ? 1 : 0;
}
