/* The event loop both programs run on: sd-event with SIGCHLD, SIGTERM and SIGINT handled in it. */
#pragma once

#include <systemd/sd-event.h>

/* Blocks SIGCHLD/SIGTERM/SIGINT (sd-event takes them), ignores SIGPIPE (writes fail with EPIPE
 * instead), and hooks SIGTERM and SIGINT to on_terminate (NULL: leave the loop with 0). */
int event_new(sd_event_signal_handler_t on_terminate, void *userdata, sd_event **ret);
/* sd_event_loop(), with what its wakeups touch of the stack (sd_event_loop()'s frame down to the
 * deepest of a message's handling, 2.5-3.5 KiB) starting at the top of a page: one page, where from
 * the kernel's random start it is mostly two, and a process woken cache-cold pays a walk for each. */
int event_loop_on_page(sd_event *e);
