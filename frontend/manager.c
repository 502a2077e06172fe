/* The service manager for mcp-lazy's own subcommands (status, warm, import): bus, default manifest, unit
 * properties, starting a unit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include "macros.h"
#include "manager.h"
#include "manifest-write.h"

ManagerScope manager_default_scope(void) {
        return geteuid() == 0 ? MANAGER_SYSTEM : MANAGER_USER;
}

const char *manager_scope_name(ManagerScope scope) {
        return scope == MANAGER_SYSTEM ? "system" : "user";
}

const char *manager_systemctl_flag(ManagerScope scope) {
        return scope == MANAGER_SYSTEM ? "" : " --user";
}

int manager_load_manifest(ManagerScope scope, char **path, Manifest **ret) {
        _cleanup_free_ char *err = NULL;
        int r;

        if (!*path && !(*path = manifest_default_path_for(scope == MANAGER_SYSTEM))) {
                fprintf(stderr, "mcp-lazy: no home directory to find the manifest in; use --manifest FILE\n");
                return -ENOENT;
        }
        r = manifest_load_file(*path, ret, &err);
        if (r < 0)
                fprintf(stderr, "%s\n", err ?: strerror(-r));
        return r;
}

int manager_bus_open(ManagerScope scope, sd_bus **ret) {
        sd_bus *bus = NULL;
        int r;

        if (sd_booted() <= 0)
                return -ENOMEDIUM;
        r = scope == MANAGER_SYSTEM ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus);
        if (r >= 0)
                r = sd_bus_set_method_call_timeout(bus, 5 * USEC_PER_SEC);
        if (r < 0) {
                sd_bus_flush_close_unref(bus);
                return r;
        }
        *ret = bus;
        return 0;
}

int manager_unit_path(const char *backend, const char *suffix, char **ret) {
        _cleanup_free_ char *unit = NULL;

        if (asprintf(&unit, "mcp-lazy@%s.%s", backend, suffix) < 0)
                return -ENOMEM;
        return sd_bus_path_encode("/org/freedesktop/systemd1/unit", unit, ret);
}

int manager_unit_string(sd_bus *bus, const char *path, const char *iface, const char *prop, char **ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        return sd_bus_get_property_string(bus, "org.freedesktop.systemd1", path, iface, prop, &e, ret);
}

int manager_unit_u64(sd_bus *bus, const char *path, const char *iface, const char *prop, uint64_t *ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        return sd_bus_get_property_trivial(bus, "org.freedesktop.systemd1", path, iface, prop, &e, 't', ret);
}

#define START_TIMEOUT_USEC (30ULL * USEC_PER_SEC)

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

int manager_start_unit(sd_bus *bus, ManagerScope scope, const char *unit) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        Job job = {};
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + START_TIMEOUT_USEC, t;
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

/* The service of backend name, if it runs: reloaded (0), or -errno, having said why not on stderr. */
static int reload_service(sd_bus *bus, ManagerScope scope, const char *name) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_free_ char *unit = NULL, *path = NULL, *active = NULL;
        int r;

        if (asprintf(&unit, "mcp-lazy@%s.service", name) < 0)
                return -ENOMEM;
        r = manager_unit_path(name, "service", &path);
        if (r >= 0)
                r = manager_unit_string(bus, path, "org.freedesktop.systemd1.Unit", "ActiveState", &active);
        /* Not running: the next start reads the file anew. */
        if (r >= 0 && !streq(active, "active") && !streq(active, "reloading") && !streq(active, "activating"))
                return 0;
        if (r >= 0)
                r = sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                       "org.freedesktop.systemd1.Manager", "ReloadUnit", &e, NULL, "ss", unit,
                                       "replace");
        if (r < 0) {
                fprintf(stderr,
                        "mcp-lazy: cannot reload %s (%s): its shim keeps the values it has until it stops; run "
                        "'systemctl%s reload %s'\n",
                        unit, e.message ?: strerror(-r), manager_systemctl_flag(scope), unit);
                return r;
        }
        printf("Reloaded %s: its shim stops once no call is in flight, and the next call starts it with the new "
               "values\n",
               unit);
        return 0;
}

void manager_reload_services(ManagerScope scope, char *const *names) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        int r;

        if (!names || !names[0])
                return;
        r = manager_bus_open(scope, &bus);
        for (char *const *n = names; *n; n++)
                if (r < 0)
                        fprintf(stderr,
                                "mcp-lazy: cannot reach the %s service manager (%s): a running shim of '%s' keeps "
                                "the values it has until it stops; run 'systemctl%s reload mcp-lazy@%s.service'\n",
                                manager_scope_name(scope), strerror(-r), *n, manager_systemctl_flag(scope), *n);
                else if (reload_service(bus, scope, *n) == -ENOMEM)
                        fprintf(stderr, "mcp-lazy: out of memory\n");
}
