/* `mcp-lazy connect NAME`: stdio relayed byte for byte to the local socket of backend NAME (the shim
 * is activated by systemd as for any connection, or started directly without systemd). It is what a
 * frontend on another host runs through ssh, and a plain stdio MCP server onto a pooled backend. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include "event-util.h"
#include "framing.h"
#include "frontend.h"
#include "log.h"
#include "macros.h"
#include "manifest-write.h"
#include "manifest.h"

#define RELAY_BUFFER (64U * 1024U)

typedef struct Relay Relay;

/* One direction: bytes read from in go out to out. */
typedef struct Flow {
        Relay *relay;
        int in, out;
        bool out_is_socket;
        sd_event_source *reader, *writer;
        char buf[RELAY_BUFFER];
        size_t len, off;
        bool eof;
} Flow;

struct Relay {
        sd_event *event;
        Flow up;   /* stdin -> socket */
        Flow down; /* socket -> stdout */
};

static void flow_update(Flow *f) {
        (void) sd_event_source_set_enabled(f->reader, !f->eof && f->len == 0 ? SD_EVENT_ON : SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(f->writer, f->len > f->off ? SD_EVENT_ON : SD_EVENT_OFF);
}

/* Everything read is written: pass the end on (half-close a socket, close a pipe). */
static void flow_finish(Flow *f) {
        if (f->out_is_socket)
                (void) shutdown(f->out, SHUT_WR);
        else
                f->out = safe_close(f->out);
        f->writer = sd_event_source_disable_unref(f->writer);
        /* The shim has closed the connection: the session is over. */
        if (f == &f->relay->down)
                (void) sd_event_exit(f->relay->event, 0);
}

static int on_readable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Flow *f = userdata;
        ssize_t n = read(fd, f->buf, sizeof f->buf);

        (void) s;
        (void) revents;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n <= 0) {
                f->eof = true;
                f->reader = sd_event_source_disable_unref(f->reader);
                flow_finish(f);
                return 0;
        }
        f->len = (size_t) n;
        f->off = 0;
        flow_update(f);
        return 0;
}

static int on_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Flow *f = userdata;
        ssize_t n = write(fd, f->buf + f->off, f->len - f->off);

        (void) s;
        (void) revents;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n < 0) {
                /* Nobody reads this side any more: the relay has nothing left to do. */
                log_debug("Relay write failed (%m); ending.");
                return sd_event_exit(f->relay->event, 0);
        }
        f->off += (size_t) n;
        if (f->off == f->len)
                f->len = f->off = 0;
        flow_update(f);
        return 0;
}

static int fd_nonblock(int fd) {
        int flags = fcntl(fd, F_GETFL);

        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        return 0;
}

static int flow_init(Relay *r, Flow *f, int in, int out, bool out_is_socket) {
        int k;

        f->relay = r;
        f->in = in;
        f->out = out;
        f->out_is_socket = out_is_socket;
        if ((k = fd_nonblock(in)) < 0 || (k = fd_nonblock(out)) < 0)
                return k;
        k = sd_event_add_io(r->event, &f->reader, in, EPOLLIN, on_readable, f);
        if (k >= 0)
                k = sd_event_add_io(r->event, &f->writer, out, EPOLLOUT, on_writable, f);
        if (k < 0)
                return k;
        flow_update(f);
        return 0;
}

static int relay_run(sd_event *e, int sock) {
        _cleanup_free_ Relay *r = calloc(1, sizeof *r);
        int k, sock_in;

        if (!r)
                return -ENOMEM;
        r->event = e;
        /* sd-event watches an fd once: the socket's reading side gets an fd of its own. */
        sock_in = fcntl(sock, F_DUPFD_CLOEXEC, 3);
        if (sock_in < 0)
                return log_error_errno(-errno, "Cannot duplicate the socket: %m");
        k = flow_init(r, &r->up, STDIN_FILENO, sock, true);
        if (k >= 0)
                k = flow_init(r, &r->down, sock_in, STDOUT_FILENO, false);
        if (k < 0)
                return log_error_errno(k, "Cannot relay stdio (a regular file cannot be polled): %m");
        k = sd_event_loop(e);
        sd_event_source_disable_unref(r->up.reader);
        sd_event_source_disable_unref(r->up.writer);
        sd_event_source_disable_unref(r->down.reader);
        sd_event_source_disable_unref(r->down.writer);
        return k;
}

/* Over ssh there may be no XDG_RUNTIME_DIR (no logind session): the user's manager is at the usual place. */
static void default_runtime_dir(void) {
        char p[64];

        if (geteuid() == 0 || getenv("XDG_RUNTIME_DIR"))
                return;
        snprintf(p, sizeof p, "/run/user/%u", (unsigned) geteuid());
        if (access(p, F_OK) == 0)
                setenv("XDG_RUNTIME_DIR", p, 1);
}

static void connect_help(void) {
        printf("Usage: mcp-lazy connect NAME [--manifest FILE] [--activation=MODE] [--shimd PATH]\n\n"
               "Relays stdin and stdout to the socket of backend NAME on this host, activating its shim\n"
               "(through systemd, or directly without systemd) as for any connection. Frontends on other\n"
               "hosts run it through ssh for backends with 'host: ssh://...'.\n\n"
               "  --manifest FILE     the manifest the backend's unit reads (default: %%E/mcp-lazy/manifest.yaml:\n"
               "                      /etc/mcp-lazy/manifest.yaml for root, else ~/.config/mcp-lazy/manifest.yaml)\n"
               "  --activation=MODE   auto (default), direct or systemd, as for mcp-lazy\n"
               "  --shimd PATH        mcp-lazy-shimd to run for direct activation\n");
}

static int unavailable(const char *text) {
        /* The frontend that ran us through ssh quotes this line (the last one with this prefix). */
        fprintf(stderr, CONNECT_ERROR_PREFIX "%s\n", text);
        return CONNECT_EXIT_UNAVAILABLE;
}

int connect_main(int argc, char *argv[]) {
        enum { ARG_ACTIVATION = 0x100, ARG_SHIMD };
        static const struct option options[] = {
                {"manifest", required_argument, NULL, 'm'},
                {"activation", required_argument, NULL, ARG_ACTIVATION},
                {"shimd", required_argument, NULL, ARG_SHIMD},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_free_ char *manifest = NULL, *abs = NULL, *err = NULL, *text = NULL, *shimd = NULL;
        int fd = -EBADF;
        Options o = {.max_line = FRAMING_DEFAULT_MAX_LINE, .activation = ACTIVATION_AUTO};
        Backend stub = {};
        const Backend *b;
        const char *name;
        int c, r;

        optind = 1;
        while ((c = getopt_long(argc, argv, "m:h", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        free(manifest);
                        manifest = strdup(optarg);
                        break;
                case ARG_ACTIVATION:
                        if (activation_mode_from_string(optarg, &o.activation) < 0) {
                                fprintf(stderr, "mcp-lazy connect: --activation takes auto, direct or systemd\n");
                                return 2;
                        }
                        break;
                case ARG_SHIMD:
                        free(shimd);
                        shimd = strdup(optarg);
                        break;
                case 'h':
                        connect_help();
                        return 0;
                default:
                        return 2;
                }
        if (optind != argc - 1) {
                fprintf(stderr, "Usage: mcp-lazy connect NAME [--manifest FILE] (see --help)\n");
                return 2;
        }
        name = argv[optind];
        if (!backend_name_valid(name)) {
                fprintf(stderr, "mcp-lazy connect: '%s' is not a backend name\n", name);
                return 2;
        }
        default_runtime_dir();
        if (!manifest)
                manifest = manifest_default_path();
        /* The manifest says where the socket is (socket:) and how to start the shim without systemd;
         * without one, the socket is at its usual place. */
        if (manifest) {
                abs = realpath(manifest, NULL);
                r = abs ? manifest_load_file(abs, &m, &err) : -errno;
                if (r < 0 && r != -ENOENT)
                        log_warning("Cannot use the manifest %s, ignoring it: %s", manifest, err ?: strerror(-r));
        }
        b = m ? manifest_find_backend(m, name) : NULL;
        if (b && b->remote.kind != REMOTE_NONE) {
                _cleanup_free_ char *t = NULL;
                if (asprintf(&t, "backend '%s' is on %s, not on this host; mcp-lazy connects one hop only", name,
                             b->remote.host) < 0)
                        return log_oom();
                return unavailable(t);
        }
        if (!b) {
                /* Nothing to start it from: only systemd's socket can serve it. */
                stub.name = (char *) name;
                b = &stub;
                o.activation = ACTIVATION_SYSTEMD;
        }
        o.manifest_path = abs;
        o.shimd_path = shimd ?: (shimd = find_shimd());
        if (!o.shimd_path)
                return log_oom();
        r = event_new(NULL, NULL, &e);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the event loop: %m");
        r = activation_connect(&o, b, e, &fd, &text);
        if (r < 0 && b == &stub && sd_booted() <= 0) {
                _cleanup_free_ char *path = backend_socket_path(b);
                free(text);
                if (asprintf(&text, "backend '%s' is not running (no socket at %s) and is not in %s to start it from",
                             name, path ?: "?", manifest ?: "a manifest") < 0)
                        text = NULL;
        }
        if (r < 0)
                return unavailable(text ?: strerror(-r));
        r = relay_run(e, fd);
        return r < 0 ? 1 : 0;
}
