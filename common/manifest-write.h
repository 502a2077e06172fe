/* Writing the manifest: edit the YAML tree of the file as it is, emit it with libyaml, replace it atomically. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>

#include "yaml_tree.h"

typedef struct ManifestDoc {
        char *path;
        YNode *root; /* a mapping with 'backends' and 'tools' */
        bool existed;
} ManifestDoc;

/* The manifest the units read: %E/mcp-lazy/manifest.yaml of the manager this user would have
 * ($XDG_CONFIG_HOME, else ~/.config), /etc/mcp-lazy/manifest.yaml for root. */
char *manifest_default_path(void);
/* The same for the system manager's units (/etc/mcp-lazy/manifest.yaml) or a user manager's. */
char *manifest_default_path_for(bool system);

/* Reads path (a missing file gives an empty manifest). A file that does not parse: -EINVAL with
 * *ret_error "FILE:LINE:COLUMN: sentence". The file is not checked as a manifest here: that happens
 * when it is written. */
int manifest_doc_load(const char *path, ManifestDoc **ret, char **ret_error);
/* An empty manifest that will be written to path. */
int manifest_doc_new(const char *path, ManifestDoc **ret);
ManifestDoc *manifest_doc_free(ManifestDoc *d);
static inline void manifest_doc_freep(ManifestDoc **d) {
        manifest_doc_free(*d);
}

/* The mapping of backends.NAME, or NULL. */
const YNode *manifest_doc_backend(const ManifestDoc *d, const char *name);
/* Sets backends.NAME.KEY to value (JSON, taken; NULL removes the key), keeping the backend's other keys
 * and their order; a new key goes last, a new backend last. -EINVAL: value nests past 64 levels or has
 * two equal keys (what the manifest reader refuses). */
int manifest_doc_set_backend_key(ManifestDoc *d, const char *name, const char *key, cJSON *value);
/* Replaces every tool of backend NAME by tools (MCP tools/list entries, taken), where the first of
 * the old ones stood (else at the end). Each gets 'backend: NAME' after its name. */
int manifest_doc_set_tools(ManifestDoc *d, const char *name, cJSON *tools);
/* The tools of the manifest that belong to other backends than 'name': tool name -> backend. */
const char *manifest_doc_tool_owner(const ManifestDoc *d, const char *tool);
/* Whether any backend has an env with values, or secret_env (the file then gets mode 0600: its
 * commands may hold secrets too, a password in a URL). */
bool manifest_doc_has_env(const ManifestDoc *d);

/* The YAML text; checked with the manifest reader before it is handed back (-EINVAL and *ret_error
 * with the reader's errors if it does not pass). */
int manifest_doc_emit(const ManifestDoc *d, char **ret_text, size_t *ret_len, char **ret_error);

/* Writes all of data to fd (again after EINTR), then fsyncs it: 0, or -1 with errno set. What both
 * atomic writers (this file's and envfile_write()) do between creating the temporary file and renaming it. */
int write_all_sync(int fd, const void *data, size_t len);
/* Write data to path through a temporary file in the same directory: write, fsync, rename, fsync the
 * directory. mode (e.g. 0600) is applied to the new file; with keep_owner the new file gets the old
 * one's owner. A symlink at path is followed: its target is replaced. */
int write_file_atomic(const char *path, const char *data, size_t len, mode_t mode, bool keep_owner);
/* The same, and then the new file gets owner uid and group gid (-1: left as they are), before it is
 * renamed into place. */
int write_file_atomic_owned(const char *path, const char *data, size_t len, mode_t mode, bool keep_owner, uid_t uid,
                            gid_t gid);
/* Reads a whole regular file (up to max bytes; -EFBIG past it). */
int read_file_full(const char *path, size_t max, char **ret, size_t *ret_len);
/* The same, and the identity and mode of the file that was read (fstat of the descriptor read from). */
int read_file_stat(const char *path, size_t max, char **ret, size_t *ret_len, struct stat *ret_st);
/* The same from an open descriptor (read from where it stands; not closed). */
int read_fd_full(int fd, size_t max, char **ret, size_t *ret_len, struct stat *ret_st);
/* mkdir -p with mode for the directories it creates. */
int mkdir_parents(const char *dir, mode_t mode);
