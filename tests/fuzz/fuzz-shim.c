/* Fuzz target: the shim's message handling, for real (shimd/client.c, instance.c, upcalls.c), with two
 * client sessions on one pooled backend. Each input line goes to the shim from the peer its first byte
 * names ('a', 'b': a client; 'k': the backend; a line "Ma" or "Mb" makes that client one whose
 * initialize said 2026-07-28, a handshake-era one otherwise; "xa" or "xb": that client leaves; "Xa",
 * "Xb": it leaves and a new one takes its letter ("Na", "Nb": one whose client declared sampling, when
 * the backend is known to speak 2026-07-28); "Ha", "Hb": it hangs up, and the shim finds out on
 * its own read; "ha", "hb": it half-closes (sends nothing more, reads on); "T": the backend's timer
 * (init_timeout, a stop's grace) runs out now; "O", "O1".."O9": an allocation of subscribe.c fails,
 * the next or that many-th from now); everything the shim writes is read back and checked:
 * every line is a valid message, an answer reaches only a session that used its id and no more often
 * than it used it, a progress notification only the session that named its token, the backend gets
 * only our request ids; a half-closed session the shim closes, and at the end of the input any
 * session with nothing in flight, has had an answer to every request it did not cancel; no call waits
 * at a started backend that is down with nothing to start it, nor at one starting or stopping without
 * its timer; a handshake-era backend's process holds no resource subscription for no session, and is
 * asked for each one its sessions hold (a process started again too: check_backend_subs()); and every
 * descriptor the input opened is closed at its end.
 *
 * The backend is up (READY) unless the input's first line is "S", "D", "U" or "V": then it is down,
 * and the first call starts it for real (instance_spawn(), its timer armed), the input speaking for
 * the process over the pipes it is given (process.c is left out: see process_spawn() below), so that
 * the input answers the first request (well, badly, late or never, "T" making init_timeout run out)
 * while the sessions' calls queue. "S": an earlier start learned a handshake-era backend, so
 * initialize (id 0) goes first; "D": server/discover (id -100) does, as at a first start; "U": the
 * backend is a process that is up from the start (started ahead of the sessions, its initialize
 * answered by the harness; "V": the same, a 2026-07-28 backend, its server/discover answered). In
 * these modes the backend's process can fail, and each later start is a new process the input
 * speaks for: "C" closes its stdout, "I" its stdin; "W" wedges it (it reads its stdin no more); "G"
 * makes it ignore SIGTERM; "P..." writes bytes of a line without its newline (a later backend line
 * ends it); "K" kills it (its pipes close, it dies of SIGKILL, or with "K0".."K9" exits with that
 * status); "Z" (or "Z0".."Z9") ends its process while its pipes stay open (held by a child of its
 * own). The shim sees each death as it would a real one: on_child(),
 * probe_died(), what the dead process never read sent again. There, too: a process that died on
 * server/discover is followed by one that is sent initialize first, and a process being stopped at
 * the end of the input is gone once the stop's timers run out, SIGTERM heeded or not.
 *
 * In a session's line, "$S" stands for the requestState the shim last handed that session, "$R" for
 * the one before, "$T" for the other session's last: a retry of a call that waits for input (a
 * keyed secret no input could guess), a stale round's, another session's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"
#define FUZZ_SHIM_HARNESS
#include "fuzz-shim-subscribe.h"
#include "era.h"
#include "ids.h"
#include "macros.h"
#include "message.h"
#include "peek.h"
#include "process.h"
#include "shimd.h"

/* shimd/subscribe.c's allocations (the build sends them here: fuzz-shim-subscribe.h). A line "O" (or
 * "O1".."O9") makes the first (or that many-th) of them from then on fail, as out of memory does. */
static unsigned alloc_fail_in;
static bool alloc_failed;         /* one failed in this input */
static bool alloc_failed_process; /* ... since the backend's current process started */

static bool alloc_fails(void) {
        if (alloc_fail_in == 0 || --alloc_fail_in > 0)
                return false;
        alloc_failed = alloc_failed_process = true;
        return true;
}

void *fuzz_shim_calloc(size_t n, size_t size) {
        return alloc_fails() ? NULL : calloc(n, size);
}

char *fuzz_shim_strdup(const char *s) {
        return alloc_fails() ? NULL : strdup(s);
}

cJSON *fuzz_shim_cJSON_CreateArray(void) {
        return alloc_fails() ? NULL : cJSON_CreateArray();
}

cJSON *fuzz_shim_cJSON_CreateString(const char *s) {
        return alloc_fails() ? NULL : cJSON_CreateString(s);
}

char *fuzz_shim_cJSON_PrintUnformatted(const cJSON *item) {
        return alloc_fails() ? NULL : cJSON_PrintUnformatted(item);
}

cJSON *fuzz_shim_era_resource_uris_new(const Message *m, const char *const *path, const cJSON *tree,
                                       size_t *ret_n_nul) {
        return alloc_fails() ? NULL : era_resource_uris_new(m, path, tree, ret_n_nul);
}

/* The JSON text the shim parses (cJSON_ParseWithLength(): the message layer's, and any of the shim's own)
 * against what its peers sent it: a peer's bytes are parsed a bounded number of times, however many
 * requests it has in flight (review 12 HIGH-1: each subscribe that ended re-parsed every other one in
 * flight, and a session leaving with N of them cost N*N/2 parses). The harness's own reading (note_sent(),
 * drain()) is not counted. */
static size_t parsed_bytes, fed_bytes;
static bool harness_reading;

cJSON *cJSON_ParseWithLength(const char *value, size_t len) {
        if (!harness_reading)
                parsed_bytes += len;
        return cJSON_ParseWithLengthOpts(value, len, NULL, false);
}

/* The URIs shimd/subscribe.c compares one by one (array_has(), counted through fuzz-shim-subscribe.h): on
 * a line, at most those the two sessions hold, each session's once (an update goes to the sessions that
 * hold its URI). The union of what the sessions hold, and what a 2026-07-28 backend's stream took, are
 * hashed sets: rebuilt by comparing each URI with the others, at every subscribe or unsubscribe and
 * acknowledgement, they cost the URIs' number squared (one session holding 1024 long URIs stalled
 * the shared shim 0.3 s per line it sent). */
static size_t uri_compares, fed_lines;

void fuzz_shim_uri_compared(void) {
        uri_compares++;
}

static size_t uri_hashed;

void fuzz_shim_uri_hashed(void) {
        uri_hashed++;
}

/* A session that leaves a handshake-era backend costs the URIs it held, not all the sessions' (each leave
 * once rebuilt a set of every other session's URIs). */
static Client *client_free_counted(Client *c) {
        bool legacy = c && c->instance && c->instance->era == BACKEND_ERA_LEGACY;
        size_t own = c ? (size_t) cJSON_GetArraySize(c->subscriptions) : 0, before = uri_hashed;

        client_free(c);
        if (legacy && uri_hashed - before > own)
                fprintf(stderr, "a session holding %zu URIs left, and %zu were hashed\n", own, uri_hashed - before);
        FUZZ_ASSERT(!legacy || uri_hashed - before <= own);
        return NULL;
}

/* Through an index, cJSON walks its list from the head: index + 1 steps, each counted as a compare (a
 * loop over all the sessions' URIs by index cost their number squared at each acknowledgement). */
cJSON *fuzz_shim_cJSON_GetArrayItem(const cJSON *array, int index) {
        uri_compares += index >= 0 ? (size_t) index + 1 : 0;
        return cJSON_GetArrayItem(array, index);
}

void fuzz_shim_cJSON_DeleteItemFromArray(cJSON *array, int which) {
        uri_compares += which >= 0 ? (size_t) which + 1 : 0;
        cJSON_DeleteItemFromArray(array, which);
}

/* main.c's part, which the target leaves out, but for what on_update() does with connections: the
 * harness runs shim_on_update() after the loop has run, when something asked for it. */
static bool update_wanted;

void shim_update(Shim *s) {
        (void) s;
        update_wanted = true;
}

void shim_calls_changed(Shim *s, const Client *c) {
        (void) s;
        if (!c || c->eof || c->overflow)
                update_wanted = true;
}

/* As on_update() does: a connection that does not read goes, a half-closed one with nothing in
 * flight is flushed and closed (the channel frees it once its answers are out). */
static void shim_on_update(Shim *s) {
        if (!update_wanted)
                return;
        update_wanted = false;
        for (Client *c = s->clients, *n; c; c = n) {
                n = c->next;
                if (c->overflow)
                        client_free(c);
                else if (client_done(c))
                        channel_shutdown(c->ch, CLIENT_STALL_USEC);
        }
}

unsigned shim_in_flight(const Shim *s) {
        (void) s;
        return 0;
}

/* What a handshake-era backend's process holds (its resource subscriptions), as the harness sees it: the
 * resources/subscribe and unsubscribe requests it read (the sessions' forwarded, the shim's own) and its
 * answers to them, which the input writes. A URI is known held when the last of its requests (in the
 * order they were sent) that the process answered was a subscribe it granted: a refusal, an invalid
 * answer or an unsubscribe leaves it not known held (a repeat refused may leave an earlier grant standing,
 * an unsubscribe refused may leave the URI held: neither can the harness tell). A new process holds
 * nothing: process_spawn() starts the record afresh. check_backend_subs() reads it. */
#define MAX_BACKEND_REQUESTS 512
#define MAX_BACKEND_URIS     64

typedef struct BackendUri {
        char *uri;
        bool held;                   /* known held */
        bool last_sent_sub;          /* the last request of it the process read is a subscribe */
        unsigned open;               /* requests of it read and not answered (a cancelled one may never be) */
        unsigned long last_answered; /* 1 + the order of the latest-sent request of it answered; 0: none */
} BackendUri;

typedef struct BackendRequest {
        int64_t id;
        size_t uri; /* slot in backend_uris */
        bool sub, answered;
} BackendRequest;

static BackendUri backend_uris[MAX_BACKEND_URIS];
static size_t n_backend_uris;
static BackendRequest backend_requests[MAX_BACKEND_REQUESTS];
static size_t n_backend_requests;
static bool backend_subs_unknown; /* more than the record holds, or an id read twice: not checked */

static void backend_subs_reset(void) {
        for (size_t j = 0; j < n_backend_uris; j++)
                free(backend_uris[j].uri);
        n_backend_uris = n_backend_requests = 0;
        backend_subs_unknown = false;
        alloc_failed_process = false;
}

static size_t backend_uri_slot(const char *uri) {
        for (size_t j = 0; j < n_backend_uris; j++)
                if (streq(backend_uris[j].uri, uri))
                        return j;
        if (n_backend_uris == MAX_BACKEND_URIS)
                return MAX_BACKEND_URIS;
        backend_uris[n_backend_uris] = (BackendUri){.uri = strdup(uri)};
        FUZZ_ASSERT(backend_uris[n_backend_uris].uri);
        return n_backend_uris++;
}

/* The process read m, a request of the shim's (check_to_backend()). */
static void backend_subs_sent(const Message *m) {
        bool sub = streq(m->method, "resources/subscribe");
        const char *uri;
        size_t u;

        if ((!sub && !streq(m->method, "resources/unsubscribe")) || !message_json(m) ||
            !(uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"))))
                return;
        for (size_t j = 0; j < n_backend_requests; j++)
                if (backend_requests[j].id == (int64_t) m->id->valuedouble)
                        backend_subs_unknown = true; /* which answer is whose cannot be told */
        if ((u = backend_uri_slot(uri)) == MAX_BACKEND_URIS || n_backend_requests == MAX_BACKEND_REQUESTS) {
                backend_subs_unknown = true;
                return;
        }
        backend_requests[n_backend_requests++] = (BackendRequest){
                .id = (int64_t) m->id->valuedouble,
                .uri = u,
                .sub = sub,
        };
        backend_uris[u].last_sent_sub = sub;
        backend_uris[u].open++;
}

/* The process wrote line (the input did, for it): an answer to one of those requests, read as the shim
 * reads it (handle_backend_response(), handle_backend_invalid(), handle_backend_garbage(): a line that is
 * not JSON ends the call whose id it shows), ends it; the first answer counts, as it does for the shim. */
static void backend_subs_answered(const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        _cleanup_json_ cJSON *peeked = NULL;
        const cJSON *id = NULL;
        bool granted = false;

        harness_reading = true;
        if (message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m) < 0)
                id = peeked = json_peek_has_key(line, len, "method") ? NULL : jsonrpc_peek_id(line, len);
        else if (m->kind == JSONRPC_RESPONSE ||
                 (m->kind == JSONRPC_INVALID && !json_peek_has_key(line, len, "method"))) {
                id = m->id;
                granted = m->kind == JSONRPC_RESPONSE && message_route(m, ROUTE_PATH_RESULT).len > 0;
        }
        harness_reading = false;
        if (!cJSON_IsNumber(id))
                return;
        for (size_t j = 0; j < n_backend_requests; j++) {
                BackendRequest *r = &backend_requests[j];
                BackendUri *u = &backend_uris[r->uri];

                if (r->answered || (double) r->id != id->valuedouble)
                        continue;
                r->answered = true;
                u->open--;
                /* One sent after it was answered first: the process read that one later, and it stands. */
                if (j + 1 > u->last_answered) {
                        u->last_answered = j + 1;
                        u->held = r->sub && granted;
                }
                return;
        }
}

/* process.c's part. A started backend is two pipes whose other ends the input speaks for (its stdin,
 * which the harness reads, and its stdout, which it writes), and a child of ours that stands in for
 * its process (a waiter: sd_event_add_child() wants a real child). A waiter exits when the input
 * says the backend dies ("K", "Z") or when the shim kills it (process_kill()), and the harness waits
 * until it is a zombie before the loop runs on, so that the shim sees the death in the same place on
 * every run. Waiters are held by pidfd, immune to pid reuse once sd-event has reaped one. Each start
 * of an input gets a fresh process and pipes (a waiter that never died is kept for the next input);
 * at most MAX_STARTS of them, in the modes "S" and "D" only: past that, or in the mode where the
 * backend is up from the start, a start fails as a spawn can (EMFILE). */
#define MAX_STARTS 16
#define MAX_ENDED  (MAX_STARTS + 1)

typedef struct Waiter {
        pid_t pid;
        int pidfd;
        int life;          /* the write end of the pipe it reads: a line written there is its exit status */
        bool ignores_term; /* "G": only SIGKILL ends it */
        /* What it was sent (server/discover, initialize) and how many whole lines the input wrote it. */
        bool got_discover, got_initialize, first_request_seen;
        unsigned lines_out;
} Waiter;
#define WAITER_NONE ((Waiter){.pid = -1, .pidfd = -EBADF, .life = -EBADF})

static Waiter spare = WAITER_NONE;   /* alive and unused: the next start takes it */
static Waiter current = WAITER_NONE; /* the started backend's process, alive */
static Waiter ended[MAX_ENDED];      /* processes that died in this input, reaped at its end */
static size_t n_ended;
static unsigned n_starts;
static bool may_spawn;
static int started_in = -EBADF, started_out = -EBADF; /* the started backend's ends, for the input */

/* A shell that waits for a line on its stdin and exits with the status it says: spawned (vfork and
 * exec), not forked, which would copy this process's page tables at every start. */
static Waiter waiter_new(void) {
        static char *const argv[] = {(char *) "sh", (char *) "-c", (char *) "read -r s; exit \"${s:-0}\"", NULL};
        static char *const envp[] = {NULL};
        posix_spawn_file_actions_t fa;
        Waiter w;
        int p[2];

        FUZZ_ASSERT(pipe2(p, O_CLOEXEC) == 0);
        FUZZ_ASSERT(posix_spawn_file_actions_init(&fa) == 0);
        FUZZ_ASSERT(posix_spawn_file_actions_adddup2(&fa, p[0], STDIN_FILENO) == 0);
        FUZZ_ASSERT(posix_spawn(&w.pid, "/bin/sh", &fa, NULL, argv, envp) == 0);
        posix_spawn_file_actions_destroy(&fa);
        close(p[0]);
        w.life = p[1];
        w.pidfd = pidfd_open(w.pid, 0);
        FUZZ_ASSERT(w.pidfd >= 0);
        return w;
}

/* The current process ends: with an exit status (>= 0), or by SIGKILL; returns once it is a zombie. */
static void current_end(int status) {
        siginfo_t si = {};

        if (current.pid < 0)
                return;
        if (status >= 0) {
                char line[] = {(char) ('0' + status), '\n'};
                FUZZ_ASSERT(write(current.life, line, sizeof line) == sizeof line);
        } else
                FUZZ_ASSERT(pidfd_send_signal(current.pidfd, SIGKILL, NULL, 0) == 0);
        safe_close(current.life);
        current.life = -EBADF;
        /* ECHILD: reaped already (by sd-event, after the shim's on_child()). */
        while (waitid(P_PIDFD, current.pidfd, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
                ;
        FUZZ_ASSERT(n_ended < MAX_ENDED);
        ended[n_ended++] = current;
        current = WAITER_NONE;
}

static void partial_reset(void);

int process_spawn(const Backend *b, pid_t *ret_pid, int *ret_stdin, int *ret_stdout, char *err, size_t errlen) {
        int in[2], out[2];

        if (!may_spawn || n_starts >= MAX_STARTS) {
                snprintf(err, errlen, "cannot start backend '%s': %s", b->name, strerror(EMFILE));
                return -EMFILE;
        }
        /* One instance in this harness: a start while its last process lives (the shim neither killed
         * it nor heard of its death) would leave that process behind. */
        FUZZ_ASSERT(current.pid < 0);
        n_starts++;
        backend_subs_reset(); /* a new process holds no subscriptions */
        current = spare.pid > 0 ? spare : waiter_new();
        current.ignores_term = current.got_discover = current.got_initialize = current.first_request_seen = false;
        current.lines_out = 0;
        spare = WAITER_NONE;
        FUZZ_ASSERT(pipe2(in, O_CLOEXEC | O_NONBLOCK) == 0);
        FUZZ_ASSERT(pipe2(out, O_CLOEXEC | O_NONBLOCK) == 0);
        /* What the last process left open (it died with "Z") goes: whatever held it is gone too, and
         * what "P" lines wrote of a line there with it (the next line goes to the new process whole). */
        safe_close(started_in);
        safe_close(started_out);
        partial_reset();
        started_in = in[0];
        started_out = out[1];
        *ret_pid = current.pid;
        *ret_stdin = in[1];
        *ret_stdout = out[0];
        return 0;
}

/* The shim's signals (a stop that runs out of grace, on_child()'s kill of the group): its process
 * dies of any of them, but of SIGTERM when it ignores that ("G"). Only ever our current waiter,
 * through its pidfd: nothing else is signalled. */
void process_kill(pid_t pid, int sig) {
        if (pid > 0 && pid == current.pid && !(sig == SIGTERM && current.ignores_term))
                current_end(-1);
}

/* As process.c says it. */
void process_describe_exit(const siginfo_t *si, char *buf, size_t size) {
        if (si->si_code == CLD_EXITED)
                snprintf(buf, size, "exited with status %d", si->si_status);
        else
                snprintf(buf, size, "was killed by signal %s", sigabbrev_np(si->si_status) ?: "?");
}

/* At the end of an input: the dead are reaped, a live process is kept for the next input's first start. */
static void waiters_end_input(void) {
        siginfo_t si = {};

        for (size_t j = 0; j < n_ended; j++) {
                while (waitid(P_PIDFD, ended[j].pidfd, &si, WEXITED) < 0 && errno == EINTR)
                        ;
                safe_close(ended[j].pidfd);
        }
        n_ended = 0;
        if (current.pid > 0) {
                if (spare.pid > 0) {
                        /* Two alive: the current one goes. */
                        current_end(0);
                        return waiters_end_input();
                }
                spare = current;
                current = WAITER_NONE;
        }
}

/* Descriptors that a leak would leave: pipes, sockets, pidfds (not the event loop's own, which it
 * makes once and keeps), minus the spare waiter's. */
static unsigned count_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        unsigned n = 0;

        FUZZ_ASSERT(d);
        while ((de = readdir(d))) {
                char path[300], link[64];
                ssize_t l;

                if (de->d_name[0] == '.' || atoi(de->d_name) == dirfd(d))
                        continue;
                snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
                l = readlink(path, link, sizeof link - 1);
                if (l < 0)
                        continue;
                link[l] = 0;
                if (strncmp(link, "pipe:", 5) == 0 || strncmp(link, "socket:", 7) == 0 ||
                    streq(link, "anon_inode:[pidfd]"))
                        n++;
        }
        closedir(d);
        return n - (spare.pid > 0 ? 2 : 0);
}

#define MAX_SEEN    4096
#define MAX_UPCALLS 256
#define MAX_SUBS    64

typedef struct Peer {
        int fd;                     /* our end */
        const char *seen[MAX_SEEN]; /* id and token texts this peer sent (owned) */
        char *ids[MAX_SEEN];        /* each id text a line of this peer showed, with counts */
        unsigned sent[MAX_SEEN], answered[MAX_SEEN];
        unsigned requests[MAX_SEEN], cancels[MAX_SEEN]; /* valid requests under it; its cancellations */
        bool half_closed;
        char states[2][128]; /* the requestStates the shim handed this session last ([0]) and before */
        /* The shim's requests to this session (keys: their ids decoded), and whether the session
         * answered each, or the shim withdrew it. */
        char *upcalls[MAX_UPCALLS];
        bool upcall_done[MAX_UPCALLS];
        size_t n_upcalls;
        /* Its resource subscriptions as the shim's answers told it: held (a subscribe succeeded, no
         * unsubscribe since), requests not answered yet, or unknown (an id used twice, an error after
         * a success); and its subscribe and unsubscribe requests in flight (id, URI slot). */
        char *sub_uris[MAX_SUBS];
        bool sub_held[MAX_SUBS], sub_unknown[MAX_SUBS];
        bool sub_kept[MAX_SUBS]; /* granted, alone in flight, and not let go since: check_subs_kept() */
        bool sub_gone[MAX_SUBS]; /* refused (not held before) or unsubscribed, alone in flight: not held */
        unsigned sub_open[MAX_SUBS];
        size_t n_subs;
        char *sub_ids[MAX_SUBS];
        size_t sub_of[MAX_SUBS];
        bool sub_is_sub[MAX_SUBS];
        unsigned long sub_seq[MAX_SUBS], n_sub_sent; /* the order the session sent them in */
        bool sub_ended[MAX_SUBS]; /* a subscribe an unsubscribe of its URI, sent after it, was granted before */
        /* Per URI: 1 + the order of the latest-sent request of it answered with a result (0: none). An
         * answer to one sent before that comes late: the shim's state, and the backend's, follow the order
         * the requests were sent in, and that answer changes neither. */
        unsigned long sub_result_after[MAX_SUBS];
        size_t n_sub_ids;
        size_t n_ids;
        size_t n_seen;
        char buf[1 << 16];
        size_t len;
} Peer;

static void remember(Peer *p, const char *text, size_t len) {
        if (p->n_seen < MAX_SEEN)
                p->seen[p->n_seen++] = strndup(text, len);
}

static bool was_seen(const Peer *p, const char *text, size_t len) {
        for (size_t i = 0; i < p->n_seen; i++)
                if (p->seen[i] && strlen(p->seen[i]) == len && memcmp(p->seen[i], text, len) == 0)
                        return true;
        return false;
}

/* A request of the shim's to this session (key) is done: answered by it, or withdrawn. */
static void upcall_done(Peer *p, const char *key) {
        for (size_t i = 0; key && i < p->n_upcalls; i++)
                if (streq(p->upcalls[i], key))
                        p->upcall_done[i] = true;
}

/* The slot of an id text in p's counts, made if need be (MAX_SEEN: no room). */
static size_t id_slot(Peer *p, const char *t) {
        size_t i;
        for (i = 0; i < p->n_ids; i++)
                if (streq(p->ids[i], t))
                        return i;
        if (p->n_ids == MAX_SEEN)
                return MAX_SEEN;
        p->ids[p->n_ids] = strdup(t);
        FUZZ_ASSERT(p->ids[p->n_ids]);
        p->sent[i] = p->answered[i] = p->requests[i] = p->cancels[i] = 0;
        return p->n_ids++;
}

static void count_id(Peer *p, const char *t, bool answer) {
        size_t i;
        for (i = 0; i < p->n_ids; i++)
                if (streq(p->ids[i], t))
                        break;
        if (i == p->n_ids) {
                if (answer) {
                        fprintf(stderr, "answer under id %s, which this session never sent\n", t);
                        FUZZ_ASSERT(!"answer under an id never sent");
                }
                if ((i = id_slot(p, t)) == MAX_SEEN)
                        return;
        }
        if (answer) {
                p->answered[i]++;
                if (p->answered[i] > p->sent[i])
                        fprintf(stderr, "%u answers under id %s, sent %u\n", p->answered[i], t, p->sent[i]);
                FUZZ_ASSERT(p->answered[i] <= p->sent[i]);
        } else
                p->sent[i]++;
}

/* The slot of a URI in p's subscriptions (MAX_SUBS: no room). */
static size_t sub_slot(Peer *p, const char *uri) {
        for (size_t i = 0; i < p->n_subs; i++)
                if (streq(p->sub_uris[i], uri))
                        return i;
        if (p->n_subs == MAX_SUBS)
                return MAX_SUBS;
        p->sub_uris[p->n_subs] = strdup(uri);
        FUZZ_ASSERT(p->sub_uris[p->n_subs]);
        p->sub_held[p->n_subs] = p->sub_unknown[p->n_subs] = p->sub_kept[p->n_subs] = p->sub_gone[p->n_subs] = false;
        p->sub_open[p->n_subs] = 0;
        p->sub_result_after[p->n_subs] = 0;
        return p->n_subs++;
}

/* A resources/subscribe or unsubscribe the session sent (its URI without a NUL, which the shim refuses
 * as it is): the URI's state is open until it is answered. */
static void note_subscribe(Peer *p, const Message *m) {
        const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
        bool sub = streq(m->method, "resources/subscribe");
        size_t k, s;

        if (!uri || (!sub && !streq(m->method, "resources/unsubscribe")) || subscribe_uri_has_nul(m) != 0 ||
            (k = sub_slot(p, uri)) == MAX_SUBS)
                return;
        if (!sub)
                p->sub_kept[k] = false; /* the shim lets it go as it reads the unsubscribe */
        p->sub_gone[k] = false;
        /* Another request under its id in flight: which answer is whose cannot be told. */
        if ((s = id_slot(p, m->id_text)) == MAX_SEEN || p->sent[s] > p->answered[s] + 1)
                p->sub_unknown[k] = true, p->sub_kept[k] = false;
        for (size_t j = 0; j < p->n_sub_ids; j++)
                if (streq(p->sub_ids[j], m->id_text)) {
                        /* The same id twice: which answer is whose cannot be told. */
                        p->sub_unknown[k] = p->sub_unknown[p->sub_of[j]] = true;
                        p->sub_kept[k] = p->sub_kept[p->sub_of[j]] = false;
                        return;
                }
        if (p->n_sub_ids == MAX_SUBS) {
                p->sub_unknown[k] = true;
                return;
        }
        p->sub_ids[p->n_sub_ids] = strdup(m->id_text);
        FUZZ_ASSERT(p->sub_ids[p->n_sub_ids]);
        p->sub_of[p->n_sub_ids] = k;
        p->sub_seq[p->n_sub_ids] = p->n_sub_sent++;
        p->sub_ended[p->n_sub_ids] = false;
        p->sub_is_sub[p->n_sub_ids++] = sub;
        p->sub_open[k]++;
}

/* The shim's answer to one of them: a subscribe that succeeded holds the URI, an unsubscribe that did
 * lets it go; an error leaves a URI not held as it was (one held, unknown: it may have been refused
 * before anything changed). */
/* "V": the backend is a 2026-07-28 one from the start, and the shim answers subscribes itself. */
static bool subs_by_shim;

static void note_subscribe_answer(Peer *p, const Message *m) {
        for (size_t j = 0; j < p->n_sub_ids; j++) {
                size_t k = p->sub_of[j];
                const cJSON *error = cJSON_GetObjectItemCaseSensitive(message_json(m), "error");
                const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(error, "message"));
                bool alone, result, late;

                if (!streq(p->sub_ids[j], m->id_text))
                        continue;
                result = cJSON_GetObjectItemCaseSensitive(message_json(m), "result");
                late = p->sub_result_after[k] > p->sub_seq[j];
                if (result && !late)
                        p->sub_result_after[k] = p->sub_seq[j] + 1;
                /* Kept: a subscribe granted while alone in flight for its URI (and not late); a subscribe
                 * refused leaves it as it was (out of memory too), unless it says that the stream does not
                 * carry the URI (or others for it were in flight); an unsubscribe's answer lets it go. */
                alone = p->sub_open[k] == 1 && !p->sub_unknown[k] && !late;
                if (!error)
                        p->sub_kept[k] = p->sub_is_sub[j] && alone;
                else if (!p->sub_is_sub[j] || !alone || !text || strstr(text, "does not offer"))
                        p->sub_kept[k] = false;
                /* Gone: an unsubscribe granted, or a subscribe refused of a URI not held before, alone
                 * in flight (in either era: a handshake-era backend's error included). */
                p->sub_gone[k] = alone && (p->sub_is_sub[j] ? error && !p->sub_held[k] : !error);
                /* An unsubscribe granted ends the subscribes of its URI sent before it: at a 2026-07-28
                 * backend (the shim answers them, one process so far), none of them is granted after it
                 * (the session would be told it holds what the shim let go). */
                if (!error && !p->sub_is_sub[j] && !p->sub_unknown[k])
                        for (size_t o = 0; o < p->n_sub_ids; o++)
                                if (p->sub_of[o] == k && p->sub_is_sub[o] && p->sub_seq[o] < p->sub_seq[j])
                                        p->sub_ended[o] = true;
                if (!error && p->sub_is_sub[j] && p->sub_ended[j] && !p->sub_unknown[k] && subs_by_shim &&
                    n_starts <= 1) {
                        fprintf(stderr, "subscribe %s of %s granted after a later unsubscribe of it\n", m->id_text,
                                p->sub_uris[k]);
                        FUZZ_ASSERT(!"a subscribe granted after its URI's unsubscribe");
                }
                if (result && !late)
                        p->sub_held[k] = p->sub_is_sub[j];
                else if (!result && p->sub_held[k])
                        p->sub_unknown[k] = true;
                p->sub_open[k]--;
                free(p->sub_ids[j]);
                p->sub_ids[j] = p->sub_ids[--p->n_sub_ids];
                p->sub_of[j] = p->sub_of[p->n_sub_ids];
                p->sub_is_sub[j] = p->sub_is_sub[p->n_sub_ids];
                p->sub_seq[j] = p->sub_seq[p->n_sub_ids];
                p->sub_ended[j] = p->sub_ended[p->n_sub_ids];
                return;
        }
}

/* A request under the id of a subscribe or unsubscribe in flight: which answer is whose cannot be told. */
static void note_sub_id_reused(Peer *p, const char *id_text) {
        for (size_t j = 0; j < p->n_sub_ids; j++)
                if (streq(p->sub_ids[j], id_text))
                        p->sub_unknown[p->sub_of[j]] = true, p->sub_kept[p->sub_of[j]] = false;
}

/* What a peer sent: the ids and tokens it may later see again. */
static void note_sent_read(Peer *p, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        IdField f[16];
        size_t n, k;

        if (message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m) < 0) {
                /* A line that cannot be read but shows a method is refused under the id its beginning shows. */
                _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len), *decoded = NULL;
                if (id)
                        remember(p, id->valuestring, strlen(id->valuestring));
                if (id)
                        count_id(p, id->valuestring, false);
                if (id)
                        note_sub_id_reused(p, id->valuestring); /* refused under it */
                if (id && (decoded = cJSON_Parse(id->valuestring)))
                        upcall_done(p, cJSON_GetStringValue(decoded)); /* (as an answer, or not: either way) */
                return;
        }
        if (m->kind != JSONRPC_REQUEST && m->kind != JSONRPC_NOTIFICATION && cJSON_IsString(m->id))
                upcall_done(p, m->id->valuestring);
        if (m->id_text)
                remember(p, m->id_text, strlen(m->id_text));
        if (m->id_text)
                count_id(p, m->id_text, false);
        if (m->kind == JSONRPC_REQUEST && (k = id_slot(p, m->id_text)) < MAX_SEEN)
                p->requests[k]++;
        if (m->id_text && m->kind != JSONRPC_RESPONSE)
                note_sub_id_reused(p, m->id_text); /* a request, or one refused under its id */
        if (m->kind == JSONRPC_REQUEST)
                note_subscribe(p, m);
        n = ids_fields(m, f, ELEMENTSOF(f));
        for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++) {
                remember(p, f[i].text, f[i].len);
                if (m->kind == JSONRPC_NOTIFICATION && f[i].kind == ID_KIND_CANCELLED &&
                    (k = id_slot(p, strndupa(f[i].text, f[i].len))) < MAX_SEEN)
                        p->cancels[k]++;
        }
}

static void note_sent(Peer *p, const char *line, size_t len) {
        fed_bytes += len;
        fed_lines++;
        harness_reading = true;
        note_sent_read(p, line, len);
        harness_reading = false;
}

/* A session with nothing in flight at the shim (none pending, queued, held, or waiting for a
 * subscription stream) has had an answer to every request it sent, but those it cancelled. */
static void check_all_answered(const Peer *p, const Client *c) {
        if (hashmap_size(&c->pending) + c->n_queued + c->n_held > 0)
                return;
        /* A resources/subscribe at a modern backend waits for its listen stream's acknowledgement. */
        if (subscribe_waiting(c))
                return;
        for (size_t i = 0; i < p->n_ids; i++)
                if (p->answered[i] + p->cancels[i] < p->requests[i]) {
                        fprintf(stderr, "id %s: %u requests, %u cancelled, %u answered, none in flight\n", p->ids[i],
                                p->requests[i], p->cancels[i], p->answered[i]);
                        FUZZ_ASSERT(!"a request never answered");
                }
}

/* Whether the shim holds uri for session c. */
static bool session_holds(const Client *c, const char *uri) {
        const cJSON *it;

        cJSON_ArrayForEach (it, c->subscriptions)
                if (streq(it->valuestring, uri))
                        return true;
        return false;
}

/* A subscription the shim granted and the session has not let go (review 9 LOW-8: a failed repeat
 * of it, or another session's traffic, takes nothing away) is still the session's at the shim: the
 * next subscriptions/listen asks for it, and its updates reach the session. */
static void check_subs_kept(const Peer *p, const Client *c) {
        for (size_t k = 0; c && k < p->n_subs; k++)
                if (p->sub_kept[k] && !session_holds(c, p->sub_uris[k])) {
                        fprintf(stderr, "the shim let go of %s, a subscription it granted the session\n",
                                p->sub_uris[k]);
                        FUZZ_ASSERT(!"a granted subscription dropped");
                }
        /* ... and one it refused or the session let go is not: no update of it reaches the session. */
        for (size_t k = 0; c && k < p->n_subs; k++)
                if (p->sub_gone[k] && session_holds(c, p->sub_uris[k])) {
                        fprintf(stderr, "the shim holds %s for the session, which it refused or let go\n",
                                p->sub_uris[k]);
                        FUZZ_ASSERT(!"a refused subscription held");
                }
}

/* What a 2026-07-28 backend's subscriptions/listen stream asks for (or took) is held by one of its
 * sessions: a refused subscribe, an unsubscribe or a session that left does not leave the backend
 * watching a URI for nobody (review 11). */
static void check_listen_held(const Shim *s) {
        /* Out of memory, a refresh may not happen: the stream asks for more until the next one. */
        for (const Instance *i = alloc_failed ? NULL : s->instances; i; i = i->next) {
                _cleanup_json_ cJSON *uris = NULL;
                const cJSON *it;

                if (i->era != BACKEND_ERA_MODERN || i->state != INSTANCE_READY || !i->listen_uris)
                        continue;
                uris = cJSON_Parse(i->listen_uris);
                FUZZ_ASSERT(uris);
                cJSON_ArrayForEach (it, uris) {
                        bool found = false;
                        for (const Client *c = s->clients; c && !found; c = c->next)
                                found = c->instance == i && session_holds(c, it->valuestring);
                        if (!found) {
                                fprintf(stderr, "the backend's stream asks for %s, which no session holds\n",
                                        it->valuestring);
                                FUZZ_ASSERT(!"the stream asks for a URI no session holds");
                        }
                }
        }
}

static bool is_integer(const char *t) {
        if (*t == '-')
                t++;
        if (!*t)
                return false;
        for (; *t; t++)
                if (*t < '0' || *t > '9')
                        return false;
        return true;
}

/* Each request of the shim's to a session that it neither answered nor was told is withdrawn is one
 * the shim still waits for: never one it forgot without a word (the session would go on asking its
 * user or its model for nobody). */
static void check_upcalls_open(const Shim *s, const Peer *p) {
        for (size_t i = 0; i < p->n_upcalls; i++)
                if (!p->upcall_done[i] && !hashmap_get(s->upcalls, p->upcalls[i])) {
                        fprintf(stderr, "request %s to a session: not answered, not withdrawn, forgotten\n",
                                p->upcalls[i]);
                        FUZZ_ASSERT(!"a request to a session forgotten without a word");
                }
}

/* The requestStates the shim handed any session in this input (a retry with one of them may need the
 * backend); states_overflow: more than we keep. */
#define MAX_STATES 64
static char *states_issued[MAX_STATES];
static size_t n_states_issued;
static bool states_overflow;

static void state_issued(const char *state) {
        if (n_states_issued == MAX_STATES) {
                states_overflow = true;
                return;
        }
        states_issued[n_states_issued] = strdup(state);
        FUZZ_ASSERT(states_issued[n_states_issued]);
        n_states_issued++;
}

static void states_reset(void) {
        for (size_t j = 0; j < n_states_issued; j++)
                free(states_issued[j]);
        n_states_issued = 0;
        states_overflow = false;
}

/* A session's request retrying with a requestState the shim's own might have made but never handed
 * anyone (made up), when the backend is not known to speak 2026-07-28 (whose states are its own). */
static bool state_made_up(const Shim *s, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        const char *state;

        if (states_overflow || s->learned_era == BACKEND_ERA_MODERN ||
            message_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m) < 0 || m->kind != JSONRPC_REQUEST)
                return false;
        state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "requestState"));
        if (!state || strncmp(state, "mcp-lazy-mrtr:", strlen("mcp-lazy-mrtr:")) != 0)
                return false;
        for (size_t j = 0; j < n_states_issued; j++)
                if (streq(states_issued[j], state))
                        return false;
        return true;
}

static void check_to_client(Peer *p, const Message *m) {
        IdField f[16];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        if (m->kind == JSONRPC_REQUEST && cJSON_IsString(m->id) && p->n_upcalls < MAX_UPCALLS) {
                p->upcalls[p->n_upcalls] = strdup(m->id->valuestring);
                FUZZ_ASSERT(p->upcalls[p->n_upcalls]);
                p->upcall_done[p->n_upcalls++] = false;
        }
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/cancelled") && message_json(m))
                upcall_done(p, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "requestId")));

        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                FUZZ_ASSERT(was_seen(p, m->id_text, strlen(m->id_text)));
        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                count_id(p, m->id_text, true);
        if (m->kind == JSONRPC_RESPONSE && m->id_text && message_json(m))
                note_subscribe_answer(p, m);
        /* An update only of a URI the session holds a subscription to, or may (its request open): from
         * a 2026-07-28 backend's stream, which the shim holds for its sessions, or from a handshake-era
         * backend, whose subscribe the shim counts as the session's when it is sent, and no longer once
         * it failed. */
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/resources/updated") &&
            message_json(m)) {
                const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
                size_t k = uri ? sub_slot(p, uri) : MAX_SUBS;
                if (k < MAX_SUBS && !p->sub_held[k] && !p->sub_open[k] && !p->sub_unknown[k]) {
                        fprintf(stderr, "an update of %s to a session that holds no subscription to it\n", uri);
                        FUZZ_ASSERT(!"an update of a URI the session is not subscribed to");
                }
        }
        if (m->kind == JSONRPC_RESPONSE && message_json(m)) {
                const char *state = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(message_json(m), "result"), "requestState"));
                if (state && strlen(state) < sizeof p->states[0]) {
                        memcpy(p->states[1], p->states[0], sizeof p->states[0]);
                        strcpy(p->states[0], state);
                }
                if (state)
                        state_issued(state);
        }
        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(strncmp(m->id_text, "\"" UPCALL_ID_PREFIX, strlen(UPCALL_ID_PREFIX) + 1) == 0);
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/progress"))
                for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++)
                        FUZZ_ASSERT(was_seen(p, f[i].text, f[i].len));
}

/* A process that died on server/discover (sent it, answered nothing, was sent nothing else, died while
 * starting) was a handshake-era server: the next process is initialized, not probed again
 * (probe_died()). Set at such a death, checked at the next process's first request. */
static bool expect_initialize_first;

/* The input's one backend instance, while it lives. */
static const Instance *the_instance;

/* A process is shown (in initialize, or server/discover's envelope) the capabilities of the pool key its
 * instance serves, or none: never a session's of another key that shares a 2026-07-28 backend. */
static void check_capabilities_shown(const Message *m) {
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m->params, "_meta");
        const cJSON *caps = streq(m->method, "initialize")
                                    ? cJSON_GetObjectItemCaseSensitive(m->params, "capabilities")
                                    : cJSON_GetObjectItemCaseSensitive(meta, "io.modelcontextprotocol/clientCapabilities");
        _cleanup_free_ char *shown = caps ? cJSON_PrintUnformatted(caps) : NULL;
        const char *key = the_instance ? strchr(the_instance->key, ' ') : NULL;
        size_t n = shown ? strlen(shown) : 0;

        if (!key || !shown || streq(shown, "{}"))
                return;
        key++;
        if (strncmp(key, shown, n) != 0 || (key[n] != 0 && key[n] != ' ')) {
                fprintf(stderr, "a backend process serving pool key '%s' was shown capabilities %s\n",
                        the_instance->key, shown);
                FUZZ_ASSERT(!"a backend shown another pool key's capabilities");
        }
}

static void check_to_backend(Peer *k, const Message *m) {
        IdField f[16];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        if (m->kind == JSONRPC_REQUEST && (streq(m->method, "initialize") || streq(m->method, "server/discover")) &&
            message_json(m))
                check_capabilities_shown(m);
        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(is_integer(m->id_text));
        if (m->kind == JSONRPC_REQUEST && current.pid > 0) {
                if (!current.first_request_seen && expect_initialize_first) {
                        if (!streq(m->method, "initialize"))
                                fprintf(stderr, "a process died on server/discover; the next one was sent %s\n",
                                        m->method);
                        FUZZ_ASSERT(streq(m->method, "initialize"));
                        expect_initialize_first = false;
                }
                current.first_request_seen = true;
                current.got_discover |= streq(m->method, "server/discover");
                current.got_initialize |= streq(m->method, "initialize");
        }
        if (m->kind == JSONRPC_REQUEST)
                backend_subs_sent(m);
        if (m->kind == JSONRPC_RESPONSE && m->id_text)
                FUZZ_ASSERT(was_seen(k, m->id_text, strlen(m->id_text)));
        if (m->kind == JSONRPC_NOTIFICATION && streq(m->method, "notifications/cancelled"))
                for (size_t i = 0; i < n && i < ELEMENTSOF(f); i++)
                        FUZZ_ASSERT(f[i].kind != ID_KIND_CANCELLED || is_integer(strndupa(f[i].text, f[i].len)));
}

static const Peer *trace_a;

/* Reads what the shim wrote to this peer and checks each line. */
static void drain_read(Peer *p, bool backend) {
        for (;;) {
                ssize_t r = read(p->fd, p->buf + p->len, sizeof p->buf - p->len);
                char *nl;

                if (r <= 0)
                        break;
                p->len += (size_t) r;
                while ((nl = memchr(p->buf, '\n', p->len))) {
                        size_t l = (size_t) (nl - p->buf);
                        _cleanup_message_ Message *m = NULL;

                        /* FUZZ_SHIM_TRACE=1: what the shim wrote to whom, for reading a seed's course. */
                        if (getenv("FUZZ_SHIM_TRACE"))
                                fprintf(stderr, "to %s: %.*s\n",
                                        backend        ? "backend"
                                        : p == trace_a ? "a"
                                                       : "b",
                                        (int) l, p->buf);

                        /* What goes on was checked: it parses, and is a valid message. */
                        FUZZ_ASSERT(message_parse(p->buf, l, JSONRPC_DEFAULT_MAX_DEPTH + 2, &m) == 0);
                        FUZZ_ASSERT(m->kind != JSONRPC_INVALID);
                        if (backend)
                                check_to_backend(p, m);
                        else
                                check_to_client(p, m);
                        memmove(p->buf, nl + 1, p->len - l - 1);
                        p->len -= l + 1;
                }
                if (p->len == sizeof p->buf)
                        p->len = 0; /* a line longer than we keep: skip it */
        }
}

static void drain(Peer *p, bool backend) {
        harness_reading = true;
        drain_read(p, backend);
        harness_reading = false;
}

/* What a started backend writes to its stdout (a line, or with "P" bytes without their newline): what
 * the shim does not read at once waits. Meanwhile the backend reads its stdin, unless it is wedged. */
static bool k_wedged;
static char *k_partial; /* what "P" lines wrote since the last newline: the next line's beginning */
static size_t k_partial_len;

static void backend_write(Peer *k, sd_event *e, const char *text, size_t len, bool newline) {
        struct iovec iov[2] = {{(void *) text, len}, {(void *) "\n", newline}};
        size_t left = len + newline;

        if (newline && current.pid > 0)
                current.lines_out++;

        for (int tries = 0; left > 0 && tries < 64; tries++) {
                ssize_t n = writev(started_out, iov, 2);
                if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return; /* the shim closed it */
                if (n > 0) {
                        left -= (size_t) n;
                        for (unsigned j = 0; j < 2; j++) {
                                size_t d = (size_t) n < iov[j].iov_len ? (size_t) n : iov[j].iov_len;
                                iov[j].iov_base = (char *) iov[j].iov_base + d;
                                iov[j].iov_len -= d;
                                n -= (ssize_t) d;
                        }
                }
                if (!k_wedged)
                        drain(k, true);
                (void) sd_event_run(e, 0);
        }
}

static void partial_reset(void) {
        free(k_partial);
        k_partial = NULL;
        k_partial_len = 0;
}

static void on_backend_dummy(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        (void) ch, (void) ev, (void) line, (void) len, (void) error, (void) userdata;
}

static Manifest *manifest(void) {
        static Manifest *m;
        static const char text[] =
                "{\"backends\":{\"echo\":{\"command\":[\"/bin/false\"]}},"
                "\"tools\":[{\"name\":\"t\",\"backend\":\"echo\",\"input_schema\":{\"type\":\"object\"}}]}";
        char *err = NULL;

        if (!m)
                FUZZ_ASSERT(manifest_load_string(text, strlen(text), "fuzz.json", "/", &m, &err) == 0);
        return m;
}

/* The backend's timer runs out now, if it is set. */
static void timer_elapse(Instance *i) {
        if (i->timer_source && sd_event_source_get_enabled(i->timer_source, NULL) > 0)
                FUZZ_ASSERT(sd_event_source_set_time(i->timer_source, 1) >= 0);
}

/* A session: its client declared no capabilities, or with sampling, sampling (and named itself). */
static Client *connect_client(Shim *s, Peer *p, bool sampling) {
        int sv[2];
        Client *c;

        FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
        FUZZ_ASSERT(client_new(s, sv[0], false) == 0);
        p->fd = sv[1];
        c = s->clients;
        c->init_params = cJSON_Parse(sampling ? "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"sampling\":{}},"
                                                "\"clientInfo\":{\"name\":\"n\",\"version\":\"1\"}}"
                                              : "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}");
        FUZZ_ASSERT(c->init_params);
        c->era_known = true; /* a handshake-era session, unless a line "M" says otherwise */
        FUZZ_ASSERT(instance_get(s, c, &c->instance) == 0);
        return c;
}

static bool client_alive(Shim *s, Client *c) {
        for (Client *x = s->clients; x; x = x->next)
                if (x == c)
                        return true;
        return false;
}

/* Nothing waits on nothing: calls at a backend that is down (queued, or to be sent again) start the
 * next one or fail; a backend starting or stopping has its timer (init_timeout, the stop's grace). */
static void check_nothing_stuck(Shim *s) {
        for (Instance *i = s->instances; i; i = i->next) {
                int enabled = SD_EVENT_OFF;

                if (i->timer_source)
                        FUZZ_ASSERT(sd_event_source_get_enabled(i->timer_source, &enabled) >= 0);
                if (i->state == INSTANCE_DOWN && (i->queue || idmap_size(&i->routes) > 0)) {
                        fprintf(stderr, "backend down with %zu calls in flight and %s queued\n", idmap_size(&i->routes),
                                i->queue ? "some" : "none");
                        FUZZ_ASSERT(!"calls wait at a backend that is down, and nothing starts it");
                }
                if (i->state == INSTANCE_STARTING || i->state == INSTANCE_STOPPING)
                        FUZZ_ASSERT(enabled != SD_EVENT_OFF);
        }
}

/* Whether the shim closed the session (one half-closed, once it was answered): then it has had an
 * answer to every request it sent but those it cancelled, and it sends nothing more. */
static void session_closed(Shim *s, Peer *p, Client **cp) {
        if (!*cp || client_alive(s, *cp))
                return;
        *cp = NULL;
        drain(p, false);
        if (!p->half_closed)
                return;
        for (size_t i = 0; i < p->n_ids; i++)
                if (p->answered[i] + p->cancels[i] < p->requests[i]) {
                        fprintf(stderr,
                                "id %s: %u requests, %u cancelled, %u answered, and the shim closed the "
                                "half-closed session\n",
                                p->ids[i], p->requests[i], p->cancels[i], p->answered[i]);
                        FUZZ_ASSERT(!"a half-closed session closed with a request unanswered");
                }
}

/* What the harness noted of peer p forgotten: p as new, with no fd. */
static void peer_reset(Peer *p) {
        for (size_t j = 0; j < p->n_seen; j++)
                free((char *) p->seen[j]);
        for (size_t j = 0; j < p->n_ids; j++)
                free(p->ids[j]);
        for (size_t j = 0; j < p->n_upcalls; j++)
                free(p->upcalls[j]);
        for (size_t j = 0; j < p->n_subs; j++)
                free(p->sub_uris[j]);
        for (size_t j = 0; j < p->n_sub_ids; j++)
                free(p->sub_ids[j]);
        *p = (Peer){.fd = -1};
}

/* The session p/c leaves (or left by itself): a fresh session takes its letter, with nothing seen. */
static Client *replace_client(Shim *s, Peer *p, Client *c, bool was_freed, bool sampling) {
        if (!was_freed)
                client_free(c);
        safe_close(p->fd);
        peer_reset(p);
        return connect_client(s, p, sampling);
}

/* The started backend's stdin, as the harness reads it: the current process's (a start reset what the
 * last one left unread), unless the process is wedged. */
static unsigned k_starts;

static void drain_backend(Peer *k, char mode) {
        if (mode && k_starts != n_starts) {
                k_starts = n_starts;
                k->len = 0;
                k_wedged = false;
        }
        if (mode)
                k->fd = started_in;
        if (!k_wedged)
                drain(k, true);
}

/* A handshake-era backend holds what its sessions do, as far as the harness can see (backend_subs_sent(),
 * backend_subs_answered()): (a) no URI is held at the process that no session holds, with nothing of it in
 * flight there (a session that left, or let go, does not leave the backend watching for nobody); (b) each
 * URI a session holds was asked of the process, a subscribe the last it read of it (a process started
 * again is asked for what its sessions hold, granted or not: review 15). Checked while the process is
 * ready and the harness has read all the shim wrote it (none of it queued, in the pipe, or unread by a
 * wedged process), unless an allocation failed since it started (a release or a restore may not have
 * happened). */
static void check_backend_subs(const Shim *s, const Peer *k, char mode) {
        const Instance *i = the_instance;
        int unread = 0;

        if (!i || i->era != BACKEND_ERA_LEGACY || i->state != INSTANCE_READY || !i->ch || channel_write_closed(i->ch) ||
            channel_queued(i->ch) > 0 || backend_subs_unknown || alloc_failed_process)
                return;
        if (mode && (current.pid <= 0 || current.pid != i->pid || k_wedged || k_starts != n_starts || started_in < 0 ||
                     k->fd != started_in))
                return;
        if (k->fd < 0 || k->len > 0 || ioctl(k->fd, FIONREAD, &unread) < 0 || unread > 0)
                return;
        for (size_t u = 0; u < n_backend_uris; u++) {
                bool found = false;

                if (!backend_uris[u].held || backend_uris[u].open > 0)
                        continue;
                for (const Client *c = s->clients; c && !found; c = c->next)
                        found = c->instance == i && session_holds(c, backend_uris[u].uri);
                if (!found) {
                        fprintf(stderr, "the backend's process holds %s, which no session holds\n",
                                backend_uris[u].uri);
                        FUZZ_ASSERT(!"a handshake-era backend subscribed for no session");
                }
        }
        for (const Client *c = s->clients; c; c = c->next) {
                const cJSON *it;

                cJSON_ArrayForEach (it, (c->instance == i ? c->subscriptions : NULL)) {
                        size_t u;

                        for (u = 0; u < n_backend_uris; u++)
                                if (streq(backend_uris[u].uri, it->valuestring))
                                        break;
                        if (u == n_backend_uris || !backend_uris[u].last_sent_sub) {
                                fprintf(stderr, "a session holds %s, which the backend's process was %s\n",
                                        it->valuestring,
                                        u == n_backend_uris ? "never asked for" : "last told to let go");
                                FUZZ_ASSERT(!"a session's subscription not asked of a handshake-era backend");
                        }
                }
        }
}

/* "K" and "Z": the exit status a digit after the letter gives, else (-1) killed by SIGKILL. */
static int exit_status(const char *line, size_t len) {
        return len >= 2 && line[1] >= '0' && line[1] <= '9' ? line[1] - '0' : -1;
}

/* A session's line with "$S" in it: that is the requestState the shim handed this session last, "$R"
 * the one before, "$T" the one it handed the other session last ("" where there is none), so that an
 * input can retry a call for real (a state is a keyed secret no input could guess), or with an
 * earlier round's state or another session's. NULL: the line has none of them. */
static char *with_states(const Peer *p, const Peer *other, const char *line, size_t len, size_t *ret_len) {
        char *out;
        size_t n = 0;

        if (!memmem(line, len, "$S", 2) && !memmem(line, len, "$R", 2) && !memmem(line, len, "$T", 2))
                return NULL;
        out = malloc(len * sizeof p->states[0] + 1);
        FUZZ_ASSERT(out);
        for (size_t j = 0; j < len; j++) {
                const char *state = j + 1 < len && line[j] == '$' ? line[j + 1] == 'S'   ? p->states[0]
                                                                    : line[j + 1] == 'R' ? p->states[1]
                                                                    : line[j + 1] == 'T' ? other->states[0]
                                                                                         : NULL
                                                                  : NULL;
                if (!state) {
                        out[n++] = line[j];
                        continue;
                }
                memcpy(out + n, state, strlen(state));
                n += strlen(state);
                j++;
        }
        *ret_len = n;
        return out;
}

/* "U": the backend is up from the start as a process of its own, started ahead of any session
 * (instance_start_ahead()) and initialized by the harness, so that the input's lines can kill it; "V":
 * the same, a 2026-07-28 backend (it answers server/discover). */
static Instance *backend_up(Shim *s, Peer *k, sd_event *e, bool modern) {
        static const char initialized[] =
                "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":"
                "{\"tools\":{},\"prompts\":{},\"logging\":{},\"resources\":{\"subscribe\":true}},"
                "\"serverInfo\":{\"name\":\"k\",\"version\":\"1\"}}}";
        static const char discovered[] =
                "{\"jsonrpc\":\"2.0\",\"id\":-100,\"result\":{\"supportedVersions\":[\"2026-07-28\"],\"capabilities\":"
                "{\"tools\":{},\"prompts\":{},\"logging\":{},\"resources\":{\"subscribe\":true}},\"_meta\":{}}}";
        const char *answer = modern ? discovered : initialized;
        Instance *i;

        FUZZ_ASSERT(instance_start_ahead(s) == 0);
        i = s->instances;
        FUZZ_ASSERT(i && i->state == INSTANCE_STARTING);
        drain_backend(k, 'U');
        note_sent(k, answer, strlen(answer));
        backend_write(k, e, answer, strlen(answer), true);
        for (int round = 0; round < 16 && i->state != INSTANCE_READY; round++) {
                drain_backend(k, 'U');
                (void) sd_event_run(e, 0);
        }
        drain_backend(k, 'U');
        FUZZ_ASSERT(i->state == INSTANCE_READY);
        return i;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static sd_event *e;
        static Peer a, b, k;
        Shim s = {};
        Client *ca, *cb;
        Instance *i;
        char mode = size > 0 && (data[0] == 'S' || data[0] == 'D' || data[0] == 'U' || data[0] == 'V') &&
                                    (size == 1 || data[1] == '\n')
                            ? data[0]
                            : 0;
        unsigned fds_before;
        int sv[2];

        if (size > 64 * 1024)
                return 0;
        if (!e) {
                sigset_t mask;

                /* As the shim's loop does (event_new()): a write to a peer that went is EPIPE, no signal. */
                (void) signal(SIGPIPE, SIG_IGN);
                /* sd_event_add_child() wants SIGCHLD blocked, as main.c does. */
                sigemptyset(&mask);
                sigaddset(&mask, SIGCHLD);
                FUZZ_ASSERT(sigprocmask(SIG_BLOCK, &mask, NULL) == 0);
                /* Nowhere to keep a learned era (era-state.c): the target writes no files. */
                unsetenv("STATE_DIRECTORY");
                unsetenv("RUNTIME_DIRECTORY");
                unsetenv("XDG_RUNTIME_DIR");
                FUZZ_ASSERT(sd_event_new(&e) >= 0);
        }
        fds_before = count_fds();
        trace_a = &a;
        may_spawn = mode;
        n_starts = k_starts = 0;
        k_wedged = false;
        expect_initialize_first = false;
        alloc_fail_in = 0;
        alloc_failed = false;
        backend_subs_reset();
        parsed_bytes = fed_bytes = 0;
        uri_compares = fed_lines = 0;
        states_reset();
        partial_reset();
        for (Peer *p = &a; p; p = p == &a ? &b : p == &b ? &k : NULL)
                peer_reset(p);
        s.event = e;
        s.manifest = manifest();
        s.backend = &s.manifest->backends[0];
        s.upcalls = hashmap_new();
        FUZZ_ASSERT(s.upcalls);
        /* "S" (and "U"): an earlier start learned a handshake-era backend, so initialize goes first. */
        s.learned_era = mode == 'S' || mode == 'U' ? BACKEND_ERA_LEGACY : BACKEND_ERA_UNKNOWN;
        subs_by_shim = mode == 'V';
        if (mode == 'U' || mode == 'V')
                backend_up(&s, &k, e, mode == 'V');
        ca = connect_client(&s, &a, false);
        cb = connect_client(&s, &b, false);
        i = ca->instance;
        FUZZ_ASSERT(cb->instance == i);
        the_instance = i;
        if (!mode) {
                /* A backend that is up: its stdin and stdout are our socket. */
                FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
                FUZZ_ASSERT(channel_new(e, sv[0], sv[0], 0, on_backend_dummy, NULL, &i->ch) == 0);
                channel_set_backpressure(i->ch, false);
                k.fd = sv[1];
                i->state = INSTANCE_READY;
                i->era = BACKEND_ERA_LEGACY; /* a ready backend speaks an era: it answered initialize */
                i->init_result = cJSON_CreateObject();
        }

        for (size_t at = mode ? 2 : 0; at < size;) {
                const char *line = (const char *) data + at, *nl = memchr(line, '\n', size - at);
                size_t len = nl ? (size_t) (nl - line) : size - at;

                at += len + 1;
                if (len < 1)
                        continue;
                if (line[0] == 'M' && len >= 2) {
                        /* "Ma", "Mb": that session's initialize said its client speaks 2026-07-28. */
                        Client *c = line[1] == 'a' ? ca : cb;
                        if (c)
                                c->modern = true;
                        continue;
                }
                if ((line[0] == 'X' || line[0] == 'H' || line[0] == 'N') && len >= 2 &&
                    (line[1] == 'a' || line[1] == 'b')) {
                        /* "Xa", "Xb": that session leaves and a new one takes its letter; "Ha", "Hb": it
                         * hangs up and the shim finds out on its own read (review 5); "Na", "Nb": as "X",
                         * the new one's client declaring sampling, when the backend is known to speak
                         * 2026-07-28 (a session of another pool key then shares its instance). */
                        Peer *p = line[1] == 'a' ? &a : &b;
                        Client **cp = line[1] == 'a' ? &ca : &cb;
                        if (line[0] != 'H')
                                *cp = replace_client(&s, p, *cp, false,
                                                     line[0] == 'N' && s.learned_era == BACKEND_ERA_MODERN);
                        else {
                                /* The session hangs up: the shim finds out by itself. */
                                (void) shutdown(p->fd, SHUT_RDWR);
                                for (int round = 0; round < 3; round++)
                                        (void) sd_event_run(e, 0);
                                *cp = replace_client(&s, p, *cp, !client_alive(&s, *cp), false);
                        }
                        FUZZ_ASSERT((*cp)->instance == i);
                        continue;
                }
                if (line[0] == 'h' && len >= 2 && (line[1] == 'a' || line[1] == 'b')) {
                        /* "ha", "hb": that session half-closes (it sends nothing more, and reads on): the
                         * shim answers what it has in flight, then closes it. */
                        Peer *p = line[1] == 'a' ? &a : &b;
                        if ((line[1] == 'a' ? ca : cb) && !p->half_closed) {
                                FUZZ_ASSERT(shutdown(p->fd, SHUT_WR) == 0);
                                p->half_closed = true;
                        }
                } else if (line[0] == 'x' && len >= 2) {
                        /* "xa", "xb": that session leaves (its connection closed). */
                        Client **c = line[1] == 'a' ? &ca : &cb;
                        *c = client_free_counted(*c);
                } else if (line[0] == 'T')
                        timer_elapse(i);
                else if (line[0] == 'O')
                        alloc_fail_in = len >= 2 && line[1] >= '1' && line[1] <= '9' ? (unsigned) (line[1] - '0') : 1;
                else if (line[0] == 'C' && mode) {
                        /* The backend closes its stdout (what it wrote of a line is all there is). */
                        started_out = safe_close(started_out);
                        partial_reset();
                } else if (line[0] == 'I' && mode)
                        started_in = k.fd = safe_close(started_in); /* ... its stdin */
                else if (line[0] == 'W' && mode)
                        k_wedged = true; /* it reads its stdin no more: what comes stays in the pipe */
                else if (line[0] == 'G' && mode)
                        current.ignores_term = true; /* it ignores SIGTERM (and its stdin's end) */
                else if ((line[0] == 'K' || line[0] == 'Z') && mode) {
                        /* One that dies on server/discover, having answered nothing: see check_to_backend(). */
                        if (current.pid > 0 && current.got_discover && !current.got_initialize &&
                            current.lines_out == 0 && i->state == INSTANCE_STARTING)
                                expect_initialize_first = true;
                        /* The backend's process dies: "K" with its pipes (they close, what it wrote of a
                         * line is all there is, what it did not read stays unread), "Z" leaving them
                         * open (held by a child of its own, which the shim's kill of the group ends). */
                        if (line[0] == 'K') {
                                started_in = k.fd = safe_close(started_in);
                                started_out = safe_close(started_out);
                                partial_reset();
                        }
                        current_end(exit_status(line, len));
                } else if (line[0] == 'a' || line[0] == 'b') {
                        Peer *p = line[0] == 'a' ? &a : &b;
                        Client *c = line[0] == 'a' ? ca : cb;
                        size_t l = len - 1;
                        _cleanup_free_ char *retry = NULL;
                        unsigned starts;
                        bool made_up;

                        if (!c || p->half_closed)
                                continue;
                        retry = with_states(p, p == &a ? &b : &a, line + 1, len - 1, &l);
                        made_up = state_made_up(&s, retry ?: line + 1, l);
                        starts = n_starts;
                        note_sent(p, retry ?: line + 1, l);
                        client_handle_line(c, retry ?: line + 1, l);
                        /* A requestState the shim never handed out names no call of a process to come:
                         * refused without starting one. */
                        if (made_up && n_starts != starts)
                                fprintf(stderr, "a made-up requestState started the backend\n");
                        FUZZ_ASSERT(!made_up || n_starts == starts);
                } else if (!mode) {
                        note_sent(&k, line + 1, len - 1);
                        backend_subs_answered(line + 1, len - 1);
                        instance_handle_backend_line(i, line + 1, len - 1);
                } else if (started_out >= 0 && line[0] == 'P') {
                        /* "P": bytes of a line, without its newline: the next backend line ends it. */
                        char *more = realloc(k_partial, k_partial_len + len - 1 + 1);
                        FUZZ_ASSERT(more);
                        memcpy(more + k_partial_len, line + 1, len - 1);
                        k_partial = more;
                        k_partial_len += len - 1;
                        backend_write(&k, e, line + 1, len - 1, false);
                } else if (started_out >= 0) {
                        /* A started backend's line goes through its pipe, as the shim reads one (with what
                         * "P" lines began of it: one line to the shim, so noted as one). */
                        _cleanup_free_ char *whole = malloc(k_partial_len + len - 1 + 1);
                        FUZZ_ASSERT(whole);
                        memcpy(whole, k_partial ?: "", k_partial_len);
                        memcpy(whole + k_partial_len, line + 1, len - 1);
                        note_sent(&k, whole, k_partial_len + len - 1);
                        backend_subs_answered(whole, k_partial_len + len - 1);
                        partial_reset();
                        backend_write(&k, e, line + 1, len - 1, true);
                }
                for (int round = 0; round < 2; round++) {
                        drain(&a, false);
                        drain(&b, false);
                        drain_backend(&k, mode);
                        (void) sd_event_run(e, 0);
                        shim_on_update(&s);
                        session_closed(&s, &a, &ca);
                        session_closed(&s, &b, &cb);
                }
                check_subs_kept(&a, ca);
                check_subs_kept(&b, cb);
                check_listen_held(&s);
                check_backend_subs(&s, &k, mode);
        }
        /* What the last lines set going runs to its end (a death's on_child(), a restart, answers
         * written out): then every session with nothing in flight has had all its answers. */
        for (int round = 0; round < 256; round++) {
                int r;

                drain(&a, false);
                drain(&b, false);
                drain_backend(&k, mode);
                r = sd_event_run(e, 0);
                shim_on_update(&s);
                session_closed(&s, &a, &ca);
                session_closed(&s, &b, &cb);
                if (r > 0)
                        continue;
                drain(&a, false);
                drain(&b, false);
                if (ca)
                        check_all_answered(&a, ca);
                if (cb)
                        check_all_answered(&b, cb);
                if (ca)
                        check_upcalls_open(&s, &a);
                if (cb)
                        check_upcalls_open(&s, &b);
                /* A half-closed session with nothing more to come was closed (its peer waits for that). */
                FUZZ_ASSERT(!(ca && a.half_closed && client_done(ca)));
                FUZZ_ASSERT(!(cb && b.half_closed && client_done(cb)));
                if (mode)
                        check_nothing_stuck(&s);
                check_backend_subs(&s, &k, mode);
                break;
        }
        /* A stop ends its process, whether that heeds SIGTERM or not ("G"): once the stop's timers run
         * out (its stdin's grace, then SIGTERM's), it is gone. */
        for (Instance *j = s.instances; mode && j; j = j->next) {
                pid_t stopping = j->state == INSTANCE_STOPPING ? j->pid : 0;

                for (int round = 0; stopping > 0 && stopping == current.pid && round < 16; round++) {
                        timer_elapse(j);
                        drain(&a, false);
                        drain(&b, false);
                        drain_backend(&k, mode);
                        (void) sd_event_run(e, 0);
                        shim_on_update(&s);
                        session_closed(&s, &a, &ca);
                        session_closed(&s, &b, &cb);
                }
                if (stopping > 0 && stopping == current.pid)
                        fprintf(stderr, "backend process %d outlived its stop (stop stage %u)\n", (int) stopping,
                                j->stop_stage);
                FUZZ_ASSERT(stopping <= 0 || stopping != current.pid);
        }
        the_instance = NULL;
        client_free_counted(ca);
        client_free_counted(cb);
        /* What the shim parsed, the sessions' leaving included, is a bounded multiple of what it read. */
        if (parsed_bytes > 4 * fed_bytes + 65536)
                fprintf(stderr, "the shim parsed %zu bytes of JSON text, having read %zu\n", parsed_bytes, fed_bytes);
        FUZZ_ASSERT(parsed_bytes <= 4 * fed_bytes + 65536);
        if (uri_compares > 2 * SUBSCRIBE_MAX_PER_CLIENT * fed_lines)
                fprintf(stderr, "the shim compared %zu URIs on %zu lines\n", uri_compares, fed_lines);
        FUZZ_ASSERT(uri_compares <= 2 * SUBSCRIBE_MAX_PER_CLIENT * fed_lines);
        for (Instance *j = s.instances; j; j = j->next)
                j->pid = 0; /* its process is left to waiters_end_input() */
        while (s.instances)
                instance_free(s.instances);
        hashmap_free(s.upcalls);
        safe_close(a.fd);
        safe_close(b.fd);
        if (!mode)
                safe_close(k.fd);
        started_in = safe_close(started_in);
        started_out = safe_close(started_out);
        partial_reset();
        waiters_end_input();
        /* Everything the shim and the harness opened for this input is closed again. */
        FUZZ_ASSERT(count_fds() == fds_before);
        return 0;
}
