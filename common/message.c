/* The message layer: a peer's line parsed once and validated (strict JSON, no duplicate keys, typed
 * envelope), with the byte spans of its id-carrying fields, so that what goes on is the peer's own bytes
 * with only our ids spliced in. cJSON parses the values; the scan here only checks the grammar cJSON is
 * lenient about and notes where the id fields are. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "framing.h"
#include "macros.h"
#include "message.h"

typedef struct Scanner {
        const char *s;
        size_t pos, len;
        unsigned depth, max_depth;
        Span *spans;        /* NULL: record nothing */
        bool want_elements; /* a batch: note the spans of the top-level array's elements */
        Span *elements;
        size_t n_elements, max_elements;
} Scanner;

static void skip_ws(Scanner *sc) {
        while (sc->pos < sc->len && strchr(" \t\r\n", sc->s[sc->pos]) && sc->s[sc->pos])
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

/* A string token; on success ret_start and ret_end bound its contents (without the quotes). Plain runs
 * are skipped through a table: this loop is where a large payload's bytes go by. */
static int scan_string(Scanner *sc, size_t *ret_start, size_t *ret_end) {
        const uint8_t *s = (const uint8_t *) sc->s;
        size_t p = sc->pos, n = sc->len, start;

        if (p >= n || s[p] != '"')
                return -EBADMSG;
        start = ++p;
        for (;;) {
                while (p < n && !string_byte[s[p]])
                        p++;
                if (p >= n)
                        return -EBADMSG;
                if (s[p] == '"')
                        break;
                if (s[p] < 0x20)
                        return -EBADMSG; /* JSON wants control characters escaped; NUL among them */
                if (s[p] == '\\') {
                        if (++p >= n)
                                return -EBADMSG;
                        if (s[p] == 'u') {
                                if (p + 4 >= n)
                                        return -EBADMSG;
                                for (int k = 1; k <= 4; k++)
                                        if (hexval((char) s[p + k]) < 0)
                                                return -EBADMSG;
                                p += 5;
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
        int r = scan_open(sc, '}');

        while (r == 0) {
                size_t ka, kb;
                uint32_t sub = 0;

                skip_ws(sc);
                r = scan_string(sc, &ka, &kb);
                if (r < 0)
                        return r;
                for (unsigned p = 0; mask && p < _ID_PATH_MAX; p++)
                        if ((mask & (1U << p)) && key_equals(sc->s, ka, kb, id_paths[p][level]))
                                sub |= 1U << p;
                skip_ws(sc);
                if (sc->pos >= sc->len || sc->s[sc->pos] != ':')
                        return -EBADMSG;
                sc->pos++;
                skip_ws(sc);
                size_t vstart = sc->pos;
                uint32_t deeper = 0;
                for (unsigned p = 0; sub && p < _ID_PATH_MAX; p++)
                        if ((sub & (1U << p)) && id_paths[p][level + 1])
                                deeper |= 1U << p;
                r = scan_value(sc, level + 1, deeper, false);
                if (r < 0)
                        return r;
                for (unsigned p = 0; sc->spans && sub && p < _ID_PATH_MAX; p++)
                        if ((sub & (1U << p)) && !id_paths[p][level + 1])
                                sc->spans[p] = (Span){vstart, sc->pos - vstart};
                r = scan_next(sc, '}');
        }
        return r < 0 ? r : 0;
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
                return scan_string(sc, &a, &b);
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
        int r = scan_value(sc, 0, sc->spans ? (1U << _ID_PATH_MAX) - 1 : 0, true);
        if (r < 0)
                return r;
        skip_ws(sc);
        return sc->pos == sc->len ? 0 : -EBADMSG;
}

static int cmp_keys(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The first key that appears twice in one object, anywhere in j; NULL if none. */
static const char *duplicate_key(const cJSON *j) {
        const cJSON *c;

        if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
                return NULL;
        if (cJSON_IsObject(j)) {
                size_t n = 0;
                for (c = j->child; c; c = c->next)
                        n++;
                if (n > 1 && n <= 16) {
                        for (c = j->child; c; c = c->next)
                                for (const cJSON *d = c->next; d; d = d->next)
                                        if (streq(c->string, d->string))
                                                return c->string;
                } else if (n > 16) {
                        _cleanup_free_ const char **keys = malloc(n * sizeof *keys);
                        size_t i = 0;
                        if (!keys)
                                return "(out of memory)";
                        for (c = j->child; c; c = c->next)
                                keys[i++] = c->string;
                        qsort(keys, n, sizeof *keys, cmp_keys);
                        for (i = 1; i < n; i++)
                                if (streq(keys[i - 1], keys[i]))
                                        return keys[i];
                }
        }
        for (c = j->child; c; c = c->next) {
                const char *k = duplicate_key(c);
                if (k)
                        return k;
        }
        return NULL;
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
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++) {
                if (f[i].len <= MESSAGE_MAX_ID_BYTES)
                        continue;
                if (f[i].path == ID_PATH_ID) {
                        m->id = NULL, m->id_text = NULL;
                        m->id_json = (cJSON_Delete(m->id_json), NULL);
                }
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

/* The envelope: the same rules jsonrpc_classify() applies, with ids taken by their text. */
static void classify(Message *m) {
        const cJSON *j = m->json, *v, *method, *id, *params;
        const Span *ids = &m->spans[ID_PATH_ID];
        bool id_ok;

        m->kind = JSONRPC_INVALID;
        if (!cJSON_IsObject(j)) {
                m->problem = "a message must be a JSON object";
                return;
        }
        id = cJSON_GetObjectItemCaseSensitive(j, "id");
        id_ok = id && ids->len > 0 && json_id_valid(id, m->text + ids->start, ids->len);
        if (id_ok) {
                _cleanup_free_ char *t = strndup(m->text + ids->start, ids->len);
                m->id = id;
                m->id_json = t ? cJSON_CreateRaw(t) : NULL;
                if (!m->id_json) {
                        m->id = NULL;
                        m->problem = "out of memory";
                        return;
                }
                m->id_text = m->id_json->valuestring;
        }
        const char *dup = duplicate_key(j);
        if (dup) {
                /* Which of two ids would the next hop read? Neither: answer with null. */
                if (streq(dup, "id")) {
                        m->id = NULL, m->id_text = NULL;
                        m->id_json = (cJSON_Delete(m->id_json), NULL);
                }
                return set_problem(m, "duplicate key \"%.64s\" in an object", dup);
        }
        v = cJSON_GetObjectItemCaseSensitive(j, "jsonrpc");
        if (!cJSON_IsString(v) || !streq(v->valuestring, "2.0")) {
                m->problem = "\"jsonrpc\" must be \"2.0\"";
                return;
        }
        method = cJSON_GetObjectItemCaseSensitive(j, "method");
        if (method) {
                if (!cJSON_IsString(method)) {
                        m->problem = "\"method\" must be a string";
                        return;
                }
                params = cJSON_GetObjectItemCaseSensitive(j, "params");
                if (params && !cJSON_IsObject(params) && !cJSON_IsArray(params)) {
                        m->problem = "\"params\" must be an object or an array";
                        return;
                }
                if (id && !id_ok) {
                        m->problem = "\"id\" must be a string or an integer";
                        return;
                }
                if (ids_method_kind_mismatch(id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION, method->valuestring))
                        return set_problem(m,
                                           id ? "\"%.64s\" is a notification: it takes no \"id\""
                                              : "\"%.64s\" is a request: it needs an \"id\"",
                                           method->valuestring);
                m->kind = id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION;
                m->method = method->valuestring;
                m->params = params;
                return check_id_lengths(m);
        }
        if (cJSON_HasObjectItem(j, "result") != cJSON_HasObjectItem(j, "error") && id) {
                /* A response to a request never sent is dropped by the caller; its id may be null. */
                m->kind = JSONRPC_RESPONSE;
                m->id = id;
                return check_id_lengths(m);
        }
        m->problem = "a message needs \"method\", or \"id\" with exactly one of \"result\" and \"error\"";
}

int message_parse(const char *line, size_t len, unsigned max_depth, Message **ret) {
        Message *m;
        Scanner sc;
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        /* Not strndup(): the line may hold a NUL, which the scan must see to refuse. */
        m->text = malloc(len + 1);
        if (m->text) {
                memcpy(m->text, line, len);
                m->text[len] = 0;
        } else {
                free(m);
                return -ENOMEM;
        }
        m->n_ref = 1;
        m->len = len;
        /* One pass checks it all: grammar, UTF-8 inside strings (outside them JSON is ASCII), no NUL,
         * and nesting, before cJSON (which recurses) sees it. */
        sc = (Scanner){.s = m->text, .len = len, .max_depth = max_depth, .spans = m->spans};
        r = scan_text(&sc);
        if (r >= 0) {
                m->json = cJSON_ParseWithLength(m->text, len);
                if (!m->json)
                        r = -EBADMSG; /* what the scan let through and cJSON did not: lone surrogates */
        }
        if (r < 0) {
                message_unref(m);
                return r;
        }
        classify(m);
        *ret = m;
        return 0;
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
        cJSON_Delete(m->id_json);
        free(m->text);
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
                int r;

                skip_ws(sc);
                r = scan_string(sc, &ka, &kb);
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
        Scanner sc = {.s = m->text, .len = m->len, .max_depth = UINT_MAX};
        Span s;
        int r = find_path(&sc, path, &s);

        if (r < 0)
                return r;
        *ret = s;
        return 0;
}

int message_members(const Message *m, Span object, Member **ret, size_t *ret_n) {
        Scanner sc = {.s = m->text, .len = object.start + object.len, .pos = object.start, .max_depth = UINT_MAX};
        _cleanup_free_ Member *list = NULL;
        size_t n = 0, size = 0;

        skip_ws(&sc);
        if (object.len == 0 || sc.pos >= sc.len || sc.s[sc.pos] != '{')
                return -ENOENT;
        sc.pos++;
        skip_ws(&sc);
        while (sc.pos < sc.len && sc.s[sc.pos] != '}') {
                size_t ka, kb, vstart;
                int r;

                skip_ws(&sc);
                r = scan_string(&sc, &ka, &kb);
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

char *message_span_dup(const Message *m, Span s) {
        return strndup(m->text + s.start, s.len);
}
