/* Prepared answers: every answer a manifest gives without a backend, printed once by the same code
 * that answers from the manifest, kept as one buffer, and cached next to the manifest cache as a file
 * that is read and checked, never parsed: a header, the key it was made for, a page table, then the
 * texts, and the routes (which backend serves each tool, and where a local backend's socket is), so
 * that a session's calls need no manifest either. A file that fails any check is a miss: the answers
 * are made again from the manifest; a route that fails its check sends that call to the manifest. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "answers.h"
#include "era.h"
#include "channel.h"
#include "frontend.h"
#include "log.h"
#include "macros.h"
#include "manifest-cache.h"

#define ANSWERS_MAGIC    "mcp-lazy"
#define ANSWERS_FORMAT   UINT64_C(0x616e737765727302) /* "answers" 2: read in another byte order, it differs */
#define ANSWERS_MAX_SIZE (512U * 1024U * 1024U)
#define ANSWERS_KEY_MAX  (64U * 1024U)
#define N_VERSIONS       4U /* era_legacy_versions */

/* The answers with a fixed place in the header, and where each kind's first one sits. */
enum {
        SLOT_INITIALIZE = 0,
        SLOT_DISCOVER = SLOT_INITIALIZE + N_VERSIONS,
        SLOT_MODERN_TAIL,
        SLOT_RESOURCES,
        SLOT_RESOURCE_TEMPLATES,
        SLOT_PROMPTS,
        _SLOT_MAX,
};

typedef struct Seg {
        uint64_t off, len; /* len 0: none */
} Seg;

typedef struct Header {
        char magic[8];
        uint64_t format;
        uint64_t size;    /* of the whole file */
        uint64_t sum;     /* of the whole file, this field read as 0 */
        uint64_t key_len; /* the key follows the header; then, 8-aligned, the page table; then the texts */
        uint64_t n_tools, page_size, n_pages;
        uint64_t surfaces[6];
        uint64_t notify; /* bit 0 tools, 1 resources, 2 prompts */
        Seg fixed[_SLOT_MAX];
        Seg routes; /* see routes_build() */
} Header;

struct Answers {
        unsigned n_ref; /* the session's, and one for each answer a channel still holds */
        char *buf;      /* the file's bytes: a Header first */
        size_t len;
        const Seg *pages;
        struct stat st;
        Surfaces surfaces;
        /* The routes by tool name (keys: the names in buf), made when a second tool is looked up:
         * each tool's local backend name, or route_refused. */
        Hashmap *route_index;
        bool route_walked, route_index_tried;
};

#define ALIGN8(x) (((x) + 7U) & ~(size_t) 7U)

static uint64_t rotl64(uint64_t x, unsigned r) {
        return (x << r) | (x >> (64U - r));
}

static uint64_t fmix64(uint64_t k) {
        k ^= k >> 33;
        k *= UINT64_C(0xff51afd7ed558ccd);
        k ^= k >> 33;
        k *= UINT64_C(0xc4ceb9fe1a85ec53);
        return k ^ (k >> 33);
}

/* A checksum against a damaged file (not a secret: who can write the cache can write the manifest). */
static uint64_t hash64(uint64_t h, const void *data, size_t len) {
        const unsigned char *p = data;
        uint64_t w;
        size_t i = 0;

        for (; i + 8 <= len; i += 8) {
                memcpy(&w, p + i, 8);
                w *= UINT64_C(0x87c37b91114253d5);
                w = rotl64(w, 31) * UINT64_C(0x4cf5ad432745937f);
                h = rotl64(h ^ w, 27) * 5 + 0x52dce729;
        }
        w = 0;
        memcpy(&w, p + i, len - i);
        h ^= rotl64(w * UINT64_C(0x87c37b91114253d5), 31) * UINT64_C(0x4cf5ad432745937f);
        return fmix64(h ^ len);
}

static uint64_t file_sum(const char *buf, size_t len) {
        Header h;

        memcpy(&h, buf, sizeof h);
        h.sum = 0;
        return hash64(hash64(1, &h, sizeof h), buf + sizeof h, len - sizeof h);
}

void answers_seal(char *buf, size_t len) {
        Header h;

        memcpy(&h, buf, sizeof h);
        h.size = len;
        memcpy(buf, &h, sizeof h);
        h.sum = file_sum(buf, len);
        memcpy(buf, &h, sizeof h);
}

/* ---- building ---- */

typedef struct Out {
        char *buf;
        size_t len, cap;
} Out;

static void out_done(Out *o) {
        free(o->buf);
}

static int out_reserve(Out *o, size_t n) {
        size_t cap = o->cap ?: 4096;
        char *p;

        if (o->len + n <= o->cap)
                return 0;
        while (cap < o->len + n)
                cap *= 2;
        p = realloc(o->buf, cap);
        if (!p)
                return -ENOMEM;
        memset(p + o->cap, 0, cap - o->cap);
        o->buf = p;
        o->cap = cap;
        return 0;
}

/* Prints result (taken) at the end of o; its place in *ret. strip: the braces off (the tail). */
static int out_result(Out *o, cJSON *result, bool strip, Seg *ret) {
        _cleanup_json_ cJSON *r = result;
        _cleanup_free_ char *text = r ? cJSON_PrintUnformatted(r) : NULL;
        size_t len;

        if (!text)
                return -ENOMEM;
        len = strlen(text);
        if (strip) {
                if (len < 3 || text[0] != '{' || text[len - 1] != '}')
                        return -EINVAL;
                memmove(text, text + 1, len - 2);
                len -= 2;
        }
        if (out_reserve(o, len) < 0)
                return -ENOMEM;
        memcpy(o->buf + o->len, text, len);
        *ret = (Seg){o->len, len};
        o->len += len;
        return 0;
}

static size_t pages_of(uint64_t n_tools, uint64_t page_size) {
        return page_size && n_tools > page_size ? (size_t) ((n_tools + page_size - 1) / page_size) : 1;
}

static cJSON *modern_tail_new(const Manifest *m) {
        cJSON *r = cJSON_CreateObject();

        if (era_result_complete(r, m->cache_ttl_ms, !m->cache_private, m->server_info) < 0)
                return cJSON_Delete(r), NULL;
        return r;
}

static int build_texts(const Manifest *m, Out *o, Header *h, Seg *pages) {
        int r = 0;

        for (size_t i = 0; r >= 0 && i < N_VERSIONS; i++)
                r = out_result(o, session_initialize_result_new(m, era_legacy_versions[i]), false,
                               &h->fixed[SLOT_INITIALIZE + i]);
        if (r >= 0)
                r = out_result(o, modern_discover_result_new(m), false, &h->fixed[SLOT_DISCOVER]);
        if (r >= 0)
                r = out_result(o, modern_tail_new(m), true, &h->fixed[SLOT_MODERN_TAIL]);
        /* Only what initialize advertises: the rest is refused from the manifest, as before. */
        if (r >= 0 && session_advertises(m, "resources")) {
                r = out_result(o, session_list_new(m, offsetof(Backend, resources), "resources"), false,
                               &h->fixed[SLOT_RESOURCES]);
                if (r >= 0)
                        r = out_result(o,
                                       session_list_new(m, offsetof(Backend, resource_templates), "resourceTemplates"),
                                       false, &h->fixed[SLOT_RESOURCE_TEMPLATES]);
        }
        if (r >= 0 && session_advertises(m, "prompts"))
                r = out_result(o, session_list_new(m, offsetof(Backend, prompts), "prompts"), false,
                               &h->fixed[SLOT_PROMPTS]);
        for (size_t p = 0; r >= 0 && p < h->n_pages; p++)
                r = out_result(o, session_tools_page_new(m, p * m->page_size), false, &pages[p]);
        return r;
}

/* The routes: NUL-terminated fields, the number of backends, then each backend's kind ("L": here, reached
 * through its socket; "R": on another host, reached through the manifest), name and socket path (empty:
 * the default), then each tool's name and its backend's index. Read only by the first call that needs
 * them, and checked field by field then (routes_backend()). */
static int out_field(Out *o, const char *text) {
        size_t len = strlen(text) + 1;

        if (out_reserve(o, len) < 0)
                return -ENOMEM;
        memcpy(o->buf + o->len, text, len);
        o->len += len;
        return 0;
}

static int routes_build(const Manifest *m, Out *o, Seg *ret) {
        size_t start = o->len;
        char n[32];
        int r;

        snprintf(n, sizeof n, "%zu", m->n_backends);
        r = out_field(o, n);
        for (size_t i = 0; r >= 0 && i < m->n_backends; i++) {
                const Backend *b = &m->backends[i];
                r = out_field(o, b->remote.kind == REMOTE_NONE ? "L" : "R");
                if (r >= 0)
                        r = out_field(o, b->name);
                if (r >= 0)
                        r = out_field(o, b->socket ?: "");
        }
        for (size_t i = 0; r >= 0 && i < m->n_tools; i++) {
                snprintf(n, sizeof n, "%zu", m->tools[i].backend);
                r = out_field(o, m->tools[i].name);
                if (r >= 0)
                        r = out_field(o, n);
        }
        if (r < 0)
                return r;
        *ret = (Seg){start, o->len - start};
        return 0;
}

static void surfaces_to_header(const Surfaces *s, Header *h) {
        memcpy(h->surfaces, s->tools, sizeof s->tools);
        memcpy(h->surfaces + 2, s->resources, sizeof s->resources);
        memcpy(h->surfaces + 4, s->prompts, sizeof s->prompts);
        h->notify =
                (uint64_t) s->notify_tools | (uint64_t) s->notify_resources << 1 | (uint64_t) s->notify_prompts << 2;
}

static void surfaces_from_header(const Header *h, Surfaces *s) {
        memcpy(s->tools, h->surfaces, sizeof s->tools);
        memcpy(s->resources, h->surfaces + 2, sizeof s->resources);
        memcpy(s->prompts, h->surfaces + 4, sizeof s->prompts);
        s->notify_tools = h->notify & 1;
        s->notify_resources = h->notify & 2;
        s->notify_prompts = h->notify & 4;
}

static Answers *answers_new(char *buf, size_t len, const struct stat *st) {
        Answers *a = calloc(1, sizeof *a);
        const Header *h = (const Header *) buf;

        if (!a)
                return NULL;
        a->n_ref = 1;
        a->buf = buf;
        a->len = len;
        a->pages = (const Seg *) (buf + ALIGN8(sizeof *h + h->key_len));
        a->st = *st;
        surfaces_from_header(h, &a->surfaces);
        return a;
}

int answers_build(const Manifest *m, const char *key, const struct stat *st, Answers **ret) {
        _cleanup_(out_done) Out o = {};
        size_t key_len = strlen(key), table;
        Surfaces sf;
        Header h = {
                .format = ANSWERS_FORMAT,
                .key_len = key_len,
                .n_tools = m->n_tools,
                .page_size = m->page_size,
                .n_pages = pages_of(m->n_tools, m->page_size),
        };
        _cleanup_free_ Seg *pages = calloc(h.n_pages, sizeof(Seg));
        Answers *a;
        int r;

        if (!pages)
                return -ENOMEM;
        memcpy(h.magic, ANSWERS_MAGIC, sizeof h.magic);
        r = surfaces_from_manifest(m, &sf);
        if (r < 0)
                return r;
        surfaces_to_header(&sf, &h);
        table = ALIGN8(sizeof h + key_len);
        if (out_reserve(&o, table + h.n_pages * sizeof(Seg)) < 0)
                return -ENOMEM;
        memcpy(o.buf + sizeof h, key, key_len);
        o.len = table + h.n_pages * sizeof(Seg);
        r = build_texts(m, &o, &h, pages);
        if (r >= 0)
                r = routes_build(m, &o, &h.routes);
        if (r < 0)
                return r;
        memcpy(o.buf + table, pages, h.n_pages * sizeof(Seg));
        memcpy(o.buf, &h, sizeof h);
        answers_seal(o.buf, o.len);
        a = answers_new(o.buf, o.len, st);
        if (!a)
                return -ENOMEM;
        o.buf = NULL;
        *ret = a;
        return 0;
}

int answers_save(const Answers *a, const char *file) {
        return manifest_cache_write(file, &(struct iovec){a->buf, a->len}, 1);
}

/* ---- reading ---- */

/* A text we send as it is: within the file, one line of a JSON object (the tail: of members). */
static bool seg_valid(const char *buf, size_t len, size_t start, const Seg *s, bool object) {
        const char *t;

        if (s->off < start || s->off > len || s->len > len - s->off || s->len < 2)
                return false;
        t = buf + s->off;
        if (object && (t[0] != '{' || t[s->len - 1] != '}'))
                return false;
        return !memchr(t, '\n', s->len) && !memchr(t, 0, s->len);
}

static bool answers_valid(const char *buf, size_t len, const char *key) {
        const Header *h = (const Header *) buf;
        size_t key_len = strlen(key), start;
        const Seg *pages;

        if (len < sizeof *h || memcmp(h->magic, ANSWERS_MAGIC, sizeof h->magic) != 0 || h->format != ANSWERS_FORMAT ||
            h->size != len || h->key_len != key_len || key_len > len - sizeof *h ||
            memcmp(buf + sizeof *h, key, key_len) != 0)
                return false;
        /* Counts first, so that nothing below can overflow. */
        if (h->n_pages > len / sizeof(Seg) || h->n_tools > len || h->page_size > len ||
            h->n_pages != pages_of(h->n_tools, h->page_size))
                return false;
        start = ALIGN8(sizeof *h + key_len);
        if (start > len || h->n_pages * sizeof(Seg) > len - start)
                return false;
        pages = (const Seg *) (buf + start);
        start += h->n_pages * sizeof(Seg);
        if (file_sum(buf, len) != h->sum)
                return false;
        for (size_t i = 0; i < _SLOT_MAX; i++) {
                bool list = i == SLOT_RESOURCES || i == SLOT_RESOURCE_TEMPLATES || i == SLOT_PROMPTS;

                if (list && h->fixed[i].len == 0 && h->fixed[i].off == 0)
                        continue;
                if (!seg_valid(buf, len, start, &h->fixed[i], i != SLOT_MODERN_TAIL))
                        return false;
        }
        /* resources/list and its templates are advertised together. */
        if (!h->fixed[SLOT_RESOURCES].len != !h->fixed[SLOT_RESOURCE_TEMPLATES].len)
                return false;
        for (size_t p = 0; p < h->n_pages; p++)
                if (!seg_valid(buf, len, start, &pages[p], true))
                        return false;
        /* The routes are checked where they are read; here only that they lie in the file. */
        return h->routes.off >= start && h->routes.off <= len && h->routes.len <= len - h->routes.off;
}

int answers_load(const char *file, const char *key, const struct stat *st, Answers **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        struct stat fst;
        size_t got = 0;
        Answers *a;

        /* O_NONBLOCK: a FIFO put in its place must not hang us (it is refused below). */
        fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
        /* Only a regular file of our own, that no one else can have written. */
        if (fd < 0 || fstat(fd, &fst) < 0 || !S_ISREG(fst.st_mode) || fst.st_uid != geteuid() || (fst.st_mode & 0022) ||
            fst.st_size < (off_t) sizeof(Header) || fst.st_size > (off_t) ANSWERS_MAX_SIZE)
                return -ENOENT;
        buf = malloc((size_t) fst.st_size);
        if (!buf)
                return -ENOENT;
        while (got < (size_t) fst.st_size) {
                ssize_t n = read(fd, buf + got, (size_t) fst.st_size - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -ENOENT;
                got += (size_t) n;
        }
        if (!answers_valid(buf, got, key))
                return -ENOENT;
        a = answers_new(buf, got, st);
        if (!a)
                return -ENOENT;
        TAKE_PTR(buf);
        *ret = a;
        return 0;
}

Answers *answers_ref(Answers *a) {
        a->n_ref++;
        return a;
}

Answers *answers_free(Answers *a) {
        if (!a || --a->n_ref > 0)
                return NULL;
        hashmap_free(a->route_index);
        free(a->buf);
        free(a);
        return NULL;
}

bool answers_get(const Answers *a, AnswerKind kind, size_t index, const char **ret, size_t *ret_len) {
        const Header *h = (const Header *) a->buf;
        const Seg *s;

        /* the kinds kept in a fixed slot; ANSWER_INITIALIZE's slots follow its first, one a version */
        static const unsigned fixed_slot[] = {
                [ANSWER_INITIALIZE] = SLOT_INITIALIZE,
                [ANSWER_DISCOVER] = SLOT_DISCOVER,
                [ANSWER_MODERN_TAIL] = SLOT_MODERN_TAIL,
                [ANSWER_RESOURCES] = SLOT_RESOURCES,
                [ANSWER_RESOURCE_TEMPLATES] = SLOT_RESOURCE_TEMPLATES,
                [ANSWER_PROMPTS] = SLOT_PROMPTS,
        };

        if (kind == ANSWER_TOOLS) {
                if (index >= h->n_pages)
                        return false;
                s = &a->pages[index];
        } else if ((unsigned) kind < ELEMENTSOF(fixed_slot)) {
                if (kind != ANSWER_INITIALIZE)
                        index = 0;
                else if (index >= N_VERSIONS)
                        return false;
                s = &h->fixed[fixed_slot[kind] + index];
        } else
                return false;
        if (s->len == 0)
                return false;
        if (ret)
                *ret = a->buf + s->off;
        if (ret_len)
                *ret_len = s->len;
        return true;
}

size_t answers_n_tools(const Answers *a) {
        return ((const Header *) a->buf)->n_tools;
}

bool answers_tools_page(const Answers *a, size_t offset, size_t *ret_page) {
        const Header *h = (const Header *) a->buf;

        if (offset == 0)
                *ret_page = 0;
        else if (h->page_size && offset % h->page_size == 0)
                *ret_page = offset / h->page_size;
        else
                return false;
        return *ret_page < h->n_pages;
}

/* ---- routes ---- */

typedef struct Fields {
        const char *p, *end;
} Fields;

/* The next NUL-terminated field, or NULL past the end (or when it is not terminated). */
static const char *field_next(Fields *f) {
        const char *t = f->p, *nul;

        if (t >= f->end || !(nul = memchr(t, 0, (size_t) (f->end - t))))
                return NULL;
        f->p = nul + 1;
        return t;
}

static bool field_index(const char *t, size_t limit, size_t *ret) {
        char *e;
        unsigned long long v;

        if (!t || *t < '0' || *t > '9')
                return false;
        errno = 0;
        v = strtoull(t, &e, 10);
        if (*e || errno || v >= limit)
                return false;
        *ret = (size_t) v;
        return true;
}

/* A local backend of the routes, by index (or by name when name is given): its name and socket. */
static bool routes_backend(const Answers *a, size_t index, const char *name, const char **ret_name,
                           const char **ret_socket) {
        const Header *h = (const Header *) a->buf;
        Fields f = {a->buf + h->routes.off, a->buf + h->routes.off + h->routes.len};
        size_t n;

        if (!field_index(field_next(&f), 65536, &n))
                return false;
        for (size_t i = 0; i < n; i++) {
                const char *kind = field_next(&f), *bname = field_next(&f), *socket = field_next(&f);

                if (!kind || !bname || !socket)
                        return false;
                if (name ? !streq(bname, name) : i != index)
                        continue;
                if (!streq(kind, "L") || !backend_name_valid(bname) || (*socket && *socket != '/'))
                        return false;
                *ret_name = bname;
                *ret_socket = *socket ? socket : NULL;
                return true;
        }
        return false;
}

/* Where the index says a tool's route failed its checks (that call goes to the manifest). */
static const char route_refused[] = "";

/* Every tool's route, checked once, in one walk of the routes: what walking them for each tool would
 * find (the first entry of a name; a route that fails its check is refused). */
static Hashmap *route_index_new(const Answers *a) {
        const Header *h = (const Header *) a->buf;
        Fields f = {a->buf + h->routes.off, a->buf + h->routes.off + h->routes.len};
        _cleanup_free_ const char **backends = NULL;
        Hashmap *index = hashmap_new_borrowed();
        const char *t;
        size_t n;

        if (!index)
                return NULL;
        if (!field_index(field_next(&f), 65536, &n))
                return index; /* no routes: every tool is refused */
        backends = calloc(n ?: 1, sizeof *backends);
        if (!backends)
                return hashmap_free(index);
        for (size_t i = 0; i < n; i++) {
                const char *kind = field_next(&f), *bname = field_next(&f), *socket = field_next(&f);

                if (!kind || !bname || !socket)
                        return index;
                backends[i] = streq(kind, "L") && backend_name_valid(bname) && (!*socket || *socket == '/')
                                      ? bname
                                      : route_refused;
        }
        while ((t = field_next(&f))) {
                const char *b = field_next(&f);
                size_t i;
                int r = hashmap_put(index, t, (void *) (field_index(b, n, &i) ? backends[i] : route_refused));

                if (r < 0 && r != -EEXIST)
                        return hashmap_free(index);
        }
        return index;
}

bool answers_tool_backend(Answers *a, const char *tool, const char **ret_backend) {
        const Header *h = (const Header *) a->buf;
        const char *t, *socket, *b;
        size_t n, index;
        Fields f;

        /* A session that calls one tool walks the routes once; from a second tool on, they are indexed
         * (out of memory: walked on each look-up, as before). */
        if (a->route_walked && !a->route_index_tried) {
                a->route_index_tried = true;
                if (!(a->route_index = route_index_new(a)))
                        log_oom();
        }
        a->route_walked = true;
        if (a->route_index) {
                b = hashmap_get(a->route_index, tool);
                if (!b || b == route_refused)
                        return false;
                *ret_backend = b;
                return true;
        }
        f = (Fields){a->buf + h->routes.off, a->buf + h->routes.off + h->routes.len};
        if (!field_index(field_next(&f), 65536, &n))
                return false;
        for (size_t i = 0; i < 3 * n; i++)
                if (!field_next(&f))
                        return false;
        while ((t = field_next(&f))) {
                b = field_next(&f);
                if (!streq(t, tool))
                        continue;
                return field_index(b, n, &index) && routes_backend(a, index, NULL, ret_backend, &socket);
        }
        return false;
}

bool answers_backend_socket(const Answers *a, const char *backend, const char **ret_socket) {
        const char *name;
        return routes_backend(a, 0, backend, &name, ret_socket);
}

const struct stat *answers_stat(const Answers *a) {
        return &a->st;
}

const Surfaces *answers_surfaces(const Answers *a) {
        return &a->surfaces;
}

/* ---- surfaces and keys ---- */

static int digest(const char *text, uint64_t ret[2]) {
        if (!text)
                return -ENOMEM;
        ret[0] = hash64(0x6c697374U, text, strlen(text));
        ret[1] = hash64(UINT64_C(0x9e3779b97f4a7c15), text, strlen(text));
        return 0;
}

int surfaces_from_manifest(const Manifest *m, Surfaces *ret) {
        _cleanup_free_ char *tools = session_surface_print(m, (size_t) -1),
                            *res = session_surface_print(m, offsetof(Backend, resources)),
                            *tpl = session_surface_print(m, offsetof(Backend, resource_templates)),
                            *prompts = session_surface_print(m, offsetof(Backend, prompts)), *both = NULL;
        Surfaces s = {
                .notify_tools = session_notifies(m, "tools"),
                .notify_resources = session_notifies(m, "resources"),
                .notify_prompts = session_notifies(m, "prompts"),
        };

        if (!res || !tpl || asprintf(&both, "%s\n%s", res, tpl) < 0)
                return -ENOMEM;
        if (digest(tools, s.tools) < 0 || digest(both, s.resources) < 0 || digest(prompts, s.prompts) < 0)
                return -ENOMEM;
        *ret = s;
        return 0;
}

char *answers_key(const char *path, const struct stat *st, const char *backend) {
        _cleanup_free_ char *stamp = manifest_cache_stamp(path, st);
        struct stat exe = {};
        char *key = NULL;

        /* Another build prints other answers, even under the same version. */
        if (!stamp || stat("/proc/self/exe", &exe) < 0)
                return NULL;
        if (asprintf(&key, "%s\nexe %llu %llu %lld %lld.%09ld\n%s%s", stamp, (unsigned long long) exe.st_dev,
                     (unsigned long long) exe.st_ino, (long long) exe.st_size, (long long) exe.st_mtim.tv_sec,
                     exe.st_mtim.tv_nsec, backend ? "backend " : "fleet", backend ?: "") < 0)
                return NULL;
        return key;
}

/* ---- what a frontend serves ---- */

#define ANSWER_LEND_MIN (4U * 1024U)

static void answers_release(void *a) {
        answers_free(a);
}

bool session_reply_answer(Session *s, Batch *batch, const Message *m, AnswerKind kind, size_t index) {
        static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":", mid[] = ",\"result\":";
        const char *result, *tail = NULL;
        size_t len, tail_len = 0, n = 0;
        bool list = kind == ANSWER_TOOLS || kind == ANSWER_RESOURCES || kind == ANSWER_RESOURCE_TEMPLATES ||
                    kind == ANSWER_PROMPTS;
        struct iovec iov[8];
        int r;

        if (!s->answers || !m->id_text || !answers_get(s->answers, kind, index, &result, &len))
                return false;
        /* What modern_list_result() adds, as the members a modern list result ends with. */
        if (list && modern_request(m) && !answers_get(s->answers, ANSWER_MODERN_TAIL, 0, &tail, &tail_len))
                return false;
        iov[n++] = (struct iovec){(char *) head, sizeof head - 1};
        iov[n++] = (struct iovec){(char *) m->id_text, strlen(m->id_text)};
        iov[n++] = (struct iovec){(char *) mid, sizeof mid - 1};
        iov[n++] = (struct iovec){(char *) result, tail ? len - 1 : len};
        if (tail) {
                iov[n++] = (struct iovec){(char *) ",", 1};
                iov[n++] = (struct iovec){(char *) tail, tail_len};
                iov[n++] = (struct iovec){(char *) "}", 1};
        }
        iov[n++] = (struct iovec){(char *) "}", 1};
        if (batch) {
                _cleanup_free_ char *text = NULL;
                size_t total = 0;
                cJSON *raw;

                for (size_t i = 0; i < n; i++)
                        total += iov[i].iov_len;
                text = malloc(total + 1);
                if (!text)
                        return false;
                total = 0;
                for (size_t i = 0; i < n; i++, total += iov[i - 1].iov_len)
                        memcpy(text + total, iov[i].iov_base, iov[i].iov_len);
                text[total] = 0;
                raw = cJSON_CreateRaw(text);
                if (!raw || !cJSON_AddItemToArray(batch->responses, raw)) {
                        cJSON_Delete(raw);
                        return false;
                }
                return true;
        }
        /* A large answer (a page of many tools) is written from the answers themselves, not copied
         * into the channel's queue: they stay until it is written, a reload notwithstanding. */
        if (len >= ANSWER_LEND_MIN) {
                r = channel_sendv_borrow(s->client, iov, n, 3, answers_release, answers_ref(s->answers));
                if (r < 0)
                        answers_free(s->answers);
        } else
                r = channel_sendv(s->client, iov, n);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for the client, dropping it: %m");
        if (channel_backed_up(s->client))
                upstream_set_reading(s, false);
        return true;
}

/* The prepared answers in file for the manifest as it is now; -ENOENT when there are none (or not these). */
static int answers_load_current(const Options *o, const char *file, Answers **ret) {
        _cleanup_free_ char *key = NULL;
        struct stat st;

        if (stat(o->manifest_path, &st) < 0 || !(key = answers_key(o->manifest_path, &st, o->backend)))
                return -ENOENT;
        return answers_load(file, key, &st, ret);
}

/* A child reads the manifest, prints the answers into file and exits; the session then loads them
 * like any prepared answers. Reading a manifest takes several times its size, and much of that
 * stays with the process once freed (glibc's per-thread cache of small chunks keeps their pages,
 * which malloc_trim() leaves alone): 0.3 MiB more for the whole life of a frontend that read it.
 * Any failure (no cache to write, a broken manifest: the session then reads it itself, and says
 * what is wrong) is a miss. */
static int answers_prepare_apart(const Options *o, const char *file) {
        int status;
        pid_t pid = fork();

        if (pid < 0)
                return -errno;
        if (pid == 0) {
                Manifest *m = NULL;
                Answers *a = NULL;
                char *err = NULL, *key;
                struct stat st;

                /* Nothing is freed: _exit() gives it all back at once. */
                if (session_load_manifest(o, &m, &st, &err) < 0 ||
                    !(key = answers_key(o->manifest_path, &st, o->backend)) || answers_build(m, key, &st, &a) < 0 ||
                    answers_save(a, file) < 0)
                        _exit(EXIT_FAILURE);
                _exit(EXIT_SUCCESS);
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(status) && WEXITSTATUS(status) == EXIT_SUCCESS ? 0 : -ENOENT;
}

int answers_open(const Options *o, Manifest **ret_manifest, Answers **ret_answers, char **ret_error) {
        _cleanup_free_ char *file = manifest_cache_file(o->manifest_path, o->backend, ".answers"), *key = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        Answers *a = NULL;
        struct stat st;
        int r;

        /* Without a cache the manifest answers, as it always did. */
        if (file && answers_load_current(o, file, &a) >= 0) {
                log_debug("Serving prepared answers from %s.", file);
                *ret_manifest = NULL;
                *ret_answers = a;
                return 0;
        }
        if (file && answers_prepare_apart(o, file) >= 0 && answers_load_current(o, file, &a) >= 0) {
                log_debug("Prepared the answers in %s.", file);
                *ret_manifest = NULL;
                *ret_answers = a;
                return 0;
        }
        r = session_load_manifest(o, &m, file ? &st : NULL, ret_error);
        if (r < 0)
                return r;
        key = file ? answers_key(o->manifest_path, &st, o->backend) : NULL;
        if (key && answers_build(m, key, &st, &a) >= 0) {
                r = answers_save(a, file);
                if (r < 0)
                        log_debug_errno(r, "Cannot write %s, ignoring: %m", file);
        }
        /* With the answers prepared the manifest goes too, as if the session had started from them: a
         * request they do not cover reads it again (session_manifest()). What reading it and printing
         * the answers took goes back, as far as the heap can give it. */
        if (a)
                m = manifest_free(m);
        (void) malloc_trim(0);
        *ret_manifest = TAKE_PTR(m);
        *ret_answers = a;
        return 0;
}
