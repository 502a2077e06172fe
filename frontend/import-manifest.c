/* What import and refresh write into the manifest: a discovered server as a backend, and the file. */
#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "duration.h"
#include "import.h"
#include "macros.h"
#include "manager.h"
#include "printable.h"

int parse_timeout_arg(const char *s, uint64_t *ret) {
        uint64_t usec;

        if (duration_parse(s, &usec) < 0 || usec == 0)
                return -EINVAL;
        *ret = usec;
        return 0;
}

/* The tool keys a manifest takes; anything else a server adds is left out, and said so. */
static const char *const manifest_tool_keys[] = {
        "name",        "title", "description", "inputSchema", "outputSchema",
        "annotations", "icons", "execution",   "_meta",       NULL,
};

cJSON *tools_for_manifest(const cJSON *tools, const char *backend, bool warn) {
        _cleanup_json_ cJSON *out = cJSON_Duplicate(tools, true);
        cJSON *t;

        if (!out)
                return NULL;
        cJSON_ArrayForEach (t, out) {
                cJSON *k = t->child;
                while (k) {
                        cJSON *next = k->next;
                        bool known = false;
                        for (const char *const *c = manifest_tool_keys; *c && !known; c++)
                                known = streq(k->string, *c);
                        if (!known) {
                                if (warn) {
                                        /* The server's words: made printable first. */
                                        _cleanup_free_ char *tool = text_printable(
                                                cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"))
                                                        ?: "?",
                                                256);
                                        _cleanup_free_ char *key = text_printable(k->string ?: "?", 256);
                                        fprintf(stderr,
                                                "mcp-lazy: tool '%s' of '%s': leaving out its key '%s', which the "
                                                "manifest does not take\n",
                                                tool ?: "?", backend, key ?: "?");
                                }
                                cJSON_Delete(cJSON_DetachItemViaPointer(t, k));
                        }
                        k = next;
                }
        }
        return TAKE_PTR(out);
}

int import_store_backend(ManifestDoc *doc, const char *name, const McpDiscovery *d, const cJSON *client_caps,
                         bool warn) {
        static const struct {
                const char *key;
                size_t offset;
        } lists[] = {
                {"resources", offsetof(McpDiscovery, resources)},
                {"resource_templates", offsetof(McpDiscovery, resource_templates)},
                {"prompts", offsetof(McpDiscovery, prompts)},
        };
        cJSON *tools;
        int r;

        r = manifest_doc_set_backend_key(doc, name, "server_info", cJSON_Duplicate(d->server_info, true));
        if (r >= 0)
                r = manifest_doc_set_backend_key(doc, name, "instructions",
                                                 d->instructions ? cJSON_CreateString(d->instructions) : NULL);
        if (r >= 0)
                r = manifest_doc_set_backend_key(doc, name, "capabilities", cJSON_Duplicate(d->capabilities, true));
        if (r >= 0 && client_caps)
                r = manifest_doc_set_backend_key(doc, name, "client_capabilities", cJSON_Duplicate(client_caps, true));
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(lists); i++) {
                const cJSON *l = *(cJSON *const *) ((const char *) d + lists[i].offset);
                r = manifest_doc_set_backend_key(doc, name, lists[i].key,
                                                 l && cJSON_GetArraySize(l) > 0 ? cJSON_Duplicate(l, true) : NULL);
        }
        if (r < 0)
                return r;
        tools = tools_for_manifest(d->tools, name, warn);
        if (!tools)
                return -ENOMEM;
        return manifest_doc_set_tools(doc, name, tools);
}

/* Writes doc as its manifest, or with dry_run prints it; a write that fails is said, and then what
 * else stays as it is. */
static int manifest_write(ManifestDoc *doc, bool dry_run, const char *then) {
        _cleanup_free_ char *text = NULL, *err = NULL, *dir = NULL;
        struct stat st;
        mode_t mode = 0644;
        size_t len;
        int r;

        r = manifest_doc_emit(doc, &text, &len, &err);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: the manifest would not be valid, so it was not written; %s:\n%s\n", then,
                        err ?: strerror(-r));
                return r;
        }
        if (dry_run) {
                printf("--- %s (would be written)\n%s", doc->path, text);
                return 0;
        }
        bool exists = stat(doc->path, &st) >= 0;
        /* As root, with the socket group there (make install made it): the system manager's shims run
         * as users of their own in that group, as do the frontends of its members, so they may read the
         * manifest and no one else. */
        const struct group *gr = geteuid() == 0 ? getgrnam(MCP_LAZY_SOCKET_GROUP) : NULL;
        gid_t gid = gr ? gr->gr_gid : 0;
        bool group_reads = gr && (!exists || st.st_gid == 0 || st.st_gid == gid);

        if (exists)
                mode = st.st_mode & 0777;
        if (manifest_doc_has_env(doc))
                mode &= group_reads ? 0640 : 0600; /* env values are often API keys */
        if (group_reads)
                mode |= 0640;
        dir = strdup(doc->path);
        if (!dir)
                return -ENOMEM;
        r = mkdir_parents(dirname(dir), 0755);
        /* A failure leaves the manifest on disk as it was: the rename is the last step that can fail. */
        if (r >= 0)
                r = write_file_atomic_owned(doc->path, text, len, mode, true, group_reads ? 0 : (uid_t) -1,
                                            group_reads ? gid : (gid_t) -1);
        if (r < 0)
                fprintf(stderr, "mcp-lazy: cannot write the manifest %s: %s; %s\n", doc->path, strerror(-r), then);
        return r;
}

static int manifest_write_with_secrets(ManifestDoc *doc, bool dry_run) {
        return manifest_write(doc, dry_run,
                              "the secrets files said above stay as they are now: run it again once it can be");
}

/* A shim started before its file changed has the old values (the unit read the file when it started),
 * and the manifest may say nothing new about it: its unit is reloaded. */
static void units_reload(char *const *backends) {
        manager_reload_services(MANAGER_SYSTEM, backends);
}

int import_write_manifest(ManifestDoc *doc, bool dry_run) {
        _cleanup_free_ char *text = NULL, *err = NULL;
        size_t len;
        int r;

        /* Checked first: the secrets files change only for a manifest that will be written too
         * (secrets_split() checks the manifest it makes before it changes any file). */
        r = manifest_doc_emit(doc, &text, &len, &err);
        if (r < 0) {
                fprintf(stderr, "mcp-lazy: the manifest would not be valid, so nothing was written:\n%s\n",
                        err ?: strerror(-r));
                return r;
        }
        if (!secrets_wanted(doc->path))
                return manifest_write(doc, dry_run, "nothing was changed");
        return secrets_split(doc, dry_run, manifest_write_with_secrets, units_reload);
}
