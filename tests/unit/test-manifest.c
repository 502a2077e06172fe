/* The manifest reader against fixtures: manifests/good-*.{yaml,json} must load and give the tools in
 * the matching .expected file; manifests/bad-* must fail with exactly the text of the matching .err. */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macros.h"
#include "manifest.h"
#include "tests.h"

static char *slurp(const char *path) {
        FILE *f = fopen(path, "re");
        char *buf;
        long n;

        if (!f)
                return NULL;
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        rewind(f);
        buf = calloc(1, (size_t) n + 1);
        if (buf && fread(buf, 1, (size_t) n, f) != (size_t) n)
                buf = (free(buf), NULL);
        fclose(f);
        return buf;
}

static char *with_suffix(const char *path, const char *suffix) {
        const char *dot = strrchr(path, '.');
        char *p = NULL;
        return asprintf(&p, "%.*s%s", (int) (dot - path), path, suffix) < 0 ? NULL : p;
}

static void test_bad(const char *path) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL, *errpath = with_suffix(path, ".err"), *want = slurp(errpath);
        int r = manifest_load_file(path, &m, &err);

        CHECK(r == -EINVAL);
        if (want && strlen(want) > 0 && want[strlen(want) - 1] == '\n')
                want[strlen(want) - 1] = 0;
        if (getenv("UPDATE_FIXTURES") && err) {
                FILE *f = fopen(errpath, "we");
                fprintf(f, "%s\n", err);
                fclose(f);
        }
        CHECK_STREQ(err, want);
}

static void test_good(const char *path) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL, *exppath = with_suffix(path, ".expected"), *want = slurp(exppath);
        _cleanup_json_ cJSON *tools = cJSON_CreateArray(), *expected = NULL;
        _cleanup_free_ char *got = NULL, *want_printed = NULL;
        int r = manifest_load_file(path, &m, &err);

        if (r < 0)
                fprintf(stderr, "%s: %s\n", path, err ?: "?");
        CHECK(r == 0);
        if (r < 0)
                return;
        for (size_t i = 0; i < m->n_tools; i++)
                cJSON_AddItemReferenceToArray(tools, m->tools[i].json);
        got = cJSON_PrintUnformatted(tools);
        expected = want ? cJSON_Parse(want) : NULL;
        CHECK(expected != NULL);
        /* Printed, so that key order counts too. */
        want_printed = expected ? cJSON_PrintUnformatted(expected) : NULL;
        CHECK_STREQ(got, want_printed);
}

static void test_details(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL;
        const Backend *b;

        CHECK(manifest_load_file("manifests/good-seed.yaml", &m, &err) == 0);
        if (!m)
                return;
        b = manifest_find_backend(m, "database");
        CHECK(b && b->idle_timeout_usec == 300 * USEC_PER_SEC);
        CHECK(b && b->sharing == SHARING_POOLED);
        CHECK(b && b->max_sessions == MANIFEST_DEFAULT_MAX_SESSIONS);
        CHECK(b && b->command && streq(b->command[0], "/usr/bin/env") && !b->command[3]);
        CHECK(m->n_tools == 1 && m->tools[0].backend == 0);
        CHECK(manifest_find_tool(m, "query") == &m->tools[0]);
        CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(m->server_info, "name")), "mcp-lazy");
}

static void test_options(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL;
        const char *text = "server: {name: fleet, version: '2.0', instructions: Use the tools., page_size: 2}\n"
                           "backends:\n  b:\n    command: [x]\n    idle_timeout: 0\n    cwd: rel/dir\n"
                           "    env: {A: 1, B: 'two'}\n    secret_env: [TOKEN, PGPASSWORD]\n"
                           "    sharing: session\n    socket: /run/x.sock\n"
                           "    max_sessions: 20000\n"
                           "  c:\n    command: [y]\n    lifecycle: resident\n  d:\n    command: [z]\n    lifecycle: warm\n";
        const Backend *b;

        CHECK(manifest_load_string(text, strlen(text), "inline", "/base", &m, &err) == 0);
        if (!m)
                return;
        b = &m->backends[0];
        CHECK(b->idle_timeout_usec == USEC_INFINITY);
        CHECK_STREQ(b->cwd, "/base/rel/dir");
        CHECK_STREQ(b->env[0], "A=1");
        CHECK_STREQ(b->env[1], "B=two");
        CHECK(b->secret_env && streq(b->secret_env[0], "TOKEN") && streq(b->secret_env[1], "PGPASSWORD") &&
              !b->secret_env[2]);
        CHECK(!m->backends[1].secret_env);
        CHECK(b->sharing == SHARING_SESSION);
        CHECK_STREQ(b->socket, "/run/x.sock");
        CHECK(b->lifecycle == LIFECYCLE_LAZY);
        CHECK(m->backends[1].lifecycle == LIFECYCLE_RESIDENT);
        CHECK(m->backends[2].lifecycle == LIFECYCLE_WARM);
        CHECK_STREQ(lifecycle_to_string(m->backends[2].lifecycle), "warm");
        CHECK(b->max_sessions == 20000);
        CHECK(m->page_size == 2);
        CHECK_STREQ(m->instructions, "Use the tools.");
        CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(m->server_info, "version")), "2.0");
}

/* A backend's own initialize answer, recorded for --backend: kept as written, text fields as text. */
static void test_identity(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL, *info = NULL, *caps = NULL;
        const char *text = "backends:\n  b:\n    command: [x]\n"
                           "    server_info: {name: example-servers/everything, title: Everything, version: 2.0, "
                           "icons: [{src: a}]}\n"
                           "    instructions: Call echo first.\n"
                           "    capabilities: {tools: {listChanged: true}, logging: {}, resources: {subscribe: true}}\n"
                           "  plain:\n    command: [y]\n";
        const Backend *b;

        CHECK(manifest_load_string(text, strlen(text), "inline", "/base", &m, &err) == 0);
        if (!m)
                return;
        b = manifest_find_backend(m, "b");
        info = cJSON_PrintUnformatted(b->server_info);
        CHECK_STREQ(info, "{\"name\":\"example-servers/everything\",\"title\":\"Everything\",\"version\":\"2.0\","
                          "\"icons\":[{\"src\":\"a\"}]}");
        CHECK_STREQ(b->instructions, "Call echo first.");
        caps = cJSON_PrintUnformatted(b->capabilities);
        CHECK_STREQ(caps, "{\"tools\":{\"listChanged\":true},\"logging\":{},\"resources\":{\"subscribe\":true}}");
        b = manifest_find_backend(m, "plain");
        CHECK(!b->server_info && !b->instructions && !b->capabilities);
}

/* A mapping of many keys: duplicates are still found (by an index of the keys, not by comparing
 * each key with every other: 100000 keys took a minute that way, a 64 MiB file days). */
static void test_many_keys(void) {
        const size_t n = 100000;
        for (int json = 0; json <= 1; json++)
                for (int dup = 0; dup <= 1; dup++) {
                        _cleanup_(manifest_freep) Manifest *m = NULL;
                        _cleanup_free_ char *err = NULL, *text = NULL;
                        size_t len = 0;
                        FILE *f = open_memstream(&text, &len);
                        int r;

                        fputs(json ? "{\"backends\": {\"b\": {\"command\": [\"x\"]}}, \"tools\": [{\"name\": \"t\", "
                                     "\"backend\": \"b\", \"input_schema\": {\"type\": \"object\", \"properties\": {"
                                   : "backends: {b: {command: [x]}}\ntools:\n- {name: t, backend: b, input_schema: "
                                     "{type: object, properties: {",
                              f);
                        for (size_t i = 0; i < n; i++)
                                fprintf(f, json ? "%s\"k%zu\": 1" : "%sk%zu: 1", i ? ", " : "", i);
                        if (dup)
                                fputs(json ? ", \"k5\": 2" : ", k5: 2", f);
                        fputs(json ? "}}}]}\n" : "}}}\n", f);
                        fclose(f);
                        r = manifest_load_string(text, len, "many", "/", &m, &err);
                        if (dup) {
                                CHECK(r == -EINVAL);
                                CHECK(err && strstr(err, ": duplicate key 'k5'"));
                        } else {
                                CHECK(r == 0);
                                CHECK(m && cJSON_GetArraySize(cJSON_GetObjectItem(
                                                   cJSON_GetObjectItem(m->tools[0].json, "inputSchema"),
                                                   "properties")) == (int) n);
                        }
                }
}

/* What aliases add is bounded in bytes too: a 1 MiB string may be repeated 16 times, not 17. */
static void test_alias_bytes(void) {
        for (int extra = 0; extra <= 1; extra++) {
                _cleanup_(manifest_freep) Manifest *m = NULL;
                _cleanup_free_ char *err = NULL, *text = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&text, &len);
                int r;

                fputs("x-big: &big '", f);
                for (size_t i = 0; i < 1024 * 1024; i++)
                        fputc('a', f);
                fputs("'\nx-copies: [", f);
                for (int i = 0; i < 16 + extra; i++)
                        fputs(i ? ", *big" : "*big", f);
                fputs("]\nbackends: {b: {command: [x]}}\n", f);
                fclose(f);
                r = manifest_load_string(text, len, "big", "/", &m, &err);
                if (extra) {
                        CHECK(r == -EINVAL);
                        CHECK_STREQ(err, "big:2:108: alias *big would make aliases expand to more than 100000 nodes or "
                                         "16 MiB in all; refusing a document that grows without bound (a \"billion "
                                         "laughs\")");
                } else
                        CHECK(r == 0);
        }
}

/* Merge keys: the mapping's own keys win, then the sources in order. */
static void test_merge(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL;
        const Backend *a, *b;

        CHECK(manifest_load_file("manifests/good-merge.yaml", &m, &err) == 0);
        if (!m)
                return;
        a = manifest_find_backend(m, "a");
        b = manifest_find_backend(m, "b");
        CHECK(a && a->idle_timeout_usec == 300 * USEC_PER_SEC && a->sharing == SHARING_SESSION);
        CHECK(a && streq(a->command[0], "x"));
        CHECK(b && b->idle_timeout_usec == 60 * USEC_PER_SEC && b->sharing == SHARING_POOLED);
        CHECK(b && streq(b->command[0], "y"));
}

static char *tools_printed(const Manifest *m) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < m->n_tools; i++)
                cJSON_AddItemReferenceToArray(a, m->tools[i].json);
        return cJSON_PrintUnformatted(a);
}

/* The cache gives exactly what parsing gives, notices a changed file, and survives a corrupt entry. */
static void test_cache(void) {
        char dir[] = "/tmp/test-manifest-cache.XXXXXX", path[256], cmd[600];
        _cleanup_free_ char *first = NULL, *second = NULL, *third = NULL, *err = NULL;
        Manifest *m = NULL;
        FILE *f;

        CHECK(mkdtemp(dir) != NULL);
        setenv("MCP_LAZY_CACHE_DIR", dir, 1);
        snprintf(path, sizeof path, "%s/m.yaml", dir);
        snprintf(cmd, sizeof cmd, "cp manifests/good-types.yaml %s", path);
        CHECK(system(cmd) == 0);

        CHECK(manifest_load_file(path, &m, &err) == 0);
        first = m ? tools_printed(m) : NULL;
        m = manifest_free(m);
        snprintf(cmd, sizeof cmd, "test $(ls %s/*.json | wc -l) = 1", dir);
        CHECK(system(cmd) == 0); /* written */
        CHECK(manifest_load_file(path, &m, &err) == 0);
        second = m ? tools_printed(m) : NULL;
        m = manifest_free(m);
        CHECK_STREQ(second, first); /* "1.0" stays "1.0", 0x10 is 16, ~ is null: as parsed */

        snprintf(cmd, sizeof cmd, "for f in %s/*.json; do printf 'garbage' > $f; done", dir);
        CHECK(system(cmd) == 0);
        CHECK(manifest_load_file(path, &m, &err) == 0);
        m = manifest_free(m);

        f = fopen(path, "we");
        fputs("backends: {b: {command: [x]}}\ntools: [{name: changed, backend: b, input_schema: {type: object}}]\n", f);
        fclose(f);
        CHECK(manifest_load_file(path, &m, &err) == 0);
        third = m ? tools_printed(m) : NULL;
        CHECK(third && strstr(third, "\"changed\""));
        manifest_free(m);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
        setenv("MCP_LAZY_CACHE_DIR", "", 1);
}

/* A shim's read: its backend and its tools, as the whole manifest restricted to it; the other
 * backends left out only when the cache had the tree. */
static void test_cache_backend(void) {
        char dir[] = "/tmp/test-manifest-cache.XXXXXX", path[256], cmd[600];
        _cleanup_free_ char *whole = NULL, *part = NULL, *err = NULL;
        Manifest *m = NULL, *p = NULL;

        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/demo.yaml", dir);
        snprintf(cmd, sizeof cmd, "cp ../../manifests/demo.yaml %s", path);
        CHECK(system(cmd) == 0);

        setenv("MCP_LAZY_CACHE_DIR", "", 1); /* no cache: the whole file */
        CHECK(manifest_load_file_backend(path, "everything", &p, &err) == 0);
        CHECK(p && p->n_backends == 3 && manifest_find_backend(p, "everything"));
        p = manifest_free(p);

        setenv("MCP_LAZY_CACHE_DIR", dir, 1);
        CHECK(manifest_load_file(path, &m, &err) == 0); /* writes the cache */
        CHECK(m && manifest_restrict(m, "everything") == 0);
        whole = m ? tools_printed(m) : NULL;
        CHECK(manifest_load_file_backend(path, "everything", &p, &err) == 0);
        CHECK(p && p->n_backends == 1 && p->n_tools == 13);
        part = p ? tools_printed(p) : NULL;
        CHECK_STREQ(part, whole);
        CHECK(p && m && streq(p->backends[0].name, "everything") &&
              streq(p->backends[0].command[0], m->backends[0].command[0]) &&
              streq(p->backends[0].cwd, m->backends[0].cwd));
        m = manifest_free(m);
        p = manifest_free(p);
        /* A name the manifest does not have: no backend at all, as the shim then says. */
        CHECK(manifest_load_file_backend(path, "nope", &p, &err) == 0);
        CHECK(p && !manifest_find_backend(p, "nope"));
        manifest_free(p);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
        setenv("MCP_LAZY_CACHE_DIR", "", 1);
}

static void test_remote(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL;
        const Backend *b;

        CHECK(manifest_load_file("manifests/good-remote.yaml", &m, &err) == 0);
        if (!m)
                return;
        b = manifest_find_backend(m, "database");
        CHECK(b && b->remote.kind == REMOTE_SSH && !b->command);
        CHECK(b && streq(b->remote.ssh_user, "alice") && streq(b->remote.ssh_host, "db.example.com"));
        CHECK(b && b->remote.port == 2222 && streq(b->remote.remote_name, "postgres"));
        b = manifest_find_backend(m, "files");
        CHECK(b && !b->remote.ssh_user && streq(b->remote.ssh_host, "2001:db8::1") && b->remote.port == 0);
        CHECK(b && streq(b->remote.remote_name, "files"));
        b = manifest_find_backend(m, "vm");
        CHECK(b && b->remote.kind == REMOTE_VSOCK && b->remote.cid == 3 && b->remote.port == 5000);
}

/* A FIFO in the manifest's place is refused at once, never waited on (review 17: a running shim reads
 * its manifest again on every change, in its loop). Before: open() blocked for a writer. */
static void test_fifo(void) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL;
        char path[64] = "/tmp/test-manifest-fifo-XXXXXX";

        CHECK(mkdtemp(path) != NULL);
        strcat(path, "/m.yaml");
        CHECK(mkfifo(path, 0600) >= 0);
        alarm(10); /* a hang fails */
        CHECK(manifest_load_file(path, &m, &err) < 0);
        alarm(0);
        CHECK(err && strstr(err, "not a regular file"));
        unlink(path);
        *strrchr(path, '/') = 0;
        rmdir(path);
}

int main(void) {
        DIR *d = opendir("manifests");
        struct dirent *de;
        unsigned n = 0;

        /* Fixtures are parsed, not cached; the cache has a test of its own. */
        setenv("MCP_LAZY_CACHE_DIR", "", 1);
        CHECK(d != NULL);
        while (d && (de = readdir(d))) {
                char path[512];
                const char *dot = strrchr(de->d_name, '.');

                if (!dot || (!streq(dot, ".yaml") && !streq(dot, ".json")))
                        continue;
                snprintf(path, sizeof path, "manifests/%s", de->d_name);
                if (strncmp(de->d_name, "bad-", 4) == 0)
                        test_bad(path), n++;
                else if (strncmp(de->d_name, "good-", 5) == 0)
                        test_good(path), n++;
        }
        if (d)
                closedir(d);
        CHECK(n >= 10);
        test_details();
        test_fifo();
        test_remote();
        test_options();
        test_identity();
        test_many_keys();
        test_merge();
        test_alias_bytes();
        test_cache();
        test_cache_backend();
        return tests_finish("test-manifest");
}
