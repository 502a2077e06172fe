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
 * others may read or enter it, and the temporary files an interrupted write left are removed; a
 * staged file that a run left (secrets_plan_write()) is never removed, only said (but for quiet).
 * Errors are said (but for quiet). */
int secrets_orphans(const SecretsDir *sd, const YNode *backends, const bool *owned, bool dry_run, bool quiet);

/* The names of NAME=VALUE assignments (a non-empty list), joined with ", ", for messages: never a value. */
char *secrets_names_shown(char *const *assignments);

/* The secrets files secrets_split() writes, once the manifest they go with is built and checked. A
 * backend that owns its file (it runs what it ran) has it written before the manifest; the file of a
 * new or changed definition is staged then (written and synced under a name of its own) and put in
 * place only once the manifest is written: until then no unit gets its values, and if the manifest
 * cannot be written, none ever does (the old definition never runs with the new one's values). */
typedef struct {
        char *name; /* the backend's */
        char *path;
        char **env;
        bool owned;
        bool news;    /* env has values its running shim lacks (changed or added; a file it did not own) */
        bool placed;  /* env is in the file now */
        char *staged; /* its staged file in the directory, until it is put in place or removed */
} SecretsWrite;

typedef struct {
        SecretsWrite *writes;
        size_t n;
} SecretsPlan;

void secrets_plan_done(SecretsPlan *plan);
/* Adds the file of backend name (owned: it owns its file; news: env has values its running shim lacks)
 * to plan; takes *path and *env when it returns 0. */
int secrets_plan_add(SecretsPlan *plan, const char *name, bool owned, bool news, char **path, char ***env);
/* Before the manifest is written: writes the files of plan whose backends own theirs and stages the
 * others, through sd's descriptor (sd's directory made if there is none); with dry_run, says them
 * all. On failure (said), what it staged is removed. */
int secrets_plan_write(SecretsDir *sd, SecretsPlan *plan, bool dry_run);
/* The manifest was not written: the staged files are removed (say: and that is said). */
void secrets_plan_unstage(const SecretsDir *sd, SecretsPlan *plan, bool say);
/* The manifest was written: the staged files are renamed into place. One that cannot be stays where it
 * is, which is said with how to finish; the first error is returned. */
int secrets_plan_commit(const SecretsDir *sd, SecretsPlan *plan);
/* The backends of plan whose file is in place now with values their running shim lacks (their units
 * to reload: one reloaded before its file is in place would start again with the old one), a
 * NULL-terminated list. */
int secrets_plan_news(const SecretsPlan *plan, char ***ret);
