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

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "era.h"
#include "framing.h"
#include "macros.h"
#include "message.h"
#include "prefetch.h"

/* A branch the usual message never takes (an error, a rare form): laid out away from the scan's path,
 * whose code lines a cold wakeup reads one by one. */
#define unlikely(x) __builtin_expect(!!(x), 0)

/* A key as the next hop reads it: decoded (escapes), and cut at a decoded NUL as a C string is (and
 * as cJSON's key is). Points into the text when it has no escape, else to a decoded copy of its own
 * (key_owned()). head holds its first 8 bytes (zero past its end): two keys are the same when their
 * lengths and heads are, and the rest of their bytes. 24 bytes: a message's keys are on every scan's
 * stack lines. */
typedef struct Key {
        const char *p;
        size_t len;
        uint64_t head;
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
#define SCAN_PATHS MESSAGE_PATHS
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
        [ROUTE_PATH_META] = {"params", "_meta"},
        [ROUTE_PATH_REQUEST_STATE] = {"params", "requestState"},
};

static const char *scan_path_key(unsigned p, unsigned level) {
        return p < _ID_PATH_MAX ? id_paths[p][level] : route_paths[p - _ID_PATH_MAX][level];
}

/* The first 8 bytes of a key of len bytes at p (zero past its end); limit: how far p may be read. */
static inline uint64_t key_head(const char *p, size_t len, const char *limit) {
        uint64_t w = 0;

        if (len >= 8) {
                memcpy(&w, p, 8);
                return w;
        }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* The usual key has a quote, a colon, a value and more behind it: one load, then a mask. */
        if (limit - p >= 8) {
                memcpy(&w, p, 8);
                return w & ((UINT64_C(1) << (8 * len)) - 1);
        }
#endif
        for (size_t i = 0; i < len; i++)
                ((unsigned char *) &w)[i] = (unsigned char) p[i];
        return w;
}

static inline bool key_same(const Key *x, const Key *y) {
        return x->len == y->len && x->head == y->head && (x->len <= 8 || memcmp(x->p + 8, y->p + 8, x->len - 8) == 0);
}

/* The keys by level, for one look-up per key on every message's path: each distinct key at a level
 * with the paths it is a step of, and (at the top) the envelope member it names. Made once from the
 * tables, in as few cache lines as a look-up can take: the slots are the table itself (open addressing
 * from the key's slot, path_slot()), 16 bytes each, and one word per level says which slots are any
 * key's own, so that the usual key that is no step of a path (a miss) is told from that word alone and
 * a hit reads its slot's line only. */
typedef struct PathSlot {
        uint64_t head;  /* the key's first 8 bytes (key_head()) */
        uint32_t paths; /* the paths it is a step of */
        uint8_t len;    /* the key's length; 0: an empty slot (no key in the tables is empty) */
        int8_t member;  /* level 0: the EnvelopeMember it names, or -1 */
} PathSlot;

#define PATH_BUCKETS  64U /* of a key's hash, path_bucket(): scan_object()'s duplicate check */
#define PATH_SLOTS    32U /* of a level of the index: a key's own is its bucket's low bits */
#define MESSAGE_ROOMS 2U
#define MESSAGE_ROOM  1024U

/* What every message's scan and allocation touch, together, on as few lines and pages as they take:
 * which slots are a key's own, the constants plain_stops16() compares with (the compiler's own copies
 * sat on two lines of .rodata; these are written with the struct, so the compiler does not copy them),
 * the index's slots, and the rooms messages are made in. */
static struct {
        /* Bits b and b + 32: slot b holds the key whose own it is (tested by a bucket, 0-63). */
        _Alignas(64) uint64_t home[ID_PATH_DEPTH];
        uint32_t ends[ID_PATH_DEPTH]; /* the paths whose last key is at this level */
        bool made;
        bool collided; /* a key's slot is not its own: look-ups probe past it */
        /* Room for a message or two, taken by message_alloc() when free and the message fits
         * (message_unref() gives it back): the usual message, parsed, forwarded and gone within one
         * wakeup, then sits beside the tables the scan reads anyway, not on a heap page of its own, and
         * costs no malloc()/free(). Two, so that a message kept a while (a held initialize, a request
         * whose answer needs it) does not send every other one to malloc(). None under ASan. */
        bool room_taken[MESSAGE_ROOMS];
        _Alignas(64) uint8_t stops[3][16]; /* '"', '\\', 0x20 */
        _Alignas(64) PathSlot slots[ID_PATH_DEPTH][PATH_SLOTS];
        _Alignas(64) unsigned char room[MESSAGE_ROOMS][MESSAGE_ROOM];
} scan_hot = {
        .stops = {
                {'"', '"', '"', '"', '"', '"', '"', '"', '"', '"', '"', '"', '"', '"', '"', '"'},
                {'\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\', '\\'},
                {0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20},
        },
};
static const char *path_names[ID_PATH_DEPTH][PATH_SLOTS]; /* each slot's key: read past its head only */

_Static_assert(sizeof(PathSlot) == 16, "four slots to a cache line");
_Static_assert(PATH_SLOTS == 32 && PATH_BUCKETS == 64, "home: a bit per bucket, each slot's twice");

/* Any odd multiplier is right (a key whose slot is taken goes to the next free one, path_index_make());
 * this one, found by trying, gives each key of today's tables a slot of its own at its level, puts a
 * request's four top-level keys (jsonrpc, id, method, params) on one line of slots and result and error
 * on the line before: a request's envelope is looked up in one line. */
#define PATH_HASH_MULTIPLIER 0xa748f04a5aac4867ULL

static inline unsigned path_bucket(const Key *k) {
        return (unsigned) (((k->head ^ k->len) * PATH_HASH_MULTIPLIER) >> 58);
}

/* A key's own slot, from its bucket. */
static inline unsigned path_slot(unsigned bucket) {
        return bucket % PATH_SLOTS;
}

static PathSlot *path_index_key(unsigned level, const char *key) {
        size_t len = strlen(key);
        Key k = {key, len, key_head(key, len, key + len + 1)};
        unsigned own = path_slot(path_bucket(&k)), i = own;

        /* Made once, from the tables: a level's slots hold far more keys than a level has. */
        while (scan_hot.slots[level][i].len && !streq(path_names[level][i], key)) {
                i = (i + 1) % PATH_SLOTS;
                scan_hot.collided = true;
        }
        if (!scan_hot.slots[level][i].len) {
                scan_hot.slots[level][i] = (PathSlot){.head = k.head, .len = (uint8_t) len, .member = -1};
                path_names[level][i] = key;
                scan_hot.home[level] |= (UINT64_C(1) << own) | (UINT64_C(1) << (own + 32));
        }
        return &scan_hot.slots[level][i];
}

/* Whether the slot's key (at i of this level) is k: its head and length, then the rest of its bytes. */
static inline bool path_slot_is(size_t level, unsigned i, const PathSlot *ps, const Key *k) {
        return ps->head == k->head && ps->len == k->len &&
               (k->len <= 8 || memcmp(path_names[level][i] + 8, k->p + 8, k->len - 8) == 0);
}

/* Past the key's own slot, where a key whose slot another key took went (never with today's tables:
 * path_index_make() says so in collided). */
static __attribute__((noinline, cold)) const PathSlot *path_index_probe(size_t level, unsigned own, const Key *k) {
        for (unsigned i = (own + 1) % PATH_SLOTS; scan_hot.slots[level][i].len; i = (i + 1) % PATH_SLOTS)
                if (path_slot_is(level, i, &scan_hot.slots[level][i], k))
                        return &scan_hot.slots[level][i];
        return NULL;
}

/* The slot of the key k (in bucket h, path_bucket()) at this level, or NULL. */
static inline const PathSlot *path_index_find(size_t level, unsigned h, const Key *k) {
        unsigned own = path_slot(h);
        const PathSlot *ps = &scan_hot.slots[level][own];

        if (!(scan_hot.home[level] & (UINT64_C(1) << h)))
                return NULL;
        if (path_slot_is(level, own, ps, k))
                return ps;
        return scan_hot.collided ? path_index_probe(level, own, k) : NULL;
}

static __attribute__((noinline, cold)) void path_index_make(void) {
        for (unsigned p = 0; p < SCAN_PATHS; p++)
                for (unsigned l = 0; l < ID_PATH_DEPTH && scan_path_key(p, l); l++) {
                        path_index_key(l, scan_path_key(p, l))->paths |= 1U << p;
                        if (!scan_path_key(p, l + 1))
                                scan_hot.ends[l] |= 1U << p;
                }
        for (unsigned mb = 0; mb < _MEMBER_MAX; mb++)
                path_index_key(0, member_names[mb])->member = (int8_t) mb;
        scan_hot.made = true;
}

typedef struct Scanner {
        const uint8_t *s, *end; /* the text */
        int error;              /* why a scan function returned NULL */
        unsigned depth, max_depth;
        Span *spans; /* the caller's room for SCAN_PATHS spans, in the order noted; NULL: record nothing */
        unsigned n_spans;
        bool want_elements; /* a batch: note the spans of the top-level array's elements */
        Span *elements;
        size_t n_elements, max_elements;
        /* The keys of the objects being scanned, innermost last: duplicates are found as they come.
         * keys_inline: the caller's room for the first KEYS_INLINE (uninitialized), or NULL. */
        Key *keys, *keys_inline;
        size_t n_keys, max_keys, n_owned;
        uint32_t noted; /* the paths whose spans were written */
        bool long_id;   /* an id path's value is longer than MESSAGE_MAX_ID_BYTES */
        bool has_dup;
        bool dup_id;     /* the top-level object has "id" twice */
        bool top_object; /* the text is an object */
        bool has_member[_MEMBER_MAX];
        bool nul_key; /* a key decodes to text with a NUL in it */
        /* Not zeroed by scanner_init(): each is written before it is read. What every message's scan
         * touches comes first, the rare dup last. */
        uint8_t slot[SCAN_PATHS]; /* path p's span is spans[slot[p]], where noted has bit p */
        /* What scan_string_slow() found: the contents' bounds, and whether they hold an escape. Not out
         * parameters: a pointer to a local that escapes into a call keeps the local on the stack, in
         * every frame of the recursion that inlines scan_string(). */
        bool token_escaped;
        const uint8_t *token_start, *token_end;
        Span members[_MEMBER_MAX];
        char dup[65]; /* the first duplicate key found (has_dup), cut to 64 bytes */
} Scanner;

static void scanner_init(Scanner *sc, const char *text, size_t len, unsigned max_depth) {
        memset(sc, 0, offsetof(Scanner, slot));
        sc->s = (const uint8_t *) text;
        sc->end = sc->s + len;
        sc->max_depth = max_depth;
}

/* A decoded key's copy is never inside the text: the key owns it. */
static bool key_owned(const Scanner *sc, const Key *k) {
        return (uintptr_t) k->p < (uintptr_t) sc->s || (uintptr_t) k->p >= (uintptr_t) sc->end;
}

static void scanner_free_keys(Scanner *sc) {
        for (size_t i = 0; sc->n_owned > 0 && i < sc->n_keys; i++)
                if (key_owned(sc, &sc->keys[i]))
                        free((char *) sc->keys[i].p);
        if (sc->keys != sc->keys_inline)
                free(sc->keys);
        sc->keys = NULL;
        sc->n_keys = sc->max_keys = sc->n_owned = 0;
}

/* What a scan holds past its end: keys it decoded, and its keys' room when it outgrew the caller's. */
static inline void scanner_done(Scanner *sc) {
        if (sc->n_owned > 0 || sc->keys != sc->keys_inline)
                scanner_free_keys(sc);
        sc->keys = NULL;
}

/* Every scan function returns where it stopped, or NULL with sc->error set. */
static const uint8_t *scan_fail(Scanner *sc, int r) {
        sc->error = r;
        return NULL;
}

static size_t offset_of(const Scanner *sc, const uint8_t *p) {
        return (size_t) (p - sc->s);
}

static bool is_ws(uint8_t c) {
        return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *e) {
        /* White space and the bytes JSON refuses outside strings are all <= ' ': one compare for the
         * usual byte, which is neither. */
        while (p < e && *p <= ' ' && is_ws(*p))
                p++;
        return p;
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

/* Inside a string, a byte of a plain run: not '"', '\\', a control character (JSON wants them escaped)
 * or a byte of a UTF-8 sequence (to check). Tested, not looked up: a table was up to four more lines
 * of .rodata per message, read for the last few bytes of the text. */
static inline bool plain_byte(uint8_t c) {
        return (uint8_t) (c - 0x20) < 0x60 && c != '"' && c != '\\';
}

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

#ifdef __SSE2__
/* A bit for each of the 16 bytes at p that ends a plain run: '"', '\\', and below 0x20 or from 0x80 on,
 * which one signed compare finds together. */
static inline unsigned plain_stops16(const uint8_t *p) {
        __m128i v = _mm_loadu_si128((const __m128i *) p);
        __m128i x = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_load_si128((const __m128i *) scan_hot.stops[0])),
                                              _mm_cmpeq_epi8(v, _mm_load_si128((const __m128i *) scan_hot.stops[1]))),
                                 _mm_cmplt_epi8(v, _mm_load_si128((const __m128i *) scan_hot.stops[2])));
        return (unsigned) _mm_movemask_epi8(x);
}
#endif

/* Past the plain bytes of a string from p (none of '"', '\\', a control character or a byte >= 0x80),
 * sixteen at a time where there are sixteen (SSE2), then eight. In a word, a byte's high bit is set by the
 * usual tests (below 0x20, or 0 after an XOR with '"' or '\\': a borrow; >= 0x80: its own high bit) for
 * every such byte and for no plain byte before the first of them, since no borrow comes from a plain
 * byte: the lowest flagged byte is the first one to stop at. */
static inline const uint8_t *plain_run(const uint8_t *p, const uint8_t *e) {
#ifdef __SSE2__
        while (e - p >= 16) {
                unsigned m = plain_stops16(p);
                if (m)
                        return p + __builtin_ctz(m);
                p += 16;
        }
#endif
        while (e - p >= 8) {
                uint64_t w, hits;
                memcpy(&w, p, 8);
                hits = ((w - ONES * 0x20) | ((w ^ (ONES * '"')) - ONES) | ((w ^ (ONES * '\\')) - ONES) | w) & HIGHS;
                if (hits) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                        return p + (__builtin_ctzll(hits) >> 3);
#else
                        break;
#endif
                }
                p += 8;
        }
        while (p < e && plain_byte(*p))
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

/* The character a one-letter escape (the letter after the backslash) stands for, or 0. */
static inline char escape_char(uint8_t c) {
        /* A switch, not strchr(): a node backend's text escapes every quote of the JSON it carries, and
         * a call into libc per escape was one more libc page per message. */
        switch (c) {
        case '"':
        case '\\':
        case '/':
                return (char) c;
        case 'b':
                return '\b';
        case 'f':
                return '\f';
        case 'n':
                return '\n';
        case 'r':
                return '\r';
        case 't':
                return '\t';
        default:
                return 0;
        }
}

/* Past the escape at p (its backslash), or NULL. A \u escape of half a surrogate pair must come with
 * its other half, as cJSON and every other decoder of UTF-16 escapes want. */
static const uint8_t *scan_escape(const uint8_t *p, const uint8_t *e) {
        int v, w;

        if (++p >= e)
                return NULL;
        if (*p != 'u')
                return escape_char(*p) ? p + 1 : NULL;
        if (e - p <= 4 || (v = hex4(p + 1)) < 0 || (v >= 0xDC00 && v <= 0xDFFF))
                return NULL;
        p += 5;
        if (v < 0xD800 || v > 0xDBFF)
                return p;
        if (e - p <= 5 || p[0] != '\\' || p[1] != 'u' || (w = hex4(p + 2)) < 0 || w < 0xDC00 || w > 0xDFFF)
                return NULL;
        return p + 6;
}

/* A string token at p; on success sc->token_start and token_end bound its contents (without the
 * quotes), and token_escaped says whether they hold an escape. Plain runs are skipped a word at a time:
 * this loop is where a large payload's bytes go by. */
static const uint8_t *scan_string_slow(Scanner *sc, const uint8_t *p) {
        const uint8_t *e = sc->end, *start;
        bool escaped = false;

        if (p >= e || *p != '"')
                return scan_fail(sc, -EBADMSG);
        start = ++p;
        for (;;) {
                p = plain_run(p, e);
                if (p >= e)
                        return scan_fail(sc, -EBADMSG);
                if (*p == '"')
                        break;
                if (*p < 0x20)
                        return scan_fail(sc, -EBADMSG); /* JSON wants control characters escaped; NUL among them */
                if (*p == '\\') {
                        escaped = true;
                        p = scan_escape(p, e);
                        if (!p)
                                return scan_fail(sc, -EBADMSG);
                        continue;
                }
                size_t k = utf8_sequence(p, (size_t) (e - p));
                if (k == 0)
                        return scan_fail(sc, -EBADMSG);
                p += k;
        }
        sc->token_start = start;
        sc->token_end = p;
        sc->token_escaped = escaped;
        return p + 1;
}

/* The same, with the usual string (plain bytes only: no escape, nothing past ASCII) taken inline. */
static inline const uint8_t *scan_string(Scanner *sc, const uint8_t *p, const uint8_t **ret_start,
                                         const uint8_t **ret_end, bool *ret_escaped) {
        if (p < sc->end && *p == '"') {
                const uint8_t *q = plain_run(p + 1, sc->end);
                if (q < sc->end && *q == '"') {
                        *ret_start = p + 1;
                        *ret_end = q;
                        *ret_escaped = false;
                        return q + 1;
                }
        }
        p = scan_string_slow(sc, p);
        if (p) {
                *ret_start = sc->token_start;
                *ret_end = sc->token_end;
                *ret_escaped = sc->token_escaped;
        }
        return p;
}

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static const uint8_t *skip_digits(const uint8_t *p, const uint8_t *e) {
        while (p < e && is_digit((char) *p))
                p++;
        return p;
}

static const uint8_t *scan_number_slow(Scanner *sc, const uint8_t *p) {
        const uint8_t *e = sc->end;

        if (p < e && *p == '-')
                p++;
        if (p >= e || !is_digit((char) *p))
                return scan_fail(sc, -EBADMSG);
        p = *p == '0' ? p + 1 : skip_digits(p, e);
        if (p < e && *p == '.') {
                if (++p >= e || !is_digit((char) *p))
                        return scan_fail(sc, -EBADMSG);
                p = skip_digits(p, e);
        }
        if (p < e && (*p == 'e' || *p == 'E')) {
                p++;
                if (p < e && (*p == '+' || *p == '-'))
                        p++;
                if (p >= e || !is_digit((char) *p))
                        return scan_fail(sc, -EBADMSG);
                p = skip_digits(p, e);
        }
        return p;
}

/* A number at p (not past the end): the usual one, an integer that does not start with 0, inline. */
static inline const uint8_t *scan_number(Scanner *sc, const uint8_t *p) {
        const uint8_t *e = sc->end, *q = p + (*p == '-');

        if (q < e && (unsigned) (*q - '1') <= 8) {
                do
                        q++;
                while (q < e && (unsigned) (*q - '0') <= 9);
                if (q >= e || (*q != '.' && *q != 'e' && *q != 'E'))
                        return q;
        }
        return scan_number_slow(sc, p);
}

static const uint8_t *scan_literal(Scanner *sc, const uint8_t *p, const char *word, size_t l) {
        if ((size_t) (sc->end - p) < l || memcmp(p, word, l) != 0)
                return scan_fail(sc, -EBADMSG);
        return p + l;
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
                        out[o++] = escape_char((uint8_t) e);
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
                                c = (unsigned char) escape_char((uint8_t) e);
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

/* A key with an escape, decoded into a string of its own. */
static int key_decode(Scanner *sc, const uint8_t *a, const uint8_t *b, Key *ret) {
        size_t len = (size_t) (b - a), n;
        char *d = malloc(len + 1);

        if (!d)
                return -ENOMEM;
        n = string_decode((const char *) sc->s, offset_of(sc, a), offset_of(sc, b), d);
        /* Cut at a NUL, as cJSON cuts it; the next hop may read the whole key (classify() refuses it). */
        len = strlen(d);
        sc->nul_key = sc->nul_key || n != len;
        *ret = (Key){d, len, key_head(d, len, d + len + 1)};
        sc->n_owned++;
        return 0;
}

static inline int key_make(Scanner *sc, const uint8_t *a, const uint8_t *b, bool escaped, Key *ret) {
        size_t len = (size_t) (b - a);

        if (escaped)
                return key_decode(sc, a, b, ret);
        *ret = (Key){(const char *) a, len, key_head((const char *) a, len, (const char *) sc->end)};
        return 0;
}

static bool key_is(const Key *k, const char *name) {
        /* A key holds no NUL (decoded ones are cut there): strncmp() stops at name's end. */
        return k->len > 0 && k->p[0] == name[0] && strncmp(name, k->p, k->len) == 0 && name[k->len] == 0;
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
        if (!sc->has_dup) {
                size_t n = k->len < 64 ? k->len : 64;
                /* Cut at a character: the problem goes into an error a peer reads, as UTF-8. */
                while (n > 0 && n < k->len && ((unsigned char) k->p[n] & 0xC0) == 0x80)
                        n--;
                snprintf(sc->dup, sizeof sc->dup, "%.*s", (int) n, k->p);
        }
        sc->has_dup = true;
}

/* Room for one more key. */
static int keys_grow(Scanner *sc) {
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
        return 0;
}

/* A key k of the object whose keys start at base, written at keys[n_keys]: duplicates of the first
 * few are found at once, among the keys that share its bucket (only called when one does: else none
 * can be the same). */
static void keys_compare(Scanner *sc, size_t base, const Key *k) {
        for (size_t i = base; i < sc->n_keys; i++)
                if (key_same(&sc->keys[i], k)) {
                        note_duplicate(sc, k, sc->depth == 1);
                        break;
                }
}

static int keys_pop_slow(Scanner *sc, size_t base) {
        size_t n = sc->n_keys - base;
        bool top = sc->depth == 1;

        if (n > KEYS_PAIRWISE) {
                _cleanup_free_ Key *sorted = malloc(n * sizeof *sorted);
                if (!sorted)
                        return -ENOMEM;
                memcpy(sorted, sc->keys + base, n * sizeof *sorted);
                qsort(sorted, n, sizeof *sorted, key_compare_qsort);
                /* Every duplicate, not the first only: "id" twice must be seen whatever sorts before it. */
                for (size_t i = 1; i < n; i++)
                        if (key_compare(&sorted[i - 1], &sorted[i]) == 0)
                                note_duplicate(sc, &sorted[i], top);
        }
        for (size_t i = base; sc->n_owned > 0 && i < sc->n_keys; i++)
                if (key_owned(sc, &sc->keys[i])) {
                        free((char *) sc->keys[i].p);
                        sc->n_owned--;
                }
        sc->n_keys = base;
        return 0;
}

/* The object's keys are all there: a large one is checked sorted; then they go (decoded ones freed). */
static inline __attribute__((always_inline)) int keys_pop(Scanner *sc, size_t base) {
        if (sc->n_keys - base > KEYS_PAIRWISE || sc->n_owned > 0)
                return keys_pop_slow(sc, base);
        sc->n_keys = base;
        return 0;
}

/* A key at p (its opening quote), as the next hop reads it: past its closing quote. The usual key (plain
 * bytes, its closing quote among the 16 bytes after the opening one) is taken from one look, its head
 * with it. */
static inline __attribute__((always_inline)) const uint8_t *scan_key(Scanner *sc, const uint8_t *p, Key *ret) {
        const uint8_t *a, *b;
        bool escaped;
        int r;

#if defined(__SSE2__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (sc->end - p > 16) {
                unsigned m = plain_stops16(p + 1);
                if (m) {
                        unsigned len = (unsigned) __builtin_ctz(m);
                        if (p[1 + len] == '"') {
                                uint64_t w;
                                memcpy(&w, p + 1, 8);
                                *ret = (Key){(const char *) p + 1, len,
                                             len >= 8 ? w : w & ((UINT64_C(1) << (8 * len)) - 1)};
                                return p + len + 2;
                        }
                }
        }
#endif
        p = scan_string(sc, p, &a, &b, &escaped);
        if (!p)
                return NULL;
        r = key_make(sc, a, b, escaped, ret);
        return r < 0 ? scan_fail(sc, r) : p;
}

/* The value vstart..p is at the end of each path in ends: its span, written where it is kept (a path
 * noted again, as under a duplicate key, keeps its place and takes the later value). */
static void note_spans(Scanner *sc, uint32_t ends, const uint8_t *vstart, const uint8_t *p) {
        Span s = {offset_of(sc, vstart), (size_t) (p - vstart)};

        sc->long_id = sc->long_id || ((ends & ((UINT32_C(1) << _ID_PATH_MAX) - 1)) && s.len > MESSAGE_MAX_ID_BYTES);
        for (uint32_t b = ends; b; b &= b - 1) {
                unsigned i = (unsigned) __builtin_ctz(b);
                if (!(sc->noted & (UINT32_C(1) << i))) {
                        sc->slot[i] = (uint8_t) sc->n_spans++;
                        sc->noted |= UINT32_C(1) << i;
                }
                sc->spans[sc->slot[i]] = s;
        }
}

/* Past "{}" or "[]" at p, one level in. */
static const uint8_t *scan_empty(Scanner *sc, const uint8_t *p) {
        return sc->depth >= sc->max_depth ? scan_fail(sc, -E2BIG) : p + 2;
}

/* At a container's opening bracket: steps in, past it and any white space. */
static inline const uint8_t *scan_open(Scanner *sc, const uint8_t *p) {
        if (++sc->depth > sc->max_depth)
                return scan_fail(sc, -E2BIG);
        return skip_ws(p + 1, sc->end);
}

/* After a member or an element: past a comma (*ret_more; and any white space after it, ws_after), or
 * at the closing bracket. Most text has no white space: the byte after a value is looked at first. */
static inline const uint8_t *scan_next(Scanner *sc, const uint8_t *p, char close, bool ws_after, bool *ret_more) {
        const uint8_t *e = sc->end;

        if (p < e && *p <= ' ')
                p = skip_ws(p, e);
        if (p >= e)
                return scan_fail(sc, -EBADMSG);
        *ret_more = *p == ',';
        if (*ret_more)
                return ws_after ? skip_ws(p + 1, e) : p + 1;
        return *p == close ? p : scan_fail(sc, -EBADMSG);
}

/* A string value at p, its opening quote: the usual one (plain bytes only) taken inline. */
static inline __attribute__((always_inline)) const uint8_t *scan_string_value(Scanner *sc, const uint8_t *p) {
        const uint8_t *q = plain_run(p + 1, sc->end);

        if (q < sc->end && *q == '"')
                return q + 1;
        return scan_string_slow(sc, p);
}

/* A value that is no container (a string, a literal, a number) at p (not past the end), c its first
 * byte. Tested in turn, the usual first, not through a switch: a jump table is one more line of .rodata
 * per message (and a line is what a cold wakeup pays for). The empty asm keeps the compiler from making
 * the chain a switch again (it costs no instruction). */
static inline __attribute__((always_inline)) const uint8_t *scan_scalar(Scanner *sc, const uint8_t *p, uint8_t c) {
        if (c == '"')
                return scan_string_value(sc, p);
        __asm__("" : "+r"(c));
        if (c == 't')
                return scan_literal(sc, p, "true", 4);
        if (c == 'f')
                return scan_literal(sc, p, "false", 5);
        if (c == 'n')
                return scan_literal(sc, p, "null", 4);
        return scan_number(sc, p);
}

/* A container the scan is inside, kept while one nested in it is scanned: what its loop needs again
 * when that one closes (a recursion's frames were ~3 stack lines a level; this is 40 bytes). */
typedef struct Level {
        uint64_t buckets;      /* an object's: the buckets (path_bucket()) of its keys so far */
        const uint8_t *vstart; /* where the member's value (or the element) being scanned starts */
        size_t base;           /* an object's: its first key in sc->keys */
        uint32_t mask;         /* an object's: the paths whose keys so far lead to it */
        uint32_t ends;         /* an object's: the paths that end at the member being scanned */
        int8_t member;         /* the top object's: the envelope member being scanned, or -1 */
        bool object;           /* an object, or an array */
} Level;

#define LEVELS_INLINE 16U /* levels held without an allocation */

/* Room for one more level past *l (the next free one), which is moved with the levels. */
static int levels_grow(Level **levels, const Level *levels_inline, Level **l, Level **end) {
        size_t max = (size_t) (*end - *levels), n = max * 2;
        Level *nl;

        if (*levels == levels_inline) {
                nl = malloc(n * sizeof *nl);
                if (nl)
                        memcpy(nl, *levels, max * sizeof *nl);
        } else
                nl = reallocarray(*levels, n, sizeof *nl);
        if (!nl)
                return -ENOMEM;
        *l = nl + (*l - *levels);
        *levels = nl;
        *end = nl + n;
        return 0;
}

/* A value at p, past any white space before it: past it, or NULL with sc->error set. mask: the paths
 * whose keys start at an object here (there: the top one). One loop walks the nesting (bounded by
 * max_depth as it goes in), with what the object or array being scanned needs in locals and what the
 * containers around it need again in levels[], the innermost at l - 1. */
static const uint8_t *scan_value(Scanner *sc, const uint8_t *p, uint32_t mask) {
        Level levels_inline[LEVELS_INLINE], *levels = levels_inline, *l = levels, *lend = levels + LEVELS_INLINE;
        const uint8_t *e = sc->end, *vstart = NULL;
        uint64_t buckets = 0;
        size_t base = 0;
        uint32_t ends = 0;
        int member = -1, r;
        bool more;
        uint8_t c;

        p = skip_ws(p, e);
        if (unlikely(p >= e))
                goto bad;
        c = *p;
        if (c == '[')
                goto array;
        if (c == '{') {
                sc->top_object = true;
                goto object;
        }
        /* Not a container: nothing to come back to. */
        p = scan_scalar(sc, p, c);
        goto out;

object: /* at an object's '{', mask its own */
        p = scan_open(sc, p);
        if (unlikely(!p))
                goto out;
        base = sc->n_keys;
        buckets = 0;
        if (p < e && *p == '}')
                goto object_end;
        for (;;) {
                uint32_t sub = 0;
                unsigned h;
                Key *k;

                if (p >= e || *p != '"') {
                        p = skip_ws(p, e);
                        if (unlikely(p >= e || *p != '"'))
                                goto bad;
                }
                /* The key is written where it is kept, and kept from then on (for the duplicate check,
                 * and to be freed if it was decoded). */
                if (unlikely(sc->n_keys == sc->max_keys) && (r = keys_grow(sc)) < 0)
                        goto fail;
                k = &sc->keys[sc->n_keys];
                p = scan_key(sc, p, k);
                if (unlikely(!p))
                        goto out;
                h = path_bucket(k);
                if (unlikely(buckets & (UINT64_C(1) << h)) && sc->n_keys - base < KEYS_PAIRWISE)
                        keys_compare(sc, base, k);
                sc->n_keys++;
                buckets |= UINT64_C(1) << h;
                ends = 0;
                member = -1;
                if (mask) {
                        /* Every container above an object that paths lead to is an object reached by
                         * one of their keys: its keys are at level depth - 1, the top one's at 0 (and
                         * only it has envelope members). */
                        size_t level = (size_t) sc->depth - 1;
                        const PathSlot *pk = path_index_find(level, h, k);
                        if (pk) {
                                sub = pk->paths & mask;
                                ends = sub & scan_hot.ends[level];
                                member = pk->member;
                        }
                }
                if (p >= e || *p != ':') {
                        p = skip_ws(p, e);
                        if (unlikely(p >= e || *p != ':'))
                                goto bad;
                }
                /* The value: most text has no white space before it, so its first byte is looked at
                 * first. */
                if (unlikely(++p >= e))
                        goto bad;
                c = *p;
                if (c <= ' ') {
                        p = skip_ws(p, e);
                        if (unlikely(p >= e))
                                goto bad;
                        c = *p;
                }
                vstart = p;
                if (c == '"') {
                        p = scan_string_value(sc, p);
                        if (unlikely(!p))
                                goto out;
                } else if (c == '{' || c == '[') {
                        /* An empty one is taken here ("arguments":{}): nothing to come back to. */
                        if (p + 1 < e && p[1] == c + 2) {
                                p = scan_empty(sc, p);
                                if (unlikely(!p))
                                        goto out;
                        } else {
                                if (unlikely(l == lend) && (r = levels_grow(&levels, levels_inline, &l, &lend)) < 0)
                                        goto fail;
                                l->buckets = buckets;
                                l->vstart = vstart;
                                l->base = base;
                                l->mask = mask;
                                l->ends = ends;
                                l->member = (int8_t) member;
                                l->object = true;
                                l++;
                                mask = sub & ~ends;
                                if (c == '{')
                                        goto object;
                                goto array;
                        }
                } else {
                        p = scan_scalar(sc, p, c);
                        if (unlikely(!p))
                                goto out;
                }
        member_end: /* past the value of a member, which started at vstart */
                if (ends && sc->spans)
                        note_spans(sc, ends, vstart, p);
                if (member >= 0 && !sc->has_member[member]) {
                        sc->has_member[member] = true;
                        sc->members[member] = (Span){offset_of(sc, vstart), (size_t) (p - vstart)};
                }
                p = scan_next(sc, p, '}', false, &more);
                if (unlikely(!p))
                        goto out;
                if (!more)
                        break;
        }
object_end: /* at the object's '}' */
        if (unlikely((r = keys_pop(sc, base)) < 0))
                goto fail;
        sc->depth--;
        p++;
        goto up;

array: /* at an array's '[' */
        p = scan_open(sc, p);
        if (unlikely(!p))
                goto out;
        if (p < e && *p == ']')
                goto array_end;
        for (;;) {
                vstart = p;
                if (unlikely(p >= e))
                        goto bad;
                c = *p;
                if (c == '{' || c == '[') {
                        if (p + 1 < e && p[1] == c + 2) {
                                p = scan_empty(sc, p);
                                if (unlikely(!p))
                                        goto out;
                        } else {
                                if (unlikely(l == lend) && (r = levels_grow(&levels, levels_inline, &l, &lend)) < 0)
                                        goto fail;
                                l->vstart = vstart;
                                l->object = false;
                                l++;
                                mask = 0;
                                if (c == '{')
                                        goto object;
                                goto array;
                        }
                } else {
                        p = scan_scalar(sc, p, c);
                        if (unlikely(!p))
                                goto out;
                }
        element_end: /* past an element, which started at vstart */
                if (unlikely(sc->want_elements) && sc->depth == 1) {
                        if (sc->n_elements >= sc->max_elements) {
                                size_t k = sc->max_elements ? sc->max_elements * 2 : 16;
                                Span *el = reallocarray(sc->elements, k, sizeof(Span));
                                if (!el) {
                                        r = -ENOMEM;
                                        goto fail;
                                }
                                sc->elements = el;
                                sc->max_elements = k;
                        }
                        sc->elements[sc->n_elements++] = (Span){offset_of(sc, vstart), (size_t) (p - vstart)};
                }
                p = scan_next(sc, p, ']', true, &more);
                if (unlikely(!p))
                        goto out;
                if (!more)
                        break;
        }
array_end: /* at the array's ']' */
        sc->depth--;
        p++;

up: /* past a container: back in the one around it, if any */
        if (l == levels)
                goto out;
        l--;
        vstart = l->vstart;
        if (!l->object)
                goto element_end;
        buckets = l->buckets;
        base = l->base;
        mask = l->mask;
        ends = l->ends;
        member = l->member;
        goto member_end;

bad:
        r = -EBADMSG;
fail:
        p = scan_fail(sc, r);
out:
        if (levels != levels_inline)
                free(levels);
        return p;
}

/* The whole text is one JSON value and white space. Nesting is bounded before cJSON (which recurses)
 * ever reads it. */
static int scan_text(Scanner *sc) {
        const uint8_t *p;

        if (!scan_hot.made)
                path_index_make();
        p = scan_value(sc, sc->s, (uint32_t) ((1ULL << SCAN_PATHS) - 1));
        if (!p)
                return sc->error;
        return skip_ws(p, sc->end) == sc->end ? 0 : -EBADMSG;
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

#define PROBLEM_MAX 160

/* The problem's own room, made when one is formatted (rarely: the usual message has none). */
static char *problem_buf(Message *m) {
        if (!m->problem_buf)
                m->problem_buf = malloc(PROBLEM_MAX);
        return m->problem_buf;
}

static void set_problem(Message *m, const char *fmt, const char *arg) {
        char *b = problem_buf(m);

        if (b)
                snprintf(b, PROBLEM_MAX, fmt, arg);
        m->problem = b ?: "out of memory";
        m->kind = JSONRPC_INVALID;
}

/* Every id a hop keeps in a table (request ids, progress tokens, task ids, cancelled ids) has a
 * bounded length: past it the message is invalid, and an over-long id of its own is not echoed. */
static void check_id_lengths(Message *m, bool any_long) {
        IdField f[16];
        size_t n;

        /* The usual message has no field that long anywhere the table looks (the scan says): nothing to
         * ask it. */
        if (!any_long)
                return;
        n = ids_fields(m, f, ELEMENTSOF(f));
        for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++) {
                if (f[i].len <= MESSAGE_MAX_ID_BYTES)
                        continue;
                /* Not echoed: a reply carries message_id_json(), made from id_text. */
                if (f[i].path == ID_PATH_ID)
                        m->id = NULL, m->id_text = NULL;
                m->method = NULL;
                m->method_len = 0;
                char buf[64];
                snprintf(buf, sizeof buf, "%%s is longer than %u bytes, the limit", MESSAGE_MAX_ID_BYTES);
                return set_problem(m, buf,
                                   f[i].kind == ID_KIND_PROGRESS ? "the progress token"
                                   : f[i].kind == ID_KIND_TASK   ? "the task id"
                                   : f[i].path == ID_PATH_ID     ? "\"id\""
                                                                 : "\"requestId\"");
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
        /* An integer of up to 15 digits (integer_text()), read as it is checked. */
        size_t i = t[0] == '-', digits = len - i;
        long long v = 0;
        if (digits >= 1 && digits <= 15 && (t[i] != '0' || digits == 1)) {
                for (; i < len && (unsigned) (t[i] - '0') <= 9; i++)
                        v = v * 10 + (t[i] - '0');
        }
        if (digits >= 1 && i == len) {
                /* Up to 15 digits: the double holds it exactly, and valueint is cJSON's clamp of it, done on
                 * the integer (no double constants: one line of .rodata less per message). */
                v = t[0] == '-' ? -v : v;
                it->type = cJSON_Number;
                it->valuedouble = (double) v;
                it->valueint = v >= INT_MAX ? INT_MAX : v <= INT_MIN ? INT_MIN : (int) v;
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
                /* Of the items made here, strings and integers are valid ids, null and booleans not. */
                id_ok = v == &m->id_item ? v->type == cJSON_String || v->type == cJSON_Number
                                         : json_id_valid(v, m->id_buf, ids->len);
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
            ((sc->members[MEMBER_JSONRPC].len != 5 ||
              memcmp(m->text + sc->members[MEMBER_JSONRPC].start, "\"2.0\"", 5) != 0) &&
             !string_is(m->text, sc->members[MEMBER_JSONRPC], "2.0"))) {
                m->problem = "\"jsonrpc\" must be \"2.0\"";
                return;
        }
        if (method_type) {
                const Span *ms = &sc->members[MEMBER_METHOD];
                if (method_type != '"') {
                        m->problem = "\"method\" must be a string";
                        return;
                }
                /* A NUL would end the name we read, not the one the next hop reads. Only an escape can
                 * make one: a name without one is copied as it is. */
                size_t method_len = ms->len - 2;
                if (!memchr(m->text + ms->start + 1, '\\', method_len)) {
                        memcpy(m->method_buf, m->text + ms->start + 1, method_len);
                        m->method_buf[method_len] = 0;
                } else if ((method_len = string_decode(m->text, ms->start + 1, ms->start + ms->len - 1,
                                                       m->method_buf)) != strlen(m->method_buf)) {
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
                /* No literal is that long: a longer name is none of them. */
                m->method_len = method_len > UINT32_MAX ? UINT32_MAX : (uint32_t) method_len;
                m->id_rules = ids_rules_of(m->kind, m->method);
                return check_id_lengths(m, sc->long_id);
        }
        if (sc->has_member[MEMBER_RESULT] != sc->has_member[MEMBER_ERROR] && has_id) {
                /* A response to a request never sent is dropped by the caller; its id may be null. */
                m->kind = JSONRPC_RESPONSE;
                m->id = m->id_value ?: &m->id_item;
                m->id_rules = ids_rules_of(m->kind, NULL);
                return check_id_lengths(m, sc->long_id);
        }
        m->problem = "a message needs \"method\", or \"id\" with exactly one of \"result\" and \"error\"";
}

void message_prefetch(void) {
        /* The index's words and constants and its first level's slots (a message's own keys), and the
         * first room's header. */
        prefetch_lines(&scan_hot, offsetof(typeof(scan_hot), slots[1]));
        prefetchw_lines(scan_hot.room[0], 256);
}

/* One allocation holds the message, its text, its id's text and its method's name. */
static Message *message_alloc(const char *line, size_t len, const Scanner *sc) {
        size_t id_len = sc->has_member[MEMBER_ID] ? sc->members[MEMBER_ID].len : 0;
        size_t method_len = sc->has_member[MEMBER_METHOD] ? sc->members[MEMBER_METHOD].len : 0;
        size_t tail = sizeof(Message) + sc->n_spans * sizeof(Span) + len + 1 + 2 * (id_len + 1) + method_len + 1;
        /* message_id_json()'s room last, aligned: touched only when a reply asks for it. */
        size_t raw = (tail + _Alignof(cJSON) - 1) & ~(_Alignof(cJSON) - 1), size = id_len ? raw + sizeof(cJSON) : tail;
        /* None under ASan (HAVE_ASAN): a room's next message would hide a use after unref. */
        unsigned r = size <= MESSAGE_ROOM && !HAVE_ASAN ? 0 : MESSAGE_ROOMS;
        Message *m;

        while (r < MESSAGE_ROOMS && scan_hot.room_taken[r])
                r++;
        if (r < MESSAGE_ROOMS) {
                scan_hot.room_taken[r] = true;
                m = (Message *) scan_hot.room[r];
        } else if (!(m = malloc(size)))
                return NULL;
        /* On every message's path: the fields that may be read before they are written, and no more. */
        memset(m, 0, offsetof(Message, id_item));
        m->n_ref = 1;
        m->noted = sc->noted;
        /* The message's own slots, in path order (a loop, not a call into libc for a span or two). */
        unsigned j = 0;
        for (uint32_t e = sc->noted; e; e &= e - 1, j++) {
                unsigned p = (unsigned) __builtin_ctz(e);
                m->slot[p] = (uint8_t) j;
                m->noted_spans[j] = sc->spans[sc->slot[p]];
        }
        m->text = (char *) (m->noted_spans + sc->n_spans);
        memcpy(m->text, line, len);
        m->text[len] = 0;
        m->len = len;
        m->id_buf = m->text + len + 1;
        m->id_str = m->id_buf + id_len + 1;
        m->method_buf = m->id_str + id_len + 1;
        m->id_buf[0] = m->id_str[0] = m->method_buf[0] = 0;
        m->id_raw = id_len ? (cJSON *) ((char *) m + raw) : NULL;
        return m;
}

int message_parse_envelope(const char *line, size_t len, unsigned max_depth, Message **ret) {
        Span spans[SCAN_PATHS]; /* sc.noted says which are written */
        Key keys[KEYS_INLINE];
        Scanner sc;
        Message *m;
        int r;

        scanner_init(&sc, line, len, max_depth);
        sc.spans = spans;
        sc.keys = sc.keys_inline = keys;
        sc.max_keys = KEYS_INLINE;
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
        /* An over-long id is never echoed, whatever else is wrong with the message. */
        if (m->kind == JSONRPC_INVALID && sc.has_member[MEMBER_ID] && sc.members[MEMBER_ID].len > MESSAGE_MAX_ID_BYTES)
                m->id = NULL, m->id_text = NULL;
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

cJSON *message_id_json(const Message *m) {
        if (!m->id_text)
                return NULL;
        /* Written again on each use: the same item each time (no flag to keep). */
        *m->id_raw = (cJSON){.type = cJSON_Raw, .valuestring = m->id_buf};
        return m->id_raw;
}

Message *message_ref(Message *m) {
        if (m)
                m->n_ref++;
        return m;
}

Message *message_unref(Message *m) {
        if (!m || --m->n_ref > 0)
                return NULL;
        if (m->json) /* an envelope-only message has no tree: no call into libcjson */
                cJSON_Delete(m->json);
        if (m->id_value)
                cJSON_Delete(m->id_value);
        if (m->problem_buf)
                free(m->problem_buf);
        size_t off = (size_t) ((uintptr_t) m - (uintptr_t) scan_hot.room);
        if (off < sizeof scan_hot.room)
                scan_hot.room_taken[off / MESSAGE_ROOM] = false;
        else
                free(m);
        return NULL;
}

bool message_is_batch(const char *line, size_t len) {
        for (size_t i = 0; i < len; i++) {
                /* JSON's whitespace, tested inline: strchr() would be one more libc page per message */
                if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')
                        continue;
                return line[i] == '[';
        }
        return false;
}

int message_split_batch(const char *line, size_t len, unsigned max_depth, Span **ret_spans, size_t *ret_n) {
        Scanner sc;
        int r;

        if (!message_is_batch(line, len))
                return -EBADMSG;
        scanner_init(&sc, line, len, max_depth);
        sc.want_elements = true;
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

int message_splice_buf(const Message *m, const Splice *s, size_t n, char *buf, size_t size, char **ret_text,
                       size_t *ret_len) {
        size_t len = m->len, at = 0, o = 0;
        char *out;

        for (size_t i = 0; i < n; i++) {
                if (s[i].span.start < at || s[i].span.start + s[i].span.len > m->len)
                        return -EINVAL;
                at = s[i].span.start + s[i].span.len;
                len = len - s[i].span.len + s[i].len;
        }
        out = len < size ? buf : malloc(len + 1);
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

int message_splice(const Message *m, const Splice *s, size_t n, char **ret_text, size_t *ret_len) {
        return message_splice_buf(m, s, n, NULL, 0, ret_text, ret_len);
}

/* Walks the validated text from the value at p along path (object keys); at its end, *ret spans that
 * value. */
static int find_path(Scanner *sc, const uint8_t *p, const char *const *path, Span *ret) {
        const uint8_t *e = sc->end;

        p = skip_ws(p, e);
        if (!*path) {
                const uint8_t *end = scan_value(sc, p, 0);
                if (!end)
                        return sc->error;
                *ret = (Span){offset_of(sc, p), (size_t) (end - p)};
                return 0;
        }
        if (p >= e || *p != '{')
                return -ENOENT;
        p = skip_ws(p + 1, e);
        if (p < e && *p == '}')
                return -ENOENT;
        for (;;) {
                const uint8_t *ka, *kb;
                bool escaped;

                p = scan_string(sc, skip_ws(p, e), &ka, &kb, &escaped);
                if (!p)
                        return sc->error;
                p = skip_ws(p, e);
                if (p >= e || *p != ':')
                        return -EBADMSG;
                p++;
                if (key_equals((const char *) sc->s, offset_of(sc, ka), offset_of(sc, kb), path[0]))
                        return find_path(sc, p, path + 1, ret); /* keys are unique: message_parse() saw to it */
                p = scan_value(sc, p, 0);
                if (!p)
                        return sc->error;
                p = skip_ws(p, e);
                if (p >= e || *p != ',')
                        return -ENOENT;
                p++;
        }
}

static Scanner scanner_of(const Message *m, size_t len) {
        Scanner sc;
        scanner_init(&sc, m->text, len, UINT_MAX);
        return sc;
}

int message_find(const Message *m, const char *const *path, Span *ret) {
        _cleanup_(scanner_done) Scanner sc = scanner_of(m, m->len);
        Span s;
        int r = find_path(&sc, sc.s, path, &s);

        if (r < 0)
                return r;
        *ret = s;
        return 0;
}

int message_members(const Message *m, Span object, Member **ret, size_t *ret_n) {
        _cleanup_(scanner_done) Scanner sc = scanner_of(m, object.start + object.len);
        _cleanup_free_ Member *list = NULL;
        const uint8_t *e = sc.end, *p = skip_ws(sc.s + object.start, e);
        size_t n = 0, size = 0;

        if (object.len == 0 || p >= e || *p != '{')
                return -ENOENT;
        p = skip_ws(p + 1, e);
        while (p < e && *p != '}') {
                const uint8_t *ka, *kb, *vstart;
                bool escaped;

                p = scan_string(&sc, skip_ws(p, e), &ka, &kb, &escaped);
                if (!p)
                        return sc.error;
                p = skip_ws(p, e);
                if (p >= e || *p != ':')
                        return -EBADMSG;
                vstart = p = skip_ws(p + 1, e);
                p = scan_value(&sc, p, 0);
                if (!p)
                        return sc.error;
                if (n >= size) {
                        size_t k = size ? size * 2 : 8;
                        Member *l = reallocarray(list, k, sizeof *l);
                        if (!l)
                                return -ENOMEM;
                        list = l, size = k;
                }
                list[n++] = (Member){
                        .key = {offset_of(&sc, ka), (size_t) (kb - ka)},
                        .member = {offset_of(&sc, ka) - 1, (size_t) (p - (ka - 1))},
                        .value = {offset_of(&sc, vstart), (size_t) (p - vstart)},
                };
                p = skip_ws(p, e);
                if (p < e && *p == ',')
                        p++;
                p = skip_ws(p, e);
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

bool message_span_has_nul(const Message *m, Span s) {
        const char *p, *e;

        if (s.len < 2 || m->text[s.start] != '"')
                return false;
        /* Only a \u0000 escape decodes to a NUL: the scan took the string (no raw control byte, every
         * escape whole, a \u escape's low half never 0000). Read in place: nothing to allocate. */
        for (p = m->text + s.start + 1, e = m->text + s.start + s.len - 1; (p = memchr(p, '\\', (size_t) (e - p)));
             p += 2)
                if (p[1] == 'u' && memcmp(p + 2, "0000", 4) == 0)
                        return true;
        return false;
}

int message_path_has_nul(const Message *m, const char *const *path) {
        Span s;
        int r = message_find(m, path, &s);

        if (r == -ENOENT)
                return 0;
        if (r < 0) /* out of memory: the text is one the scan took */
                return r;
        return message_span_has_nul(m, s);
}

bool message_has_envelope(const Message *m) {
        /* A noted span is never empty (a value is at least a byte): its bit says it all. */
        return m->noted & ((UINT32_C(1) << (_ID_PATH_MAX + ROUTE_PATH_META_VERSION)) |
                           (UINT32_C(1) << (_ID_PATH_MAX + ROUTE_PATH_META_CAPABILITIES)) |
                           (UINT32_C(1) << (_ID_PATH_MAX + ROUTE_PATH_META_CLIENT_INFO)) |
                           (UINT32_C(1) << (_ID_PATH_MAX + ROUTE_PATH_META_LOG_LEVEL)));
}

char *message_span_dup(const Message *m, Span s) {
        return strndup(m->text + s.start, s.len);
}
