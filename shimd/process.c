/* The backend process: fork/exec with an exec-error pipe, group signals, exit descriptions. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "macros.h"
#include "process.h"

static rlim_t child_nofile = RLIM_INFINITY; /* RLIM_INFINITY: leave as it is */

void process_set_child_nofile(rlim_t soft) {
        child_nofile = soft;
}

static const char *const unset_vars[] = {
        "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", NULL};

_noreturn_ static void child_exec(const Backend *b, int in, int out, int err_fd) {
        sigset_t none;
        int e;

        /* Own process group: stopping the backend signals every process it started. */
        (void) setsid();
        if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0)
                goto fail;
        if (b->cwd && chdir(b->cwd) < 0)
                goto fail;
        for (const char *const *v = unset_vars; *v; v++)
                (void) unsetenv(*v);
        for (char **v = b->env; v && *v; v++)
                if (putenv(*v) < 0)
                        goto fail;
        if (child_nofile != RLIM_INFINITY) {
                struct rlimit rl;
                if (getrlimit(RLIMIT_NOFILE, &rl) >= 0) {
                        rl.rlim_cur = child_nofile;
                        (void) setrlimit(RLIMIT_NOFILE, &rl);
                }
        }
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
        (void) signal(SIGPIPE, SIG_DFL);
        execvp(b->command[0], b->command);
fail:
        e = errno;
        (void) !write(err_fd, &e, sizeof e);
        _exit(127);
}

int process_spawn(const Backend *b, pid_t *ret_pid, int *ret_stdin, int *ret_stdout, char *err, size_t errlen) {
        _cleanup_close_ int in_r = -EBADF, in_w = -EBADF, out_r = -EBADF, out_w = -EBADF, e_r = -EBADF, e_w = -EBADF;
        int p[2], child_errno = 0;
        ssize_t n;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                goto sys_fail;
        in_r = p[0], in_w = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
                goto sys_fail;
        out_r = p[0], out_w = p[1];
        /* Close-on-exec: a successful exec closes it and we read EOF; a failed one writes errno. */
        if (pipe2(p, O_CLOEXEC) < 0)
                goto sys_fail;
        e_r = p[0], e_w = p[1];

        pid = fork();
        if (pid < 0)
                goto sys_fail;
        if (pid == 0)
                child_exec(b, in_r, out_w, e_w);

        e_w = safe_close(e_w);
        do
                n = read(e_r, &child_errno, sizeof child_errno);
        while (n < 0 && errno == EINTR);
        if (n == sizeof child_errno) {
                (void) waitpid(pid, NULL, 0);
                snprintf(err, errlen, "cannot start backend '%s': %s%s%s: %s", b->name, b->command[0],
                         b->cwd ? " in " : "", b->cwd ?: "", strerror(child_errno));
                return -child_errno;
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
