/* Peer text made safe for a terminal: what a hostile remote or config could otherwise send to it
 * (ESC sequences that move the cursor, rewrite the title, write the clipboard) becomes '?'. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "printable.h"

/* The length of the UTF-8 character at s (of n bytes left) if it is valid and printable, else 0. */
static size_t char_len(const unsigned char *s, size_t n) {
        unsigned cp;
        size_t len;

        if (s[0] < 0x20 || s[0] == 0x7f)
                return 0;
        if (s[0] < 0x80)
                return 1;
        if ((s[0] & 0xe0) == 0xc0)
                len = 2, cp = s[0] & 0x1f;
        else if ((s[0] & 0xf0) == 0xe0)
                len = 3, cp = s[0] & 0x0f;
        else if ((s[0] & 0xf8) == 0xf0)
                len = 4, cp = s[0] & 0x07;
        else
                return 0;
        if (len > n)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        /* Overlong forms, surrogates, past U+10FFFF, and the C1 controls (0x9b is CSI on some terminals). */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f))
                return 0;
        return len;
}

char *text_printable(const char *s, size_t max) {
        return text_printable_n(s, strlen(s), max);
}

char *text_printable_n(const char *s, size_t n, size_t max) {
        const unsigned char *p = (const unsigned char *) s;
        size_t i = 0, o = 0;
        bool cut = false;
        char *out = malloc((n < max ? n : max) + 4);

        if (!out)
                return NULL;
        while (i < n) {
                size_t k = char_len(p + i, n - i);
                size_t w = k ? k : 1;
                if (o + w > max) {
                        cut = true;
                        break;
                }
                if (k)
                        memcpy(out + o, p + i, k);
                else
                        out[o] = '?';
                o += w;
                i += w;
        }
        if (cut) {
                memcpy(out + o, "...", 3);
                o += 3;
        }
        out[o] = 0;
        return out;
}

int text_is_printable(const char *s, size_t max) {
        const unsigned char *p = (const unsigned char *) s;
        size_t n = strlen(s);

        if (n > max)
                return 0;
        for (size_t i = 0; i < n;) {
                size_t k = char_len(p + i, n - i);
                if (!k)
                        return 0;
                i += k;
        }
        return 1;
}

void text_tail_append(char *tail, size_t *len, size_t cap, const char *buf, size_t n) {
        if (n >= cap) {
                memcpy(tail, buf + n - cap, cap);
                *len = cap;
                return;
        }
        if (*len + n > cap) {
                size_t drop = *len + n - cap;
                memmove(tail, tail + drop, *len - drop);
                *len -= drop;
        }
        memcpy(tail + *len, buf, n);
        *len += n;
}
