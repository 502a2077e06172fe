/* The one table of id-carrying fields (which field of which message holds which kind of id), and
 * the translation of a message's ids at one hop, through a mapping the hop supplies. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <cjson/cJSON.h>

#include "jsonrpc.h"

/* Where an id sits in a message. To carry a new id-bearing field, add its path here and in id_paths,
 * then a rule in id_rules (ids.c). At most 32 paths; each at most ID_PATH_DEPTH keys deep. */
typedef enum IdPath {
        ID_PATH_ID,                   /* id */
        ID_PATH_PARAMS_REQUEST_ID,    /* params.requestId */
        ID_PATH_PARAMS_META_PROGRESS, /* params._meta.progressToken */
        ID_PATH_PARAMS_PROGRESS,      /* params.progressToken */
        ID_PATH_PARAMS_TASK_ID,       /* params.taskId */
        ID_PATH_RESULT_TASK_ID,       /* result.task.taskId */
        ID_PATH_RESULT_TASKS,         /* result.tasks: no id, but what tasks/list keeps per session */
        _ID_PATH_MAX,
} IdPath;

#define ID_PATH_DEPTH 3

/* What an id names, whatever the hop. */
typedef enum IdKind {
        ID_KIND_REQUEST,   /* a request's own id, or the id of the request a response answers */
        ID_KIND_CANCELLED, /* the request a notifications/cancelled names: one its sender received */
        ID_KIND_PROGRESS,  /* a progress token: named in a request, used by the other side's progress */
        ID_KIND_TASK,      /* a task id: made by the receiver of a task-augmented request */
} IdKind;

/* Each path as its chain of keys, NULL-terminated. */
extern const char *const id_paths[_ID_PATH_MAX][ID_PATH_DEPTH + 1];

typedef struct Message Message;

/* The field of m at path, if m has one there that the table says is an id of that message. */
typedef struct IdField {
        IdPath path;
        IdKind kind;
        const char *text; /* exact text of the value in the message */
        size_t len;
        const cJSON *value;
} IdField;

/* A hop's mapping: 0 keeps the value, 1 sets *ret_text (malloc'd JSON text) to put in its place,
 * IDS_MAP_BORROWED the same with text that stays valid until the translation returns (not freed),
 * < 0 refuses the message (the caller answers it). */
#define IDS_MAP_BORROWED 2
typedef int (*id_map_t)(void *userdata, const IdField *f, char **ret_text);

/* The table names method's id fields for the other kind (a request named notifications/cancelled, a
 * notification named tasks/cancel): such a message would carry an id field past its translation. */
bool ids_method_kind_mismatch(JsonRpcKind kind, const char *method);
/* The rules of the table that a message of this kind and method is under (bit i: the i-th rule);
 * message_parse_envelope() keeps them in the message (Message.id_rules) for ids_fields(). */
uint32_t ids_rules_of(JsonRpcKind kind, const char *method);
/* Calls fn for each id field the table names for m (in path order); returns how many there were. */
size_t ids_fields(const Message *m, IdField *ret_fields, size_t n);
/* m's text with every id field replaced as map says: *ret_text is NULL when nothing changed (send
 * m->text as it is), else a malloc'd line of *ret_len bytes. */
int ids_translate(const Message *m, id_map_t map, void *userdata, char **ret_text, size_t *ret_len);
/* The same, with the line always given (m's text copied when nothing changed): into buf when it fits
 * (size bytes, its NUL included), else into a malloc'd one. *ret_text is buf or what to free. */
int ids_translate_buf(const Message *m, id_map_t map, void *userdata, char *buf, size_t size, char **ret_text,
                      size_t *ret_len);
/* The same without a copy: send gets m's text as pieces (the translated ids between them) and its
 * result is returned. */
typedef int (*ids_send_t)(void *userdata, const struct iovec *iov, size_t n);
int ids_translate_send(const Message *m, id_map_t map, void *userdata, ids_send_t send, void *send_userdata);

/* An integer's decimal text in buf, which it returns (no printf: this is on every call's path). */
#define ID_INTEGER_MAX 21 /* "-9223372036854775808" and its NUL */
const char *id_integer_format(long long n, char buf[static ID_INTEGER_MAX]);
/* An id as JSON text: a string for ours (prefix + number), or a bare integer. malloc'd. */
char *id_text_string(const char *prefix, unsigned long long n);
char *id_text_integer(long long n);
/* A value's text can go to a backend and come back as the same text whatever parser the backend
 * uses (printable ASCII string without escapes, or an integer of up to 15 digits). */
bool id_text_canonical(const char *text, size_t len);
