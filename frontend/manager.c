/* The service manager for mcp-lazy's own subcommands (status, warm): bus, default manifest, unit properties. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
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
