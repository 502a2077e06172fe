/* sd-relay.c — a byte relay on sd-event, for bench.mjs section 2: what relaying a message costs a
 * program that must use libsystemd's event loop, as mcp-lazy must (one io source per direction, read
 * and write, nothing else). Two of them stand where the frontend and the shim stand.
 *
 *   sd-relay connect SOCK          stdin -> SOCK, SOCK -> stdout
 *   sd-relay listen SOCK CMD...    in a session of its own, takes one connection on SOCK, runs CMD
 *                                  in a process group of its own on pipes (as a shim that mcp-lazy
 *                                  started runs a backend), relays the two
 *
 * Built by bench.mjs with cc -O2 ... -lsystemd; not part of mcp-lazy. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <systemd/sd-event.h>

typedef struct {
        int in, out;
} Direction;

static int write_all(int fd, const char *p, size_t len) {
        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0 && errno == EAGAIN) {
                        (void) poll(&(struct pollfd){.fd = fd, .events = POLLOUT}, 1, -1);
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                p += k;
                len -= (size_t) k;
        }
        return 0;
}

static int on_input(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        const Direction *d = userdata;
        char buf[65536];
        ssize_t n = read(d->in, buf, sizeof buf);

        (void) fd, (void) revents;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n <= 0 || write_all(d->out, buf, (size_t) n) < 0)
                return sd_event_exit(sd_event_source_get_event(s), 0);
        return 0;
}

/* a_in -> b_out and b_in -> a_out until either side ends. */
static int relay(int a_in, int a_out, int b_in, int b_out) {
        static Direction ab, ba;
        sd_event *e = NULL;

        if (b_in == b_out && (b_in = fcntl(b_out, F_DUPFD_CLOEXEC, 3)) < 0) /* epoll watches an fd once */
                return 1;
        ab = (Direction){a_in, b_out};
        ba = (Direction){b_in, a_out};
        if (fcntl(a_in, F_SETFL, fcntl(a_in, F_GETFL) | O_NONBLOCK) < 0 ||
            fcntl(b_in, F_SETFL, fcntl(b_in, F_GETFL) | O_NONBLOCK) < 0 || sd_event_new(&e) < 0 ||
            sd_event_add_io(e, NULL, a_in, EPOLLIN, on_input, &ab) < 0 ||
            sd_event_add_io(e, NULL, b_in, EPOLLIN, on_input, &ba) < 0)
                return 1;
        return sd_event_loop(e) < 0;
}

int main(int argc, char **argv) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd, to[2], from[2];

        signal(SIGPIPE, SIG_IGN);
        if (argc < 3 || (strcmp(argv[1], "connect") && (strcmp(argv[1], "listen") || argc < 4))) {
                fprintf(stderr, "Usage: sd-relay connect SOCK | sd-relay listen SOCK CMD...\n");
                return 2;
        }
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[2]);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return 1;
        if (!strcmp(argv[1], "connect")) {
                for (int i = 0; connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0; i++) {
                        if (i >= 500) {
                                perror(argv[2]);
                                return 1;
                        }
                        usleep(20000);
                }
                return relay(STDIN_FILENO, STDOUT_FILENO, fd, fd);
        }
        (void) setsid();
        (void) unlink(sa.sun_path);
        if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 1) < 0) {
                perror(argv[2]);
                return 1;
        }
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0 || pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
                return 1;
        pid_t pid = fork();
        if (pid < 0)
                return 1;
        if (pid == 0) {
                (void) setpgid(0, 0);
                if (dup2(to[0], STDIN_FILENO) < 0 || dup2(from[1], STDOUT_FILENO) < 0)
                        _exit(127);
                execvp(argv[3], argv + 3);
                _exit(127);
        }
        close(to[0]);
        close(from[1]);
        close(fd);
        return relay(c, c, from[0], to[1]);
}
