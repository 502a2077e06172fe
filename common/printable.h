/* Text from a peer (a remote host's answer, ssh's stderr, a client config's names) made safe to print
 * on a terminal: no control characters, no escape sequences, valid UTF-8, bounded. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* A copy of s with every C0/C1 control character, DEL and invalid UTF-8 byte as '?', and at most max
 * bytes of it (cut at a character, then "..."). NULL only when out of memory. */
char *text_printable(const char *s, size_t max);
/* The same of the first len bytes at s, which need not end in a NUL and may hold NULs (each a '?'): a
 * peer's line. Reads no further than it writes (at most max bytes and one character). */
char *text_printable_n(const char *s, size_t len, size_t max);
/* s has nothing text_printable() would change (and is at most max bytes). */
int text_is_printable(const char *s, size_t max);
/* Appends n bytes of a stream (an ssh's or a server's stderr) to tail, which holds *len of at most cap
 * bytes, keeping only the last cap: the reason a process gives comes last. No NUL is added. */
void text_tail_append(char *tail, size_t *len, size_t cap, const char *buf, size_t n);

/* What makes a login through ssh write to its stdout, and how to quiet it: for the error about a line
 * that is not JSON-RPC where only JSON-RPC may come (a remote backend's, a backend run through ssh). */
#define SSH_LOGIN_NOISE_HINT                                                                                     \
        "a shell startup file that runs for non-interactive shells (~/.bashrc for bash, ~/.zshenv for zsh), "    \
        "~/.ssh/rc or a forced command of the remote user prints it; make it print nothing unless the shell is " \
        "interactive (e.g. begin ~/.bashrc with: case $- in *i*) ;; *) return;; esac)"
/* What follows a quoted line that is not JSON-RPC from a command that is ssh, before its first answer. */
#define SSH_LOGIN_NOISE_SUFFIX "; its command is ssh, so most likely the remote login wrote it: " SSH_LOGIN_NOISE_HINT

/* Whether argv0 ([/usr/bin/]ssh) runs ssh, whose login may write to stdout before the command does. */
static inline bool command_is_ssh(const char *argv0) {
        const char *slash = argv0 ? strrchr(argv0, '/') : NULL;

        return argv0 && strcmp(slash ? slash + 1 : argv0, "ssh") == 0;
}
