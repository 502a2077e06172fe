/* Channel: the connection state machine, flow control that resumes with what it buffered, and how
 * much of what was sent a pipe's reader really took. Real fds and a real sd-event loop. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "channel.h"
#include "tests.h"

typedef struct Seen {
        unsigned lines, oversize, eof, closed, write_errors;
        int write_error;
        char last[64];
        Channel *pause_after_first;
} Seen;

static void handler(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Seen *s = userdata;

        (void) error;
        switch (ev) {
        case CHANNEL_LINE:
                s->lines++;
                snprintf(s->last, sizeof s->last, "%.*s", (int) (len < 60 ? len : 60), line);
                if (s->pause_after_first == c)
                        channel_set_reading(c, false);
                break;
        case CHANNEL_OVERSIZE:
                s->oversize++;
                snprintf(s->last, sizeof s->last, "%.*s", (int) (len < 8 ? len : 8), line);
                break;
        case CHANNEL_EOF:
                s->eof++;
                break;
        case CHANNEL_CLOSED:
                s->closed++;
                break;
        case CHANNEL_WRITE_ERROR:
                s->write_errors++;
                s->write_error = error;
                break;
        default:
                break;
        }
}

static uint64_t now_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000ULL + (uint64_t) ts.tv_nsec / 1000ULL;
}

static void run_for(sd_event *e, unsigned ms) {
        for (unsigned k = 0; k < ms; k++)
                (void) sd_event_run(e, 1000);
}

/* Lines read while paused are handed out when reading resumes, with no new bytes from the peer. */
static void test_resume_dispatches_buffered(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        int sv[2];

        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        s.pause_after_first = c;
        CHECK(write(sv[1], "one\ntwo\nthree\n", 14) == 14);
        run_for(e, 20);
        CHECK(s.lines == 1 && strcmp(s.last, "one") == 0);
        s.pause_after_first = NULL;
        channel_set_reading(c, true);
        run_for(e, 20);
        CHECK(s.lines == 3 && strcmp(s.last, "three") == 0);
        channel_free(c);
        close(sv[1]);
        sd_event_unref(e);
}

/* A shutdown writes everything queued (far more than the socket holds) before closing our side. */
static void test_shutdown_flushes(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        static char big[300000];
        char buf[65536];
        size_t got = 0;
        ssize_t n;
        int sv[2];

        memset(big, 'x', sizeof big);
        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        CHECK(channel_send(c, big, sizeof big) == 0);
        CHECK(channel_send(c, big, sizeof big) == 0);
        CHECK(channel_state(c) == CHANNEL_STATE_OPEN);
        shutdown(sv[1], SHUT_WR); /* the peer half-closes */
        run_for(e, 5);
        CHECK(s.eof == 1 && channel_state(c) == CHANNEL_STATE_HALF_CLOSED);
        channel_shutdown(c, 5 * 1000000ULL);
        CHECK(channel_state(c) == CHANNEL_STATE_FLUSHING);
        CHECK(channel_send(c, "late", 4) == -EPIPE);
        (void) fcntl(sv[1], F_SETFL, O_NONBLOCK);
        for (int k = 0; k < 2000 && !s.closed; k++) {
                while ((n = read(sv[1], buf, sizeof buf)) > 0)
                        got += (size_t) n;
                (void) sd_event_run(e, 1000);
        }
        while ((n = read(sv[1], buf, sizeof buf)) > 0)
                got += (size_t) n;
        CHECK(s.closed == 1 && channel_state(c) == CHANNEL_STATE_CLOSED);
        CHECK(got == 2 * (sizeof big + 1));
        CHECK(n == 0); /* then EOF */
        channel_free(c);
        close(sv[1]);
        sd_event_unref(e);
}

/* A peer that reads nothing is given up on after the stall time. */
static void test_shutdown_gives_up_on_stalled_peer(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        static char big[300000];
        int sv[2];

        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        size_t total = channel_queued_total();
        CHECK(channel_send(c, big, sizeof big) == 0);
        /* What the socket did not take stays queued, in the channel's count and in the process's. */
        CHECK(channel_queued(c) > 0 && channel_queued_total() == total + channel_queued(c));
        uint64_t start, end;
        start = now_usec();
        channel_shutdown(c, 50 * 1000ULL);
        for (int k = 0; k < 500 && !s.closed; k++)
                (void) sd_event_run(e, 1000);
        end = now_usec();
        CHECK(s.closed == 1);
        /* Not before the stall time: on a loaded machine it can only be later, never earlier. */
        CHECK(end - start >= 50 * 1000ULL);
        CHECK(channel_queued(c) == 0 && channel_queued_total() == total); /* dropped */
        channel_free(c);
        close(sv[1]);
        sd_event_unref(e);
}

/* What sits unread in a pipe was not delivered: a backend that died never read it. */
static void test_delivered_bytes(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        char buf[16];
        int p[2], q[2];

        CHECK(sd_event_new(&e) >= 0);
        CHECK(pipe2(p, O_CLOEXEC) == 0); /* we write p[1], "the backend" reads p[0] */
        CHECK(pipe2(q, O_CLOEXEC) == 0); /* "the backend" writes q[1], we read q[0] */
        CHECK(channel_new(e, q[0], p[1], 1024, handler, &s, &c) >= 0);
        CHECK(channel_send(c, "aaaa", 4) == 0);
        CHECK(channel_sent_bytes(c) == 5);
        CHECK(channel_send(c, "bbbb", 4) == 0);
        CHECK(channel_sent_bytes(c) == 10);
        /* While it lives, it may read anything written: all of it counts. */
        CHECK(channel_delivered_bytes(c) == 10);
        CHECK(read(p[0], buf, 5) == 5);
        CHECK(channel_delivered_bytes(c) == 10);
        /* The backend dies: what it never read was not delivered; its stdout closes and so does
         * our side; the count stays. */
        close(p[0]);
        CHECK(channel_delivered_bytes(c) == 5);
        close(q[1]);
        run_for(e, 5);
        CHECK(s.eof == 1);
        channel_close_write(c);
        CHECK(channel_delivered_bytes(c) == 5);
        channel_free(c);
        sd_event_unref(e);
}

/* An over-long line shows its beginning, for its id. */
static void test_oversize_prefix(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        char line[3000];
        int sv[2];

        memset(line, 'y', sizeof line);
        memcpy(line, "{\"id\":9,", 8);
        line[sizeof line - 1] = '\n';
        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        CHECK(write(sv[1], line, sizeof line) == (ssize_t) sizeof line);
        CHECK(write(sv[1], "ok\n", 3) == 3);
        run_for(e, 20);
        CHECK(s.oversize == 1);
        CHECK(s.lines == 1 && strcmp(s.last, "ok") == 0);
        channel_free(c);
        close(sv[1]);
        sd_event_unref(e);
}

/* A last line without its newline is handed out before the EOF (it was dropped silently), also when
 * reading pauses on the line before it. */
static void test_last_line_without_newline(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        int sv[2];

        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        s.pause_after_first = c;
        CHECK(write(sv[1], "one\ntwo", 7) == 7);
        CHECK(shutdown(sv[1], SHUT_WR) == 0);
        run_for(e, 20);
        CHECK(s.lines == 1 && s.eof == 0);
        s.pause_after_first = NULL;
        channel_set_reading(c, true);
        run_for(e, 20);
        CHECK(s.lines == 2 && strcmp(s.last, "two") == 0 && s.eof == 1);
        channel_free(c);
        close(sv[1]);

        /* Off (a backend's stdout): the cut-off line is dropped, the EOF reported. */
        s = (Seen){};
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        channel_set_last_line(c, false);
        CHECK(write(sv[1], "one\n{\"cut", 9) == 9);
        CHECK(shutdown(sv[1], SHUT_WR) == 0);
        run_for(e, 20);
        CHECK(s.lines == 1 && strcmp(s.last, "one") == 0 && s.eof == 1);
        channel_free(c);
        close(sv[1]);
        sd_event_unref(e);
}

/* Lines read in one burst whose handler sends elsewhere: what it sent goes out in one write when
 * the burst ends (one record on a SOCK_SEQPACKET socket), in order; a channel freed inside the
 * burst still delivers what was sent to it. */
typedef struct Relay {
        Channel *to;
        bool free_on_bye;
} Relay;

static void relay_handler(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Relay *r = userdata;
        char out[64];

        (void) c, (void) error;
        if (ev != CHANNEL_LINE || !r->to)
                return;
        snprintf(out, sizeof out, "got %.*s", (int) (len < 40 ? len : 40), line);
        CHECK(channel_send(r->to, out, strlen(out)) == 0);
        if (r->free_on_bye && len == 3 && memcmp(line, "bye", 3) == 0)
                r->to = channel_free(r->to);
}

static void test_burst_one_write(void) {
        sd_event *e = NULL;
        Channel *in = NULL;
        Relay r = {};
        Seen s = {};
        char buf[256];
        int a[2], b[2];
        ssize_t n;

        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) == 0);
        CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, b) == 0);
        CHECK(channel_new(e, a[0], a[0], 1024, relay_handler, &r, &in) >= 0);
        CHECK(channel_new(e, b[0], b[0], 1024, handler, &s, &r.to) >= 0);
        /* Outside a burst a send goes at once. */
        CHECK(channel_send(r.to, "first", 5) == 0);
        CHECK(recv(b[1], buf, sizeof buf, MSG_DONTWAIT) == 6 && memcmp(buf, "first\n", 6) == 0);
        CHECK(write(a[1], "one\ntwo\nthree\n", 14) == 14);
        run_for(e, 20);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 26);
        buf[n > 0 ? n : 0] = 0;
        CHECK(strcmp(buf, "got one\ngot two\ngot three\n") == 0);
        CHECK(recv(b[1], buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);

        /* Freed inside the burst, after a send: what was sent still arrives, then EOF. */
        r.free_on_bye = true;
        CHECK(write(a[1], "x\nbye\n", 6) == 6);
        run_for(e, 20);
        CHECK(!r.to);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 14);
        buf[n > 0 ? n : 0] = 0;
        CHECK(strcmp(buf, "got x\ngot bye\n") == 0);
        CHECK(recv(b[1], buf, sizeof buf, MSG_DONTWAIT) == 0);
        channel_free(in);
        close(a[1]);
        close(b[1]);
        sd_event_unref(e);
}

/* With a burst head set on the channel read, what its first lines sent goes out once they are
 * handled (one record on a SOCK_SEQPACKET socket), the rest when the burst ends; a burst no longer
 * than the head goes out once. */
static void test_burst_head(void) {
        sd_event *e = NULL;
        Channel *in = NULL;
        Relay r = {};
        Seen s = {};
        char buf[256];
        int a[2], b[2];
        ssize_t n;

        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) == 0);
        CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, b) == 0);
        CHECK(channel_new(e, a[0], a[0], 1024, relay_handler, &r, &in) >= 0);
        CHECK(channel_new(e, b[0], b[0], 1024, handler, &s, &r.to) >= 0);
        channel_set_burst_head(in, 2);
        CHECK(write(a[1], "1\n2\n3\n4\n5\n", 10) == 10);
        run_for(e, 20);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 12 && memcmp(buf, "got 1\ngot 2\n", 12) == 0);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 18 && memcmp(buf, "got 3\ngot 4\ngot 5\n", 18) == 0);
        CHECK(recv(b[1], buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);
        CHECK(write(a[1], "6\n7\n", 4) == 4);
        run_for(e, 20);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 12 && memcmp(buf, "got 6\ngot 7\n", 12) == 0);
        CHECK(recv(b[1], buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);
        channel_free(in);
        channel_free(r.to);
        close(a[1]);
        close(b[1]);
        sd_event_unref(e);
}

/* A non-blocking connect under way (TCP on loopback: EINPROGRESS, like a vsock connect): what is sent
 * meanwhile goes out once it is done; a failed one is one CHANNEL_WRITE_ERROR with the connect's error,
 * and nothing read. */
static int loopback_connect(int port, int *ret_fd) {
        struct sockaddr_in sa = {
                .sin_family = AF_INET, .sin_port = htons((uint16_t) port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        *ret_fd = fd;
        if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0)
                return 0;
        return -errno;
}

static int loopback_listener(int *ret_port) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 1) < 0 ||
            getsockname(fd, (struct sockaddr *) &sa, &len) < 0)
                return -1;
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

static void test_connect_under_way(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        char buf[64] = "";
        int port = 0, lfd, fd, afd;

        CHECK(sd_event_new(&e) >= 0);
        lfd = loopback_listener(&port);
        CHECK(lfd >= 0);
        CHECK(loopback_connect(port, &fd) == -EINPROGRESS);
        CHECK(channel_new(e, fd, fd, 1024, handler, &s, &c) >= 0);
        CHECK(channel_set_connecting(c) >= 0);
        CHECK(channel_send(c, "hello", 5) == 0);
        run_for(e, 50);
        CHECK(!channel_connecting(c) && s.write_errors == 0 && s.eof == 0);
        afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        CHECK(afd >= 0 && read(afd, buf, sizeof buf - 1) == 6);
        CHECK_STREQ(buf, "hello\n");
        CHECK(write(afd, "back\n", 5) == 5);
        run_for(e, 20);
        CHECK(s.lines == 1 && strcmp(s.last, "back") == 0);
        channel_free(c);
        close(afd);

        /* Nobody listens there any more: refused. */
        close(lfd);
        s = (Seen){};
        CHECK(loopback_connect(port, &fd) == -EINPROGRESS);
        CHECK(channel_new(e, fd, fd, 1024, handler, &s, &c) >= 0);
        CHECK(channel_set_connecting(c) >= 0);
        CHECK(channel_send(c, "lost", 4) == 0);
        run_for(e, 50);
        CHECK(s.write_errors == 1 && s.write_error == -ECONNREFUSED);
        CHECK(s.eof == 0 && s.lines == 0 && channel_connecting(c));
        channel_free(c);
        sd_event_unref(e);
}

/* The last line of a burst: what its handler sends goes out before the handler returns (as when the
 * burst ended, right after), from the sender's parts joined in one write; a burst of more lines still
 * goes out in one write when it ends. */
typedef struct Tail {
        Channel *to;
        int peer;
        unsigned lines, seen_in_handler;
} Tail;

static void tail_handler(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Tail *t = userdata;
        char buf[64];

        (void) c, (void) error;
        if (ev != CHANNEL_LINE)
                return;
        t->lines++;
        CHECK(channel_sendv(t->to,
                            (const struct iovec[]){{(char *) "got ", 4}, {(char *) line, len}, {(char *) "!", 1}}, 3) == 0);
        if (recv(t->peer, buf, sizeof buf, MSG_DONTWAIT | MSG_PEEK) > 0)
                t->seen_in_handler++;
}

static void test_tail_written_now(void) {
        sd_event *e = NULL;
        Channel *in = NULL;
        Seen s = {};
        Tail t = {};
        char buf[256];
        int a[2], b[2];
        ssize_t n;

        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) == 0);
        CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, b) == 0);
        CHECK(channel_new(e, a[0], a[0], 1024, tail_handler, &t, &in) >= 0);
        CHECK(channel_new(e, b[0], b[0], 1024, handler, &s, &t.to) >= 0);
        t.peer = b[1];
        /* A burst of one line: written inside its handler, in one piece. */
        CHECK(write(a[1], "one\n", 4) == 4);
        run_for(e, 20);
        CHECK(t.lines == 1 && t.seen_in_handler == 1);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 9 && memcmp(buf, "got one!\n", 9) == 0);
        /* Two lines: nothing goes out while the first is handled; both in one record after the last. */
        CHECK(write(a[1], "two\nthree\n", 10) == 10);
        run_for(e, 20);
        CHECK(t.lines == 3 && t.seen_in_handler == 1);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 20 && memcmp(buf, "got two!\ngot three!\n", 20) == 0);
        CHECK(recv(b[1], buf, sizeof buf, MSG_DONTWAIT) < 0 && errno == EAGAIN);
        /* A line cut in two reads is a burst of its own when it is complete. */
        CHECK(write(a[1], "fo", 2) == 2);
        run_for(e, 20);
        CHECK(write(a[1], "ur\n", 3) == 3);
        run_for(e, 20);
        CHECK(t.lines == 4 && t.seen_in_handler == 2);
        n = recv(b[1], buf, sizeof buf - 1, MSG_DONTWAIT);
        CHECK(n == 10 && memcmp(buf, "got four!\n", 10) == 0);
        channel_free(in);
        channel_free(t.to);
        close(a[1]);
        close(b[1]);
        sd_event_unref(e);
}

/* A send written at once that the peer takes only part of: the rest waits, whole and in order with
 * what follows; a send to a peer that is gone is reported once, from the loop. */
static void test_written_now_partly(void) {
        enum { MSG = 8000 };
        static char want[4000 + MSG + 1 + 6];
        char *msg = malloc(MSG), *got = malloc(sizeof want);
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        size_t have = 0;
        int sv[2], p[2];
        ssize_t n;

        CHECK(msg != NULL && got != NULL);
        for (size_t i = 0; i < MSG; i++)
                msg[i] = (char) ('a' + i % 26);
        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
        CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) >= 4096);
        memset(want, '-', 4000);
        CHECK(write(p[1], want, 4000) == 4000); /* room for less than the message */
        CHECK(channel_new(e, sv[0], p[1], 1024, handler, &s, &c) >= 0);
        memcpy(want + 4000, msg, MSG);
        memcpy(want + 4000 + MSG, "\nafter\n", 7);
        CHECK(channel_sendv(c, (const struct iovec[]){{msg, 3000}, {msg + 3000, 5000}}, 2) == 0);
        /* The sender's bytes are gone once the send returns: what the pipe did not take was copied. */
        memset(msg, 'X', MSG);
        free(msg);
        CHECK(channel_send(c, "after", 5) == 0);
        CHECK(channel_sent_bytes(c) == MSG + 1 + 6);
        CHECK(channel_queued(c) > 6 && channel_queued(c) <= MSG + 1 + 6);
        for (int k = 0; k < 2000 && have < sizeof want; k++) {
                while (have < sizeof want && (n = read(p[0], got + have, sizeof want - have)) > 0)
                        have += (size_t) n;
                (void) sd_event_run(e, 1000);
        }
        CHECK(have == sizeof want && memcmp(got, want, sizeof want) == 0);
        CHECK(channel_queued(c) == 0 && channel_delivered_bytes(c) == MSG + 1 + 6);
        /* Its reader gone: the send is taken, and the failure comes from the loop, once. */
        (void) signal(SIGPIPE, SIG_IGN);
        close(p[0]);
        CHECK(channel_send(c, "lost", 4) == 0);
        CHECK(s.write_errors == 0);
        run_for(e, 20);
        CHECK(s.write_errors == 1 && s.write_error == -EPIPE);
        CHECK(channel_send(c, "more", 4) == -EPIPE);
        channel_free(c);
        close(sv[1]);
        free(got);
        sd_event_unref(e);
}

static void count_release(void *owner) {
        (*(unsigned *) owner)++;
}

/* A lent part is written as it is, in order with what was copied around it, and given back once:
 * when written, or when the channel drops it unwritten. */
static void test_borrow(void) {
        sd_event *e = NULL;
        Channel *c = NULL;
        Seen s = {};
        static char big[1000000], want[2 * sizeof big + 64];
        char *got = malloc(sizeof want);
        unsigned released = 0;
        size_t have = 0, w = 0;
        ssize_t n;
        int sv[2];

        for (size_t i = 0; i < sizeof big; i++)
                big[i] = (char) ('a' + i % 26);
        CHECK(got != NULL);
        CHECK(sd_event_new(&e) >= 0);
        CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        CHECK(channel_new(e, sv[0], sv[0], 1024, handler, &s, &c) >= 0);
        CHECK(channel_send(c, "before", 6) == 0);
        CHECK(channel_sendv_borrow(c,
                                   (const struct iovec[]){{(char *) "[", 1}, {big, sizeof big}, {(char *) "]", 1}}, 3, 1,
                                   count_release, &released) == 0);
        CHECK(channel_sendv_borrow(c, (const struct iovec[]){{big, sizeof big}}, 1, 0, count_release, &released) == 0);
        CHECK(channel_send(c, "after", 5) == 0);
        CHECK(released == 0); /* the socket took only part of it */
        w += (size_t) sprintf(want, "before\n[");
        memcpy(want + w, big, sizeof big), w += sizeof big;
        memcpy(want + w, "]\n", 2), w += 2;
        memcpy(want + w, big, sizeof big), w += sizeof big;
        memcpy(want + w, "\nafter\n", 7), w += 7;
        (void) fcntl(sv[1], F_SETFL, O_NONBLOCK);
        for (int k = 0; k < 2000 && have < w; k++) {
                while (have < sizeof want && (n = read(sv[1], got + have, sizeof want - have)) > 0)
                        have += (size_t) n;
                (void) sd_event_run(e, 1000);
        }
        CHECK(have == w && memcmp(got, want, w) == 0);
        CHECK(released == 2 && channel_queued(c) == 0);

        /* Freed with the part unwritten: given back all the same. */
        CHECK(channel_sendv_borrow(c, (const struct iovec[]){{big, sizeof big}}, 1, 0, count_release, &released) == 0);
        CHECK(channel_sendv_borrow(c, (const struct iovec[]){{big, sizeof big}}, 1, 0, count_release, &released) == 0);
        CHECK(released == 2 && channel_queued(c) > 0);
        channel_free(c);
        CHECK(released == 4);
        close(sv[1]);
        free(got);
        sd_event_unref(e);
}

int main(void) {
        test_burst_one_write();
        test_burst_head();
        test_tail_written_now();
        test_written_now_partly();
        test_last_line_without_newline();
        test_resume_dispatches_buffered();
        test_shutdown_flushes();
        test_shutdown_gives_up_on_stalled_peer();
        test_delivered_bytes();
        test_oversize_prefix();
        test_connect_under_way();
        test_borrow();
        return tests_finish("test-channel");
}
