/* A JSON-RPC line channel over a pair of fds on sd-event: framed reads, queued non-blocking writes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <systemd/sd-event.h>
#include <cjson/cJSON.h>

typedef struct Channel Channel;

/* Past this much unsent output a channel counts as backed up (see channel_backed_up()). */
#define CHANNEL_HIGH_WATER (8U * 1024U * 1024U)

typedef enum ChannelEvent {
        CHANNEL_LINE,        /* line/len set */
        CHANNEL_OVERSIZE,    /* a line passed the limit and was dropped */
        CHANNEL_EOF,         /* the peer closed its sending side (or reading failed: error < 0) */
        CHANNEL_WRITE_ERROR, /* the peer stopped reading (EPIPE and friends): error < 0 */
        CHANNEL_DRAINED,     /* the queue was past CHANNEL_HIGH_WATER and is now below half of it */
} ChannelEvent;

typedef void (*channel_handler_t)(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata);

/* Takes ownership of both fds (they may be the same socket). out_fd < 0 makes a read-only channel. */
int channel_new(sd_event *e, int in_fd, int out_fd, size_t max_line, channel_handler_t handler, void *userdata,
                Channel **ret);
/* Safe to call from inside the handler: the free is then deferred until the handler returns. */
Channel *channel_free(Channel *c);

/* Queue one message; a '\n' is appended. Never blocks. */
int channel_send(Channel *c, const char *data, size_t len);
int channel_send_json(Channel *c, const cJSON *message);
/* After everything queued is written, half-close (sockets) or close (pipes) the sending side. */
void channel_close_write(Channel *c);
/* Stop or resume reading (the queue of a peer that sends but never reads is thereby bounded). */
void channel_set_reading(Channel *c, bool b);
/* On by default, for channels to clients: a peer that sends but never reads stops being read once
 * 8 MiB wait for it. Off for channels whose reading must go on for our own output to drain (a
 * backend's stdout, the frontend's socket to a shim), or they could wait on each other for ever. */
void channel_set_backpressure(Channel *c, bool b);
size_t channel_queued(const Channel *c);
/* More than CHANNEL_HIGH_WATER queued: whoever feeds this channel should pause until CHANNEL_DRAINED. */
bool channel_backed_up(const Channel *c);
bool channel_write_closed(const Channel *c);
void channel_set_userdata(Channel *c, void *userdata);
int channel_in_fd(const Channel *c);
