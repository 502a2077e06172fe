/* The manifest writer: what it emits reads back as exactly what went in, and edits keep the rest. */
#include <stdio.h>
#include <unistd.h>

#include "macros.h"
#include "manifest-write.h"
#include "manifest.h"
#include "tests.h"

/* Strings a careless YAML writer would turn into something else. */
static const char *const tricky[] = {
        "true",
        "false",
        "null",
        "~",
        "yes",
        "No",
        "on",
        "1.0",
        "1.10",
        "0x1F",
        "-5",
        ".5",
        ".inf",
        "",
        " leading space",
        "trailing space ",
        "a: b",
        "# not a comment",
        "- dash",
        "[x]",
        "{y}",
        "'single'",
        "\"double\"",
        "line one\nline two\n",
        "line\n  indented\n\ntrailing blank\n\n",
        "tab\there",
        "emoji \U0001F389",
        "back\\slash",
        "percent % and @at",
        "*star",
        "&amp",
        "!bang",
        "|pipe",
        ">fold",
        "?q",
        "key:",
        NULL,
};

static cJSON *tools_with(const char *description) {
        cJSON *tools = cJSON_CreateArray(), *t = cJSON_CreateObject(), *schema = cJSON_CreateObject();

        cJSON_AddStringToObject(t, "name", "t");
        cJSON_AddStringToObject(t, "description", description);
        cJSON_AddStringToObject(schema, "type", "object");
        cJSON_AddItemToObject(schema, "properties", cJSON_CreateObject());
        cJSON_AddItemToObject(t, "inputSchema", schema);
        cJSON_AddItemToArray(tools, t);
        return tools;
}

static void test_roundtrip(void) {
        for (const char *const *s = tricky; *s; s++) {
                _cleanup_(manifest_doc_freep) ManifestDoc *d = NULL;
                _cleanup_(manifest_freep) Manifest *m = NULL;
                _cleanup_free_ char *text = NULL, *err = NULL, *err2 = NULL;
                _cleanup_json_ cJSON *info = cJSON_CreateObject();
                size_t len = 0;

                CHECK(manifest_doc_load("/nonexistent/m.yaml", &d, &err) == 0);
                cJSON_AddStringToObject(info, "name", *s);
                cJSON_AddStringToObject(info, "version", *s);
                CHECK(manifest_doc_set_backend_key(
                              d, "b", "command",
                              cJSON_CreateStringArray((const char *[]){"/bin/true", **s ? *s : "x"}, 2)) == 0);
                CHECK(manifest_doc_set_backend_key(d, "b", "server_info", cJSON_Duplicate(info, true)) == 0);
                CHECK(manifest_doc_set_tools(d, "b", tools_with(*s)) == 0);
                CHECK(manifest_doc_emit(d, &text, &len, &err2) == 0);
                if (!text) {
                        fprintf(stderr, "for %s: %s\n", *s, err2);
                        continue;
                }
                CHECK(manifest_load_string(text, len, "m.yaml", "/", &m, &err) == 0);
                if (!m)
                        continue;
                CHECK_STREQ(m->backends[0].command[1], **s ? *s : "x");
                CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->tools[0].json, "description")),
                            *s);
                /* server_info as the manifest's YAML types it: it must still be the same strings */
                {
                        _cleanup_free_ char *err3 = NULL;
                        _cleanup_(manifest_doc_freep) ManifestDoc *again = NULL;
                        _cleanup_json_ cJSON *j = NULL;
                        char path[] = "/tmp/mcp-lazy-test-XXXXXX";
                        int fd = mkstemp(path);
                        CHECK(fd >= 0 && write(fd, text, len) == (ssize_t) len);
                        close(fd);
                        CHECK(manifest_doc_load(path, &again, &err3) == 0);
                        CHECK(again && ynode_to_json(ynode_get(manifest_doc_backend(again, "b"), "server_info"), &j,
                                                     &err3) == 0);
                        CHECK(cJSON_Compare(j, info, true));
                        unlink(path);
                }
        }
}

static void test_edits_keep_the_rest(void) {
        const char *orig = "server: {name: fleet}\n"
                           "backends:\n"
                           "  keep:\n"
                           "    command: [/bin/keep]\n"
                           "    idle_timeout: 90s\n"
                           "  swap:\n"
                           "    command: [/bin/swap]\n"
                           "    idle_timeout: 10s\n"
                           "tools:\n"
                           "  - {name: k1, backend: keep, input_schema: {type: object}}\n"
                           "  - {name: s1, backend: swap, input_schema: {type: object}}\n"
                           "  - {name: k2, backend: keep, description: \"1.10\", input_schema: {type: object}}\n";
        _cleanup_(manifest_doc_freep) ManifestDoc *d = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *text = NULL, *err = NULL;
        char path[] = "/tmp/mcp-lazy-test-XXXXXX";
        int fd = mkstemp(path);
        size_t len;

        CHECK(fd >= 0 && write(fd, orig, strlen(orig)) == (ssize_t) strlen(orig));
        close(fd);
        CHECK(manifest_doc_load(path, &d, &err) == 0);
        unlink(path);
        if (!d)
                return;
        CHECK(manifest_doc_set_backend_key(d, "swap", "command",
                                           cJSON_CreateStringArray((const char *[]){"/bin/new"}, 1)) == 0);
        CHECK(manifest_doc_set_tools(d, "swap", tools_with("new")) == 0);
        CHECK_STREQ(manifest_doc_tool_owner(d, "k2"), "keep");
        CHECK(manifest_doc_emit(d, &text, &len, &err) == 0);
        CHECK(text && manifest_load_string(text, len, "m.yaml", "/", &m, &err) == 0);
        if (!m)
                return;
        CHECK(m->n_backends == 2 && m->n_tools == 3);
        CHECK_STREQ(m->backends[0].name, "keep");
        CHECK(m->backends[0].idle_timeout_usec == 90 * USEC_PER_SEC);
        CHECK_STREQ(m->backends[1].command[0], "/bin/new");
        CHECK(m->backends[1].idle_timeout_usec == 10 * USEC_PER_SEC); /* untouched key of a touched backend */
        /* the new tool stands where the old one stood; the quoted "1.10" stays text */
        CHECK_STREQ(m->tools[1].name, "t");
        CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->tools[2].json, "description")), "1.10");
        CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->server_info, "name")), "fleet");
}

static void test_refuses_what_does_not_read(void) {
        _cleanup_free_ char *err = NULL;
        ManifestDoc *d = NULL;
        char path[] = "/tmp/mcp-lazy-test-XXXXXX";
        int fd = mkstemp(path);

        CHECK(fd >= 0 && write(fd, "backends: [unclosed\n", 20) == 20);
        close(fd);
        CHECK(manifest_doc_load(path, &d, &err) == -EINVAL);
        CHECK(err && strstr(err, path) && strstr(err, ":2:1: "));
        unlink(path);
}

int main(void) {
        test_roundtrip();
        test_edits_keep_the_rest();
        test_refuses_what_does_not_read();
        return tests_finish("test-manifest-write");
}
