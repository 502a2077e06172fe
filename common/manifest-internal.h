/* What the manifest reader's parts share: checking a parsed tree and building the Manifest. */
#pragma once

#include "manifest.h"
#include "yaml_tree.h"

/* On a mistake: -EINVAL with every problem in *ret_error (when ret_error is not NULL). */
int manifest_from_tree(const YNode *root, const char *name, const char *dir, Manifest **ret, char **ret_error);
