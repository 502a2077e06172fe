/* Remote backends: `ssh HOST mcp-lazy connect NAME` as a child whose stdio is the connection, shared
 * through OpenSSH's ControlMaster (several masters per host, so that sshd's MaxSessions is never
 * reached), and what each way of failing means to the user. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "frontend.h"
#include "log.h"
#include "macros.h"
#include "printable.h"

/* OpenSSH's sshd allows 10 sessions per connection (MaxSessions); we put at most this many on one
 * master and open another master past it. */
#define SEATS_PER_MASTER 8U
#define MAX_MASTERS      64U
#define STDERR_KEEP      4096U
/* After ssh closed its output, how long it may take to exit before it is killed. */
#define EXIT_WAIT_USEC (5ULL * USEC_PER_SEC)
/* While another frontend opens the master we would share, we look again this often, and this long at most. */
#define MASTER_POLL_USEC (50ULL * USEC_PER_MSEC)
#define MASTER_WAIT_USEC (15ULL * USEC_PER_SEC)

struct RemoteChild {
        pid_t pid; /* 0 until ssh runs */
        sd_event *event;
        sd_event_source *child_source, *stderr_source, *timer, *retry;
        int seat_fd;        /* a flock on one seat of one master, held while this ssh runs */
        int master_lock_fd; /* held while our ssh may be the one becoming that master */
        char *control_path; /* NULL: a connection of its own */
        char **argv;
        int child_fds[3]; /* its stdin, stdout, stderr until it runs */
        int stderr_fd;    /* our end */
        uint64_t wait_start;
        char err[STDERR_KEEP + 1];
        size_t err_len;
        bool exited, stderr_done, waiting;
        int exit_code, exit_status; /* siginfo_t si_code, si_status */
        remote_done_t done;
        void *userdata;
};

static const char *runtime_dir(void) {
        const char *rt = getenv("XDG_RUNTIME_DIR");

        if (geteuid() == 0)
                return "/run";
        return rt && rt[0] == '/' ? rt : NULL;
}

/* Makes path and its parents; the last one (ours) with mode: nobody else may use our connections. */
static int mkdir_parents(const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);

        if (!p)
                return -ENOMEM;
        for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
                *s = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static uint64_t host_hash(const Remote *r) {
        uint64_t h = 1469598103934665603ULL;
        char port[16];

        snprintf(port, sizeof port, ":%u", r->port);
        for (const char *parts[] = {r->ssh_user ?: "", "@", r->ssh_host, port, NULL}, **q = parts; *q; q++)
                for (const char *c = *q; *c; c++)
                        h = (h ^ (unsigned char) *c) * 1099511628211ULL;
        return h;
}

/* Takes the first free seat: master 0's first, then master 1's, ...; a seat is an flock that dies
 * with us. Gives the master's ControlPath, or -EBUSY when every seat of every master is taken. */
static int seat_take(const char *dir, const Remote *r, int *ret_fd, char **ret_path) {
        uint64_t h = host_hash(r);

        for (unsigned m = 0; m < MAX_MASTERS; m++)
                for (unsigned s = 0; s < SEATS_PER_MASTER; s++) {
                        _cleanup_close_ int fd = -EBADF;
                        char seat[64];

                        snprintf(seat, sizeof seat, "%016llx-%u-%u.seat", (unsigned long long) h, m, s);
                        {
                                _cleanup_free_ char *p = NULL;
                                if (asprintf(&p, "%s/%s", dir, seat) < 0)
                                        return -ENOMEM;
                                fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                        }
                        if (fd < 0)
                                return -errno;
                        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                                if (errno == EWOULDBLOCK)
                                        continue;
                                return -errno;
                        }
                        if (asprintf(ret_path, "%s/%016llx-%u", dir, (unsigned long long) h, m) < 0)
                                return -ENOMEM;
                        *ret_fd = TAKE_FD(fd);
                        return 0;
                }
        return -EBUSY;
}

static void remote_child_check_done(RemoteChild *c) {
        remote_done_t done = c->done;

        if (!c->waiting || !c->exited || !c->stderr_done)
                return;
        c->waiting = false;
        c->timer = sd_event_source_disable_unref(c->timer);
        c->done = NULL;
        done(c, c->userdata); /* may free c */
}

/* Stops reading ssh's stderr and closes our end (the source owns it once it exists). */
static void stderr_stop(RemoteChild *c) {
        if (c->stderr_source)
                c->stderr_source = sd_event_source_disable_unref(c->stderr_source);
        else
                safe_close(c->stderr_fd);
        c->stderr_fd = -EBADF;
}

/* Reads what ssh wrote to stderr: > 0 read some, 0 at its end, -EAGAIN nothing now. Keeps the end:
 * ssh says what went wrong last. */
static int stderr_read(RemoteChild *c) {
        char buf[4096];
        ssize_t n = read(c->stderr_fd, buf, sizeof buf);

        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return -EAGAIN;
        if (n <= 0)
                return 0;
        log_debug("ssh: %.*s", (int) n, buf);
        text_tail_append(c->err, &c->err_len, STDERR_KEEP, buf, (size_t) n);
        c->err[c->err_len] = 0;
        return 1;
}

static int on_ssh_stderr(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RemoteChild *c = userdata;

        (void) s;
        (void) fd;
        (void) revents;
        if (stderr_read(c) != 0)
                return 0;
        c->stderr_done = true;
        stderr_stop(c);
        remote_child_check_done(c); /* may free c */
        return 0;
}

static int on_ssh_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        RemoteChild *c = userdata;

        if (!c) {
                /* Its owner is gone: we only reap it. */
                sd_event_source_unref(s);
                return 0;
        }
        c->exited = true;
        c->exit_code = si->si_code;
        c->exit_status = si->si_status;
        c->seat_fd = safe_close(c->seat_fd);
        c->master_lock_fd = safe_close(c->master_lock_fd);
        c->child_source = sd_event_source_unref(c->child_source);
        /* The master it may have forked keeps its stderr open: take what is there and stop reading.
         * (Only here is the waiter told: it may free c.) */
        if (!c->stderr_done)
                while (stderr_read(c) > 0)
                        ;
        c->stderr_done = true;
        stderr_stop(c);
        remote_child_check_done(c);
        return 0;
}

static int on_exit_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        RemoteChild *c = userdata;

        (void) s;
        (void) usec;
        c->timer = sd_event_source_disable_unref(c->timer);
        if (!c->exited && c->pid > 0)
                (void) kill(c->pid, SIGKILL);
        /* A grandchild may still hold its stderr: what we have is what we get. */
        c->stderr_done = true;
        stderr_stop(c);
        remote_child_check_done(c);
        return 0;
}

RemoteChild *remote_child_free(RemoteChild *c) {
        if (!c)
                return NULL;
        if (c->child_source && c->pid > 0) {
                /* Still running: ask it to go, and leave a reaper behind. */
                (void) kill(c->pid, SIGTERM);
                (void) sd_event_source_set_userdata(c->child_source, NULL);
                (void) sd_event_source_set_floating(c->child_source, true);
                sd_event_source_unref(c->child_source);
        }
        stderr_stop(c);
        sd_event_source_disable_unref(c->timer);
        sd_event_source_disable_unref(c->retry);
        safe_close(c->seat_fd);
        safe_close(c->master_lock_fd);
        for (int i = 0; i < 3; i++)
                safe_close(c->child_fds[i]);
        strv_free(c->argv);
        free(c->control_path);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

void remote_child_wait(RemoteChild *c, remote_done_t done, void *userdata) {
        c->done = done;
        c->userdata = userdata;
        c->waiting = true;
        if (!c->exited || !c->stderr_done)
                (void) sd_event_add_time_relative(c->event, &c->timer, CLOCK_MONOTONIC, EXIT_WAIT_USEC, 0,
                                                  on_exit_timeout, c);
        remote_child_check_done(c);
}

/* The command line: the user's ssh with their config, agent and known_hosts, never asking anything.
 * control_path: the shared master (opened if needed, unless join_only: then only used if it is up);
 * command: what runs there (NULL: `mcp-lazy connect NAME`). */
static int ssh_argv(const Backend *b, const char *control_path, bool join_only, unsigned connect_timeout_sec,
                    const char *const *command, char ***ret) {
        const Remote *r = &b->remote;
        const char *ssh = getenv("MCP_LAZY_SSH") ?: "ssh";
        char **v = calloc(40, sizeof *v);
        size_t n = 0;
        char port[16], timeout[32];
        int ok = 1;

        if (!v)
                return -ENOMEM;
#define ADD(s) (ok = ok && (v[n++] = strdup(s)) != NULL)
#define OPT(s) (ADD("-o"), ADD(s))
        ADD(ssh);
        ADD("-T"); /* no terminal: the session is a byte stream */
        ADD("-a"); /* never hand our agent to the remote */
        ADD("-x");
        OPT("BatchMode=yes"); /* no passwords, no host key questions: errors instead */
        snprintf(timeout, sizeof timeout, "ConnectTimeout=%u", connect_timeout_sec);
        OPT(timeout);
        /* A network gone away ends the connection (and the calls on it) within 20 s. */
        OPT("ServerAliveInterval=5");
        OPT("ServerAliveCountMax=3");
        if (control_path) {
                _cleanup_free_ char *cp = NULL;
                if (asprintf(&cp, "ControlPath=%s", control_path) < 0)
                        ok = 0;
                OPT(join_only ? "ControlMaster=no" : "ControlMaster=auto");
                if (cp)
                        OPT(cp);
                if (!join_only)
                        OPT("ControlPersist=5m");
        } else {
                OPT("ControlMaster=no");
                OPT("ControlPath=none");
        }
        if (r->ssh_user) {
                ADD("-l");
                ADD(r->ssh_user);
        }
        if (r->port) {
                snprintf(port, sizeof port, "%u", r->port);
                ADD("-p");
                ADD(port);
        }
        ADD("--");
        ADD(r->ssh_host);
        if (command)
                for (size_t i = 0; command[i] && n < 39; i++)
                        ADD(command[i]);
        else {
                ADD("mcp-lazy");
                ADD("connect");
                ADD(r->remote_name);
        }
#undef OPT
#undef ADD
        if (!ok) {
                strv_free(v);
                return -ENOMEM;
        }
        *ret = v;
        return 0;
}

int remote_ssh_argv(const Backend *b, char ***ret) {
        return ssh_argv(b, NULL, false, 10, NULL, ret);
}

static bool master_alive(const char *path);

int remote_ssh_check_argv(const Backend *b, const char *const *command, char ***ret) {
        _cleanup_free_ char *path = NULL;
        const char *rt = runtime_dir();
        uint64_t h = host_hash(&b->remote);

        /* A master a frontend opened for this host, if one is up: no new connection, no new master. */
        for (unsigned m = 0; rt && m < MAX_MASTERS; m++) {
                free(path);
                if (asprintf(&path, "%s/mcp-lazy/ssh/%016llx-%u", rt, (unsigned long long) h, m) < 0)
                        return -ENOMEM;
                if (master_alive(path))
                        return ssh_argv(b, path, true, REMOTE_CHECK_CONNECT_TIMEOUT_SEC, command, ret);
        }
        return ssh_argv(b, NULL, true, REMOTE_CHECK_CONNECT_TIMEOUT_SEC, command, ret);
}

/* Runs ssh now, on the pipes made by remote_spawn(). */
static int remote_exec(RemoteChild *c) {
        pid_t pid;
        int r;

        c->retry = sd_event_source_disable_unref(c->retry);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                sigset_t all;

                if (dup2(c->child_fds[0], STDIN_FILENO) < 0 || dup2(c->child_fds[1], STDOUT_FILENO) < 0 ||
                    dup2(c->child_fds[2], STDERR_FILENO) < 0)
                        _exit(127);
                sigemptyset(&all);
                sigprocmask(SIG_SETMASK, &all, NULL);
                execvp(c->argv[0], c->argv);
                fprintf(stderr, "mcp-lazy: cannot execute %s: %m\n", c->argv[0]);
                _exit(126);
        }
        c->pid = pid;
        for (int i = 0; i < 3; i++)
                c->child_fds[i] = safe_close(c->child_fds[i]);
        r = sd_event_add_child(c->event, &c->child_source, pid, WEXITED, on_ssh_exit, c);
        if (r < 0) {
                (void) kill(pid, SIGKILL);
                return r;
        }
        r = sd_event_add_io(c->event, &c->stderr_source, c->stderr_fd, EPOLLIN, on_ssh_stderr, c);
        if (r >= 0)
                r = sd_event_source_set_io_fd_own(c->stderr_source, true);
        if (r < 0)
                return r;
        log_debug("Started ssh (pid %d): %s ... %s", (int) pid, c->argv[0], c->control_path ?: "(own connection)");
        return 0;
}

/* Is a master listening there? A unix connect answers at once. */
static bool master_alive(const char *path) {
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        if (fd < 0 || strlen(path) >= sizeof sa.sun_path)
                return false;
        memcpy(sa.sun_path, path, strlen(path));
        return connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0;
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata);

/* Starts ssh once it can share a master: one frontend at a time opens a master (under an flock),
 * the others wait until it listens, so that fifty sessions starting together make a few
 * connections, not fifty (sshd also drops unauthenticated connections past MaxStartups). */
static int remote_start(RemoteChild *c) {
        _cleanup_free_ char *lock = NULL;
        uint64_t now;
        int fd, r;

        if (!c->control_path || master_alive(c->control_path))
                return remote_exec(c);
        (void) sd_event_now(c->event, CLOCK_MONOTONIC, &now);
        if (asprintf(&lock, "%s.master", c->control_path) < 0)
                return -ENOMEM;
        fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return remote_exec(c);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                if (c->wait_start == 0) {
                        /* Ours to open: the lock goes when our ssh is through (remote_child_established). */
                        c->master_lock_fd = fd;
                        return remote_exec(c);
                }
                /* Whoever opened it gave up without a master: do not queue up behind each other. */
                safe_close(fd);
                return remote_exec(c);
        }
        safe_close(fd);
        if (c->wait_start == 0)
                c->wait_start = now;
        if (now - c->wait_start > MASTER_WAIT_USEC)
                return remote_exec(c);
        r = c->retry ? sd_event_source_set_time_relative(c->retry, MASTER_POLL_USEC)
                     : sd_event_add_time_relative(c->event, &c->retry, CLOCK_MONOTONIC, MASTER_POLL_USEC, 0, on_retry,
                                                  c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->retry, SD_EVENT_ONESHOT);
        return r < 0 ? remote_exec(c) : 0;
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        RemoteChild *c = userdata;
        int r;

        (void) s;
        (void) usec;
        r = remote_start(c);
        if (r < 0) {
                /* As if ssh had failed at once: the connection ends, its calls get this error. */
                log_warning_errno(r, "Cannot start ssh: %m");
                for (int i = 0; i < 3; i++)
                        c->child_fds[i] = safe_close(c->child_fds[i]);
                c->exited = c->stderr_done = true;
                c->exit_code = CLD_EXITED;
                c->exit_status = 126;
        }
        return 0;
}

void remote_child_established(RemoteChild *c) {
        if (c)
                c->master_lock_fd = safe_close(c->master_lock_fd);
}

int remote_spawn(const Backend *b, sd_event *e, RemoteChild **ret_child, int *ret_in_fd, int *ret_out_fd,
                 char **ret_text) {
        _cleanup_free_ char *dir = NULL;
        int in[2] = {-EBADF, -EBADF}, out[2] = {-EBADF, -EBADF}, err[2] = {-EBADF, -EBADF};
        RemoteChild *c = calloc(1, sizeof *c);
        const char *rt = runtime_dir();
        int r;

        if (!c)
                return -ENOMEM;
        c->seat_fd = c->master_lock_fd = c->stderr_fd = -EBADF;
        for (int i = 0; i < 3; i++)
                c->child_fds[i] = -EBADF;
        c->event = sd_event_ref(e);
        if (rt && asprintf(&dir, "%s/mcp-lazy/ssh", rt) >= 0 && mkdir_parents(dir, 0700) >= 0) {
                r = seat_take(dir, &b->remote, &c->seat_fd, &c->control_path);
                if (r < 0)
                        log_debug("No shared ssh connection for '%s' (%s); using one of its own.", b->name,
                                  strerror(-r));
        }
        r = ssh_argv(b, c->control_path, false, 10, NULL, &c->argv);
        /* ssh's stderr blocks, as any program's does; only our end is non-blocking. */
        if (r >= 0 && (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
                       fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK) < 0))
                r = -errno;
        c->child_fds[0] = in[0];
        c->child_fds[1] = out[1];
        c->child_fds[2] = err[1];
        c->stderr_fd = err[0];
        if (r >= 0)
                r = remote_start(c);
        if (r < 0) {
                safe_close(in[1]);
                safe_close(out[0]);
                remote_child_free(c);
                if (asprintf(ret_text, "backend '%s' on %s: cannot start ssh: %s", b->name, b->remote.host,
                             strerror(-r)) < 0)
                        *ret_text = NULL;
                return r;
        }
        *ret_child = c;
        *ret_in_fd = out[0];
        *ret_out_fd = in[1];
        return 0;
}

/* ssh's last words, on one line, for a message. */
static char *ssh_said(const RemoteChild *c) {
        char *s = strndup(c->err, c->err_len), *w = s;
        size_t n;

        if (!s)
                return NULL;
        for (char *p = s; *p; p++)
                if (*p == '\r' || *p == '\n' || *p == '\t')
                        *p = ' ';
        while (*w == ' ')
                w++;
        memmove(s, w, strlen(w) + 1);
        n = strlen(s);
        while (n > 0 && s[n - 1] == ' ')
                s[--n] = 0;
        if (n > 600) {
                memmove(s, s + n - 600, 601);
                memcpy(s, "...", 3);
        }
        /* The far side writes there too (the remote shell, mcp-lazy connect): no escape sequences for
         * the client to show. */
        w = text_printable(s, 640);
        free(s);
        return w;
}

static bool said(const RemoteChild *c, const char *what) {
        return strstr(c->err, what) != NULL;
}

/* What a failed ssh means, and what to do about it. established: the remote shim had answered. */
/* "backend 'NAME' on HOST (backend 'THERE' there)": who failed, as every remote error begins. */
static char *remote_who(const Backend *b, const char *name) {
        const char *host = b ? b->remote.host : "?";
        char *who = NULL;
        int r;

        if (b && !streq(b->remote.remote_name, name))
                r = asprintf(&who, "backend '%s' on %s (backend '%s' there)", name, host, b->remote.remote_name);
        else
                r = asprintf(&who, "backend '%s' on %s", name, host);
        return r < 0 ? NULL : who;
}

/* How the user reaches the same host by hand ("ssh -p 2222 alice@db"), and how known_hosts names it. */
static void remote_cmd(const Backend *b, char *cmd, size_t cmd_size, char *known, size_t known_size) {
        const char *h = b ? b->remote.ssh_host : "?";
        char dest[600];

        snprintf(dest, sizeof dest, "%s%s%s", b && b->remote.ssh_user ? b->remote.ssh_user : "",
                 b && b->remote.ssh_user ? "@" : "", h);
        if (b && b->remote.port) {
                snprintf(cmd, cmd_size, "ssh -p %u %s", b->remote.port, dest);
                snprintf(known, known_size, "[%s]:%u", h, b->remote.port);
        } else {
                snprintf(cmd, cmd_size, "ssh %s", dest);
                snprintf(known, known_size, "%s", h);
        }
}

char *remote_login_noise_explain(const Backend *b, const char *name, const char *line, size_t len) {
        _cleanup_free_ char *who = remote_who(b, name), *quote = text_printable_n(line, len, 80);
        char cmd[700], known[600], *text = NULL;

        if (!who || !quote)
                return NULL;
        remote_cmd(b, cmd, sizeof cmd, known, sizeof known);
        if (asprintf(&text,
                     "%s: the remote login wrote '%s' to stdout, where only mcp-lazy's messages may come: %s, so "
                     "that '%s true' prints nothing; the call may or may not have run, the next call connects again",
                     who, quote, SSH_LOGIN_NOISE_HINT, cmd) < 0)
                return NULL;
        return text;
}

char *remote_child_explain(const RemoteChild *c, const Backend *b, const char *name, bool established) {
        _cleanup_free_ char *words = ssh_said(c), *who = remote_who(b, name), *what = NULL;
        const char *h = b ? b->remote.ssh_host : "?";
        char cmd[700], known[600];
        const char *tail = established ? "; the call may or may not have run, the next call connects again" : "";
        char *text = NULL;
        int r;

        if (!who)
                return NULL;
        remote_cmd(b, cmd, sizeof cmd, known, sizeof known);
        if (c->exit_code == CLD_KILLED || c->exit_code == CLD_DUMPED)
                r = asprintf(&what, "ssh was killed by signal %s", sigabbrev_np(c->exit_status) ?: "?");
        else if (c->exit_status == 255 && said(c, "REMOTE HOST IDENTIFICATION HAS CHANGED"))
                r = asprintf(&what,
                             "the host key of %s has changed, and ssh refused to connect: if the change is expected, "
                             "run 'ssh-keygen -R %s' and check the new key by running '%s' once",
                             h, known, cmd);
        else if (c->exit_status == 255 && said(c, "Host key verification failed"))
                r = asprintf(&what,
                             "the host key of %s is not known, and mcp-lazy never accepts one by itself: check it and "
                             "accept it by running '%s' once (or add it to ~/.ssh/known_hosts)",
                             h, cmd);
        else if (c->exit_status == 255 && said(c, "Permission denied"))
                r = asprintf(&what,
                             "%s refused authentication: mcp-lazy runs ssh with BatchMode=yes (no password prompts); "
                             "set up key authentication (ssh-copy-id) so that '%s -o BatchMode=yes true' works",
                             h, cmd);
        else if (c->exit_status == 255 && said(c, "Could not resolve hostname"))
                r = asprintf(&what, "the host name %s does not resolve", h);
        else if (c->exit_status == 255 && said(c, "Connection refused"))
                r = asprintf(&what, "%s refused the connection: is sshd running there?", h);
        else if (c->exit_status == 255 &&
                 (said(c, "timed out") || said(c, "No route to host") || said(c, "Network is unreachable") ||
                  said(c, "not responding") || said(c, "Broken pipe") || said(c, "Connection reset") ||
                  said(c, "closed by remote host") || said(c, "Connection closed")))
                r = asprintf(&what, "%s is unreachable%s", h, established ? " (the connection was lost)" : "");
        else if (c->exit_status == 127)
                r = asprintf(&what,
                             "mcp-lazy is not installed on %s (the remote shell found no 'mcp-lazy'): install it there "
                             "so that '%s mcp-lazy --version' works",
                             h, cmd);
        else if (c->exit_status == CONNECT_EXIT_UNAVAILABLE) {
                /* The remote `mcp-lazy connect` said why, in the remote's own words. */
                const char *m = NULL;
                for (const char *q = c->err; (q = strstr(q, CONNECT_ERROR_PREFIX)); q++)
                        m = q;
                _cleanup_free_ char *remote = strdup(m ? m + strlen(CONNECT_ERROR_PREFIX) : c->err), *shown = NULL;
                if (remote)
                        remote[strcspn(remote, "\n")] = 0;
                shown = remote ? text_printable(remote, 640) : NULL;
                r = asprintf(&text, "%s: there, %s", who, shown ?: "the backend is unreachable");
                return r < 0 ? NULL : text;
        } else if (c->exit_status == 0 && !established)
                r = asprintf(&what, "the remote mcp-lazy ended the connection before the backend answered");
        else if (c->exit_status == 0)
                r = asprintf(&what, "the remote mcp-lazy ended the connection");
        else
                r = asprintf(&what, "'%s mcp-lazy connect %s' ended with status %d", cmd,
                             b ? b->remote.remote_name : name, c->exit_status);
        if (r < 0)
                return NULL;
        if (words && *words)
                r = asprintf(&text, "%s: %s%s (ssh said: %s)", who, what, tail, words);
        else
                r = asprintf(&text, "%s: %s%s", who, what, tail);
        return r < 0 ? NULL : text;
}
