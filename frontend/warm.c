/* mcp-lazy warm NAME...: starts mcp-lazy@NAME.service, so that a warm or resident backend runs before the first call.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "macros.h"
#include "manager.h"
#include "manifest.h"

int warm_main(int argc, char *argv[]) {
        static const struct option options[] = {
                {"manifest", required_argument, NULL, 'm'},
                {"system", no_argument, NULL, 's'},
                {"user", no_argument, NULL, 'u'},
                {"help", no_argument, NULL, 'h'},
                {},
        };
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *path = NULL;
        ManagerScope scope = manager_default_scope();
        int c, r, failed = 0;

        optind = 1;
        while ((c = getopt_long(argc, argv, "m:h", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        free(path);
                        path = strdup(optarg);
                        if (!path)
                                return 1;
                        break;
                case 's':
                        scope = MANAGER_SYSTEM;
                        break;
                case 'u':
                        scope = MANAGER_USER;
                        break;
                case 'h':
                        printf("Usage: mcp-lazy warm [--manifest FILE] [--user|--system] NAME...\n\n"
                               "Starts mcp-lazy@NAME.service, so that a backend with lifecycle warm or resident\n"
                               "runs before the first call (like systemctl start).\n");
                        return 0;
                default:
                        return 2;
                }
        if (optind >= argc) {
                fprintf(stderr, "Usage: mcp-lazy warm [--manifest FILE] [--system] NAME...\n");
                return 2;
        }
        if (manager_load_manifest(scope, &path, &m) < 0)
                return 1;
        /* Every name first: nothing is started when one of them is wrong. */
        for (int i = optind; i < argc; i++) {
                const Backend *b = manifest_find_backend(m, argv[i]);
                if (!b) {
                        fprintf(stderr, "mcp-lazy: backend '%s' is not in %s\n", argv[i], path);
                        return 1;
                }
                if (b->remote.kind != REMOTE_NONE) {
                        fprintf(stderr,
                                "mcp-lazy: backend '%s' runs on %s, as '%s' there: warm it there ('mcp-lazy warm %s' "
                                "on that host)\n",
                                argv[i], b->remote.host, b->remote.remote_name, b->remote.remote_name);
                        return 1;
                }
                if (b->lifecycle == LIFECYCLE_LAZY) {
                        fprintf(stderr,
                                "mcp-lazy: backend '%s' is lazy: its shim starts it on the first call, not before; "
                                "set 'lifecycle: warm' (or resident) for it in %s\n",
                                argv[i], path);
                        return 1;
                }
        }
        r = manager_bus_open(scope, &bus);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: %s\n",
                        r == -ENOMEDIUM ? "systemd is not running here: nothing to warm (each session starts its "
                                          "own shims)"
                                        : "cannot reach the service manager");
                return 1;
        }
        for (int i = optind; i < argc; i++) {
                char unit[128];
                snprintf(unit, sizeof unit, "mcp-lazy@%s.service", argv[i]);
                if (manager_start_unit(bus, scope, unit) < 0)
                        failed++;
                else
                        printf("%s: started\n", unit);
        }
        return failed ? 1 : 0;
}
