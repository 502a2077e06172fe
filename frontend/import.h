/* mcp-lazy import and mcp-lazy refresh: from client configs to a manifest, and keeping it current. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "manifest-write.h"
#include "mcp-client.h"

int import_main(int argc, char *argv[]);
int refresh_main(int argc, char *argv[]);

/* Shared by import and refresh (import.c). */
/* Writes a discovered server as backend NAME: identity keys, lists, tools (the rest of the backend kept). */
int import_store_backend(ManifestDoc *doc, const char *name, const McpDiscovery *d, const cJSON *client_caps,
                         bool warn);
/* Emits, checks and writes the manifest (0600 when it holds env values); prints to stdout instead with dry_run. */
int import_write_manifest(ManifestDoc *doc, bool dry_run);
/* tools/list entries with only the keys a manifest takes (the others said on stderr). */
cJSON *tools_for_manifest(const cJSON *tools, const char *backend, bool warn);
/* Enables and starts mcp-lazy@NAME.socket for each name in the user's manager (root: the system's);
 * without systemd says what to run instead and returns 0. */
int enable_sockets(char *const *backends);
int parse_timeout_arg(const char *s, uint64_t *ret);

/* Secrets (secrets.c): under the system manager, the backends' env values go into a file of each
 * backend that only root reads (secrets/NAME.env beside the manifest, which mcp-lazy@NAME.service
 * reads with EnvironmentFile=); the manifest keeps their names as secret_env. */
/* Whether writing manifest_path moves env values out: root writing the system manager's manifest
 * (/etc/mcp-lazy/manifest.yaml), with systemd running and the socket group there. */
bool secrets_wanted(const char *manifest_path);
/* Whether manifest_path is the system manager's manifest, the only one whose units read secrets
 * files (EnvironmentFile=): beside any other, secret_env names what its backends never get. */
bool secrets_manifest_is_system(const char *manifest_path);
int secrets_path(const char *manifest_path, const char *backend, char **ret);
/* The variables of backend's secrets file ("KEY=VALUE"); *ret_error says which file and why. */
int secrets_read(const char *manifest_path, const char *backend, char ***ret_env, char **ret_error);
/* Writes doc as its manifest (with dry_run, prints it instead); says why not. */
typedef int (*SecretsManifestWriter)(ManifestDoc *doc, bool dry_run);
/* Reloads the units of backends (a NULL-terminated list, not empty), whose running shims lack values
 * their secrets files now have; says what it did, and what failed. */
typedef void (*SecretsUnitsReloader)(char *const *backends);
/* Moves each backend's env values (but those of the shim's own) into its secrets file, over the
 * values the file holds already (which stay), and records the file's names in secret_env; then
 * writes the manifest with write_manifest, between the secrets files that may be written before it
 * (a backend that runs what it ran) and those put in place only after it (a new or changed
 * definition, staged before it: removed if it fails). Last, however that ended, reload_units gets
 * the backends whose file now in place has values their running shim lacks (a value changed or
 * added; a file a new or changed definition has anew). With dry_run, says each file and reloads
 * nothing; errors are said on stderr. */
int secrets_split(ManifestDoc *doc, bool dry_run, SecretsManifestWriter write_manifest,
                  SecretsUnitsReloader reload_units);
/* Whether env name (n bytes) stays in the manifest's env: in the unit's environment file it would
 * change the shim too (systemd's own variables, glibc's, libsystemd's, the sanitizers', the shim's). */
bool secrets_env_name_stays(const char *name, size_t n);
/* Whether some backend has env values that secrets_split() would move. */
bool secrets_pending(const ManifestDoc *doc);
/* What else secrets_split() would do to the secrets files: how many it would adopt (a file written by
 * hand, its names into secret_env) or put aside (no backend owns it); with say, each is said (names,
 * never values). -EPERM and others when the secrets directory would be refused (said unless !say). */
int secrets_files_pending(const ManifestDoc *doc, bool say);
