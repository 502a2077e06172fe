/* Event loop setup shared by mcp-lazy and mcp-lazy-shimd. */
#include <alloca.h>
#include <signal.h>
#include <stdint.h>

#include "event-util.h"
#include "macros.h"

int event_new(sd_event_signal_handler_t on_terminate, void *userdata, sd_event **ret) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        sigset_t mask;
        int r;

        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;
        signal(SIGPIPE, SIG_IGN);

        /* Not sd_event_default(): a default loop checks on every iteration that it runs in the thread that
         * made it, with a gettid() system call (libsystemd 252), twice per message relayed. */
        r = sd_event_new(&e);
        if (r < 0)
                return r;
        r = sd_event_add_signal(e, NULL, SIGTERM, on_terminate, userdata);
        if (r >= 0)
                r = sd_event_add_signal(e, NULL, SIGINT, on_terminate, userdata);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(e);
        return 0;
}

int event_loop_on_page(sd_event *e) {
        char here;
        char *pad = alloca(((uintptr_t) &here & 4095U) + 128U);

        __asm__ volatile("" : : "r"(pad) : "memory"); /* kept: the frames below start under it */
        return sd_event_loop(e);
}
