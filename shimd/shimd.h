/* mcp-lazy-shimd's objects: the Shim, its client connections, and the backend instances they share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "channel.h"
#include "file-watch.h"
#include "hashmap.h"
#include "manifest.h"
#include "message.h"

/* Connections past the manifest's max_sessions (or what the descriptor limit allows) are still
 * accepted, told why they cannot be served, and closed; this many such at once at most. */
#define SHIM_MAX_REFUSED    64U
#define SHIM_RESERVED_FDS   256U /* stdio, journal, event loop, backends' pipes, refused connections */
#define SHIM_FDS_PER_CLIENT 2U   /* the socket and its dup for the write side's epoll source */
#define CLIENT_MAX_PENDING  1024U
#define CLIENT_MAX_QUEUED   (64U * 1024U * 1024U) /* unread answers before a connection is closed */
#define INSTANCE_MAX_TASKS  65536U
#define SHIM_MAX_INSTANCES  8U /* backend processes at once: distinct client configurations, or sessions */
/* Per peer (uid) other than the shim's own user: a share of the backend slots and of memory. */
#define PEER_MAX_INSTANCES    (SHIM_MAX_INSTANCES / 2)
#define PEER_MAX_PENDING      4096U                  /* requests in flight or queued, all connections */
#define PEER_MAX_QUEUED       (256U * 1024U * 1024U) /* unread answers, all connections */
#define PEER_MAX_HELD         (256U * 1024U * 1024U) /* bytes of its requests held: queued, or kept while in flight */
#define PEER_MAX_PARTIAL      (256U * 1024U * 1024U) /* bytes of unfinished lines, all connections */
#define DRAIN_GRACE_USEC      (5ULL * 1000000ULL)
/* A changed definition that found no moment with nothing in flight this long says so in the log (the old
 * definition serves until there is one). */
#define RELOAD_WAIT_USEC      (10ULL * 1000000ULL)
/* The exit status of a shim that stopped for a changed definition and is to be started again at once
 * (lifecycle warm or resident): the unit's RestartForceExitStatus= and SuccessExitStatus= name it. */
#define SHIM_EXIT_RESTART     75
#define CLIENT_STALL_USEC     (5ULL * 1000000ULL) /* a closing connection whose peer reads nothing */
#define STOP_STDIN_GRACE_USEC (2ULL * 1000000ULL)
#define STOP_TERM_GRACE_USEC  (3ULL * 1000000ULL)
#define DRAINING_METHOD       "notifications/mcp-lazy/draining"
#define INIT_REQUEST_ID       0
#define PROBE_REQUEST_ID      (-100)               /* server/discover; the contract check uses -1 to -3 */
#define PROBE_TIMEOUT_USEC    (2ULL * 1000000ULL)  /* then initialize follows; a late answer still counts */
#define PROGRESS_TOKEN_PREFIX "mcp-lazy-progress:" /* a token of ours, where a client's was taken */
#define UPCALL_ID_PREFIX      "mcp-lazy-upcall:"
/* Sessions per peer (uid) other than root and the shim's own user: a share of max_sessions. */
#define PEER_SESSIONS_SHARE(max) ((max) - (max) / 4U)
#define ROOTS_TIMEOUT_USEC    (10ULL * 1000000ULL) /* the shim's own roots/list to a session */
#define ROOTS_MAX_BYTES       65536U               /* a session's roots, as the pool keeps them */
/* initialize of a backend started ahead of any call (lifecycle warm, resident) */
#define SHIM_AHEAD_PROTOCOL_VERSION "2025-11-25"

/* A message's method against a name: the first two bytes settle most comparisons (a request's path
 * compares its method with half a dozen names), and the rest of a name that begins alike is compared
 * here too, byte by byte: no call into libc's strcmp(), one more code page to fetch per wakeup. */
static inline bool method_is(const char *method, const char *name) {
        if (method[0] != name[0])
                return false;
        for (size_t k = 1; name[k - 1]; k++)
                if (method[k] != name[k])
                        return false;
        return true;
}

/* The same against a literal, unrolled: each byte compared with an immediate, the literal never read
 * from .rodata (a line, on a page nothing else of a request's path touches). For the one comparison
 * every call makes to its end (is it a tools/call); elsewhere the loop's few bytes of code are cheaper. */
static inline bool method_is_sized(const char *method, const char *name, size_t size) {
        if (method[0] != name[0])
                return false;
#pragma GCC unroll 16
        for (size_t k = 1; k < size; k++)
                if (method[k] != name[k])
                        return false;
        return true;
}
#define method_is_literal(method, name) method_is_sized((method), "" name "", sizeof(name))

typedef struct Shim Shim;
typedef struct Client Client;
typedef struct Instance Instance;
typedef struct QueueItem QueueItem;
typedef struct ProgressMemo ProgressMemo;
typedef struct Mrtr Mrtr;
typedef struct HeldItem HeldItem;
typedef struct SubscribeWaiter SubscribeWaiter;
typedef struct SubscribeFlight SubscribeFlight;

/* The era of MCP a backend process speaks (manifest `protocol`, or found out when it starts). */
typedef enum BackendEra {
        BACKEND_ERA_UNKNOWN,
        BACKEND_ERA_LEGACY, /* initialize first */
        BACKEND_ERA_MODERN, /* 2026-07-28: the envelope on every request */
} BackendEra;

typedef enum InstanceState {
        INSTANCE_DOWN,     /* no process (never started, stopped, or crashed) */
        INSTANCE_STARTING, /* spawned, initialize sent, requests queue up */
        INSTANCE_READY,
        INSTANCE_STOPPING, /* asked to exit; nothing new goes to it */
} InstanceState;

/* One request from a client in flight at a backend, under the backend-side id. */
/* What an answer reads comes first, the pointers to the rare parts together (read to find them empty):
 * about two 64-byte lines of it, where all of it took three. */
typedef struct Route {
        int64_t backend_id;
        Client *client;
        char *client_id;         /* the exact text of the client's id: the key in Client.pending */
        uint64_t client_id_hash; /* hashmap_hash(client_id): removing it from Client.pending hashes nothing */
        size_t client_id_len;    /* strlen(client_id): an answer's id is compared with it, not measured */
        char *sent; /* what went to the backend, for a backend that dies before reading it */
        char *own_id, *own_sent; /* room in the route's own allocation: the first client_id and sent */
        char *client_token;  /* _meta.progressToken as the client sent it, if any */
        char *backend_token; /* the token the backend got: the client's, or one of ours if that one
                              * was taken at this backend; the key in Instance.tokens */
        /* A handshake-era client's request at a modern backend (bridge.c). */
        char *request; /* as sent, for a retry with the client's answers (tools/call, prompts/get, resources/read) */
        cJSON *input_responses; /* collected while the client answers */
        char *request_state;    /* the backend's, echoed exactly */
        /* A 2026-07-28 client's call at a handshake-era backend that asked it for input (mrtr.c). */
        Mrtr *mrtr;
        bool legacy_client;
        bool is_tool_call, is_tasks_list;
        bool block;  /* a block of ROUTE_BLOCK bytes (instance.c): to the free list when it goes */
        bool resend; /* the backend died before reading it: it goes to the next one */
        Instance *instance; /* where it is in flight (a session whose roots changed has moved on) */
        const char *method; /* in the route's own allocation */
        size_t sent_len;
        uint64_t sent_end; /* its end in the backend's stdin (channel_sent_bytes()) */
        size_t request_len;
        unsigned awaiting, rounds;
        /* A resources/subscribe at a handshake-era backend: the session's count of those in flight for
         * its URI (instance.c). On the line the client's id (read by every answer) begins. */
        SubscribeFlight *sub;
        uint64_t sub_seq; /* its number among them */
} Route;

/* Instance, Client and the head of a Route are laid out by 64-byte cache line (calloc_lines()): what a
 * call's request and answer read of them comes first, in as few lines as it takes; a shim woken after
 * a slow backend finds them cold. */
struct Instance {
        /* What every call's request and answer read: */
        Shim *shim;
        Channel *ch;          /* backend stdout (in) and stdin (out) */
        IdMap routes;         /* backend id -> Route (its header here: no line of its own to read) */
        QueueItem *queue;     /* requests waiting for READY, oldest first */
        Instance *next;
        int64_t next_id;
        /* A modern backend's subscriptions/listen for its sessions' resources/subscribe (subscribe.c) */
        int64_t listen_id;  /* the stream's request id; 0: none open */
        int64_t listen_old; /* the one it replaces, cancelled once the new one is acknowledged */
        InstanceState state;
        BackendEra era;
        bool answered;       /* answered a call since it started: it works */
        bool session_owned;  /* sharing: session; ends with its client */
        bool unclaimed;      /* started ahead of any call; the first session takes it */
        bool broken;         /* closed its stdout or spoke nonsense: its exit counts as a crash */
        bool listen_acked;
        bool probing;        /* server/discover sent, no verdict yet (initialize not sent) */
        bool probe_pending;  /* server/discover not answered yet (also after initialize followed) */
        bool era_assumed;    /* initialize sent unprobed, as the era learned before says (era-state.c) */
        /* The rest: */
        char *key; /* pool key: protocol version + client capabilities (+ roots, roots.c) */
        cJSON *roots; /* what its sessions answered to roots/list ({"result":...} or {"error":...}) */
        pid_t pid;
        sd_event_source *child_source, *timer_source;
        cJSON *init_result;  /* the backend's initialize result, handed to later sessions; for a modern
                              * backend its DiscoverResult */
        cJSON *init_params;  /* the initialize params it was started with (for the probe's fallback
                              * and a resident backend's restart) */
        cJSON *late_discover; /* a DiscoverResult that came after initialize was sent */
        Hashmap *tokens;      /* progress token text the backend got -> Route */
        Hashmap *tasks;       /* task id text (the backend's) -> Client whose call created it */
        /* clients' tokens this backend has had (progress.c) */
        ProgressMemo *progress;
        unsigned n_clients; /* clients attached */
        unsigned crashes;   /* consecutive unexpected exits */
        uint64_t started_usec, retry_after_usec;
        uid_t owner_uid;     /* the peer whose client configuration started it */
        char *last_exit;     /* "exited with status 1", "killed by signal 9" */
        unsigned stop_stage; /* 0: stdin closed, 1: SIGTERM sent, 2: SIGKILL sent */
        char *listen_uris;         /* what it asked for (printed array) */
        Hashmap *listen_honoured;  /* what its acknowledgement took (URIs, a set); NULL: not known */
        SubscribeWaiter *waiters;  /* resources/subscribe requests waiting for the acknowledgement */
        /* URI (owned) -> how many of its sessions hold it ((uintptr_t) value): each URI of a session's
         * subscriptions counts once at the session's instance (subscribe_track(), subscribe_leave()). */
        Hashmap *held;
        /* A handshake-era backend's subscribes of subscribe_restore(): their ids, which of them were
         * answered (a bit each; NULL: none waits), how many wait, how many were sent and refused, and the
         * first refusal ("URI: its error", printable). */
        int64_t restore_first, restore_last;
        uint8_t *restore_answered;
        size_t restore_pending, restore_sent, restore_refused;
        char *restore_error;
        uint64_t held_gen, restore_gen; /* changes of held's keys: now, and at the restore */
};

struct Client {
        /* What every call's request and answer read (the first 64-byte line): */
        Shim *shim;
        Channel *ch;
        Instance *instance;
        Hashmap pending;    /* client id text -> Route (owned by the instance's routes). The keys are the
                             * routes' own client_id strings (hashmap_init_borrowed()): a route's new id is
                             * put, and its old one removed, before the old string is freed. Its header
                             * here, on this line: not a line of its own to read. */
        cJSON *init_params; /* the client's initialize params */
        uid_t uid;          /* the peer's credentials (SO_PEERCRED) */
        bool modern;        /* a 2026-07-28 client, as its initialize said (mrtr.c): it takes no requests */
        /* Bits, to keep this line to 64 bytes: */
        bool overflow : 1;   /* stopped reading its answers: to be closed */
        bool over_limit : 1; /* past the session limit: every request gets why, then it is closed */
        bool over_share : 1; /* ...because its uid holds its share of the sessions already */
        bool eof : 1;
        bool era_known : 1; /* modern is settled: said, or (said nothing) its first request or our first ask */
        /* The rest: */
        unsigned n_queued; /* requests waiting for the backend to be ready */
        uint64_t serial;
        pid_t pid;
        cJSON *subscriptions; /* resource URIs this connection subscribed to (array of strings) */
        Hashmap *subscribes;  /* URI -> SubscribeFlight: its resources/subscribe requests in flight at a
                               * handshake-era backend (instance.c); NULL until the first */
        char *log_level;      /* logging/setLevel's, at a modern backend (subscribe.c) */
        char *refused;        /* why initialize found no backend for it, told to each later call */
        size_t partial_seen;  /* its unfinished line's length when last weighed (client.c) */
        cJSON *mrtr_ended; /* requestState -> what its retry gets: calls that ended while their retry was awaited */
        /* roots.c: a session pooled by its roots is asked for them before it gets a backend */
        HeldItem *held;      /* what it sent meanwhile */
        unsigned n_held;
        Message *held_init;  /* its initialize */
        sd_event_source *roots_timer;
        bool roots_asking, roots_stale;
        cJSON *roots; /* its answer, as the pool keeps it */
        char *roots_key;
        Client *next;
};

/* The first 64-byte line is what a call's request and answer read (main.c keeps the one Shim on one). */
struct Shim {
        sd_event *event;
        const Backend *backend;
        Client *clients;
        Instance *instances;
        uint64_t calls_served;
        unsigned n_clients;
        uid_t own_uid; /* peers of this uid are the shim's own user: no per-peer shares */
        bool draining, inetd;
        bool reload_pending; /* the definition changed: the shim stops as soon as nothing is in flight */
        /* The rest: */
        Manifest *manifest;
        const char *manifest_path, *name; /* --manifest, and the backend's name: reload.c reads them again */
        FileWatch *watch;                 /* the manifest's */
        sd_event_source *reload_source;   /* RELOAD_WAIT_USEC after the change: says why it still runs */
        bool restart; /* exit with SHIM_EXIT_RESTART: the unit starts the shim again (warm, resident) */
        sd_event_source **listeners;
        size_t n_listeners;
        unsigned n_over_limit;
        unsigned max_clients; /* the manifest's max_sessions, or fewer if the descriptor limit says so */
        bool fd_bound;        /* max_clients comes from the descriptor limit */
        sd_event_source *accept_retry_source;
        sd_event_source *idle_source, *drain_source;
        Hashmap *upcalls; /* id given to a client -> Upcall (a backend's request to a client) */
        uint64_t next_upcall;
        BackendEra learned_era; /* what the last backend process turned out to be */
        size_t max_line;        /* --max-line-bytes */
        uint64_t next_client_serial;
        uint64_t last_call_usec; /* when the last call was answered (CLOCK_MONOTONIC), 0: none; the status */
        uint64_t calls_noted;    /* line notes it (main.c), with calls_served as it was then */
        char last_status[384];
        char contract[3][96]; /* per list: "" when it matches the manifest */
        bool contract_checked;
};

/* upcalls.c: requests from a backend to a client (sampling, elicitation, roots), answered back */
void upcall_forward(Instance *i, const Message *m);
/* A response from a client: true if it answered one of our upcalls. */
bool upcall_answer(Client *c, const Message *m);
/* The client's answer to one (our id, parsed) could not be taken: the backend gets an error saying why.
 * False if not an upcall of this client's. */
bool upcall_fail(Client *c, const cJSON *id, const char *text);
void upcall_forget_client(Shim *s, Client *c);
void upcall_forget_instance(Shim *s, Instance *i);
/* The backend cancelled one of its requests: tell the client it went to. */
void upcall_cancelled(Instance *i, const Message *m);

/* Where a function has a guard that the usual (plain) call fails, the guard is an inline wrapper here and
 * the body, NAME_internal(), is out of line: a plain call's path makes no call into bridge.c, mrtr.c or
 * subscribe.c, and its call sites stay plain calls. */

/* bridge.c: the backend's era, and what the shim translates for clients of the other era */
enum { BRIDGE_PASS, BRIDGE_SENT, BRIDGE_CONTINUES };
/* The first request to a new backend process: server/discover (sets i->probing), or initialize. */
cJSON *bridge_first_request_new(Instance *i, const cJSON *init_params);
cJSON *bridge_initialize_request_new(const cJSON *init_params);
/* The answer to server/discover: BACKEND_ERA_MODERN or _LEGACY, or -EPROTO with text saying why not. */
int bridge_probe_verdict(Instance *i, const cJSON *msg, char *text, size_t size);
/* A modern backend's answer to a handshake-era client's initialize. */
cJSON *bridge_initialize_result_new(const Instance *i, const cJSON *init_params);
/* params for the shim's own requests (the contract check): the envelope for a modern backend. */
cJSON *bridge_contract_params(const Instance *i);
/* r->sent on its way to a modern backend: a handshake-era client's request gets its envelope. */
int bridge_prepare_request_internal(Instance *i, Client *c, Route *r, const Message *m);
static inline int bridge_prepare_request(Instance *i, Client *c, Route *r, const Message *m) {
        return i->era == BACKEND_ERA_MODERN ? bridge_prepare_request_internal(i, c, r, m) : 0;
}
/* The backend answered r: BRIDGE_PASS (send it on as it is), BRIDGE_SENT (an adapted answer went to
 * the client), BRIDGE_CONTINUES (input_required: the client is asked, the request retried). */
int bridge_response_internal(Instance *i, Route *r, const Message *m);
static inline int bridge_response(Instance *i, Route *r, const Message *m) {
        /* The usual answer, read envelope-only: nothing to look up in a tree. */
        return r->legacy_client ? bridge_response_internal(i, r, m) : BRIDGE_PASS;
}
/* The client answered one input request of a bridged call. */
/* result_text: the client's result as it wrote it (NULL: none, or not found). */
void bridge_input_answer(Instance *i, int64_t route_id, const char *input_key, const cJSON *msg,
                         const char *result_text);
/* The bridged call ended (cancelled, failed): its input requests still at the client are withdrawn. */
void bridge_route_gone_internal(Instance *i, Route *r);
static inline void bridge_route_gone(Instance *i, Route *r) {
        if (r->legacy_client && r->awaiting > 0)
                bridge_route_gone_internal(i, r);
}
/* upcalls.c: the input requests of a bridged call still at its client, withdrawn with a cancellation. */
void upcall_withdraw_bridged(Instance *i, int64_t route_id, const char *reason);
/* upcalls.c: an input request of a bridged call, sent to the call's client. */
int upcall_bridge(Instance *i, Route *r, const char *input_key, const char *method, const char *params_text);

/* progress.c */
/* A client's token the backend got as it is, now that its call ended: never handed on again as it is. */
void progress_token_ended(Instance *i, const char *token);
bool progress_token_used(const Instance *i, const char *token);
void progress_memo_free(Instance *i);
/* notifications/progress from a client: on to the backend whose open request to c has that token. */
void client_progress(Client *c, const Message *m);
/* upcalls.c: the backend whose open request to c carries this progress token (its text), if any. */
Instance *upcall_progress_target(Client *c, const char *text, size_t len);

/* roots.c */
/* The client declares roots and its backend is pooled with other sessions: roots are part of its key. */
bool roots_pooled(const Client *c);
bool roots_pending(const Client *c);
/* Holds a message until the session's roots are known. */
int roots_hold(Client *c, Message *m);
/* initialize of such a session: held, and its roots asked for. */
void roots_begin(Client *c, Message *init);
/* A 2026-07-28 session that declares roots at such a backend: the roots part of its pool key, which
 * sets it apart from the sessions that were asked (-ENOMEM only). */
int roots_modern_key(Client *c);
/* A request while its roots are unknown: true if held (or answered); false: go on, it has a backend. */
bool roots_request(Client *c, Message *m);
/* Asks the client for its roots (again, after notifications/roots/list_changed). */
int roots_ask(Client *c);
void roots_answered(Client *c, const cJSON *answer);
void roots_failed(Client *c, const char *text);
/* A backend's roots/list: answered by the shim for a pooled backend (false: its one session answers). */
bool roots_answer_backend(Instance *i, const Message *m);
void roots_client_free(Client *c);
/* upcalls.c: the shim's own roots/list to a client */
int upcall_roots(Client *c);
void upcall_drop_roots(Client *c);

/* tasks.c: a shared backend's tasks/list answer with only the tasks of c (*ret NULL: all are c's). */
int tasks_list_filter(Instance *i, Client *c, const Message *m, Message **ret);
Client *instance_task_owner(Instance *i, const char *text, size_t len);

/* mrtr.c: a 2026-07-28 client's call at a handshake-era backend that asks its client for input */
/* The backend's request to a client (c: the one pick_client() found, or NULL): true if it was taken as
 * input a 2026-07-28 client's call needs (or refused, for such a client); false for the usual way. */
bool mrtr_upcall(Instance *i, Client *c, const Message *m);
/* A request carrying a requestState of ours: true if it was taken (as a retry, or refused). */
bool mrtr_retry_internal(Instance *i, Client *c, const Message *m);
static inline bool mrtr_retry(Instance *i, Client *c, const Message *m) {
        /* The scan says whether there is a params.requestState at all (the tree may not be built). */
        return message_route(m, ROUTE_PATH_REQUEST_STATE).len > 0 && mrtr_retry_internal(i, c, m);
}
/* The backend answered r while its client's retry is awaited: kept for the retry (true). */
bool mrtr_hold_answer_internal(Route *r, const Message *m);
static inline bool mrtr_hold_answer(Route *r, const Message *m) {
        return r->mrtr && mrtr_hold_answer_internal(r, m);
}
bool mrtr_parked(const Route *r);
/* Progress of r has nobody to go to: its client's retry is awaited, or the retry named no token. */
bool mrtr_progress_dropped(const Route *r);
/* A failure for a route whose retry is awaited (id_text: its key): kept for the retry (true). */
bool mrtr_failure(Client *c, const char *id_text, const char *text);
/* r is going: the backend's requests of it get errors, and a retry still to come hears how it ended. */
void mrtr_route_gone_internal(Instance *i, Route *r);
static inline void mrtr_route_gone(Instance *i, Route *r) {
        if (r->mrtr)
                mrtr_route_gone_internal(i, r);
}
/* The backend cancelled one of its requests: true if it was one waiting for a client's retry. */
bool mrtr_cancelled(Instance *i, const Message *m);
bool mrtr_request_modern(const cJSON *params);
/* A client's request that is refused here (true): a malformed 2026-07-28 envelope (-32602 naming what
 * is wrong), or, in an initialized session, a request of the other era than its initialize said
 * (-32600). */
bool mrtr_request_refused(Client *c, const Message *m);
Mrtr *mrtr_free(Mrtr *x);

/* subscribe.c: resources/subscribe and logging/setLevel of handshake-era sessions at a modern backend */
/* A request of the handshake era that the modern era removed, answered here: true if it was one. */
bool subscribe_intercept(Instance *i, Client *c, const Message *m);
/* The backend's listen stream asks for what the sessions (but except) hold now. */
int subscribe_refresh(Instance *i, const Client *except);
int subscribe_track(Client *c, const char *uri, bool sub);
/* Whether m's params.uri decodes with a NUL: the tree's string ends there, the backend reads all of it,
 * so it names no URI a session holds (or may hold: a resources/subscribe or unsubscribe with one is
 * refused, with its error sent, by subscribe_refuse_bad_uri(), true when it was one). 1 or 0, or
 * -ENOMEM (logged) when that cannot be said: then the URI names nobody either (an update reaches no
 * session, a subscribe is answered "out of memory"). */
int subscribe_uri_has_nul(const Message *m);
/* A resources/subscribe or unsubscribe whose uri has a NUL, or is longer than a session may hold
 * (SUBSCRIBE_MAX_URI_BYTES), is refused with -32602 (its error sent): true when it was one. */
bool subscribe_refuse_bad_uri(Client *c, const Message *m);
/* The backend's notification or response concerns the stream (or is a log message): true if handled. */
bool subscribe_handle_notification(Instance *i, const Message *m);
bool subscribe_handle_response_internal(Instance *i, int64_t id, const Message *m);
static inline bool subscribe_handle_response(Instance *i, int64_t id, const Message *m) {
        return id != 0 && (id == i->listen_id || id == i->listen_old) && subscribe_handle_response_internal(i, id, m);
}
/* c leaves i: what only it held goes (a 2026-07-28 backend's stream, or a handshake-era backend's own
 * subscriptions, unsubscribed there). */
void subscribe_forget_client(Instance *i, Client *c);
/* c moves from its instance to another (roots_changed()): its subscribes waiting there are answered as
 * ended, and the instance lets go of what only c held; c's subscriptions count nowhere until
 * subscribe_join() at the instance it gets. */
void subscribe_leave(Client *c);
/* c's subscriptions count at its instance: a handshake-era process is asked for each URI none of its
 * sessions held, a 2026-07-28 one's stream for what they hold now. */
void subscribe_join(Client *c);
/* How many sessions of i hold uri. */
size_t subscribe_holders(const Instance *i, const char *uri);
/* A session's resources/subscribe of uri at a handshake-era backend was cancelled, which may have taken
 * the URI from it: the backend need not heed the cancellation, so a URI no session holds now is
 * unsubscribed there, after it. */
void subscribe_cancelled(Instance *i, const char *uri);
/* i's new process is ready: the sessions' subscriptions are made again there, before anything waiting
 * for it goes on. */
void subscribe_restore(Instance *i);
/* The answer to one of subscribe_restore()'s requests at a handshake-era backend (true): an error is
 * logged. */
bool subscribe_restored(Instance *i, int64_t id, const Message *m);
/* The process is gone: subscribes waiting for it fail with text; a next one listens again. */
void subscribe_reset(Instance *i, const char *text);
/* c has a resources/subscribe waiting for the stream's acknowledgement. */
bool subscribe_waiting(const Client *c);

/* era-state.c: the era learned, kept across the shim's exits */
BackendEra era_state_load(const Shim *s);
/* The era the backend turned out to speak (BACKEND_ERA_UNKNOWN: forget it): kept for later starts. */
void shim_learn_era(Shim *s, BackendEra era);
/* The next process of the backend will speak 2026-07-28: so the manifest says, or so the last one did. */
static inline bool shim_expects_modern(const Shim *s) {
        return s->backend->protocol == PROTOCOL_MODERN || s->learned_era == BACKEND_ERA_MODERN;
}

/* contract.c: the backend's own lists against the manifest */
void contract_request(Instance *i);
bool contract_handle_response(Instance *i, int64_t id, const cJSON *msg);
void contract_summary(const Shim *s, char *buf, size_t size);

/* main.c */
void shim_update(Shim *s); /* re-evaluates idleness, status, and exit */
/* The definition the shim runs is no longer the manifest's: it stops as soon as nothing is in flight
 * (however long that takes: the log says so after RELOAD_WAIT_USEC), as an idle shim does; restart: exiting with SHIM_EXIT_RESTART. */
void shim_reload(Shim *s, bool restart);

/* reload.c */
/* Watches the manifest (and takes SIGHUP): a change of the backend's definition calls shim_reload().
 * loaded: the manifest as it was when it was read, to catch a change made since. */
int reload_setup(Shim *s, const struct stat *loaded);
void reload_done(Shim *s);
/* A call of c's came in or was answered at a ready backend, and nothing else changed: cheaper than
 * shim_update() on every message's path (no loop iteration of its own, in most cases). */
void shim_calls_changed(Shim *s, const Client *c);
unsigned shim_in_flight(const Shim *s);

/* client.c */
/* over_limit: past the session limit (answered with why, then closed). */
int client_new(Shim *s, int fd, bool over_limit);
/* Closes the oldest refused connection when SHIM_MAX_REFUSED of them wait. */
void refused_make_room(Shim *s);
/* Per-peer shares: false (with a sentence in text) when uid may not have more. */
bool peer_may_start_instance(Shim *s, uid_t uid, char *text, size_t size);
Client *client_free(Client *c);
/* A half-closed connection with nothing it asked for still to come (no call pending, queued, held, or
 * waiting for a subscription stream): it is flushed and closed. */
bool client_done(const Client *c);
void client_send(Client *c, const cJSON *m);
/* A line of a peer's bytes (a backend's message, its ids already translated). */
void client_send_text(Client *c, const char *text, size_t len);
/* The same line in parts, joined. */
void client_sendv(Client *c, const struct iovec *iov, size_t n);
void client_send_draining(Client *c);
/* One line the client sent (also the fuzz target's way in). */
void client_handle_line(Client *c, const char *line, size_t len);
void client_handle_message(Client *c, Message *m);
/* Gives the client its backend instance (its pool key's); < 0 with a sentence in text. */
int client_attach(Client *c, char *text, size_t size);
/* Leaves the client's backend instance (its calls there are cancelled). */
void client_detach(Client *c);

/* instance.c */
/* The instance a client's requests go to, found (pooled) or made on its initialize; -EUSERS when
 * SHIM_MAX_INSTANCES backends already run for other client configurations. */
int instance_get(Shim *s, Client *c, Instance **ret);
/* lifecycle warm, resident: starts a backend before any session asks. */
int instance_start_ahead(Shim *s);
/* No backend could take a new session at once (none started ahead, no pooled one), and there is room. */
bool instance_spare_needed(const Shim *s);
Instance *instance_free(Instance *i);
/* Sends a client's message to the backend, starting it or queueing until it is ready (a reference
 * to m is kept while it waits). */
void instance_submit(Instance *i, Client *c, Message *m);
/* The client is leaving: its calls are cancelled at the backend. */
void instance_forget_client(Instance *i, Client *c);
/* The client moves to another instance: its calls here finish here. */
void instance_leave(Instance *i, Client *c);
/* The pool key of a client configuration: protocol version, capabilities, and roots (NULL: none). */
char *pool_key(const cJSON *init_params, const char *roots_key);
void instance_cancel(Instance *i, Client *c, const Message *m);
/* Answers a client's request with a failure: a tool error for tools/call, else a JSON-RPC error. */
void client_fail_request(Client *c, const Message *m, const char *text);
int instance_send_text(Instance *i, const char *text, size_t len);
/* One line the backend wrote to its stdout (also the fuzz target's way in). */
void instance_handle_backend_line(Instance *i, const char *line, size_t len);
void instance_stop(Instance *i);
int instance_send(Instance *i, const cJSON *m);
Route *instance_route(Instance *i, int64_t backend_id);
/* A route under a new backend id (a retry is a new request). */
int route_retarget(Instance *i, Route *r);
/* Sends r->sent (again: a retry), and notes where it ends in the backend's stdin; when that stdin is
 * closed, nothing of it reached the backend: it waits for the next process. */
int route_send(Instance *i, Route *r);
/* Why a request could not be sent to the backend (route_send() and what prepares it), for its caller. */
const char *route_send_strerror(int k);
/* A route's client_id or sent replaced by text of the caller's, which the route takes over (the old
 * one is freed unless it lived in the route's own allocation). */
void route_set_client_id(Route *r, char *id);
void route_set_sent(Route *r, char *text, size_t len);
/* Answers the route's client with a failure, and forgets the route. */
void route_fail(Instance *i, Route *r, const char *text);
/* Forgets the route (its client was answered otherwise). */
void route_end(Instance *i, Route *r);
unsigned instance_in_flight(const Instance *i);
/* Bytes of the messages of peer uid waiting in i's queue for the backend to be ready. */
size_t instance_queued_bytes(const Instance *i, uid_t uid);
const char *shim_backend_name(const Shim *s);
