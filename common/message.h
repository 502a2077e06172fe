/* One line from a peer, parsed once into a validated message: strict JSON, no duplicate keys at any
 * depth, envelope fields typed. What goes on is the peer's own bytes, with only translated ids spliced
 * in (see ids.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

#include "ids.h"
#include "jsonrpc.h"

/* The longest id (request id, progress token, task id, as JSON text) a message may carry. */
#define MESSAGE_MAX_ID_BYTES 1024U

typedef struct Span {
        size_t start, len; /* len 0: absent */
} Span;

struct Message {
        unsigned n_ref;
        char *text; /* the peer's line, NUL-terminated */
        size_t len;
        cJSON *json;
        JsonRpcKind kind;
        const char *method;  /* requests and notifications */
        const cJSON *params; /* NULL when absent */
        const cJSON *id;     /* the id as parsed (requests, responses; INVALID: if one could be read) */
        cJSON *id_json;      /* the same id as a raw item of its exact text: what replies carry */
        const char *id_text; /* that text ("\"a1\"", "12345678901234567890"); NULL without an id */
        const char *problem; /* INVALID: why, as a sentence fragment for the error message */
        Span spans[_ID_PATH_MAX];
        char problem_buf[160];
};

/* -EBADMSG: not JSON (strictly), not UTF-8, NUL, or trailing bytes; -E2BIG: deeper than max_depth.
 * Anything else that is JSON gives a Message, of kind JSONRPC_INVALID if it is not a valid one
 * (duplicate keys included). */
int message_parse(const char *line, size_t len, unsigned max_depth, Message **ret);
Message *message_ref(Message *m);
Message *message_unref(Message *m);
static inline void message_unrefp(Message **m) {
        if (*m)
                message_unref(*m);
}
#define _cleanup_message_ __attribute__((cleanup(message_unrefp)))

/* A top-level JSON array (a batch): the spans of its elements, each then parsed on its own.
 * -EBADMSG if the text is not a valid array. */
int message_split_batch(const char *line, size_t len, unsigned max_depth, Span **ret_spans, size_t *ret_n);
bool message_is_batch(const char *line, size_t len);

/* m's text with the spans replaced (sorted, not overlapping): malloc'd, NUL-terminated. */
typedef struct Splice {
        Span span;
        const char *text;
        size_t len;
} Splice;
int message_splice(const Message *m, const Splice *s, size_t n, char **ret_text, size_t *ret_len);

/* A number's text is an integer (any size) or a value a double holds as an integer. */
bool json_id_valid(const cJSON *id, const char *text, size_t len);
