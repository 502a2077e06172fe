/* One line from a peer, parsed once into a validated message: strict JSON, no duplicate keys at any
 * depth, envelope fields typed. What goes on is the peer's own bytes, with only translated ids spliced
 * in (see ids.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "ids.h"
#include "jsonrpc.h"

/* The longest id (request id, progress token, task id, as JSON text) a message may carry. */
#define MESSAGE_MAX_ID_BYTES 1024U

typedef struct Span {
        size_t start, len; /* len 0: absent */
} Span;

/* What routing reads past the envelope, noted by the same scan (as the id fields are), so that a
 * request can be routed, and its answer passed on, without a tree: a tool's name, the 2026-07-28
 * envelope in params._meta (era.h), and what tells a handshake-era answer from a 2026-07-28 one. A path
 * is noted only where each step is an object member, as cJSON would find it. */
typedef enum RoutePath {
        ROUTE_PATH_PARAMS_NAME,       /* params.name */
        ROUTE_PATH_META_VERSION,      /* params._meta["io.modelcontextprotocol/protocolVersion"] */
        ROUTE_PATH_META_CAPABILITIES, /* params._meta["io.modelcontextprotocol/clientCapabilities"] */
        ROUTE_PATH_META_CLIENT_INFO,  /* params._meta["io.modelcontextprotocol/clientInfo"] */
        ROUTE_PATH_META_LOG_LEVEL,    /* params._meta["io.modelcontextprotocol/logLevel"] */
        ROUTE_PATH_RESULT,            /* result */
        ROUTE_PATH_RESULT_TYPE,       /* result.resultType */
        ROUTE_PATH_ERROR,             /* error */
        ROUTE_PATH_META,              /* params._meta */
        ROUTE_PATH_REQUEST_STATE,     /* params.requestState */
        _ROUTE_PATH_MAX,
} RoutePath;

/* The paths the scan notes: the id fields (IdPath), then what routing reads (RoutePath). */
#define MESSAGE_PATHS (_ID_PATH_MAX + _ROUTE_PATH_MAX)
/* Spans are read through message_span() and message_route() (tests/fuzz/diff-message.c tells this layout
 * from the one with arrays by it). */
#define MESSAGE_NOTED_SPANS 1

struct Message {
        /* What every message's path reads, first, in as few cache lines as it takes. */
        unsigned n_ref;
        JsonRpcKind kind;
        char *text; /* the peer's line, NUL-terminated */
        size_t len;
        const char *method;  /* requests and notifications */
        const cJSON *id;     /* the id's value (requests, responses; INVALID: if one could be read) */
        const char *id_text; /* that text ("\"a1\"", "12345678901234567890"); NULL without an id */
        const char *problem; /* INVALID: why, as a sentence fragment for the error message */
        uint32_t id_rules;   /* the id table's rules its kind and method are under (ids_rules_of()) */
        /* Private: read through message_span() and message_route(). Bit p (an IdPath, or _ID_PATH_MAX + a
         * RoutePath): the scan noted that path, its span is noted_spans[slot[p]]. slot[p] is written only
         * where its bit is set, and read only there. */
        uint32_t noted;
        uint8_t slot[MESSAGE_PATHS];
        uint32_t method_len; /* method's length (0 without one): message_method_is() */
        cJSON *json;         /* the whole tree: message_parse() builds it; after message_parse_envelope(),
                              * NULL until message_json() */
        const cJSON *params; /* NULL when absent, or while json is not built */
        /* Private: id and id_json point to these items of the message's own (never to cJSON_Delete()),
         * or id to id_value, a parsed id of a rare form; problem to problem_buf (malloc'd) when it was
         * formatted. */
        cJSON *id_value;
        char *id_buf, *id_str, *method_buf, *problem_buf;
        cJSON *id_raw; /* message_id_json()'s room, past the method's copy (a message with an id only) */
        /* Not zeroed when the message is made: written before it is read. */
        cJSON id_item;
        Span noted_spans[]; /* the text and the id's and method's own copies follow them */
};

static inline Span message_path_span(const Message *m, unsigned p) {
        return m->noted & (UINT32_C(1) << p) ? m->noted_spans[m->slot[p]] : (Span){0, 0};
}
/* Where the scan found the id field at p (an IdPath) or what routing reads at p (a RoutePath): len 0
 * when m has nothing there. */
static inline Span message_span(const Message *m, IdPath p) {
        return message_path_span(m, (unsigned) p);
}
static inline Span message_route(const Message *m, RoutePath p) {
        return message_path_span(m, _ID_PATH_MAX + (unsigned) p);
}

/* The length of m's id_text (0 without one), without a strlen(): the id's own copy follows its text
 * (message_alloc()). */
static inline size_t message_id_len(const Message *m) {
        return m->id_text ? (size_t) (m->id_str - m->id_text) - 1 : 0;
}

/* The id as a raw item of its exact text, what replies carry; NULL without one. Made when asked, in
 * the message's own room for it: most messages go on without a reply of ours, and their wakeup then
 * writes no line for it. The item is m's: copy it (jsonrpc_result_new() does), never free it. */
cJSON *message_id_json(const Message *m);
/* tests/fuzz/diff-view.c tells this interface from the one with an id_json field by it. */
#define MESSAGE_LAZY_ID_JSON 1

/* Whether m's method (a request's or a notification's) is the string literal name: by its length, then
 * its bytes, compared inline (no strcmp(), no read of the literal: its bytes are the code's own). */
#define message_method_is(m, name) \
        ((m)->method_len == sizeof(name) - 1 && memcmp((m)->method, name, sizeof(name) - 1) == 0)

/* -EBADMSG: not JSON (strictly), not UTF-8, NUL, a lone UTF-16 surrogate escape, or trailing bytes;
 * -E2BIG: deeper than max_depth. Anything else that is JSON gives a Message, of kind JSONRPC_INVALID
 * if it is not a valid one (duplicate keys included), with its tree built. */
int message_parse(const char *line, size_t len, unsigned max_depth, Message **ret);
/* The same checks and the same envelope (kind, method, id, problem, id spans) from one scan, without
 * building the tree: for the forwarding path, where most messages are read no further. Whoever reads
 * more than the envelope (params, result, error) calls message_json() first. */
int message_parse_envelope(const char *line, size_t len, unsigned max_depth, Message **ret);
/* m's tree (and m->params), built on first use; NULL only when out of memory. */
const cJSON *message_json(const Message *m);
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
/* The same into buf when it fits (size bytes, its NUL included), else into a malloc'd line: *ret_text is
 * buf or what to free. */
int message_splice_buf(const Message *m, const Splice *s, size_t n, char *buf, size_t size, char **ret_text,
                       size_t *ret_len);

/* A number's text is an integer (any size) or a value a double holds as an integer. */
bool json_id_valid(const cJSON *id, const char *text, size_t len);

/* Where a value sits in m's text, found by a path of object keys (NULL-terminated; ASCII keys, or keys
 * written without escapes): -ENOENT if m has none there. For keeping a peer's bytes where a message is
 * taken apart or built from parts. */
int message_find(const Message *m, const char *const *path, Span *ret);
/* The members of the object at 'object' in m's text, in order: the key's contents (without quotes),
 * the whole member ("key": value) and the value. -ENOENT if no object is there. */
typedef struct Member {
        Span key, member, value;
} Member;
int message_members(const Message *m, Span object, Member **ret, size_t *ret_n);
bool message_key_is(const Message *m, const Member *mb, const char *name);
/* The string value at s (quotes included) decoded into buf (size bytes) and NUL-terminated: its decoded
 * length (a decoded NUL included: compare with strlen()). -EINVAL if s is not a string (or absent),
 * -ENOBUFS if it does not fit. */
int message_string(const Message *m, Span s, char *buf, size_t size, size_t *ret_len);
/* Whether the string at s decodes to one with a NUL in it: the tree's value ends there and a peer reads
 * all of it, so it names nothing a lookup by it finds (a tool, resource, prompt, task, subscribed URI).
 * Allocates nothing. */
bool message_span_has_nul(const Message *m, Span s);
/* The same for the string at path (a message_find() path): 1 if it has a NUL, 0 if not (or no string is
 * there), -ENOMEM when the text could not be searched (the caller answers "out of memory": neither yes
 * nor no). */
int message_path_has_nul(const Message *m, const char *const *path);
/* The request carries the 2026-07-28 envelope: a member of params._meta that era_envelope_parse() reads. */
bool message_has_envelope(const Message *m);
/* Prefetch what the next message's scan and allocation touch first (see prefetch.h). */
void message_prefetch(void);
/* The text of a span, malloc'd. */
char *message_span_dup(const Message *m, Span s);
