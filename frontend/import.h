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
