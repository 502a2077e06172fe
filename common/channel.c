/* Line channel: reads lines off one fd and writes queued lines to another, both non-blocking. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "channel.h"
#include "framing.h"
#include "macros.h"
#include "prefetch.h"
#if HAVE_ASAN
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(addr, size)   ((void) (addr), (void) (size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void) (addr), (void) (size))
#endif

#define READ_CHUNK     (64U * 1024U)
#define OUT_HIGH_WATER CHANNEL_HIGH_WATER

/* Every channel of the process reads into this one buffer and hands its lines out from there: a wakeup
 * touches it where another channel's last wakeup did (a channel's buffer of its own was a page of its own,
 * and with it a page walk, on every wakeup of a process woken cache-cold after a slow backend), and an
 * idle channel holds no read buffer. What must outlive the wakeup moves to the channel's own LineBuffer
 * (read_view_keep()): the unfinished line's bytes, and lines not handed out because reading was paused. A
 * tail of up to READ_SHARED_TAIL bytes goes back to the front of this buffer at the next read; a longer
 * line under way is read on in the channel's own buffer, as it grows. Linked right after the hot statics
 * (the Makefile's hot-path.ld): a message of up to 1.9 KiB (the shim) or 2.3 KiB (the frontend) lands on
 * their page, which every wakeup touches anyway (.bss goes after the buffer: what a wakeup reads of it is
 * linked before the hot statics, _warm_). A handler that reads another channel while lines are handed out
 * from here (channel_read_all()) reads that one into its own buffer (read_buf_busy). Under
 * AddressSanitizer the buffer is poisoned outside a read and its handing out: a pointer kept into a line
 * past its handler is reported. */
#define READ_SHARED_TAIL (4U * 1024U)
/* Twice a read's worth, as a channel's own buffer became once it held a tail: a full pipe or socket is
 * then read whole, not in two reads in one wakeup (the shim then handles more at once, and at 100
 * sessions with 64 calls in flight each its pool of routes overflows: +75 instructions a call). Zeros
 * that take no room in the file: .bss by its name, and only .bss after it. */
static char read_buf[2 * READ_CHUNK] __attribute__((section(".bss.mcp_lazy_read"), aligned(64)));
static _hot_ bool read_buf_busy;

/* Small messages share a chunk: one allocation and one iovec for a burst of them. */
#define OUT_CHUNK_SIZE (16U * 1024U)

typedef struct OutChunk {
        struct OutChunk *next;
        size_t len, done, size;
        const char *ref;              /* a part the caller lent (channel_sendv_borrow()): its bytes, not data */
        void (*release)(void *owner); /* what gives it back, once written or dropped */
        void *owner;
        char data[];
} OutChunk;

/* Laid out by 64-byte cache line (channel_new() aligns it to one): a wakeup that reads this channel
 * touches the first two lines, one that writes to it (a message the peer takes at once) the third alone,
 * and the rest only where a connection starts, stalls or ends. A process woken after a slow backend finds
 * these lines cold. */
struct Channel {
        /* Reading: */
        LineBuffer lines;
        int in_fd;
        unsigned dispatching;
        /* Reading, and what a write asks of the reading (channel_update_reading()): */
        channel_handler_t handler;
        void *userdata;
        channel_read_hook_t read_hook;
        sd_event_source *in_source;
        size_t out_bytes;
        unsigned burst_head; /* 0, or: what the first so many lines of a burst read here queue goes out at once */
        bool reading_wanted, eof_seen;
        bool shutting_down, closed; /* FLUSHING, CLOSED (see ChannelState) */
        bool reading_on;            /* what channel_update_reading() last decided */
        bool backpressure;          /* stop reading while our own output is backed up */
        bool connecting;            /* the socket's connect is under way (or failed): no reads, no writes */
        bool free_pending;
        /* in_source is on, out_source may be on: what was last asked of them, so that a flush skips the
         * calls that would change nothing (two per flush, into libsystemd, on the warm path). */
        bool in_source_on, out_source_on;
        bool in_pollable, out_pollable; /* regular files cannot be polled: plain read/write them */
        /* Writing (out_bytes above is 0 whenever out_head is NULL: a send written at once reads only this
         * line): */
        OutChunk *out_head __attribute__((aligned(64))), *out_tail;
        uint64_t sent_total, written_total;
        Channel *batch_next;
        sd_event_source *out_source;
        int out_fd;
        bool batched; /* output queued during a burst, written when the burst ends (see batch_end()) */
        bool close_write_pending, write_closed;
        bool was_backed_up;  /* went past the high-water mark: report CHANNEL_DRAINED when below half */
        bool out_connecting; /* connecting, as the writing side asks it (set and cleared with it) */
        /* The rest: */
        sd_event *event;
        sd_event_source *file_source, *error_source;
        sd_event_source *dispatch_source; /* hands out lines already read when reading resumes */
        sd_event_source *closed_source;   /* reports CHANNEL_CLOSED */
        sd_event_source *stall_source;    /* FLUSHING: gives up on a peer that reads nothing */
        uint64_t stall_usec;
        uint64_t unread_at_close;
        int write_error;
        bool same_fd;
        bool out_is_socket; /* half-close with shutdown(), which a dup'ed fd also reaches */
        bool out_is_pipe;   /* what the reader has not read yet can be asked (FIONREAD) */
        bool no_last_line;  /* drop a last line without its newline at EOF */
};

/* Written chunks of the usual size are kept for the next burst, a few for the whole process: a
 * burst of answers then costs no malloc() of 16 KiB (which also makes glibc sort its small free
 * chunks every time), and an idle connection holds none. One event loop per process: statics. */
#define CHUNK_CACHE 4U
static OutChunk *chunk_cache[CHUNK_CACHE]; /* read only where a chunk is taken or given back */
static _hot_ unsigned n_chunk_cache;

static OutChunk *chunk_new(size_t size) {
        OutChunk *o = size == OUT_CHUNK_SIZE && n_chunk_cache > 0 ? chunk_cache[--n_chunk_cache]
                                                                  : malloc(sizeof *o + size);

        if (o) {
                ASAN_UNPOISON_MEMORY_REGION(o, sizeof *o + size);
                *o = (OutChunk){.size = size};
        }
        return o;
}

/* Under AddressSanitizer a cached chunk is poisoned until it is taken again: a use after it was given
 * back is reported, instead of reading or writing the next user's bytes (the cache itself stays on:
 * channel_write_now() needs a cached chunk). */
static void chunk_free(OutChunk *o) {
        if (o && o->release)
                o->release(o->owner);
        if (o && o->size == OUT_CHUNK_SIZE && n_chunk_cache < CHUNK_CACHE) {
                chunk_cache[n_chunk_cache++] = o;
                ASAN_POISON_MEMORY_REGION(o, sizeof *o + OUT_CHUNK_SIZE);
        } else
                free(o);
}

/* Every channel's out_bytes summed, changed where they change (sendv, flush, drop): a bound for what
 * any group of channels holds, asked before walking them. */
static _hot_ size_t queued_total;

static void channel_update_reading(Channel *c);
static void channel_mark_closed(Channel *c);
static void channel_flush(Channel *c);

/* While lines are handed out, what the handlers send is queued and written when the burst of lines
 * ends, one writev() per channel per burst instead of one write() per line (each of which wakes the
 * reader). Outside a burst a send is written at once. One event loop per process: a static. */
static _hot_ unsigned batch_depth;
static _hot_ Channel *batch_head;
/* The channel whose lines the outermost burst hands out, when no read follows in it (else NULL). While
 * it hands out its last line (nothing else buffered: burst_ending()), what that line's handler sends
 * would be written alone when the burst ends, right after the handler returns: it is written at once
 * instead, from the sender's own bytes (channel_write_now()). Asked only by a send, never per line. */
static _hot_ Channel *batch_final;

static inline bool burst_ending(void) {
        return batch_depth == 1 && batch_final && batch_final->lines.start == batch_final->lines.end;
}

static void batch_begin(void) {
        batch_depth++;
}

static void batch_forget(Channel *c) {
        if (!c->batched)
                return;
        for (Channel **p = &batch_head; *p; p = &(*p)->batch_next)
                if (*p == c) {
                        *p = c->batch_next;
                        break;
                }
        c->batched = false;
}

/* A flush calls no handler (errors are reported from a defer source): the list holds still. */
static void batch_flush(void) {
        while (batch_head) {
                Channel *c = batch_head;
                batch_head = c->batch_next;
                c->batched = false;
                channel_flush(c);
        }
}

static void batch_end(void) {
        if (--batch_depth > 0)
                return;
        batch_flush();
}

static int fd_make_nonblocking(int fd, bool *ret_pollable) {
        struct stat st;
        int flags;

        if (fstat(fd, &st) < 0)
                return -errno;
        *ret_pollable = !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
        if (!*ret_pollable)
                return 0;
        flags = fcntl(fd, F_GETFL);
        if (flags < 0)
                return -errno;
        if (!(flags & O_NONBLOCK) && fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        return 0;
}

static void channel_drop_output(Channel *c) {
        while (c->out_head) {
                OutChunk *n = c->out_head->next;
                chunk_free(c->out_head);
                c->out_head = n;
        }
        c->out_tail = NULL;
        queued_total -= c->out_bytes;
        c->out_bytes = 0;
}

/* For a pipe whose reader is gone, what it never read. While any reader is left (a live process may
 * still read it), nothing counts as unread. */
static uint64_t pipe_unread(const Channel *c) {
        struct pollfd p = {.fd = c->out_fd, .events = POLLOUT};
        int n = 0;

        if (!c->out_is_pipe || c->out_fd < 0)
                return 0;
        /* The write end of a pipe polls POLLERR once no reader is left. */
        if (poll(&p, 1, 0) < 0 || !(p.revents & POLLERR))
                return 0;
        if (ioctl(c->out_fd, FIONREAD, &n) < 0 || n < 0)
                return 0;
        return (uint64_t) n;
}

static void channel_really_free(Channel *c) {
        /* Output a burst queued goes out as it would have at once, as far as the peer takes it now. */
        if (c->batched) {
                batch_forget(c);
                if (c->out_fd >= 0 && !c->write_closed)
                        channel_flush(c);
        }
        sd_event_source_disable_unref(c->dispatch_source);
        sd_event_source_disable_unref(c->closed_source);
        sd_event_source_disable_unref(c->stall_source);
        sd_event_source_disable_unref(c->in_source);
        sd_event_source_disable_unref(c->out_source);
        sd_event_source_disable_unref(c->file_source);
        sd_event_source_disable_unref(c->error_source);
        channel_drop_output(c);
        if (c->lines.data != read_buf) /* never: a read gives its view back before anything frees it */
                line_buffer_done(&c->lines);
        if (!c->same_fd)
                safe_close(c->out_fd);
        safe_close(c->in_fd);
        sd_event_unref(c->event);
        free(c);
}

Channel *channel_free(Channel *c) {
        if (!c)
                return NULL;
        if (c->dispatching > 0) {
                c->free_pending = true;
                c->handler = NULL;
                sd_event_source_set_enabled(c->in_source, SD_EVENT_OFF);
                c->in_source_on = false;
                sd_event_source_set_enabled(c->out_source, SD_EVENT_OFF);
                sd_event_source_set_enabled(c->file_source, SD_EVENT_OFF);
                sd_event_source_set_enabled(c->error_source, SD_EVENT_OFF);
                sd_event_source_set_enabled(c->dispatch_source, SD_EVENT_OFF);
                sd_event_source_set_enabled(c->closed_source, SD_EVENT_OFF);
                sd_event_source_set_enabled(c->stall_source, SD_EVENT_OFF);
                return NULL;
        }
        channel_really_free(c);
        return NULL;
}

/* Calls the handler; returns false when the channel was freed meanwhile and must not be touched. */
static bool channel_emit(Channel *c, ChannelEvent ev, const char *line, size_t len, int error) {
        c->dispatching++;
        if (c->handler)
                c->handler(c, ev, line, len, error, c->userdata);
        c->dispatching--;
        if (c->free_pending) {
                if (c->dispatching == 0)
                        channel_really_free(c);
                return false;
        }
        return true;
}

static int on_write_error(sd_event_source *s, void *userdata) {
        Channel *c = userdata;

        (void) s;
        c->error_source = sd_event_source_disable_unref(c->error_source);
        (void) channel_emit(c, CHANNEL_WRITE_ERROR, NULL, 0, c->write_error);
        return 0;
}

/* Reported from a defer source, never from inside channel_send(): the caller of a send must not
 * find its own objects freed under it by the error handler. */
static void channel_error_write(Channel *c, int r) {
        /* Drop what can no longer be delivered, and tell the owner once. */
        channel_drop_output(c);
        c->unread_at_close = pipe_unread(c);
        c->close_write_pending = false;
        c->write_closed = true;
        sd_event_source_set_enabled(c->out_source, SD_EVENT_OFF);
        channel_update_reading(c);
        c->write_error = r;
        if (c->shutting_down) {
                /* Nobody reads what is left: done. */
                channel_mark_closed(c);
                return;
        }
        if (sd_event_add_defer(c->event, &c->error_source, on_write_error, c) >= 0)
                (void) sd_event_source_set_enabled(c->error_source, SD_EVENT_ONESHOT);
}

static void channel_finish_close_write(Channel *c) {
        c->close_write_pending = false;
        c->write_closed = true;
        c->out_source = sd_event_source_disable_unref(c->out_source);
        c->unread_at_close = pipe_unread(c);
        if (c->out_is_socket)
                (void) shutdown(c->out_fd, SHUT_WR);
        if (!c->same_fd)
                c->out_fd = safe_close(c->out_fd);
        if (c->shutting_down)
                channel_mark_closed(c);
}

static void channel_flush(Channel *c) {
        if (c->out_connecting)
                return; /* on_out writes once the connect is done */
        while (c->out_head) {
                struct iovec iov[16];
                int n = 0;
                ssize_t k;

                for (OutChunk *o = c->out_head; o && n < (int) ELEMENTSOF(iov); o = o->next, n++)
                        iov[n] = (struct iovec){(char *) (o->ref ?: o->data) + o->done, o->len - o->done};
                k = writev(c->out_fd, iov, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        channel_error_write(c, -errno);
                        return;
                }
                c->out_bytes -= (size_t) k;
                queued_total -= (size_t) k;
                c->written_total += (uint64_t) k;
                /* A flushing peer that reads is waited for, however slowly it reads. */
                if (c->shutting_down && c->stall_source)
                        (void) sd_event_source_set_time_relative(c->stall_source, c->stall_usec);
                while (k > 0) {
                        OutChunk *o = c->out_head;
                        size_t left = o->len - o->done;

                        if ((size_t) k < left) {
                                o->done += (size_t) k;
                                break;
                        }
                        k -= (ssize_t) left;
                        c->out_head = o->next;
                        chunk_free(o);
                }
                if (!c->out_head)
                        c->out_tail = NULL;
        }
        if (c->out_pollable && c->out_source && (c->out_head || c->out_source_on)) {
                sd_event_source_set_enabled(c->out_source, c->out_head ? SD_EVENT_ON : SD_EVENT_OFF);
                c->out_source_on = c->out_head;
        }
        if (!c->out_head && c->close_write_pending)
                channel_finish_close_write(c);
        channel_update_reading(c);
}

static int on_out(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Channel *c = userdata;

        (void) s, (void) fd, (void) revents;
        if (c->connecting) {
                int error = 0;
                socklen_t len = sizeof error;

                if (getsockopt(c->out_fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
                        error = errno;
                if (error != 0) {
                        /* Reading stays off: the failed connect is reported once, as a write error. */
                        channel_error_write(c, -error);
                        return 0;
                }
                c->connecting = c->out_connecting = false;
        }
        c->dispatching++;
        channel_flush(c);
        c->dispatching--;
        if (c->free_pending && c->dispatching == 0) {
                channel_really_free(c);
                return 0;
        }
        if (c->was_backed_up && c->out_bytes < OUT_HIGH_WATER / 2) {
                c->was_backed_up = false;
                (void) channel_emit(c, CHANNEL_DRAINED, NULL, 0, 0);
        }
        return 0;
}

/* Whether lines may be read and handed out now: the one flow-control decision. */
static bool channel_may_read(const Channel *c) {
        return c->reading_wanted && !c->shutting_down && !c->closed && !c->connecting &&
               (!c->backpressure || c->out_bytes < OUT_HIGH_WATER);
}

/* A channel's own buffer while its lines are read into read_buf. */
typedef struct ReadView {
        char *own;
        size_t own_alloc;
} ReadView;

/* Hand every complete line to the handler, until reading is paused. final: no read follows in this
 * batch, so the line that empties the buffer ends the burst (burst_ending()). */
static bool channel_dispatch_lines(Channel *c, bool final) {
        Channel *outer = batch_final; /* a handler may read another channel (channel_read_all()) */
        unsigned n = 0;

        batch_final = final && batch_depth == 1 ? c : NULL;
        while (channel_may_read(c)) {
                const char *line;
                size_t len;
                int k = line_buffer_next(&c->lines, &line, &len);

                if (k == LINE_NONE)
                        break;
                if (!channel_emit(c, k == LINE_OK ? CHANNEL_LINE : CHANNEL_OVERSIZE, line, len, 0)) {
                        batch_final = outer;
                        return false;
                }
                /* The head of a long burst goes out now: the next process starts on it while the rest
                 * is handled (else a window of calls travels as one convoy, one process at a time). */
                if (c->burst_head > 0 && ++n == c->burst_head && batch_depth == 1)
                        batch_flush();
        }
        batch_final = outer;
        return true;
}

/* The channel's lines are read into read_buf and handed out from there: what it held (a tail of at most
 * READ_SHARED_TAIL) moves to the buffer's front. False: the channel reads into its own buffer this time. */
static bool read_view_begin(Channel *c, ReadView *v) {
        LineBuffer *b = &c->lines;
        size_t held = b->end - b->start;

        if (read_buf_busy || held > READ_SHARED_TAIL)
                return false;
        ASAN_UNPOISON_MEMORY_REGION(read_buf, sizeof read_buf);
        read_buf_busy = true;
        if (held > 0)
                memcpy(read_buf, b->data + b->start, held);
        *v = (ReadView){.own = b->data, .own_alloc = b->alloc};
        b->data = read_buf;
        b->alloc = sizeof read_buf;
        b->start = 0;
        b->end = held;
        return true;
}

/* The channel's own buffer back in place, holding held bytes at its front; read_buf free again. */
static inline void read_view_close(LineBuffer *b, ReadView v, size_t held) {
        b->data = v.own;
        b->alloc = v.own_alloc;
        b->start = 0;
        b->end = held;
        read_buf_busy = false;
        ASAN_POISON_MEMORY_REGION(read_buf, sizeof read_buf);
}

/* What the channel still holds of read_buf (an unfinished line, lines a pause held back) moves to its
 * own buffer; a channel being freed keeps nothing. -ENOMEM: there was no room for it, and it is lost. */
static __attribute__((cold, noinline)) int read_view_keep(Channel *c, ReadView v) {
        LineBuffer *b = &c->lines;
        size_t held = c->free_pending ? 0 : b->end - b->start;
        int r = 0;

        if (held > v.own_alloc) {
                size_t n = held > READ_SHARED_TAIL ? held : READ_SHARED_TAIL;
                char *p = malloc(n);

                if (p) {
                        free(v.own);
                        v = (ReadView){p, n};
                } else {
                        r = -ENOMEM;
                        held = 0;
                }
        } else if (held == 0 && v.own_alloc > READ_CHUNK) {
                /* The room a long line took goes with it (what lines a pause held took stays: a channel
                 * paused and resumed in turn would take and give it back every time). */
                free(v.own);
                v = (ReadView){};
        } else if (held <= READ_SHARED_TAIL && v.own_alloc > READ_CHUNK) {
                /* So does it when a short unfinished line follows: what a peer's unfinished input is
                 * weighed by (channel_pending_in()) is then what the channel holds. Out of memory, the
                 * room stays. */
                char *p = malloc(READ_SHARED_TAIL);

                if (p) {
                        free(v.own);
                        v = (ReadView){p, READ_SHARED_TAIL};
                }
        }
        if (held > 0)
                memcpy(v.own, read_buf + b->start, held);
        else
                b->scanned = 0;
        read_view_close(b, v, held);
        return r;
}

/* The end of a read into read_buf: usually every line was handed out, and the channel keeps nothing. */
static inline int read_view_end(Channel *c, ReadView v) {
        LineBuffer *b = &c->lines;

        if (b->start != b->end || v.own_alloc > READ_CHUNK)
                return read_view_keep(c, v);
        read_view_close(b, v, 0);
        return 0;
}

/* Where a read lands: read_buf (then *shared is set, and read_view_end() must follow), or the channel's
 * own buffer. */
static int read_room(Channel *c, ReadView *v, bool *shared, char **ret_p, size_t *ret_avail) {
        *shared = read_view_begin(c, v);
        if (!*shared)
                return line_buffer_reserve(&c->lines, READ_CHUNK, ret_p, ret_avail);
        *ret_p = read_buf + c->lines.end;
        *ret_avail = sizeof read_buf - c->lines.end;
        return 0;
}

static void channel_read_failed(Channel *c, int error) {
        c->eof_seen = true;
        channel_update_reading(c);
        (void) channel_emit(c, CHANNEL_EOF, NULL, 0, error);
}

static void channel_read(Channel *c, int max_rounds) {
        /* Lines held back by a pause go first. */
        if (!channel_dispatch_lines(c, false))
                return;
        /* Read from inside its own handler (which channel_read_all() forbids) while its lines are handed
         * out from read_buf: the outer read goes on with them. */
        if (c->lines.data == read_buf)
                return;
        for (int rounds = 0; rounds < max_rounds && !c->eof_seen && channel_may_read(c); rounds++) {
                ReadView v;
                char *p;
                size_t avail;
                ssize_t n;
                bool last, shared, more;
                int r = read_room(c, &v, &shared, &p, &avail);

                if (r < 0)
                        return channel_read_failed(c, r);
                n = read(c->in_fd, p, avail);
                if (n < 0) {
                        r = -errno;
                        if (shared)
                                (void) read_view_keep(c, v); /* it held no more than before */
                        if (r == -EINTR)
                                continue;
                        if (r == -EAGAIN)
                                return;
                        /* ECONNRESET and friends: as good as EOF, but say why. */
                        return channel_read_failed(c, r);
                }
                if (n == 0 && !c->no_last_line && line_buffer_pending(&c->lines) > 0) {
                        /* A last line without its newline is still a line: it goes before the EOF
                         * (the next read, which finds nothing pending). */
                        *p = '\n';
                        n = 1;
                } else if (n == 0) {
                        if (shared)
                                (void) read_view_keep(c, v);
                        return channel_read_failed(c, 0);
                }
                line_buffer_commit(&c->lines, (size_t) n);
                /* A short read emptied the pipe: no read follows (below). */
                last = (size_t) n < avail && c->in_pollable && max_rounds <= 16;
                more = channel_dispatch_lines(c, last);
                r = shared ? read_view_end(c, v) : 0;
                if (!more)
                        return;
                if (r < 0)
                        return channel_read_failed(c, r);
                if (c->read_hook && line_buffer_pending(&c->lines) > 0) {
                        c->dispatching++;
                        c->read_hook(c, c->userdata);
                        c->dispatching--;
                        if (c->free_pending) /* on_in() frees it */
                                return;
                }
                /* A short read emptied the pipe: epoll says when there is more, which saves the
                 * read that would only answer EAGAIN, on every message. */
                if (last)
                        return;
        }
}

/* What a read here touches first (see prefetch.h): this channel's reading lines, its owner's first line,
 * where the read lands: the front of read_buf, what usually holds no tail, its lines not read yet. */
static inline void channel_prefetch(const Channel *c) {
        prefetchw_lines(c, offsetof(Channel, out_head));
        __builtin_prefetch(c->userdata, 0, 3);
        prefetchw_lines(read_buf, 2 * PREFETCH_LINE);
}

static int on_in(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Channel *c = userdata;

        (void) s, (void) fd, (void) revents;
        channel_prefetch(c);
        prefetch_wakeup();
        c->dispatching++;
        batch_begin();
        channel_read(c, 16);
        c->dispatching--;
        if (c->free_pending && c->dispatching == 0)
                channel_really_free(c);
        batch_end();
        return 0;
}

void channel_read_all(Channel *c) {
        c->dispatching++;
        batch_begin();
        /* 128 MiB at most: a backend's child that still writes cannot keep us here. */
        channel_read(c, 1024);
        c->dispatching--;
        if (c->free_pending && c->dispatching == 0)
                channel_really_free(c);
        batch_end();
}

static int on_dispatch(sd_event_source *s, uint64_t usec, void *userdata) {
        Channel *c = userdata;

        (void) s, (void) usec;
        c->dispatching++;
        batch_begin();
        (void) channel_dispatch_lines(c, true);
        c->dispatching--;
        if (c->free_pending && c->dispatching == 0)
                channel_really_free(c);
        batch_end();
        return 0;
}

static int on_closed(sd_event_source *s, void *userdata) {
        (void) s;
        (void) channel_emit(userdata, CHANNEL_CLOSED, NULL, 0, 0);
        return 0;
}

static void channel_mark_closed(Channel *c) {
        if (c->closed)
                return;
        c->closed = true;
        c->stall_source = sd_event_source_disable_unref(c->stall_source);
        channel_update_reading(c);
        /* Reported from the loop, never from inside the call that closed it. */
        if (sd_event_add_defer(c->event, &c->closed_source, on_closed, c) >= 0)
                (void) sd_event_source_set_enabled(c->closed_source, SD_EVENT_ONESHOT);
}

static int on_stall(sd_event_source *s, uint64_t usec, void *userdata) {
        Channel *c = userdata;

        (void) s, (void) usec;
        /* The peer has read nothing for stall_usec: what is left will not be read. */
        channel_drop_output(c);
        sd_event_source_set_enabled(c->out_source, SD_EVENT_OFF);
        c->write_closed = true;
        c->close_write_pending = false;
        channel_mark_closed(c);
        return 0;
}

void channel_shutdown(Channel *c, uint64_t stall_usec) {
        if (c->shutting_down || c->closed)
                return;
        c->shutting_down = true;
        c->stall_usec = stall_usec;
        channel_update_reading(c);
        if (c->write_closed || c->out_fd < 0) {
                channel_mark_closed(c);
                return;
        }
        if (!c->out_head) {
                channel_finish_close_write(c);
                return;
        }
        c->close_write_pending = true;
        /* Without a timer the flush would be bounded by the peer alone: then it is not waited for. */
        if (sd_event_add_time_relative(c->event, &c->stall_source, CLOCK_MONOTONIC, stall_usec, 0, on_stall, c) < 0)
                (void) on_stall(NULL, 0, c);
}

ChannelState channel_state(const Channel *c) {
        if (c->closed)
                return CHANNEL_STATE_CLOSED;
        if (c->shutting_down)
                return CHANNEL_STATE_FLUSHING;
        if (c->eof_seen || c->write_closed || c->close_write_pending)
                return CHANNEL_STATE_HALF_CLOSED;
        return CHANNEL_STATE_OPEN;
}

static int on_file(sd_event_source *s, void *userdata) {
        return on_in(s, -1, 0, userdata);
}

static void channel_update_reading(Channel *c) {
        bool on = channel_may_read(c) && !c->eof_seen;

        /* Resuming: lines already read go out now, not when the peer happens to send more. */
        if (channel_may_read(c) && !c->reading_on && c->lines.end > c->lines.start && c->dispatch_source)
                (void) sd_event_source_set_enabled(c->dispatch_source, SD_EVENT_ONESHOT);
        c->reading_on = channel_may_read(c);
        if (c->in_source && on != c->in_source_on) {
                sd_event_source_set_enabled(c->in_source, on ? SD_EVENT_ON : SD_EVENT_OFF);
                c->in_source_on = on;
        }
        if (c->file_source)
                sd_event_source_set_enabled(c->file_source, on ? SD_EVENT_ON : SD_EVENT_OFF);
}

int channel_new(sd_event *e, int in_fd, int out_fd, size_t max_line, channel_handler_t handler, void *userdata,
                Channel **ret) {
        Channel *c;
        int r;

        c = calloc_lines(sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event = sd_event_ref(e);
        c->in_fd = in_fd;
        c->out_fd = out_fd;
        c->same_fd = in_fd == out_fd;
        c->handler = handler;
        c->userdata = userdata;
        c->reading_wanted = true;
        c->backpressure = true;
        c->reading_on = true;
        line_buffer_init(&c->lines, max_line);

        r = fd_make_nonblocking(in_fd, &c->in_pollable);
        if (r >= 0 && out_fd >= 0 && !c->same_fd)
                r = fd_make_nonblocking(out_fd, &c->out_pollable);
        else
                c->out_pollable = c->in_pollable;
        if (r < 0)
                goto fail;

        /* A timer that is always due (time 0), not a defer source: libsystemd keeps a defer source
         * pending for good, off or on, in the queue that each wakeup's io event is put into and taken out
         * of; every channel's would be compared with there, its lines read, on every wakeup of the
         * process (100 sessions: some 20 sources per wakeup). An off timer is not looked at. */
        r = sd_event_add_time(e, &c->dispatch_source, CLOCK_MONOTONIC, 0, 1, on_dispatch, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->dispatch_source, SD_EVENT_OFF);
        if (r < 0)
                goto fail;
        if (out_fd >= 0) {
                struct stat st;
                c->out_is_pipe = fstat(out_fd, &st) >= 0 && S_ISFIFO(st.st_mode);
        }

        /* epoll refuses what never blocks (regular files, /dev/null): those are read and written plainly. */
        if (c->in_pollable) {
                r = sd_event_add_io(e, &c->in_source, in_fd, EPOLLIN, on_in, c);
                c->in_source_on = r >= 0; /* a new source is on */
                if (r == -EPERM)
                        c->in_pollable = false;
                else if (r < 0)
                        goto fail;
        }
        if (!c->in_pollable) {
                r = sd_event_add_defer(e, &c->file_source, on_file, c);
                if (r >= 0)
                        r = sd_event_source_set_enabled(c->file_source, SD_EVENT_ON);
                if (r < 0)
                        goto fail;
        }
        if (out_fd >= 0 && c->out_pollable) {
                /* When in and out are one socket, epoll wants a second fd for a second source. */
                int ofd = out_fd;
                if (c->same_fd) {
                        ofd = fcntl(out_fd, F_DUPFD_CLOEXEC, 3);
                        if (ofd < 0) {
                                r = -errno;
                                goto fail;
                        }
                        c->out_fd = ofd;
                        c->same_fd = false;
                        c->out_is_socket = true;
                }
                r = sd_event_add_io(e, &c->out_source, ofd, EPOLLOUT, on_out, c);
                if (r == -EPERM) {
                        c->out_pollable = false;
                        r = 0;
                } else if (r >= 0)
                        r = sd_event_source_set_enabled(c->out_source, SD_EVENT_OFF);
        }
        if (r < 0)
                goto fail;
        *ret = c;
        return 0;
fail:
        channel_really_free(c);
        return r;
}

int channel_set_connecting(Channel *c) {
        if (!c->out_source)
                return -EINVAL;
        c->connecting = c->out_connecting = true;
        channel_update_reading(c);
        c->out_source_on = true;
        return sd_event_source_set_enabled(c->out_source, SD_EVENT_ON);
}

bool channel_connecting(const Channel *c) {
        return c->connecting;
}

int channel_send(Channel *c, const char *data, size_t len) {
        return channel_sendv(c, &(const struct iovec){(void *) data, len}, 1);
}

/* What every send does once its bytes are queued (len of them, the newline included). */
static inline int out_queued(Channel *c, size_t len, bool was_empty) {
        c->out_bytes += len;
        queued_total += len;
        c->sent_total += len;
        if (c->out_bytes > OUT_HIGH_WATER)
                c->was_backed_up = true;

        /* Inside a burst of lines: written when it ends (batch_end()). Else right away: a reply
         * usually fits the pipe, and that saves a trip through epoll. */
        if (was_empty && batch_depth > 0 && !burst_ending()) {
                if (!c->batched) {
                        c->batched = true;
                        c->batch_next = batch_head;
                        batch_head = c;
                }
        } else if (was_empty) {
                channel_flush(c);
                return 0;
        }
        /* What a send can change of the reading: past the high-water mark, a channel with
         * backpressure stops reading (the flush resumes it). Below it, nothing to do, on every send. */
        if (c->out_bytes > OUT_HIGH_WATER)
                channel_update_reading(c);
        return 0;
}

static void out_link(Channel *c, OutChunk *o) {
        if (c->out_tail)
                c->out_tail->next = o;
        else
                c->out_head = o;
        c->out_tail = o;
}

static void out_copy(OutChunk *o, const struct iovec *iov, size_t n) {
        for (size_t i = 0; i < n; i++) {
                memcpy(o->data + o->len, iov[i].iov_base, iov[i].iov_len);
                o->len += iov[i].iov_len;
        }
}

/* Most parts a message is sent in (ids_translate_send(): the text around two ids) that are written
 * from the sender's bytes; a message in more is copied. */
#define WRITE_NOW_PARTS 8U

/* A message to a channel with nothing queued, outside a burst or at its end: written at once from the
 * caller's bytes, and only what the peer did not take is copied, into a cached chunk (there is one,
 * and the message fits it: no allocation can fail between writing part of it and keeping the rest, so
 * it still goes in whole or not at all). A request or an answer then touches no chunk (16 KiB, with
 * its own lines and page) on its way, in a process that wakes up cache-cold after a slow backend. */
static bool may_write_now(const Channel *c, size_t n, size_t len) {
        return n <= WRITE_NOW_PARTS && len < OUT_CHUNK_SIZE && n_chunk_cache > 0 && !c->out_connecting &&
               (batch_depth == 0 || burst_ending());
}

static int channel_write_now(Channel *c, const struct iovec *iov, size_t n, size_t len) {
        struct iovec v[WRITE_NOW_PARTS + 1];
        size_t done;
        ssize_t k;
        OutChunk *o;

        memcpy(v, iov, n * sizeof *iov);
        v[n] = (struct iovec){(char *) "\n", 1};
        do
                k = writev(c->out_fd, v, n + 1);
        while (k < 0 && errno == EINTR);
        c->sent_total += len + 1;
        if (k < 0 && errno != EAGAIN) {
                channel_error_write(c, -errno); /* reported from the loop, as a queued send's */
                return 0;
        }
        done = k < 0 ? 0 : (size_t) k;
        c->written_total += done;
        if (done == len + 1)
                return 0;
        /* The rest waits for the peer to read, as queued output does. */
        o = chunk_new(OUT_CHUNK_SIZE); /* from the cache (may_write_now()): never NULL */
        if (!o) {
                channel_error_write(c, -ENOMEM);
                return 0;
        }
        for (size_t i = 0; i <= n; i++) {
                if (done >= v[i].iov_len) {
                        done -= v[i].iov_len;
                        continue;
                }
                memcpy(o->data + o->len, (const char *) v[i].iov_base + done, v[i].iov_len - done);
                o->len += v[i].iov_len - done;
                done = 0;
        }
        out_link(c, o);
        c->out_bytes += o->len;
        queued_total += o->len;
        channel_flush(c);
        return 0;
}

int channel_sendv(Channel *c, const struct iovec *iov, size_t n) {
        OutChunk *o = c->out_tail;
        bool was_empty = !c->out_head;
        size_t len = 0;

        if (c->write_closed || c->close_write_pending)
                return -EPIPE;
        for (size_t i = 0; i < n; i++)
                len += iov[i].iov_len;
        if (was_empty && may_write_now(c, n, len))
                return channel_write_now(c, iov, n, len);
        if (!o || o->ref || o->size - o->len < len + 1) {
                size_t size = len + 1 > OUT_CHUNK_SIZE ? len + 1 : OUT_CHUNK_SIZE;
                o = chunk_new(size);
                if (!o)
                        return -ENOMEM;
                out_link(c, o);
        }
        out_copy(o, iov, n);
        o->data[o->len++] = '\n';
        return out_queued(c, len + 1, was_empty);
}

int channel_sendv_borrow(Channel *c, const struct iovec *iov, size_t n, size_t borrow, void (*release)(void *owner),
                         void *owner) {
        OutChunk *o = c->out_tail, *fresh = NULL, *lent, *after;
        bool was_empty = !c->out_head;
        size_t len = 0, before = 0, rest;

        if (borrow >= n)
                return channel_sendv(c, iov, n);
        if (c->write_closed || c->close_write_pending)
                return -EPIPE;
        for (size_t i = 0; i < n; i++) {
                len += iov[i].iov_len;
                before += i < borrow ? iov[i].iov_len : 0;
        }
        rest = len - before - iov[borrow].iov_len + 1;
        /* Everything is taken before anything is queued: a message goes in whole or not at all. */
        if (!o || o->ref || o->size - o->len < before)
                o = fresh = chunk_new(before > OUT_CHUNK_SIZE ? before : OUT_CHUNK_SIZE);
        lent = malloc(sizeof *lent);
        after = chunk_new(rest > OUT_CHUNK_SIZE ? rest : OUT_CHUNK_SIZE);
        if (!o || !lent || !after) {
                chunk_free(fresh);
                free(lent);
                chunk_free(after);
                return -ENOMEM;
        }
        if (fresh)
                out_link(c, fresh);
        out_copy(o, iov, borrow);
        *lent = (OutChunk){.len = iov[borrow].iov_len, .ref = iov[borrow].iov_base, .release = release, .owner = owner};
        out_link(c, lent);
        out_link(c, after);
        out_copy(after, iov + borrow + 1, n - borrow - 1);
        after->data[after->len++] = '\n';
        return out_queued(c, len + 1, was_empty);
}

int channel_send_json(Channel *c, const cJSON *message) {
        _cleanup_free_ char *s = cJSON_PrintUnformatted(message);

        if (!s)
                return -ENOMEM;
        return channel_send(c, s, strlen(s));
}

void channel_close_write(Channel *c) {
        if (c->write_closed)
                return;
        c->close_write_pending = true;
        if (!c->out_head)
                channel_finish_close_write(c);
}

void channel_set_reading(Channel *c, bool b) {
        c->reading_wanted = b;
        channel_update_reading(c);
}

void channel_set_backpressure(Channel *c, bool b) {
        c->backpressure = b;
        channel_update_reading(c);
}

void channel_set_burst_head(Channel *c, unsigned n) {
        c->burst_head = n;
}

void channel_set_last_line(Channel *c, bool b) {
        c->no_last_line = !b;
}

/* Asked after each send: out_head first, on the line a send written at once touches anyway. */
bool channel_backed_up(const Channel *c) {
        return c->out_head && c->out_bytes > OUT_HIGH_WATER;
}

size_t channel_queued(const Channel *c) {
        return c->out_head ? c->out_bytes : 0;
}

size_t channel_queued_total(void) {
        return queued_total;
}

bool channel_write_closed(const Channel *c) {
        return c->write_closed;
}

void channel_set_userdata(Channel *c, void *userdata) {
        c->userdata = userdata;
}

int channel_in_fd(const Channel *c) {
        return c->in_fd;
}

uint64_t channel_sent_bytes(const Channel *c) {
        return c->sent_total;
}

uint64_t channel_delivered_bytes(const Channel *c) {
        uint64_t unread = c->write_closed ? c->unread_at_close : pipe_unread(c);

        return unread > c->written_total ? 0 : c->written_total - unread;
}

size_t channel_pending_in(const Channel *c) {
        return line_buffer_pending(&c->lines);
}

size_t channel_pending_capacity(const Channel *c) {
        return c->lines.alloc;
}

void channel_set_read_hook(Channel *c, channel_read_hook_t hook) {
        c->read_hook = hook;
}
