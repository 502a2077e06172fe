/* The era a backend turned out to speak, kept across the shim's exits in a small file of its own
 * ($STATE_DIRECTORY, else $RUNTIME_DIRECTORY, else $XDG_RUNTIME_DIR/mcp-lazy), so that the next
 * activation of a handshake-era backend skips the probe. Keyed by the backend's command: a changed
 * command is probed again. Only a regular file of the shim's own user, not writable by others, is
 * read; it is replaced atomically; and an era the backend then disagrees with is probed again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"
#include "shimd.h"

#define ERA_STATE_MAX_BYTES (64U * 1024U)

static char *state_dir(void) {
        const char *d = getenv("STATE_DIRECTORY") ?: getenv("RUNTIME_DIRECTORY");
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        char *r = NULL;

        if (d && d[0] == '/')
                return strndup(d, strcspn(d, ":")); /* several directories: the first */
        if (xdg && xdg[0] == '/' && asprintf(&r, "%s/mcp-lazy", xdg) < 0)
                return NULL;
        return r;
}

static char *state_path(const Shim *s) {
        _cleanup_free_ char *dir = state_dir();
        char *p = NULL;

        if (!dir || asprintf(&p, "%s/%s.era", dir, s->backend->name) < 0)
                return NULL;
        return p;
}

/* What the era is keyed by: the command (argv as a JSON array). */
static char *command_key(const Shim *s) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();

        for (char **arg = s->backend->command; a && arg && *arg; arg++)
                if (!cJSON_AddItemToArray(a, cJSON_CreateString(*arg)))
                        return NULL;
        return a ? cJSON_PrintUnformatted(a) : NULL;
}

static int read_own_file(const char *path, char **ret) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        ssize_t n;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0022) ||
            st.st_size > (off_t) ERA_STATE_MAX_BYTES)
                return -EPERM;
        buf = malloc((size_t) st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        n = read(fd, buf, (size_t) st.st_size);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

BackendEra era_state_load(const Shim *s) {
        _cleanup_free_ char *path = state_path(s), *text = NULL, *key = command_key(s);
        _cleanup_json_ cJSON *j = NULL;
        const char *era, *cmd;
        int r;

        if (!path || !key || s->backend->protocol != PROTOCOL_AUTO)
                return BACKEND_ERA_UNKNOWN;
        r = read_own_file(path, &text);
        if (r < 0) {
                if (r != -ENOENT)
                        log_warning_errno(r, "Not using %s (not a file of this user's alone: %m), probing instead.",
                                          path);
                return BACKEND_ERA_UNKNOWN;
        }
        j = cJSON_Parse(text);
        era = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "era"));
        cmd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "command"));
        if (!era || !cmd || !streq(cmd, key))
                return BACKEND_ERA_UNKNOWN; /* another command, or not ours to read: probe */
        if (streq(era, "modern") || streq(era, "legacy")) {
                log_info("Backend '%s' spoke %s last time (%s).", s->backend->name,
                         streq(era, "modern") ? "2026-07-28" : "the handshake era", path);
                return streq(era, "modern") ? BACKEND_ERA_MODERN : BACKEND_ERA_LEGACY;
        }
        return BACKEND_ERA_UNKNOWN;
}

static int write_atomically(const char *path, const char *text) {
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -EBADF;
        size_t len = strlen(text);

        if (asprintf(&tmp, "%s.XXXXXX", path) < 0)
                return -ENOMEM;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (write(fd, text, len) != (ssize_t) len || fsync(fd) < 0 ||
            rename(tmp, path) < 0) {
                int r = -errno ?: -EIO;
                (void) unlink(tmp);
                return r;
        }
        return 0;
}

void shim_learn_era(Shim *s, BackendEra era) {
        _cleanup_free_ char *path = NULL, *key = NULL, *text = NULL;
        _cleanup_json_ cJSON *j = NULL;
        int r;

        if (s->learned_era == era)
                return;
        s->learned_era = era;
        if (s->backend->protocol != PROTOCOL_AUTO || era == BACKEND_ERA_UNKNOWN)
                return;
        path = state_path(s);
        key = command_key(s);
        j = cJSON_CreateObject();
        if (!path || !key || !j || !cJSON_AddStringToObject(j, "command", key) ||
            !cJSON_AddStringToObject(j, "era", era == BACKEND_ERA_MODERN ? "modern" : "legacy") ||
            !(text = cJSON_PrintUnformatted(j)))
                return;
        r = write_atomically(path, text);
        if (r < 0)
                log_debug_errno(r, "Cannot keep backend '%s''s era in %s, ignoring: %m", s->backend->name, path);
}
