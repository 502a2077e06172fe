/* The secrets directory beside the system manager's manifest: opened and checked once, its files read
 * (as systemd reads them), put aside, written and staged only through its descriptor. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "envfile.h"
#include "import.h"
#include "macros.h"
#include "secrets-dir.h"

void secrets_dir_done(SecretsDir *sd) {
        sd->fd = safe_close(sd->fd);
        free(sd->path);
        sd->path = NULL;
}

int secrets_dir_open(const char *manifest_path, bool quiet, SecretsDir *sd) {
        _cleanup_free_ char *copy = strdup(manifest_path);
        int r;

        sd->fd = -EBADF;
        sd->path = NULL;
        if (!copy || asprintf(&sd->path, "%s/secrets", dirname(copy)) < 0) {
                sd->path = NULL;
                return -ENOMEM;
        }
        r = envfile_dir_open(sd->path, false, &sd->fd);
        if (r == -ENOENT)
                return 0;
        if (r < 0 && !quiet) {
                if (r == -EPERM)
                        fprintf(stderr,
                                "mcp-lazy: %s must be root's own and writable by root alone (mode 0700, as "
                                "installed); nothing was changed\n",
                                sd->path);
                else
                        fprintf(stderr, "mcp-lazy: cannot open the directory %s: %s; nothing was changed\n", sd->path,
                                strerror(-r));
        }
        return r;
}

/* The text of file name in directory dfd, opened without following a link, a regular file of at most
 * max bytes. */
static int read_at(int dfd, const char *name, size_t max, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

        if (fd < 0)
                return errno == ELOOP ? -EBADF : -errno;
        return read_fd_full(fd, max, ret, ret_len, NULL);
}

/* The file 'file' of sd read as secrets_read_at() reads a backend's. */
static int file_read_at(const SecretsDir *sd, const char *file, char ***ret_env, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        _cleanup_strv_free_ char **env = NULL;
        const char *reason = "not a line of an environment file", *bad = NULL;
        unsigned line = 0;
        size_t len = 0;
        int r;

        *ret_error = NULL;
        r = sd->fd < 0 ? -ENOENT : read_at(sd->fd, file, 1024U * 1024U, &text, &len);
        if (r >= 0)
                r = envfile_parse(text, len, &env, &line);
        for (char **v = env; r >= 0 && v && *v; v++)
                if (envfile_assignment_check(*v, &reason) < 0) {
                        bad = *v;
                        r = -EBADMSG;
                }
        if (r == -EBADMSG && bad) {
                if (asprintf(ret_error, "%s/%s: %.*s: %s", sd->path, file, (int) strcspn(bad, "="), bad, reason) < 0)
                        *ret_error = NULL;
        } else if (r == -EBADMSG) {
                if (asprintf(ret_error, "%s/%s:%u: %s", sd->path, file, line, reason) < 0)
                        *ret_error = NULL;
        } else if (r == -EBADF) {
                if (asprintf(ret_error, "%s/%s: not a regular file (a link?)", sd->path, file) < 0)
                        *ret_error = NULL;
        } else if (r < 0 && asprintf(ret_error, "%s/%s: %s", sd->path, file, strerror(-r)) < 0)
                *ret_error = NULL;
        if (r >= 0)
                *ret_env = TAKE_PTR(env);
        return r;
}

int secrets_read_at(const SecretsDir *sd, const char *backend, char ***ret_env, char **ret_error) {
        _cleanup_free_ char *file = NULL;

        *ret_error = NULL;
        if (asprintf(&file, "%s.env", backend) < 0)
                return -ENOMEM;
        return file_read_at(sd, file, ret_env, ret_error);
}

int secrets_read(const char *manifest_path, const char *backend, char ***ret_env, char **ret_error) {
        _cleanup_(secrets_dir_done) SecretsDir sd = {.fd = -EBADF};
        int r;

        *ret_error = NULL;
        r = secrets_dir_open(manifest_path, true, &sd);
        if (r == -EPERM && asprintf(ret_error, "%s: must be root's own and writable by root alone", sd.path) < 0)
                *ret_error = NULL;
        else if (r < 0 && r != -ENOMEM && sd.path && asprintf(ret_error, "%s: %s", sd.path, strerror(-r)) < 0)
                *ret_error = NULL;
        if (r < 0)
                return r;
        return secrets_read_at(&sd, backend, ret_env, ret_error);
}

static void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

/* What secrets_orphan() renamed (file, now to) gets mode 0600, and that is said. A link is renamed,
 * never followed: only a file of its own gets mode 0600, through a descriptor opened without
 * following a link (one put in its place after the rename is left as it is) and checked to be a
 * regular file. */
static int secrets_orphan_mode(int dfd, const char *dir, const char *file, const char *to) {
        _cleanup_close_ int fd = openat(dfd, to, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;

        if ((fd < 0 && errno != ELOOP) ||
            (fd >= 0 && (fstat(fd, &st) < 0 || (S_ISREG(st.st_mode) && fchmod(fd, 0600) < 0)))) {
                int r = -errno;
                /* Renamed all the same: said as it is. */
                fprintf(stderr,
                        "mcp-lazy: %s/%s belongs to no backend of the manifest that names it in secret_env: renamed "
                        "%s/%s, but cannot make it mode 0600: %s; nothing else was changed\n",
                        dir, file, dir, to, strerror(-r));
                return r;
        }
        fprintf(stderr,
                "mcp-lazy: %s/%s belongs to no backend of the manifest that names it in secret_env, so no unit may "
                "hand it on: renamed %s/%s (mode 0600)\n",
                dir, file, dir, to);
        return 0;
}

/* Puts the secrets file 'file' of directory dfd (dir, for messages) aside, as
 * NAME.env.orphaned-YYYYmmddTHHMMSS (mode 0600): the unit reads only NAME.env, and nothing is lost. */
static int secrets_orphan(int dfd, const char *dir, const char *file, bool dry_run, bool quiet) {
        _cleanup_free_ char *to = NULL;
        char stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        int r = -EEXIST;

        if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm) == 0)
                r = -EINVAL;
        for (unsigned k = 1; k < 100 && r == -EEXIST; k++) {
                free(to);
                to = NULL;
                if ((k == 1 ? asprintf(&to, "%s.orphaned-%s", file, stamp)
                            : asprintf(&to, "%s.orphaned-%s-%u", file, stamp, k)) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (dry_run) {
                        if (!quiet)
                                fprintf(stderr,
                                        "mcp-lazy: %s/%s belongs to no backend of the manifest that names it in "
                                        "secret_env: it would be renamed %s/%s\n",
                                        dir, file, dir, to);
                        return 0;
                }
                /* Through the directory's descriptor, checked once: never by a path that may lead
                 * elsewhere by now. */
                if (renameat2(dfd, file, dfd, to, RENAME_NOREPLACE) < 0)
                        r = -errno;
                else
                        return secrets_orphan_mode(dfd, dir, file, to);
        }
        fprintf(stderr, "mcp-lazy: cannot rename %s/%s aside: %s; nothing else was changed\n", dir, file, strerror(-r));
        return r;
}

/* Whether name is a temporary file of envfile_write() (NAME.env.mcp-lazy-XXXXXXXX) that an
 * interrupted write left in dfd: ours (root's), a regular file, an hour old (a write under way takes
 * milliseconds). */
static bool stale_temp(int dfd, const char *name) {
        struct stat st;

        if (!envfile_is_temp_name(name))
                return false;
        return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
               st.st_mtime < time(NULL) - 3600;
}

/* A file that secrets_plan_write() staged and no run put in place or removed (one stopped between,
 * or could not): it may hold the only copy of its values, so it is never removed, only said. */
static void staged_left_said(const SecretsDir *sd, const char *file) {
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *err = NULL, *shown = NULL;
        const char *end = strstr(file, ".env.mcp-lazy-staged-");
        int len;

        for (const char *p = end; p; p = strstr(p + 1, ".env.mcp-lazy-staged-"))
                end = p;
        len = (int) (end - file);
        if (file_read_at(sd, file, &env, &err) >= 0 && env[0])
                shown = secrets_names_shown(env);
        fprintf(stderr,
                "mcp-lazy: %s/%s holds values (%s) that an import or refresh staged for backend '%.*s' and did "
                "not put in place (mcp-lazy never removes it): if that run wrote the manifest, they belong in "
                "%s/%.*s.env ('mv %s/%s %s/%.*s.env', then, if it runs, 'systemctl reload mcp-lazy@%.*s.service'); "
                "if it stopped before that, they are still where they came from: remove it\n",
                sd->path, file, shown ?: "see the file", len, file, sd->path, len, file, sd->path, file, sd->path, len,
                file, len, file);
}

int secrets_orphans(const SecretsDir *sd, const YNode *backends, const bool *owned, bool dry_run, bool quiet) {
        _cleanup_(closedirp) DIR *d = NULL;
        struct stat st;
        int r, fd, n_orphans = 0;

        if (sd->fd < 0)
                return 0;
        if (!dry_run && (fstat(sd->fd, &st) < 0 || ((st.st_mode & 07777) != 0700 && fchmod(sd->fd, 0700) < 0))) {
                r = -errno;
                fprintf(stderr, "mcp-lazy: cannot make %s mode 0700: %s; nothing was changed\n", sd->path,
                        strerror(-r));
                return r;
        }
        fd = fcntl(sd->fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                safe_close(fd);
                return r;
        }
        for (struct dirent *de; (errno = 0, de = readdir(d));) {
                size_t n = strlen(de->d_name);
                bool keep = false;

                if (!dry_run && stale_temp(sd->fd, de->d_name)) {
                        (void) unlinkat(sd->fd, de->d_name, 0);
                        continue;
                }
                if (envfile_is_staged_name(de->d_name)) {
                        if (!quiet)
                                staged_left_said(sd, de->d_name);
                        continue;
                }
                if (n <= 4 || !streq(de->d_name + n - 4, ".env") || de->d_name[0] == '.')
                        continue;
                for (size_t i = 0; backends && i + 1 < backends->n_items && !keep; i += 2)
                        keep = owned[i / 2] && backends->items[i]->length == n - 4 &&
                               strncmp(backends->items[i]->value, de->d_name, n - 4) == 0;
                if (keep)
                        continue;
                r = secrets_orphan(sd->fd, sd->path, de->d_name, dry_run, quiet);
                if (r < 0) /* said */
                        return r;
                n_orphans++;
        }
        return errno > 0 ? -errno : n_orphans;
}

/* *list, then ", " (if it is not NULL) and the n bytes of item between quote and quote: 0; on
 * failure *list is freed (NULL). */
static int list_append(char **list, const char *quote, int n, const char *item) {
        char *l = NULL;

        if (asprintf(&l, "%s%s%s%.*s%s", *list ?: "", *list ? ", " : "", quote, n, item, quote) < 0)
                l = NULL;
        free(*list);
        *list = l;
        return l ? 0 : -ENOMEM;
}

/* The names of NAME=VALUE assignments (a non-empty list), joined with ", ", for messages: never a value. */
char *secrets_names_shown(char *const *assignments) {
        char *shown = NULL;

        for (char *const *v = assignments; *v; v++)
                if (list_append(&shown, "", (int) strcspn(*v, "="), *v) < 0)
                        return NULL;
        return shown;
}

void secrets_plan_done(SecretsPlan *plan) {
        for (size_t i = 0; i < plan->n; i++) {
                free(plan->writes[i].name);
                free(plan->writes[i].path);
                strv_free(plan->writes[i].env);
                free(plan->writes[i].staged);
        }
        free(plan->writes);
        *plan = (SecretsPlan){};
}

int secrets_plan_add(SecretsPlan *plan, const char *name, bool owned, bool news, char **path, char ***env) {
        SecretsWrite *l = realloc(plan->writes, (plan->n + 1) * sizeof(SecretsWrite));
        char *copy = strdup(name);

        if (l)
                plan->writes = l;
        if (!l || !copy) {
                free(copy);
                return -ENOMEM;
        }
        plan->writes[plan->n++] = (SecretsWrite){
                .name = copy, .path = TAKE_PTR(*path), .env = TAKE_PTR(*env), .owned = owned, .news = news};
        return 0;
}

/* The secrets directory of sd made (mode 0700, its parents 0755) and opened, where there was none. */
static int secrets_dir_make(SecretsDir *sd) {
        _cleanup_free_ char *parent = strdup(sd->path);
        int r;

        if (!parent)
                return -ENOMEM;
        r = mkdir_parents(dirname(parent), 0755);
        if (r >= 0 && mkdir(sd->path, 0700) < 0 && errno != EEXIST)
                r = -errno;
        if (r >= 0)
                r = envfile_dir_open(sd->path, true, &sd->fd);
        if (r == -EPERM)
                fprintf(stderr,
                        "mcp-lazy: %s must be root's own and writable by root alone; the manifest was not "
                        "written\n",
                        sd->path);
        else if (r < 0)
                fprintf(stderr, "mcp-lazy: cannot make the directory %s: %s; the manifest was not written\n", sd->path,
                        strerror(-r));
        return r;
}

/* w's file: written in place when its backend owns it, else staged beside it; errors said. */
static int secrets_write_one(const SecretsDir *sd, SecretsWrite *w) {
        _cleanup_free_ char *shown = secrets_names_shown(w->env);
        const char *file = strrchr(w->path, '/') + 1; /* DIR/secrets/NAME.env */
        int r;

        if (!shown)
                return -ENOMEM;
        r = w->owned ? envfile_write_at(sd->fd, file, w->env) : envfile_stage_at(sd->fd, file, w->env, &w->staged);
        /* Files put aside or written before this one stay: only the manifest is not written. */
        if (r < 0)
                fprintf(stderr,
                        "mcp-lazy: cannot write %s: %s; the manifest was not written (secrets files put aside or "
                        "written before stay)\n",
                        w->path, r == -EPERM ? "what is there is not a regular file (a link?)" : strerror(-r));
        else if (w->owned) {
                w->placed = true;
                printf("Wrote %s (%s; mode 0600: root reads it, for mcp-lazy@%s.service)\n", w->path, shown, w->name);
        }
        return r;
}

int secrets_plan_write(SecretsDir *sd, SecretsPlan *plan, bool dry_run) {
        int r = 0;

        for (size_t i = 0; r >= 0 && i < plan->n; i++) {
                const SecretsWrite *w = &plan->writes[i];

                if (dry_run) {
                        _cleanup_free_ char *shown = secrets_names_shown(w->env);
                        if (!shown)
                                return -ENOMEM;
                        printf("--- %s (would be written, mode 0600, for root alone: %s; values not shown)\n", w->path,
                               shown);
                        continue;
                }
                if (sd->fd < 0)
                        r = secrets_dir_make(sd);
                if (r >= 0)
                        r = secrets_write_one(sd, &plan->writes[i]);
        }
        if (r < 0) /* staged for a manifest that is not written */
                secrets_plan_unstage(sd, plan, false);
        return r;
}

/* The backends of plan that have a file staged, as 'a', 'b' (NULL if none, or out of memory). */
static char *staged_backends(const SecretsPlan *plan) {
        char *shown = NULL;

        for (size_t i = 0; i < plan->n; i++)
                if (plan->writes[i].staged &&
                    list_append(&shown, "'", (int) strlen(plan->writes[i].name), plan->writes[i].name) < 0)
                        return NULL;
        return shown;
}

void secrets_plan_unstage(const SecretsDir *sd, SecretsPlan *plan, bool say) {
        _cleanup_free_ char *which = say ? staged_backends(plan) : NULL;

        if (which)
                fprintf(stderr,
                        "mcp-lazy: the new secrets files of %s, whose definitions the manifest does not have, were not "
                        "put in place: no unit gets their values, which are still where they came from (the configs "
                        "imported, or the manifest's env)\n",
                        which);
        for (size_t i = 0; i < plan->n; i++) {
                SecretsWrite *w = &plan->writes[i];

                if (!w->staged)
                        continue;
                if (unlinkat(sd->fd, w->staged, 0) < 0)
                        fprintf(stderr,
                                "mcp-lazy: cannot remove %s/%s: %s; remove it: it holds values of a definition of "
                                "backend '%s' that the manifest does not have\n",
                                sd->path, w->staged, strerror(errno), w->name);
                free(w->staged);
                w->staged = NULL;
        }
}

int secrets_plan_commit(const SecretsDir *sd, SecretsPlan *plan) {
        int ret = 0;

        for (size_t i = 0; i < plan->n; i++) {
                SecretsWrite *w = &plan->writes[i];
                _cleanup_free_ char *shown = NULL;
                int r;

                if (!w->staged)
                        continue;
                r = envfile_commit_at(sd->fd, w->staged, strrchr(w->path, '/') + 1);
                shown = secrets_names_shown(w->env); /* NULL: out of memory, said as "its variables" */
                if (r >= 0) {
                        printf("Wrote %s (%s; mode 0600: root reads it, for mcp-lazy@%s.service)\n", w->path,
                               shown ?: "its variables", w->name);
                        free(w->staged);
                        w->staged = NULL;
                        w->placed = true;
                        continue;
                }
                /* The manifest names them now: the staged file is where they are, and stays. */
                fprintf(stderr,
                        "mcp-lazy: cannot rename %s/%s to %s: %s. The manifest was written: it names %s in "
                        "secret_env of backend '%s', and their values are in %s/%s (mode 0600, root's; mcp-lazy "
                        "never removes it), so mcp-lazy@%s.service starts without them until it is renamed (it "
                        "is not reloaded now): once it can be, run 'mv %s/%s %s', then, if it runs, 'systemctl "
                        "reload mcp-lazy@%s.service'\n",
                        sd->path, w->staged, w->path, strerror(-r), shown ?: "its variables", w->name, sd->path,
                        w->staged, w->name, sd->path, w->staged, w->path, w->name);
                if (ret >= 0)
                        ret = r;
        }
        return ret;
}

int secrets_plan_news(const SecretsPlan *plan, char ***ret) {
        _cleanup_strv_free_ char **names = calloc(plan->n + 1, sizeof(char *));
        size_t n = 0;

        if (!names)
                return -ENOMEM;
        for (size_t i = 0; i < plan->n; i++)
                if (plan->writes[i].news && plan->writes[i].placed && !(names[n++] = strdup(plan->writes[i].name)))
                        return -ENOMEM;
        *ret = TAKE_PTR(names);
        return 0;
}
