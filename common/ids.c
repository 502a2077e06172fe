/* The id table: which field of which message carries which kind of id, and the one place where a
 * message's ids are translated at a hop. Call sites never rewrite an id themselves. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ids.h"
#include "macros.h"
#include "message.h"

const char *const id_paths[_ID_PATH_MAX][ID_PATH_DEPTH + 1] = {
        [ID_PATH_ID] = {"id"},
        [ID_PATH_PARAMS_REQUEST_ID] = {"params", "requestId"},
        [ID_PATH_PARAMS_META_PROGRESS] = {"params", "_meta", "progressToken"},
        [ID_PATH_PARAMS_PROGRESS] = {"params", "progressToken"},
        [ID_PATH_PARAMS_TASK_ID] = {"params", "taskId"},
        [ID_PATH_RESULT_TASK_ID] = {"result", "task", "taskId"},
        [ID_PATH_RESULT_TASKS] = {"result", "tasks"},
};

/* method NULL: any message of that kind. Eras add their methods' fields here. A message's path reads the
 * rules' paths and id kinds from rule_index (below), not from here. */
typedef struct IdRule {
        const char *method;
        unsigned char kind;    /* JsonRpcKind */
        unsigned char path;    /* IdPath */
        unsigned char id_kind; /* IdKind */
} IdRule;

#define RULE(k, m, p, ik) {.method = (m), .kind = (k), .path = (p), .id_kind = (ik)}
static const IdRule id_rules[] = {
        RULE(JSONRPC_REQUEST, NULL, ID_PATH_ID, ID_KIND_REQUEST),
        RULE(JSONRPC_RESPONSE, NULL, ID_PATH_ID, ID_KIND_REQUEST),
        RULE(JSONRPC_REQUEST, NULL, ID_PATH_PARAMS_META_PROGRESS, ID_KIND_PROGRESS),
        RULE(JSONRPC_NOTIFICATION, "notifications/cancelled", ID_PATH_PARAMS_REQUEST_ID, ID_KIND_CANCELLED),
        RULE(JSONRPC_NOTIFICATION, "notifications/progress", ID_PATH_PARAMS_PROGRESS, ID_KIND_PROGRESS),
        RULE(JSONRPC_REQUEST, "tasks/get", ID_PATH_PARAMS_TASK_ID, ID_KIND_TASK),
        RULE(JSONRPC_REQUEST, "tasks/result", ID_PATH_PARAMS_TASK_ID, ID_KIND_TASK),
        RULE(JSONRPC_REQUEST, "tasks/cancel", ID_PATH_PARAMS_TASK_ID, ID_KIND_TASK),
        RULE(JSONRPC_NOTIFICATION, "notifications/tasks/status", ID_PATH_PARAMS_TASK_ID, ID_KIND_TASK),
        RULE(JSONRPC_RESPONSE, NULL, ID_PATH_RESULT_TASK_ID, ID_KIND_TASK),
};
_Static_assert(_ID_PATH_MAX <= 256 && JSONRPC_INVALID < 256, "a rule's fields are bytes");

/* Whether the rule names this method: its first two bytes settle most of them without a call. */
static bool rule_method_is(const IdRule *r, const char *method) {
        return r->method[0] == method[0] && method[0] && r->method[1] == method[1] && streq(r->method, method);
}

/* Made once from the table: the pairs of first bytes the rules' methods begin with ("no", "ta"), and
 * for each kind of message the rules that name no method. Most methods (tools/call, resources/read)
 * begin with none of the pairs: their rules are their kind's, with no name compared. */
static struct {
        uint32_t any_method[JSONRPC_INVALID + 1]; /* by JsonRpcKind (INVALID is the last) */
        bool made;
        unsigned char n_pairs;
        char pairs[ELEMENTSOF(id_rules)][2];
        /* Each rule's path and id kind, which a message's fields are found and mapped by: the table
         * itself (pointers: relocated, read-only after start) sits on a page of its own that no other
         * part of a message's path reads. */
        unsigned char path[ELEMENTSOF(id_rules)], id_kind[ELEMENTSOF(id_rules)];
} rule_index _hot_ __attribute__((aligned(8))); /* 64 bytes, read by every message */
_Static_assert(sizeof(rule_index) <= 64, "the rule index is one 64-byte line");

static void rule_index_make(void) {
        for (size_t i = 0; i < ELEMENTSOF(id_rules); i++) {
                const char *rm = id_rules[i].method;
                size_t k = 0;

                rule_index.path[i] = id_rules[i].path;
                rule_index.id_kind[i] = id_rules[i].id_kind;

                if (!rm) {
                        rule_index.any_method[id_rules[i].kind] |= UINT32_C(1) << i;
                        continue;
                }
                while (k < rule_index.n_pairs && (rule_index.pairs[k][0] != rm[0] || rule_index.pairs[k][1] != rm[1]))
                        k++;
                if (k == rule_index.n_pairs)
                        memcpy(rule_index.pairs[rule_index.n_pairs++], rm, 2);
        }
        rule_index.made = true;
}

static inline bool rules_may_name(const char *method) {
        if (!rule_index.made)
                rule_index_make();
        if (!method || !method[0])
                return false;
        for (size_t k = 0; k < rule_index.n_pairs; k++)
                if (rule_index.pairs[k][0] == method[0] && rule_index.pairs[k][1] == method[1])
                        return true;
        return false;
}

bool ids_method_kind_mismatch(JsonRpcKind kind, const char *method) {
        if (!rules_may_name(method))
                return false;
        for (size_t i = 0; i < ELEMENTSOF(id_rules); i++)
                if (id_rules[i].method && id_rules[i].kind != kind && rule_method_is(&id_rules[i], method))
                        return true;
        return false;
}

/* The value at a path, walked in the parsed tree (the scan found its bytes; the tree its type). */
static const cJSON *value_at(const cJSON *j, IdPath p) {
        for (unsigned l = 0; j && id_paths[p][l]; l++)
                j = cJSON_GetObjectItemCaseSensitive(j, id_paths[p][l]);
        return j;
}

_Static_assert(ELEMENTSOF(id_rules) <= 32, "a message's rules are a 32-bit mask");

uint32_t ids_rules_of(JsonRpcKind kind, const char *method) {
        uint32_t rules = 0;

        if (!rules_may_name(method))
                return rule_index.any_method[kind];
        for (size_t i = 0; i < ELEMENTSOF(id_rules); i++)
                if (id_rules[i].kind == kind && (!id_rules[i].method || rule_method_is(&id_rules[i], method)))
                        rules |= UINT32_C(1) << i;
        return rules;
}

/* The field of m that rule i names, if m has one there. */
static inline bool rule_field(const Message *m, unsigned i, IdField *ret) {
        IdPath p = rule_index.path[i];
        Span s = message_span(m, p);

        if (s.len == 0)
                return false;
        *ret = (IdField){
                .path = p,
                .kind = rule_index.id_kind[i],
                .text = m->text + s.start,
                .len = s.len,
                .value = m->json ? value_at(m->json, p) : NULL,
        };
        return true;
}

/* The rules of m's kind and method, picked when the message was parsed (bit i: the i-th rule). */
static inline uint32_t rules_of(const Message *m) {
        if (!rule_index.made) /* a message's rules come from ids_rules_of(), which made it */
                rule_index_make();
        return m->kind == JSONRPC_INVALID ? 0 : m->id_rules;
}

size_t ids_fields(const Message *m, IdField *ret, size_t n) {
        size_t k = 0;

        for (uint32_t e = rules_of(m); e; e &= e - 1) {
                IdField f;

                if (!rule_field(m, (unsigned) __builtin_ctz(e), &f))
                        continue;
                if (k < n)
                        ret[k] = f;
                k++;
        }
        return k;
}

static int cmp_fields(const void *a, const void *b) {
        const Splice *x = a, *y = b;
        return x->span.start < y->span.start ? -1 : x->span.start > y->span.start;
}

/* The splices map asks for, sorted by position; owned[] what of their texts is to be freed (what
 * ids_splices_free() does). Each field is mapped as it is found: a message has one or two. */
static int ids_splices(const Message *m, id_map_t map, void *userdata, Splice s[static ELEMENTSOF(id_rules)],
                       char *owned[static ELEMENTSOF(id_rules)], size_t *ret_n) {
        size_t k = 0;

        for (uint32_t e = rules_of(m); e; e &= e - 1) {
                IdField f;
                char *t = NULL;
                int r;

                if (!rule_field(m, (unsigned) __builtin_ctz(e), &f))
                        continue;
                r = map(userdata, &f, &t);
                if (r < 0) {
                        *ret_n = k;
                        return r;
                }
                if (r == 0 || !t)
                        continue;
                owned[k] = r == IDS_MAP_BORROWED ? NULL : t;
                s[k++] = (Splice){{(size_t) (f.text - m->text), f.len}, t, short_strlen(t)};
        }
        if (k > 1)
                qsort(s, k, sizeof *s, cmp_fields);
        *ret_n = k;
        return 0;
}

/* Most maps lend their texts (our ids): nothing to free then, and no call made for it. */
static inline void ids_splices_free(char *owned[static ELEMENTSOF(id_rules)], size_t k) {
        for (size_t i = 0; i < k; i++)
                if (owned[i])
                        free(owned[i]);
}

int ids_translate(const Message *m, id_map_t map, void *userdata, char **ret_text, size_t *ret_len) {
        Splice s[ELEMENTSOF(id_rules)];
        char *owned[ELEMENTSOF(id_rules)]; /* ids_splices() writes the first k */
        size_t k = 0;
        int r = ids_splices(m, map, userdata, s, owned, &k);

        if (r >= 0 && k == 0) {
                *ret_text = NULL;
                *ret_len = m->len;
        } else if (r >= 0)
                r = message_splice(m, s, k, ret_text, ret_len);
        ids_splices_free(owned, k);
        return r;
}

int ids_translate_buf(const Message *m, id_map_t map, void *userdata, char *buf, size_t size, char **ret_text,
                      size_t *ret_len) {
        Splice s[ELEMENTSOF(id_rules)];
        char *owned[ELEMENTSOF(id_rules)]; /* ids_splices() writes the first k */
        size_t k = 0;
        int r = ids_splices(m, map, userdata, s, owned, &k);

        if (r >= 0)
                r = message_splice_buf(m, s, k, buf, size, ret_text, ret_len);
        ids_splices_free(owned, k);
        return r;
}

int ids_translate_send(const Message *m, id_map_t map, void *userdata, ids_send_t send, void *send_userdata) {
        Splice s[ELEMENTSOF(id_rules)];
        char *owned[ELEMENTSOF(id_rules)]; /* ids_splices() writes the first k */
        struct iovec iov[2 * ELEMENTSOF(id_rules) + 1];
        size_t k = 0, n = 0, at = 0;
        int r = ids_splices(m, map, userdata, s, owned, &k);

        for (size_t i = 0; r >= 0 && i < k; i++) {
                if (s[i].span.start < at || s[i].span.start + s[i].span.len > m->len)
                        r = -EINVAL;
                else {
                        iov[n++] = (struct iovec){m->text + at, s[i].span.start - at};
                        iov[n++] = (struct iovec){(void *) s[i].text, s[i].len};
                        at = s[i].span.start + s[i].span.len;
                }
        }
        if (r >= 0) {
                iov[n++] = (struct iovec){m->text + at, m->len - at};
                r = send(send_userdata, iov, n);
        }
        ids_splices_free(owned, k);
        return r;
}

char *id_text_string(const char *prefix, unsigned long long n) {
        char *t;
        /* Our prefixes are plain ASCII: no escaping needed. */
        if (asprintf(&t, "\"%s%llu\"", prefix, n) < 0)
                return NULL;
        return t;
}

/* Two digits at a time: every request to a backend gets its id written (a shim's ids reach 7 digits). */
static const char digit_pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";

/* The last positive integer formatted: a shim numbers its requests to a backend from a counter, so the
 * next one's text is this one's plus one, a digit or two to change (no division, no table to read). */
static _hot_ struct {
        long long n;
        unsigned char at; /* where its text starts in text[] */
        char text[ID_INTEGER_MAX];
} last_integer;

static const char *next_integer(char buf[static ID_INTEGER_MAX]) {
        char *t = last_integer.text;
        int k = ID_INTEGER_MAX - 2;

        while (k >= last_integer.at && t[k] == '9')
                t[k--] = '0';
        if (k >= last_integer.at)
                t[k]++;
        else
                t[--last_integer.at] = '1'; /* 99 -> 100 */
        last_integer.n++;
        memcpy(buf, t, ID_INTEGER_MAX);
        return buf + last_integer.at;
}

const char *id_integer_format(long long n, char buf[static ID_INTEGER_MAX]) {
        unsigned long long u = n < 0 ? -(unsigned long long) n : (unsigned long long) n;
        char *p = buf + ID_INTEGER_MAX - 1;

        /* at > 1: room for a digit more (positive numbers take at most 19 of the 20) */
        if (n > 1 && n - 1 == last_integer.n && last_integer.at > 1)
                return next_integer(buf);

        *p = 0;
        for (; u >= 100; u /= 100) {
                p -= 2;
                memcpy(p, digit_pairs + 2 * (u % 100), 2);
        }
        if (u >= 10) {
                p -= 2;
                memcpy(p, digit_pairs + 2 * u, 2);
        } else
                *--p = (char) ('0' + u);
        if (n < 0)
                *--p = '-';
        if (n > 0) {
                last_integer.n = n;
                last_integer.at = (unsigned char) (p - buf);
                memcpy(last_integer.text, buf, ID_INTEGER_MAX);
        }
        return p;
}

char *id_text_integer(long long n) {
        char buf[ID_INTEGER_MAX];
        return strdup(id_integer_format(n, buf));
}

bool id_text_canonical(const char *t, size_t len) {
        if (len >= 2 && t[0] == '"') {
                for (size_t i = 1; i + 1 < len; i++)
                        if (t[i] == '\\' || (unsigned char) t[i] < 0x20 || (unsigned char) t[i] >= 0x7f)
                                return false;
                return true;
        }
        size_t i = len > 0 && t[0] == '-';
        /* -0 is 0 to every parser, and comes back as 0: it would name another session's token 0. */
        if (len - i == 0 || len - i > 15 || (t[i] == '0' && (len - i > 1 || i > 0)))
                return false;
        for (; i < len; i++)
                if (t[i] < '0' || t[i] > '9')
                        return false;
        return true;
}
