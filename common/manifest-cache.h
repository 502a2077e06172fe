/* A cache of parsed YAML manifests: libyaml is most of a start, and the manifest rarely changes. */
#pragma once

#include <sys/stat.h>

#include "yaml_tree.h"

/* The tree of the manifest at path as it was when stat'ed as *st, or -ENOENT. Never an error
 * worth reporting: a bad or stale cache entry is a miss. */
int manifest_cache_get(const char *path, const struct stat *st, YNode **ret);
/* Best effort; failures are silent (the next start parses again). */
void manifest_cache_put(const char *path, const struct stat *st, const YNode *tree);
