/* floor.c — the cheapest programs that could stand where mcp-lazy stands, for bench.mjs.
 *
 *   floor answer MANIFEST ANSWERS   reads MANIFEST whole (not parsed: the least any reader does),
 *                                   then writes the Nth line of ANSWERS for the Nth request
 *                                   read on stdin (a line with an "id"): the start floor.
 *   floor backend                   an MCP server that answers every request at once (initialize,
 *                                   tools/list with one tool "echo", anything else a text result
 *                                   "ok"), with the request's id copied byte for byte, one write()
 *                                   per read(): the throughput and warm-call floor.
 *   floor listen PATH               the same server on a Unix socket at PATH, one connection at a time
 *                                   (for systemd-socket-proxyd, which relays to a socket, not a pipe).
 *
 * Built by bench.mjs with cc -O2; not part of mcp-lazy. Built with -DFLOOR_SD_EVENT -lsystemd, `answer`
 * first sets up sd-event's default loop: the floor of any program that links libsystemd for it; and
 * `answer MANIFEST ANSWERS watch` also watches the manifest's directory with sd_event_add_inotify(), as
 * mcp-lazy must (libsystemd formats the watch's /proc/self/fd path with snprintf: printf's code). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#ifdef FLOOR_SD_EVENT
#include <sys/inotify.h>
#include <systemd/sd-event.h>
#endif

static char *read_file(const char *path, size_t *ret_len) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        size_t len = 0, cap = 1 << 16;
        char *buf = malloc(cap);

        if (fd < 0 || !buf) {
                perror(path);
                exit(1);
        }
        for (;;) {
                ssize_t n;
                if (len == cap && !(buf = realloc(buf, cap *= 2)))
                        exit(1);
                n = read(fd, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        perror(path);
                        exit(1);
                }
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        close(fd);
        *ret_len = len;
        return buf;
}

static void write_all(const char *p, size_t len) {
        while (len > 0) {
                ssize_t n = write(STDOUT_FILENO, p, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        exit(1);
                p += n;
                len -= (size_t) n;
        }
}

/* The raw text of the top-level "id" value of a line (a number or a simple string), or NULL. */
static const char *find_id(const char *line, size_t len, size_t *ret_len) {
        const char *p = memmem(line, len, "\"id\":", 5), *end = line + len, *q;

        if (!p)
                return NULL;
        p += 5;
        q = p;
        if (q < end && *q == '"') {
                for (q++; q < end && *q != '"'; q++)
                        if (*q == '\\')
                                q++;
                q++;
        } else
                while (q < end && *q != ',' && *q != '}')
                        q++;
        if (q > end)
                return NULL;
        *ret_len = (size_t) (q - p);
        return p;
}

/* Feeds stdin to on_line one line at a time; flushes *out after each read(). */
static int for_each_line(void (*on_line)(const char *, size_t, void *), void *userdata, char **out, size_t *out_len) {
        size_t cap = 1 << 20, len = 0;
        char *buf = malloc(cap);

        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t n;
                size_t start = 0;
                char *nl;

                if (len == cap && !(buf = realloc(buf, cap *= 2)))
                        return -ENOMEM;
                n = read(STDIN_FILENO, buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                len += (size_t) n;
                while ((nl = memchr(buf + start, '\n', len - start))) {
                        on_line(buf + start, (size_t) (nl - (buf + start)), userdata);
                        start = (size_t) (nl - buf) + 1;
                }
                memmove(buf, buf + start, len - start);
                len -= start;
                if (*out_len) {
                        write_all(*out, *out_len);
                        *out_len = 0;
                }
        }
        free(buf);
        return 0;
}

/* ---- floor answer ---- */

typedef struct {
        const char *next; /* the next answer line in ANSWERS */
        const char *end;
        char **out;
        size_t *out_len;
} Answers;

static void answer_line(const char *line, size_t len, void *userdata) {
        Answers *a = userdata;
        size_t id_len;
        const char *nl;

        if (!find_id(line, len, &id_len) || a->next >= a->end)
                return;
        nl = memchr(a->next, '\n', (size_t) (a->end - a->next));
        nl = nl ? nl + 1 : a->end;
        write_all(a->next, (size_t) (nl - a->next));
        a->next = nl;
}

#ifdef FLOOR_SD_EVENT
static int on_dir(sd_event_source *s, const struct inotify_event *ev, void *userdata) {
        (void) s, (void) ev, (void) userdata;
        return 0;
}
#endif

static int run_answer(const char *manifest, const char *answers, bool watch) {
        size_t manifest_len, answers_len, none = 0;
        char *m = read_file(manifest, &manifest_len), *ans = read_file(answers, &answers_len), *out = NULL;
        Answers a = {ans, ans + answers_len, &out, &none};

#ifdef FLOOR_SD_EVENT
        sd_event *e = NULL;
        if (sd_event_default(&e) < 0)
                return 1;
        if (watch) {
                char *dir = strdup(manifest), *slash = strrchr(dir, '/');
                if (slash)
                        *slash = 0;
                if (sd_event_add_inotify(e, NULL, slash && dir[0] ? dir : slash ? "/" : ".",
                                         IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR, on_dir, NULL) < 0)
                        return 1;
                free(dir);
        }
#else
        if (watch)
                return 1;
#endif
        if (manifest_len == 0)
                return 1;
        free(m);
        return for_each_line(answer_line, &a, &out, &none) < 0;
}

/* ---- floor backend ---- */

typedef struct {
        char *buf;
        size_t len, cap;
} Out;

static void out_add(Out *o, const char *p, size_t len) {
        if (o->len + len > o->cap) {
                while (o->len + len > o->cap)
                        o->cap = o->cap ? o->cap * 2 : 1 << 20;
                o->buf = realloc(o->buf, o->cap);
                if (!o->buf)
                        exit(1);
        }
        memcpy(o->buf + o->len, p, len);
        o->len += len;
}
#define OUT_LIT(o, s) out_add(o, s, sizeof(s) - 1)

static void backend_line(const char *line, size_t len, void *userdata) {
        Out *o = userdata;
        size_t id_len;
        const char *id = find_id(line, len, &id_len);

        if (!id || !memmem(line, len, "\"method\":", 9))
                return; /* a notification, or an answer to a request of ours (we send none) */
        OUT_LIT(o, "{\"jsonrpc\":\"2.0\",\"id\":");
        out_add(o, id, id_len);
        if (memmem(line, len, "\"method\":\"initialize\"", 21))
                OUT_LIT(o, ",\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":{}},"
                           "\"serverInfo\":{\"name\":\"floor\",\"version\":\"1\"}}}\n");
        else if (memmem(line, len, "\"method\":\"tools/list\"", 21))
                OUT_LIT(o, ",\"result\":{\"tools\":[{\"name\":\"echo\",\"inputSchema\":{\"type\":\"object\"}}]}}\n");
        else if (memmem(line, len, "\"method\":\"tools/call\"", 21))
                OUT_LIT(o, ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n");
        else
                OUT_LIT(o, ",\"result\":{}}\n");
}

static int run_backend(void) {
        Out o = {};
        int r = for_each_line(backend_line, &o, &o.buf, &o.len);
        free(o.buf);
        return r < 0;
}

static int run_listen(const char *path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0 || strlen(path) >= sizeof sa.sun_path)
                return 1;
        strcpy(sa.sun_path, path);
        (void) unlink(path);
        if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 16) < 0) {
                perror(path);
                return 1;
        }
        for (;;) {
                int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0 && errno == EINTR)
                        continue;
                if (c < 0 || dup2(c, STDIN_FILENO) < 0 || dup2(c, STDOUT_FILENO) < 0)
                        return 1;
                close(c);
                (void) run_backend();
                close(STDIN_FILENO);
                close(STDOUT_FILENO);
        }
}

int main(int argc, char *argv[]) {
        if ((argc == 4 || (argc == 5 && !strcmp(argv[4], "watch"))) && !strcmp(argv[1], "answer"))
                return run_answer(argv[2], argv[3], argc == 5);
        if (argc == 2 && !strcmp(argv[1], "backend"))
                return run_backend();
        if (argc == 3 && !strcmp(argv[1], "listen"))
                return run_listen(argv[2]);
        fprintf(stderr, "Usage: floor answer MANIFEST ANSWERS | floor backend | floor listen PATH\n");
        return 2;
}
