/* Prefetching at a wakeup: what every wakeup of the process touches (see prefetch.h). */
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
#include <systemd/sd-event.h>

#include "message.h"
#include "prefetch.h"

/* Where the build's linker script (hot-path.ld, see the Makefile) put the code a message runs: none in
 * the sanitizer and unit-test builds. The hot statics (_hot_): the linker's own symbols for the section. */
extern const char mcp_lazy_hot_path_start[] __attribute__((weak, visibility("hidden")));
extern const char mcp_lazy_hot_path_end[] __attribute__((weak, visibility("hidden")));
extern char __start_mcp_lazy_hot[] __attribute__((weak, visibility("hidden")));
extern char __stop_mcp_lazy_hot[] __attribute__((weak, visibility("hidden")));

void prefetch_wakeup(void) {
        if (__start_mcp_lazy_hot)
                prefetchw_lines(__start_mcp_lazy_hot, (size_t) (__stop_mcp_lazy_hot - __start_mcp_lazy_hot));
        message_prefetch();
        if (mcp_lazy_hot_path_start)
                prefetch_pages(mcp_lazy_hot_path_start, (size_t) (mcp_lazy_hot_path_end - mcp_lazy_hot_path_start));
        /* The event loop's and libc's functions a message calls: the line and page each starts on. */
        __builtin_prefetch((const void *) sd_event_dispatch, 0, 2);
        __builtin_prefetch((const void *) sd_event_prepare, 0, 2);
        __builtin_prefetch((const void *) sd_event_source_set_enabled, 0, 2);
        __builtin_prefetch((const void *) read, 0, 2);
        __builtin_prefetch((const void *) writev, 0, 2);
        __builtin_prefetch((const void *) memchr, 0, 2);
        __builtin_prefetch((const void *) memcpy, 0, 2);
}
