/* mcp-lazy warm NAME...: starts mcp-lazy@NAME.service, so that a warm or resident backend runs before the first call.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "macros.h"
#include "manager.h"
#include "manifest.h"

#define WARM_TIMEOUT_USEC (30ULL * USEC_PER_SEC)

static uint64_t now_usec(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

typedef struct Job {
        const char *path; /* the job StartUnit queued */
        char *result;     /* from JobRemoved: done, failed, ... */
} Job;

static int on_job_removed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Job *job = userdata;
        const char *path, *unit, *result;
        uint32_t id;

        (void) error;
        if (sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0 || !job->path || !streq(path, job->path))
                return 0;
        free(job->result);
        job->result = strdup(result);
        return 0;
}

/* Like `systemctl start`: queue the start job and wait until systemd says how it ended. */
static int start_unit(sd_bus *bus, ManagerScope scope, const char *unit) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        Job job = {};
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + WARM_TIMEOUT_USEC, t;
        int r;

        r = sd_bus_match_signal(bus, &slot, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                "org.freedesktop.systemd1.Manager", "JobRemoved", on_job_removed, &job);
        if (r >= 0)
                r = sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                       "org.freedesktop.systemd1.Manager", "Subscribe", &e, NULL, "");
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: cannot talk to the %s service manager: %s\n", manager_scope_name(scope),
                        e.message ?: strerror(-r));
                return r;
        }
        r = sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                               "org.freedesktop.systemd1.Manager", "StartUnit", &e, &reply, "ss", unit, "replace");
        if (r >= 0)
                r = sd_bus_message_read(reply, "o", &job.path);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: cannot start %s: %s\n", unit, e.message ?: strerror(-r));
                return r;
        }
        /* By the clock: every unit's JobRemoved wakes us, and a busy manager must not shorten the wait. */
        while (!job.result && (t = now_usec(CLOCK_MONOTONIC)) < deadline) {
                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        break;
                if (r > 0)
                        continue;
                r = sd_bus_wait(bus, deadline - t);
                if (r < 0)
                        break;
        }
        if (!job.result) {
                fprintf(stderr, "mcp-lazy: %s: no answer from systemd about the start job%s%s\n", unit,
                        r < 0 ? ": " : "", r < 0 ? strerror(-r) : "");
                return r < 0 ? r : -ETIMEDOUT;
        }
        r = streq(job.result, "done") ? 0 : -EIO;
        if (r < 0)
                fprintf(stderr, "mcp-lazy: %s: start %s; see 'journalctl%s -u %s'\n", unit, job.result,
                        manager_systemctl_flag(scope), unit);
        free(job.result);
        return r;
}

int warm_main(int argc, char *argv[]) {
        static const struct option options[] = {
                {"manifest", required_argument, NULL, 'm'},
                {"system", no_argument, NULL, 's'},
                {"user", no_argument, NULL, 'u'},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *path = NULL;
        ManagerScope scope = manager_default_scope();
        int c, r, failed = 0;

        optind = 1;
        while ((c = getopt_long(argc, argv, "m:h", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        free(path);
                        path = strdup(optarg);
                        if (!path)
                                return 1;
                        break;
                case 's':
                        scope = MANAGER_SYSTEM;
                        break;
                case 'u':
                        scope = MANAGER_USER;
                        break;
                case 'h':
                        printf("Usage: mcp-lazy warm [--manifest FILE] [--user|--system] NAME...\n\n"
                               "Starts mcp-lazy@NAME.service, so that a backend with lifecycle warm or resident\n"
                               "runs before the first call (like systemctl start).\n");
                        return 0;
                default:
                        return 2;
                }
        if (optind >= argc) {
                fprintf(stderr, "Usage: mcp-lazy warm [--manifest FILE] [--system] NAME...\n");
                return 2;
        }
        if (manager_load_manifest(scope, &path, &m) < 0)
                return 1;
        /* Every name first: nothing is started when one of them is wrong. */
        for (int i = optind; i < argc; i++) {
                const Backend *b = manifest_find_backend(m, argv[i]);
                if (!b) {
                        fprintf(stderr, "mcp-lazy: backend '%s' is not in %s\n", argv[i], path);
                        return 1;
                }
                if (b->remote.kind != REMOTE_NONE) {
                        fprintf(stderr,
                                "mcp-lazy: backend '%s' runs on %s, as '%s' there: warm it there ('mcp-lazy warm %s' "
                                "on that host)\n",
                                argv[i], b->remote.host, b->remote.remote_name, b->remote.remote_name);
                        return 1;
                }
                if (b->lifecycle == LIFECYCLE_LAZY) {
                        fprintf(stderr,
                                "mcp-lazy: backend '%s' is lazy: its shim starts it on the first call, not before; "
                                "set 'lifecycle: warm' (or resident) for it in %s\n",
                                argv[i], path);
                        return 1;
                }
        }
        r = manager_bus_open(scope, &bus);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: %s\n",
                        r == -ENOMEDIUM ? "systemd is not running here: nothing to warm (each session starts its "
                                          "own shims)"
                                        : "cannot reach the service manager");
                return 1;
        }
        for (int i = optind; i < argc; i++) {
                char unit[128];
                snprintf(unit, sizeof unit, "mcp-lazy@%s.service", argv[i]);
                if (start_unit(bus, scope, unit) < 0)
                        failed++;
                else
                        printf("%s: started\n", unit);
        }
        return failed ? 1 : 0;
}
