/* mcp-lazy status for backends on other hosts: one `ssh HOST mcp-lazy status --json` per host, all
 * at once and bounded in time, which reads the units there and starts nothing. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend.h"
#include "jsonrpc.h"
#include "macros.h"
#include "printable.h"
#include "status-remote.h"

#define OUT_MAX    (4U * 1024U * 1024U)
#define ERR_KEEP   4096U
#define CHECK_USEC (15ULL * USEC_PER_SEC) /* connect (5 s) and the remote's answer */
#define TEXT_MAX   512U                   /* a line of the remote's that we print */
#define JSON_DEPTH 16U                    /* `status --json` nests 4 deep */
#define PID_LIMIT  4194304.0              /* the kernel's PID_MAX_LIMIT */
#define COUNT_MAX  9007199254740992.0     /* 2^53: every integer below it is exact */

typedef struct HostCheck {
        const Backend *b; /* the first backend on that host */
        pid_t pid;
        sd_event_source *out_source, *err_source, *child_source;
        char *out;
        size_t out_len;
        char err[ERR_KEEP + 1];
        size_t err_len;
        bool too_big, killed;
        int exit_code, exit_status;
} HostCheck;

typedef struct Checks {
        sd_event *event;
        HostCheck *hosts;
        size_t n_hosts;
        unsigned pending; /* sources still open */
} Checks;

static void checks_pending_done(Checks *cs) {
        if (--cs->pending == 0)
                (void) sd_event_exit(cs->event, 0);
}

static int on_out(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Checks *cs = userdata;
        HostCheck *h = NULL;
        char buf[16384];
        ssize_t n;

        (void) revents;
        for (size_t i = 0; i < cs->n_hosts; i++)
                if (cs->hosts[i].out_source == s || cs->hosts[i].err_source == s)
                        h = &cs->hosts[i];
        n = read(fd, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n > 0 && s == h->out_source) {
                if (h->out_len + (size_t) n > OUT_MAX)
                        h->too_big = true;
                else {
                        char *p = realloc(h->out, h->out_len + (size_t) n + 1);
                        if (!p)
                                h->too_big = true;
                        else {
                                memcpy(p + h->out_len, buf, (size_t) n);
                                h->out = p;
                                h->out_len += (size_t) n;
                                p[h->out_len] = 0;
                        }
                }
                if (!h->too_big)
                        return 0;
        } else if (n > 0) {
                /* Keep the last ERR_KEEP bytes: ssh's reason comes last. */
                text_tail_append(h->err, &h->err_len, ERR_KEEP, buf, (size_t) n);
                h->err[h->err_len] = 0;
                return 0;
        }
        if (s == h->out_source)
                h->out_source = sd_event_source_disable_unref(h->out_source);
        else
                h->err_source = sd_event_source_disable_unref(h->err_source);
        checks_pending_done(cs);
        return 0;
}

static int on_ssh_exit(sd_event_source *s, const siginfo_t *si, void *userdata) {
        Checks *cs = userdata;

        for (size_t i = 0; i < cs->n_hosts; i++)
                if (cs->hosts[i].child_source == s) {
                        cs->hosts[i].exit_code = si->si_code;
                        cs->hosts[i].exit_status = si->si_status;
                        cs->hosts[i].pid = 0;
                        cs->hosts[i].child_source = sd_event_source_disable_unref(cs->hosts[i].child_source);
                }
        checks_pending_done(cs);
        return 0;
}

static int on_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        Checks *cs = userdata;

        (void) s;
        (void) usec;
        for (size_t i = 0; i < cs->n_hosts; i++)
                if (cs->hosts[i].pid > 0) {
                        cs->hosts[i].killed = true;
                        (void) kill(cs->hosts[i].pid, SIGKILL);
                }
        return 0;
}

static int fd_set_nonblock(int fd) {
        int flags = fcntl(fd, F_GETFL);
        return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static int host_start(Checks *cs, HostCheck *h) {
        static const char *const command[] = {"mcp-lazy", "status", "--json", NULL};
        _cleanup_strv_free_ char **argv = NULL;
        int out[2] = {-EBADF, -EBADF}, err[2] = {-EBADF, -EBADF}, r;
        pid_t pid;

        r = remote_ssh_check_argv(h->b, command, &argv);
        if (r < 0)
                return r;
        /* Non-blocking on our side only: ssh's own stdout and stderr block, as any program's do (a
         * non-blocking one cuts its output at the pipe's 64 KiB with EAGAIN). */
        if (pipe2(out, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(err, O_CLOEXEC) < 0 || fd_set_nonblock(out[0]) < 0 || fd_set_nonblock(err[0]) < 0) {
                r = -errno;
                goto fail;
        }
        pid = fork();
        if (pid < 0) {
                r = -errno;
                goto fail;
        }
        if (pid == 0) {
                sigset_t none;
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

                if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 ||
                    dup2(err[1], STDERR_FILENO) < 0)
                        _exit(127);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                execvp(argv[0], argv);
                fprintf(stderr, "cannot execute %s: %m\n", argv[0]);
                _exit(126);
        }
        h->pid = pid;
        out[1] = safe_close(out[1]);
        err[1] = safe_close(err[1]);
        r = sd_event_add_child(cs->event, &h->child_source, pid, WEXITED, on_ssh_exit, cs);
        if (r < 0) {
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                h->pid = 0;
                goto fail;
        }
        cs->pending++;
        r = sd_event_add_io(cs->event, &h->out_source, out[0], EPOLLIN, on_out, cs);
        if (r >= 0 && (r = sd_event_source_set_io_fd_own(h->out_source, true)) >= 0) {
                out[0] = -EBADF;
                cs->pending++;
        }
        if (r >= 0)
                r = sd_event_add_io(cs->event, &h->err_source, err[0], EPOLLIN, on_out, cs);
        if (r >= 0 && (r = sd_event_source_set_io_fd_own(h->err_source, true)) >= 0) {
                err[0] = -EBADF;
                cs->pending++;
        }
        if (r < 0)
                (void) kill(pid, SIGKILL); /* its exit still ends the wait */
fail:
        for (int i = 0; i < 2; i++) {
                safe_close(out[i]);
                safe_close(err[i]);
        }
        return r;
}

/* ssh's (or the remote's) last line, as it said it. */
static char *last_line(const char *text) {
        _cleanup_free_ char *s = strdup(text);
        char *line = NULL;

        if (!s)
                return NULL;
        for (char *tok, *save = NULL, *p = s; (tok = strtok_r(p, "\r\n", &save)); p = NULL) {
                tok += strspn(tok, " \t");
                if (*tok)
                        line = tok;
        }
        return line ? text_printable(line, TEXT_MAX) : NULL;
}

static bool string_in(const char *s, const char *const *set) {
        for (; *set; set++)
                if (streq(s, *set))
                        return true;
        return false;
}

static bool count_valid(const cJSON *v, double max) {
        return cJSON_IsNull(v) || (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= max &&
                                   v->valuedouble == (double) (int64_t) v->valuedouble);
}

/* The remote's entry for one backend is peer input: every field we read is typed and bounded here, so
 * that what the table and --json show is what `mcp-lazy status --json` can say, nothing else. */
static const char *remote_entry_problem(const cJSON *e) {
        static const char *const sockets[] = {"listening", "failed", "not enabled", "inactive", "not installed", NULL};
        static const char *const services[] = {"active", "idle", "failed", "starting", "stopping", NULL};
        static const char *const counts[] = {"uptime_sec", "memory_bytes",      "sessions", "in_flight",
                                             "calls",      "last_call_sec_ago", NULL};
        const cJSON *v, *pid;
        unsigned n = 0;

        v = cJSON_GetObjectItemCaseSensitive(e, "socket");
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && string_in(v->valuestring, sockets)))
                return "socket";
        v = cJSON_GetObjectItemCaseSensitive(e, "service");
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && string_in(v->valuestring, services)))
                return "service";
        for (const char *const *k = counts; *k; k++) {
                v = cJSON_GetObjectItemCaseSensitive(e, *k);
                if (v && !count_valid(v, COUNT_MAX))
                        return *k;
        }
        v = cJSON_GetObjectItemCaseSensitive(e, "pids");
        if (v && !cJSON_IsArray(v))
                return "pids";
        cJSON_ArrayForEach (pid, v)
                if (++n > 8 || cJSON_IsNull(pid) || !count_valid(pid, PID_LIMIT) || pid->valuedouble < 1)
                        return "pids";
        for (const char *const *k = (const char *const[]){"manifest_check", "status_text", NULL}; *k; k++) {
                v = cJSON_GetObjectItemCaseSensitive(e, *k);
                if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && text_is_printable(v->valuestring, TEXT_MAX)))
                        return *k;
        }
        return NULL;
}

/* Whether the answer is a status object after lines that are not: what a login that prints leaves. */
static bool login_noise(const HostCheck *h) {
        const char *o = memmem(h->out, h->out_len, "\n{", 2);
        _cleanup_json_ cJSON *rest = NULL;

        return o && jsonrpc_parse(o + 1, h->out_len - (size_t) (o + 1 - h->out), JSON_DEPTH, &rest) >= 0 &&
               cJSON_IsObject(rest);
}

static void host_result(const HostCheck *h, const char *remote_name, RemoteLook *ret) {
        _cleanup_json_ cJSON *answer = NULL;
        _cleanup_free_ char *said = last_line(h->err);
        const cJSON *list, *e;
        int r = 0;

        ret->checked = true;
        if (h->killed) {
                r = asprintf(&ret->reason, "no answer within %llu s", CHECK_USEC / USEC_PER_SEC);
                return (void) (r < 0 ? ret->reason = NULL : NULL);
        }
        if (h->exit_code != CLD_EXITED) {
                r = asprintf(&ret->reason, "ssh was killed by signal %s", sigabbrev_np(h->exit_status) ?: "?");
                return (void) (r < 0 ? ret->reason = NULL : NULL);
        }
        if (h->exit_status == 255 || h->exit_status == 126) {
                /* ssh could not connect (or could not run): its own words. */
                ret->reason = said ? strdup(said) : strdup("ssh failed");
                return;
        }
        ret->reachable = true;
        if (h->exit_status == 127) {
                ret->reason = strdup("there, no 'mcp-lazy' (not installed?)");
                return;
        }
        if (h->exit_status != 0 || h->too_big || !h->out) {
                r = asprintf(&ret->reason, "there, 'mcp-lazy status --json' %s%s%s",
                             h->too_big ? "answered too much" : "failed", said ? ": " : "", said ?: "");
                return (void) (r < 0 ? ret->reason = NULL : NULL);
        }
        if (jsonrpc_parse(h->out, h->out_len, JSON_DEPTH, &answer) < 0)
                answer = NULL;
        if (!answer && h->out_len > 0 && h->out[0] != '{' && login_noise(h)) {
                /* Lines ahead of the status (one object): the login's own. */
                const char *nl = memchr(h->out, '\n', h->out_len);
                _cleanup_free_ char *quote = text_printable_n(h->out, nl ? (size_t) (nl - h->out) : h->out_len, 80);
                r = asprintf(&ret->reason,
                             "the remote login wrote '%s' to stdout before 'mcp-lazy status --json' answered: %s",
                             quote ?: "?", SSH_LOGIN_NOISE_HINT);
                return (void) (r < 0 ? ret->reason = NULL : NULL);
        }
        list = cJSON_GetObjectItemCaseSensitive(answer, "backends");
        if (!cJSON_IsObject(answer) || !cJSON_IsArray(list)) {
                ret->reason = strdup("there, 'mcp-lazy status --json' answered something else than its status");
                return;
        }
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(answer, "problem"))) {
                _cleanup_free_ char *problem =
                        text_printable(cJSON_GetObjectItemCaseSensitive(answer, "problem")->valuestring, TEXT_MAX);
                r = asprintf(&ret->reason, "there, %s", problem ?: "?");
                return (void) (r < 0 ? ret->reason = NULL : NULL);
        }
        cJSON_ArrayForEach (e, list) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
                const char *bad;
                if (!cJSON_IsString(name) || !streq(name->valuestring, remote_name))
                        continue;
                bad = cJSON_IsObject(e) ? remote_entry_problem(e) : "the entry";
                if (bad) {
                        r = asprintf(&ret->reason,
                                     "there, 'mcp-lazy status --json' answered a '%s' for backend '%s' that is not "
                                     "what it can say; shown as unknown",
                                     bad, remote_name);
                        return (void) (r < 0 ? ret->reason = NULL : NULL);
                }
                ret->there = cJSON_Duplicate(e, true);
                return;
        }
        r = asprintf(&ret->reason, "there, the manifest has no backend '%s'", remote_name);
        if (r < 0)
                ret->reason = NULL;
}

int status_remote_look(const Manifest *m, RemoteLook *looks) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        Checks cs = {};
        sigset_t chld, old;
        size_t *host_of = NULL;
        int r;

        cs.hosts = calloc(m->n_backends + 1, sizeof *cs.hosts);
        host_of = calloc(m->n_backends + 1, sizeof *host_of);
        if (!cs.hosts || !host_of) {
                free(cs.hosts);
                free(host_of);
                return -ENOMEM;
        }
        /* One check per host (user, host and port as the manifest writes them). */
        for (size_t i = 0; i < m->n_backends; i++) {
                const Backend *b = &m->backends[i];
                size_t k;

                if (b->remote.kind != REMOTE_SSH)
                        continue;
                for (k = 0; k < cs.n_hosts; k++)
                        if (streq(cs.hosts[k].b->remote.host, b->remote.host))
                                break;
                if (k == cs.n_hosts)
                        cs.hosts[cs.n_hosts++].b = b;
                host_of[i] = k;
        }
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old);
        r = sd_event_new(&e);
        cs.event = e;
        for (size_t k = 0; r >= 0 && k < cs.n_hosts; k++)
                r = host_start(&cs, &cs.hosts[k]);
        if (r >= 0 && cs.pending > 0)
                r = sd_event_add_time_relative(e, NULL, CLOCK_MONOTONIC, CHECK_USEC, 0, on_deadline, &cs);
        if (r >= 0 && cs.pending > 0)
                r = sd_event_loop(e);
        for (size_t k = 0; k < cs.n_hosts; k++) {
                HostCheck *h = &cs.hosts[k];
                if (h->pid > 0) { /* only when setting up failed */
                        (void) kill(h->pid, SIGKILL);
                        (void) waitpid(h->pid, NULL, 0);
                }
                sd_event_source_disable_unref(h->out_source);
                sd_event_source_disable_unref(h->err_source);
                sd_event_source_disable_unref(h->child_source);
        }
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (r >= 0)
                for (size_t i = 0; i < m->n_backends; i++)
                        if (m->backends[i].remote.kind == REMOTE_SSH)
                                host_result(&cs.hosts[host_of[i]], m->backends[i].remote.remote_name, &looks[i]);
        for (size_t k = 0; k < cs.n_hosts; k++)
                free(cs.hosts[k].out);
        free(cs.hosts);
        free(host_of);
        return r < 0 ? r : 0;
}

void remote_look_done(RemoteLook *l) {
        free(l->reason);
        cJSON_Delete(l->there);
}
