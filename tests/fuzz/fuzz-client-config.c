/* Fuzz target: a client config (as Claude Code's strict JSON, and as VS Code's JSONC) read, every
 * server entry rewritten to mcp-lazy, and the result read again. It either fails with a message
 * naming the file, or it rewrites: then the new text reads back with the same entries in the same
 * places, each rewritten one now exactly {command, args} plus the keys it kept, and every byte
 * outside the rewritten values is the original's. */
#include <string.h>

#include "client-config.h"
#include "fuzz.h"
#include "macros.h"

#define PATH "/fuzz/.claude.json"

static char *const ARGS[] = {(char *) "--backend", (char *) "x\"y", NULL};

static void check_rewritten(const ClientConfig *before, const char *text, size_t len, const char *client) {
        _cleanup_(client_config_freep) ClientConfig *after = NULL;
        _cleanup_free_ char *err = NULL;
        size_t at_before = 0, at_after = 0;

        FUZZ_ASSERT(client_config_load_string(text, len, PATH, client, &after, &err) == 0);
        FUZZ_ASSERT(after->n_entries == before->n_entries);
        for (size_t i = 0; i < after->n_entries; i++) {
                const ServerEntry *a = &after->entries[i], *b = &before->entries[i];
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(a->json, "args"), *it;
                size_t k = 0;

                FUZZ_ASSERT(streq(a->name, b->name) && streq(a->where, b->where));
                /* The bytes between entries are the original's. */
                FUZZ_ASSERT(a->value_start - at_after == b->value_start - at_before);
                FUZZ_ASSERT(memcmp(text + at_after, before->text + at_before, a->value_start - at_after) == 0);
                at_after = a->value_end;
                at_before = b->value_end;
                FUZZ_ASSERT(streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a->json, "command")) ?: "",
                                  "/usr/bin/mcp-lazy"));
                FUZZ_ASSERT(!cJSON_GetObjectItemCaseSensitive(a->json, "env") &&
                            !cJSON_GetObjectItemCaseSensitive(a->json, "cwd"));
                cJSON_ArrayForEach (it, args)
                        FUZZ_ASSERT(ARGS[k] && streq(cJSON_GetStringValue(it) ?: "", ARGS[k++]));
                FUZZ_ASSERT(!ARGS[k]);
        }
        FUZZ_ASSERT(len - at_after == before->len - at_before);
        FUZZ_ASSERT(memcmp(text + at_after, before->text + at_before, len - at_after) == 0);
}

static void one(const uint8_t *data, size_t size, const char *client) {
        _cleanup_(client_config_freep) ClientConfig *c = NULL;
        _cleanup_free_ char *err = NULL, *text = NULL;
        size_t len = 0;
        int r = client_config_load_string((const char *) data, size, PATH, client, &c, &err);

        if (r < 0) {
                FUZZ_ASSERT(r == -ENOMEM || (r == -EINVAL && err && strncmp(err, PATH ":", strlen(PATH) + 1) == 0));
                return;
        }
        for (size_t i = 0; i < c->n_entries; i++) {
                _cleanup_strv_free_ char **argv = NULL, **env = NULL;
                _cleanup_free_ char *cwd = NULL;
                const char *why = server_entry_command(&c->entries[i], &argv, &env, &cwd);

                FUZZ_ASSERT(why || (argv && argv[0]));
                (void) server_entry_is_remote(&c->entries[i]);
                FUZZ_ASSERT(client_config_replace_entry(&c->entries[i], "/usr/bin/mcp-lazy", ARGS) == 0);
        }
        FUZZ_ASSERT(client_config_render(c, &text, &len) == 0);
        check_rewritten(c, text, len, client);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        one(data, size, "claude-code");
        one(data, size, "vscode");
        return 0;
}
