/* What fuzz-diff-message compares of a Message, read through each side's own message.h: the two sides'
 * layouts of struct Message may differ (tests/fuzz/diff-view.c is built once against each). */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "ids.h"
#include "jsonrpc.h"

#define DIFF_VIEW_PATHS 32 /* at least _ID_PATH_MAX + _ROUTE_PATH_MAX of either side */

typedef struct DiffSpan {
        size_t start, len;
} DiffSpan;

typedef struct MessageView {
        JsonRpcKind kind;
        const char *text;
        size_t len;
        const char *problem, *method, *id_text;
        const cJSON *id, *id_json;
        uint32_t id_rules;
        unsigned n_paths;
        DiffSpan spans[DIFF_VIEW_PATHS]; /* the id paths, then the route paths */
} MessageView;

typedef struct Message Message;
void diff_message_view(const Message *m, MessageView *ret);
void old_diff_message_view(const Message *m, MessageView *ret);
