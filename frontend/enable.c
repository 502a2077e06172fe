/* Enabling and starting backends' sockets in the service manager, over sd-bus (as systemctl enable --now). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>

#include "import.h"
#include "macros.h"
#include "manager.h"

/* The service manager: for a user, its private socket first (as systemctl does: no D-Bus broker
 * needed), then the user bus; for root, the system bus. */
static int open_manager(bool user, sd_bus **ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        const char *rt = getenv("XDG_RUNTIME_DIR");
        _cleanup_free_ char *addr = NULL;

        if (!user)
                return sd_bus_open_system(ret);
        if (rt && rt[0] == '/' && asprintf(&addr, "unix:path=%s/systemd/private", rt) >= 0 && sd_bus_new(&bus) >= 0 &&
            sd_bus_set_address(bus, addr) >= 0 && sd_bus_start(bus) >= 0) {
                *ret = TAKE_PTR(bus);
                return 0;
        }
        return sd_bus_open_user(ret);
}

int enable_sockets(char *const *backends) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_strv_free_ char **units = NULL;
        size_t k = 0;
        bool user = geteuid() != 0;
        const char *ctl = user ? "systemctl --user" : "systemctl";
        size_t n = 0;
        int r, failed = 0;

        while (backends && backends[k])
                k++;
        units = calloc(k + 1, sizeof(char *));
        if (!units)
                return -ENOMEM;
        for (; n < k; n++)
                if (asprintf(&units[n], "mcp-lazy@%s.socket", backends[n]) < 0)
                        return -ENOMEM;
        if (n == 0)
                return 0;
        r = sd_booted() <= 0 ? -ENOMEDIUM : open_manager(user, &bus);
        if (r < 0) {
                printf("\nsystemd is not running here (%s): the entries work without it, each mcp-lazy starting\n"
                       "mcp-lazy-shimd itself (direct activation). With systemd, share the backends with:\n  %s enable "
                       "--now",
                       r == -ENOMEDIUM ? "not booted with systemd" : strerror(-r), ctl);
                for (size_t i = 0; i < n; i++)
                        printf(" %s", units[i]);
                printf("\n");
                return 0;
        }
        (void) sd_bus_set_method_call_timeout(bus, 30 * USEC_PER_SEC);
        {
                _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;

                r = sd_bus_message_new_method_call(bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                                   "org.freedesktop.systemd1.Manager", "EnableUnitFiles");
                if (r >= 0)
                        r = sd_bus_message_append_strv(m, units);
                if (r >= 0)
                        r = sd_bus_message_append(m, "bb", false, false);
                if (r >= 0)
                        r = sd_bus_call(bus, m, 0, &e, &reply);
                if (r < 0) {
                        fprintf(stderr,
                                "mcp-lazy: cannot enable the sockets: %s\n  Are the unit templates installed "
                                "(make install)? Then run: %s enable --now mcp-lazy@NAME.socket\n",
                                e.message ?: strerror(-r), ctl);
                        return r;
                }
        }
        {
                _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
                r = sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                       "org.freedesktop.systemd1.Manager", "Reload", &e, NULL, NULL);
                if (r < 0)
                        fprintf(stderr, "mcp-lazy: systemd did not reload its units (%s), ignoring\n",
                                e.message ?: strerror(-r));
        }
        for (size_t i = 0; i < n; i++) {
                /* As `systemctl enable --now`: started means its job ended "done" (the socket listens). */
                r = manager_start_unit(bus, user ? MANAGER_USER : MANAGER_SYSTEM, units[i]);
                if (r < 0) {
                        failed = r;
                        continue;
                }
                printf("Enabled and started %s (%s manager)\n", units[i], user ? "user" : "system");
        }
        return failed;
}
