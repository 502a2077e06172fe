/* Environment files as systemd's EnvironmentFile= reads them: a backend's secrets, kept out of the
 * manifest, in a file only root reads. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* MAX_ARG_STRLEN: the longest "NAME=VALUE" (with its NUL) execve() passes on. */
#define ENVFILE_ASSIGNMENT_MAX (128U * 1024U)

/* Whether "NAME=VALUE" may go into an environment file: 0; -EINVAL for a name that is not
 * [A-Za-z_][A-Za-z0-9_]* or a value systemd refuses (not UTF-8, or with a Unicode noncharacter:
 * systemd 252 then ignores the whole file); -E2BIG for NAME=VALUE of ENVFILE_ASSIGNMENT_MAX bytes or
 * more (the unit could not start the shim). *ret_reason (if not NULL) says why, never quoting the
 * value. */
int envfile_assignment_check(const char *assignment, const char **ret_reason);
/* The text of an environment file holding env ("KEY=VALUE" strings, NULL-terminated): one
 * KEY="VALUE" line each, the value double-quoted with \ before each of " \ ` $, so that systemd
 * reads back exactly VALUE (newlines included). Refuses (-EINVAL, -E2BIG) what
 * envfile_assignment_check() refuses. */
int envfile_format(char *const *env, char **ret_text, size_t *ret_len);
/* The variables of an environment file, as "KEY=VALUE" strings in file order (a name set twice:
 * the last value, at the first one's place). Reads what envfile_format() writes and what an admin
 * writes by hand, as systemd 252 reads it: comments (# or ;), blank lines, LF or CR or CR LF line
 * ends, KEY=VALUE unquoted (outer blanks trimmed, \ escapes the next character, \ at the end of a
 * line continues it), "double quoted" (\ escapes " \ ` $ and a newline) or 'single quoted', parts
 * one after another (A="x"y is xy). -EBADMSG with *ret_line (1-based) for a line it cannot read: a
 * line without =, a bad name, a quote never closed, a comment ending in an escaping \ (which systemd
 * 252 and 254 read differently). */
int envfile_parse(const char *text, size_t len, char ***ret_env, unsigned *ret_line);
/* Opens directory path, where files only root reads are kept, as *ret_fd: not through a link
 * (-ENOTDIR), and refused (-EPERM) unless it is our own and no one else may write to it (whoever
 * could, could swap a file for a link); with make_private, one that others may read or enter is made
 * 0700. Work in it then goes through *ret_fd, never its path again. */
int envfile_dir_open(const char *path, bool make_private, int *ret_fd);
/* Writes env as the environment file path: mode 0600, owner root when run as root, written to a
 * temporary file that is renamed over path (never readable by anyone else, whatever the umask). Its
 * directory is made mode 0700 if missing and opened by envfile_dir_open() (made 0700); the file is
 * written, synced and renamed through that descriptor (envfile_write_at()). A path that is not a
 * regular file (a link) is refused (-EPERM). */
int envfile_write(const char *path, char *const *env);
/* The same as file name of directory dfd (opened by envfile_dir_open()), all through dfd. */
int envfile_write_at(int dfd, const char *name, char *const *env);
/* Writes env into a new file of dfd beside name, NAME.env.mcp-lazy-staged-XXXXXXXX (*ret_staged),
 * as envfile_write_at() writes its temporary file (mode 0600, root's, synced), for
 * envfile_commit_at() to put in place later. A file that may hold the only copy of its values: no
 * cleanup of temporary files takes it (envfile_is_temp_name() is false for it). -EPERM as
 * envfile_write_at(). */
int envfile_stage_at(int dfd, const char *name, char *const *env, char **ret_staged);
/* Renames staged over name in dfd, then syncs dfd. */
int envfile_commit_at(int dfd, const char *staged, const char *name);
/* Whether name is one of the temporary files envfile_write() makes for a file NAME.env
 * (NAME.env.mcp-lazy-XXXXXXXX, 8 hex digits), which an interrupted write leaves behind. */
bool envfile_is_temp_name(const char *name);
/* Whether name is a file envfile_stage_at() makes (NAME.env.mcp-lazy-staged-XXXXXXXX). */
bool envfile_is_staged_name(const char *name);
/* env's value of name (a "KEY=VALUE" list), or NULL. */
const char *strv_env_get(char *const *env, const char *name);
