/* The frontend's objects: one Session with the client on stdio, one Upstream per backend it called. */
#pragma once

#include <stdbool.h>
#include <sys/stat.h>
#include <systemd/sd-event.h>

#include "answers.h"
#include "channel.h"
#include "file-watch.h"
#include "hashmap.h"
#include "jsonrpc.h"
#include "manifest.h"
#include "message.h"

#define SESSION_MAX_PENDING 4096U
#define SESSION_MAX_BATCH   SESSION_MAX_PENDING /* messages in one JSON-RPC batch */
/* What the first messages of a burst from the client or a shim queue goes out at once: the next
 * process (the shim, the client) starts on them on the other core while the frontend handles the rest,
 * instead of the whole window of calls waiting for each process in turn (bench section 7). */
#define SESSION_BURST_HEAD 8U
#define UPSTREAM_INIT_ID    "mcp-lazy/initialize"
#define UPSTREAM_OWN_PREFIX "mcp-lazy/"          /* ids of the frontend's own requests to shims */
#define UPCALL_PREFIX       "mcp-lazy-frontend:" /* ids of backend requests forwarded to the client */
#define DRAINING_METHOD     "notifications/mcp-lazy/draining"
/* `mcp-lazy connect NAME` could not reach the backend; its stderr says why (sysexits' EX_UNAVAILABLE). */
#define CONNECT_EXIT_UNAVAILABLE 69
#define CONNECT_ERROR_PREFIX     "mcp-lazy connect: "

typedef enum ActivationMode {
        ACTIVATION_AUTO,    /* the socket, else systemd's verdict when systemd runs, else direct */
        ACTIVATION_DIRECT,  /* the socket, else start the shim ourselves */
        ACTIVATION_SYSTEMD, /* the socket only */
} ActivationMode;

typedef struct Options {
        const char *manifest_path; /* absolute */
        const char *backend;       /* --backend: serve only this one, as itself; NULL: the whole fleet */
        const char *shimd_path;
        size_t max_line;
        ActivationMode activation;
} Options;

typedef struct Session Session;
typedef struct UpConn UpConn;
typedef struct Upstream Upstream;

/* A batch (JSON-RPC 2.0, only with 2025-03-26) answers once every member has an answer. */
typedef struct Batch {
        cJSON *responses;
        unsigned outstanding;
        bool sealed; /* all members were read */
} Batch;

/* A client request that went to a backend and awaits its response. */
/* A client's id up to this long (with its quotes) is kept in the Pending itself. */
#define PENDING_ID_INLINE 48U
#define PENDING_POOL      4U

typedef struct Pending Pending;
struct Pending {
        const char *id_text; /* the request's id as the client wrote it: the key in Session.pending */
        /* The request, kept only where its answer needs more than its id (a 2026-07-28 request:
         * modern.c), or where id_buf is too short for the id; else NULL: it is freed once it is sent,
         * and a window of calls in flight holds no message. */
        Message *request;
        Batch *batch;
        UpConn *conn;
        Upstream *upstream;
        bool is_tool_call;
        bool modern; /* the request carried the 2026-07-28 envelope */
        uint64_t hash;        /* of id_text, as the pending table hashes it */
        Pending *older, *newer; /* in Session's list of calls in flight, in the order they were sent */
        Pending *spare_next; /* kept for the next call (Session.spare_pending) */
        char id_buf[PENDING_ID_INLINE];
};

struct Session {
        /* What a call's two wakeups read (the request's routing, the calls in flight, the answer's way
         * back), first, on two lines: the Session is 64-aligned (session_new()). */
        _Alignas(64) Hashmap *pending; /* id key -> Pending */
        Pending *oldest, *newest; /* the calls in flight in the order they were sent: answers mostly
                                   * come in that order, and the oldest is found without hashing */
        Pending *spare_pending;   /* answered ones kept for the next calls (session.c) */
        Channel *client;
        const Options *options;
        Manifest *manifest; /* NULL until something needs it, when prepared answers stand in */
        Answers *answers;   /* or NULL: everything is answered from the manifest */
        char *route_tool;   /* the last tool the prepared answers routed... */
        size_t route_tool_len;
        const char *route_backend; /* ...and its backend (points into answers) */
        Upstream *last_upstream;   /* the one session_upstream() gave last */
        Hashmap *listens;   /* id key -> Listen: open subscriptions/listen streams (modern.c); NULL
                             * until the first, so that a call's wakeup reads none */
        Hashmap *upstreams; /* backend name -> Upstream, created on first use */
        unsigned n_spare_pending;
        bool batches_allowed;
        bool input_ended; /* the client closed its input: the calls in flight are answered, then we exit */
        /* The first Pendings, on the Session's own lines and page rather than wherever malloc() put
         * them (one fell across two pages): a call in flight costs no page of its own, and each is on
         * two lines of its own. Taken and given back through spare_pending like the others, never
         * freed. */
        _Alignas(64) Pending pending_pool[PENDING_POOL];
        sd_event *event;
        cJSON *client_params;   /* initialize's params, handed to each backend */
        char *protocol_version; /* negotiated */
        Hashmap *upcalls;       /* id given to the client -> Upcall */
        uint64_t next_upcall;
        uint64_t next_own_id;   /* our own requests to backends: each id used once */
        char *log_level;        /* from logging/setLevel, replayed to backends that connect later */
        Hashmap *tasks;         /* taskId -> Upstream that owns the task */
        Hashmap *sub_uris;      /* resource URI -> SubUri: what the streams subscribed at backends (modern.c) */
        FileWatch *watch;       /* the manifest's */
};

/* Whether m's id is a string: its exact text says so first, so that a numeric id (the usual one)
 * costs no call into cJSON on every call's path. */
static inline bool message_id_is_string(const Message *m) {
        return m->id_text && m->id_text[0] == '"' && cJSON_IsString(m->id);
}

/* The manifest as this frontend serves it (restricted to --backend's); errors as manifest_load_file().
 * With ret_st, also which version of the file was read (see manifest_load_file_stat()). */
int session_load_manifest(const Options *o, Manifest **ret, struct stat *ret_st, char **ret_error);
/* What the frontend serves from the start: prepared answers from the cache (*ret_manifest NULL), or
 * the manifest, with the answers prepared from it when there is a cache to keep them in. */
int answers_open(const Options *o, Manifest **ret_manifest, Answers **ret_answers, char **ret_error);
/* Takes m and a (either may be NULL, not both). */
struct Session *session_new(sd_event *e, Manifest *m, const Options *o);
void session_set_answers(Session *s, Answers *a);
/* The manifest, read now if only prepared answers were loaded; NULL (logged) if it cannot be. */
const Manifest *session_manifest(Session *s);
/* Answers m with a prepared answer (the id spliced in, the 2026-07-28 fields on a modern list
 * request): false when there is none. */
bool session_reply_answer(Session *s, Batch *batch, const Message *m, AnswerKind kind, size_t index);
/* Reads the manifest again; a valid one replaces the old and the client hears what changed. */
void session_reload(Session *s);
int session_watch_manifest(Session *s);
Session *session_free(Session *s);
int session_start(Session *s, int in_fd, int out_fd);
/* One line from the client (also the fuzz target's way in). */
void session_handle_line(Session *s, const char *line, size_t len);

/* Answers the request in flight on connection c that answer answers (its bytes go on as they are) and
 * forgets it; false when c owes no request of that id. */
bool session_complete(Session *s, const UpConn *c, const Message *answer);
/* Fail a pending request with text: a tool error for tools/call, a JSON-RPC error otherwise. */
void session_fail(Session *s, Pending *p, const char *text);
void session_send(Session *s, const cJSON *message);
void session_send_text(Session *s, const char *text, size_t len);
/* An answer to a request (takes msg): into its batch, or sent now. */
void session_reply(Session *s, Batch *batch, cJSON *msg);
/* One Upstream per backend name for the whole session, made on first use. */
Upstream *session_upstream(Session *s, const char *name);
/* Whether a change of the list of capability cap ("tools", "prompts", "resources") is announced. */
bool session_announces(const Manifest *mf, const char *cap);
/* Whether a reload that changes that list says so (a backend's recorded capabilities may say not). */
bool session_notifies(const Manifest *mf, const char *cap);
/* Whether initialize advertises capability cap. */
bool session_advertises(const Manifest *mf, const char *cap);
/* The capabilities mcp-lazy declares, for initialize or (modern) server/discover. */
cJSON *session_capabilities_new(const Manifest *mf, bool modern);
/* The results answered from the manifest (what prepared answers are printed from). */
cJSON *session_initialize_result_new(const Manifest *mf, const char *version);
cJSON *session_tools_page_new(const Manifest *mf, size_t offset);
/* resources/list and friends by offsetof(Backend, LIST), under key. */
cJSON *session_list_new(const Manifest *mf, size_t offset, const char *key);
/* One list's entries across the manifest, printed ((size_t) -1: the tools). */
char *session_surface_print(const Manifest *m, size_t offset);

/* modern.c: the 2026-07-28 era */
/* Checks a request's envelope and answers what only that era has; true when it answered. */
bool modern_intercept(Session *s, Message *m, Batch *batch);
cJSON *modern_discover_result_new(const Manifest *mf);
/* Whether the request carries the 2026-07-28 envelope. */
bool modern_request(const Message *m);
/* The request's envelope is valid and asks nothing new of the session: modern_intercept() would let it
 * pass untouched (read from the spans the scan noted, without the tree). */
bool modern_envelope_settled(const Session *s, const Message *m);
/* A list answered from the manifest: resultType, ttlMs, cacheScope and serverInfo for a modern request. */
void modern_list_result(Session *s, const Message *m, cJSON *result);
/* notifications/cancelled of a listen stream (key: its id's exact text): true if it was one (it ends). */
bool modern_cancel(Session *s, const char *key);
/* Tells the streams that asked for it. */
void modern_list_changed(Session *s, const char *method);
void modern_free(Session *s);
/* The answer to one of our own requests to a shim (a subscribe for a stream): true if it was one. */
bool modern_own_answer(Session *s, const Message *m);
/* A connection to a backend's shim was lost, or a new one made: its subscriptions go, and come back. */
void modern_upstream_lost(Session *s, const char *backend);
void modern_upstream_attached(Session *s, const char *backend);
/* notifications/resources/updated from a backend: onto the streams that listen to it; true when it
 * must not also go to the client as it is (a modern session). */
bool modern_resource_updated(Session *s, const Message *m);
/* The answer to a modern request as the 2026-07-28 era requires it: NULL when it is fine as it is (or
 * out of memory), else the changed answer (a handshake-era backend's, or an input_required asking too
 * much). The tree of answer is built only where the spans the scan noted do not settle it. */
cJSON *modern_adapt_response(const Pending *p, const Message *answer);

/* upstream.c */
/* A request of our own to backend's shim, connecting (and activating) first if need be. */
int upstream_send_own(Session *s, const char *backend, const cJSON *m);
/* To every backend this session is connected to (notifications, and requests of our own). */
void upstream_broadcast(Session *s, const cJSON *message);
void upstream_broadcast_text(Session *s, const char *text, size_t len);
/* An id for a request of our own to a backend ("mcp-lazy/WHAT:N"), never used twice. */
cJSON *upstream_own_id(Session *s, const char *what);
/* The client answered one of a backend's requests: back it goes. False if not ours. */
bool upstream_answer_upcall(Session *s, const Message *m);
/* The client's answer to one (our id, parsed) could not be taken: the backend gets an error saying why.
 * False if not ours. */
bool upstream_fail_upcall(Session *s, const cJSON *id, const char *text);
/* The client cancelled a request in flight at a backend. */
void upstream_cancel(Session *s, Pending *p, const Message *notification);
Upstream *upstream_new(Session *s, const char *name);
const char *upstream_name(const Upstream *u);
void upstream_free_upcalls(Session *s);
/* The client closed its input: every backend request waiting for it gets an error saying so. */
void upstream_fail_upcalls(Session *s);
/* The client's era changed (initialize after 2026-07-28 requests): each shim connection, opened in
 * the other era, takes no new calls; the next call opens one that says the new era. */
void upstream_era_changed(Session *s);
void upstream_set_reading(Session *s, bool b);
Upstream *upstream_free(Upstream *u);
/* Sends request (p's) to the backend, connecting (and activating) first if needed. */
void upstream_forward(Upstream *u, Pending *p, const Message *request);
/* Takes over fd, a connection to the backend's shim, as the upstream's current one (the handshake sent). */
int upstream_attach(Upstream *u, int fd);
/* One line from the upstream's current connection (also the fuzz target's way in). */
void upstream_handle_line(Upstream *u, const char *line, size_t len);
/* Forget p's slot on its connection (it was answered or is being failed). */
void upconn_release(UpConn *c);

/* activation.c */
/* Connects to the backend's shim: -errno on failure with *ret_text telling the user what to do; 1 when
 * the connect is still under way (a vsock backend: see channel_set_connecting()). */
int activation_connect(const Options *o, const Backend *b, sd_event *e, int *ret_fd, char **ret_text);
/* What a failed connect to vsock backend b (error: -errno) tells the user to do. */
char *activation_vsock_unreachable(const Backend *b, int error);
/* --activation's word: auto, direct, systemd; -EINVAL for anything else. */
int activation_mode_from_string(const char *s, ActivationMode *ret);
char *backend_socket_path(const Backend *b);

/* remote.c */
typedef struct RemoteChild RemoteChild;
/* `ssh ... HOST mcp-lazy connect NAME` on a connection of its own, for a one-off client (refresh). */
int remote_ssh_argv(const Backend *b, char ***ret);
/* `ssh ... HOST COMMAND...` for a quick look: through a master already up for that host, or a
 * connection of its own; never opens a master that stays. */
#define REMOTE_CHECK_CONNECT_TIMEOUT_SEC 5U
int remote_ssh_check_argv(const Backend *b, const char *const *command, char ***ret);
typedef void (*remote_done_t)(RemoteChild *c, void *userdata);
/* Starts `ssh HOST mcp-lazy connect NAME`: read the connection from *ret_in_fd, write it to *ret_out_fd. */
int remote_spawn(const Backend *b, sd_event *e, RemoteChild **ret_child, int *ret_in_fd, int *ret_out_fd,
                 char **ret_text);
/* The connection ended: done runs once ssh has exited and its stderr is read (killed after 5 s). */
void remote_child_wait(RemoteChild *c, remote_done_t done, void *userdata);
/* Why it ended, for the user: b may be NULL when the backend left the manifest. */
char *remote_child_explain(const RemoteChild *c, const Backend *b, const char *name, bool established);
/* The error for a line that is not JSON-RPC (line, len bytes) on ssh's stdout before the remote shim
 * answered: the remote login wrote it; what to do. NULL when out of memory. */
char *remote_login_noise_explain(const Backend *b, const char *name, const char *line, size_t len);
RemoteChild *remote_child_free(RemoteChild *c);
/* The remote answered: a master this ssh opened is up, and others may share it. */
void remote_child_established(RemoteChild *c);

/* connect.c */
int connect_main(int argc, char *argv[]);
/* activation.c: the mcp-lazy-shimd next to our binary, else "mcp-lazy-shimd" (from PATH). */
char *find_shimd(void);
