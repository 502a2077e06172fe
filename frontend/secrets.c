/* A backend's env values kept out of the system manager's manifest, which the socket group reads:
 * import and refresh write them into a file of that backend that only root reads
 * (/etc/mcp-lazy/secrets/NAME.env), which only its unit reads (EnvironmentFile=); the manifest keeps
 * their names (secret_env). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "envfile.h"
#include "import.h"
#include "macros.h"
#include "secrets-dir.h"

/* Variables that change the shim itself (and the libraries it runs on) if the unit's environment
 * file sets them, since systemd puts that file over what it sets: they stay in the manifest's env,
 * set for the backend alone. What systemd.exec(5) lists under "Environment Variables in Spawned
 * Processes", what glibc, ld.so, libsystemd and the sanitizers read, and the shim's own. */
static const char *const stays_names[] = {
        /* systemd.exec(5), "Environment Variables in Spawned Processes" */
        "CACHE_DIRECTORY",
        "CONFIGURATION_DIRECTORY",
        "CREDENTIALS_DIRECTORY",
        "EXIT_CODE",
        "EXIT_STATUS",
        "FDSTORE",
        "HOME",
        "INVOCATION_ID",
        "JOURNAL_STREAM",
        "LANG",
        "LOGNAME",
        "LOGS_DIRECTORY",
        "MAINPID",
        "MANAGERPID",
        "MEMORY_PRESSURE_WATCH",
        "MEMORY_PRESSURE_WRITE",
        "MONITOR_EXIT_CODE",
        "MONITOR_EXIT_STATUS",
        "MONITOR_INVOCATION_ID",
        "MONITOR_SERVICE_RESULT",
        "MONITOR_UNIT",
        "NOTIFY_SOCKET",
        "PATH",
        "PIDFILE",
        "REMOTE_ADDR",
        "REMOTE_PORT",
        "RUNTIME_DIRECTORY",
        "SERVICE_RESULT",
        "SHELL",
        "STATE_DIRECTORY",
        "TERM",
        "TRIGGER_PATH",
        "TRIGGER_TIMER_MONOTONIC_USEC",
        "TRIGGER_TIMER_REALTIME_USEC",
        "TRIGGER_UNIT",
        "USER",
        "XDG_RUNTIME_DIR",
        "XDG_SEAT",
        "XDG_SESSION_ID",
        "XDG_VTNR",
        /* the XDG base directories (the shim's state), libsystemd's own */
        "XDG_CACHE_HOME",
        "XDG_CONFIG_DIRS",
        "XDG_CONFIG_HOME",
        "XDG_DATA_DIRS",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "SD_EVENT_PROFILE_DELAYS",
        /* glibc: locale, time zone, resolver, malloc, getopt */
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LANGUAGE",
        "LC_ADDRESS",
        "LC_ALL",
        "LC_COLLATE",
        "LC_CTYPE",
        "LC_IDENTIFICATION",
        "LC_MEASUREMENT",
        "LC_MESSAGES",
        "LC_MONETARY",
        "LC_NAME",
        "LC_NUMERIC",
        "LC_PAPER",
        "LC_TELEPHONE",
        "LC_TIME",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_ARENA_MAX",
        "MALLOC_ARENA_TEST",
        "MALLOC_CHECK_",
        "MALLOC_MMAP_MAX_",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_PERTURB_",
        "MALLOC_TOP_PAD_",
        "MALLOC_TRIM_THRESHOLD_",
        "NLSPATH",
        "POSIXLY_CORRECT",
        "RES_OPTIONS",
        "TMPDIR",
        "TZ",
        "TZDIR",
        NULL,
};
/* Prefixes only for open families: ours, ld.so's, systemd's socket and watchdog protocol, libsystemd's
 * SYSTEMD_*, the sanitizers'. (SD_API_KEY, MONITOR_TOKEN, TRIGGER_SECRET_KEY are a server's secrets.) */
static const char *const stays_prefixes[] = {
        "MCP_LAZY_", "LD_", "LISTEN_", "WATCHDOG_", "SYSTEMD_", "ASAN_", "UBSAN_", "LSAN_", "MSAN_", "TSAN_", NULL,
};

bool secrets_env_name_stays(const char *name, size_t n) {
        for (const char *const *p = stays_prefixes; *p; p++)
                if (n >= strlen(*p) && strncmp(name, *p, strlen(*p)) == 0)
                        return true;
        for (const char *const *p = stays_names; *p; p++)
                if (n == strlen(*p) && strncmp(name, *p, n) == 0)
                        return true;
        return false;
}

bool secrets_manifest_is_system(const char *manifest_path) {
        _cleanup_free_ char *sys = manifest_default_path_for(true), *a = NULL, *b = NULL;

        if (!sys)
                return false;
        a = realpath(manifest_path, NULL);
        b = realpath(sys, NULL);
        return streq(a ?: manifest_path, b ?: sys);
}

bool secrets_wanted(const char *manifest_path) {
        if (geteuid() != 0 || !getgrnam(MCP_LAZY_SOCKET_GROUP) || sd_booted() <= 0)
                return false;
        return secrets_manifest_is_system(manifest_path);
}

int secrets_path(const char *manifest_path, const char *backend, char **ret) {
        _cleanup_free_ char *copy = strdup(manifest_path);

        if (!copy || asprintf(ret, "%s/secrets/%s.env", dirname(copy), backend) < 0)
                return -ENOMEM;
        return 0;
}

/* The names of env as a YAML sequence. */
static int names_node(char *const *env, YNode **ret) {
        _cleanup_json_ cJSON *j = cJSON_CreateArray();

        for (char *const *v = env; j && v && *v; v++) {
                _cleanup_free_ char *k = strndup(*v, strcspn(*v, "="));
                if (!k || !cJSON_AddItemToArray(j, cJSON_CreateString(k)))
                        return -ENOMEM;
        }
        return j ? ynode_from_json(j, ret) : -ENOMEM;
}

static int key_node(const char *key, YNode **ret) {
        _cleanup_json_ cJSON *j = cJSON_CreateString(key);
        return j ? ynode_from_json(j, ret) : -ENOMEM;
}

/* Appends the pair secret_env: *names to backend b, both or neither; takes *names when it does. */
static int secret_env_append(YNode *b, YNode **names) {
        _cleanup_(ynode_freep) YNode *k = NULL;
        int r;

        r = key_node("secret_env", &k);
        if (r < 0)
                return r;
        if (ynode_append(b, k) < 0)
                return -ENOMEM;
        k = NULL;
        if (ynode_append(b, *names) < 0) {
                b->n_items--; /* the key appended alone: take it back */
                ynode_free(b->items[b->n_items]);
                return -ENOMEM;
        }
        *names = NULL;
        return 0;
}

/* In backend b (a mapping), where its env is at pair index at: secret_env becomes 'names' (where it
 * was, else right after env), and env goes when keep_env is false. Takes names. */
static int backend_put_secret_env(YNode *b, size_t at, bool keep_env, YNode *names) {
        _cleanup_(ynode_freep) YNode *n = names;
        size_t se = SIZE_MAX;
        int r;

        for (size_t i = 0; i + 1 < b->n_items; i += 2)
                if (streq(b->items[i]->value, "secret_env"))
                        se = i;
        if (se != SIZE_MAX) {
                ynode_free(b->items[se + 1]);
                b->items[se + 1] = TAKE_PTR(n);
        } else {
                /* Two more slots, then the pair goes in right after env. */
                r = secret_env_append(b, &n);
                if (r < 0)
                        return r;
                YNode *kk = b->items[b->n_items - 2], *vv = b->items[b->n_items - 1];
                memmove(b->items + at + 4, b->items + at + 2, (b->n_items - 2 - at - 2) * sizeof(YNode *));
                b->items[at + 2] = kk;
                b->items[at + 3] = vv;
        }
        if (keep_env)
                return 0;
        ynode_free(b->items[at]);
        ynode_free(b->items[at + 1]);
        memmove(b->items + at, b->items + at + 2, (b->n_items - at - 2) * sizeof(YNode *));
        b->n_items -= 2;
        return 0;
}

/* Whether env's pair at i moves into the secrets file (else it stays in the manifest's env). */
static bool env_pair_moves(const YNode *env, size_t i) {
        return !secrets_env_name_stays(env->items[i]->value, env->items[i]->length) &&
               env->items[i + 1]->kind == YNODE_SCALAR;
}

/* Drops the pairs of env that moved: what stays keeps its YAML nodes as they were (0077, ~, 1.50). */
static void env_drop_moved(YNode *env) {
        size_t n = 0;

        for (size_t i = 0; i + 1 < env->n_items; i += 2) {
                if (env_pair_moves(env, i)) {
                        ynode_free(env->items[i]);
                        ynode_free(env->items[i + 1]);
                        continue;
                }
                env->items[n++] = env->items[i];
                env->items[n++] = env->items[i + 1];
        }
        env->n_items = n;
}

/* Every variable of a secrets file must be one systemd reads and can pass on: else it ignores the
 * whole file. Names the variable and why, never its value. */
static int secrets_check(const char *name, char *const *secrets) {
        for (char *const *v = secrets; v && *v; v++) {
                const char *reason = NULL;
                int r = envfile_assignment_check(*v, &reason);
                if (r < 0) {
                        fprintf(stderr,
                                "mcp-lazy: backend '%s': env %.*s cannot go into its secrets file: %s; nothing "
                                "was changed\n",
                                name, (int) strcspn(*v, "="), *v, reason);
                        return r;
                }
        }
        return 0;
}

/* The same YAML (scalars by their text), or both absent. */
static bool ynode_same(const YNode *a, const YNode *b) {
        if (!a || !b)
                return a == b;
        if (a->kind != b->kind)
                return false;
        if (a->kind == YNODE_SCALAR)
                return a->length == b->length && memcmp(a->value, b->value, a->length) == 0;
        if (a->n_items != b->n_items)
                return false;
        for (size_t i = 0; i < a->n_items; i++)
                if (!ynode_same(a->items[i], b->items[i]))
                        return false;
        return true;
}

/* The key of a pair of env a (a mapping, or absent) that stays in the manifest and is not in b with
 * the same value, or NULL. */
static const YNode *env_stays_differs(const YNode *a, const YNode *b) {
        for (size_t i = 0; a && i + 1 < a->n_items; i += 2) {
                const YNode *value = NULL;

                if (env_pair_moves(a, i))
                        continue;
                for (size_t j = 0; b && j + 1 < b->n_items && !value; j += 2)
                        if (!env_pair_moves(b, j) && ynode_same(a->items[i], b->items[j]))
                                value = b->items[j + 1];
                if (!value || !ynode_same(a->items[i + 1], value))
                        return a->items[i];
        }
        return NULL;
}

/* The value of key in env (a mapping, or absent), or NULL. */
static const YNode *env_value(const YNode *env, const YNode *key) {
        for (size_t i = 0; env && i + 1 < env->n_items; i += 2)
                if (ynode_same(key, env->items[i]))
                        return env->items[i + 1];
        return NULL;
}

/* *ret: format with what: 1. */
static int change_said(char **ret, const char *format, const char *what) {
        if (asprintf(ret, format, what) < 0) {
                *ret = NULL;
                return -ENOMEM;
        }
        return 1;
}

#define SECRETS_SKIP 2 /* backend_split(): its file cannot be read, leave the backend as it is */

/* Whether b runs what old (the backend name on disk) runs, so that it may keep old's secrets file:
 * 0; else 1, and *ret_what says what changed (names, never a value). What runs is the command (its
 * arguments included), cwd and socket, and every variable with its value: the env that stays in the
 * manifest (LD_PRELOAD, PATH...) and each value that moves, compared with old's (in its env, else in
 * its file). Any new value is a new definition (review 12 MEDIUM-1: NODE_OPTIONS, PYTHONPATH, a
 * registry's URL and a token alike: no list of names could say which steer what runs), which gets
 * only the values of its own config; a variable b leaves out keeps old's value (a refresh, a config
 * without its secrets). A backend on another host (host:) owns no file here (review 12 MEDIUM-2).
 * A file that cannot be read is left to backend_split(): it leaves the backend as it is, or changes
 * nothing when new values would stay in the manifest. */
static int backend_change(const SecretsDir *sd, const char *name, const YNode *old, const YNode *b, char **ret_what) {
        static const char *const keys[] = {"command", "cwd", "socket", NULL};
        const YNode *e_old = ynode_get(old, "env"), *e_new = ynode_get(b, "env"), *k;
        _cleanup_strv_free_ char **file = NULL;
        _cleanup_free_ char *err = NULL;
        bool read = false;

        *ret_what = NULL;
        if (ynode_get(old, "host") || ynode_get(b, "host"))
                return change_said(ret_what, "lives on another host (%s)", "host:");
        for (const char *const *key = keys; *key; key++)
                if (!ynode_same(ynode_get(old, *key), ynode_get(b, *key)))
                        return change_said(ret_what, "no longer runs what it ran (its %s changed)", *key);
        if ((e_old && e_old->kind != YNODE_MAPPING) || (e_new && e_new->kind != YNODE_MAPPING))
                return ynode_same(e_old, e_new)
                               ? 0
                               : change_said(ret_what, "no longer runs what it ran (its %s changed)", "env");
        if ((k = env_stays_differs(e_old, e_new)) || (k = env_stays_differs(e_new, e_old)))
                return change_said(ret_what, "no longer runs what it ran (env %s changed)", k->value);
        for (size_t i = 0; e_new && i + 1 < e_new->n_items; i += 2) {
                const YNode *key = e_new->items[i], *v = e_new->items[i + 1], *was;
                const char *in_file;

                if (!env_pair_moves(e_new, i))
                        continue;
                was = env_value(e_old, key);
                if (was) {
                        if (!ynode_same(was, v))
                                return change_said(ret_what, "no longer runs what it ran (env %s has another value)",
                                                   key->value);
                        continue;
                }
                if (!read) {
                        int r = secrets_read_at(sd, name, &file, &err);
                        if (r == -ENOMEM)
                                return r;
                        if (r < 0 && r != -ENOENT)
                                return 0;
                        read = true;
                }
                in_file = strv_env_get(file, key->value);
                if (!in_file)
                        return change_said(ret_what, "no longer runs what it ran (env %s is new)", key->value);
                if (strlen(in_file) != v->length || memcmp(in_file, v->value, v->length) != 0)
                        return change_said(ret_what, "no longer runs what it ran (env %s has another value)",
                                           key->value);
        }
        return 0;
}

/* Whether backend name of doc (b) owns the secrets file of its name (*ret_owned): the manifest on
 * disk has a backend of that name (old, else NULL) that runs the same (backend_change()), be it one
 * that names its file in secret_env or one from before secret_env, whose file an admin wrote by hand
 * as the README said then. A backend gone from the manifest, new under the name of a file left behind, or whose
 * definition changed (*ret_what says how, else NULL), does not: it gets only the values its own
 * config gives it. */
static int backend_owns_file(const SecretsDir *sd, const YNode *b, const YNode *old, const char *name, bool *ret_owned,
                             char **ret_what) {
        int r;

        *ret_what = NULL;
        *ret_owned = false;
        if (!old || b->kind != YNODE_MAPPING)
                return 0;
        r = backend_change(sd, name, old, b, ret_what);
        if (r < 0)
                return r;
        *ret_owned = r == 0;
        return 0;
}

/* Whether backend b (name) owns a file that it lists none of in secret_env (written by hand before
 * secret_env existed), and what the file holds (*ret_secrets, at least one variable): 1; 0: none;
 * SECRETS_SKIP: the file cannot be read (*ret_error says why). */
static int backend_adoptable(const SecretsDir *sd, const char *name, const YNode *b, bool owned, char ***ret_secrets,
                             char **ret_error) {
        _cleanup_strv_free_ char **secrets = NULL;
        int r;

        if (!owned || ynode_get(b, "secret_env"))
                return 0;
        r = secrets_read_at(sd, name, &secrets, ret_error);
        if (r == -ENOENT || (r >= 0 && !secrets[0]))
                return 0;
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return SECRETS_SKIP;
        *ret_secrets = TAKE_PTR(secrets);
        return 1;
}

/* A backend that owns its file but lists none of it in secret_env (its file written by hand before
 * secret_env existed): secret_env now names what the file holds, so that the manifest says what
 * the unit hands on. */
static int backend_adopt(const SecretsDir *sd, ManifestDoc *doc, const char *name, YNode *b, bool owned) {
        _cleanup_strv_free_ char **secrets = NULL;
        _cleanup_free_ char *err = NULL, *path = NULL, *shown = NULL;
        _cleanup_(ynode_freep) YNode *names = NULL;
        int r;

        r = backend_adoptable(sd, name, b, owned, &secrets, &err);
        if (r == SECRETS_SKIP)
                fprintf(stderr, "mcp-lazy: cannot read %s; backend '%s' is left as it is\n", err ?: name, name);
        if (r != 1)
                return r;
        r = secrets_path(doc->path, name, &path);
        if (r >= 0)
                r = names_node(secrets, &names);
        if (r >= 0)
                r = secret_env_append(b, &names);
        if (r < 0)
                return r;
        shown = secrets_names_shown(secrets);
        if (!shown)
                return -ENOMEM;
        printf("%s: %s (written by hand?) holds %s, which its unit hands on: the manifest now names them in "
               "secret_env\n",
               name, path, shown);
        return 1;
}

/* One backend: its env values that may move into its file, merged over what the file holds, and the
 * file to write added to plan (nothing on disk changes here). 0: nothing to move. With check_only,
 * only whether they can be written (nothing printed but why not, nothing planned). */
static int backend_split(const SecretsDir *sd, ManifestDoc *doc, const char *name, YNode *b, bool owned,
                         bool env_on_disk, SecretsPlan *plan, bool check_only) {
        _cleanup_strv_free_ char **secrets = NULL;
        _cleanup_free_ char *path = NULL, *err = NULL;
        _cleanup_(ynode_freep) YNode *names = NULL;
        YNode *env = NULL;
        size_t at = 0, n = 0, moved = 0;
        bool news = !owned; /* a file it does not own is put aside, its new one put in place: all news to its unit */
        int r;

        for (size_t i = 0; i + 1 < b->n_items; i += 2)
                if (streq(b->items[i]->value, "env"))
                        env = b->items[i + 1], at = i;
        /* One on another host has no file here: its env, if any, the loader refuses when the plan is
         * checked. */
        if (ynode_get(b, "host"))
                return 0;
        if (!env || env->kind != YNODE_MAPPING || env->n_items == 0)
                return check_only ? 0 : backend_adopt(sd, doc, name, b, owned);
        r = secrets_path(doc->path, name, &path);
        if (r < 0)
                return r;
        /* Values the file has already (an earlier import's, or written by hand) stay, unless the
         * manifest's env sets them anew: nothing is lost. A file the backend does not own is put
         * aside (secrets_orphan()), never merged. */
        r = owned ? secrets_read_at(sd, name, &secrets, &err) : -ENOENT;
        if (r == -ENOENT)
                r = 0;
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                /* Its values cannot be merged without losing the file's: this backend's env stays where
                 * it is, the others go on; but only an env the manifest on disk has already: new values
                 * left in it would be readable by the group. */
                if (!env_on_disk) {
                        fprintf(stderr,
                                "mcp-lazy: cannot read %s; backend '%s' has env values the manifest does not have yet, "
                                "which would be readable by the group %s there: nothing was changed (fix or "
                                "remove the file)\n",
                                err ?: path, name, MCP_LAZY_SOCKET_GROUP);
                        return -EBADMSG;
                }
                if (check_only)
                        fprintf(stderr,
                                "mcp-lazy: cannot read %s; backend '%s' keeps its env in the manifest (fix the file, "
                                "then run 'mcp-lazy refresh'), the other backends go on\n",
                                err ?: path, name);
                return SECRETS_SKIP;
        }
        for (char **v = secrets; v && *v; v++)
                n++;
        for (size_t i = 0; i + 1 < env->n_items; i += 2) {
                const YNode *k = env->items[i], *v = env->items[i + 1];
                char *s = NULL, **l;
                bool replaced = false;

                if (!env_pair_moves(env, i)) {
                        if (v->kind == YNODE_SCALAR && !check_only)
                                printf("%s: %s stays in the manifest's env (in the unit's environment file it would "
                                       "change the shim too), so its value stays readable by the group %s: rename "
                                       "it if it is a secret\n",
                                       name, k->value, MCP_LAZY_SOCKET_GROUP);
                        continue;
                }
                if (asprintf(&s, "%s=%s", k->value, v->value) < 0)
                        return -ENOMEM;
                moved++;
                for (size_t j = 0; j < n && !replaced; j++)
                        if (strncmp(secrets[j], s, k->length + 1) == 0) {
                                news = news || !streq(secrets[j], s);
                                free(secrets[j]);
                                secrets[j] = s;
                                replaced = true;
                        }
                if (replaced)
                        continue;
                news = true;
                l = realloc(secrets, (n + 2) * sizeof(char *));
                if (!l) {
                        free(s);
                        return -ENOMEM;
                }
                secrets = l;
                secrets[n++] = s;
                secrets[n] = NULL;
        }
        if (moved == 0)
                return check_only ? 0 : backend_adopt(sd, doc, name, b, owned);
        r = secrets_check(name, secrets);
        if (r < 0 || check_only)
                return r;
        r = names_node(secrets, &names);
        if (r >= 0)
                r = secrets_plan_add(plan, name, owned, news, &path, &secrets);
        if (r < 0)
                return r;
        env_drop_moved(env);
        r = backend_put_secret_env(b, at, env->n_items > 0, TAKE_PTR(names));
        return r < 0 ? r : 1;
}

/* Who owns which secrets file, decided before anything moves: the secrets directory (checked once,
 * then used through its descriptor), the manifest on disk (NULL if none), and per backend of doc, in
 * its order, whether it owns the file of its name (owned[]), and whether it does not though the
 * manifest on disk had it with a file or secret_env (changed[]; why[] says how). What secrets_split()
 * plans from and secrets_files_pending() counts from. */
typedef struct {
        SecretsDir sd;
        ManifestDoc *on_disk;
        size_t n;
        bool *owned, *changed;
        char **why;
} SecretsOwners;

static void secrets_owners_done(SecretsOwners *o) {
        secrets_dir_done(&o->sd);
        o->on_disk = manifest_doc_free(o->on_disk);
        for (size_t i = 0; o->why && i < o->n; i++)
                free(o->why[i]);
        free(o->why);
        free(o->owned);
        free(o->changed);
        *o = (SecretsOwners){.sd.fd = -EBADF};
}

/* Fills o for backends (a mapping, or absent) of doc. A secrets directory that would be refused is
 * said (unless quiet) and fails it. */
static int secrets_owners_load(const ManifestDoc *doc, const YNode *backends, bool quiet, SecretsOwners *o) {
        _cleanup_free_ char *err = NULL;
        int r;

        o->n = backends ? backends->n_items / 2 : 0;
        o->owned = calloc(o->n + 1, sizeof(bool));
        o->changed = calloc(o->n + 1, sizeof(bool));
        o->why = calloc(o->n + 1, sizeof(char *));
        if (!o->owned || !o->changed || !o->why)
                return -ENOMEM;
        /* The directory is checked before any file in it is read, and read through its descriptor
         * (review 12 LOW-1). */
        r = secrets_dir_open(doc->path, quiet, &o->sd);
        if (r < 0)
                return r;
        if (manifest_doc_load(doc->path, &o->on_disk, &err) == -ENOMEM)
                return -ENOMEM;
        for (size_t i = 0; i < o->n; i++) {
                const char *name = backends->items[2 * i]->value;
                const YNode *old = o->on_disk ? manifest_doc_backend(o->on_disk, name) : NULL;
                _cleanup_free_ char *file = NULL;

                r = backend_owns_file(&o->sd, backends->items[2 * i + 1], old, name, &o->owned[i], &o->why[i]);
                if (r < 0)
                        return r;
                if (o->owned[i] || !old)
                        continue;
                if (asprintf(&file, "%s.env", name) < 0)
                        return -ENOMEM;
                o->changed[i] = (o->sd.fd >= 0 && faccessat(o->sd.fd, file, F_OK, AT_SYMLINK_NOFOLLOW) >= 0) ||
                                ynode_get(old, "secret_env");
        }
        return 0;
}

/* The units of the backends whose file plan put in place with values their running shim lacks, reloaded
 * with reload_units. */
static void plan_units_reload(const SecretsPlan *plan, SecretsUnitsReloader reload_units) {
        _cleanup_strv_free_ char **news = NULL;

        if (secrets_plan_news(plan, &news) < 0)
                fprintf(stderr, "mcp-lazy: out of memory; the units of backends whose secrets files changed were not "
                                "reloaded: run 'systemctl reload mcp-lazy@NAME.service' for each that runs\n");
        else if (news[0])
                reload_units(news);
}

int secrets_split(ManifestDoc *doc, bool dry_run, SecretsManifestWriter write_manifest,
                  SecretsUnitsReloader reload_units) {
        YNode *backends = (YNode *) ynode_get(doc->root, "backends");
        _cleanup_(secrets_owners_done) SecretsOwners o = {.sd.fd = -EBADF};
        _cleanup_(secrets_plan_done) SecretsPlan plan = {};
        _cleanup_free_ bool *skip = NULL;
        _cleanup_free_ char *text = NULL, *err = NULL;
        size_t n = 0, len;
        int r;

        if (backends && backends->kind != YNODE_MAPPING)
                return 0;
        n = backends ? backends->n_items / 2 : 0;
        skip = calloc(n + 1, sizeof(bool));
        if (!skip)
                return -ENOMEM;
        /* Which files the backends own is decided before any moves (the new ones get secret_env). */
        r = secrets_owners_load(doc, backends, false, &o);
        /* First the plan: every backend's file checked (a value that cannot go in changes nothing; a
         * file that cannot be read leaves its own backend as it is), then doc changed, and the manifest
         * it makes checked, before anything on disk changes (review 12 MEDIUM-2). */
        for (int pass = 0; r >= 0 && pass < 2; pass++)
                for (size_t i = 0; r >= 0 && i < n; i++) {
                        if (backends->items[2 * i + 1]->kind != YNODE_MAPPING || skip[i])
                                continue;
                        const char *name = backends->items[2 * i]->value;
                        const YNode *old = o.on_disk ? manifest_doc_backend(o.on_disk, name) : NULL;
                        YNode *b = backends->items[2 * i + 1];
                        bool env_on_disk = old && ynode_same(ynode_get(old, "env"), ynode_get(b, "env"));

                        /* A backend that runs something else than before keeps none of its secrets:
                         * what its secret_env named is in the file put aside. */
                        if (pass == 1 && o.changed[i]) {
                                fprintf(stderr,
                                        "mcp-lazy: backend '%s' %s, so it gets none of the values its secrets file "
                                        "had, only those of its own config\n",
                                        name, o.why[i] ?: "no longer runs what it ran");
                                r = manifest_doc_set_backend_key(doc, name, "secret_env", NULL);
                                if (r < 0)
                                        break;
                        }
                        r = backend_split(&o.sd, doc, name, b, o.owned[i], env_on_disk, &plan, pass == 0);
                        skip[i] = r == SECRETS_SKIP;
                }
        if (r >= 0) {
                r = manifest_doc_emit(doc, &text, &len, &err);
                if (r < 0 && err)
                        fprintf(stderr, "mcp-lazy: the manifest would not be valid, so nothing was changed:\n%s\n",
                                err);
        }
        if (r == -ENOMEM)
                fprintf(stderr, "mcp-lazy: out of memory\n");
        if (r < 0)
                return r;
        /* Then the disk, in the order that leaves a consistent state wherever this stops (or the
         * process dies) and whichever write fails: the files no backend owns any more are put aside
         * first (a unit that starts meanwhile gets fewer values, never another definition's); the files
         * of backends that run what they ran are written (their own values, and those their config
         * adds), those of new or changed definitions staged; the manifest is written; only then are
         * the staged files put in place. So no definition ever runs with another's values (R13-4: a
         * changed backend's old definition, still in the manifest on disk when writing it fails, ran
         * with the new one's): if the manifest cannot be written, the staged files are removed (their
         * values are still where they came from); one that cannot be put in place after it is kept,
         * never removed by any cleanup (its values are nowhere else now), and said with how to finish.
         * Running import or refresh again finishes the rest. Last, however that ended, the units of the
         * backends whose file is in place now with values their running shim lacks are reloaded (one
         * reloaded before its file is in place would start again with the old one; one written before a
         * manifest that failed would find nothing new to reload for when run again). */
        r = secrets_orphans(&o.sd, backends, o.owned, dry_run, false);
        if (r >= 0)
                r = secrets_plan_write(&o.sd, &plan, dry_run);
        if (r >= 0) {
                r = write_manifest(doc, dry_run);
                if (r < 0)
                        secrets_plan_unstage(&o.sd, &plan, true);
                else
                        r = secrets_plan_commit(&o.sd, &plan);
        }
        if (!dry_run)
                plan_units_reload(&plan, reload_units);
        return r < 0 ? r : 0;
}

/* Whether backend b has env values that secrets_split() would move. */
static bool backend_env_moves(const YNode *b) {
        const YNode *env = ynode_get(b, "env");

        for (size_t k = 0; env && env->kind == YNODE_MAPPING && k + 1 < env->n_items; k += 2)
                if (env_pair_moves(env, k))
                        return true;
        return false;
}

bool secrets_pending(const ManifestDoc *doc) {
        const YNode *backends = ynode_get(doc->root, "backends");

        for (size_t i = 0; backends && backends->kind == YNODE_MAPPING && i + 1 < backends->n_items; i += 2)
                if (backend_env_moves(backends->items[i + 1]))
                        return true;
        return false;
}

int secrets_files_pending(const ManifestDoc *doc, bool say) {
        const YNode *backends = ynode_get(doc->root, "backends");
        _cleanup_(secrets_owners_done) SecretsOwners o = {.sd.fd = -EBADF};
        int r, count = 0;

        if (backends && backends->kind != YNODE_MAPPING)
                return 0;
        r = secrets_owners_load(doc, backends, !say, &o);
        if (r < 0)
                return r;
        for (size_t i = 0; i < o.n; i++) {
                const char *name = backends->items[2 * i]->value;
                const YNode *b = backends->items[2 * i + 1];
                _cleanup_strv_free_ char **secrets = NULL;
                _cleanup_free_ char *e = NULL, *path = NULL, *shown = NULL;

                if (b->kind != YNODE_MAPPING || !o.owned[i])
                        continue;
                /* A file systemd would ignore whole: its unit starts without any of it (review 12 LOW-2). */
                r = secrets_read_at(&o.sd, name, &secrets, &e);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 && r != -ENOENT) {
                        count++;
                        if (say)
                                fprintf(stderr,
                                        "mcp-lazy: cannot read %s: systemd ignores the whole file, so "
                                        "mcp-lazy@%s.service starts without any of its values: fix or remove it\n",
                                        e ?: name, name);
                        continue;
                }
                strv_free(secrets);
                secrets = NULL;
                free(e);
                e = NULL;
                /* One with values to move merges its file's (secrets_pending() counts it). */
                if (backend_env_moves(b))
                        continue;
                r = backend_adoptable(&o.sd, name, b, o.owned[i], &secrets, &e);
                if (r < 0)
                        return r;
                if (r != 1)
                        continue;
                count++;
                if (!say)
                        continue;
                shown = secrets_names_shown(secrets);
                if (!shown || secrets_path(doc->path, name, &path) < 0)
                        return -ENOMEM;
                printf("%s: %s (written by hand?) holds %s, which its unit hands on: 'mcp-lazy refresh' names them in "
                       "secret_env\n",
                       name, path, shown);
        }
        r = secrets_orphans(&o.sd, backends, o.owned, true, !say);
        return r < 0 ? r : count + r;
}
