/* Activation: reach a backend's shim through its socket, or say exactly why not, or start it directly. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/vm_sockets.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>

#include "frontend.h"
#include "log.h"
#include "macros.h"

char *backend_socket_path(const Backend *b) {
        const char *rt;
        char *p = NULL;

        if (b->socket)
                return strdup(b->socket);
        /* %t of the manager that owns the socket unit: the system one for root, the user's otherwise. */
        if (geteuid() == 0)
                rt = "/run";
        else
                rt = getenv("XDG_RUNTIME_DIR");
        if (rt && rt[0] == '/')
                return asprintf(&p, "%s/mcp-lazy/%s.sock", rt, b->name) < 0 ? NULL : p;
        return asprintf(&p, "/run/user/%u/mcp-lazy/%s.sock", (unsigned) geteuid(), b->name) < 0 ? NULL : p;
}

static int socket_connect(const char *path, int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};

        if (strlen(path) >= sizeof sa.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path));
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* A local connect completes at once or fails with EAGAIN (backlog full): it never blocks us. */
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                return -errno;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* A backend in a VM or on its host: the shim's socket unit listens with ListenStream=vsock::PORT.
 * The connect may take up to the kernel's vsock connect timeout (2 s by default), which must not stop
 * the loop: 1 when it is under way (the fd turns writable when it is done; SO_ERROR says how). */
static int vsock_connect(const Remote *r, int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = r->cid, .svm_port = r->port};
        bool under_way = false;

        fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
                if (errno != EINPROGRESS)
                        return -errno;
                under_way = true;
        }
        *ret_fd = TAKE_FD(fd);
        return under_way;
}

char *activation_vsock_unreachable(const Backend *b, int error) {
        char *text = NULL;

        if (asprintf(&text,
                     "backend '%s' on %s is unreachable (%s): enable mcp-lazy@%s.socket there, with "
                     "ListenStream=vsock::%u",
                     b->name, b->remote.host, strerror(-error), b->remote.remote_name, b->remote.port) < 0)
                return NULL;
        return text;
}

static const char *user_flag(void) {
        return geteuid() == 0 ? "" : " --user";
}

static int unit_property(sd_bus *bus, const char *path, const char *prop, char **ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        return sd_bus_get_property_string(bus, "org.freedesktop.systemd1", path, "org.freedesktop.systemd1.Unit", prop,
                                          &e, ret);
}

/* Asks the service manager why the socket is not there, and words the answer as something to do. */
static char *systemd_diagnosis(const Backend *b, const char *path, int connect_error) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_free_ char *load = NULL, *active = NULL, *result = NULL;
        const char *unit_path, *u = user_flag();
        char unit[128], *text = NULL;
        int r;

        snprintf(unit, sizeof unit, "mcp-lazy@%s.socket", b->name);
        r = geteuid() == 0 ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus);
        /* We are answering a tool call: a manager that does not answer quickly gets no more time. */
        if (r >= 0)
                r = sd_bus_set_method_call_timeout(bus, 2 * USEC_PER_SEC);
        if (r >= 0)
                r = sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                       "org.freedesktop.systemd1.Manager", "LoadUnit", &e, &reply, "s", unit);
        if (r >= 0)
                r = sd_bus_message_read(reply, "o", &unit_path);
        if (r >= 0)
                r = unit_property(bus, unit_path, "LoadState", &load);
        if (r >= 0)
                r = unit_property(bus, unit_path, "ActiveState", &active);
        if (r < 0) {
                r = asprintf(&text,
                             "backend '%s' is not reachable at %s (%s), and systemd could not be asked why; "
                             "run 'systemctl%s enable --now %s'",
                             b->name, path, strerror(-connect_error), u, unit);
                return r < 0 ? NULL : text;
        }
        if (streq(load, "not-found"))
                r = asprintf(&text,
                             "backend '%s' has no socket unit: install mcp-lazy's units ('make install'), then run "
                             "'systemctl%s enable --now %s'",
                             b->name, u, unit);
        else if (streq(active, "failed")) {
                (void) sd_bus_get_property_string(bus, "org.freedesktop.systemd1", unit_path,
                                                  "org.freedesktop.systemd1.Socket", "Result", &e, &result);
                r = asprintf(&text,
                             "backend '%s' has failed (%s: %s); see 'journalctl%s -u mcp-lazy@%s.service', then run "
                             "'systemctl%s reset-failed %s mcp-lazy@%s.service && systemctl%s start %s'",
                             b->name, unit, result ?: "failed", u, b->name, u, unit, b->name, u, unit);
        } else if (streq(active, "active"))
                r = asprintf(&text, "backend '%s': %s is active but %s refused the connection (%s)", b->name, unit,
                             path, strerror(-connect_error));
        else
                r = asprintf(&text, "backend '%s' is not enabled: run 'systemctl%s enable --now %s'", b->name, u, unit);
        return r < 0 ? NULL : text;
}

/* SIGKILLs every process of session sid but its leader (a zombie, which pins the id), and scans again
 * while one turns up that was not signalled yet (made by a fork that was under way): a process with a
 * SIGKILL pending makes no more. */
static void kill_session(pid_t sid) {
        pid_t killed[256];
        size_t n_killed = 0;
        bool found = true;

        for (unsigned round = 0; found && round < 8; round++) {
                DIR *d = opendir("/proc");
                struct dirent *de;

                found = false;
                while (d && (de = readdir(d))) {
                        char path[64], stat[512], *p, state;
                        int pid = atoi(de->d_name), ppid, pgrp, session;
                        _cleanup_close_ int fd = -EBADF;
                        ssize_t len;
                        bool seen = false;

                        if (pid <= 0 || pid == sid)
                                continue;
                        snprintf(path, sizeof path, "/proc/%d/stat", pid);
                        fd = open(path, O_RDONLY | O_CLOEXEC);
                        len = fd < 0 ? -1 : read(fd, stat, sizeof stat - 1);
                        if (len <= 0)
                                continue;
                        stat[len] = 0;
                        /* After the command's name, which may hold anything: state ppid pgrp session. */
                        p = strrchr(stat, ')');
                        if (!p || sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) != 4 ||
                            session != sid || state == 'Z')
                                continue;
                        for (size_t k = 0; k < n_killed && !seen; k++)
                                seen = killed[k] == pid;
                        if (seen)
                                continue;
                        (void) kill(pid, SIGKILL);
                        if (n_killed < ELEMENTSOF(killed))
                                killed[n_killed++] = pid;
                        found = true;
                }
                if (d)
                        closedir(d);
        }
}

static int on_shim_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        (void) userdata;
        if (si->si_code != CLD_EXITED || si->si_status != 0)
                log_debug("mcp-lazy-shimd (pid %d) ended abnormally (code %d, status %d).", (int) si->si_pid,
                          si->si_code, si->si_status);
        /* Its backends were in its session: whatever is left there goes with it, however it ended (sd-event
         * reaps it only after this returns). */
        kill_session(si->si_pid);
        sd_event_source_unref(s);
        return 0;
}

/* The shim next to our own binary wins (a build tree, or an install), then PATH. */
char *find_shimd(void) {
        char self[PATH_MAX], *p = NULL;
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

        if (n > 0) {
                char *slash;
                self[n] = 0;
                slash = strrchr(self, '/');
                if (slash) {
                        *slash = 0;
                        if (asprintf(&p, "%s/mcp-lazy-shimd", self) < 0)
                                return NULL;
                        if (access(p, X_OK) == 0)
                                return p;
                        free(p);
                }
        }
        return strdup("mcp-lazy-shimd");
}

/* Like systemd's Accept=yes: the shim gets one connected socket as fd 3, with LISTEN_FDS=1. */
static int direct_spawn(const Options *o, const Backend *b, sd_event *e, int *ret_fd) {
        _cleanup_close_ int ours = -EBADF, theirs = -EBADF;
        int sv[2], null_fd;
        pid_t pid;

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        ours = sv[0];
        theirs = sv[1];
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0)
                return -errno;

        log_debug("Starting mcp-lazy-shimd for '%s' directly.", b->name);
        pid = fork();
        if (pid < 0) {
                safe_close(null_fd);
                return -errno;
        }
        if (pid == 0) {
                char pidbuf[32], max_line[32];
                sigset_t all;

                /* Our stdout is the client's protocol stream: the shim must never write there. */
                if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0 || dup2(theirs, 3) < 0)
                        _exit(127);
                /* A session for it and its backends, which on_shim_exit() ends. */
                if (setsid() < 0)
                        _exit(127);
                setenv(SHIMD_SESSION_ENV, "1", 1);
                snprintf(pidbuf, sizeof pidbuf, "%d", (int) getpid());
                setenv("LISTEN_FDS", "1", 1);
                setenv("LISTEN_PID", pidbuf, 1);
                setenv("LISTEN_FDNAMES", "connection", 1);
                /* Our limit is its limit: a message we would refuse must not be passed on whole. */
                snprintf(max_line, sizeof max_line, "%zu", o->max_line);
                sigemptyset(&all);
                sigprocmask(SIG_SETMASK, &all, NULL);
                execl(o->shimd_path, o->shimd_path, "--manifest", o->manifest_path, "--max-line-bytes", max_line,
                      b->name, (char *) NULL);
                if (!strchr(o->shimd_path, '/'))
                        execlp(o->shimd_path, o->shimd_path, "--manifest", o->manifest_path, "--max-line-bytes",
                               max_line, b->name, (char *) NULL);
                fprintf(stderr, "mcp-lazy: cannot execute %s: %m\n", o->shimd_path);
                _exit(127);
        }
        safe_close(null_fd);
        /* Reap it whenever it exits; it is ours only until then. A floating source: the loop owns it (one of
         * ours would hold the loop, which then outlives the program's last reference to it). */
        if (sd_event_add_child(e, NULL, pid, WEXITED, on_shim_exit, NULL) < 0)
                log_debug("Cannot watch mcp-lazy-shimd (pid %d); it will be reaped at exit.", (int) pid);
        log_debug("Started mcp-lazy-shimd for '%s' directly as pid %d.", b->name, (int) pid);
        *ret_fd = TAKE_FD(ours);
        return 0;
}

int activation_mode_from_string(const char *s, ActivationMode *ret) {
        static const char *const names[] = {
                [ACTIVATION_AUTO] = "auto", [ACTIVATION_DIRECT] = "direct", [ACTIVATION_SYSTEMD] = "systemd"};

        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (streq(s, names[i])) {
                        *ret = (ActivationMode) i;
                        return 0;
                }
        return -EINVAL;
}

int activation_connect(const Options *o, const Backend *b, sd_event *e, int *ret_fd, char **ret_text) {
        _cleanup_free_ char *path = backend_socket_path(b);
        int r;

        if (!path)
                return -ENOMEM;
        if (b->remote.kind == REMOTE_VSOCK) {
                r = vsock_connect(&b->remote, ret_fd);
                if (r < 0)
                        *ret_text = activation_vsock_unreachable(b, r);
                return r;
        }
        r = socket_connect(path, ret_fd);
        if (r >= 0)
                return 0;
        if (r == -EAGAIN) {
                if (asprintf(ret_text, "backend '%s' is busy: %s has its whole backlog waiting; try again", b->name,
                             path) < 0)
                        *ret_text = NULL;
                return r;
        }
        if (r != -ENOENT && r != -ECONNREFUSED && r != -ENOTDIR) {
                if (asprintf(ret_text, "backend '%s': cannot connect to %s: %s", b->name, path, strerror(-r)) < 0)
                        *ret_text = NULL;
                return r;
        }
        if (o->activation == ACTIVATION_DIRECT || (o->activation == ACTIVATION_AUTO && sd_booted() <= 0)) {
                r = direct_spawn(o, b, e, ret_fd);
                if (r < 0 &&
                    asprintf(ret_text, "backend '%s': cannot start %s: %s", b->name, o->shimd_path, strerror(-r)) < 0)
                        *ret_text = NULL;
                return r;
        }
        *ret_text = systemd_diagnosis(b, path, r);
        return r;
}
