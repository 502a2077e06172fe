/* The channel's cache of written chunks: still used under AddressSanitizer (channel_write_now() copies
 * what the peer did not take into a cached chunk), and there a cached chunk is poisoned, so that a use
 * after it was given back is reported instead of reading the next user's bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "macros.h"
#include "tests.h"

/* This test is linked with -Wl,--wrap=malloc (Makefile): while big_watch is set, each allocation of a
 * chunk's size (more than 16 KiB) is counted, and the last one kept. */
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
static bool big_watch;
static unsigned big_count;
static void *big_last;

void *__wrap_malloc(size_t size) {
        void *p = __real_malloc(size);

        if (big_watch && size > 16 * 1024) {
                big_count++;
                big_last = p;
        }
        return p;
}

static void handler(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        (void) c, (void) ev, (void) line, (void) len, (void) error, (void) userdata;
}

/* Reads exactly len bytes from fd (non-blocking) while the loop writes them, and compares. */
static bool read_all(sd_event *e, int fd, const char *want, size_t len) {
        char *got = malloc(len);
        size_t have = 0;
        bool same;
        ssize_t n;

        if (!got)
                return false;
        for (int k = 0; k < 2000 && have < len; k++) {
                while (have < len && (n = read(fd, got + have, len - have)) > 0)
                        have += (size_t) n;
                (void) sd_event_run(e, 1000);
        }
        same = have == len && memcmp(got, want, len) == 0;
        free(got);
        return same;
}

#if HAVE_ASAN
/* A read of a chunk that sits in the cache, in a child: AddressSanitizer must report it, and the child
 * must not go on as if the bytes were its own. */
static void test_cached_chunk_poisoned(const char *chunk) {
        char report[8192] = "";
        size_t have = 0;
        int p[2], status = 0;
        ssize_t n;
        pid_t pid;

        CHECK(pipe2(p, O_CLOEXEC) == 0);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
                (void) dup2(p[1], STDERR_FILENO);
                _exit(((const volatile char *) chunk)[100] == 'Q' ? 3 : 0);
        }
        close(p[1]);
        while (have < sizeof report - 1 && (n = read(p[0], report + have, sizeof report - 1 - have)) > 0)
                have += (size_t) n;
        report[have] = 0;
        close(p[0]);
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
        CHECK(strstr(report, "use-after-poison") != NULL);
}
#endif

static void test_chunk_cache(void) {
        enum { FILL = 4000, MSG = 3000 };
        static char filler[FILL];
        char *msg = malloc(MSG), *want = malloc(MSG + 1);
        sd_event *e = NULL;
        Channel *c = NULL;
        void *chunk;
        int sv[2], p[2];

        CHECK(msg && want);
        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
        CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) >= 4096);
        CHECK(channel_new(e, sv[0], p[1], 1024, handler, NULL, &c) >= 0);

        /* With no chunk cached, a send takes a new one; written whole at once, it goes to the cache. */
        big_watch = true;
        CHECK(channel_send(c, "first", 5) == 0);
        big_watch = false;
        CHECK(big_count == 1);
        chunk = big_last;
        CHECK(read_all(e, p[0], "first\n", 6));
        CHECK(channel_queued(c) == 0);
#if HAVE_ASAN
        test_cached_chunk_poisoned(chunk);
#else
        (void) chunk;
        printf("test-channel-cache: not an AddressSanitizer build: the poisoning is checked in the other\n");
#endif

        /* A message the pipe takes only part of: the rest goes into the cached chunk (unpoisoned as it is
         * taken), no new chunk is made, and the sender's bytes may go at once. */
        memset(filler, '-', FILL);
        CHECK(write(p[1], filler, FILL) == FILL);
        for (size_t i = 0; i < MSG; i++)
                msg[i] = want[i] = (char) ('a' + i % 26);
        want[MSG] = '\n';
        big_watch = true;
        CHECK(channel_sendv(c, (const struct iovec[]){{msg, 1000}, {msg + 1000, MSG - 1000}}, 2) == 0);
        big_watch = false;
        CHECK(big_count == 1);
        CHECK(channel_queued(c) > 0);
        memset(msg, 'X', MSG);
        free(msg);
        CHECK(read_all(e, p[0], filler, FILL));
        CHECK(read_all(e, p[0], want, MSG + 1));
        CHECK(channel_queued(c) == 0);

        channel_free(c);
        close(sv[1]);
        close(p[0]);
        free(want);
        sd_event_unref(e);
}

int main(void) {
        test_chunk_cache();
        return tests_finish("test-channel-cache");
}
