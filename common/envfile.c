/* Environment files in systemd's EnvironmentFile= syntax: writing a backend's secrets, reading them back. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "envfile.h"
#include "framing.h"
#include "macros.h"
#include "manifest-write.h"

#define NAME_FIRST "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
#define NAME_CHARS NAME_FIRST "0123456789"

static bool env_name_valid(const char *s, size_t n) {
        return n > 0 && s[0] && strchr(NAME_FIRST, s[0]) && strspn(s, NAME_CHARS) >= n;
}

const char *strv_env_get(char *const *env, const char *name) {
        size_t n = strlen(name);

        for (char *const *v = env; v && *v; v++)
                if (strncmp(*v, name, n) == 0 && (*v)[n] == '=')
                        return *v + n + 1;
        return NULL;
}

/* Whether UTF-8 text s (already checked) holds a Unicode noncharacter: U+FDD0..U+FDEF, or U+xFFFE and
 * U+xFFFF in any plane. systemd 252's utf8_is_valid() refuses them, and drops the whole file. */
static bool utf8_has_noncharacter(const char *s) {
        for (const unsigned char *p = (const unsigned char *) s; *p;) {
                uint32_t cp;
                size_t k;

                if (*p < 0x80) {
                        p++;
                        continue;
                }
                k = *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : 1;
                cp = *p & (0x3F >> k);
                for (size_t i = 1; i <= k; i++)
                        cp = (cp << 6) | (p[i] & 0x3F);
                if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE)
                        return true;
                p += k + 1;
        }
        return false;
}

int envfile_assignment_check(const char *assignment, const char **ret_reason) {
        const char *eq = strchr(assignment, '=');
        const char *reason = NULL;
        int r = -EINVAL;

        if (!eq || !env_name_valid(assignment, (size_t) (eq - assignment)))
                reason = "its name is not [A-Za-z_][A-Za-z0-9_]*";
        else if (strlen(assignment) >= ENVFILE_ASSIGNMENT_MAX) {
                reason = "NAME=VALUE is 128 KiB or longer, more than the kernel passes to a program (MAX_ARG_STRLEN)";
                r = -E2BIG;
        } else if (!utf8_is_valid(eq + 1, strlen(eq + 1)))
                reason = "its value is not UTF-8";
        else if (utf8_has_noncharacter(eq + 1))
                reason = "its value holds a Unicode noncharacter (U+FDD0..U+FDEF, U+xFFFE or U+xFFFF), which "
                         "systemd refuses";
        else
                return 0;
        if (ret_reason)
                *ret_reason = reason;
        return r;
}

int envfile_format(char *const *env, char **ret_text, size_t *ret_len) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0, alloc = 1;

        for (char *const *v = env; v && *v; v++)
                alloc += 2 * strlen(*v) + 4; /* every character escaped at worst, two quotes, a newline */
        text = malloc(alloc);
        if (!text)
                return -ENOMEM;
        for (char *const *v = env; v && *v; v++) {
                const char *eq = strchr(*v, '=');
                size_t k = eq ? (size_t) (eq - *v) : 0;
                int r = envfile_assignment_check(*v, NULL);

                if (r < 0)
                        return r;
                memcpy(text + len, *v, k + 1);
                len += k + 1;
                text[len++] = '"';
                for (const char *c = eq + 1; *c; c++) {
                        if (strchr("\"\\`$", *c))
                                text[len++] = '\\';
                        text[len++] = *c;
                }
                text[len++] = '"';
                text[len++] = '\n';
        }
        text[len] = 0;
        *ret_text = TAKE_PTR(text);
        *ret_len = len;
        return 0;
}

/* name=value into env (a strv of n entries): replaces an earlier value of name in place. */
static int env_put(char ***env, size_t *n, const char *name, size_t name_len, const char *value, size_t value_len) {
        char *s = NULL, **l;

        if (asprintf(&s, "%.*s=%.*s", (int) name_len, name, (int) value_len, value) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < *n; i++)
                if (strncmp((*env)[i], s, name_len + 1) == 0) {
                        free((*env)[i]);
                        (*env)[i] = s;
                        return 0;
                }
        l = realloc(*env, (*n + 2) * sizeof(char *));
        if (!l) {
                free(s);
                return -ENOMEM;
        }
        *env = l;
        l[(*n)++] = s;
        l[*n] = NULL;
        return 0;
}

static const char *skip_blanks(const char *p, const char *end, const char *set) {
        while (p < end && strchr(set, *p) && *p)
                p++;
        return p;
}

static bool is_newline(char c) {
        return c == '\n' || c == '\r'; /* systemd's NEWLINE: a CR ends a line as LF does */
}

/* *p past the line end at s (a CR LF counts once). */
static void end_line(const char **p, const char *s, const char *end, unsigned *line) {
        if (s < end && *s == '\r' && s + 1 < end && s[1] == '\n')
                s++;
        *p = s < end ? s + 1 : s;
        (*line)++;
}

/* One value, from p (just past '=') to the end of its line, appended to out, read as systemd 252 reads
 * it: blanks before it skipped; quoted parts ('...' literal, "..." with \ before " \ ` $ and a
 * newline) and unquoted text may follow each other (A="x"y is xy; blanks after a closing quote are
 * skipped); unquoted text ends at the line's end, its trailing blanks dropped unless escaped. *p is
 * left at the start of the next line. */
static int parse_value(const char **p, const char *end, char *out, size_t *ret_len, unsigned *line) {
        enum { PRE, PLAIN, SINGLE, DOUBLE } state = PRE;
        const char *s = *p;
        size_t n = 0, blanks_at = SIZE_MAX; /* PLAIN: where its trailing blanks start */

        for (; s < end; s++) {
                char c = *s;

                if (state == SINGLE || state == DOUBLE) {
                        if (c == (state == SINGLE ? '\'' : '"')) {
                                state = PRE;
                                continue;
                        }
                        if (c == '\\' && state == DOUBLE && s + 1 < end) {
                                c = *++s;
                                if (c == '\n') { /* a continued line */
                                        (*line)++;
                                        continue;
                                }
                                if (!strchr("\"\\`$", c))
                                        out[n++] = '\\';
                        } else if (c == '\n')
                                (*line)++;
                        out[n++] = c;
                        continue;
                }
                if (is_newline(c))
                        break;
                if (state == PRE && (c == '\'' || c == '"')) {
                        state = c == '"' ? DOUBLE : SINGLE;
                        continue;
                }
                if (state == PRE && (c == ' ' || c == '\t'))
                        continue;
                state = PLAIN;
                if (c == '\\') {
                        blanks_at = SIZE_MAX;
                        if (s + 1 >= end)
                                continue;
                        c = *++s;
                        if (is_newline(c)) { /* a continued line */
                                if (c == '\n')
                                        (*line)++;
                                continue;
                        }
                        out[n++] = c;
                        continue;
                }
                if (c != ' ' && c != '\t')
                        blanks_at = SIZE_MAX;
                else if (blanks_at == SIZE_MAX)
                        blanks_at = n;
                out[n++] = c;
        }
        if (state == SINGLE || state == DOUBLE)
                return -EBADMSG; /* never closed */
        end_line(p, s, end, line);
        *ret_len = state == PLAIN && blanks_at != SIZE_MAX ? blanks_at : n;
        return 0;
}

/* A comment, from its # or ;, to past its line end. -EBADMSG: it ends in an escaping \, which systemd
 * 252 reads as going on onto the next line (that line commented out too) and systemd 254 does not. */
static int skip_comment(const char **p, const char *end, unsigned *line) {
        const char *s = *p;

        for (; s < end && !is_newline(*s); s++)
                if (*s == '\\' && s + 1 < end) {
                        if (is_newline(s[1]))
                                return -EBADMSG;
                        s++;
                }
        end_line(p, s, end, line);
        return 0;
}

int envfile_parse(const char *text, size_t len, char ***ret_env, unsigned *ret_line) {
        _cleanup_strv_free_ char **env = calloc(1, sizeof(char *));
        _cleanup_free_ char *value = malloc(len + 1);
        const char *p = text, *end = text + len;
        unsigned line = 1;
        size_t n = 0;

        if (!env || !value)
                return -ENOMEM;
        while (p < end) {
                const char *key, *eq;
                size_t key_len, value_len;
                int r;

                p = skip_blanks(p, end, " \t\r");
                if (p >= end)
                        break;
                if (*p == '\n') {
                        p++;
                        line++;
                        continue;
                }
                if (*p == '#' || *p == ';') {
                        unsigned at = line;
                        if (skip_comment(&p, end, &line) < 0) {
                                *ret_line = at;
                                return -EBADMSG;
                        }
                        continue;
                }
                key = p;
                eq = memchr(p, '=', (size_t) (end - p));
                if (!eq || memchr(p, '\n', (size_t) (eq - p)) || memchr(p, '\r', (size_t) (eq - p))) {
                        *ret_line = line;
                        return -EBADMSG;
                }
                key_len = (size_t) (eq - key);
                while (key_len > 0 && (key[key_len - 1] == ' ' || key[key_len - 1] == '\t'))
                        key_len--;
                if (!env_name_valid(key, key_len)) {
                        *ret_line = line;
                        return -EBADMSG;
                }
                p = eq + 1;
                {
                        unsigned at = line;
                        r = parse_value(&p, end, value, &value_len, &line);
                        if (r < 0) {
                                *ret_line = at;
                                return r;
                        }
                }
                if (memchr(value, 0, value_len)) {
                        *ret_line = line - 1;
                        return -EBADMSG;
                }
                r = env_put(&env, &n, key, key_len, value, value_len);
                if (r < 0)
                        return r;
        }
        *ret_env = TAKE_PTR(env);
        return 0;
}

int envfile_dir_open(const char *path, bool make_private, int *ret_fd) {
        _cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;

        if (dfd < 0)
                return errno == ELOOP ? -ENOTDIR : -errno;
        if (fstat(dfd, &st) < 0)
                return -errno;
        /* Whoever else could write here could swap a file for a link to theirs. */
        if (st.st_uid != geteuid() || (st.st_mode & 022))
                return -EPERM;
        if (make_private && (st.st_mode & 07777) != 0700 && fchmod(dfd, 0700) < 0)
                return -errno;
        *ret_fd = TAKE_FD(dfd);
        return 0;
}

/* env as a new file NAME.<kind>-XXXXXXXX beside name in directory dfd (*ret_file), to take the place of
 * name: mode 0600 (root's as root), written and synced, all through dfd; nothing left on failure.
 * -EPERM when what is at name is not a regular file (a link). */
static int new_file_at(int dfd, const char *name, char *const *env, const char *kind,
                       char ret_file[static NAME_MAX + 1]) {
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        size_t len;
        int r;

        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && !S_ISREG(st.st_mode))
                return -EPERM;
        r = envfile_format(env, &text, &len);
        if (r < 0)
                return r;
        for (unsigned k = 0; fd < 0; k++) {
                struct timespec ts;
                if (k == 100)
                        return -EEXIST;
                (void) clock_gettime(CLOCK_MONOTONIC, &ts);
                if (snprintf(ret_file, NAME_MAX + 1, "%s.%s-%08lx", name, kind,
                             (unsigned long) (((unsigned long) ts.tv_nsec ^ ((unsigned long) getpid() << 12)) + k) &
                                     0xffffffffUL) >= NAME_MAX + 1)
                        return -ENAMETOOLONG;
                fd = openat(dfd, ret_file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0 && errno != EEXIST)
                        return -errno;
        }
        /* Root's from the start, and 0600 whatever the umask (before anything is written). */
        if ((geteuid() == 0 && fchown(fd, 0, 0) < 0) || fchmod(fd, 0600) < 0 || write_all_sync(fd, text, len) < 0) {
                r = -errno;
                (void) unlinkat(dfd, ret_file, 0);
                return r;
        }
        return 0;
}

int envfile_write_at(int dfd, const char *name, char *const *env) {
        char tmp[NAME_MAX + 1];
        int r;

        r = new_file_at(dfd, name, env, "mcp-lazy", tmp);
        if (r >= 0 && (r = envfile_commit_at(dfd, tmp, name)) < 0)
                (void) unlinkat(dfd, tmp, 0);
        return r;
}

int envfile_stage_at(int dfd, const char *name, char *const *env, char **ret_staged) {
        char staged[NAME_MAX + 1];
        int r;

        r = new_file_at(dfd, name, env, "mcp-lazy-staged", staged);
        if (r < 0)
                return r;
        *ret_staged = strdup(staged);
        if (!*ret_staged) {
                (void) unlinkat(dfd, staged, 0);
                return -ENOMEM;
        }
        return 0;
}

int envfile_commit_at(int dfd, const char *staged, const char *name) {
        if (renameat(dfd, staged, dfd, name) < 0)
                return -errno;
        (void) fsync(dfd);
        return 0;
}

/* Whether name is NAME.env.<kind>-XXXXXXXX (8 hex digits): the last ".env." in it starts the suffix. */
static bool is_name_of(const char *name, const char *kind) {
        const char *t = NULL;
        size_t k = strlen(kind);

        for (const char *p = strstr(name, ".env."); p; p = strstr(p + 1, ".env."))
                t = p;
        if (!t || t == name || strncmp(t + 5, kind, k) != 0 || t[5 + k] != '-')
                return false;
        t += 5 + k + 1;
        return strlen(t) == 8 && strspn(t, "0123456789abcdef") == 8;
}

bool envfile_is_temp_name(const char *name) {
        return is_name_of(name, "mcp-lazy");
}

bool envfile_is_staged_name(const char *name) {
        return is_name_of(name, "mcp-lazy-staged");
}

int envfile_write(const char *path, char *const *env) {
        _cleanup_free_ char *copy = strdup(path), *copy2 = strdup(path);
        _cleanup_close_ int dfd = -EBADF;
        const char *dir, *name;
        int r;

        if (!copy || !copy2)
                return -ENOMEM;
        /* What would be refused changes nothing, not even the directory. */
        for (char *const *v = env; v && *v; v++) {
                r = envfile_assignment_check(*v, NULL);
                if (r < 0)
                        return r;
        }
        dir = dirname(copy);
        name = basename(copy2);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        /* The directory is checked once, through its descriptor, and everything after goes through
         * that descriptor: its path may lead elsewhere by then. */
        r = envfile_dir_open(dir, true, &dfd);
        if (r < 0)
                return r;
        return envfile_write_at(dfd, name, env);
}
