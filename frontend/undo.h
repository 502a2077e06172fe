/* What import changed in client configs, kept so that `mcp-lazy import --undo` can put it back. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Keeps the original as PATH.mcp-lazy-backup (unless an earlier import kept it already), writes
 * the new text atomically with the file's mode and owner, and remembers both. -EEXIST when a backup
 * is there that no import of ours made (said on stderr). */
int undo_save_and_write(const char *path, const char *old, size_t old_len, const char *text, size_t len, mode_t mode);
/* Puts back every config import changed, byte for byte; one changed since is left alone (and said
 * so) unless force. */
int undo_run(bool force, bool dry_run);
