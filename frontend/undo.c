/* The undo record: $XDG_STATE_HOME/mcp-lazy/import-undo.json (~/.local/state/...), listing each
 * rewritten config with its backup and a hash of what import wrote. */
#include <errno.h>
#include <stdint.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "macros.h"
#include "manifest-write.h"
#include "undo.h"

#define BACKUP_SUFFIX ".mcp-lazy-backup"

static char *state_path(void) {
        const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
        char *p = NULL;

        if (xdg && xdg[0] == '/')
                return asprintf(&p, "%s/mcp-lazy/import-undo.json", xdg) < 0 ? NULL : p;
        if (home && home[0] == '/')
                return asprintf(&p, "%s/.local/state/mcp-lazy/import-undo.json", home) < 0 ? NULL : p;
        return NULL;
}

/* FNV-1a, 64 bits: enough to tell whether a file is still what import wrote. */
static void text_hash(const char *s, size_t n, char out[17]) {
        uint64_t h = 0xcbf29ce484222325ULL;

        for (size_t i = 0; i < n; i++)
                h = (h ^ (unsigned char) s[i]) * 0x100000001b3ULL;
        snprintf(out, 17, "%016llx", (unsigned long long) h);
}

static int state_load(const char *path, cJSON **ret) {
        _cleanup_free_ char *text = NULL;
        cJSON *j, *configs;
        size_t len;
        int r = read_file_full(path, 16U * 1024U * 1024U, &text, &len);

        if (r == -ENOENT) {
                j = cJSON_CreateObject();
                if (!j || !cJSON_AddArrayToObject(j, "configs")) {
                        cJSON_Delete(j);
                        return -ENOMEM;
                }
                *ret = j;
                return 0;
        }
        if (r < 0)
                return r;
        j = cJSON_ParseWithLength(text, len);
        configs = cJSON_GetObjectItemCaseSensitive(j, "configs");
        if (!cJSON_IsArray(configs)) {
                cJSON_Delete(j);
                fprintf(stderr, "mcp-lazy: %s is not what mcp-lazy wrote there; move it away\n", path);
                return -EBADMSG;
        }
        *ret = j;
        return 0;
}

static int state_save(const char *path, const cJSON *state) {
        _cleanup_free_ char *text = cJSON_Print(state), *dir = strdup(path);
        int r;

        if (!text || !dir)
                return -ENOMEM;
        r = mkdir_parents(dirname(dir), 0700);
        if (r < 0)
                return r;
        return write_file_atomic(path, text, strlen(text), 0600, false);
}

static cJSON *state_find(const cJSON *state, const char *path) {
        cJSON *c;

        cJSON_ArrayForEach (c, cJSON_GetObjectItemCaseSensitive(state, "configs"))
                if (streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "path")) ?: "", path))
                        return c;
        return NULL;
}

int undo_save_and_write(const char *path_arg, const char *old, size_t old_len, const char *text, size_t len,
                        mode_t mode) {
        _cleanup_free_ char *sp = state_path(), *path = realpath(path_arg, NULL), *backup = NULL;
        _cleanup_json_ cJSON *state = NULL;
        cJSON *entry;
        char hash[17];
        bool made_backup = false;
        int r;

        if (!sp || !path)
                return path ? -ENOMEM : -errno;
        r = state_load(sp, &state);
        if (r < 0)
                return r;
        if (asprintf(&backup, "%s" BACKUP_SUFFIX, path) < 0)
                return -ENOMEM;
        entry = state_find(state, path);
        if (access(backup, F_OK) == 0) {
                if (!entry) {
                        fprintf(stderr,
                                "mcp-lazy: %s exists already, and no import of mcp-lazy made it; move it away first\n",
                                backup);
                        return -EEXIST;
                }
                /* An earlier import kept the original there: it stays the one to go back to. */
        } else {
                r = write_file_atomic(backup, old, old_len, mode, true);
                if (r < 0)
                        return r;
                made_backup = true;
        }
        r = write_file_atomic(path, text, len, mode, true);
        if (r < 0) {
                if (made_backup)
                        (void) unlink(backup);
                return r;
        }
        text_hash(text, len, hash);
        if (!entry) {
                entry = cJSON_CreateObject();
                if (!entry || !cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(state, "configs"), entry)) {
                        cJSON_Delete(entry);
                        return -ENOMEM;
                }
                if (!cJSON_AddStringToObject(entry, "path", path) || !cJSON_AddStringToObject(entry, "backup", backup))
                        return -ENOMEM;
        }
        cJSON_DeleteItemFromObject(entry, "written");
        if (!cJSON_AddStringToObject(entry, "written", hash))
                return -ENOMEM;
        r = state_save(sp, state);
        if (r < 0)
                fprintf(stderr, "mcp-lazy: cannot record %s for --undo in %s: %s (the original is %s)\n", path, sp,
                        strerror(-r), backup);
        return 0;
}

int undo_run(bool force, bool dry_run) {
        _cleanup_free_ char *sp = state_path();
        _cleanup_json_ cJSON *state = NULL;
        cJSON *configs, *c, *next;
        unsigned failed = 0, restored = 0;
        int r;

        if (!sp) {
                fprintf(stderr, "mcp-lazy: HOME is not set: cannot find what import changed\n");
                return -ENXIO;
        }
        r = state_load(sp, &state);
        if (r < 0)
                return r;
        configs = cJSON_GetObjectItemCaseSensitive(state, "configs");
        if (cJSON_GetArraySize(configs) == 0) {
                printf("Nothing to undo: import has changed no client config (%s lists none).\n", sp);
                return 0;
        }
        for (c = configs->child; c; c = next) {
                const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "path"));
                const char *backup = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "backup"));
                const char *written = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "written"));
                _cleanup_free_ char *text = NULL;
                char hash[17] = "";
                size_t len;

                next = c->next;
                if (!path || !backup) {
                        cJSON_Delete(cJSON_DetachItemViaPointer(configs, c));
                        continue;
                }
                if (access(backup, F_OK) < 0) {
                        fprintf(stderr, "mcp-lazy: %s: its backup %s is gone; left as it is\n", path, backup);
                        failed++;
                        continue;
                }
                r = read_file_full(path, 256U * 1024U * 1024U, &text, &len);
                if (r >= 0)
                        text_hash(text, len, hash);
                if (r >= 0 && written && !streq(hash, written) && !force) {
                        fprintf(stderr,
                                "mcp-lazy: %s changed since import rewrote it; left as it is (the original is %s; "
                                "--undo --force puts it back anyway)\n",
                                path, backup);
                        failed++;
                        continue;
                }
                if (dry_run) {
                        printf("Would put back %s from %s\n", path, backup);
                        continue;
                }
                if (rename(backup, path) < 0) {
                        fprintf(stderr, "mcp-lazy: cannot put back %s from %s: %m\n", path, backup);
                        failed++;
                        continue;
                }
                printf("Put back %s\n", path);
                restored++;
                cJSON_Delete(cJSON_DetachItemViaPointer(configs, c));
        }
        if (!dry_run && (restored > 0 || failed == 0)) {
                r = cJSON_GetArraySize(configs) == 0 ? (unlink(sp) < 0 && errno != ENOENT ? -errno : 0)
                                                     : state_save(sp, state);
                if (r < 0)
                        fprintf(stderr, "mcp-lazy: cannot update %s: %s\n", sp, strerror(-r));
        }
        if (restored > 0)
                printf("The manifest stays as it is; its backends no longer serve these clients.\n");
        return failed > 0 ? -EIO : 0;
}
