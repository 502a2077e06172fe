/* Newline-delimited framing: splits a byte stream into lines, never holding more than one limit's worth. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "framing.h"

void line_buffer_init(LineBuffer *b, size_t max_line) {
        *b = (LineBuffer){.max_line = max_line ?: FRAMING_DEFAULT_MAX_LINE};
}

void line_buffer_done(LineBuffer *b) {
        free(b->data);
        *b = (LineBuffer){};
}

int line_buffer_reserve(LineBuffer *b, size_t want, char **ret_ptr, size_t *ret_avail) {
        /* Empty after a large line: the room it took goes, or every connection that ever carried one
         * would keep up to twice the line limit for as long as it lives. */
        if (b->start == b->end && b->alloc > LINE_BUFFER_KEEP) {
                free(b->data);
                b->data = NULL;
                b->alloc = b->start = b->end = b->scanned = 0;
        }
        /* Move the unconsumed tail to the front before growing: most reads then need no realloc. */
        if (b->start > 0) {
                if (b->end > b->start) /* usually every line was taken: nothing to move */
                        memmove(b->data, b->data + b->start, b->end - b->start);
                b->end -= b->start;
                b->start = 0;
        }
        if (b->alloc - b->end < want) {
                size_t n = b->end + want;
                char *p;

                if (n < b->alloc * 2)
                        n = b->alloc * 2;
                p = realloc(b->data, n);
                if (!p)
                        return -ENOMEM;
                b->data = p;
                b->alloc = n;
        }
        *ret_ptr = b->data + b->end;
        *ret_avail = b->alloc - b->end;
        return 0;
}

void line_buffer_commit(LineBuffer *b, size_t n) {
        b->end += n;
}

size_t line_buffer_pending(const LineBuffer *b) {
        return b->discarding ? 0 : b->end - b->start;
}

int line_buffer_next(LineBuffer *b, const char **ret_line, size_t *ret_len) {
        /* Nothing read yet, or the room given back (line_buffer_reserve()): no pointer to do sums on
         * (NULL + 0 is undefined; clang's UBSan stops there, at a channel's first read). */
        if (!b->data)
                return LINE_NONE;
        for (;;) {
                char *p = b->data + b->start, *nl;
                size_t avail = b->end - b->start, len;

                nl = avail > b->scanned ? memchr(p + b->scanned, '\n', avail - b->scanned) : NULL;
                if (!nl) {
                        b->scanned = avail;
                        if (b->discarding) {
                                /* Nothing here is wanted: drop it so memory stays bounded. */
                                b->start = b->end = b->scanned = 0;
                                return LINE_NONE;
                        }
                        /* Over the limit as soon as it cannot be a line within it any more; a line of
                         * exactly max_line bytes may have its "\r\n" split between two reads. */
                        if (avail > b->max_line + 1 || (avail == b->max_line + 1 && p[avail - 1] != '\r')) {
                                /* The bytes stay where they are until the next read: the caller may
                                 * look at the line's beginning (for its id) before they go. */
                                *ret_line = p;
                                *ret_len = b->max_line;
                                b->start = b->end = b->scanned = 0;
                                b->discarding = true;
                                return LINE_OVERSIZE;
                        }
                        return LINE_NONE;
                }

                len = (size_t) (nl - p);
                b->start += len + 1;
                b->scanned = 0;
                if (b->discarding) {
                        b->discarding = false;
                        continue;
                }
                if (len > 0 && p[len - 1] == '\r')
                        len--;
                if (len > b->max_line) {
                        *ret_line = p;
                        *ret_len = b->max_line;
                        return LINE_OVERSIZE;
                }
                if (len == 0)
                        continue; /* blank lines carry no message */
                *ret_line = p;
                *ret_len = len;
                return LINE_OK;
        }
}

/* RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF. JSON text must be UTF-8 and
 * cJSON does not check, so we do, once per line. */
bool utf8_is_valid(const char *s, size_t n) {
        const uint8_t *p = (const uint8_t *) s, *e = p + n;

        while (p < e) {
                uint8_t c = *p;
                size_t k;
                uint32_t cp;

                if (c < 0x80) {
                        p++;
                        continue;
                }
                if (c >= 0xC2 && c <= 0xDF)
                        k = 1, cp = c & 0x1F;
                else if (c >= 0xE0 && c <= 0xEF)
                        k = 2, cp = c & 0x0F;
                else if (c >= 0xF0 && c <= 0xF4)
                        k = 3, cp = c & 0x07;
                else
                        return false;
                if ((size_t) (e - p) <= k)
                        return false;
                for (size_t i = 1; i <= k; i++) {
                        if ((p[i] & 0xC0) != 0x80)
                                return false;
                        cp = (cp << 6) | (p[i] & 0x3F);
                }
                if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                    (cp >= 0xD800 && cp <= 0xDFFF))
                        return false;
                p += k + 1;
        }
        return true;
}
