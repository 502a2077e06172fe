/* mcp-lazy-shimd: takes the backend's socket from systemd, runs the backend while it is used, exits when idle. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "duration.h"
#include "envfile.h"
#include "event-util.h"
#include "framing.h"
#include "log.h"
#include "macros.h"
#include "manifest.h"
#include "process.h"
#include "shimd.h"

#define ACCEPT_RETRY_USEC (100ULL * 1000ULL)

/* An update asked for is a defer source made then, gone once it ran: libsystemd keeps a defer source
 * pending for as long as it lives, off or on, in the queue every wakeup's io event is put into and
 * taken out of (each wakeup would read two lines of it). If it cannot be made, an always-due timer made
 * at start does the same (a timer that is off sits in no such queue). */
static sd_event_source *update_source, *update_fallback;
static _hot_ bool update_pending; /* an update is asked for: every answer asks for it */
/* A STATUS= that only moves the call counts goes to PID 1 at most this often: under load they change
 * with every call, and each message wakes PID 1, dbus-daemon and logind (about 0.5 ms of CPU in all,
 * landing on whatever runs). mcp-lazy status shows seconds. */
#define STATUS_MIN_INTERVAL_USEC (1000ULL * 1000ULL)
static _hot_ sd_event_source *status_source;
static _hot_ bool status_armed; /* status_source is on: we know it, sd-event is not asked per message */
static uint64_t status_sent_usec;

/* What the status says but its counts: a change of it goes to PID 1 at once. */
typedef struct StatusShape {
        struct {
                pid_t pid;
                InstanceState state;
        } backends[SHIM_MAX_INSTANCES + 1];
        unsigned n_clients;
        bool draining, contract_checked;
        char contract[3][96];
} StatusShape;
static StatusShape status_sent_shape; /* the status sent's */

/* The shim stops once nothing was in flight for idle_timeout. The idle timer is not re-armed per
 * message (a shim woken after a slow backend runs cache-cold, and each sd-event call per message is
 * code and data to fetch again): a call's end notes when the shim went idle, the timer stays armed,
 * and when it fires early it is set to the end of the idle time noted, or, while calls run, armed
 * again by the end of the last one. */
static _hot_ uint64_t idle_since_usec; /* when in-flight work last went to none */
static _hot_ bool idle_armed, idle_busy;

static void status_shape(const Shim *s, StatusShape *ret) {
        size_t n = 0;

        memset(ret, 0, sizeof *ret); /* compared with memcmp(): padding too */
        for (const Instance *i = s->instances; i && n < ELEMENTSOF(ret->backends); i = i->next)
                if (i->pid > 0) {
                        ret->backends[n].pid = i->pid;
                        ret->backends[n++].state = i->state;
                }
        ret->n_clients = s->n_clients;
        ret->draining = s->draining;
        ret->contract_checked = s->contract_checked;
        memcpy(ret->contract, s->contract, sizeof ret->contract);
}

unsigned shim_in_flight(const Shim *s) {
        unsigned n = 0;
        for (Instance *i = s->instances; i; i = i->next)
                n += instance_in_flight(i);
        return n;
}

/* When the last call was answered, found when the line is made (now: this loop iteration's
 * CLOCK_MONOTONIC), not read on every answer: calls answered since the line was last made ended when
 * the shim last went idle (the time it noted then), or, with calls still running, within the status
 * interval, and now says so to the second the line shows. */
static void last_call_note(Shim *s, uint64_t now) {
        if (s->calls_served == s->calls_noted)
                return;
        s->calls_noted = s->calls_served;
        s->last_call_usec = shim_in_flight(s) == 0 && !idle_busy && idle_since_usec ? idle_since_usec : now;
}

/* ", last call at 2026-11-22T07:01:02Z": mcp-lazy status reads it back from StatusText. */
static void last_call_text(const Shim *s, uint64_t now, char *buf, size_t size) {
        uint64_t real = 0;
        struct tm tm;
        time_t t;

        buf[0] = 0;
        if (s->last_call_usec == 0 || sd_event_now(s->event, CLOCK_REALTIME, &real) < 0)
                return;
        t = (time_t) ((real - (now > s->last_call_usec ? now - s->last_call_usec : 0)) / USEC_PER_SEC);
        if (gmtime_r(&t, &tm))
                (void) strftime(buf, size, ", last call at %Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The counts' next STATUS= when the interval ends. */
static void status_arm(void) {
        if (status_armed || !status_source)
                return;
        (void) sd_event_source_set_time(status_source, status_sent_usec + STATUS_MIN_INTERVAL_USEC);
        status_armed = sd_event_source_set_enabled(status_source, SD_EVENT_ONESHOT) >= 0;
}

static void shim_notify_status(Shim *s) {
        char status[384], contract[200], last[48];
        size_t off = 0;
        StatusShape shape;
        uint64_t now = 0;

        if (!status_source)
                return; /* no service manager listens (a shim mcp-lazy started itself): no line to make */

        /* Every call changes the counts, but PID 1 only hears of it when the line really changes; a
         * change of the counts alone not more often than STATUS_MIN_INTERVAL_USEC (it goes out when
         * the interval ends). The backends' states, the sessions and the contract go out at once.
         * Within the interval, with nothing but the counts changed, the line is not even made. */
        status_shape(s, &shape);
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (status_sent_usec && now < status_sent_usec + STATUS_MIN_INTERVAL_USEC && status_source &&
            memcmp(&shape, &status_sent_shape, sizeof shape) == 0)
                return status_arm();
        for (Instance *i = s->instances; i && off < sizeof status / 2; i = i->next)
                if (i->pid > 0)
                        off += (size_t) snprintf(status + off, sizeof status - off, "%sbackend pid %d (%s)",
                                                 off ? ", " : "", (int) i->pid,
                                                 i->state == INSTANCE_READY      ? "ready"
                                                 : i->state == INSTANCE_STARTING ? "starting"
                                                                                 : "stopping");
        contract_summary(s, contract, sizeof contract);
        last_call_note(s, now);
        last_call_text(s, now, last, sizeof last);
        snprintf(status + off, sizeof status - off, "%s%s, %u session%s, %u in flight, %llu call%s served%s%s",
                 off ? "" : "backend idle", s->draining ? ", stopping" : "", s->n_clients, s->n_clients == 1 ? "" : "s",
                 shim_in_flight(s), (unsigned long long) s->calls_served, s->calls_served == 1 ? "" : "s", last,
                 contract);
        if (strcmp(status, s->last_status) != 0) {
                (void) sd_notifyf(false, "STATUS=%s", status);
                snprintf(s->last_status, sizeof s->last_status, "%s", status);
                status_sent_usec = now;
                status_sent_shape = shape;
                (void) sd_event_source_set_enabled(status_source, SD_EVENT_OFF);
                status_armed = false;
        }
}

static int on_status(sd_event_source *src, uint64_t usec, void *userdata) {
        (void) src, (void) usec;
        status_armed = false; /* a oneshot source is off once it fired */
        shim_notify_status(userdata);
        return 0;
}

static void listeners_enable(Shim *s, bool on) {
        for (size_t i = 0; i < s->n_listeners; i++)
                (void) sd_event_source_set_enabled(s->listeners[i], on ? SD_EVENT_ON : SD_EVENT_OFF);
}

static int on_idle(sd_event_source *src, uint64_t usec, void *userdata);

static void begin_drain(Shim *s) {
        if (s->draining)
                return;
        s->draining = true;
        (void) sd_notify(false, "STOPPING=1");
        /* New connections wait in systemd's backlog: the next activation takes them. */
        listeners_enable(s, false);
        for (Client *c = s->clients; c; c = c->next)
                client_send_draining(c);
        (void) sd_event_source_set_time_relative(s->drain_source, DRAIN_GRACE_USEC);
        (void) sd_event_source_set_enabled(s->drain_source, SD_EVENT_ONESHOT);
}

static uint64_t usec_after(uint64_t t, uint64_t d) {
        return t > UINT64_MAX - d ? UINT64_MAX : t + d;
}

static void idle_arm(Shim *s, uint64_t usec) {
        (void) sd_event_source_set_time(s->idle_source, usec);
        idle_armed = sd_event_source_set_enabled(s->idle_source, SD_EVENT_ONESHOT) >= 0;
}

/* How long the shim waits with nothing in flight before it stops: none once its definition changed. */
static uint64_t idle_timeout(const Shim *s) {
        if (s->reload_pending)
                return 0;
        return s->backend->lifecycle == LIFECYCLE_RESIDENT ? USEC_INFINITY : s->backend->idle_timeout_usec;
}

static void idle_update(Shim *s, unsigned in_flight) {
        uint64_t timeout;

        if (in_flight > 0) {
                idle_busy = true;
                return;
        }
        if (idle_busy || !idle_since_usec) {
                (void) sd_event_now(s->event, CLOCK_MONOTONIC, &idle_since_usec);
                idle_busy = false;
        }
        if (!idle_armed && (timeout = idle_timeout(s)) != USEC_INFINITY)
                idle_arm(s, usec_after(idle_since_usec, timeout));
}

/* Everything that depends on counts (idle timer, reaping, exit, status) is decided here, once per
 * loop iteration, never in the middle of another object's callback. */
static int on_update(sd_event_source *src, void *userdata) {
        Shim *s = userdata;
        bool all_down = true;
        unsigned in_flight;

        (void) src;
        update_source = sd_event_source_disable_unref(update_source); /* freed once it returns */
        update_pending = false;
        for (Client *c = s->clients, *n; c; c = n) {
                n = c->next;
                if (c->overflow)
                        client_free(c); /* it does not read: what is queued for it is dropped */
                else if (client_done(c))
                        channel_shutdown(c->ch, CLIENT_STALL_USEC); /* freed once its answers are out */
        }
        in_flight = shim_in_flight(s);
        if (s->inetd && s->n_clients == 0)
                s->draining = true; /* the one connection is gone: nothing more can come */

        if (!s->draining) {
                idle_update(s, in_flight);
                /* Past the session limit connections are still taken, to be told why they are refused. */
                int retrying = SD_EVENT_OFF;
                (void) sd_event_source_get_enabled(s->accept_retry_source, &retrying);
                listeners_enable(s, retrying == SD_EVENT_OFF);
                /* resident: a backend for the next session runs whenever the shim does, also once
                 * sessions of their own (sharing: session) took the one there was; not the old
                 * definition's, once it changed. */
                if (s->backend->lifecycle == LIFECYCLE_RESIDENT && !s->inetd && !s->reload_pending &&
                    instance_spare_needed(s) && instance_start_ahead(s) < 0)
                        log_warning("Cannot start backend '%s' ahead of a call: out of memory.", s->backend->name);
        } else if (s->n_clients == 0 && in_flight == 0) {
                for (Instance *i = s->instances; i; i = i->next) {
                        instance_stop(i);
                        if (i->state != INSTANCE_DOWN)
                                all_down = false;
                }
                if (all_down)
                        (void) sd_event_exit(s->event, 0);
        }
        shim_notify_status(s);
        return 0;
}

static int on_update_fallback(sd_event_source *src, uint64_t usec, void *userdata) {
        (void) usec;
        return on_update(src, userdata);
}

void shim_update(Shim *s) {
        if (update_pending)
                return;
        update_pending = sd_event_add_defer(s->event, &update_source, on_update, s) >= 0 ||
                         sd_event_source_set_enabled(update_fallback, SD_EVENT_ONESHOT) >= 0;
}

void shim_calls_changed(Shim *s, const Client *c) {
        /* A draining shim may exit, and a half-closed or overflowing connection may be done: on_update()
         * decides, as for anything else. (A one-connection (inetd) shim starts draining when its
         * connection goes: client_free() asks for that update.) */
        if (update_pending || s->draining || !c || c->eof || c->overflow)
                return shim_update(s);
        /* Otherwise only the counts moved: the idle timer follows them at once (a timer's state, no
         * object of anyone's is touched), and the status line when its timer says (see
         * shim_notify_status()). That spares the loop an iteration (an epoll_wait()) per message. */
        idle_update(s, shim_in_flight(s));
        status_arm();
}

static int on_idle(sd_event_source *src, uint64_t usec, void *userdata) {
        Shim *s = userdata;
        uint64_t now = 0;
        char d[32];

        (void) src, (void) usec;
        idle_armed = false;
        if (s->draining || shim_in_flight(s) > 0)
                return 0; /* the end of the last call arms it again */
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (idle_busy || now < usec_after(idle_since_usec, idle_timeout(s))) {
                idle_update(s, 0);
                return 0;
        }
        if (s->reload_pending)
                log_debug("No call in flight: stopping for the changed definition.");
        else
                log_info("Idle for %s, stopping.", duration_format(s->backend->idle_timeout_usec, d, sizeof d));
        begin_drain(s);
        shim_update(s);
        return 0;
}

/* The definition changed RELOAD_WAIT_USEC ago, and calls have been in flight ever since: said once. The
 * shim does not drain with them in flight: one call that never ends would hold every other session's
 * new calls in the socket's backlog (review 17 HIGH-1); it serves them on the old definition until a
 * moment with none in flight. */
static int on_reload_wait(sd_event_source *src, uint64_t usec, void *userdata) {
        Shim *s = userdata;
        unsigned n = shim_in_flight(s);

        (void) src, (void) usec;
        if (s->draining)
                return 0;
        log_info("%u call%s in flight since the definition changed: the old definition serves until no call is in "
                 "flight, then the shim stops.",
                 n, n == 1 ? "" : "s");
        return 0;
}

void shim_reload(Shim *s, bool restart) {
        if (s->draining || s->reload_pending)
                return;
        s->reload_pending = true;
        s->restart = restart;
        /* The idle timer is due at once now: armed anew by the next update (or when the calls in flight end). */
        (void) sd_event_source_set_enabled(s->idle_source, SD_EVENT_OFF);
        idle_armed = false;
        if (sd_event_add_time_relative(s->event, &s->reload_source, CLOCK_MONOTONIC, RELOAD_WAIT_USEC, 0,
                                       on_reload_wait, s) < 0)
                log_warning("Cannot set a timer for the reload: the shim stops once no call is in flight.");
        shim_update(s);
}

/* Peers that ignore the draining notice are closed once nothing of theirs is in flight (after what is
 * queued for them is written). */
static int on_drain_grace(sd_event_source *src, uint64_t usec, void *userdata) {
        Shim *s = userdata;

        (void) usec;
        if (shim_in_flight(s) > 0) {
                (void) sd_event_source_set_time_relative(src, DRAIN_GRACE_USEC);
                return sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
        }
        for (Client *c = s->clients; c; c = c->next)
                channel_shutdown(c->ch, CLIENT_STALL_USEC);
        shim_update(s);
        return 0;
}

static int on_accept_retry(sd_event_source *src, uint64_t usec, void *userdata) {
        (void) src, (void) usec;
        shim_update(userdata);
        return 0;
}

static int on_accept(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        Shim *s = userdata;
        bool refuse = s->n_clients >= s->max_clients;
        int cfd;

        (void) src, (void) revents;
        if (refuse)
                refused_make_room(s);
        cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (cfd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                        /* The listening socket stays readable: pause instead of spinning, the backlog keeps them. */
                        log_warning_errno(-errno, "Failed to accept a connection, pausing for 100 ms: %m");
                        listeners_enable(s, false);
                        (void) sd_event_source_set_time_relative(s->accept_retry_source, ACCEPT_RETRY_USEC);
                        (void) sd_event_source_set_enabled(s->accept_retry_source, SD_EVENT_ONESHOT);
                } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                        log_warning_errno(-errno, "Failed to accept a connection, ignoring: %m");
                return 0;
        }
        if (client_new(s, cfd, refuse) < 0)
                log_warning("Failed to set up a connection, closed it.");
        return 0;
}

/* Each connection costs SHIM_FDS_PER_CLIENT descriptors: take the hard limit (the unit sets
 * LimitNOFILE=), and serve no more sessions than it allows, so that one past it is refused with a
 * reason instead of reset. Backends get the soft limit back (select() needs fds below 1024). */
static void setup_fd_limit(Shim *s) {
        struct rlimit rl;
        rlim_t soft, fit;

        s->max_clients = s->backend->max_sessions;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        soft = rl.rlim_cur;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                if (setrlimit(RLIMIT_NOFILE, &rl) >= 0)
                        process_set_child_nofile(soft);
                else
                        rl.rlim_cur = soft;
        }
        fit = rl.rlim_cur > SHIM_RESERVED_FDS ? (rl.rlim_cur - SHIM_RESERVED_FDS) / SHIM_FDS_PER_CLIENT : 1;
        if (fit < s->max_clients) {
                log_warning("max_sessions of backend '%s' is %u, but the descriptor limit (%llu) allows %llu sessions: "
                            "serving at most that many; raise LimitNOFILE= of mcp-lazy@%s.service",
                            s->backend->name, s->max_clients, (unsigned long long) rl.rlim_cur,
                            (unsigned long long) fit, s->backend->name);
                s->max_clients = (unsigned) fit;
                s->fd_bound = true;
        }
}

static int on_terminate(sd_event_source *src, const struct signalfd_siginfo *si, void *userdata) {
        Shim *s = userdata;

        (void) src;
        log_info("Received %s, stopping.", sigabbrev_np((int) si->ssi_signo) ?: "signal");
        s->restart = false;
        begin_drain(s);
        while (s->clients)
                client_free(s->clients);
        for (Instance *i = s->instances; i; i = i->next)
                instance_stop(i);
        shim_update(s);
        return 0;
}

/* With Accept=yes the instance is named after the connection, so the backend's name comes from the
 * socket's own address: .../NAME.sock. */
static char *name_from_socket(int fd) {
        struct sockaddr_un sa = {};
        socklen_t len = sizeof sa;
        const char *base, *dot;

        if (getsockname(fd, (struct sockaddr *) &sa, &len) < 0 || sa.sun_family != AF_UNIX || !sa.sun_path[0])
                return NULL;
        base = strrchr(sa.sun_path, '/');
        base = base ? base + 1 : sa.sun_path;
        dot = strrchr(base, '.');
        return dot && streq(dot, ".sock") ? strndup(base, (size_t) (dot - base)) : NULL;
}

static int setup_fds(Shim *s, int n) {
        s->listeners = calloc((size_t) n, sizeof(sd_event_source *));
        if (!s->listeners)
                return -ENOMEM;
        for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; fd++) {
                int r;
                if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) > 0) {
                        r = sd_event_add_io(s->event, &s->listeners[s->n_listeners], fd, EPOLLIN, on_accept, s);
                        if (r < 0)
                                return log_error_errno(r, "Failed to watch listening socket: %m");
                        s->n_listeners++;
                } else if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 0) > 0) {
                        s->inetd = true; /* Accept=yes, or a frontend's socketpair */
                        r = client_new(s, fd, false);
                        if (r < 0)
                                return log_error_errno(r, "Failed to set up the connection: %m");
                } else
                        return log_error_errno(-EBADF, "File descriptor %d from systemd is not a stream socket.", fd);
        }
        return 0;
}

/* 0, SHIM_EXIT_RESTART, or -errno. */
static int run(const char *manifest_path, const char *name_arg, size_t max_line) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_free_ char *err = NULL, *name = NULL;
        static Shim s _warm_ __attribute__((aligned(64))); /* off the loop's stack page; its head on one line */
        struct stat loaded = {};
        int n, r;

        n = sd_listen_fds(true);
        if (n < 0)
                return log_error_errno(n, "Failed to take sockets from systemd: %m");
        if (n == 0)
                return log_error_errno(-EINVAL, "No socket passed in. mcp-lazy-shimd is started by systemd through "
                                                "mcp-lazy@NAME.socket, or by mcp-lazy --activation=direct.");
        name = name_arg ? strdup(name_arg) : name_from_socket(SD_LISTEN_FDS_START);
        if (!name)
                return log_error_errno(-EINVAL,
                                       "No backend name given, and the socket's address does not end in NAME.sock.");
        log_set_field("MCP_LAZY_BACKEND", name);

        /* These two mark phases of a cold start (tests/bench/cold.mjs). */
        log_debug("Reading the manifest %s.", manifest_path);
        if (stat(manifest_path, &loaded) < 0)
                loaded = (struct stat){};
        r = manifest_load_file_backend(manifest_path, name, &m, &err);
        if (r < 0)
                return log_error_errno(r, "%s", err ?: "Failed to load manifest: %m");
        log_debug("Read the manifest: %zu backends, %zu tools.", m->n_backends, m->n_tools);
        /* Only this backend and its tools are ours to hold: what is freed goes back at once. */
        if (manifest_restrict(m, name) < 0)
                return log_error_errno(-ENOENT, "Backend '%s' is not in %s.", name, manifest_path);
        (void) malloc_trim(0);
        s.manifest = m;
        s.manifest_path = manifest_path;
        s.name = name;
        s.max_line = max_line;
        s.backend = &m->backends[0];
        if (!s.backend->command)
                return log_error_errno(-EMEDIUMTYPE, "Backend '%s' lives on %s by %s: this host has no command to run.",
                                       name, s.backend->remote.host, manifest_path);

        /* secret_env: what the unit hands us from the backend's secrets file (EnvironmentFile=). */
        for (char **v = s.backend->secret_env; v && *v; v++)
                if (!getenv(*v) && !strv_env_get(s.backend->env, *v))
                        log_warning("Backend '%s' names %s in secret_env, but the shim's environment lacks it: the "
                                    "backend starts without it (mcp-lazy@%s.service reads it from its secrets file, "
                                    "/etc/mcp-lazy/secrets/%s.env; a shim started otherwise gets none).",
                                    name, *v, name, name);
        s.learned_era = era_state_load(&s);

        r = event_new(on_terminate, &s, &e);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the event loop: %m");
        s.event = e;
        s.own_uid = geteuid();
        setup_fd_limit(&s);
        s.upcalls = hashmap_new();
        if (!s.upcalls)
                return log_oom();
        r = sd_event_add_time(e, &update_fallback, CLOCK_MONOTONIC, 0, 1, on_update_fallback, &s);
        if (r >= 0)
                r = sd_event_source_set_enabled(update_fallback, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_time(e, &s.idle_source, CLOCK_MONOTONIC, 0, 0, on_idle, &s);
        if (r >= 0)
                r = sd_event_add_time(e, &s.drain_source, CLOCK_MONOTONIC, 0, 0, on_drain_grace, &s);
        if (r >= 0)
                r = sd_event_add_time(e, &s.accept_retry_source, CLOCK_MONOTONIC, 0, 0, on_accept_retry, &s);
        /* The status line only for a service manager that hears it: without $NOTIFY_SOCKET no timer
         * wakes the shim for it, and no call makes it. */
        if (r >= 0 && getenv("NOTIFY_SOCKET"))
                r = sd_event_add_time(e, &status_source, CLOCK_MONOTONIC, 0, 0, on_status, &s);
        if (r >= 0 && status_source)
                r = sd_event_source_set_enabled(status_source, SD_EVENT_OFF);
        if (r < 0)
                return log_error_errno(r, "Failed to set up event sources: %m");
        (void) sd_event_source_set_enabled(s.idle_source, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(s.drain_source, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(s.accept_retry_source, SD_EVENT_OFF);

        r = setup_fds(&s, n);
        if (r < 0)
                return r;
        /* Without a watch the shim runs what it read until it stops; SIGHUP still reloads, if it was set. */
        r = reload_setup(&s, &loaded);
        if (r < 0)
                log_warning_errno(r, "Cannot watch %s for changes of backend '%s', ignoring: %m", manifest_path, name);
        /* lifecycle warm, resident: `systemctl start mcp-lazy@NAME.service` (or boot, once enabled)
         * starts the backend too (resident: in on_update()). A shim for one connection (Accept=yes,
         * direct) waits for its client. */
        if (s.backend->lifecycle == LIFECYCLE_WARM && !s.inetd && instance_start_ahead(&s) < 0)
                return log_oom();
        shim_update(&s);
        (void) sd_notify(false, "READY=1");

        r = event_loop_on_page(e);

        while (s.clients)
                client_free(s.clients);
        while (s.instances)
                instance_free(s.instances);
        for (size_t i = 0; i < s.n_listeners; i++)
                sd_event_source_disable_unref(s.listeners[i]);
        free(s.listeners);
        hashmap_free(s.upcalls);
        update_source = sd_event_source_disable_unref(update_source);
        update_fallback = sd_event_source_disable_unref(update_fallback);
        status_source = sd_event_source_disable_unref(status_source);
        sd_event_source_disable_unref(s.idle_source);
        sd_event_source_disable_unref(s.drain_source);
        sd_event_source_disable_unref(s.accept_retry_source);
        reload_done(&s);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        return s.restart ? SHIM_EXIT_RESTART : 0;
}

int main(int argc, char *argv[]) {
        enum { ARG_MAX_LINE = 0x100 };
        static const struct option options[] = {
                {"manifest", required_argument, NULL, 'm'},
                {"max-line-bytes", required_argument, NULL, ARG_MAX_LINE},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        const char *manifest = NULL;
        size_t max_line = FRAMING_DEFAULT_MAX_LINE;
        int c;

        log_setup("mcp-lazy-shimd");
        while ((c = getopt_long(argc, argv, "m:h", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        manifest = optarg;
                        break;
                case ARG_MAX_LINE: {
                        char *end;
                        unsigned long long v = strtoull(optarg, &end, 10);
                        if (*end || v < 1024 || v > (1ULL << 30)) {
                                fprintf(stderr,
                                        "mcp-lazy-shimd: --max-line-bytes takes a number from 1024 to 1073741824\n");
                                return 2;
                        }
                        max_line = (size_t) v;
                        break;
                }
                case 'h':
                        printf("Usage: mcp-lazy-shimd --manifest FILE [--max-line-bytes N] [NAME]\n\n"
                               "Runs one backend of the manifest behind the socket systemd passes in\n"
                               "(mcp-lazy@NAME.socket). NAME defaults to the socket's file name without .sock.\n");
                        return 0;
                default:
                        return 2;
                }
        if (!manifest || argc - optind > 1) {
                fprintf(stderr, "Usage: mcp-lazy-shimd --manifest FILE [NAME]\n");
                return 2;
        }
        int r = run(manifest, optind < argc ? argv[optind] : NULL, max_line);
        return r < 0 ? 1 : r;
}
