/* mcp-lazy status: one row per backend of the manifest, from its units (over sd-bus) and the shim's StatusText. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "macros.h"
#include "manager.h"
#include "manifest.h"
#include "status-remote.h"

#define MAX_PIDS 8U /* SHIM_MAX_INSTANCES */

typedef struct Row {
        const Backend *backend;
        char *socket;  /* listening, failed, not enabled, inactive, not installed; NULL: unknown */
        char *service; /* active, idle, failed, starting, stopping; NULL: unknown */
        char *status_text;
        pid_t pids[MAX_PIDS];
        unsigned n_pids;
        int64_t up_sec;                                    /* of the first backend process; -1: unknown */
        uint64_t memory;                                   /* bytes; UINT64_MAX: unknown */
        int64_t sessions, in_flight, calls, last_call_sec; /* -1: unknown */
        char *contract;                                    /* "matches", "differs: ...", NULL: not checked */
        RemoteLook look;                                   /* a backend on another host */
} Row;

static void row_done(Row *r) {
        free(r->socket);
        free(r->service);
        free(r->status_text);
        free(r->contract);
        remote_look_done(&r->look);
}

static char *json_dup_string(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

static int64_t json_int(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        /* Checked by status-remote.c; a double past int64_t must never reach the cast. */
        return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0
                       ? (int64_t) v->valuedouble
                       : -1;
}

/* A remote backend's row: what its host said about it there. */
static void row_from_remote(Row *r) {
        const cJSON *o = r->look.there, *pid;

        if (!o)
                return;
        r->socket = json_dup_string(o, "socket");
        r->service = json_dup_string(o, "service");
        r->status_text = json_dup_string(o, "status_text");
        r->contract = json_dup_string(o, "manifest_check");
        cJSON_ArrayForEach (pid, cJSON_GetObjectItemCaseSensitive(o, "pids"))
                if (cJSON_IsNumber(pid) && pid->valuedouble >= 1 && pid->valuedouble <= 4194304.0 &&
                    r->n_pids < MAX_PIDS)
                        r->pids[r->n_pids++] = (pid_t) pid->valuedouble;
        r->up_sec = json_int(o, "uptime_sec");
        r->memory = json_int(o, "memory_bytes") < 0 ? UINT64_MAX : (uint64_t) json_int(o, "memory_bytes");
        r->sessions = json_int(o, "sessions");
        r->in_flight = json_int(o, "in_flight");
        r->calls = json_int(o, "calls");
        r->last_call_sec = json_int(o, "last_call_sec_ago");
}

static const char *reachability(const Row *r) {
        if (!r->look.checked)
                return "not checked";
        return r->look.reachable ? "reachable" : "unreachable";
}

/* The WHERE column: "ssh://root@far (everything): reachable", or "here". */
static char *row_where(const Row *r) {
        const Remote *rm = &r->backend->remote;
        char *s = NULL;

        if (rm->kind == REMOTE_NONE)
                return strdup("here");
        if (asprintf(&s, "%s (%s): %s%s%s", rm->host, rm->remote_name, reachability(r), r->look.reason ? ": " : "",
                     r->look.reason ?: "") < 0)
                return NULL;
        return s;
}

static char *socket_state(const char *load, const char *active, const char *file_state) {
        if (streq(load, "not-found"))
                return strdup("not installed");
        if (streq(active, "failed"))
                return strdup("failed");
        if (streq(active, "active"))
                return strdup("listening");
        if (streq(file_state, "enabled") || streq(file_state, "enabled-runtime"))
                return strdup("inactive");
        return strdup("not enabled");
}

static char *service_state(const char *active) {
        if (streq(active, "active") || streq(active, "reloading"))
                return strdup("active");
        if (streq(active, "activating"))
                return strdup("starting");
        if (streq(active, "deactivating"))
                return strdup("stopping");
        if (streq(active, "failed"))
                return strdup("failed");
        return strdup("idle");
}

/* Seconds since a process started, from /proc (the same host as the manager). */
static int process_up_sec(pid_t pid, int64_t *ret) {
        char path[64], buf[1024];
        const char *p;
        unsigned long long start = 0;
        double uptime;
        FILE *f;
        size_t n;

        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        p = strrchr(buf, ')');
        /* After the command: state is field 3, starttime field 22. */
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                         &start) != 1)
                return -EBADMSG;
        f = fopen("/proc/uptime", "re");
        if (!f)
                return -errno;
        n = (size_t) fscanf(f, "%lf", &uptime);
        fclose(f);
        if (n != 1)
                return -EBADMSG;
        *ret = (int64_t) (uptime - (double) start / (double) sysconf(_SC_CLK_TCK));
        if (*ret < 0)
                *ret = 0;
        return 0;
}

/* The shim's STATUS= line: "backend pid 1234 (ready), 2 sessions, 0 in flight, 17 calls served,
 * last call at 2026-11-22T07:01:02Z, manifest matches" (see mcp-lazy-shimd(8)). */
static void row_parse_status(Row *r, const char *text) {
        _cleanup_free_ char *copy = strdup(text);
        char *manifest, *seg, *save = NULL;

        if (!copy)
                return;
        manifest = strstr(copy, "manifest matches");
        if (!manifest)
                manifest = strstr(copy, "manifest differs");
        if (manifest) {
                r->contract = strdup(manifest + strlen("manifest "));
                *manifest = 0;
        }
        for (seg = strtok_r(copy, ",", &save); seg; seg = strtok_r(NULL, ",", &save)) {
                long long v;
                int pid;
                char when[32];

                seg += strspn(seg, " ");
                if (sscanf(seg, "backend pid %d", &pid) == 1 && pid > 0 && r->n_pids < MAX_PIDS)
                        r->pids[r->n_pids++] = pid;
                else if (sscanf(seg, "%lld session", &v) == 1 && strstr(seg, "session"))
                        r->sessions = v;
                else if (sscanf(seg, "%lld in flight", &v) == 1 && strstr(seg, "in flight"))
                        r->in_flight = v;
                else if (sscanf(seg, "%lld call", &v) == 1 && strstr(seg, "served"))
                        r->calls = v;
                else if (sscanf(seg, "last call at %31s", when) == 1) {
                        struct tm tm = {};
                        const char *end = strptime(when, "%Y-%m-%dT%H:%M:%SZ", &tm);
                        if (end && !*end) {
                                int64_t ago = (int64_t) time(NULL) - (int64_t) timegm(&tm);
                                r->last_call_sec = ago < 0 ? 0 : ago;
                        }
                }
        }
        if (r->n_pids > 0 && process_up_sec(r->pids[0], &r->up_sec) < 0)
                r->up_sec = -1;
}

static void row_read(sd_bus *bus, Row *r) {
        _cleanup_free_ char *sock = NULL, *svc = NULL, *load = NULL, *active = NULL, *file_state = NULL,
                            *svc_active = NULL;

        if (manager_unit_path(r->backend->name, "socket", &sock) < 0 ||
            manager_unit_path(r->backend->name, "service", &svc) < 0)
                return;
        if (manager_unit_string(bus, sock, "org.freedesktop.systemd1.Unit", "LoadState", &load) >= 0 &&
            manager_unit_string(bus, sock, "org.freedesktop.systemd1.Unit", "ActiveState", &active) >= 0) {
                (void) manager_unit_string(bus, sock, "org.freedesktop.systemd1.Unit", "UnitFileState", &file_state);
                r->socket = socket_state(load, active, file_state ?: "");
        }
        if (manager_unit_string(bus, svc, "org.freedesktop.systemd1.Unit", "ActiveState", &svc_active) < 0)
                return;
        r->service = service_state(svc_active);
        if (streq(r->service, "idle") || streq(r->service, "failed"))
                return; /* what a stopped shim said last is not the state now */
        (void) manager_unit_u64(bus, svc, "org.freedesktop.systemd1.Service", "MemoryCurrent", &r->memory);
        if (manager_unit_string(bus, svc, "org.freedesktop.systemd1.Service", "StatusText", &r->status_text) >= 0)
                row_parse_status(r, r->status_text);
}

static const char *format_age(int64_t sec, char *buf, size_t size) {
        if (sec < 0)
                snprintf(buf, size, "-");
        else if (sec < 60)
                snprintf(buf, size, "%llds", (long long) sec);
        else if (sec < 3600)
                snprintf(buf, size, "%lldm%02llds", (long long) sec / 60, (long long) sec % 60);
        else if (sec < 86400)
                snprintf(buf, size, "%lldh%02lldm", (long long) sec / 3600, (long long) sec % 3600 / 60);
        else
                snprintf(buf, size, "%lldd%02lldh", (long long) sec / 86400, (long long) sec % 86400 / 3600);
        return buf;
}

static const char *format_bytes(uint64_t b, char *buf, size_t size) {
        static const char units[] = "KMGT";
        double v = (double) b;
        int u = -1;

        if (b == UINT64_MAX) {
                snprintf(buf, size, "-");
                return buf;
        }
        while (v >= 1024.0 && u < 3)
                v /= 1024.0, u++;
        if (u < 0)
                snprintf(buf, size, "%lluB", (unsigned long long) b);
        else
                snprintf(buf, size, "%.1f%c", v, units[u]);
        return buf;
}

static const char *format_count(int64_t v, char *buf, size_t size) {
        if (v < 0)
                snprintf(buf, size, "-");
        else
                snprintf(buf, size, "%lld", (long long) v);
        return buf;
}

static int name_width(const Row *rows, size_t n) {
        int w = 7;
        for (size_t i = 0; i < n; i++)
                if ((int) strlen(rows[i].backend->name) > w)
                        w = (int) strlen(rows[i].backend->name);
        return w;
}

static void print_table(const Row *rows, size_t n) {
        int w = name_width(rows, n);
        bool remote = false;

        for (size_t i = 0; i < n; i++)
                remote = remote || rows[i].backend->remote.kind != REMOTE_NONE;
        printf("%-*s %-13s %-8s %8s %7s %8s %8s %6s %9s %-*s%s\n", w, "BACKEND", "SOCKET", "SERVICE", "PID", "UP",
               "MEMORY", "SESSIONS", "CALLS", "LAST CALL", remote ? 8 : 0, "MANIFEST", remote ? " WHERE" : "");
        for (size_t i = 0; i < n; i++) {
                const Row *r = &rows[i];
                char pid[24], up[24], mem[24], ses[24], calls[24], last[32];

                if (r->n_pids == 0)
                        snprintf(pid, sizeof pid, "-");
                else if (r->n_pids == 1)
                        snprintf(pid, sizeof pid, "%d", (int) r->pids[0]);
                else
                        snprintf(pid, sizeof pid, "%d+%u", (int) r->pids[0], r->n_pids - 1);
                format_age(r->n_pids ? r->up_sec : -1, up, sizeof up);
                if (r->last_call_sec >= 0) {
                        char a[24];
                        snprintf(last, sizeof last, "%s ago", format_age(r->last_call_sec, a, sizeof a));
                } else
                        snprintf(last, sizeof last, "-");
                _cleanup_free_ char *where = remote ? row_where(r) : NULL;
                printf("%-*s %-13s %-8s %8s %7s %8s %8s %6s %9s %-*s%s%s\n", w, r->backend->name, r->socket ?: "?",
                       r->service ?: "?", pid, up, format_bytes(r->memory, mem, sizeof mem),
                       format_count(r->sessions, ses, sizeof ses), format_count(r->calls, calls, sizeof calls), last,
                       remote ? 8 : 0, r->contract ?: "-", where ? " " : "", where ?: "");
        }
}

/* Without a manager: what the manifest says. */
static void print_manifest_table(const Row *rows, size_t n) {
        int w = name_width(rows, n);

        printf("%-*s %6s %12s %-8s %s\n", w, "BACKEND", "TOOLS", "IDLE TIMEOUT", "SHARING", "LIFECYCLE");
        for (size_t i = 0; i < n; i++) {
                const Backend *b = rows[i].backend;
                char idle[32];
                printf("%-*s %6zu %12s %-8s %s\n", w, b->name, b->n_tools,
                       duration_format(b->idle_timeout_usec, idle, sizeof idle),
                       b->sharing == SHARING_POOLED ? "pooled" : "session", lifecycle_to_string(b->lifecycle));
        }
}

static cJSON *json_count(int64_t v) {
        return v < 0 ? cJSON_CreateNull() : cJSON_CreateNumber((double) v);
}

static cJSON *json_string(const char *s) {
        return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* "remote": null for a backend of this host. */
static cJSON *remote_json(const Row *r) {
        const Remote *rm = &r->backend->remote;
        _cleanup_json_ cJSON *o = NULL;

        if (rm->kind == REMOTE_NONE)
                return cJSON_CreateNull();
        o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "host", rm->host) ||
            !cJSON_AddStringToObject(o, "remote_name", rm->remote_name) ||
            !cJSON_AddStringToObject(o, "reachability", reachability(r)) ||
            !cJSON_AddItemToObject(o, "reason", json_string(r->look.reason)))
                return NULL;
        return TAKE_PTR(o);
}

static cJSON *row_json(const Row *r) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON *pids = cJSON_CreateArray();
        const Backend *b = r->backend;
        bool ok = o && pids && cJSON_AddItemToObject(o, "name", cJSON_CreateString(b->name));

        if (!ok) {
                cJSON_Delete(pids);
                return NULL;
        }
        for (unsigned k = 0; k < r->n_pids; k++)
                ok = ok && cJSON_AddItemToArray(pids, cJSON_CreateNumber(r->pids[k]));
        ok = ok && cJSON_AddItemToObject(o, "lifecycle", cJSON_CreateString(lifecycle_to_string(b->lifecycle))) &&
             cJSON_AddItemToObject(o, "sharing",
                                   cJSON_CreateString(b->sharing == SHARING_POOLED ? "pooled" : "session")) &&
             cJSON_AddItemToObject(o, "idle_timeout_sec",
                                   b->idle_timeout_usec == USEC_INFINITY
                                           ? cJSON_CreateNull()
                                           : cJSON_CreateNumber((double) (b->idle_timeout_usec / USEC_PER_SEC))) &&
             cJSON_AddItemToObject(o, "tools", cJSON_CreateNumber((double) b->n_tools)) &&
             cJSON_AddItemToObject(o, "socket", json_string(r->socket)) &&
             cJSON_AddItemToObject(o, "service", json_string(r->service));
        if (!ok || !cJSON_AddItemToObject(o, "pids", pids)) {
                cJSON_Delete(pids);
                return NULL;
        }
        ok = cJSON_AddItemToObject(o, "uptime_sec", json_count(r->n_pids ? r->up_sec : -1)) &&
             cJSON_AddItemToObject(o, "memory_bytes",
                                   r->memory == UINT64_MAX ? cJSON_CreateNull()
                                                           : cJSON_CreateNumber((double) r->memory)) &&
             cJSON_AddItemToObject(o, "sessions", json_count(r->sessions)) &&
             cJSON_AddItemToObject(o, "in_flight", json_count(r->in_flight)) &&
             cJSON_AddItemToObject(o, "calls", json_count(r->calls)) &&
             cJSON_AddItemToObject(o, "last_call_sec_ago", json_count(r->last_call_sec)) &&
             cJSON_AddItemToObject(o, "manifest_check", json_string(r->contract)) &&
             cJSON_AddItemToObject(o, "status_text", json_string(r->status_text)) &&
             cJSON_AddItemToObject(o, "remote", remote_json(r));
        return ok ? TAKE_PTR(o) : NULL;
}

static int print_json(const char *manifest, const char *manager, const char *problem, const Row *rows, size_t n) {
        _cleanup_json_ cJSON *top = cJSON_CreateObject();
        _cleanup_free_ char *text = NULL;
        cJSON *list;

        if (!top || !cJSON_AddStringToObject(top, "manifest", manifest) ||
            !cJSON_AddItemToObject(top, "manager", json_string(manager)) ||
            !cJSON_AddItemToObject(top, "systemd", cJSON_CreateBool(problem == NULL)) ||
            !cJSON_AddItemToObject(top, "problem", json_string(problem)) ||
            !(list = cJSON_AddArrayToObject(top, "backends")))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                cJSON *o = row_json(&rows[i]);
                if (!o || !cJSON_AddItemToArray(list, o)) {
                        cJSON_Delete(o);
                        return -ENOMEM;
                }
        }
        text = cJSON_Print(top);
        if (!text)
                return -ENOMEM;
        printf("%s\n", text);
        return 0;
}

static void status_help(void) {
        printf("Usage: mcp-lazy status [--manifest FILE] [--user|--system] [--json]\n\n"
               "One row per backend of the manifest: its socket and service, the backend's pid, uptime and\n"
               "memory, sessions, calls, the last call, and whether it lists what the manifest says.\n"
               "Read from the user's service manager (root: the system manager; --user, --system choose);\n"
               "never starts anything. Backends on other hosts: their host's own status of them, through\n"
               "'ssh HOST mcp-lazy status --json' (all hosts at once, 15 s at most), or why ssh could not reach it.\n");
}

int status_main(int argc, char *argv[]) {
        enum { ARG_SYSTEM = 0x100, ARG_JSON };
        static const struct option options[] = {
                {"manifest", required_argument, NULL, 'm'}, {"system", no_argument, NULL, ARG_SYSTEM},
                {"user", no_argument, NULL, 'u'},           {"json", no_argument, NULL, ARG_JSON},
                {"help", no_argument, NULL, 'h'},           {},
        };
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *path = NULL, *problem = NULL;
        _cleanup_free_ Row *rows = NULL;
        _cleanup_free_ RemoteLook *looks = NULL;
        ManagerScope scope = manager_default_scope();
        bool json = false;
        int c, r;

        optind = 1;
        while ((c = getopt_long(argc, argv, "m:h", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        free(path);
                        path = strdup(optarg);
                        if (!path)
                                return 1;
                        break;
                case ARG_SYSTEM:
                        scope = MANAGER_SYSTEM;
                        break;
                case 'u':
                        scope = MANAGER_USER;
                        break;
                case ARG_JSON:
                        json = true;
                        break;
                case 'h':
                        status_help();
                        return 0;
                default:
                        return 2;
                }
        if (optind != argc) {
                fprintf(stderr, "Usage: mcp-lazy status [--manifest FILE] [--system] [--json]\n");
                return 2;
        }
        if (manager_load_manifest(scope, &path, &m) < 0)
                return 1;
        rows = calloc(m->n_backends + 1, sizeof *rows);
        looks = calloc(m->n_backends + 1, sizeof *looks);
        if (!rows || !looks)
                return 1;
        for (size_t i = 0; i < m->n_backends; i++)
                rows[i] = (Row){.backend = &m->backends[i],
                                .up_sec = -1,
                                .memory = UINT64_MAX,
                                .sessions = -1,
                                .in_flight = -1,
                                .calls = -1,
                                .last_call_sec = -1};

        r = manager_bus_open(scope, &bus);
        if (r == -ENOMEDIUM)
                r = asprintf(&problem, "systemd is not running here: each session starts its own shims "
                                       "(direct activation), and there is no shared state to show");
        else if (r < 0)
                r = asprintf(
                        &problem, "cannot reach the %s service manager: %s%s", manager_scope_name(scope), strerror(-r),
                        scope == MANAGER_USER && geteuid() == 0 ? " (for the system manager's units: --system)" : "");
        else
                for (size_t i = 0; i < m->n_backends; i++)
                        if (m->backends[i].remote.kind == REMOTE_NONE)
                                row_read(bus, &rows[i]);
        if (r < 0)
                return 1;
        r = status_remote_look(m, &looks[0]);
        if (r < 0)
                fprintf(stderr, "mcp-lazy: cannot look at the remote backends: %s\n", strerror(-r));
        for (size_t i = 0; i < m->n_backends; i++) {
                rows[i].look = looks[i];
                looks[i] = (RemoteLook){};
                row_from_remote(&rows[i]);
        }

        if (problem && !json)
                fprintf(stderr, "mcp-lazy: %s. The manifest's backends:\n", problem);
        if (json)
                r = print_json(path, problem ? NULL : manager_scope_name(scope), problem, rows, m->n_backends);
        else if (problem)
                print_manifest_table(rows, m->n_backends);
        else
                print_table(rows, m->n_backends);
        for (size_t i = 0; i < m->n_backends; i++)
                row_done(&rows[i]);
        fflush(stdout);
        return r < 0 ? 1 : 0;
}
