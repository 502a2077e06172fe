/* Watching one file (the manifest) for changes, in an sd-event loop: inotify, else a stat() timer. */
#pragma once

#include <stdbool.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>

typedef struct FileWatch FileWatch;
typedef void (*file_watch_handler_t)(void *userdata);

/* Calls handler whenever path may have changed: written in place or a new file renamed over it
 * (inotify on its directory), or, when the user has no inotify instance left (Linux gives each user
 * 128, fs.inotify.max_user_instances), when a stat() every FILE_WATCH_POLL_USEC sees another version
 * (a missing file is not reported; it is once it is back). */
int file_watch_new(sd_event *e, const char *path, file_watch_handler_t handler, void *userdata, FileWatch **ret);
FileWatch *file_watch_free(FileWatch *w);
static inline void file_watch_freep(FileWatch **w) {
        *w = file_watch_free(*w);
}
/* The same version of a file: identity, size and times. */
bool file_stat_same(const struct stat *a, const struct stat *b);

#define FILE_WATCH_POLL_USEC (2ULL * 1000000ULL)
