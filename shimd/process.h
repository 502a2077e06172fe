/* Starting and signalling the backend's process group. */
#pragma once

#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "manifest.h"

/* Starts b->command (posix_spawn) in a session and process group of its own (a group in the shim's
 * session when mcp-lazy started the shim: SHIMD_SESSION_ENV), with b->env and b->cwd.
 * stdin and stdout are pipes handed back; stderr is ours (the journal, under systemd). A command that
 * cannot be executed fails here, with the reason in err. */
int process_spawn(const Backend *b, pid_t *ret_pid, int *ret_stdin, int *ret_stdout, char *err, size_t errlen);
/* The soft RLIMIT_NOFILE backends start with (the shim raises its own). */
void process_set_child_nofile(rlim_t soft);
/* Signals the whole group (an npx wrapper and its node child alike). */
void process_kill(pid_t pid, int sig);
/* "exited with status 1", "was killed by signal KILL". */
void process_describe_exit(const siginfo_t *si, char *buf, size_t size);
