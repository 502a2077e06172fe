/* The backend process: posix_spawn() in a group of its own, group signals, exit descriptions. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macros.h"
#include "process.h"

static rlim_t child_nofile = RLIM_INFINITY; /* RLIM_INFINITY: leave as it is */

void process_set_child_nofile(rlim_t soft) {
        child_nofile = soft;
}

static const char *const unset_vars[] = {"LISTEN_FDS",   "LISTEN_PID",   "LISTEN_FDNAMES", "NOTIFY_SOCKET",
                                         "WATCHDOG_PID", "WATCHDOG_USEC", SHIMD_SESSION_ENV, NULL};

/* The environment the backend gets: ours without the variables that were meant for the shim, with
 * b->env set over it (a KEY= of b->env replaces ours). The strings are borrowed. */
static char **child_env_new(const Backend *b) {
        size_t n = 0, k = 0;
        char **env;

        for (char **v = environ; *v; v++)
                n++;
        for (char **v = b->env; v && *v; v++)
                n++;
        env = calloc(n + 1, sizeof(char *));
        if (!env)
                return NULL;
        for (char **v = environ; *v; v++) {
                size_t key = strcspn(*v, "=");
                bool drop = false;

                for (const char *const *u = unset_vars; *u && !drop; u++)
                        drop = strlen(*u) == key && strncmp(*v, *u, key) == 0;
                for (char **e = b->env; e && *e && !drop; e++)
                        drop = strncmp(*v, *e, key + 1) == 0;
                if (!drop)
                        env[k++] = *v;
        }
        for (char **v = b->env; v && *v; v++)
                env[k++] = *v;
        return env;
}

/* The file execvp() would run for command under env's PATH (the backend's own PATH when b->env sets
 * one), searched as the child would after its chdir(): a relative entry (or an empty one, ".") is
 * taken from b->cwd. *ret NULL: posix_spawnp() searches ours, in the child. -ENOENT: nothing found. */
static int command_path(const Backend *b, char **env, char **ret) {
        const char *command = b->command[0], *path = NULL, *cwd = b->cwd ?: ".";

        *ret = NULL;
        if (strchr(command, '/'))
                return (*ret = strdup(command)) ? 0 : -ENOMEM;
        for (char **v = env; *v; v++)
                if (strncmp(*v, "PATH=", 5) == 0)
                        path = *v + 5;
        if (!path || streq(path, getenv("PATH") ?: ""))
                return 0;
        for (const char *p = path, *end;; p = end + 1) {
                _cleanup_free_ char *f = NULL;
                int len;
                struct stat st;

                end = strchrnul(p, ':');
                len = (int) (end - p);
                if (p[0] == '/' ? asprintf(&f, "%.*s/%s", len, p, command) < 0
                                : asprintf(&f, "%s/%.*s%s%s", cwd, len, p, len ? "/" : "", command) < 0)
                        return -ENOMEM;
                if (stat(f, &st) == 0 && S_ISREG(st.st_mode) && access(f, X_OK) == 0) {
                        *ret = TAKE_PTR(f);
                        return 0;
                }
                if (!*end)
                        return -ENOENT;
        }
}

/* What the child is made with: the pipes as stdin and stdout, b->cwd, its own session (or, when the
 * frontend started the shim in a session for it and its backends, SHIMD_SESSION_ENV, its own process
 * group in ours: when the shim is killed, the frontend ends what is left in that session), no signal
 * blocked, SIGPIPE at its default. 0 or a positive errno, as posix_spawn() does it. */
static int spawn_setup(const Backend *b, int in, int out, posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr) {
        short group = streq(getenv(SHIMD_SESSION_ENV) ?: "", "1") ? POSIX_SPAWN_SETPGROUP : POSIX_SPAWN_SETSID;
        sigset_t none, pipe_only;
        int r;

        sigemptyset(&none);
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        r = posix_spawn_file_actions_adddup2(fa, in, STDIN_FILENO);
        if (r == 0)
                r = posix_spawn_file_actions_adddup2(fa, out, STDOUT_FILENO);
        if (r == 0 && b->cwd)
                r = posix_spawn_file_actions_addchdir_np(fa, b->cwd);
        if (r == 0)
                r = posix_spawnattr_setflags(attr, group | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        if (r == 0)
                r = posix_spawnattr_setpgroup(attr, 0); /* with SETPGROUP: a group of its own */
        if (r == 0)
                r = posix_spawnattr_setsigmask(attr, &none);
        if (r == 0)
                r = posix_spawnattr_setsigdefault(attr, &pipe_only);
        return r;
}

/* posix_spawn(): no copy of the shim's memory (the parent waits only for the exec), and an exec that
 * fails says why at once. The child takes the soft RLIMIT_NOFILE the shim was started with: ours is
 * lowered for the moment it is made (new descriptors only are bound by it). */
static int spawn(const Backend *b, int in, int out, char **env, pid_t *ret_pid) {
        _cleanup_free_ char *file = NULL;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        struct rlimit rl = {};
        bool lowered = false;
        int r;

        r = command_path(b, env, &file);
        if (r < 0)
                return -r;
        r = posix_spawn_file_actions_init(&fa);
        if (r != 0)
                return r;
        r = posix_spawnattr_init(&attr);
        if (r != 0) {
                posix_spawn_file_actions_destroy(&fa);
                return r;
        }
        r = spawn_setup(b, in, out, &fa, &attr);
        if (r == 0 && child_nofile != RLIM_INFINITY && getrlimit(RLIMIT_NOFILE, &rl) >= 0 &&
            rl.rlim_cur != child_nofile) {
                struct rlimit low = {child_nofile, rl.rlim_max};
                lowered = setrlimit(RLIMIT_NOFILE, &low) >= 0;
        }
        if (r == 0)
                r = file ? posix_spawn(ret_pid, file, &fa, &attr, b->command, env)
                         : posix_spawnp(ret_pid, b->command[0], &fa, &attr, b->command, env);
        if (lowered)
                (void) setrlimit(RLIMIT_NOFILE, &rl);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        return r;
}

int process_spawn(const Backend *b, pid_t *ret_pid, int *ret_stdin, int *ret_stdout, char *err, size_t errlen) {
        _cleanup_close_ int in_r = -EBADF, in_w = -EBADF, out_r = -EBADF, out_w = -EBADF;
        _cleanup_free_ char **env = NULL;
        int p[2], r;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                goto sys_fail;
        in_r = p[0], in_w = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
                goto sys_fail;
        out_r = p[0], out_w = p[1];
        env = child_env_new(b);
        if (!env) {
                errno = ENOMEM;
                goto sys_fail;
        }
        r = spawn(b, in_r, out_w, env, &pid);
        if (r != 0) {
                snprintf(err, errlen, "cannot start backend '%s': %s%s%s: %s", b->name, b->command[0],
                         b->cwd ? " in " : "", b->cwd ?: "", strerror(r));
                return -r;
        }
        *ret_pid = pid;
        *ret_stdin = TAKE_FD(in_w);
        *ret_stdout = TAKE_FD(out_r);
        return 0;

sys_fail:
        snprintf(err, errlen, "cannot start backend '%s': %s", b->name, strerror(errno));
        return -errno;
}

void process_kill(pid_t pid, int sig) {
        if (pid <= 0)
                return;
        (void) kill(-pid, sig);
        (void) kill(pid, sig);
}

void process_describe_exit(const siginfo_t *si, char *buf, size_t size) {
        if (si->si_code == CLD_EXITED)
                snprintf(buf, size, "exited with status %d", si->si_status);
        else
                snprintf(buf, size, "was killed by signal %s%s", sigabbrev_np(si->si_status) ?: "?",
                         si->si_code == CLD_DUMPED ? " (core dumped)" : "");
}
