/* The manifest writer: YNode tree edits, libyaml's emitter, and atomic file replacement. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "macros.h"
#include "manifest-write.h"
#include "manifest.h"

static int node_insert(YNode *parent, size_t at, YNode *child) {
        int r = ynode_append(parent, child);
        if (r < 0)
                return r;
        memmove(parent->items + at + 1, parent->items + at, (parent->n_items - 1 - at) * sizeof(YNode *));
        parent->items[at] = child;
        return 0;
}

/* -EINVAL: nested past YAML_TREE_MAX_DEPTH, or an object with two equal keys. */
static int node_from_json(const cJSON *j, YNode **ret) {
        return ynode_from_json(j, ret);
}

static YNode *node_string(const char *s) {
        _cleanup_json_ cJSON *j = cJSON_CreateString(s);
        YNode *n = NULL;
        return j && node_from_json(j, &n) >= 0 ? n : NULL;
}

/* The value of key in map, creating it (from JSON 'init') when missing; NULL on OOM or a wrong kind. */
static YNode *map_get_or_add(YNode *map, const char *key, const cJSON *init, YNodeKind kind) {
        _cleanup_(ynode_freep) YNode *k = NULL, *v = NULL;
        YNode *found = (YNode *) ynode_get(map, key);

        if (found)
                return found->kind == kind ? found : NULL;
        k = node_string(key);
        if (!k || node_from_json(init, &v) < 0 || ynode_append(map, k) < 0)
                return NULL;
        k = NULL;
        if (ynode_append(map, v) < 0)
                return NULL; /* the key stays with a missing value: the caller fails anyway */
        return TAKE_PTR(v);
}

static int doc_init_empty(ManifestDoc *d) {
        _cleanup_json_ cJSON *j = cJSON_CreateObject();

        if (!j || !cJSON_AddObjectToObject(j, "backends") || !cJSON_AddArrayToObject(j, "tools"))
                return -ENOMEM;
        return node_from_json(j, &d->root);
}

char *manifest_default_path(void) {
        return manifest_default_path_for(geteuid() == 0);
}

char *manifest_default_path_for(bool system) {
        const char *config = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        char *p = NULL;

        if (system)
                return strdup("/etc/mcp-lazy/manifest.yaml");
        if (config && config[0] == '/')
                return asprintf(&p, "%s/mcp-lazy/manifest.yaml", config) < 0 ? NULL : p;
        if (!home || home[0] != '/') {
                struct passwd *pw = getpwuid(geteuid());
                home = pw ? pw->pw_dir : NULL;
        }
        if (!home)
                return NULL;
        return asprintf(&p, "%s/.config/mcp-lazy/manifest.yaml", home) < 0 ? NULL : p;
}

int manifest_doc_new(const char *path, ManifestDoc **ret) {
        _cleanup_(manifest_doc_freep) ManifestDoc *d = calloc(1, sizeof *d);
        int r;

        if (!d || !(d->path = strdup(path)))
                return -ENOMEM;
        r = doc_init_empty(d);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(d);
        return 0;
}

ManifestDoc *manifest_doc_free(ManifestDoc *d) {
        if (!d)
                return NULL;
        free(d->path);
        ynode_free(d->root);
        free(d);
        return NULL;
}

int manifest_doc_load(const char *path, ManifestDoc **ret, char **ret_error) {
        _cleanup_(manifest_doc_freep) ManifestDoc *d = calloc(1, sizeof *d);
        _cleanup_free_ char *text = NULL, *err = NULL;
        size_t len = 0;
        int r;

        *ret_error = NULL;
        if (!d || !(d->path = strdup(path)))
                return -ENOMEM;
        r = read_file_full(path, MANIFEST_MAX_SIZE, &text, &len);
        if (r == -ENOENT)
                r = doc_init_empty(d);
        else if (r >= 0) {
                d->existed = true;
                if (len == 0 || strspn(text, " \t\r\n") == len)
                        r = doc_init_empty(d);
                else {
                        r = yaml_tree_load(text, len, &d->root, &err);
                        if (r == -EINVAL) {
                                if (asprintf(ret_error, "%s:%s", path, err) < 0)
                                        *ret_error = NULL;
                                return r;
                        }
                        if (r >= 0 && d->root->kind != YNODE_MAPPING) {
                                if (asprintf(ret_error, "%s:%u:%u: the manifest must be a mapping", path, d->root->line,
                                             d->root->column) < 0)
                                        *ret_error = NULL;
                                return -EINVAL;
                        }
                }
        } else if (asprintf(ret_error, "%s: %s", path, strerror(-r)) < 0)
                *ret_error = NULL;
        if (r < 0)
                return r;
        *ret = TAKE_PTR(d);
        return 0;
}

const YNode *manifest_doc_backend(const ManifestDoc *d, const char *name) {
        return ynode_get(ynode_get(d->root, "backends"), name);
}

int manifest_doc_set_backend_key(ManifestDoc *d, const char *name, const char *key, cJSON *value) {
        _cleanup_json_ cJSON *v = value, *empty = cJSON_CreateObject();
        _cleanup_(ynode_freep) YNode *k = NULL, *n = NULL;
        YNode *backends, *b;
        int r;

        if (!empty)
                return -ENOMEM;
        backends = map_get_or_add(d->root, "backends", empty, YNODE_MAPPING);
        if (!backends)
                return -EINVAL;
        b = map_get_or_add(backends, name, empty, YNODE_MAPPING);
        if (!b)
                return -EINVAL;
        for (size_t i = 0; i + 1 < b->n_items; i += 2) {
                if (!streq(b->items[i]->value, key))
                        continue;
                if (!v) {
                        ynode_free(b->items[i]);
                        ynode_free(b->items[i + 1]);
                        memmove(b->items + i, b->items + i + 2, (b->n_items - i - 2) * sizeof(YNode *));
                        b->n_items -= 2;
                        return 0;
                }
                r = node_from_json(v, &n);
                if (r < 0)
                        return r;
                ynode_free(b->items[i + 1]);
                b->items[i + 1] = TAKE_PTR(n);
                return 0;
        }
        if (!v)
                return 0;
        r = node_from_json(v, &n);
        if (r < 0)
                return r;
        k = node_string(key);
        if (!k || ynode_append(b, k) < 0)
                return -ENOMEM;
        k = NULL;
        if (ynode_append(b, n) < 0)
                return -ENOMEM;
        n = NULL;
        return 0;
}

static const char *tool_backend(const YNode *tool) {
        const YNode *b = ynode_get(tool, "backend");
        return b && b->kind == YNODE_SCALAR ? b->value : NULL;
}

const char *manifest_doc_tool_owner(const ManifestDoc *d, const char *tool) {
        const YNode *tools = ynode_get(d->root, "tools");

        if (!tools || tools->kind != YNODE_SEQUENCE)
                return NULL;
        for (size_t i = 0; i < tools->n_items; i++) {
                const YNode *name = ynode_get(tools->items[i], "name");
                if (name && name->kind == YNODE_SCALAR && streq(name->value, tool))
                        return tool_backend(tools->items[i]) ?: "";
        }
        return NULL;
}

/* A tools/list entry as a manifest tool: the same keys in the same order, 'backend' after 'name'. */
static int tool_node(const cJSON *tool, const char *backend, YNode **ret) {
        _cleanup_json_ cJSON *t = cJSON_CreateObject();
        const cJSON *it;

        if (!t)
                return -ENOMEM;
        cJSON_ArrayForEach (it, tool) {
                if (!cJSON_AddItemToObject(t, it->string, cJSON_Duplicate(it, true)))
                        return -ENOMEM;
                if (streq(it->string, "name") && !cJSON_AddStringToObject(t, "backend", backend))
                        return -ENOMEM;
        }
        if (!cJSON_GetObjectItemCaseSensitive(t, "backend") && !cJSON_AddStringToObject(t, "backend", backend))
                return -ENOMEM;
        return node_from_json(t, ret);
}

int manifest_doc_set_tools(ManifestDoc *d, const char *name, cJSON *tools) {
        _cleanup_json_ cJSON *owned = tools, *empty = cJSON_CreateArray();
        const cJSON *it;
        YNode *list;
        size_t at = SIZE_MAX, k = 0;

        if (!empty)
                return -ENOMEM;
        list = map_get_or_add(d->root, "tools", empty, YNODE_SEQUENCE);
        if (!list)
                return -EINVAL;
        for (size_t i = 0; i < list->n_items; i++) {
                const char *b = tool_backend(list->items[i]);
                if (b && streq(b, name)) {
                        if (at == SIZE_MAX)
                                at = k;
                        ynode_free(list->items[i]);
                } else
                        list->items[k++] = list->items[i];
        }
        list->n_items = k;
        if (at == SIZE_MAX)
                at = k;
        cJSON_ArrayForEach (it, owned) {
                YNode *n = NULL;
                int r = tool_node(it, name, &n);
                if (r < 0)
                        return r;
                if (node_insert(list, at++, n) < 0) {
                        ynode_free(n);
                        return -ENOMEM;
                }
        }
        return 0;
}

bool manifest_doc_has_env(const ManifestDoc *d) {
        const YNode *backends = ynode_get(d->root, "backends");

        if (!backends || backends->kind != YNODE_MAPPING)
                return false;
        for (size_t i = 1; i < backends->n_items; i += 2) {
                const YNode *env = ynode_get(backends->items[i], "env");
                const YNode *secret = ynode_get(backends->items[i], "secret_env");
                if ((env && env->n_items > 0) || (secret && secret->n_items > 0))
                        return true;
        }
        return false;
}

/* ---- emitting ---------------------------------------------------------------------------------- */

typedef struct Buffer {
        char *data;
        size_t len, alloc;
        bool oom;
} Buffer;

static int buffer_write(void *userdata, unsigned char *data, size_t size) {
        Buffer *b = userdata;

        if (b->len + size + 1 > b->alloc) {
                size_t k = (b->len + size + 1) * 2;
                char *p = realloc(b->data, k);
                if (!p) {
                        b->oom = true;
                        return 0;
                }
                b->data = p;
                b->alloc = k;
        }
        memcpy(b->data + b->len, data, size);
        b->len += size;
        b->data[b->len] = 0;
        return 1;
}

/* A string that a YAML reader would take for something else when written plain: null, a bool (YAML
 * 1.2, and 1.1's yes/no/on/off for other readers), a number, or nothing at all. */
static bool string_needs_quotes(const char *v) {
        static const char *const words[] = {"~", "null", "true", "false", "yes", "no", "on", "off", "y", "n", NULL};
        const char *d = v + (*v == '-' || *v == '+');

        if (!*v)
                return true;
        for (const char *const *w = words; *w; w++)
                if (strcasecmp(v, *w) == 0)
                        return true;
        if ((*d >= '0' && *d <= '9') ||
            (*d == '.' && ((d[1] >= '0' && d[1] <= '9') || strcasecmp(d, ".inf") == 0 || strcasecmp(d, ".nan") == 0)))
                return true;
        return false;
}

static bool seq_of_scalars(const YNode *n) {
        size_t bytes = 0;

        for (size_t i = 0; i < n->n_items; i++) {
                if (n->items[i]->kind != YNODE_SCALAR || strchr(n->items[i]->value, '\n'))
                        return false;
                bytes += n->items[i]->length + 2;
        }
        return bytes <= 400; /* a command line, a list of required keys: one line each */
}

static int emit_node(yaml_emitter_t *e, const YNode *n, bool flow) {
        yaml_event_t ev;
        int ok;

        if (n->kind == YNODE_SCALAR) {
                yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
                if (n->plain)
                        style = YAML_PLAIN_SCALAR_STYLE;
                else if (strchr(n->value, '\n') && !flow)
                        style = YAML_LITERAL_SCALAR_STYLE;
                else if (string_needs_quotes(n->value))
                        style = YAML_SINGLE_QUOTED_SCALAR_STYLE;
                ok = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *) n->value, (int) n->length, 1, 1,
                                                  style);
                return ok && yaml_emitter_emit(e, &ev) ? 0 : -EIO;
        }
        if (n->kind == YNODE_SEQUENCE) {
                bool f = flow || seq_of_scalars(n);
                ok = yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                          f ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
                if (!ok || !yaml_emitter_emit(e, &ev))
                        return -EIO;
                for (size_t i = 0; i < n->n_items; i++)
                        if (emit_node(e, n->items[i], f) < 0)
                                return -EIO;
                ok = yaml_sequence_end_event_initialize(&ev);
                return ok && yaml_emitter_emit(e, &ev) ? 0 : -EIO;
        }
        ok = yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                 flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
        if (!ok || !yaml_emitter_emit(e, &ev))
                return -EIO;
        for (size_t i = 0; i < n->n_items; i++)
                if (emit_node(e, n->items[i], flow) < 0)
                        return -EIO;
        ok = yaml_mapping_end_event_initialize(&ev);
        return ok && yaml_emitter_emit(e, &ev) ? 0 : -EIO;
}

static int emit_yaml(const YNode *root, Buffer *out) {
        yaml_emitter_t e;
        yaml_event_t ev;
        int r = -EIO;

        if (!yaml_emitter_initialize(&e))
                return -ENOMEM;
        yaml_emitter_set_output(&e, buffer_write, out);
        yaml_emitter_set_unicode(&e, 1);
        yaml_emitter_set_width(&e, -1);
        yaml_emitter_set_indent(&e, 2);
        if (yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(&e, &ev) &&
            yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) && yaml_emitter_emit(&e, &ev) &&
            emit_node(&e, root, false) >= 0 && yaml_document_end_event_initialize(&ev, 1) &&
            yaml_emitter_emit(&e, &ev) && yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&e, &ev) &&
            yaml_emitter_flush(&e))
                r = 0;
        yaml_emitter_delete(&e);
        return out->oom ? -ENOMEM : r;
}

int manifest_doc_emit(const ManifestDoc *d, char **ret_text, size_t *ret_len, char **ret_error) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *copy = NULL, *err = NULL;
        Buffer out = {};
        int r;

        *ret_error = NULL;
        r = emit_yaml(d->root, &out);
        if (r < 0) {
                free(out.data);
                if (asprintf(ret_error, "%s: libyaml could not emit the manifest", d->path) < 0)
                        *ret_error = NULL;
                return r;
        }
        copy = strdup(d->path);
        if (!copy) {
                free(out.data);
                return -ENOMEM;
        }
        r = manifest_load_string(out.data, out.len, d->path, dirname(copy), &m, &err);
        if (r < 0) {
                free(out.data);
                *ret_error = TAKE_PTR(err);
                return r;
        }
        *ret_text = out.data;
        *ret_len = out.len;
        return 0;
}

/* ---- files ------------------------------------------------------------------------------------- */

int read_file_full(const char *path, size_t max, char **ret, size_t *ret_len) {
        return read_file_stat(path, max, ret, ret_len, NULL);
}

int read_file_stat(const char *path, size_t max, char **ret, size_t *ret_len, struct stat *ret_st) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        return read_fd_full(fd, max, ret, ret_len, ret_st);
}

int read_fd_full(int fd, size_t max, char **ret, size_t *ret_len, struct stat *ret_st) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, alloc = 0;
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADF;
        /* Refused from its size before anything is allocated for it; a file that grows while it is read
         * is refused once max + 1 bytes came (the room never grows past that). */
        if ((uintmax_t) st.st_size > max)
                return -EFBIG;
        for (;;) {
                ssize_t n;
                if (len + 1 >= alloc) {
                        size_t k = alloc ? alloc * 2 : (size_t) st.st_size + 4096;
                        if (max < SIZE_MAX - 2 && k > max + 2)
                                k = max + 2;
                        char *p = realloc(buf, k);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                        alloc = k;
                }
                n = read(fd, buf + len, alloc - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t) n;
                if (len > max)
                        return -EFBIG;
        }
        buf[len] = 0;
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        if (ret_st)
                *ret_st = st;
        return 0;
}

int mkdir_parents(const char *dir, mode_t mode) {
        _cleanup_free_ char *p = strdup(dir);

        if (!p)
                return -ENOMEM;
        for (char *s = p + 1;; s++) {
                if (*s == '/' || *s == 0) {
                        char c = *s;
                        *s = 0;
                        if (mkdir(p, mode) < 0 && errno != EEXIST)
                                return -errno;
                        *s = c;
                        if (!c)
                                break;
                }
        }
        return 0;
}

int write_all_sync(int fd, const void *data, size_t len) {
        for (size_t done = 0; done < len;) {
                ssize_t n = write(fd, (const char *) data + done, len - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -1;
                done += (size_t) n;
        }
        return fsync(fd);
}

int write_file_atomic(const char *path, const char *data, size_t len, mode_t mode, bool keep_owner) {
        return write_file_atomic_owned(path, data, len, mode, keep_owner, (uid_t) -1, (gid_t) -1);
}

int write_file_atomic_owned(const char *path, const char *data, size_t len, mode_t mode, bool keep_owner, uid_t uid,
                            gid_t gid) {
        _cleanup_free_ char *target = NULL, *tmp = NULL, *dircopy = NULL;
        _cleanup_close_ int fd = -EBADF, dfd = -EBADF;
        struct stat st;
        bool exists;
        int r;

        /* Replace what a symlink points to, not the link. */
        target = realpath(path, NULL);
        if (!target) {
                if (errno != ENOENT)
                        return -errno;
                target = strdup(path);
                if (!target)
                        return -ENOMEM;
        }
        exists = stat(target, &st) >= 0;
        if (asprintf(&tmp, "%s.mcp-lazy-XXXXXX", target) < 0)
                return -ENOMEM;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fchmod(fd, mode) < 0)
                goto fail;
        if (keep_owner && exists && geteuid() == 0 && fchown(fd, st.st_uid, st.st_gid) < 0)
                goto fail;
        /* Before the rename: readers never see the new file with another owner than its own. */
        if ((uid != (uid_t) -1 || gid != (gid_t) -1) && fchown(fd, uid, gid) < 0)
                goto fail;
        if (fchmod(fd, mode) < 0) /* fchown clears the setgid bit */
                goto fail;
        if (write_all_sync(fd, data, len) < 0)
                goto fail;
        fd = safe_close(fd);
        if (rename(tmp, target) < 0)
                goto fail;
        dircopy = strdup(target);
        if (dircopy) {
                dfd = open(dirname(dircopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd >= 0)
                        (void) fsync(dfd);
        }
        return 0;
fail:
        r = -errno;
        (void) unlink(tmp);
        return r;
}
