/* The message layer: a peer's line parsed once and validated (strict JSON, no duplicate keys, typed
 * envelope), with the byte spans of its id-carrying fields, so that what goes on is the peer's own bytes
 * with only our ids spliced in. One scan checks it all (grammar, UTF-8, nesting, duplicate keys at any
 * depth) and takes the envelope; cJSON builds a tree of the values only for whoever reads past the
 * envelope (message_json()). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "era.h"
#include "framing.h"
#include "macros.h"
#include "message.h"

/* A key as the next hop reads it: decoded (escapes), and cut at a decoded NUL as a C string is (and
 * as cJSON's key is). Points into the text when it has no escape. */
typedef struct Key {
        const char *p;
        size_t len;
        char *owned;
} Key;

#define KEYS_PAIRWISE 16U /* objects up to this many keys compare them pairwise; larger ones sort */
#define KEYS_INLINE   32U /* keys held without an allocation by message_parse_envelope() */

/* The top-level object's members the envelope is made of. */
typedef enum EnvelopeMember {
        MEMBER_JSONRPC,
        MEMBER_ID,
        MEMBER_METHOD,
        MEMBER_PARAMS,
        MEMBER_RESULT,
        MEMBER_ERROR,
        _MEMBER_MAX,
} EnvelopeMember;

static const char *const member_names[_MEMBER_MAX] = {
        [MEMBER_JSONRPC] = "jsonrpc", [MEMBER_ID] = "id",         [MEMBER_METHOD] = "method",
        [MEMBER_PARAMS] = "params",   [MEMBER_RESULT] = "result", [MEMBER_ERROR] = "error",
};

/* The paths the scan notes: the id fields (ids.c), then what routing reads (RoutePath). */
#define SCAN_PATHS (_ID_PATH_MAX + _ROUTE_PATH_MAX)
_Static_assert(SCAN_PATHS <= 32, "a scan notes at most 32 paths");

static const char *const route_paths[_ROUTE_PATH_MAX][ID_PATH_DEPTH + 1] = {
        [ROUTE_PATH_PARAMS_NAME] = {"params", "name"},
        [ROUTE_PATH_META_VERSION] = {"params", "_meta", META_PROTOCOL_VERSION},
        [ROUTE_PATH_META_CAPABILITIES] = {"params", "_meta", META_CLIENT_CAPABILITIES},
        [ROUTE_PATH_META_CLIENT_INFO] = {"params", "_meta", META_CLIENT_INFO},
        [ROUTE_PATH_META_LOG_LEVEL] = {"params", "_meta", META_LOG_LEVEL},
        [ROUTE_PATH_RESULT] = {"result"},
        [ROUTE_PATH_RESULT_TYPE] = {"result", "resultType"},
        [ROUTE_PATH_ERROR] = {"error"},
};

static const char *scan_path_key(unsigned p, unsigned level) {
        return p < _ID_PATH_MAX ? id_paths[p][level] : route_paths[p - _ID_PATH_MAX][level];
}

/* The paths by level, for one look-up per key on every message's path: each distinct key at a level
 * with the paths it is a step of, and which of those paths end there. Made once from the two tables. */
typedef struct PathKey {
        const char *key;
        size_t len;
        uint32_t paths;
} PathKey;

static struct {
        bool made;
        PathKey keys[ID_PATH_DEPTH][SCAN_PATHS];
        size_t n_keys[ID_PATH_DEPTH];
        uint32_t ends[ID_PATH_DEPTH]; /* the paths whose last key is at this level */
} path_index;

static void path_index_make(void) {
        for (unsigned p = 0; p < SCAN_PATHS; p++)
                for (unsigned l = 0; l < ID_PATH_DEPTH && scan_path_key(p, l); l++) {
                        const char *key = scan_path_key(p, l);
                        size_t i = 0, *n = &path_index.n_keys[l];

                        while (i < *n && !streq(path_index.keys[l][i].key, key))
                                i++;
                        if (i == *n)
                                path_index.keys[l][(*n)++] = (PathKey){key, strlen(key), 0};
                        path_index.keys[l][i].paths |= 1U << p;
                        if (!scan_path_key(p, l + 1))
                                path_index.ends[l] |= 1U << p;
                }
        path_index.made = true;
}

/* The lengths of member_names. */
static const uint8_t member_lens[_MEMBER_MAX] = {
        [MEMBER_JSONRPC] = 7, [MEMBER_ID] = 2,     [MEMBER_METHOD] = 6,
        [MEMBER_PARAMS] = 6,  [MEMBER_RESULT] = 6, [MEMBER_ERROR] = 5,
};

typedef struct Scanner {
        const char *s;
        size_t pos, len;
        unsigned depth, max_depth;
        Span *spans;        /* NULL: record nothing */
        bool want_elements; /* a batch: note the spans of the top-level array's elements */
        Span *elements;
        size_t n_elements, max_elements;
        /* The keys of the objects being scanned, innermost last: duplicates are found as they come.
         * keys_inline: the caller's room for the first KEYS_INLINE (uninitialized), or NULL. */
        Key *keys, *keys_inline;
        size_t n_keys, max_keys;
        bool has_dup;
        char dup[65];    /* the first duplicate key found (has_dup), cut to 64 bytes */
        bool dup_id;     /* the top-level object has "id" twice */
        bool top_object; /* the text is an object */
        Span members[_MEMBER_MAX];
        bool has_member[_MEMBER_MAX];
        bool method_escaped;
        bool nul_key; /* a key decodes to text with a NUL in it */
} Scanner;

static void scanner_done(Scanner *sc) {
        for (size_t i = 0; i < sc->n_keys; i++)
                free(sc->keys[i].owned);
        if (sc->keys != sc->keys_inline)
                free(sc->keys);
        sc->keys = NULL;
        sc->n_keys = sc->max_keys = 0;
}

static bool is_ws(char c) {
        return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline void skip_ws(Scanner *sc) {
        /* White space and the bytes JSON refuses outside strings are all <= ' ': one compare for the
         * usual byte, which is neither. */
        while (sc->pos < sc->len && (unsigned char) sc->s[sc->pos] <= ' ' && is_ws(sc->s[sc->pos]))
                sc->pos++;
}

static int hexval(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* Inside a string: 1 ends the plain run ('"', '\\', control characters, which JSON wants escaped),
 * 2 starts a UTF-8 sequence to check. */
static const uint8_t string_byte[256] = {
        [0x00 ... 0x1f] = 1,
        ['"'] = 1,
        ['\\'] = 1,
        [0x80 ... 0xff] = 2,
};

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Past the plain bytes of a string from p (none of '"', '\\', a control character or a byte >= 0x80),
 * eight at a time where there are eight: a byte is found by the usual tests on words, exact for each
 * byte (no borrow crosses a byte of a word whose high bits are all clear). */
static inline size_t plain_run(const uint8_t *s, size_t p, size_t n) {
        while (n - p >= 8) {
                uint64_t w, quote, slash;
                memcpy(&w, s + p, 8);
                quote = w ^ (ONES * '"');
                slash = w ^ (ONES * '\\');
                /* A byte below 0x20, or 0 after an XOR; the high bit of w itself for >= 0x80. */
                if (((w - ONES * 0x20) | (quote - ONES) | (slash - ONES) | w) & HIGHS)
                        break;
                p += 8;
        }
        while (p < n && !string_byte[s[p]])
                p++;
        return p;
}

/* The length of the valid UTF-8 sequence at p (not ASCII), or 0 (overlong, surrogate, past U+10FFFF,
 * cut off): the same rules as utf8_is_valid(). */
static size_t utf8_sequence(const uint8_t *p, size_t n) {
        size_t k;
        uint32_t cp;

        if (p[0] >= 0xC2 && p[0] <= 0xDF)
                k = 1, cp = p[0] & 0x1F;
        else if (p[0] >= 0xE0 && p[0] <= 0xEF)
                k = 2, cp = p[0] & 0x0F;
        else if (p[0] >= 0xF0 && p[0] <= 0xF4)
                k = 3, cp = p[0] & 0x07;
        else
                return 0;
        if (n <= k)
                return 0;
        for (size_t i = 1; i <= k; i++) {
                if ((p[i] & 0xC0) != 0x80)
                        return 0;
                cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
                return 0;
        return k + 1;
}

static int hex4(const uint8_t *p) {
        int v = 0;
        for (int k = 0; k < 4; k++) {
                int h = hexval((char) p[k]);
                if (h < 0)
                        return -1;
                v = v * 16 + h;
        }
        return v;
}

/* A string token; on success ret_start and ret_end bound its contents (without the quotes), and
 * ret_escaped says whether they hold an escape. Plain runs are skipped through a table: this loop is
 * where a large payload's bytes go by. A \u escape of half a surrogate pair must come with its other
 * half, as cJSON and every other decoder of UTF-16 escapes want. */
static int scan_string(Scanner *sc, size_t *ret_start, size_t *ret_end, bool *ret_escaped) {
        const uint8_t *s = (const uint8_t *) sc->s;
        size_t p = sc->pos, n = sc->len, start;
        bool escaped = false;

        if (p >= n || s[p] != '"')
                return -EBADMSG;
        start = ++p;
        for (;;) {
                p = plain_run(s, p, n);
                if (p >= n)
                        return -EBADMSG;
                if (s[p] == '"')
                        break;
                if (s[p] < 0x20)
                        return -EBADMSG; /* JSON wants control characters escaped; NUL among them */
                if (s[p] == '\\') {
                        escaped = true;
                        if (++p >= n)
                                return -EBADMSG;
                        if (s[p] == 'u') {
                                int v;
                                if (p + 4 >= n || (v = hex4(s + p + 1)) < 0 || (v >= 0xDC00 && v <= 0xDFFF))
                                        return -EBADMSG;
                                p += 5;
                                if (v >= 0xD800 && v <= 0xDBFF) {
                                        int w;
                                        if (p + 5 >= n || s[p] != '\\' || s[p + 1] != 'u' || (w = hex4(s + p + 2)) < 0 ||
                                            w < 0xDC00 || w > 0xDFFF)
                                                return -EBADMSG;
                                        p += 6;
                                }
                        } else if (s[p] != 0 && strchr("\"\\/bfnrt", s[p]))
                                p++;
                        else
                                return -EBADMSG;
                        continue;
                }
                size_t k = utf8_sequence(s + p, n - p);
                if (k == 0)
                        return -EBADMSG;
                p += k;
        }
        *ret_start = start;
        *ret_end = p;
        *ret_escaped = escaped;
        sc->pos = p + 1;
        return 0;
}

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static int scan_number(Scanner *sc) {
        const char *s = sc->s;
        size_t p = sc->pos, n = sc->len;

        if (p < n && s[p] == '-')
                p++;
        if (p >= n || !is_digit(s[p]))
                return -EBADMSG;
        if (s[p] == '0')
                p++;
        else
                while (p < n && is_digit(s[p]))
                        p++;
        if (p < n && s[p] == '.') {
                if (++p >= n || !is_digit(s[p]))
                        return -EBADMSG;
                while (p < n && is_digit(s[p]))
                        p++;
        }
        if (p < n && (s[p] == 'e' || s[p] == 'E')) {
                p++;
                if (p < n && (s[p] == '+' || s[p] == '-'))
                        p++;
                if (p >= n || !is_digit(s[p]))
                        return -EBADMSG;
                while (p < n && is_digit(s[p]))
                        p++;
        }
        sc->pos = p;
        return 0;
}

static int scan_literal(Scanner *sc, const char *word) {
        size_t l = strlen(word);
        if (sc->len - sc->pos < l || memcmp(sc->s + sc->pos, word, l) != 0)
                return -EBADMSG;
        sc->pos += l;
        return 0;
}

static size_t utf8_put(char *out, uint32_t cp) {
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xC0 | (cp >> 6));
                out[1] = (char) (0x80 | (cp & 0x3F));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char) (0xE0 | (cp >> 12));
                out[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
                out[2] = (char) (0x80 | (cp & 0x3F));
                return 3;
        }
        out[0] = (char) (0xF0 | (cp >> 18));
        out[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char) (0x80 | (cp & 0x3F));
        return 4;
}

/* The contents s[a..b) of a string the scan took, decoded into out (room for b - a + 1 bytes) and
 * NUL-terminated; returns the decoded length (a decoded NUL included: compare with strlen()). */
static size_t string_decode(const char *s, size_t a, size_t b, char *out) {
        size_t i = a, o = 0;

        while (i < b) {
                if (s[i] != '\\') {
                        out[o++] = s[i++];
                        continue;
                }
                char e = s[i + 1];
                if (e == 'u') {
                        uint32_t cp = (uint32_t) hex4((const uint8_t *) s + i + 2);
                        i += 6;
                        if (cp >= 0xD800 && cp <= 0xDBFF) { /* the scan checked its low half follows */
                                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t) hex4((const uint8_t *) s + i + 2) - 0xDC00);
                                i += 6;
                        }
                        o += utf8_put(out + o, cp);
                } else {
                        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
                        out[o++] = to[strchr(from, e) - from];
                        i += 2;
                }
        }
        out[o] = 0;
        return o;
}

/* Whether the raw key s[a..b) decodes to name (ASCII): escapes decoded as JSON says. */
static bool key_equals(const char *s, size_t a, size_t b, const char *name) {
        size_t i = a;

        for (; *name; name++) {
                unsigned c;
                if (i >= b)
                        return false;
                if (s[i] != '\\')
                        c = (unsigned char) s[i++];
                else {
                        char e = s[i + 1];
                        if (e == 'u') {
                                c = 0;
                                for (int k = 2; k < 6; k++)
                                        c = c * 16 + (unsigned) hexval(s[i + k]);
                                i += 6;
                        } else {
                                static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
                                c = (unsigned char) to[strchr(from, e) - from];
                                i += 2;
                        }
                }
                if (c != (unsigned char) *name)
                        return false;
        }
        return i == b;
}

/* Whether the string value at span (quotes included) decodes to exactly name. */
static bool string_is(const char *s, Span span, const char *name) {
        char buf[16];
        size_t l = strlen(name);

        if (span.len < 2 || span.len - 2 >= sizeof buf)
                return false;
        return string_decode(s, span.start + 1, span.start + span.len - 1, buf) == l && memcmp(buf, name, l) == 0;
}

static int key_make(Scanner *sc, size_t a, size_t b, bool escaped, Key *ret) {
        if (!escaped) {
                *ret = (Key){sc->s + a, b - a, NULL};
                return 0;
        }
        char *d = malloc(b - a + 1);
        size_t n;
        if (!d)
                return -ENOMEM;
        n = string_decode(sc->s, a, b, d);
        /* Cut at a NUL, as cJSON cuts it; the next hop may read the whole key (classify() refuses it). */
        sc->nul_key = sc->nul_key || n != strlen(d);
        *ret = (Key){d, strlen(d), d};
        return 0;
}

static bool key_is(const Key *k, const char *name) {
        /* A key holds no NUL (decoded ones are cut there): strncmp() stops at name's end. */
        return k->len > 0 && k->p[0] == name[0] && strncmp(name, k->p, k->len) == 0 && name[k->len] == 0;
}

static inline bool key_is_len(const Key *k, const char *name, size_t len) {
        /* The first byte settles most comparisons without a call. */
        return k->len == len && (len == 0 || (k->p[0] == name[0] && memcmp(k->p, name, len) == 0));
}

static int key_compare(const Key *x, const Key *y) {
        int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
        return c ? c : x->len < y->len ? -1 : x->len > y->len;
}

static int key_compare_qsort(const void *a, const void *b) {
        return key_compare(a, b);
}

static void note_duplicate(Scanner *sc, const Key *k, bool top) {
        if (top && key_is(k, "id"))
                sc->dup_id = true;
        if (!sc->has_dup)
                snprintf(sc->dup, sizeof sc->dup, "%.*s", (int) (k->len < 64 ? k->len : 64), k->p);
        sc->has_dup = true;
}

/* A key of the object whose keys start at base: duplicates of the first few are found at once. */
static int keys_push(Scanner *sc, size_t base, const Key *k, bool top) {
        if (sc->n_keys == sc->max_keys) {
                size_t n = sc->max_keys ? sc->max_keys * 2 : KEYS_INLINE;
                Key *nk;
                if (sc->keys == sc->keys_inline || !sc->keys) {
                        nk = malloc(n * sizeof *nk);
                        if (nk && sc->n_keys)
                                memcpy(nk, sc->keys, sc->n_keys * sizeof *nk);
                } else
                        nk = reallocarray(sc->keys, n, sizeof *nk);
                if (!nk)
                        return -ENOMEM;
                sc->keys = nk;
                sc->max_keys = n;
        }
        if (sc->n_keys - base < KEYS_PAIRWISE)
                for (size_t i = base; i < sc->n_keys; i++)
                        if (key_is_len(&sc->keys[i], k->p, k->len)) {
                                note_duplicate(sc, k, top);
                                break;
                        }
        sc->keys[sc->n_keys++] = *k;
        return 0;
}

/* The object's keys are all there: a large one is checked sorted; then they go. */
static int keys_pop(Scanner *sc, size_t base, bool top) {
        size_t n = sc->n_keys - base;

        if (n > KEYS_PAIRWISE) {
                _cleanup_free_ Key *sorted = malloc(n * sizeof *sorted);
                if (!sorted)
                        return -ENOMEM;
                memcpy(sorted, sc->keys + base, n * sizeof *sorted);
                qsort(sorted, n, sizeof *sorted, key_compare_qsort);
                for (size_t i = 1; i < n; i++)
                        if (key_compare(&sorted[i - 1], &sorted[i]) == 0) {
                                note_duplicate(sc, &sorted[i], top);
                                break;
                        }
        }
        for (size_t i = base; i < sc->n_keys; i++)
                if (sc->keys[i].owned)
                        free(sc->keys[i].owned);
        sc->n_keys = base;
        return 0;
}

/* mask: the id paths whose first 'level' keys lead here. */
static int scan_value(Scanner *sc, unsigned level, uint32_t mask, bool top);

/* At a container's opening bracket: steps in; 1 if it closes at once. */
static int scan_open(Scanner *sc, char close) {
        if (++sc->depth > sc->max_depth)
                return -E2BIG;
        sc->pos++;
        skip_ws(sc);
        if (sc->pos < sc->len && sc->s[sc->pos] == close) {
                sc->pos++;
                sc->depth--;
                return 1;
        }
        return 0;
}

/* After a member or an element: 1 past the closing bracket, 0 past a comma (another follows). */
static int scan_next(Scanner *sc, char close) {
        skip_ws(sc);
        if (sc->pos >= sc->len)
                return -EBADMSG;
        if (sc->s[sc->pos] == close) {
                sc->pos++;
                sc->depth--;
                return 1;
        }
        if (sc->s[sc->pos] != ',')
                return -EBADMSG;
        sc->pos++;
        return 0;
}

static int scan_object(Scanner *sc, unsigned level, uint32_t mask) {
        size_t base = sc->n_keys;
        bool top = sc->depth == 0;
        int r = scan_open(sc, '}');

        sc->top_object = sc->top_object || (top && r >= 0);
        while (r == 0) {
                size_t ka, kb;
                bool escaped;
                uint32_t sub = 0;
                int member = -1;
                Key k;

                skip_ws(sc);
                r = scan_string(sc, &ka, &kb, &escaped);
                if (r < 0)
                        return r;
                r = key_make(sc, ka, kb, escaped, &k);
                if (r < 0)
                        return r;
                r = keys_push(sc, base, &k, top);
                if (r < 0) {
                        free(k.owned);
                        return r;
                }
                for (size_t i = 0; mask && i < path_index.n_keys[level]; i++) {
                        const PathKey *pk = &path_index.keys[level][i];
                        if ((pk->paths & mask) && key_is_len(&k, pk->key, pk->len)) {
                                sub = pk->paths & mask;
                                break;
                        }
                }
                for (unsigned mb = 0; top && mb < _MEMBER_MAX && member < 0; mb++)
                        if (key_is_len(&k, member_names[mb], member_lens[mb]))
                                member = (int) mb;
                skip_ws(sc);
                if (sc->pos >= sc->len || sc->s[sc->pos] != ':')
                        return -EBADMSG;
                sc->pos++;
                skip_ws(sc);
                size_t vstart = sc->pos;
                uint32_t ends = sub ? sub & path_index.ends[level] : 0;
                r = scan_value(sc, level + 1, sub & ~ends, false);
                if (r < 0)
                        return r;
                for (uint32_t e = sc->spans ? ends : 0; e; e &= e - 1)
                        sc->spans[__builtin_ctz(e)] = (Span){vstart, sc->pos - vstart};
                if (member >= 0 && !sc->has_member[member]) {
                        sc->has_member[member] = true;
                        sc->members[member] = (Span){vstart, sc->pos - vstart};
                }
                r = scan_next(sc, '}');
        }
        if (r < 0)
                return r;
        return keys_pop(sc, base, top);
}

static int scan_array(Scanner *sc, bool top) {
        int r = scan_open(sc, ']');

        while (r == 0) {
                skip_ws(sc);
                size_t start = sc->pos;
                r = scan_value(sc, 0, 0, false);
                if (r < 0)
                        return r;
                if (top && sc->want_elements) {
                        if (sc->n_elements >= sc->max_elements) {
                                size_t n = sc->max_elements ? sc->max_elements * 2 : 16;
                                Span *e = reallocarray(sc->elements, n, sizeof(Span));
                                if (!e)
                                        return -ENOMEM;
                                sc->elements = e;
                                sc->max_elements = n;
                        }
                        sc->elements[sc->n_elements++] = (Span){start, sc->pos - start};
                }
                r = scan_next(sc, ']');
        }
        return r < 0 ? r : 0;
}

static int scan_value(Scanner *sc, unsigned level, uint32_t mask, bool top) {
        skip_ws(sc);
        if (sc->pos >= sc->len)
                return -EBADMSG;
        switch (sc->s[sc->pos]) {
        case '{':
                return scan_object(sc, level, mask);
        case '[':
                return scan_array(sc, top);
        case '"': {
                size_t a, b;
                bool e;
                return scan_string(sc, &a, &b, &e);
        }
        case 't':
                return scan_literal(sc, "true");
        case 'f':
                return scan_literal(sc, "false");
        case 'n':
                return scan_literal(sc, "null");
        default:
                return scan_number(sc);
        }
}

/* The whole text is one JSON value and white space. Nesting was bounded before this recursion. */
static int scan_text(Scanner *sc) {
        if (!path_index.made)
                path_index_make();
        int r = scan_value(sc, 0, sc->spans ? (uint32_t) ((1ULL << SCAN_PATHS) - 1) : 0, true);
        if (r < 0)
                return r;
        skip_ws(sc);
        return sc->pos == sc->len ? 0 : -EBADMSG;
}

static bool integer_text(const char *t, size_t len) {
        size_t i = 0;

        if (i < len && t[i] == '-')
                i++;
        if (i >= len)
                return false;
        if (t[i] == '0')
                return i + 1 == len;
        for (; i < len; i++)
                if (!is_digit(t[i]))
                        return false;
        return true;
}

bool json_id_valid(const cJSON *id, const char *text, size_t len) {
        if (cJSON_IsString(id))
                return true;
        if (!cJSON_IsNumber(id))
                return false;
        if (integer_text(text, len))
                return true;
        double d = id->valuedouble;
        return isfinite(d) && d == floor(d);
}

static void set_problem(Message *m, const char *fmt, const char *arg) {
        snprintf(m->problem_buf, sizeof m->problem_buf, fmt, arg);
        m->problem = m->problem_buf;
        m->kind = JSONRPC_INVALID;
}

/* Every id a hop keeps in a table (request ids, progress tokens, task ids, cancelled ids) has a
 * bounded length: past it the message is invalid, and an over-long id of its own is not echoed. */
static void check_id_lengths(Message *m) {
        IdField f[16];
        bool any_long = false;
        size_t n;

        /* The usual message has no field that long anywhere the table looks: nothing to ask it. */
        for (size_t p = 0; p < _ID_PATH_MAX; p++)
                any_long = any_long || m->spans[p].len > MESSAGE_MAX_ID_BYTES;
        if (!any_long)
                return;
        n = ids_fields(m, f, ELEMENTSOF(f));
        for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++) {
                if (f[i].len <= MESSAGE_MAX_ID_BYTES)
                        continue;
                /* Not echoed: a reply carries id_json, made from id_text (message_parse_envelope()). */
                if (f[i].path == ID_PATH_ID)
                        m->id = NULL, m->id_text = NULL;
                m->method = NULL;
                snprintf(m->problem_buf, sizeof m->problem_buf, "%s is longer than %u bytes, the limit",
                         f[i].kind == ID_KIND_PROGRESS ? "the progress token"
                         : f[i].kind == ID_KIND_TASK   ? "the task id"
                         : f[i].path == ID_PATH_ID     ? "\"id\""
                                                       : "\"requestId\"",
                         MESSAGE_MAX_ID_BYTES);
                m->problem = m->problem_buf;
                m->kind = JSONRPC_INVALID;
                return;
        }
}

/* The id's value (its text in id_buf) as an item of the message's own, without a parse: a string,
 * an integer of up to 15 digits, null, true, false; other numbers, objects and arrays are parsed. */
static const cJSON *id_item_set(Message *m, size_t len) {
        const char *t = m->id_buf;
        cJSON *it = &m->id_item;

        *it = (cJSON){};
        switch (t[0]) {
        case '"':
                (void) string_decode(t, 1, len - 1, m->id_str);
                it->type = cJSON_String;
                it->valuestring = m->id_str;
                return it;
        case 'n':
                it->type = cJSON_NULL;
                return it;
        case 't':
                it->type = cJSON_True;
                return it;
        case 'f':
                it->type = cJSON_False;
                return it;
        }
        if (integer_text(t, len) && len - (t[0] == '-') <= 15) {
                long long v = 0;
                for (size_t i = t[0] == '-'; i < len; i++)
                        v = v * 10 + (t[i] - '0');
                it->type = cJSON_Number;
                it->valuedouble = (double) (t[0] == '-' ? -v : v);
                it->valueint = it->valuedouble >= INT_MAX   ? INT_MAX
                               : it->valuedouble <= INT_MIN ? INT_MIN
                                                            : (int) it->valuedouble;
                return it;
        }
        m->id_value = cJSON_ParseWithLength(t, len);
        return m->id_value;
}

/* The member's value, as the scan found it: its first byte says its type. */
static char member_type(const Message *m, const Scanner *sc, EnvelopeMember mb) {
        return sc->has_member[mb] ? m->text[sc->members[mb].start] : 0;
}

/* The envelope, from the scan: the same rules jsonrpc_classify() applies, with ids taken by their text. */
static void classify(Message *m, const Scanner *sc) {
        const Span *ids = &sc->members[MEMBER_ID];
        bool has_id = sc->has_member[MEMBER_ID], id_ok = false;
        char method_type = member_type(m, sc, MEMBER_METHOD), params_type = member_type(m, sc, MEMBER_PARAMS);

        m->kind = JSONRPC_INVALID;
        if (!sc->top_object) {
                m->problem = "a message must be a JSON object";
                return;
        }
        if (has_id && !sc->dup_id) {
                const cJSON *v;
                memcpy(m->id_buf, m->text + ids->start, ids->len);
                m->id_buf[ids->len] = 0;
                v = id_item_set(m, ids->len);
                if (!v) {
                        m->problem = "out of memory";
                        return;
                }
                id_ok = json_id_valid(v, m->id_buf, ids->len);
                if (id_ok) {
                        m->id = v;
                        m->id_text = m->id_buf;
                }
        }
        if (sc->has_dup)
                /* Which of two ids would the next hop read? Neither (dup_id): answer with null. */
                return set_problem(m, "duplicate key \"%.64s\" in an object", sc->dup);
        /* We (and cJSON) read such a key up to its NUL, a next hop all of it: "params\u0000" would be params
         * to us and to cJSON, and neither to the backend nor to message_find(). */
        if (sc->nul_key) {
                m->problem = "an object key must not hold a NUL character (\\u0000)";
                return;
        }
        if (member_type(m, sc, MEMBER_JSONRPC) != '"' ||
            !string_is(m->text, sc->members[MEMBER_JSONRPC], "2.0")) {
                m->problem = "\"jsonrpc\" must be \"2.0\"";
                return;
        }
        if (method_type) {
                const Span *ms = &sc->members[MEMBER_METHOD];
                if (method_type != '"') {
                        m->problem = "\"method\" must be a string";
                        return;
                }
                /* A NUL would end the name we read, not the one the next hop reads. */
                if (string_decode(m->text, ms->start + 1, ms->start + ms->len - 1, m->method_buf) !=
                    strlen(m->method_buf)) {
                        m->problem = "\"method\" must not hold a NUL character";
                        return;
                }
                if (params_type && params_type != '{' && params_type != '[') {
                        m->problem = "\"params\" must be an object or an array";
                        return;
                }
                if (has_id && !id_ok) {
                        m->problem = "\"id\" must be a string or an integer";
                        return;
                }
                if (ids_method_kind_mismatch(has_id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION, m->method_buf))
                        return set_problem(m,
                                           has_id ? "\"%.64s\" is a notification: it takes no \"id\""
                                                  : "\"%.64s\" is a request: it needs an \"id\"",
                                           m->method_buf);
                m->kind = has_id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION;
                m->method = m->method_buf;
                return check_id_lengths(m);
        }
        if (sc->has_member[MEMBER_RESULT] != sc->has_member[MEMBER_ERROR] && has_id) {
                /* A response to a request never sent is dropped by the caller; its id may be null. */
                m->kind = JSONRPC_RESPONSE;
                m->id = m->id_value ?: &m->id_item;
                return check_id_lengths(m);
        }
        m->problem = "a message needs \"method\", or \"id\" with exactly one of \"result\" and \"error\"";
}

/* One allocation holds the message, its text, its id's text and its method's name. */
static Message *message_alloc(const char *line, size_t len, const Scanner *sc) {
        size_t id_len = sc->has_member[MEMBER_ID] ? sc->members[MEMBER_ID].len : 0;
        size_t method_len = sc->has_member[MEMBER_METHOD] ? sc->members[MEMBER_METHOD].len : 0;
        Message *m = malloc(sizeof *m + len + 1 + 2 * (id_len + 1) + method_len + 1);

        if (!m)
                return NULL;
        /* On every message's path: the fields that may be read before they are written, and no more. */
        memset(m, 0, offsetof(Message, id_raw));
        m->n_ref = 1;
        m->text = (char *) (m + 1);
        memcpy(m->text, line, len);
        m->text[len] = 0;
        m->len = len;
        m->id_buf = m->text + len + 1;
        m->id_str = m->id_buf + id_len + 1;
        m->method_buf = m->id_str + id_len + 1;
        m->id_buf[0] = m->id_str[0] = m->method_buf[0] = 0;
        memcpy(m->spans, sc->spans, sizeof m->spans);
        memcpy(m->route, sc->spans + _ID_PATH_MAX, sizeof m->route);
        return m;
}

int message_parse_envelope(const char *line, size_t len, unsigned max_depth, Message **ret) {
        Span spans[SCAN_PATHS] = {};
        Key keys[KEYS_INLINE];
        Scanner sc = {.s = line,
                      .len = len,
                      .max_depth = max_depth,
                      .spans = spans,
                      .keys = keys,
                      .keys_inline = keys,
                      .max_keys = KEYS_INLINE};
        Message *m;
        int r;

        /* One pass checks it all: grammar, UTF-8 inside strings (outside them JSON is ASCII), no NUL,
         * duplicate keys, and nesting, before cJSON (which recurses) ever sees it. */
        r = scan_text(&sc);
        scanner_done(&sc);
        if (r < 0)
                return r;
        m = message_alloc(line, len, &sc);
        if (!m)
                return -ENOMEM;
        classify(m, &sc);
        /* Replies (and answers printed again) carry the id's exact text. */
        if (m->id_text) {
                m->id_raw = (cJSON){.type = cJSON_Raw, .valuestring = m->id_buf};
                m->id_json = &m->id_raw;
        }
        *ret = m;
        return 0;
}

int message_parse(const char *line, size_t len, unsigned max_depth, Message **ret) {
        Message *m;
        int r = message_parse_envelope(line, len, max_depth, &m);

        if (r < 0)
                return r;
        if (!message_json(m)) {
                message_unref(m);
                return -ENOMEM;
        }
        *ret = m;
        return 0;
}

const cJSON *message_json(const Message *cm) {
        Message *m = (Message *) cm; /* the tree is a cache of what the text says */

        if (m->json)
                return m->json;
        m->json = cJSON_ParseWithLength(m->text, m->len);
        if (m->json && (m->kind == JSONRPC_REQUEST || m->kind == JSONRPC_NOTIFICATION))
                m->params = cJSON_GetObjectItemCaseSensitive(m->json, "params");
        return m->json;
}

Message *message_ref(Message *m) {
        if (m)
                m->n_ref++;
        return m;
}

Message *message_unref(Message *m) {
        if (!m || --m->n_ref > 0)
                return NULL;
        cJSON_Delete(m->json);
        cJSON_Delete(m->id_value);
        free(m);
        return NULL;
}

bool message_is_batch(const char *line, size_t len) {
        for (size_t i = 0; i < len; i++) {
                if (strchr(" \t\r\n", line[i]) && line[i])
                        continue;
                return line[i] == '[';
        }
        return false;
}

int message_split_batch(const char *line, size_t len, unsigned max_depth, Span **ret_spans, size_t *ret_n) {
        Scanner sc = {.s = line, .len = len, .max_depth = max_depth, .want_elements = true};
        int r;

        if (!message_is_batch(line, len))
                return -EBADMSG;
        r = scan_text(&sc);
        scanner_done(&sc);
        if (r < 0) {
                free(sc.elements);
                return r;
        }
        *ret_n = sc.n_elements;
        *ret_spans = sc.elements;
        return 0;
}

int message_splice(const Message *m, const Splice *s, size_t n, char **ret_text, size_t *ret_len) {
        size_t len = m->len, at = 0, o = 0;
        char *out;

        for (size_t i = 0; i < n; i++) {
                if (s[i].span.start < at || s[i].span.start + s[i].span.len > m->len)
                        return -EINVAL;
                at = s[i].span.start + s[i].span.len;
                len = len - s[i].span.len + s[i].len;
        }
        out = malloc(len + 1);
        if (!out)
                return -ENOMEM;
        at = 0;
        for (size_t i = 0; i < n; i++) {
                memcpy(out + o, m->text + at, s[i].span.start - at);
                o += s[i].span.start - at;
                memcpy(out + o, s[i].text, s[i].len);
                o += s[i].len;
                at = s[i].span.start + s[i].span.len;
        }
        memcpy(out + o, m->text + at, m->len - at);
        o += m->len - at;
        out[o] = 0;
        *ret_text = out;
        *ret_len = o;
        return 0;
}

/* Walks the validated text from the value at sc->pos along path (object keys); at its end, *ret spans
 * that value. */
static int find_path(Scanner *sc, const char *const *path, Span *ret) {
        skip_ws(sc);
        if (!*path) {
                size_t start = sc->pos;
                int r = scan_value(sc, 0, 0, false);
                if (r < 0)
                        return r;
                *ret = (Span){start, sc->pos - start};
                return 0;
        }
        if (sc->pos >= sc->len || sc->s[sc->pos] != '{')
                return -ENOENT;
        sc->pos++;
        skip_ws(sc);
        if (sc->pos < sc->len && sc->s[sc->pos] == '}')
                return -ENOENT;
        for (;;) {
                size_t ka, kb;
                bool escaped;
                int r;

                skip_ws(sc);
                r = scan_string(sc, &ka, &kb, &escaped);
                if (r < 0)
                        return r;
                skip_ws(sc);
                if (sc->pos >= sc->len || sc->s[sc->pos] != ':')
                        return -EBADMSG;
                sc->pos++;
                if (key_equals(sc->s, ka, kb, path[0]))
                        return find_path(sc, path + 1, ret); /* keys are unique: message_parse() saw to it */
                r = scan_value(sc, 0, 0, false);
                if (r < 0)
                        return r;
                skip_ws(sc);
                if (sc->pos >= sc->len || sc->s[sc->pos] != ',')
                        return -ENOENT;
                sc->pos++;
        }
}

int message_find(const Message *m, const char *const *path, Span *ret) {
        _cleanup_(scanner_done) Scanner sc = {.s = m->text, .len = m->len, .max_depth = UINT_MAX};
        Span s;
        int r = find_path(&sc, path, &s);

        if (r < 0)
                return r;
        *ret = s;
        return 0;
}

int message_members(const Message *m, Span object, Member **ret, size_t *ret_n) {
        _cleanup_(scanner_done) Scanner sc = {.s = m->text, .len = object.start + object.len, .pos = object.start, .max_depth = UINT_MAX};
        _cleanup_free_ Member *list = NULL;
        size_t n = 0, size = 0;

        skip_ws(&sc);
        if (object.len == 0 || sc.pos >= sc.len || sc.s[sc.pos] != '{')
                return -ENOENT;
        sc.pos++;
        skip_ws(&sc);
        while (sc.pos < sc.len && sc.s[sc.pos] != '}') {
                size_t ka, kb, vstart;
                bool escaped;
                int r;

                skip_ws(&sc);
                r = scan_string(&sc, &ka, &kb, &escaped);
                if (r < 0)
                        return r;
                skip_ws(&sc);
                if (sc.pos >= sc.len || sc.s[sc.pos] != ':')
                        return -EBADMSG;
                sc.pos++;
                skip_ws(&sc);
                vstart = sc.pos;
                r = scan_value(&sc, 0, 0, false);
                if (r < 0)
                        return r;
                if (n >= size) {
                        size_t k = size ? size * 2 : 8;
                        Member *l = reallocarray(list, k, sizeof *l);
                        if (!l)
                                return -ENOMEM;
                        list = l, size = k;
                }
                list[n++] = (Member){
                        .key = {ka, kb - ka},
                        .member = {ka - 1, sc.pos - (ka - 1)},
                        .value = {vstart, sc.pos - vstart},
                };
                skip_ws(&sc);
                if (sc.pos < sc.len && sc.s[sc.pos] == ',')
                        sc.pos++;
                skip_ws(&sc);
        }
        *ret = TAKE_PTR(list);
        *ret_n = n;
        return 0;
}

bool message_key_is(const Message *m, const Member *mb, const char *name) {
        return key_equals(m->text, mb->key.start, mb->key.start + mb->key.len, name);
}

int message_string(const Message *m, Span s, char *buf, size_t size, size_t *ret_len) {
        if (s.len < 2 || m->text[s.start] != '"')
                return -EINVAL;
        /* Decoding never lengthens: the contents' length bounds what it needs. */
        if (s.len - 2 >= size)
                return -ENOBUFS;
        *ret_len = string_decode(m->text, s.start + 1, s.start + s.len - 1, buf);
        return 0;
}

bool message_has_envelope(const Message *m) {
        return m->route[ROUTE_PATH_META_VERSION].len > 0 || m->route[ROUTE_PATH_META_CAPABILITIES].len > 0 ||
               m->route[ROUTE_PATH_META_CLIENT_INFO].len > 0 || m->route[ROUTE_PATH_META_LOG_LEVEL].len > 0;
}

char *message_span_dup(const Message *m, Span s) {
        return strndup(m->text + s.start, s.len);
}
