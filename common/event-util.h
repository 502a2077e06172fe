/* The event loop both programs run on: sd-event with SIGCHLD, SIGTERM and SIGINT handled in it. */
#pragma once

#include <systemd/sd-event.h>

/* Blocks SIGCHLD/SIGTERM/SIGINT (sd-event takes them), ignores SIGPIPE (writes fail with EPIPE
 * instead), and hooks SIGTERM and SIGINT to on_terminate (NULL: leave the loop with 0). */
int event_new(sd_event_signal_handler_t on_terminate, void *userdata, sd_event **ret);
