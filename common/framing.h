/* Newline-delimited framing with a hard line limit, independent of any fd, so it can be unit tested. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define FRAMING_DEFAULT_MAX_LINE (16U * 1024U * 1024U)
#define LINE_BUFFER_KEEP         (1U * 1024U * 1024U) /* kept while empty; a larger buffer is freed */

typedef struct LineBuffer {
        char *data;
        size_t start;   /* first byte not yet handed out */
        size_t end;     /* one past the last byte read */
        size_t scanned; /* bytes from start already known to hold no '\n' */
        size_t alloc;
        size_t max_line;
        bool discarding; /* inside an over-long line: drop bytes up to the next '\n' */
} LineBuffer;

enum {
        LINE_NONE = 0,     /* need more input */
        LINE_OK = 1,       /* a complete line, without its "\n" or "\r\n" */
        LINE_OVERSIZE = 2, /* a line passed max_line; reported once, its bytes are dropped */
};

void line_buffer_init(LineBuffer *b, size_t max_line);
void line_buffer_done(LineBuffer *b);
/* Space to read at least 'want' bytes into; commit what was read. */
int line_buffer_reserve(LineBuffer *b, size_t want, char **ret_ptr, size_t *ret_avail);
void line_buffer_commit(LineBuffer *b, size_t n);
/* Returns LINE_NONE, LINE_OK (with ret_line/ret_len valid until the next call) or LINE_OVERSIZE (with
 * ret_line/ret_len the line's first max_line bytes, valid until the next reserve). */
int line_buffer_next(LineBuffer *b, const char **ret_line, size_t *ret_len);
/* Bytes of an unterminated line still held (for reporting a truncated last message at EOF). */
size_t line_buffer_pending(const LineBuffer *b);

bool utf8_is_valid(const char *s, size_t n);
