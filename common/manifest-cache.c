/* Manifest cache: the parsed tree of a YAML manifest as JSON (which cJSON reads many times faster
 * than libyaml reads YAML), keyed by the file's path and stamped with its identity and times.
 * It lives in $XDG_RUNTIME_DIR/mcp-lazy/cache (/run/mcp-lazy/cache for root), or in
 * $MCP_LAZY_CACHE_DIR; MCP_LAZY_CACHE_DIR= (empty) turns it off. Only trees that made a valid
 * manifest are stored, and a hit is checked again like any other tree. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "macros.h"
#include "manifest-cache.h"

#define CACHE_FORMAT   1
#define CACHE_MAX_SIZE (256U * 1024U * 1024U)

#ifndef MCP_LAZY_VERSION
#define MCP_LAZY_VERSION "0"
#endif

char *manifest_cache_dir(void) {
        const char *e = getenv("MCP_LAZY_CACHE_DIR"), *rt = getenv("XDG_RUNTIME_DIR");
        char *p = NULL;

        if (e)
                return *e ? strdup(e) : NULL;
        if (geteuid() == 0)
                return strdup("/run/mcp-lazy/cache");
        if (rt && rt[0] == '/' && asprintf(&p, "%s/mcp-lazy/cache", rt) >= 0)
                return p;
        return NULL;
}

char *manifest_cache_file(const char *path, const char *variant, const char *suffix) {
        _cleanup_free_ char *dir = manifest_cache_dir();
        uint64_t h = 1469598103934665603ULL;
        char *p = NULL;

        if (!dir)
                return NULL;
        for (const char *c = path; *c; c++)
                h = (h ^ (uint8_t) *c) * 1099511628211ULL;
        if (variant) {
                /* After a byte no path holds, so that no other path hashes the same way. */
                h = (h ^ 0xffU) * 1099511628211ULL;
                for (const char *c = variant; *c; c++)
                        h = (h ^ (uint8_t) *c) * 1099511628211ULL;
        }
        return asprintf(&p, "%s/%016llx%s", dir, (unsigned long long) h, suffix) < 0 ? NULL : p;
}

/* Everything that changes when the file does, and the path (hashes can collide). */
char *manifest_cache_stamp(const char *path, const struct stat *st) {
        char *s = NULL;

        if (asprintf(&s, "%d %s %s %llu %llu %lld %lld.%09ld %lld.%09ld", CACHE_FORMAT, MCP_LAZY_VERSION, path,
                     (unsigned long long) st->st_dev, (unsigned long long) st->st_ino, (long long) st->st_size,
                     (long long) st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (long long) st->st_ctim.tv_sec,
                     st->st_ctim.tv_nsec) < 0)
                return NULL;
        return s;
}

/* Drops every backend but backend, and every tool of another backend, from an encoded tree (scalars
 * are "=text" or "'text"). */
static void prune_to_backend(cJSON *root, const char *backend) {
        cJSON *backends = cJSON_GetObjectItemCaseSensitive(root, "backends");
        cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
        cJSON *c, *next;

        if (cJSON_IsObject(backends))
                for (c = backends->child; c; c = next) {
                        next = c->next;
                        if (!c->string || !streq(c->string, backend))
                                cJSON_Delete(cJSON_DetachItemViaPointer(backends, c));
                }
        if (cJSON_IsArray(tools))
                for (c = tools->child; c; c = next) {
                        const cJSON *b = cJSON_GetObjectItemCaseSensitive(c, "backend");
                        next = c->next;
                        if (cJSON_IsString(b) && b->valuestring[0] && !streq(b->valuestring + 1, backend))
                                cJSON_Delete(cJSON_DetachItemViaPointer(tools, c));
                }
}

int manifest_cache_get(const char *path, const struct stat *st, YNode **ret) {
        return manifest_cache_get_backend(path, st, NULL, ret);
}

int manifest_cache_get_backend(const char *path, const struct stat *st, const char *backend, YNode **ret) {
        _cleanup_free_ char *file = manifest_cache_file(path, NULL, ".json"), *want = manifest_cache_stamp(path, st),
                            *buf = NULL;
        _cleanup_close_ int fd = -EBADF;
        _cleanup_json_ cJSON *j = NULL;
        struct stat cst;
        ssize_t n;

        if (!file || !want)
                return -ENOENT;
        fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* a FIFO must not hang us */
        /* Only a file of our own, that no one else can have written. */
        if (fd < 0 || fstat(fd, &cst) < 0 || !S_ISREG(cst.st_mode) || cst.st_uid != geteuid() || (cst.st_mode & 0022) ||
            cst.st_size <= 0 || (uint64_t) cst.st_size > CACHE_MAX_SIZE)
                return -ENOENT;
        buf = malloc((size_t) cst.st_size);
        if (!buf)
                return -ENOENT;
        n = read(fd, buf, (size_t) cst.st_size);
        if (n != cst.st_size)
                return -ENOENT;
        j = cJSON_ParseWithLength(buf, (size_t) n);
        if (!cJSON_IsArray(j) || !cJSON_IsString(cJSON_GetArrayItem(j, 0)) ||
            !streq(cJSON_GetArrayItem(j, 0)->valuestring, want))
                return -ENOENT;
        if (backend)
                prune_to_backend(cJSON_GetArrayItem(j, 1), backend);
        return ynode_decode(cJSON_GetArrayItem(j, 1), ret) < 0 ? -ENOENT : 0;
}

int manifest_cache_write(const char *file, const struct iovec *iov, size_t n) {
        _cleanup_free_ char *dir = manifest_cache_dir(), *tmp = NULL;
        _cleanup_close_ int fd = -EBADF;
        char *slash;
        ssize_t k;
        size_t len = 0;

        if (!dir || asprintf(&tmp, "%s.XXXXXX", file) < 0)
                return -ENOMEM;
        /* The parent (a runtime dir) exists; ours is made private. */
        slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                (void) mkdir(dir, 0755);
                *slash = '/';
        }
        (void) mkdir(dir, 0700);
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (size_t i = 0; i < n; i++)
                len += iov[i].iov_len;
        /* Written whole, then renamed over: a reader sees the old file or the new one, never a part. */
        k = writev(fd, iov, (int) n);
        if (k != (ssize_t) len || rename(tmp, file) < 0) {
                int r = k < 0 ? -errno : -EIO;
                (void) unlink(tmp);
                return r;
        }
        return 0;
}

void manifest_cache_put(const char *path, const struct stat *st, const YNode *tree) {
        _cleanup_free_ char *file = manifest_cache_file(path, NULL, ".json"), *s = manifest_cache_stamp(path, st),
                            *text = NULL;
        _cleanup_json_ cJSON *j = cJSON_CreateArray();
        cJSON *enc;

        if (!file || !s || !j)
                return;
        enc = ynode_encode(tree);
        if (!cJSON_AddItemToArray(j, cJSON_CreateString(s)) || !enc || !cJSON_AddItemToArray(j, enc)) {
                cJSON_Delete(enc);
                return;
        }
        text = cJSON_PrintUnformatted(j);
        if (text)
                (void) manifest_cache_write(file, &(struct iovec){text, strlen(text)}, 1);
}
