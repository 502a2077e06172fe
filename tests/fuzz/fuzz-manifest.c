/* Fuzz target: manifest_load_string() on arbitrary bytes. A manifest either loads and holds what the rest
 * of mcp-lazy relies on, or fails with a message naming the file; never both, never neither. The first
 * line also goes through duration_parse(), and what it accepts must print and parse back the same. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "duration.h"
#include "fuzz.h"
#include "macros.h"
#include "manifest.h"

#define NAME "fuzz.yaml"

/* resources, resource_templates, prompts: lists of objects with a string id key and a string name,
 * each found again by the lookup the frontend routes with. */
static void check_surface(const Manifest *m, const cJSON *list, const char *id_key) {
        const cJSON *it;

        if (!list)
                return;
        FUZZ_ASSERT(cJSON_IsArray(list));
        cJSON_ArrayForEach (it, list) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, id_key);

                FUZZ_ASSERT(cJSON_IsObject(it) && cJSON_IsString(id));
                FUZZ_ASSERT(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "name")));
                if (streq(id_key, "uri"))
                        FUZZ_ASSERT(manifest_find_resource_backend(m, id->valuestring));
                else if (streq(id_key, "uriTemplate"))
                        (void) manifest_find_resource_backend(m, id->valuestring);
                else
                        FUZZ_ASSERT(manifest_find_prompt_backend(m, id->valuestring));
        }
}

static void check_manifest(const Manifest *m) {
        const cJSON *name;
        size_t tools_per_backend = 0;

        FUZZ_ASSERT(m->path && streq(m->path, NAME));
        name = cJSON_GetObjectItemCaseSensitive(m->server_info, "name");
        FUZZ_ASSERT(cJSON_IsString(name));
        FUZZ_ASSERT(m->page_size <= 100000);
        for (size_t i = 0; i < m->n_backends; i++) {
                const Backend *b = &m->backends[i];

                FUZZ_ASSERT(b->name && backend_name_valid(b->name));
                FUZZ_ASSERT(manifest_find_backend(m, b->name) == b);
                FUZZ_ASSERT(b->command && b->command[0]);
                for (char **a = b->command; *a; a++)
                        FUZZ_ASSERT(**a);
                for (char **e = b->env; e && *e; e++)
                        FUZZ_ASSERT(strchr(*e, '=') && **e != '=');
                FUZZ_ASSERT(!b->cwd || b->cwd[0] == '/');
                FUZZ_ASSERT(!b->socket || (b->socket[0] == '/' && strlen(b->socket) < 108));
                FUZZ_ASSERT(b->sharing == SHARING_POOLED || b->sharing == SHARING_SESSION);
                FUZZ_ASSERT(b->idle_timeout_usec > 0 && b->init_timeout_usec > 0);
                tools_per_backend += b->n_tools;
                check_surface(m, b->resources, "uri");
                check_surface(m, b->resource_templates, "uriTemplate");
                check_surface(m, b->prompts, "name");
        }
        /* Nothing declared, nothing found: the frontend then answers resources/ and prompts/ itself. */
        if (!m->has_resources && !m->has_resource_templates)
                FUZZ_ASSERT(!manifest_find_resource_backend(m, "file:///x"));
        if (!m->has_prompts)
                FUZZ_ASSERT(!manifest_find_prompt_backend(m, "x"));
        FUZZ_ASSERT(tools_per_backend == m->n_tools);
        for (size_t i = 0; i < m->n_tools; i++) {
                const Tool *t = &m->tools[i];
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(t->json, "name");
                const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t->json, "inputSchema");
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
                _cleanup_free_ char *printed = NULL;

                FUZZ_ASSERT(cJSON_IsObject(t->json));
                FUZZ_ASSERT(cJSON_IsString(n) && t->name == n->valuestring);
                FUZZ_ASSERT(tool_name_valid(t->name));
                FUZZ_ASSERT(manifest_find_tool(m, t->name) == t);
                FUZZ_ASSERT(t->backend < m->n_backends);
                FUZZ_ASSERT(cJSON_IsObject(schema) && cJSON_IsString(type) && streq(type->valuestring, "object"));
                FUZZ_ASSERT(!cJSON_GetObjectItemCaseSensitive(t->json, "backend"));
                /* tools/list prints it as it is */
                printed = cJSON_PrintUnformatted(t->json);
                FUZZ_ASSERT(printed);
        }
}

/* What `mcp-lazy --backend NAME` serves: the last backend alone, still a whole manifest, with its
 * recorded identity (a serverInfo with a string name and version) where it has one. */
static void check_restrict(Manifest *m) {
        _cleanup_free_ char *name = NULL;
        bool had_info;
        size_t n_tools;

        FUZZ_ASSERT(manifest_restrict(m, "no such backend, not even valid") == -ENOENT);
        if (m->n_backends == 0)
                return;
        name = strdup(m->backends[m->n_backends - 1].name);
        FUZZ_ASSERT(name);
        had_info = !!m->backends[m->n_backends - 1].server_info;
        n_tools = m->backends[m->n_backends - 1].n_tools;
        FUZZ_ASSERT(manifest_restrict(m, name) == 0);
        FUZZ_ASSERT(m->n_backends == 1 && streq(m->backends[0].name, name) && m->n_tools == n_tools);
        check_manifest(m);
        if (had_info) {
                FUZZ_ASSERT(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m->server_info, "version")));
                FUZZ_ASSERT(!m->backends[0].server_info);
        }
        FUZZ_ASSERT(!m->capabilities || cJSON_IsObject(m->capabilities));
}

static void check_duration(const uint8_t *data, size_t size) {
        char s[64], buf[64];
        uint64_t usec, again;
        size_t n = 0;

        while (n < size && n < sizeof s - 1 && data[n] != '\n' && data[n] != 0)
                n++;
        memcpy(s, data, n);
        s[n] = 0;
        if (duration_parse(s, &usec) < 0)
                return;
        FUZZ_ASSERT(usec <= 366ULL * 86400ULL * USEC_PER_SEC);
        /* Printing keeps milliseconds: only those values must come back exactly. */
        if (usec % USEC_PER_MSEC != 0)
                return;
        duration_format(usec, buf, sizeof buf);
        FUZZ_ASSERT(duration_parse(buf, &again) == 0);
        FUZZ_ASSERT(again == usec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Manifest *m = NULL;
        char *err = NULL;
        int r;

        if (size > 256 * 1024)
                return 0;
        check_duration(data, size);

        r = manifest_load_string((const char *) data, size, NAME, "/fuzz", &m, &err);
        if (r >= 0) {
                FUZZ_ASSERT(r == 0 && m && !err);
                check_manifest(m);
                check_restrict(m);
                manifest_free(m);
                return 0;
        }
        FUZZ_ASSERT(!m);
        if (r == -EINVAL)
                FUZZ_ASSERT(err && strncmp(err, NAME ":", strlen(NAME ":")) == 0);
        else
                FUZZ_ASSERT(r == -ENOMEM);
        free(err);
        return 0;
}
