/* Fuzz target: Channel's reading, for real (sockets, sd-event), with the process's one read buffer shared
 * by three channels. Whatever the order of writes, loop turns, pauses and resumes, and whatever a handler
 * does in the middle of a burst (pause its channel, read another one with channel_read_all(), free its
 * own), each channel hands out exactly the lines its stream splits into, whole and in order: a line
 * without its '\r', no blank line, an over-long one once as its first max_line bytes, a last line
 * without '\n' at EOF; a freed channel a prefix of them. Then the EOF, once.
 *
 * Input: byte 0 picks max_line (1..64, or 5000..17700 for lines longer than the tail the shared buffer
 * takes back), then operations, each a byte (its low 3 bits the operation, the next 2 the channel):
 * 0-2 write a length byte's worth (0..63) of the following bytes; 3 a loop turn; 4 pause or resume; 5 at
 * its next line, the handler reads the next channel (channel_read_all()); 6 write a byte repeated
 * (count byte x 64); 7 at its next line, the handler pauses its channel, or (bit 5) frees it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "channel.h"
#include "fuzz.h"

#define N_CH       3
#define MAX_STREAM (1U << 20)

typedef struct Side {
        Channel *ch;
        int peer;
        uint8_t *stream; /* what the peer wrote (the model's input) */
        size_t n_stream;
        uint8_t *got; /* what was handed out, each event as a kind byte, a length and the bytes */
        size_t n_got, cap_got;
        bool paused, eof, freed, in_handler;
        bool read_next, pause_next, free_next;
} Side;

static Side sides[N_CH];
static size_t max_line;

static void got_add(Side *s, uint8_t kind, const char *p, size_t len) {
        size_t need = s->n_got + 1 + sizeof len + len;

        if (need > s->cap_got) {
                s->cap_got = need * 2;
                s->got = realloc(s->got, s->cap_got);
                FUZZ_ASSERT(s->got);
        }
        s->got[s->n_got++] = kind;
        memcpy(s->got + s->n_got, &len, sizeof len);
        s->n_got += sizeof len;
        memcpy(s->got + s->n_got, p, len);
        s->n_got += len;
}

static void handler(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Side *s = userdata;
        size_t k = (size_t) (s - sides);

        FUZZ_ASSERT(!s->freed && !s->eof);
        switch (ev) {
        case CHANNEL_LINE:
        case CHANNEL_OVERSIZE:
                FUZZ_ASSERT(ev == CHANNEL_OVERSIZE ? len == max_line : len > 0 && len <= max_line);
                got_add(s, ev == CHANNEL_LINE ? 'L' : 'O', line, len);
                if (s->read_next) {
                        Side *o = &sides[(k + 1) % N_CH];
                        s->read_next = false;
                        /* Not a channel whose own handler is running (channel_read_all() forbids it). */
                        s->in_handler = true;
                        if (!o->freed && !o->in_handler)
                                channel_read_all(o->ch);
                        s->in_handler = false;
                }
                if (s->pause_next) {
                        s->pause_next = false;
                        s->paused = true;
                        channel_set_reading(c, false);
                }
                if (s->free_next) {
                        s->free_next = false;
                        s->freed = true;
                        s->ch = channel_free(c);
                        return;
                }
                /* A nested read must not have touched the bytes handed out here. */
                FUZZ_ASSERT(memcmp(s->got + s->n_got - len, line, len) == 0);
                break;
        case CHANNEL_EOF:
                FUZZ_ASSERT(error == 0);
                s->eof = true;
                break;
        default:
                break;
        }
}

/* The events the whole stream splits into, in got's form. */
static uint8_t *model(const uint8_t *st, size_t n, size_t *ret_n) {
        uint8_t *out = malloc(n * (1 + sizeof(size_t)) + 64), *o = out;
        size_t start = 0;

        FUZZ_ASSERT(out);
        for (size_t i = 0; i <= n; i++) {
                size_t len;

                /* At EOF an unterminated last line counts as if its '\n' had come. */
                if (i < n ? st[i] != '\n' : start == n)
                        continue;
                len = i - start;
                if (len > 0 && st[i - 1] == '\r')
                        len--;
                if (len > 0) {
                        uint8_t kind = len > max_line ? 'O' : 'L';
                        size_t show = kind == 'O' ? max_line : len;
                        /* An unterminated line is over the limit as soon as it is longer than max_line + 1
                         * (or exactly that without a final '\r'): the same event. */
                        *o++ = kind;
                        memcpy(o, &show, sizeof show);
                        o += sizeof show;
                        memcpy(o, st + start, show);
                        o += show;
                }
                start = i + 1;
        }
        *ret_n = (size_t) (o - out);
        return out;
}

static void peer_write(sd_event *e, Side *s, const uint8_t *p, size_t len) {
        if (s->freed || len == 0)
                return;
        if (len > MAX_STREAM - s->n_stream)
                len = MAX_STREAM - s->n_stream;
        for (size_t done = 0; done < len;) {
                ssize_t k;

                if (s->freed) { /* by a handler, in the loop turn below */
                        len = done;
                        break;
                }
                k = write(s->peer, p + done, len - done);
                if (k < 0) {
                        FUZZ_ASSERT(errno == EAGAIN);
                        if (s->paused)
                                len = done; /* nobody reads it now: the rest is not written */
                        else
                                (void) sd_event_run(e, 0);
                        continue;
                }
                memcpy(s->stream + s->n_stream + done, p + done, (size_t) k);
                done += (size_t) k;
        }
        s->n_stream += len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static uint8_t rep[255 * 64];
        sd_event *e = NULL;
        size_t i = 1;

        if (size < 1 || size > 16384)
                return 0;
        (void) signal(SIGPIPE, SIG_IGN); /* as both programs do: a write to a closed socket fails */
        max_line = data[0] & 0x80 ? 5000 + (size_t) (data[0] & 0x7f) * 100 : 1 + (size_t) data[0] % 64;
        FUZZ_ASSERT(sd_event_new(&e) >= 0);
        for (size_t k = 0; k < N_CH; k++) {
                Side *s = &sides[k];
                int sv[2];

                *s = (Side){};
                FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
                FUZZ_ASSERT(channel_new(e, sv[0], sv[0], max_line, handler, s, &s->ch) == 0);
                s->peer = sv[1];
                s->stream = malloc(MAX_STREAM);
                FUZZ_ASSERT(s->stream);
        }
        while (i < size) {
                uint8_t op = data[i++];
                Side *s = &sides[(op >> 3) % 4 % N_CH];
                size_t len;

                switch (op & 7) {
                case 0:
                case 1:
                case 2:
                        len = i < size ? data[i++] % 64 : 0;
                        if (len > size - i)
                                len = size - i;
                        peer_write(e, s, data + i, len);
                        i += len;
                        break;
                case 3:
                        (void) sd_event_run(e, 0);
                        break;
                case 4:
                        if (!s->freed) {
                                s->paused = !s->paused;
                                channel_set_reading(s->ch, !s->paused);
                        }
                        break;
                case 5:
                        s->read_next = true;
                        break;
                case 6:
                        len = i + 1 < size ? (size_t) data[i] * 64 : 0;
                        if (i + 1 < size)
                                memset(rep, data[i + 1], len);
                        i += 2;
                        peer_write(e, s, rep, len);
                        break;
                case 7:
                        if (op & 0x20)
                                s->free_next = true;
                        else
                                s->pause_next = true;
                        break;
                }
        }

        /* The end: everything resumes, every peer closes, each channel reads to its EOF. */
        for (size_t k = 0; k < N_CH; k++) {
                Side *s = &sides[k];
                s->read_next = s->pause_next = s->free_next = false;
                if (!s->freed)
                        channel_set_reading(s->ch, true);
                s->paused = false;
                FUZZ_ASSERT(shutdown(s->peer, SHUT_WR) == 0);
        }
        for (int turn = 0; turn < 100000; turn++) {
                bool all = true;
                for (size_t k = 0; k < N_CH; k++)
                        all = all && (sides[k].freed || sides[k].eof);
                if (all)
                        break;
                (void) sd_event_run(e, 0);
        }
        for (size_t k = 0; k < N_CH; k++) {
                Side *s = &sides[k];
                size_t n_want;
                uint8_t *want = model(s->stream, s->n_stream, &n_want);

                if (s->freed)
                        FUZZ_ASSERT(s->n_got <= n_want && (s->n_got == 0 || memcmp(s->got, want, s->n_got) == 0));
                else {
                        FUZZ_ASSERT(s->eof);
                        FUZZ_ASSERT(s->n_got == n_want && (n_want == 0 || memcmp(s->got, want, n_want) == 0));
                        FUZZ_ASSERT(channel_pending_in(s->ch) == 0);
                }
                free(want);
                channel_free(s->ch);
                close(s->peer);
                free(s->stream);
                free(s->got);
        }
        sd_event_unref(e);
        return 0;
}
