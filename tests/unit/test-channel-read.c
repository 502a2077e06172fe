/* Channel reading: every channel of a process reads into one buffer and hands its lines out from there;
 * what must outlive the read (an unfinished line, lines a pause held back) moves to the channel's own.
 * Lines arrive whole and in order across reads, pauses, handlers that free their channel or read another
 * one, over-long lines and allocation failure. Real fds and a real sd-event loop. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "macros.h"
#include "tests.h"

/* Linked with -Wl,--wrap=malloc (Makefile): while fail_from is set, an allocation of that many bytes or
 * more fails. */
void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);
static size_t fail_from;

void *__wrap_malloc(size_t size) {
        if (fail_from > 0 && size >= fail_from)
                return NULL;
        return __real_malloc(size);
}

#define MAX_SEEN 64

typedef struct Seen {
        char *lines[MAX_SEEN]; /* copies */
        size_t n, oversize, eof;
        int eof_error;
        char oversize_head[16];
        /* What the handler does at the line numbered at (1-based): */
        size_t pause_at, free_at, read_other_at;
        Channel *other;     /* channel_read_all() on it at read_other_at */
        Channel **free_var; /* the channel freed at free_at, set to NULL */
        const char *kept;   /* the last line's own pointer, kept past the handler (poisoning test) */
} Seen;

static void handler(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Seen *s = userdata;

        switch (ev) {
        case CHANNEL_LINE:
                if (s->n < MAX_SEEN)
                        s->lines[s->n] = strndup(line, len);
                s->n++;
                s->kept = line;
                if (s->n == s->pause_at)
                        channel_set_reading(c, false);
                if (s->n == s->read_other_at && s->other)
                        channel_read_all(s->other);
                if (s->n == s->free_at && s->free_var)
                        *s->free_var = channel_free(c);
                break;
        case CHANNEL_OVERSIZE:
                s->oversize++;
                snprintf(s->oversize_head, sizeof s->oversize_head, "%.*s", (int) (len < 8 ? len : 8), line);
                break;
        case CHANNEL_EOF:
                s->eof++;
                s->eof_error = error;
                break;
        default:
                break;
        }
}

static void seen_done(Seen *s) {
        for (size_t i = 0; i < s->n && i < MAX_SEEN; i++)
                free(s->lines[i]);
        *s = (Seen){};
}

static bool seen_is(const Seen *s, size_t i, const char *want) {
        return i < s->n && i < MAX_SEEN && s->lines[i] && strcmp(s->lines[i], want) == 0;
}

static void run_for(sd_event *e, unsigned ms) {
        for (unsigned k = 0; k < ms; k++)
                (void) sd_event_run(e, 1000);
}

static void write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                CHECK(k > 0);
                if (k <= 0)
                        return;
                p += k;
                n -= (size_t) k;
        }
}

static void pair(sd_event *e, size_t max_line, Seen *s, Channel **ret, int *ret_peer) {
        int sv[2];

        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], max_line, handler, s, ret) >= 0);
        *ret_peer = sv[1];
}

static sd_event *loop_new(void) {
        sd_event *e = NULL;

        CHECK(sd_event_new(&e) >= 0);
        return e;
}

/* The peer writes a string; feed() then lets the loop read it. */
static void put(int peer, const char *text) {
        write_all(peer, text, strlen(text));
}

static void feed(sd_event *e, int peer, const char *text) {
        put(peer, text);
        run_for(e, 5);
}

/* The peer writes n bytes, without blocking, in pieces of at most piece, the loop running a round after
 * each try. */
static void feed_paced(sd_event *e, int peer, const char *p, size_t n, size_t piece) {
        (void) fcntl(peer, F_SETFL, O_NONBLOCK);
        for (size_t done = 0; done < n;) {
                ssize_t k = write(peer, p + done, n - done < piece ? n - done : piece);
                if (k > 0)
                        done += (size_t) k;
                run_for(e, 1);
        }
}

static void channel_done(Channel *c, int peer, Seen *s) {
        channel_free(c);
        close(peer);
        seen_done(s);
}

/* A line split across reads, one byte at a time too, and a tail kept while another channel reads. */
static void test_partial_lines(void) {
        sd_event *e = loop_new();
        Channel *a = NULL, *b = NULL;
        Seen sa = {}, sb = {};
        int pa, pb;

        pair(e, 1024, &sa, &a, &pa);
        pair(e, 1024, &sb, &b, &pb);
        feed(e, pa, "abc");
        CHECK(sa.n == 0 && channel_pending_in(a) == 3);
        /* b's reads go where a's did: a's tail must not be read from there. */
        feed(e, pb, "XXXXXXXXXXXX\nYY");
        CHECK(sb.n == 1 && seen_is(&sb, 0, "XXXXXXXXXXXX") && channel_pending_in(b) == 2);
        feed(e, pa, "def\r\nghi");
        CHECK(sa.n == 1 && seen_is(&sa, 0, "abcdef") && channel_pending_in(a) == 3);
        for (const char *p = "jk\n\nlm"; *p; p++) {
                write_all(pa, p, 1);
                run_for(e, 2);
        }
        put(pa, "\n");
        feed(e, pb, "Z\n");
        CHECK(sa.n == 3 && seen_is(&sa, 1, "ghijk") && seen_is(&sa, 2, "lm") && channel_pending_in(a) == 0);
        CHECK(sb.n == 2 && seen_is(&sb, 1, "YYZ"));
        channel_done(a, pa, &sa);
        channel_done(b, pb, &sb);
        sd_event_unref(e);
}

/* A line far longer than a read (and than the tail the shared buffer takes back), written in pieces:
 * whole, byte for byte; then short lines again. */
static void test_long_line(void) {
        enum { LONG = 300000 };
        sd_event *e = loop_new();
        Channel *c = NULL;
        Seen s = {};
        char *big = malloc(LONG + 1);
        int p;

        CHECK(big != NULL);
        for (size_t i = 0; i < LONG; i++)
                big[i] = (char) ('a' + (i * 7) % 26);
        big[LONG] = '\n';
        pair(e, 1024 * 1024, &s, &c, &p);
        put(p, "first\nsec");
        feed_paced(e, p, big, LONG + 1, 3000);
        put(p, "last\n");
        run_for(e, 20);
        CHECK(s.n == 3 && seen_is(&s, 0, "first") && seen_is(&s, 2, "last"));
        CHECK(s.n >= 2 && s.lines[1] && strlen(s.lines[1]) == LONG + 3 && memcmp(s.lines[1], "sec", 3) == 0 &&
              memcmp(s.lines[1] + 3, big, LONG) == 0);
        channel_done(c, p, &s);
        free(big);
        sd_event_unref(e);
}

/* After a long line, a short unfinished one does not keep the room the long one took: the channel
 * holds about what channel_pending_in() says its peer left unfinished (what the per-peer limit weighs). */
static void test_long_line_room_goes(void) {
        enum { LONG = 300000 };
        sd_event *e = loop_new();
        Channel *c = NULL;
        Seen s = {};
        char *big = malloc(LONG + 3);
        int p;

        CHECK(big != NULL);
        memset(big, 'x', LONG);
        memcpy(big + LONG, "\n{", 3);
        pair(e, 1024 * 1024, &s, &c, &p);
        feed_paced(e, p, big, LONG + 3, LONG + 3);
        run_for(e, 5);
        CHECK(s.n == 1 && s.lines[0] && strlen(s.lines[0]) == LONG && channel_pending_in(c) > 0);
        /* From here the peer always ends its writes mid-line. */
        for (int i = 0; i < 3; i++)
                feed(e, p, "}\n{");
        CHECK(s.n == 4 && seen_is(&s, 3, "{}") && channel_pending_in(c) == 1);
        /* Before: 300,003 bytes or more, kept while the 1-byte tail was. */
        if (channel_pending_capacity(c) > 64 * 1024)
                printf("test-channel-read: a 1-byte tail kept a buffer of %zu bytes\n", channel_pending_capacity(c));
        CHECK(channel_pending_capacity(c) <= 64 * 1024);
        channel_done(c, p, &s);
        free(big);
        sd_event_unref(e);
}

/* Paused with lines read and a tail: they wait in the channel's own buffer while other channels read,
 * and come out whole and in order when reading resumes, before what the peer sends after. */
static void test_pause_keeps_lines(void) {
        sd_event *e = loop_new();
        Channel *a = NULL, *b = NULL;
        Seen sa = {.pause_at = 1}, sb = {};
        int pa, pb;

        pair(e, 1024, &sa, &a, &pa);
        pair(e, 1024, &sb, &b, &pb);
        feed(e, pa, "one\ntwo\nthree\nfo");
        CHECK(sa.n == 1 && seen_is(&sa, 0, "one"));
        CHECK(channel_pending_in(a) == 12);
        feed(e, pb, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\ncccccccccccccc\n");
        CHECK(sb.n == 2 && seen_is(&sb, 1, "cccccccccccccc"));
        feed(e, pa, "ur\nfive\n");
        CHECK(sa.n == 1);
        sa.pause_at = 0;
        channel_set_reading(a, true);
        run_for(e, 5);
        CHECK(sa.n == 5 && seen_is(&sa, 1, "two") && seen_is(&sa, 2, "three") && seen_is(&sa, 3, "four") &&
              seen_is(&sa, 4, "five"));
        CHECK(channel_pending_in(a) == 0);

        /* Paused on the last line but one of a read: the last waits for the resume. */
        sa.pause_at = sa.n + 1;
        feed(e, pa, "six\nseven\n");
        CHECK(sa.n == 6 && seen_is(&sa, 5, "six"));
        channel_set_reading(a, true);
        run_for(e, 5);
        CHECK(sa.n == 7 && seen_is(&sa, 6, "seven"));
        channel_done(a, pa, &sa);
        channel_done(b, pb, &sb);
        sd_event_unref(e);
}

/* A handler frees its channel in the middle of a burst: nothing more is handed out, nothing is read
 * from it again, and the next channel's read is whole. */
static void test_free_mid_burst(void) {
        sd_event *e = loop_new();
        Channel *a = NULL, *b = NULL;
        Seen sa = {.free_at = 2, .free_var = &a}, sb = {};
        int pa, pb;

        pair(e, 1024, &sa, &a, &pa);
        pair(e, 1024, &sb, &b, &pb);
        feed(e, pa, "one\ntwo\nthree\nfour");
        CHECK(a == NULL && sa.n == 2 && seen_is(&sa, 1, "two") && sa.eof == 0);
        feed(e, pb, "b1\nb2\n");
        CHECK(sb.n == 2 && seen_is(&sb, 0, "b1") && seen_is(&sb, 1, "b2"));
        channel_done(a, pa, &sa);
        channel_done(b, pb, &sb);
        sd_event_unref(e);
}

/* A handler reads another channel (channel_read_all()) while its own lines are handed out: both
 * channels' lines arrive whole (the nested read must not land where the outer one's lines are). */
static void test_read_other_mid_burst(void) {
        sd_event *e = loop_new();
        Channel *a = NULL, *b = NULL;
        Seen sa = {.read_other_at = 1}, sb = {};
        int pa, pb;

        pair(e, 1024, &sa, &a, &pa);
        pair(e, 1024, &sb, &b, &pb);
        sa.other = b;
        put(pb, "nested-one\nnested-two\nnested-tail");
        put(pa, "outer-one\nouter-two\nouter-three\n");
        channel_read_all(a);
        CHECK(sa.n == 3 && seen_is(&sa, 0, "outer-one") && seen_is(&sa, 1, "outer-two") &&
              seen_is(&sa, 2, "outer-three"));
        CHECK(sb.n == 2 && seen_is(&sb, 0, "nested-one") && seen_is(&sb, 1, "nested-two"));
        CHECK(channel_pending_in(b) == 11);
        /* b's tail, read into its own buffer, goes on in the shared one. */
        feed(e, pb, "\nb-last\n");
        CHECK(sb.n == 4 && seen_is(&sb, 2, "nested-tail") && seen_is(&sb, 3, "b-last"));

        /* The other way round, from the loop, with a tail on both sides. */
        sa.read_other_at = 0;
        sb.read_other_at = sb.n + 1;
        sb.other = a;
        put(pa, "a-x\na-y\na-");
        put(pb, "b-x\nb-y\nb-");
        channel_read_all(b);
        CHECK(sb.n == 6 && seen_is(&sb, 4, "b-x") && seen_is(&sb, 5, "b-y"));
        CHECK(sa.n == 5 && seen_is(&sa, 3, "a-x") && seen_is(&sa, 4, "a-y"));
        put(pa, "z\n");
        feed(e, pb, "z\n");
        CHECK(sb.n == 7 && seen_is(&sb, 6, "b-z"));
        CHECK(sa.n == 6 && seen_is(&sa, 5, "a-z"));
        channel_done(a, pa, &sa);
        channel_done(b, pb, &sb);
        sd_event_unref(e);
}

/* Over the limit: within one read, and grown from a tail kept between reads; the next line is whole. */
static void test_oversize(void) {
        sd_event *e = loop_new();
        Channel *c = NULL;
        Seen s = {};
        char part[600];
        int p;

        pair(e, 1024, &s, &c, &p);
        memset(part, 'q', sizeof part);
        memcpy(part, "{\"id\":7,", 8);
        write_all(p, part, sizeof part);
        run_for(e, 5);
        CHECK(s.oversize == 0 && channel_pending_in(c) == sizeof part);
        memset(part, 'r', sizeof part);
        write_all(p, part, sizeof part);
        run_for(e, 5);
        CHECK(s.oversize == 1 && strcmp(s.oversize_head, "{\"id\":7,") == 0 && channel_pending_in(c) == 0);
        write_all(p, part, sizeof part);
        feed(e, p, "\nok\n");
        CHECK(s.oversize == 1 && s.n == 1 && seen_is(&s, 0, "ok"));
        channel_done(c, p, &s);
        sd_event_unref(e);
}

/* A tail that arrived in an earlier read is still the last line at EOF. */
static void test_last_line_from_tail(void) {
        sd_event *e = loop_new();
        Channel *c = NULL;
        Seen s = {};
        int p;

        pair(e, 1024, &s, &c, &p);
        feed(e, p, "one\ntw");
        feed(e, p, "o");
        CHECK(s.n == 1 && s.eof == 0);
        CHECK(shutdown(p, SHUT_WR) == 0);
        run_for(e, 5);
        CHECK(s.n == 2 && seen_is(&s, 1, "two") && s.eof == 1 && s.eof_error == 0);
        channel_done(c, p, &s);
        sd_event_unref(e);
}

/* No room to keep an unfinished line: reported as the end of the input, with -ENOMEM, never lost
 * silently; the lines before it were handed out. */
static void test_tail_out_of_memory(void) {
        sd_event *e = loop_new();
        Channel *c = NULL;
        Seen s = {};
        int p;

        pair(e, 1024, &s, &c, &p);
        put(p, "one\ntwo\nthr");
        fail_from = 4096; /* what keeping a tail asks for; the handler's copies are smaller */
        run_for(e, 5);
        fail_from = 0;
        CHECK(s.n == 2 && seen_is(&s, 1, "two"));
        CHECK(s.eof == 1 && s.eof_error == -ENOMEM);
        channel_done(c, p, &s);
        sd_event_unref(e);
}

#if HAVE_ASAN
/* A pointer into a line kept past its handler, read in a child after the wakeup: AddressSanitizer must
 * report it (the buffer is poisoned outside a read), not hand over another channel's bytes. */
static void test_kept_line_poisoned(void) {
        sd_event *e = loop_new();
        Channel *c = NULL;
        Seen s = {};
        char report[8192] = "";
        size_t have = 0;
        int p, fds[2], status = 0;
        ssize_t n;
        pid_t pid;

        pair(e, 1024, &s, &c, &p);
        feed(e, p, "kept\n");
        CHECK(s.n == 1 && s.kept != NULL);
        CHECK(pipe2(fds, O_CLOEXEC) == 0);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
                (void) dup2(fds[1], STDERR_FILENO);
                _exit(((const volatile char *) s.kept)[0] == 'k' ? 3 : 0);
        }
        close(fds[1]);
        while (have < sizeof report - 1 && (n = read(fds[0], report + have, sizeof report - 1 - have)) > 0)
                have += (size_t) n;
        report[have] = 0;
        close(fds[0]);
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
        CHECK(strstr(report, "use-after-poison") != NULL);
        channel_done(c, p, &s);
        sd_event_unref(e);
}
#endif

int main(void) {
        test_partial_lines();
        test_long_line();
        test_long_line_room_goes();
        test_pause_keeps_lines();
        test_free_mid_burst();
        test_read_other_mid_burst();
        test_oversize();
        test_last_line_from_tail();
        test_tail_out_of_memory();
#if HAVE_ASAN
        test_kept_line_poisoned();
#else
        printf("test-channel-read: not an AddressSanitizer build: the poisoning is checked in the other\n");
#endif
        return tests_finish("test-channel-read");
}
