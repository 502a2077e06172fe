/* Reading a manifest: from a file or text, through cJSON for JSON, libyaml for YAML, or the cache. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "framing.h"
#include "jsonrpc.h"
#include "macros.h"
#include "manifest-cache.h"
#include "manifest-internal.h"

/* JSON is YAML, but cJSON reads it many times faster than libyaml. A valid JSON manifest is taken
 * that way; anything else (and any mistake, to report it with its position) takes the YAML path. */
static int manifest_from_json_text(const char *text, size_t len, const char *name, const char *dir, Manifest **ret,
                                   YNode **ret_tree) {
        _cleanup_json_ cJSON *j = NULL;
        _cleanup_(ynode_freep) YNode *root = NULL;
        const char *end = NULL;

        if (json_text_depth(text, len) > YAML_TREE_MAX_DEPTH || !utf8_is_valid(text, len) || memchr(text, 0, len))
                return -EINVAL;
        j = cJSON_ParseWithLengthOpts(text, len, &end, false);
        if (!j || !cJSON_IsObject(j))
                return -EINVAL;
        for (; end < text + len; end++)
                if (!strchr(" \t\r\n", *end))
                        return -EINVAL;
        if (ynode_from_json(j, &root) < 0 || manifest_from_tree(root, name, dir, ret, NULL) < 0)
                return -EINVAL;
        if (ret_tree)
                *ret_tree = TAKE_PTR(root);
        return 0;
}

static int manifest_load_yaml(const char *text, size_t len, const char *name, const char *dir, Manifest **ret,
                              char **ret_error, YNode **ret_tree) {
        _cleanup_(ynode_freep) YNode *root = NULL;
        _cleanup_free_ char *err = NULL;
        int r;

        r = yaml_tree_load(text, len, &root, &err);
        if (r == -EINVAL) {
                if (asprintf(ret_error, "%s:%s", name, err) < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        if (r < 0)
                return r;
        r = manifest_from_tree(root, name, dir, ret, ret_error);
        if (r >= 0 && ret_tree)
                *ret_tree = TAKE_PTR(root);
        return r;
}

static bool looks_like_json(const char *text, size_t len) {
        size_t i = 0;
        while (i < len && strchr(" \t\r\n", text[i]))
                i++;
        return i < len && text[i] == '{';
}

int manifest_load_string(const char *text, size_t len, const char *name, const char *dir, Manifest **ret,
                         char **ret_error) {
        if (looks_like_json(text, len) && manifest_from_json_text(text, len, name, dir, ret, NULL) >= 0)
                return 0;
        return manifest_load_yaml(text, len, name, dir, ret, ret_error, NULL);
}

static int read_fd(int fd, const struct stat *st, char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;

        if (S_ISDIR(st->st_mode))
                return -EISDIR;
        if (st->st_size > (off_t) MANIFEST_MAX_SIZE)
                return -EFBIG;
        buf = malloc(MANIFEST_MAX_SIZE / 64);
        size_t alloc = MANIFEST_MAX_SIZE / 64;
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t n;
                if (len == alloc) {
                        char *p;
                        if (alloc >= MANIFEST_MAX_SIZE)
                                return -EFBIG;
                        alloc *= 2;
                        p = realloc(buf, alloc);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                }
                n = read(fd, buf + len, alloc - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

/* The directory a relative cwd in the manifest at path is relative to, wherever we were started. */
static int manifest_dir(const char *path, char **ret) {
        const char *slash = strrchr(path, '/');
        char cwd[PATH_MAX];
        int r = 0;

        *ret = NULL;
        if (path[0] == '/')
                *ret = strndup(path, slash == path ? 1 : (size_t) (slash - path));
        else if (!getcwd(cwd, sizeof cwd))
                return -errno;
        else if (slash)
                r = asprintf(ret, "%s/%.*s", cwd, (int) (slash - path), path);
        else
                *ret = strdup(cwd);
        return r < 0 || !*ret ? -ENOMEM : 0;
}

static int load_file(const char *path, Manifest **ret, struct stat *ret_st, char **ret_error) {
        _cleanup_free_ char *text = NULL, *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        YNode *tree = NULL;
        struct stat st;
        size_t len = 0;
        int r = 0;

        /* Not blocked by a FIFO put in its place (a running shim reads it again on a change: review 17). */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0 || fstat(fd, &st) < 0)
                r = -errno;
        else if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
                r = -ENOTSUP;
        else
                r = read_fd(fd, &st, &text, &len);
        if (r < 0) {
                errno = -r;
                if (asprintf(ret_error, "%s: cannot read manifest: %s", path,
                             r == -EFBIG     ? "larger than 64 MiB"
                             : r == -ENOTSUP ? "not a regular file"
                                             : strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        r = manifest_dir(path, &dir);
        if (r < 0)
                return r;
        if (ret_st)
                *ret_st = st;
        if (looks_like_json(text, len) &&
            manifest_from_json_text(text, len, path, dir, ret, ret_st ? &tree : NULL) >= 0) {
                /* Kept for manifest_load_cached(): a JSON manifest is cached only when asked. */
                if (tree)
                        manifest_cache_put(path, &st, tree);
                ynode_free(tree);
                return 0;
        }
        /* YAML: a tree cached from an earlier start of an unchanged file saves libyaml's work. */
        if (manifest_cache_get(path, &st, &tree) >= 0) {
                r = manifest_from_tree(tree, path, dir, ret, NULL);
                ynode_free(tree);
                if (r >= 0)
                        return 0;
        }
        r = manifest_load_yaml(text, len, path, dir, ret, ret_error, &tree);
        if (r >= 0) {
                manifest_cache_put(path, &st, tree);
                ynode_free(tree);
        }
        return r;
}

int manifest_load_file(const char *path, Manifest **ret, char **ret_error) {
        return load_file(path, ret, NULL, ret_error);
}

int manifest_load_file_stat(const char *path, Manifest **ret, struct stat *ret_st, char **ret_error) {
        return load_file(path, ret, ret_st, ret_error);
}

int manifest_load_file_backend(const char *path, const char *backend, Manifest **ret, char **ret_error) {
        _cleanup_(ynode_freep) YNode *tree = NULL;
        _cleanup_free_ char *dir = NULL;
        struct stat st;

        /* The cache holds only trees that made a valid manifest: one backend's part of it is one too.
         * Anything else (a miss, a part that does not load) reads the file as a whole. */
        if (stat(path, &st) >= 0 && S_ISREG(st.st_mode) && manifest_cache_get_backend(path, &st, backend, &tree) >= 0 &&
            manifest_dir(path, &dir) >= 0 && manifest_from_tree(tree, path, dir, ret, NULL) >= 0)
                return 0;
        return load_file(path, ret, NULL, ret_error);
}

int manifest_load_cached(const char *path, const struct stat *st, Manifest **ret) {
        _cleanup_(ynode_freep) YNode *tree = NULL;
        _cleanup_free_ char *dir = NULL;
        int r;

        r = manifest_cache_get(path, st, &tree);
        if (r < 0)
                return r;
        r = manifest_dir(path, &dir);
        if (r < 0)
                return r;
        return manifest_from_tree(tree, path, dir, ret, NULL) < 0 ? -ENOENT : 0;
}
