/* Prepared answers: what a manifest answers without a backend (initialize, server/discover, every
 * tools/list page, the other lists), printed once per manifest change and kept as ready bytes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "manifest.h"

typedef enum AnswerKind {
        ANSWER_INITIALIZE, /* the result for protocol version index (oldest first, as era_legacy_versions) */
        ANSWER_DISCOVER,
        ANSWER_MODERN_TAIL, /* the members a list result to a 2026-07-28 request ends with, without braces */
        ANSWER_RESOURCES,   /* the lists: present only where initialize advertises them */
        ANSWER_RESOURCE_TEMPLATES,
        ANSWER_PROMPTS,
        ANSWER_TOOLS, /* index: the page */
        _ANSWER_KIND_MAX,
} AnswerKind;

/* What a reload compares: a digest of each list's entries as printed, and whether its change is
 * announced (a backend's recorded capabilities may say it is not). */
typedef struct Surfaces {
        uint64_t tools[2], resources[2], prompts[2];
        bool notify_tools, notify_resources, notify_prompts;
} Surfaces;

typedef struct Answers Answers;

/* The answers m gives (the manifest version st of the file, under key: see answers_key()). */
int answers_build(const Manifest *m, const char *key, const struct stat *st, Answers **ret);
/* The answers file written for key: -ENOENT when it is missing, stale, not ours, or fails any check
 * (a bad file is a miss, never an error). */
int answers_load(const char *file, const char *key, const struct stat *st, Answers **ret);
/* Writes the size and checksum of the answers file in buf (what a forger would do too: tests). */
void answers_seal(char *buf, size_t len);
/* Best effort: replaces file atomically. */
int answers_save(const Answers *a, const char *file);
/* Answers are counted references: the session holds one, and each answer a channel still writes from them. */
Answers *answers_ref(Answers *a);
/* Drops a reference; the last one frees them. */
Answers *answers_free(Answers *a);
static inline void answers_freep(Answers **a) {
        answers_free(*a);
}

/* The result's bytes (a JSON object; the tail: members), or false when there is none. ret may be NULL. */
bool answers_get(const Answers *a, AnswerKind kind, size_t index, const char **ret, size_t *ret_len);
size_t answers_n_tools(const Answers *a);
/* The page starting at offset, if it is one we hand out a cursor for (or the first). */
bool answers_tools_page(const Answers *a, size_t offset, size_t *ret_page);
/* The routes (local backends only; false for anything else, or a route that fails its checks): the
 * backend that serves tool, and a backend's socket path (NULL: the default). Both point into a. */
bool answers_tool_backend(Answers *a, const char *tool, const char **ret_backend);
bool answers_backend_socket(const Answers *a, const char *backend, const char **ret_socket);
/* The manifest version the answers stand for. */
const struct stat *answers_stat(const Answers *a);
const Surfaces *answers_surfaces(const Answers *a);

int surfaces_from_manifest(const Manifest *m, Surfaces *ret);
/* What an answers file's key is made of: the manifest's path and version (as stat'ed), this
 * program's binary, and the mode (the fleet or one backend). */
char *answers_key(const char *path, const struct stat *st, const char *backend);
