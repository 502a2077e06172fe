/* The secrets directory beside the system manager's manifest (frontend/secrets-dir.c): opened and
 * checked once, then read and changed only through its descriptor. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "yaml_tree.h"

/* The secrets directory of a manifest, checked once by envfile_dir_open() (root's own, no one else
 * may write to it) and then read and changed only through its descriptor: fd is -EBADF when there is
 * none. */
typedef struct {
        int fd;
        char *path;
} SecretsDir;

void secrets_dir_done(SecretsDir *sd);
/* Opens the secrets directory beside manifest_path into *sd (none there: fd -EBADF, 0). One that
 * would be refused is said (unless quiet), and refuses everything: nothing in it is read. */
int secrets_dir_open(const char *manifest_path, bool quiet, SecretsDir *sd);
/* backend's secrets file in sd, read through its descriptor (review 12 LOW-1), as systemd reads it:
 * -EBADMSG for a line it cannot read or a value it refuses (it would ignore the whole file), -EBADF
 * for a link or anything but a regular file. *ret_error says which file and why, never a value. */
int secrets_read_at(const SecretsDir *sd, const char *backend, char ***ret_env, char **ret_error);
/* The secrets files (NAME.env) of sd that no backend of doc owns (owned[] per backend, in the order
 * of doc's backends) are put aside (with dry_run, said; with quiet too, only counted): how many;
 * every rename goes through sd's descriptor. Without dry_run, the directory is made mode 0700 if
 * others may read or enter it, and the temporary files an interrupted write left are removed. Errors
 * are said (but for quiet). */
int secrets_orphans(const SecretsDir *sd, const YNode *backends, const bool *owned, bool dry_run, bool quiet);

/* The names of NAME=VALUE assignments (a non-empty list), joined with ", ", for messages: never a value. */
char *secrets_names_shown(char *const *assignments);

/* The secrets files secrets_split() writes, once the manifest they go with is built and checked. */
typedef struct {
        char *name; /* the backend's */
        char *path;
        char **env;
} SecretsWrite;

typedef struct {
        SecretsWrite *writes;
        size_t n;
} SecretsPlan;

void secrets_plan_done(SecretsPlan *plan);
/* Adds the file of backend name to plan; takes *path and *env when it returns 0. */
int secrets_plan_add(SecretsPlan *plan, const char *name, char **path, char ***env);
/* Writes (or, with dry_run, says) the files of plan, beside manifest_path. */
int secrets_plan_write(const char *manifest_path, const SecretsPlan *plan, bool dry_run);
