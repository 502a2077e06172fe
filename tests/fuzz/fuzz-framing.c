/* Fuzz target: LineBuffer, fed a stream in arbitrary chunks, must split it exactly as the whole stream
 * splits (lines without '\n', none past max_line, each over-long line reported once), in bounded memory.
 *
 * Input: byte 0 picks max_line (1..64), byte 1 the reserve size (1..32), then chunks, each a length
 * byte (0..47) and that many bytes of stream. */
#include <stdbool.h>
#include <string.h>

#include "framing.h"
#include "fuzz.h"

typedef struct Event {
        int kind; /* LINE_OK or LINE_OVERSIZE */
        size_t off, len;
} Event;

/* RFC 3629, written independently of utf8_is_valid() to check it. */
static bool utf8_reference(const uint8_t *s, size_t n) {
        size_t i = 0;

        while (i < n) {
                uint32_t c = s[i], cp, min;
                size_t need;

                if (c < 0x80) {
                        i++;
                        continue;
                }
                if ((c & 0xE0) == 0xC0)
                        need = 1, cp = c & 0x1F, min = 0x80;
                else if ((c & 0xF0) == 0xE0)
                        need = 2, cp = c & 0x0F, min = 0x800;
                else if ((c & 0xF8) == 0xF0)
                        need = 3, cp = c & 0x07, min = 0x10000;
                else
                        return false;
                if (n - i - 1 < need)
                        return false;
                for (size_t k = 1; k <= need; k++) {
                        if ((s[i + k] & 0xC0) != 0x80)
                                return false;
                        cp = (cp << 6) | (s[i + k] & 0x3F);
                }
                if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                        return false;
                i += need + 1;
        }
        return true;
}

/* What the whole stream must split into: the model the chunked feed is held to. */
static size_t expected_events(const uint8_t *s, size_t n, size_t max_line, Event *ev, size_t *ret_pending) {
        size_t k = 0, start = 0;

        for (size_t i = 0; i < n; i++) {
                size_t len;

                if (s[i] != '\n')
                        continue;
                len = i - start;
                if (len > 0 && s[i - 1] == '\r')
                        len--;
                if (len > max_line)
                        ev[k++] = (Event){LINE_OVERSIZE, start, len};
                else if (len > 0)
                        ev[k++] = (Event){LINE_OK, start, len};
                start = i + 1;
        }
        /* An unterminated tail is reported as soon as it cannot be a line within the limit: longer
         * than the limit, but for a "\r" that may yet be followed by its "\n". */
        if (n - start > max_line + 1 || (n - start == max_line + 1 && s[n - 1] != '\r')) {
                ev[k++] = (Event){LINE_OVERSIZE, start, n - start};
                *ret_pending = 0;
        } else
                *ret_pending = n - start;
        return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        LineBuffer b;
        uint8_t *stream;
        Event *ev;
        size_t max_line, want, n_stream = 0, n_ev, k = 0, pending, i;

        if (size < 2 || size > 65536)
                return 0;
        max_line = 1 + data[0] % 64;
        want = 1 + data[1] % 32;

        /* Gather the stream first, for the model. */
        stream = malloc(size);
        FUZZ_ASSERT(stream);
        for (i = 2; i < size;) {
                size_t len = data[i++] % 48;
                if (len > size - i)
                        len = size - i;
                memcpy(stream + n_stream, data + i, len);
                n_stream += len;
                i += len;
        }
        ev = calloc(n_stream + 1, sizeof *ev);
        FUZZ_ASSERT(ev);
        n_ev = expected_events(stream, n_stream, max_line, ev, &pending);
        FUZZ_ASSERT(utf8_is_valid((const char *) stream, n_stream) == utf8_reference(stream, n_stream));

        line_buffer_init(&b, max_line);
        for (i = 2; i < size;) {
                size_t len = data[i++] % 48;
                if (len > size - i)
                        len = size - i;
                do {
                        const char *line;
                        size_t n, line_len;
                        char *p;
                        int r;

                        FUZZ_ASSERT(line_buffer_reserve(&b, want, &p, &n) == 0);
                        FUZZ_ASSERT(n >= want);
                        if (n > len)
                                n = len;
                        memcpy(p, data + i, n);
                        line_buffer_commit(&b, n);
                        i += n;
                        len -= n;

                        while ((r = line_buffer_next(&b, &line, &line_len)) != LINE_NONE) {
                                FUZZ_ASSERT(k < n_ev);
                                FUZZ_ASSERT(r == ev[k].kind);
                                if (r == LINE_OK) {
                                        FUZZ_ASSERT(line_len > 0 && line_len <= max_line);
                                        FUZZ_ASSERT(line >= b.data && line + line_len <= b.data + b.end);
                                        FUZZ_ASSERT(!memchr(line, '\n', line_len));
                                        FUZZ_ASSERT(line_len == ev[k].len);
                                        FUZZ_ASSERT(memcmp(line, stream + ev[k].off, line_len) == 0);
                                        FUZZ_ASSERT(utf8_is_valid(line, line_len) ==
                                                    utf8_reference((const uint8_t *) line, line_len));
                                } else {
                                        /* An over-long line shows its first max_line bytes (for its id). */
                                        FUZZ_ASSERT(line_len == max_line);
                                        FUZZ_ASSERT(memcmp(line, stream + ev[k].off, line_len) == 0);
                                }
                                k++;
                        }
                        /* Drained: at most one line's worth held, and the buffer no bigger than that allows. */
                        FUZZ_ASSERT(line_buffer_pending(&b) <= max_line + 1); /* + a "\r" awaiting its "\n" */
                        FUZZ_ASSERT(b.alloc <= 2 * (max_line + want));
                } while (len > 0);
        }
        FUZZ_ASSERT(k == n_ev);
        FUZZ_ASSERT(line_buffer_pending(&b) == pending);

        line_buffer_done(&b);
        free(ev);
        free(stream);
        return 0;
}
