/* A JSON-RPC line channel over a pair of fds on sd-event: framed reads, queued non-blocking writes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <systemd/sd-event.h>
#include <cjson/cJSON.h>

typedef struct Channel Channel;

/* Past this much unsent output a channel counts as backed up (see channel_backed_up()). */
#define CHANNEL_HIGH_WATER (8U * 1024U * 1024U)

typedef enum ChannelEvent {
        CHANNEL_LINE,        /* line/len set */
        CHANNEL_OVERSIZE,    /* a line passed the limit and was dropped; line/len: its first max_line bytes */
        CHANNEL_EOF,         /* the peer closed its sending side (or reading failed: error < 0) */
        CHANNEL_WRITE_ERROR, /* the peer stopped reading (EPIPE and friends): error < 0 */
        CHANNEL_DRAINED,     /* the queue was past CHANNEL_HIGH_WATER and is now below half of it */
        CHANNEL_CLOSED,      /* after channel_shutdown(): all queued output went out (or cannot); free it now */
} ChannelEvent;

/* A connection's life, in one place for the frontend and the shim:
 *   OPEN         both directions work
 *   HALF_CLOSED  one direction has ended (the peer's EOF, or our channel_close_write()); the other goes on
 *   FLUSHING     channel_shutdown(): nothing more is read or queued; the queue is being written out
 *   CLOSED       the queue is written and our side closed, or the peer cannot read any more; CHANNEL_CLOSED
 *                is (or is about to be) reported
 * Freeing a channel in FLUSHING drops what its peer has not read yet: owners wait for CHANNEL_CLOSED. */
typedef enum ChannelState {
        CHANNEL_STATE_OPEN,
        CHANNEL_STATE_HALF_CLOSED,
        CHANNEL_STATE_FLUSHING,
        CHANNEL_STATE_CLOSED,
} ChannelState;

typedef void (*channel_handler_t)(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata);

/* Takes ownership of both fds (they may be the same socket). out_fd < 0 makes a read-only channel. */
int channel_new(sd_event *e, int in_fd, int out_fd, size_t max_line, channel_handler_t handler, void *userdata,
                Channel **ret);
/* Safe to call from inside the handler: the free is then deferred until the handler returns. */
Channel *channel_free(Channel *c);

/* Queue one message; a '\n' is appended. Never blocks. */
int channel_send(Channel *c, const char *data, size_t len);
/* The same for one message in parts (iov), joined. */
int channel_sendv(Channel *c, const struct iovec *iov, size_t n);
/* The same with iov[borrow] not copied but queued as it is: its bytes must stay unchanged until the
 * channel calls release(owner), once, when it is done with them (written, dropped, or the channel
 * freed). On failure release is not called. borrow >= n: nothing is borrowed (channel_sendv()). */
int channel_sendv_borrow(Channel *c, const struct iovec *iov, size_t n, size_t borrow, void (*release)(void *owner),
                         void *owner);
int channel_send_json(Channel *c, const cJSON *message);
/* After everything queued is written, half-close (sockets) or close (pipes) the sending side. */
void channel_close_write(Channel *c);
/* Ends the connection without losing output: stops reading, writes out what is queued, closes our side,
 * then reports CHANNEL_CLOSED. A peer that reads nothing for stall_usec is given up on (its output
 * dropped). A write error, or a channel whose sending side is already closed, closes it at once. */
void channel_shutdown(Channel *c, uint64_t stall_usec);
ChannelState channel_state(const Channel *c);
/* Stop or resume reading (the queue of a peer that sends but never reads is thereby bounded). Pausing
 * also stops handing out lines already read; resuming hands them out first, without waiting for more
 * bytes from the peer. This and channel_set_backpressure() are the only flow control. */
void channel_set_reading(Channel *c, bool b);
/* On by default, for channels to clients: a peer that sends but never reads stops being read once
 * 8 MiB wait for it. Off for channels whose reading must go on for our own output to drain (a
 * backend's stdout, the frontend's socket to a shim), or they could wait on each other for ever. */
void channel_set_backpressure(Channel *c, bool b);
/* While a burst of lines read from c is handed out, what the handler queued (on any channel) for the
 * first n of them is written once they are handled, the rest when the burst ends (0, the default: all
 * then): the next process starts on the head of the burst while this one handles the rest. */
void channel_set_burst_head(Channel *c, unsigned n);
/* On by default, for channels to clients: a last line without its newline at EOF is still a line (a
 * client that wrote its request and closed). Off for a backend's stdout and the socket to a shim: there
 * it is an answer cut off by a crash, which the crash handling reports better than a parse error. */
void channel_set_last_line(Channel *c, bool b);
size_t channel_queued(const Channel *c);
/* What all of the process's channels hold queued: no group of them holds more. */
size_t channel_queued_total(void);
/* More than CHANNEL_HIGH_WATER queued: whoever feeds this channel should pause until CHANNEL_DRAINED. */
bool channel_backed_up(const Channel *c);
bool channel_write_closed(const Channel *c);
void channel_set_userdata(Channel *c, void *userdata);
/* Bytes ever queued by channel_send(): after a send, the end offset of that message in the stream. */
uint64_t channel_sent_bytes(const Channel *c);
/* Of those, how many the peer can have read: written to the fd, less (for a pipe whose every reader
 * is gone: a backend that died) what still sits unread in it. With a reader left, everything
 * written counts. Once our writing side is closed, the answer is the one from that moment. */
uint64_t channel_delivered_bytes(const Channel *c);
/* Reads and hands out, now, whatever the peer has written (up to EOF or EAGAIN): what a backend wrote
 * before it died is handled before its death. Not from inside this channel's own handler. */
void channel_read_all(Channel *c);
int channel_in_fd(const Channel *c);
/* The channel's socket (one fd for both ways) has a non-blocking connect under way: nothing is read or
 * written until it is writable; then SO_ERROR says how it went, and a failed connect is reported as
 * CHANNEL_WRITE_ERROR with that error (what was sent is dropped). Call right after channel_new(). */
int channel_set_connecting(Channel *c);
/* The connect is still under way, or it failed. */
bool channel_connecting(const Channel *c);
/* Bytes of an unfinished line held now (up to the line limit). */
size_t channel_pending_in(const Channel *c);
/* The size of the channel's own input buffer now (what it holds for its input between reads). */
size_t channel_pending_capacity(const Channel *c);
/* Called after a read that leaves part of a line held; the hook may pause or free the channel. */
typedef void (*channel_read_hook_t)(Channel *c, void *userdata);
void channel_set_read_hook(Channel *c, channel_read_hook_t hook);
