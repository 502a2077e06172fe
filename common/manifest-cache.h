/* A cache of parsed YAML manifests: libyaml is most of a start, and the manifest rarely changes. */
#pragma once

#include <sys/stat.h>
#include <sys/uio.h>

#include "yaml_tree.h"

/* The tree of the manifest at path as it was when stat'ed as *st, or -ENOENT. Never an error
 * worth reporting: a bad or stale cache entry is a miss. */
int manifest_cache_get(const char *path, const struct stat *st, YNode **ret);
/* The same with only backend and its tools left in the tree (others dropped before it is decoded). */
int manifest_cache_get_backend(const char *path, const struct stat *st, const char *backend, YNode **ret);
/* Best effort; failures are silent (the next start parses again). */
void manifest_cache_put(const char *path, const struct stat *st, const YNode *tree);

/* The cache's directory ($MCP_LAZY_CACHE_DIR, else the runtime dir's mcp-lazy/cache), or NULL when
 * there is none (MCP_LAZY_CACHE_DIR= turns the cache off). */
char *manifest_cache_dir(void);
/* The cache file for path (and a variant of it, e.g. a backend's name, or NULL), ending in suffix. */
char *manifest_cache_file(const char *path, const char *variant, const char *suffix);
/* What identifies one version of the file at path (and of this program): entries keyed by it. */
char *manifest_cache_stamp(const char *path, const struct stat *st);
/* Replaces file atomically with the bytes of iov (a private directory is made if needed). */
int manifest_cache_write(const char *file, const struct iovec *iov, size_t n);
