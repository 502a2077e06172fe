/* Watching one file for changes: inotify on its directory, else a stat() of it every few seconds. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>

#include "file-watch.h"
#include "log.h"
#include "macros.h"

#define FILE_WATCH_ACCURACY_USEC (1ULL * 1000000ULL) /* the timers of every process of the user coalesce */

struct FileWatch {
        char *path;
        const char *base; /* in path: the name the directory's events carry */
        file_watch_handler_t handler;
        void *userdata;
        sd_event_source *source; /* inotify on the directory, or the stat timer */
        struct stat seen;        /* the file as the stat timer last saw it */
};

bool file_stat_same(const struct stat *a, const struct stat *b) {
        return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
               a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int on_dir_event(sd_event_source *src, const struct inotify_event *ev, void *userdata) {
        FileWatch *w = userdata;

        (void) src;
        /* Editors write in place or rename a new file over the old: both end up here. */
        if (ev->len > 0 && streq(ev->name, w->base))
                w->handler(w->userdata);
        return 0;
}

static int on_poll(sd_event_source *src, uint64_t usec, void *userdata) {
        FileWatch *w = userdata;
        struct stat st = {};

        /* A missing file is a change too (to be refused); it is read again once it is back. */
        if (stat(w->path, &st) < 0)
                st = (struct stat){};
        /* Set again first: the handler may free w. */
        (void) sd_event_source_set_time(src, usec + FILE_WATCH_POLL_USEC);
        (void) sd_event_source_set_enabled(src, SD_EVENT_ON);
        if (!file_stat_same(&st, &w->seen)) {
                w->seen = st;
                if (st.st_ino != 0)
                        w->handler(w->userdata);
        }
        return 0;
}

int file_watch_new(sd_event *e, const char *path, file_watch_handler_t handler, void *userdata, FileWatch **ret) {
        _cleanup_(file_watch_freep) FileWatch *w = calloc(1, sizeof *w);
        _cleanup_free_ char *dir = NULL;
        const char *slash = strrchr(path, '/');
        uint64_t now;
        int r;

        if (!w || !(w->path = strdup(path)))
                return -ENOMEM;
        w->base = slash ? w->path + (slash - path) + 1 : w->path;
        w->handler = handler;
        w->userdata = userdata;
        dir = !slash ? strdup(".") : slash == path ? strdup("/") : strndup(path, (size_t) (slash - path));
        if (!dir)
                return -ENOMEM;
        r = sd_event_add_inotify(e, &w->source, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR, on_dir_event, w);
        if (r >= 0) {
                *ret = TAKE_PTR(w);
                return 0;
        }
        log_debug_errno(r, "Cannot watch %s with inotify (%m), checking it every %llu s instead.", path,
                        (unsigned long long) (FILE_WATCH_POLL_USEC / 1000000ULL));
        if (stat(path, &w->seen) < 0)
                w->seen = (struct stat){};
        r = sd_event_now(e, CLOCK_MONOTONIC, &now);
        if (r >= 0)
                r = sd_event_add_time(e, &w->source, CLOCK_MONOTONIC, now + FILE_WATCH_POLL_USEC,
                                      FILE_WATCH_ACCURACY_USEC, on_poll, w);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(w);
        return 0;
}

FileWatch *file_watch_free(FileWatch *w) {
        if (!w)
                return NULL;
        sd_event_source_disable_unref(w->source);
        free(w->path);
        free(w);
        return NULL;
}
