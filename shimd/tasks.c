/* tasks/list on a shared backend: the backend lists every session's tasks; each session sees its own. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

static int append(char **buf, size_t *len, size_t *size, const char *text, size_t n) {
        if (*len + n + 1 > *size) {
                size_t want = (*len + n + 1) * 2;
                char *b = realloc(*buf, want);
                if (!b)
                        return -ENOMEM;
                *buf = b, *size = want;
        }
        memcpy(*buf + *len, text, n);
        *len += n;
        (*buf)[*len] = 0;
        return 0;
}

/* m (an answer to tasks/list) with only the tasks c owns in result.tasks, each as the backend's own
 * bytes; nextCursor and everything else stay. *ret is NULL when there is nothing to filter. */
int tasks_list_filter(Instance *i, Client *c, const Message *m, Message **ret) {
        Span span = message_span(m, ID_PATH_RESULT_TASKS);
        const cJSON *tasks =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m->json, "result"), "tasks");
        _cleanup_free_ Span *el = NULL;
        _cleanup_free_ char *list = NULL, *out = NULL;
        size_t n = 0, len = 0, size = 0, out_len, kept = 0;
        const cJSON *t;
        int r;

        *ret = NULL;
        if (span.len == 0 || !cJSON_IsArray(tasks))
                return 0;
        r = message_split_batch(m->text + span.start, span.len, JSONRPC_DEFAULT_MAX_DEPTH, &el, &n);
        if (r < 0)
                return r;
        if (n != (size_t) cJSON_GetArraySize(tasks))
                return -EBADMSG;
        r = append(&list, &len, &size, "[", 1);
        t = tasks->child;
        for (size_t k = 0; r >= 0 && k < n; k++, t = t->next) {
                /* The owner table is keyed by the id's text as the backend spelled it in the answer that
                 * created the task; an id it spells differently here is hidden, never shown to another. */
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(t, "taskId");
                _cleanup_free_ char *key = cJSON_IsString(id) ? cJSON_PrintUnformatted(id) : NULL;
                if (!key || instance_task_owner(i, key, strlen(key)) != c)
                        continue;
                if (kept++ > 0)
                        r = append(&list, &len, &size, ",", 1);
                if (r >= 0)
                        r = append(&list, &len, &size, m->text + span.start + el[k].start, el[k].len);
        }
        if (r >= 0)
                r = append(&list, &len, &size, "]", 1);
        if (r < 0)
                return r;
        if (kept == n)
                return 0;
        log_debug("tasks/list of backend '%s': %zu of %zu tasks belong to connection %llu.", shim_backend_name(i->shim),
                  kept, n, (unsigned long long) c->serial);
        r = message_splice(m, &(Splice){span, list, len}, 1, &out, &out_len);
        if (r < 0)
                return r;
        return message_parse(out, out_len, JSONRPC_DEFAULT_MAX_DEPTH, ret);
}
