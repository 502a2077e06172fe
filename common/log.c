/* Logging: stderr for people and tests, native journal fields when systemd captured stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <systemd/sd-journal.h>

#include "log.h"

static const char *log_program = "mcp-lazy";
static int log_max_level = LOG_INFO;
static int log_to_journal = 0;
static char log_field[256];
static int log_time = 0;

/* systemd sets JOURNAL_STREAM=dev:ino for the stream it connected to stderr; only then is the
 * journal the right sink (a frontend launched by a client inherits nothing of the sort). */
static int stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return 0;
        if (fstat(STDERR_FILENO, &st) < 0)
                return 0;
        return st.st_dev == dev && st.st_ino == ino;
}

void log_setup(const char *program) {
        const char *e = getenv("MCP_LAZY_LOG_LEVEL");

        log_program = program;
        log_to_journal = stderr_is_journal();
        if (e && streq(e, "debug"))
                log_max_level = LOG_DEBUG;
        /* For timing phases across processes (tests/bench): each stderr line ends with CLOCK_MONOTONIC. */
        e = getenv("MCP_LAZY_LOG_TIME");
        log_time = e && streq(e, "monotonic");
}

void log_set_max_level(int level) {
        log_max_level = level;
}

void log_set_field(const char *field, const char *value) {
        snprintf(log_field, sizeof log_field, "%s=%s", field, value);
}

int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) {
        char buf[2048];
        va_list ap;
        int saved = errno;

        if (error < 0)
                error = -error;
        if (level > log_max_level)
                return -error;

        errno = error;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        errno = saved;

        if (log_to_journal) {
                char codefile[300], codeline[32];

                snprintf(codefile, sizeof codefile, "CODE_FILE=%s", file);
                snprintf(codeline, sizeof codeline, "CODE_LINE=%d", line);
                if (sd_journal_send("MESSAGE=%s", buf, "PRIORITY=%d", level, "%s", codefile, "%s", codeline, "%s",
                                    log_field[0] ? log_field : "MCP_LAZY=1", NULL) >= 0)
                        return -error;
        }
        if (log_time) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                fprintf(stderr, "%s: %s [monotonic %lld.%06ld]\n", log_program, buf, (long long) ts.tv_sec,
                        ts.tv_nsec / 1000);
        } else
                fprintf(stderr, "%s: %s\n", log_program, buf);
        return -error;
}
