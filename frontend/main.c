/* mcp-lazy: the stdio MCP server a client launches; tools/list from the manifest, calls to backend shims. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <systemd/sd-event.h>

#include "duration.h"
#include "event-util.h"
#include "framing.h"
#include "frontend.h"
#include "import.h"
#include "log.h"
#include "macros.h"
#include "manager.h"
#include "manifest.h"

#ifndef MCP_LAZY_VERSION
#define MCP_LAZY_VERSION "0"
#endif

static void help(void) {
        printf("Usage: mcp-lazy --manifest FILE [OPTIONS]\n"
               "       mcp-lazy --backend NAME [--manifest FILE] [OPTIONS]\n"
               "       mcp-lazy check FILE\n"
               "       mcp-lazy import [--client NAME] [--from FILE] [--dry-run] [--undo] ...\n"
               "       mcp-lazy refresh [--check] [NAME...]\n"
               "       mcp-lazy connect NAME     (stdio relay to backend NAME's socket on this host)\n"
               "       mcp-lazy status [--manifest FILE] [--user|--system] [--json]\n"
               "       mcp-lazy warm [--manifest FILE] [--user|--system] NAME...\n\n"
               "An MCP server on stdio that lists the manifest's tools without starting anything,\n"
               "and starts each backend (through its systemd socket) only when one of its tools is called.\n\n"
               "  --manifest FILE          the manifest (YAML or JSON); with --backend the default is\n"
               "                           $XDG_CONFIG_HOME/mcp-lazy/manifest.yaml (/etc/mcp-lazy/ for root)\n"
               "  --backend NAME           serve only this backend, answering initialize as it does\n"
               "  --activation=MODE        auto (default), direct (start mcp-lazy-shimd ourselves when\n"
               "                           the socket is missing) or systemd (sockets only)\n"
               "  --shimd PATH             mcp-lazy-shimd to run for direct activation\n"
               "  --max-line-bytes N       longest message accepted (default 16777216)\n"
               "  --version, --help\n");
}

/* Under the system manager a backend runs as the user mcp-lazy-NAME (DynamicUser=), and systemd's user
 * names are at most 31 characters of A-Za-z0-9_-. */
#define SYSTEM_USER_PREFIX   "mcp-lazy-"
#define SYSTEM_USER_NAME_MAX 31U

static bool system_user_name_ok(const char *name) {
        if (strlen(SYSTEM_USER_PREFIX) + strlen(name) > SYSTEM_USER_NAME_MAX)
                return false;
        for (const char *p = name; *p; p++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", *p))
                        return false;
        return true;
}

static int check(const char *path) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL;
        int r = manifest_load_file(path, &m, &err);

        if (r < 0) {
                fprintf(stderr, "%s\n", err ?: strerror(-r));
                return 1;
        }
        printf("%s: %zu backend%s, %zu tool%s\n", path, m->n_backends, m->n_backends == 1 ? "" : "s", m->n_tools,
               m->n_tools == 1 ? "" : "s");
        for (size_t i = 0; i < m->n_backends; i++) {
                const Backend *b = &m->backends[i];
                char idle[32];

                if (b->remote.kind != REMOTE_NONE) {
                        printf("  %-20s %zu tool%s, on %s as '%s'\n", b->name, b->n_tools, b->n_tools == 1 ? "" : "s",
                               b->remote.host, b->remote.remote_name);
                        continue;
                }
                printf("  %-20s %zu tool%s, idle_timeout %s, sharing %s, lifecycle %s, command:", b->name, b->n_tools,
                       b->n_tools == 1 ? "" : "s", duration_format(b->idle_timeout_usec, idle, sizeof idle),
                       b->sharing == SHARING_POOLED ? "pooled" : "session", lifecycle_to_string(b->lifecycle));
                for (char **a = b->command; a && *a; a++)
                        printf(" %s", *a);
                printf("\n");
        }
        for (size_t i = 0; i < m->n_backends; i++) {
                const char *n = m->backends[i].name;
                if (m->backends[i].remote.kind != REMOTE_NONE || system_user_name_ok(n))
                        continue;
                fprintf(stderr,
                        "warning: backend '%s': under the system manager it would run as the user '" SYSTEM_USER_PREFIX
                        "%s', which systemd refuses (at most %u characters of A-Za-z0-9_-, so a backend name of at "
                        "most %zu): give mcp-lazy@%s.service a User= of its own in a drop-in ('systemctl edit "
                        "mcp-lazy@%s.service'), or rename the backend; a user manager runs it as it is\n",
                        n, n, SYSTEM_USER_NAME_MAX, SYSTEM_USER_NAME_MAX - strlen(SYSTEM_USER_PREFIX), n, n);
        }
        for (size_t i = 0; i < m->n_backends && !secrets_manifest_is_system(path); i++)
                if (m->backends[i].secret_env && m->backends[i].secret_env[0])
                        fprintf(stderr,
                                "warning: backend '%s' names %s in secret_env, but only the units of the system "
                                "manager's manifest read a secrets file: with this manifest it starts without them\n",
                                m->backends[i].name, m->backends[i].secret_env[0]);
        return 0;
}

static int run(Options *o) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_(answers_freep) Answers *a = NULL;
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_free_ char *err = NULL;
        Session *s;
        int r;

        /* Prepared answers from the cache when the manifest has not changed; else the manifest. */
        r = answers_open(o, &m, &a, &err);
        if (r < 0) {
                fprintf(stderr, "%s\n", err ?: strerror(-r));
                return r;
        }

        /* SIGCHLD: sd-event watches the shims we start; SIGTERM/SIGINT: exit 0 at once. */
        r = event_new(NULL, NULL, &e);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the event loop: %m");

        s = session_new(e, TAKE_PTR(m), o);
        if (!s)
                return log_oom();
        session_set_answers(s, TAKE_PTR(a));
        r = session_watch_manifest(s);
        if (r < 0)
                log_warning_errno(r, "Cannot watch %s for changes, ignoring: %m", o->manifest_path);
        r = session_start(s, STDIN_FILENO, STDOUT_FILENO);
        if (r < 0) {
                session_free(s);
                return log_error_errno(r, "Failed to set up stdio: %m");
        }
        r = event_loop_on_page(e);
        session_free(s);
        return r < 0 ? log_error_errno(r, "Event loop failed: %m") : 0;
}

int main(int argc, char *argv[]) {
        enum { ARG_ACTIVATION = 0x100, ARG_SHIMD, ARG_MAX_LINE, ARG_VERSION, ARG_BACKEND };
        static const struct option options[] = {
                {"manifest", required_argument, NULL, 'm'},
                {"backend", required_argument, NULL, ARG_BACKEND},
                {"activation", required_argument, NULL, ARG_ACTIVATION},
                {"shimd", required_argument, NULL, ARG_SHIMD},
                {"max-line-bytes", required_argument, NULL, ARG_MAX_LINE},
                {"version", no_argument, NULL, ARG_VERSION},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        Options o = {.max_line = FRAMING_DEFAULT_MAX_LINE};
        _cleanup_free_ char *manifest = NULL, *shimd = NULL, *default_path = NULL;
        const char *manifest_arg = NULL;
        int c, r;

        log_setup("mcp-lazy");
        if (argc >= 2 && streq(argv[1], "check")) {
                if (argc != 3) {
                        fprintf(stderr, "Usage: mcp-lazy check FILE\n");
                        return 2;
                }
                return check(argv[2]);
        }
        if (argc >= 2 && streq(argv[1], "import"))
                return import_main(argc - 1, argv + 1);
        if (argc >= 2 && streq(argv[1], "refresh"))
                return refresh_main(argc - 1, argv + 1);
        if (argc >= 2 && streq(argv[1], "connect"))
                return connect_main(argc - 1, argv + 1);
        if (argc >= 2 && streq(argv[1], "status"))
                return status_main(argc - 1, argv + 1);
        if (argc >= 2 && streq(argv[1], "warm"))
                return warm_main(argc - 1, argv + 1);
        while ((c = getopt_long(argc, argv, "m:h", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        manifest_arg = optarg;
                        break;
                case ARG_ACTIVATION:
                        if (activation_mode_from_string(optarg, &o.activation) < 0) {
                                fprintf(stderr, "mcp-lazy: --activation takes auto, direct or systemd\n");
                                return 2;
                        }
                        break;
                case ARG_SHIMD:
                        shimd = strdup(optarg);
                        break;
                case ARG_BACKEND:
                        if (!backend_name_valid(optarg)) {
                                fprintf(stderr, "mcp-lazy: --backend '%s' is not a backend name\n", optarg);
                                return 2;
                        }
                        o.backend = optarg;
                        break;
                case ARG_MAX_LINE: {
                        char *end;
                        unsigned long long v = strtoull(optarg, &end, 10);
                        if (*end || v < 1024 || v > (1ULL << 30)) {
                                fprintf(stderr, "mcp-lazy: --max-line-bytes takes a number from 1024 to 1073741824\n");
                                return 2;
                        }
                        o.max_line = (size_t) v;
                        break;
                }
                case ARG_VERSION:
                        printf("mcp-lazy %s\n", MCP_LAZY_VERSION);
                        return 0;
                case 'h':
                        help();
                        return 0;
                default:
                        return 2;
                }
        if (!manifest_arg && o.backend)
                manifest_arg = default_path = manifest_default_path();
        if (!manifest_arg || optind != argc) {
                fprintf(stderr, "Usage: mcp-lazy --manifest FILE | --backend NAME [--manifest FILE] (see --help)\n");
                return 2;
        }
        /* The shim we may start resolves the manifest on its own: hand it an absolute path. */
        manifest = realpath(manifest_arg, NULL);
        if (!manifest) {
                fprintf(stderr, "mcp-lazy: %s: cannot read manifest: %m\n", manifest_arg);
                return 1;
        }
        o.manifest_path = manifest;
        o.shimd_path = shimd ?: (shimd = find_shimd());
        if (!o.shimd_path)
                return 1;
        r = run(&o);
        return r < 0 ? 1 : 0;
}
