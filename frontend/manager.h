/* The service manager as the status, warm and import subcommands see it: which one, its bus, the units of a backend. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

#include "manifest.h"

typedef enum ManagerScope {
        MANAGER_USER,
        MANAGER_SYSTEM,
} ManagerScope;

/* The system manager for root, the user's own otherwise: as the frontend, the units and import have it. */
ManagerScope manager_default_scope(void);
const char *manager_scope_name(ManagerScope scope);
/* " --user" or "" for the systemctl commands we suggest. */
const char *manager_systemctl_flag(ManagerScope scope);
/* Loads *path, or (NULL) the manifest the scope's units read: $XDG_CONFIG_HOME/mcp-lazy/manifest.yaml or
 * /etc/mcp-lazy/manifest.yaml, which *path then names. Says on stderr why not. */
int manager_load_manifest(ManagerScope scope, char **path, Manifest **ret);
/* 0 and a bus; -ENOMEDIUM when systemd does not run here; other -errno when the manager cannot be reached. */
int manager_bus_open(ManagerScope scope, sd_bus **ret);
/* The D-Bus object of mcp-lazy@NAME.SUFFIX ("socket", "service"). Reading its properties never starts it. */
int manager_unit_path(const char *backend, const char *suffix, char **ret);
int manager_unit_string(sd_bus *bus, const char *path, const char *iface, const char *prop, char **ret);
int manager_unit_u64(sd_bus *bus, const char *path, const char *iface, const char *prop, uint64_t *ret);
/* Like `systemctl start`: queues the start job and waits (30 s at most) until systemd says how it ended;
 * 0 when it is done, else -errno, having said why on stderr. */
int manager_start_unit(sd_bus *bus, ManagerScope scope, const char *unit);
/* Like `systemctl reload`, for mcp-lazy@NAME.service of each name whose service runs: its shim stops once
 * no call is in flight, and the next one starts with the unit's environment file read anew. Says so on
 * stdout, and on stderr what failed, with what to run instead. */
void manager_reload_services(ManagerScope scope, char *const *names);

/* The subcommands: status.c, warm.c. Each returns the exit status. */
int status_main(int argc, char *argv[]);
int warm_main(int argc, char *argv[]);
