/* Fuzz target: peeking at the id of a message cut off at the line limit must never read past what it
 * was given, and must agree with a real parse: on any text, an id it reports is the object's one
 * "id" member; on a whole object with one valid "id", it finds that id, and it finds it in every
 * cut of the text that ends after the id's value. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "jsonrpc.h"
#include "peek.h"

static unsigned top_level_ids(const cJSON *o, const cJSON **ret) {
        unsigned n = 0;
        const cJSON *it;

        cJSON_ArrayForEach (it, o)
                if (it->string && strcmp(it->string, "id") == 0)
                        n++, *ret = it;
        return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *text = (const char *) data;
        cJSON *whole = NULL, *peeked;
        const cJSON *id = NULL;
        unsigned n_ids = 0;

        if (size > 65536)
                return 0;
        /* A copy of exactly size bytes: ASan catches any read past the end. */
        char *copy = malloc(size ? size : 1);
        FUZZ_ASSERT(copy);
        memcpy(copy, text, size);
        peeked = jsonrpc_peek_id(copy, size);
        /* review1: has_key never says yes for a key the whole object lacks, in any cut */
        {
                cJSON *w2 = NULL;
                bool nul = memmem(copy, size, "\\u0000", 6) != NULL;
                if (!nul && jsonrpc_parse(copy, size, JSONRPC_DEFAULT_MAX_DEPTH, &w2) >= 0 && cJSON_IsObject(w2)) {
                        bool has = cJSON_GetObjectItemCaseSensitive(w2, "method") != NULL;
                        FUZZ_ASSERT(json_peek_has_key(copy, size, "method") == has);
                        for (size_t cut = size; cut > 0; cut--)
                                FUZZ_ASSERT(!json_peek_has_key(copy, cut, "method") || has);
                        cJSON *raw = jsonrpc_peek_id_raw(copy, size);
                        const cJSON *wid = NULL;
                        if (raw && top_level_ids(w2, &wid) == 1) {
                                cJSON *v = cJSON_Parse(raw->valuestring);
                                FUZZ_ASSERT(v && cJSON_Compare(v, wid, true));
                                cJSON_Delete(v);
                        }
                        cJSON_Delete(raw);
                }
                cJSON_Delete(w2);
                if (nul) {
                        cJSON_Delete(peeked);
                        free(copy);
                        return 0;
                }
        }
        if (jsonrpc_parse(copy, size, JSONRPC_DEFAULT_MAX_DEPTH, &whole) >= 0 && cJSON_IsObject(whole))
                n_ids = top_level_ids(whole, &id);
        if (peeked && whole && cJSON_IsObject(whole)) {
                FUZZ_ASSERT(n_ids == 1);
                FUZZ_ASSERT(cJSON_Compare(peeked, id, true));
        }
        if (whole && cJSON_IsObject(whole) && n_ids == 1 && jsonrpc_id_valid(id)) {
                FUZZ_ASSERT(peeked && cJSON_Compare(peeked, id, true));
                /* Every cut from the end of the text back to the id: found in each, until the cut
                 * reaches the id's value. */
                for (size_t cut = size; cut > 0; cut--) {
                        cJSON *p = jsonrpc_peek_id(copy, cut);
                        if (!p)
                                break;
                        FUZZ_ASSERT(cJSON_Compare(p, id, true));
                        cJSON_Delete(p);
                }
        }
        cJSON_Delete(peeked);
        cJSON_Delete(whole);
        free(copy);
        return 0;
}
