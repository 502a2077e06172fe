/* The contract: once a backend is up, what it lists (tools, resources, prompts) is compared with
 * what the manifest declares for it, and every difference is logged and shown in STATUS=. */
#include <stdio.h>
#include <string.h>

#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

/* Negative ids: ours, never a client's (those are remapped to positive ones). */
static const struct {
        int64_t id;
        const char *method, *result_key, *id_key, *what;
        size_t offset; /* of the Backend list, or (size_t) -1 for tools */
} lists[] = {
        {-1, "tools/list", "tools", "name", "tool", (size_t) -1},
        {-2, "resources/list", "resources", "uri", "resource", offsetof(Backend, resources)},
        {-3, "prompts/list", "prompts", "name", "prompt", offsetof(Backend, prompts)},
};

static cJSON *declared(const Shim *s, size_t k) {
        cJSON *a = cJSON_CreateArray();

        if (!a)
                return NULL;
        if (lists[k].offset == (size_t) -1) {
                for (size_t t = 0; t < s->manifest->n_tools; t++)
                        if (&s->manifest->backends[s->manifest->tools[t].backend] == s->backend)
                                cJSON_AddItemReferenceToArray(a, s->manifest->tools[t].json);
        } else {
                const cJSON *l = backend_list(s->backend, lists[k].offset), *it;
                cJSON_ArrayForEach (it, l)
                        cJSON_AddItemReferenceToArray(a, (cJSON *) it);
        }
        return a;
}

static const cJSON *find(const cJSON *list, const char *key, const char *value) {
        const cJSON *it;
        cJSON_ArrayForEach (it, list)
                if (streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, key)) ?: "", value))
                        return it;
        return NULL;
}

void contract_request(Instance *i) {
        for (size_t k = 0; k < ELEMENTSOF(lists); k++) {
                _cleanup_json_ cJSON *id = cJSON_CreateNumber((double) lists[k].id), *m = NULL;

                /* Resources and prompts only where the manifest declares some: the backend may have none. */
                if (lists[k].offset != (size_t) -1 && !backend_list(i->shim->backend, lists[k].offset))
                        continue;
                m = jsonrpc_request_new(id, lists[k].method, bridge_contract_params(i));
                if (m && i->ch)
                        (void) channel_send_json(i->ch, m);
        }
}

static void compare(Instance *i, size_t k, const cJSON *actual) {
        Shim *s = i->shim;
        _cleanup_json_ cJSON *want = declared(s, k);
        const char *key = lists[k].id_key, *what = lists[k].what, *name = shim_backend_name(s);
        unsigned missing = 0, extra = 0, changed = 0;
        const cJSON *it;

        cJSON_ArrayForEach (it, want) {
                const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, key)) ?: "";
                const cJSON *got = find(actual, key, v);
                if (!got) {
                        missing++;
                        log_warning("Backend '%s' does not list the %s '%s' that the manifest declares.", name, what,
                                    v);
                } else if (!cJSON_Compare(it, got, true)) {
                        changed++;
                        log_warning("Backend '%s' lists the %s '%s' differently from the manifest.", name, what, v);
                }
        }
        cJSON_ArrayForEach (it, actual) {
                const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, key)) ?: "";
                if (!find(want, key, v)) {
                        extra++;
                        log_warning("Backend '%s' lists the %s '%s', which the manifest does not declare.", name, what,
                                    v);
                }
        }
        if (missing + extra + changed == 0)
                snprintf(s->contract[k], sizeof s->contract[k], "%s", "");
        else
                snprintf(s->contract[k], sizeof s->contract[k], "%ss: %u missing, %u extra, %u changed", what, missing,
                         extra, changed);
        shim_update(s);
}

bool contract_handle_response(Instance *i, int64_t id, const cJSON *msg) {
        for (size_t k = 0; k < ELEMENTSOF(lists); k++) {
                const cJSON *result, *list;

                if (lists[k].id != id)
                        continue;
                result = cJSON_GetObjectItemCaseSensitive(msg, "result");
                list = cJSON_GetObjectItemCaseSensitive(result, lists[k].result_key);
                if (cJSON_IsArray(list))
                        compare(i, k, list);
                else
                        log_warning("Backend '%s' did not answer %s: cannot compare it with the manifest.",
                                    shim_backend_name(i->shim), lists[k].method);
                return true;
        }
        return false;
}

/* "manifest matches" or "manifest differs: tools: 1 missing, ..." for STATUS=. */
void contract_summary(const Shim *s, char *buf, size_t size) {
        size_t off = 0;
        bool any = false, checked = false;

        for (size_t k = 0; k < ELEMENTSOF(s->contract); k++)
                if (s->contract[k][0])
                        any = true;
        checked = s->contract_checked;
        if (!checked) {
                snprintf(buf, size, "%s", "");
                return;
        }
        off = (size_t) snprintf(buf, size, any ? ", manifest differs:" : ", manifest matches");
        for (size_t k = 0; any && k < ELEMENTSOF(s->contract) && off < size; k++)
                if (s->contract[k][0])
                        off += (size_t) snprintf(buf + off, size - off, " %s;", s->contract[k]);
        if (any && off < size && off > 0)
                buf[off - 1] = 0;
}
