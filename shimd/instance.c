/* Backend instances: the real MCP server as a child, its handshake, request-id mapping, stop and crash. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "jsonrpc.h"
#include "log.h"
#include "peek.h"
#include "printable.h"
#include "duration.h"
#include "macros.h"
#include "process.h"
#include "shimd.h"

#ifndef MCP_LAZY_VERSION
#define MCP_LAZY_VERSION "0"
#endif

struct QueueItem {
        Client *client;
        Message *message;
        QueueItem *next;
};

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

const char *shim_backend_name(const Shim *s) {
        return s->backend->name;
}

static const char *iname(const Instance *i) {
        return i->shim->backend->name;
}

char *pool_key(const cJSON *init_params, const char *roots_key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(init_params, "protocolVersion");
        _cleanup_free_ char *caps =
                cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(init_params, "capabilities"));
        char *k = NULL;

        if (asprintf(&k, "%s %s%s", cJSON_GetStringValue(v) ?: "", caps ?: "{}", roots_key ?: "") < 0)
                return NULL;
        return k;
}

/* Makes room for one more backend: a pooled one nobody is attached to and nothing is in flight at
 * goes first. False if every one is in use. */
static bool make_room(Shim *s) {
        unsigned n = 0;

        for (Instance *i = s->instances; i; i = i->next)
                n++;
        if (n < SHIM_MAX_INSTANCES)
                return true;
        for (Instance *i = s->instances; i; i = i->next)
                if (i->n_clients == 0 && instance_in_flight(i) == 0) {
                        instance_free(i);
                        return true;
                }
        return false;
}

static Instance *instance_new(Shim *s, char *key) {
        Instance *i = calloc_lines(sizeof *i);

        if (!i)
                return NULL;
        idmap_init(&i->routes);
        i->tokens = hashmap_new();
        i->tasks = hashmap_new();
        if (!i->tokens || !i->tasks) {
                hashmap_free(i->tokens);
                hashmap_free(i->tasks);
                free(i);
                return NULL;
        }
        i->shim = s;
        i->key = key;
        i->owner_uid = s->own_uid; /* until a session claims it */
        i->next_id = INIT_REQUEST_ID + 1;
        i->next = s->instances;
        s->instances = i;
        return i;
}

/* A backend started ahead of any session (lifecycle warm or resident) goes to its first session, by
 * either loop of instance_get(): keyed by that session's client (key, taken), for when it turns out
 * handshake-era and is pooled by key (that session's next connection finds it again), counted as that
 * session's user's, and answering roots/list with that session's roots, as a backend started for it. */
static void instance_claim(Instance *i, Client *c, char *key) {
        free(i->key);
        i->key = key;
        i->unclaimed = false;
        i->owner_uid = c->uid;
        cJSON_Delete(i->roots);
        i->roots = cJSON_Duplicate(c->roots, true);
        log_info("Backend '%s' (pid %d), started ahead, serves its first session.", iname(i), (int) i->pid);
}

int instance_get(Shim *s, Client *c, Instance **ret) {
        _cleanup_free_ char *key = pool_key(c->init_params, c->roots_key);
        Instance *i;

        if (!key)
                return -ENOMEM;
        /* Pooled: one backend per distinct client version and capabilities, since a backend acts on what
         * its client declared (sampling, roots, elicitation) and must not be shown someone else's. */
        /* A modern backend reads the client's capabilities from each request instead: one serves every
         * session. */
        bool modern = shim_expects_modern(s);
        if (s->backend->sharing == SHARING_POOLED)
                for (i = s->instances; i; i = i->next)
                        if (!i->session_owned && (modern || i->era == BACKEND_ERA_MODERN || streq(i->key, key))) {
                                if (i->unclaimed)
                                        instance_claim(i, c, TAKE_PTR(key));
                                i->n_clients++;
                                *ret = i;
                                return 0;
                        }
        if (!peer_may_start_instance(s, c->uid, (char[1]){}, 1))
                return -EDQUOT;
        /* A backend started ahead of any call (lifecycle warm or resident) goes to the first session,
         * whatever its client declared: it was shown no client's capabilities, so it can use none of
         * them, and it shows this session nothing of another's. */
        for (i = s->instances; i; i = i->next)
                if (i->unclaimed) {
                        instance_claim(i, c, TAKE_PTR(key));
                        i->n_clients = 1;
                        i->session_owned = s->backend->sharing == SHARING_SESSION;
                        shim_update(s); /* resident and sharing: session: the next session's starts now */
                        *ret = i;
                        return 0;
                }
        if (!make_room(s))
                return -EUSERS;
        i = instance_new(s, key);
        if (!i)
                return -ENOMEM;
        key = NULL;
        i->roots = cJSON_Duplicate(c->roots, true);
        i->owner_uid = c->uid;
        i->n_clients = 1;
        i->session_owned = s->backend->sharing == SHARING_SESSION;
        *ret = i;
        return 0;
}

/* A route of a small request is one block of ROUTE_BLOCK bytes, and a freed one waits on a free list
 * for the next call: thousands in flight (100 sessions x 64) are answered in the order they came, in
 * bursts glibc's per-size cache (7 chunks) cannot take, and each free and malloc would go through its
 * bins. At most ROUTE_POOL_MAX wait; none under AddressSanitizer, which then sees every use after free.
 * One event loop per process: statics. */
#define ROUTE_BLOCK    512U
#define ROUTE_POOL_MAX 1024U
#define ROUTE_POOL_ON (!HAVE_ASAN)
static _hot_ void *route_pool; /* linked through each block's first word */
static _hot_ unsigned n_route_pool;

/* A block is ROUTE_BLOCK bytes from a 64-byte boundary of a malloc()'d ROUTE_BLOCK + 64, the word
 * before it the address malloc() gave: a route's head (what its answer reads) is two whole lines, not
 * parts of three (aligned_alloc() would cost more than that where the free list runs dry). */
static Route *block_new(void) {
        char *raw = malloc(ROUTE_BLOCK + 64U);
        Route *r;

        if (!raw)
                return NULL;
        r = (Route *) (((uintptr_t) raw + 64U) & ~(uintptr_t) 63U); /* at least a word past raw */
        ((void **) r)[-1] = raw;
        return r;
}

static Route *route_alloc(size_t size) {
        Route *r;

        if (size > ROUTE_BLOCK) {
                r = malloc(size);
                if (r)
                        r->block = false;
                return r;
        }
        if (route_pool) {
                r = route_pool;
                route_pool = *(void **) route_pool;
                n_route_pool--;
        } else
                r = block_new();
        if (r)
                r->block = true;
        return r;
}

static void route_release(Route *r) {
        if (ROUTE_POOL_ON && r->block && n_route_pool < ROUTE_POOL_MAX) {
                *(void **) r = route_pool;
                route_pool = r;
                n_route_pool++;
        } else
                free(r->block ? ((void **) r)[-1] : (void *) r);
}

static void route_free(Route *r) {
        if (!r)
                return;
        if (r->client_id != r->own_id)
                free(r->client_id);
        if (r->sent != r->own_sent)
                free(r->sent);
        /* What only a call with a progress token, a bridged call or a 2026-07-28 retry has: a plain
         * call's route makes no calls to free nothing. */
        if (r->client_token || r->backend_token || r->request || r->input_responses || r->request_state ||
            r->mrtr) {
                free(r->client_token);
                free(r->backend_token);
                free(r->request);
                cJSON_Delete(r->input_responses);
                free(r->request_state);
                mrtr_free(r->mrtr);
        }
        route_release(r);
}

void route_set_client_id(Route *r, char *id) {
        if (r->client_id != r->own_id)
                free(r->client_id);
        r->client_id = id;
        r->client_id_hash = hashmap_hash(id);
        r->client_id_len = strlen(id);
}

void route_set_sent(Route *r, char *text, size_t len) {
        if (r->sent != r->own_sent)
                free(r->sent);
        r->sent = text;
        r->sent_len = len;
}

/* A session's resources/subscribe requests in flight at a handshake-era backend for one URI (Client.subscribes,
 * keyed by it). A subscribe counts its URI as the session's when it is sent (forward_request()); one that ends
 * without a grant (the backend's error, ours, or a cancellation) takes away what it added, as when a
 * 2026-07-28 backend's stream does not take it (subscribe.c): no update of it reaches the session. One held
 * before the request stays held; while another subscribe of the session to that URI is in flight, that one
 * answers for it instead, and a grant of one sent after what added the URI holds it. Kept here, from the
 * request as parsed, so that the end of one is a look-up: a session may have CLIENT_MAX_PENDING of them. */
struct SubscribeFlight {
        char *uri;      /* the key */
        unsigned n;     /* in flight */
        uint64_t sent;  /* numbers the subscribes sent for it while it is here (Route.sub_seq) */
        uint64_t added; /* the number of the last that added the URI, until a later one is granted; 0: none */
};

static SubscribeFlight *subscribe_flight_free(SubscribeFlight *f) {
        if (f)
                free(f->uri);
        free(f);
        return NULL;
}

/* r, a resources/subscribe of uri that added it to the session's subscriptions (added) or found it held,
 * is in flight. */
static int subscribe_flight_start(Client *c, Route *r, const char *uri, bool added) {
        SubscribeFlight *f;

        if (!c->subscribes && !(c->subscribes = hashmap_new_borrowed()))
                return -ENOMEM;
        f = hashmap_get(c->subscribes, uri);
        if (!f) {
                f = calloc(1, sizeof *f);
                if (!f || !(f->uri = strdup(uri)) || hashmap_put(c->subscribes, f->uri, f) < 0) {
                        subscribe_flight_free(f);
                        return -ENOMEM;
                }
        }
        f->n++;
        r->sub = f;
        r->sub_seq = ++f->sent;
        if (added)
                f->added = r->sub_seq;
        return 0;
}

/* The backend granted r: the URI is held, unless a subscribe sent later (after an unsubscribe) added it. */
static void route_subscribe_granted(Route *r) {
        if (r->sub_seq >= r->sub->added)
                r->sub->added = 0;
}

/* r has ended (answered, refused or cancelled): the last of its URI's in flight lets go of what one of them
 * added and none was granted. */
static __attribute__((noinline, cold)) void route_subscribe_ended(Route *r) {
        SubscribeFlight *f = TAKE_PTR(r->sub);

        if (--f->n > 0)
                return;
        if (f->added)
                (void) subscribe_track(r->client, f->uri, false);
        hashmap_remove(r->client->subscribes, f->uri);
        subscribe_flight_free(f);
}

/* The session goes, its subscriptions with it: its subscribes in flight have nothing to undo (their routes,
 * removed first, let go of them unread: instance_forget_client()). */
static void subscribe_flights_drop(Client *c) {
        size_t state = 0;
        void *v;

        while (c->subscribes && hashmap_iterate(c->subscribes, &state, NULL, &v))
                subscribe_flight_free(v);
        c->subscribes = hashmap_free(c->subscribes);
}

/* Takes the route out of every map. */
static void route_remove(Instance *i, Route *r) {
        if (r->sub)
                route_subscribe_ended(r);
        mrtr_route_gone(i, r);
        bridge_route_gone(i, r);
        idmap_remove(&i->routes, r->backend_id);
        if (r->backend_token && hashmap_get(i->tokens, r->backend_token) == r)
                hashmap_remove(i->tokens, r->backend_token);
        if (r->backend_token && r->client_token && streq(r->backend_token, r->client_token))
                progress_token_ended(i, r->client_token);
        if (r->client)
                hashmap_remove_hashed(&r->client->pending, r->client_id, r->client_id_hash);
        route_free(r);
}

static Route *route_find(Instance *i, int64_t id) {
        return idmap_get(&i->routes, id);
}

Route *instance_route(Instance *i, int64_t backend_id) {
        return route_find(i, backend_id);
}

int route_retarget(Instance *i, Route *r) {
        int k;

        k = idmap_put(&i->routes, i->next_id, r);
        if (k < 0)
                return k;
        idmap_remove(&i->routes, r->backend_id);
        r->backend_id = i->next_id++;
        return 0;
}

static void reply_failure(Client *c, const char *id_text, bool tool_call, const char *text) {
        _cleanup_json_ cJSON *id = NULL, *m = NULL;

        if (mrtr_failure(c, id_text, text))
                return;
        id = cJSON_CreateRaw(id_text);
        if (!id)
                return;
        m = tool_call ? jsonrpc_result_new(id, tool_error_result_new(text))
                      : jsonrpc_error_new(id, JSONRPC_INTERNAL_ERROR, text);
        if (m)
                client_send(c, m);
}

void route_end(Instance *i, Route *r) {
        route_remove(i, r);
        shim_update(i->shim);
}

void route_fail(Instance *i, Route *r, const char *text) {
        if (r->client)
                reply_failure(r->client, r->client_id, r->is_tool_call, text);
        route_remove(i, r);
        shim_update(i->shim);
}

static void queue_item_free(QueueItem *q) {
        q->client->n_queued--;
        message_unref(q->message);
        free(q);
}

static void fail_everything(Instance *i, const char *text) {
        size_t state = 0;
        void *v;

        while (idmap_iterate(&i->routes, &state, NULL, &v)) {
                Route *r = v;
                if (r->client)
                        reply_failure(r->client, r->client_id, r->is_tool_call, text);
                route_remove(i, r);
        }
        while (i->queue) {
                QueueItem *q = i->queue;
                i->queue = q->next;
                client_fail_request(q->client, q->message, text);
                queue_item_free(q);
        }
        /* A half-closed session answered here may be done (client_done()): the update closes it now,
         * not when something else next asks for one. */
        shim_update(i->shim);
}

/* The backend died: the calls it can have read fail; those it never read (still queued by us, or
 * unread in its pipe) are kept for the next process, under the same ids. */
static void fail_reached(Instance *i, uint64_t delivered, const char *text) {
        size_t state = 0, held = 0, failed = 0;
        void *v;

        while (idmap_iterate(&i->routes, &state, NULL, &v)) {
                Route *r = v;
                if (r->resend || (r->sent && r->sent_end > delivered)) {
                        r->resend = true;
                        held++;
                        continue;
                }
                if (r->client)
                        reply_failure(r->client, r->client_id, r->is_tool_call, text);
                route_remove(i, r);
                failed++;
        }
        if (held + failed > 0)
                log_info("Backend '%s' had read %zu of the calls sent to it (they fail); %zu it never read go to the "
                         "next one.",
                         iname(i), failed, held);
}

static int route_compare(const void *a, const void *b) {
        const Route *x = *(Route *const *) a, *y = *(Route *const *) b;
        return x->backend_id < y->backend_id ? -1 : x->backend_id > y->backend_id;
}

/* The calls the last process never read go to this one first, in the order they were sent. */
static void resend_routes(Instance *i) {
        _cleanup_free_ Route **list = NULL;
        size_t n = 0, state = 0;
        void *v;

        list = calloc(idmap_size(&i->routes) + 1, sizeof *list);
        while (idmap_iterate(&i->routes, &state, NULL, &v))
                if (((Route *) v)->resend) {
                        if (!list) {
                                reply_failure(((Route *) v)->client, ((Route *) v)->client_id,
                                              ((Route *) v)->is_tool_call, "out of memory");
                                route_remove(i, v);
                                continue;
                        }
                        list[n++] = v;
                }
        if (n > 1)
                qsort(list, n, sizeof *list, route_compare);
        for (size_t k = 0; k < n; k++) {
                Route *r = list[k];
                r->resend = false;
                int e = route_send(i, r);
                if (e < 0) {
                        reply_failure(r->client, r->client_id, r->is_tool_call, route_send_strerror(e));
                        route_remove(i, r);
                }
        }
}

static bool instance_has_held_work(Instance *i) {
        size_t state = 0;
        void *v;

        if (i->queue)
                return true;
        while (idmap_iterate(&i->routes, &state, NULL, &v))
                if (((Route *) v)->resend)
                        return true;
        return false;
}

Instance *instance_free(Instance *i) {
        if (!i)
                return NULL;
        fail_everything(i, "mcp-lazy-shimd is shutting down");
        subscribe_reset(i, "mcp-lazy-shimd is shutting down");
        i->held = hashmap_free(i->held);
        upcall_forget_instance(i->shim, i);
        for (Instance **p = &i->shim->instances; *p; p = &(*p)->next)
                if (*p == i) {
                        *p = i->next;
                        break;
                }
        if (i->pid > 0) {
                (void) kill(-i->pid, SIGKILL);
                (void) kill(i->pid, SIGKILL);
        }
        sd_event_source_disable_unref(i->child_source);
        sd_event_source_disable_unref(i->timer_source);
        channel_free(i->ch);
        idmap_done(&i->routes);
        hashmap_free(i->tokens);
        hashmap_free(i->tasks);
        progress_memo_free(i);
        cJSON_Delete(i->init_result);
        cJSON_Delete(i->init_params);
        cJSON_Delete(i->late_discover);
        cJSON_Delete(i->roots);
        free(i->last_exit);
        free(i->key);
        free(i);
        return NULL;
}

unsigned instance_in_flight(const Instance *i) {
        unsigned n = (unsigned) idmap_size(&i->routes);
        for (QueueItem *q = i->queue; q; q = q->next)
                n++;
        return n;
}

int instance_send(Instance *i, const cJSON *m) {
        return i->ch ? channel_send_json(i->ch, m) : -ENOTCONN;
}

int instance_send_text(Instance *i, const char *text, size_t len) {
        return i->ch ? channel_send(i->ch, text, len) : -ENOTCONN;
}

static void instance_terminate(Instance *i, bool close_stdin);

/* A send the channel refuses whole (-EPIPE: the backend's stdin is closed, whether it died or not;
 * -ENOTCONN) never reached it: the backend is stopped (it is ending, or lives on without its stdin),
 * and what waits for that send waits for the next process. True when k was such a refusal. */
static bool instance_send_refused(Instance *i, int k) {
        if ((k != -EPIPE && k != -ENOTCONN) || i->state == INSTANCE_DOWN)
                return false;
        i->broken = true;
        instance_terminate(i, false);
        return true;
}

/* A route whose send was refused so waits, as a call that arrives once the backend is stopping does
 * (instance_submit()), and counts as sent. */
int route_send(Instance *i, Route *r) {
        int k = instance_send_text(i, r->sent, r->sent_len);

        if (instance_send_refused(i, k)) {
                r->resend = true;
                return 0;
        }
        if (k >= 0)
                r->sent_end = channel_sent_bytes(i->ch);
        return k;
}

const char *route_send_strerror(int k) {
        switch (k) {
        case -ENOMEM:
                return "out of memory";
        case -ENOENT:
                return "unknown task: no call of this session created it";
        case -EPIPE:
        case -ENOTCONN:
                return "the backend's stdin is closed";
        default:
                return "mcp-lazy-shimd cannot pass it on to the backend (an internal error; its log may say more)";
        }
}

/* A resources/subscribe or unsubscribe as it goes to a handshake-era backend: the session's subscriptions
 * change as it is sent, and a subscribe's route (r) counts among the session's in flight for its URI. 1: the
 * subscribe added the URI. */
static int track_subscription(Client *c, Route *r, const Message *m) {
        bool sub = method_is(m->method, "resources/subscribe");
        const cJSON *uri;
        int k, e;

        if ((!sub && !method_is(m->method, "resources/unsubscribe")) || !message_json(m))
                return 0;
        uri = cJSON_GetObjectItemCaseSensitive(m->params, "uri");
        if (!cJSON_IsString(uri))
                return 0;
        k = subscribe_track(c, uri->valuestring, sub);
        if (k < 0 || !sub || !r)
                return k;
        e = subscribe_flight_start(c, r, uri->valuestring, k > 0);
        if (e < 0 && k > 0)
                (void) subscribe_track(c, uri->valuestring, false);
        return e < 0 ? e : k;
}

static bool client_subscribed(const Client *c, const char *uri) {
        const cJSON *it;
        cJSON_ArrayForEach (it, c->subscriptions)
                if (streq(it->valuestring, uri))
                        return true;
        return false;
}

/* Task ids are the backend's, unique there, and pass as they are; but a task belongs to the session
 * whose call created it: another session's tasks/get, tasks/result or tasks/cancel of it is refused
 * as unknown, and its notifications/tasks/status go to that session only. */
static void task_record(Instance *i, const IdField *f, Client *c) {
        _cleanup_free_ char *key = strndup(f->text, f->len);

        if (!key || !c)
                return;
        if (hashmap_get(i->tasks, key))
                hashmap_remove(i->tasks, key);
        if (hashmap_size(i->tasks) < INSTANCE_MAX_TASKS)
                (void) hashmap_put(i->tasks, key, c);
}

Client *instance_task_owner(Instance *i, const char *text, size_t len) {
        _cleanup_free_ char *key = strndup(text, len);
        return key ? hashmap_get(i->tasks, key) : NULL;
}

static void instance_forget_tasks(Instance *i, Client *c) {
        size_t state = 0;
        const char *key;
        void *v;

        while (hashmap_iterate(i->tasks, &state, &key, &v))
                if (v == c)
                        hashmap_remove(i->tasks, key);
}

/* A client's message toward the backend: its request id becomes ours (no two clients' ids may
 * collide), a progress token stays the client's unless another session's active one has it, and a
 * cancellation names our id for the call it cancels. */
typedef struct ToBackend {
        Instance *i;
        Route *r;
        char id[ID_INTEGER_MAX]; /* the backend id's text, lent to the translation */
} ToBackend;

static int map_to_backend(void *userdata, const IdField *f, char **ret) {
        ToBackend *t = userdata;
        Route *r = t->r;

        switch (f->kind) {
        case ID_KIND_REQUEST:
        case ID_KIND_CANCELLED:
                if (!r)
                        return -EINVAL; /* never a client's id, unchecked, to a shared backend */
                *ret = (char *) id_integer_format(r->backend_id, t->id);
                return IDS_MAP_BORROWED;
        case ID_KIND_PROGRESS:
                if (!r || r->backend_token)
                        return 0; /* a client's own progress for a backend's request: as it is */
                r->client_token = strndup(f->text, f->len);
                if (!r->client_token)
                        return -ENOMEM;
                /* Ours look like PROGRESS_TOKEN_PREFIX: a client's that does is never passed on as it is. */
                if (id_text_canonical(f->text, f->len) &&
                    strncmp(f->text, "\"" PROGRESS_TOKEN_PREFIX, strlen(PROGRESS_TOKEN_PREFIX) + 1) != 0 &&
                    !hashmap_get(t->i->tokens, r->client_token) && !progress_token_used(t->i, r->client_token))
                        r->backend_token = strdup(r->client_token);
                else
                        r->backend_token = id_text_string(PROGRESS_TOKEN_PREFIX, (unsigned long long) r->backend_id);
                if (!r->backend_token || hashmap_put(t->i->tokens, r->backend_token, r) < 0)
                        return -ENOMEM;
                if (streq(r->backend_token, r->client_token))
                        return 0;
                *ret = r->backend_token;
                return IDS_MAP_BORROWED;
        case ID_KIND_TASK:
                /* Made by the backend, unique there: it passes as it is, to the session that owns it. */
                if (r && instance_task_owner(t->i, f->text, f->len) != r->client)
                        return -ENOENT;
                return 0;
        }
        return 0;
}

/* m as it goes to the backend (kept by the route, to be sent again to a next process): in the room
 * the route has for it, unless what the ids became is longer than that. */
static int translate_for_backend(Instance *i, Route *r, const Message *m, size_t room) {
        ToBackend t = {.i = i, .r = r};

        return ids_translate_buf(m, map_to_backend, &t, r->own_sent, room, &r->sent, &r->sent_len);
}

static int instance_sendv(void *userdata, const struct iovec *iov, size_t n) {
        Instance *i = userdata;
        return i->ch ? channel_sendv(i->ch, iov, n) : -ENOTCONN;
}

static int send_to_backend(Instance *i, Route *r, const Message *m) {
        ToBackend t = {.i = i, .r = r};

        return ids_translate_send(m, map_to_backend, &t, instance_sendv, i);
}

/* What our ids add to a request's length, in the usual case: its id as our integer, a progress token
 * of ours (a longer one gets its own allocation). */
#define ROUTE_SENT_SLACK 64U

static void forward_request(Instance *i, Client *c, const Message *m) {
        size_t method_len, id_len, room;
        bool block, is_tool_call;
        Route *r;
        int k;

        if (hashmap_size(&c->pending) >= CLIENT_MAX_PENDING)
                return client_fail_request(c, m, "too many requests in flight on this connection");
        /* One allocation holds the route, the client's id (next to the route's fields: an answer reads
         * both), the method's name and what goes to the backend (the request with our ids, which are
         * seldom much longer than the client's). */
        is_tool_call = method_is_literal(m->method, "tools/call");
        method_len = is_tool_call ? sizeof("tools/call") - 1 : short_strlen(m->method);
        id_len = message_id_len(m);
        room = m->len + ROUTE_SENT_SLACK + 1;
        r = route_alloc(sizeof *r + method_len + 1 + id_len + 1 + room);
        if (!r)
                return client_fail_request(c, m, "out of memory");
        block = r->block;
        *r = (Route){
                .block = block,
                .backend_id = i->next_id++,
                .instance = i,
                .client = c,
                .is_tool_call = is_tool_call,
        };
        /* Not for a tools/call: its method begins as "tasks/list" does, which would be read to tell. */
        r->is_tasks_list = !r->is_tool_call && method_is_literal(m->method, "tasks/list");
        r->client_id = r->own_id = memcpy((char *) (r + 1), m->id_text, id_len + 1);
        r->client_id_len = id_len;
        r->method = memcpy(r->own_id + id_len + 1, m->method, method_len + 1);
        r->own_sent = (char *) r->method + method_len + 1;
        /* From the message's text, read by the scan already: the copy was just written. */
        r->client_id_hash = hashmap_hash_len(m->id_text, id_len);
        k = hashmap_put_hashed(&c->pending, r->client_id, r->client_id_hash, r);
        if (k == -EEXIST) {
                route_free(r);
                return reply_failure(c, m->id_text, false, "request id is already used by a request still in flight");
        }
        if (k < 0 || idmap_put(&i->routes, r->backend_id, r) < 0) {
                hashmap_remove_hashed(&c->pending, r->client_id, r->client_id_hash);
                route_free(r);
                return client_fail_request(c, m, "out of memory");
        }
        k = track_subscription(c, r, m);
        if (k < 0) {
                /* Not sent untracked: the backend would grant what no update of reaches the session. */
                client_fail_request(c, m,
                                    k == -ENOBUFS ? "too many resource subscriptions on this connection (limit "
                                                    "1024); unsubscribe from one first"
                                                  : "out of memory");
                route_remove(i, r);
                return;
        }
        k = translate_for_backend(i, r, m, room);
        if (k >= 0)
                k = bridge_prepare_request(i, c, r, m);
        if (k >= 0)
                k = route_send(i, r);
        if (k < 0) {
                client_fail_request(c, m, route_send_strerror(k));
                route_remove(i, r);
        }
}

static void reply_initialize(Instance *i, Client *c, const Message *m) {
        _cleanup_json_ cJSON *r = jsonrpc_result_new(
                message_id_json(m), i->era == BACKEND_ERA_MODERN ? bridge_initialize_result_new(i, c->init_params)
                                                                 : cJSON_Duplicate(i->init_result, true));
        if (r)
                client_send(c, r);
}

/* A backend keeps one set of subscriptions for all the sessions it serves: a session's unsubscribe
 * goes to it only when no other session of it is subscribed to that URI; else it is answered here. */
static bool unsubscribe_shared(Instance *i, Client *c, const Message *m) {
        _cleanup_json_ cJSON *r = NULL;
        const char *uri;

        if (!method_is(m->method, "resources/unsubscribe") || !message_json(m))
                return false;
        uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
        if (!uri)
                return false;
        /* One look-up: whether a session other than c holds it. */
        if (subscribe_holders(i, uri) <= (size_t) client_subscribed(c, uri))
                return false;
        (void) track_subscription(c, NULL, m);
        r = jsonrpc_result_new(message_id_json(m), cJSON_CreateObject());
        if (r)
                client_send(c, r);
        return true;
}

static void deliver(Instance *i, Client *c, const Message *m) {
        /* A modern backend's bridge reads the request's params (bridge_prepare_request()): a request
         * that came without its tree (client_reads_tree()) gets it here. */
        if (i->era == BACKEND_ERA_MODERN && !message_json(m))
                return client_fail_request(c, m, "out of memory");
        if (m->kind == JSONRPC_REQUEST && method_is(m->method, "initialize"))
                reply_initialize(i, c, m);
        else if (m->kind == JSONRPC_REQUEST &&
                 (method_is(m->method, "resources/subscribe") || method_is(m->method, "resources/unsubscribe")) &&
                 subscribe_refuse_bad_uri(c, m))
                return; /* cut at its NUL it would be another session's URI; a long one is held for long */
        else if (m->kind == JSONRPC_REQUEST && i->era == BACKEND_ERA_MODERN && subscribe_intercept(i, c, m))
                return; /* gone in 2026-07-28: mapped onto what replaced it */
        else if (m->kind == JSONRPC_REQUEST && unsubscribe_shared(i, c, m))
                return;
        else if (m->kind == JSONRPC_REQUEST && mrtr_retry(i, c, m))
                return;
        else if (m->kind == JSONRPC_REQUEST)
                forward_request(i, c, m);
        else if (m->kind == JSONRPC_NOTIFICATION && i->era == BACKEND_ERA_MODERN &&
                 method_is(m->method, "notifications/roots/list_changed"))
                return; /* gone in 2026-07-28: roots come with each request that needs them */
        else if (m->kind == JSONRPC_NOTIFICATION)
                (void) send_to_backend(i, NULL, m);
}

static void flush_queue(Instance *i) {
        while (i->queue && i->state == INSTANCE_READY) {
                QueueItem *q = i->queue;
                i->queue = q->next;
                deliver(i, q->client, q->message);
                queue_item_free(q);
        }
}

static int queue_append(Instance *i, Client *c, Message *m) {
        QueueItem *q, **tail;

        if (c->n_queued + hashmap_size(&c->pending) >= CLIENT_MAX_PENDING)
                return -ENOBUFS;
        q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->message = message_ref(m);
        q->client = c;
        for (tail = &i->queue; *tail; tail = &(*tail)->next)
                ;
        *tail = q;
        c->n_queued++;
        return 0;
}

size_t instance_queued_bytes(const Instance *i, uid_t uid) {
        size_t n = 0;
        for (const QueueItem *q = i->queue; q; q = q->next)
                if (q->client->uid == uid)
                        n += q->message->len;
        return n;
}

static uint64_t backoff_usec(unsigned crashes) {
        /* The first crash restarts at once (the next call just works); a crash loop slows to 30 s. */
        if (crashes <= 1)
                return 0;
        if (crashes >= 7)
                return 30 * USEC_PER_SEC;
        return (USEC_PER_SEC / 2) << (crashes - 2);
}

static int arm_timer(Instance *i, uint64_t usec);
static void instance_terminate(Instance *i, bool close_stdin);
static int instance_spawn(Instance *i, const cJSON *init_params, char *text, size_t size);
static int instance_spawn_keyed(Instance *i, Client *c, char *text, size_t size);

static void instance_ready(Instance *i);

static void refuse_start(Instance *i, const char *text) {
        log_warning("%s", text);
        fail_everything(i, text);
        i->broken = true;
        instance_stop(i);
}

/* server/discover answered in time: a modern backend is ready, a handshake-era one gets initialize. */
static void handle_probe_response(Instance *i, const cJSON *msg) {
        _cleanup_json_ cJSON *init = NULL;
        char text[512];
        int era = bridge_probe_verdict(i, msg, text, sizeof text);

        if (era < 0)
                return refuse_start(i, text);
        i->era = era;
        shim_learn_era(i->shim, era);
        if (era == BACKEND_ERA_LEGACY) {
                /* The timer ran for server/discover: initialize gets what is left of init_timeout. */
                const uint64_t init_usec = i->shim->backend->init_timeout_usec;
                const uint64_t spent = now_usec() - i->started_usec;

                init = bridge_initialize_request_new(i->init_params);
                if (!init || instance_send(i, init) < 0)
                        return refuse_start(i, "cannot send initialize to the backend");
                if ((init_usec == USEC_INFINITY ? sd_event_source_set_enabled(i->timer_source, SD_EVENT_OFF)
                                                : arm_timer(i, init_usec > spent ? init_usec - spent : 1)) < 0)
                        refuse_start(i, "cannot arm the init_timeout timer");
                return;
        }
        i->init_result = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(msg, "result"), true);
        if (!i->init_result) {
                fail_everything(i, "out of memory");
                return instance_stop(i);
        }
        instance_ready(i);
}

/* The answer to server/discover: the verdict, or, when initialize already followed (no answer in
 * time), kept in case initialize is refused. */
static void handle_probe_answer(Instance *i, const cJSON *msg) {
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
        char text[512];

        if (i->probing)
                return handle_probe_response(i, msg);
        if (!i->probe_pending)
                return;
        if (bridge_probe_verdict(i, msg, text, sizeof text) == BACKEND_ERA_MODERN && !i->late_discover)
                i->late_discover = cJSON_Duplicate(result, true);
}

static void handle_init_response(Instance *i, const Message *m) {
        const cJSON *msg = m->json;
        const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
        _cleanup_json_ cJSON *initialized = NULL;
        char text[512];
        int k;

        if (!cJSON_IsObject(result) && i->late_discover) {
                /* It answered server/discover after all, as a modern server that refuses initialize. */
                log_info("Backend '%s' refused initialize but answered server/discover as a modern server.", iname(i));
                i->era = BACKEND_ERA_MODERN;
                shim_learn_era(i->shim, BACKEND_ERA_MODERN);
                i->init_result = TAKE_PTR(i->late_discover);
                return instance_ready(i);
        }
        if (!cJSON_IsObject(result) && i->era_assumed) {
                /* It spoke the handshake era last time, and now refuses initialize: probed again. */
                _cleanup_json_ cJSON *probe = NULL;
                log_info("Backend '%s' refused initialize, though it spoke the handshake era before: probing it "
                         "with server/discover.",
                         iname(i));
                i->era_assumed = false;
                shim_learn_era(i->shim, BACKEND_ERA_UNKNOWN);
                probe = bridge_first_request_new(i, i->init_params);
                if (probe && instance_send(i, probe) >= 0)
                        return;
        }
        if (!cJSON_IsObject(result)) {
                snprintf(text, sizeof text, "backend '%s' refused initialize: %s", iname(i),
                         cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(err, "message")) ?: "no result");
                return refuse_start(i, text);
        }
        i->init_result = cJSON_Duplicate(result, true);
        initialized = jsonrpc_notification_new("notifications/initialized", NULL);
        k = i->init_result && initialized ? instance_send(i, initialized) : -ENOMEM;
        /* Its stdin closed as it answered: what waits for it never reached it, and goes to the next
         * process once this one is gone (on_child()), as a call refused so does (route_send()). */
        if (instance_send_refused(i, k))
                return (void) log_warning(
                        "Backend '%s' (pid %d) closed its stdin before it got notifications/initialized; "
                        "stopping it, the calls that wait for it go to the next one.",
                        iname(i), (int) i->pid);
        if (k < 0) {
                fail_everything(i, route_send_strerror(k));
                return instance_stop(i);
        }
        i->era = BACKEND_ERA_LEGACY;
        instance_ready(i);
}

static void instance_ready(Instance *i) {
        i->state = INSTANCE_READY;
        sd_event_source_set_enabled(i->timer_source, SD_EVENT_OFF);
        log_info("Backend '%s' (pid %d) is ready after %llu ms.", iname(i), (int) i->pid,
                 (unsigned long long) ((now_usec() - i->started_usec) / USEC_PER_MSEC));
        /* After a restart, the sessions' subscriptions hold at the new process too: first, so that no
         * update a call that waited for it causes falls before them. */
        subscribe_restore(i);
        resend_routes(i);
        flush_queue(i);
        shim_update(i->shim); /* queued work it answered at once may leave a half-closed session done */
        contract_request(i);
}

/* The backend's message toward a client: the id it answers becomes the client's again, a progress
 * token the client's own, and a cancellation of an upcall names the id the client was given. */
static int map_to_client(void *userdata, const IdField *f, char **ret) {
        ToBackend *t = userdata; /* the same pair: this instance, this route */
        Route *r = t->r;
        const char *text = f->kind == ID_KIND_REQUEST    ? r->client_id
                           : f->kind == ID_KIND_PROGRESS ? r->client_token
                                                         : NULL;
        size_t len = f->kind == ID_KIND_REQUEST ? r->client_id_len : text ? strlen(text) : 0;

        if (f->kind == ID_KIND_TASK)
                task_record(t->i, f, r->client);
        if (!text || (len == f->len && short_memeq(text, f->text, f->len)))
                return 0;
        *ret = (char *) text; /* the route's: it outlives the translation */
        return IDS_MAP_BORROWED;
}

static int client_sendv_pieces(void *userdata, const struct iovec *iov, size_t n) {
        client_sendv(userdata, iov, n);
        return 0;
}

static void send_to_client(Instance *i, Route *r, const Message *m) {
        ToBackend t = {.i = i, .r = r};

        /* The backend's bytes and the client's ids go to the connection's queue as they are: no copy. */
        (void) ids_translate_send(m, map_to_client, &t, client_sendv_pieces, r->client);
}

/* bridge.c adapts a modern backend's answers for a handshake-era client: it reads their tree. */
static bool answer_read_by_bridge(const Instance *i, const Route *r) {
        return r && (r->legacy_client || i->era == BACKEND_ERA_MODERN);
}

/* The id of one of our requests that m answers: we only ever send integers below 2^53. */
static bool backend_id_of(const Message *m, int64_t *ret) {
        uint64_t bits;
        double d;

        if (!m->id || (m->id->type & 0xFF) != cJSON_Number) /* cJSON_IsNumber(), without a call into libcjson */
                return false;
        d = m->id->valuedouble;
        /* |d| < 2^53 (NaN and the infinities are not), asked of its exponent: compared with constants as
         * doubles, it read them from .rodata, two lines more per answer in a shim woken cache-cold. */
        memcpy(&bits, &d, sizeof bits);
        if (((bits >> 52) & 0x7ffU) >= 1023U + 53U || d != (double) (int64_t) d)
                return false;
        *ret = (int64_t) d;
        return true;
}

/* An answer that breaks the rules (duplicate keys, say) still ends its call: with an error. */
/* An answer to our initialize that cannot be used: the start fails at once saying why, as a refused
 * initialize does, rather than after init_timeout with "did not answer". True when id is initialize's
 * and initialize is what the backend was last sent. */
static bool init_answer_bad(Instance *i, int64_t id, const char *problem) {
        char text[512];

        if (id != INIT_REQUEST_ID || i->state != INSTANCE_STARTING || i->probing)
                return false;
        snprintf(text, sizeof text, "backend '%s' sent an invalid answer to initialize (%s)", iname(i), problem);
        refuse_start(i, text);
        return true;
}

static void handle_backend_invalid(Instance *i, const Message *m) {
        char text[512];
        bool method;
        int64_t id;
        Route *r;

        log_warning("Backend '%s' sent an invalid message (%s), ignoring it.", iname(i), m->problem);
        /* Keys as the scan reads them, not as cJSON's case-insensitive, NUL-cut look-up does: an answer
         * with "METHOD" or "method\u0000" is no request. */
        method = json_peek_has_key(m->text, m->len, "method");
        if (method && json_peek_has_key(m->text, m->len, "id")) {
                /* A request all the same: its sender waits for an answer, and gets why (its own id when
                 * that could be read, else null). */
                _cleanup_json_ cJSON *e = NULL;
                snprintf(text, sizeof text, "Invalid Request: %s", m->problem);
                e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_REQUEST, text);
                if (e)
                        (void) instance_send(i, e);
                return;
        }
        if (method || !backend_id_of(m, &id) || init_answer_bad(i, id, m->problem) || !(r = route_find(i, id)))
                return;
        snprintf(text, sizeof text, "backend '%s' sent an invalid answer to this call (%s)", iname(i), m->problem);
        if (r->client)
                reply_failure(r->client, r->client_id, r->is_tool_call, text);
        route_remove(i, r);
        shim_update(i->shim);
}

static void handle_backend_response(Instance *i, const Message *m) {
        Client *c;
        Route *r;
        int64_t id;

        if (!backend_id_of(m, &id))
                return;
        r = id > INIT_REQUEST_ID ? route_find(i, id) : NULL;
        /* Only the answers the shim reads itself, and a bridged call's (bridge.c), are read past their
         * envelope: a plain call's answer goes on as the backend wrote it, ids spliced in. */
        if ((id <= INIT_REQUEST_ID || answer_read_by_bridge(i, r)) && !message_json(m)) {
                log_oom();
                return;
        }
        if (id == PROBE_REQUEST_ID) {
                if (i->state == INSTANCE_STARTING)
                        handle_probe_answer(i, m->json);
                return;
        }
        if (id < 0) {
                if (contract_handle_response(i, id, m->json))
                        i->shim->contract_checked = true;
                return;
        }
        if (id == INIT_REQUEST_ID) {
                if (i->state == INSTANCE_STARTING)
                        handle_init_response(i, m);
                return;
        }
        if (subscribe_handle_response(i, id, m))
                return;
        if (!r) {
                if (subscribe_restored(i, id, m))
                        return;
                log_debug("Dropping backend '%s''s answer to request %lld (cancelled or unknown).", iname(i),
                          (long long) id);
                return;
        }
        if (mrtr_hold_answer(r, m))
                return; /* its client is away answering what the backend asked: the retry gets it */
        switch (bridge_response(i, r, m)) {
        case BRIDGE_CONTINUES:
                return; /* input the client is asked for, in its era's way; the call goes on */
        case BRIDGE_PASS:
                if (r->is_tasks_list && !i->session_owned) {
                        _cleanup_message_ Message *own = NULL;
                        /* The filter reads the tasks' tree: built here, as for a bridged answer. */
                        if (!message_json(m) || tasks_list_filter(i, r->client, m, &own) < 0)
                                reply_failure(r->client, r->client_id, false, "cannot filter tasks/list");
                        else
                                send_to_client(i, r, own ?: m);
                } else
                        send_to_client(i, r, m);
                break;
        }
        if (!i->answered) /* a phase boundary of a cold start (tests/bench/cold.mjs) */
                log_debug("Backend '%s' answered its first call.", iname(i));
        i->answered = true;
        i->shim->calls_served++;
        c = r->client;
        if (r->sub && message_route(m, ROUTE_PATH_RESULT).len > 0)
                route_subscribe_granted(r);
        route_remove(i, r);
        shim_calls_changed(i->shim, c);
}

/* Progress belongs to the session whose request carried the token, resources/updated to the
 * sessions that subscribed; anything else concerns every session the backend serves. */
static void handle_progress(Instance *i, const Message *m) {
        IdField f[2];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));
        _cleanup_free_ char *token = n == 1 ? strndup(f[0].text, f[0].len) : NULL;
        Route *r = token ? hashmap_get(i->tokens, token) : NULL;

        if (!r) {
                log_debug("Dropping backend '%s''s progress for a token of no call in flight.", iname(i));
                return; /* the call has ended: progress for it is stale */
        }
        if (mrtr_progress_dropped(r))
                return; /* it waits for its client's retry, or the retry asked for none */
        send_to_client(i, r, m);
}

static void handle_backend_notification(Instance *i, const Message *m) {
        const char *uri = NULL;

        /* The one notification read past its envelope here: whose subscription it concerns. */
        if (method_is(m->method, "notifications/resources/updated") && message_json(m) && !subscribe_uri_has_nul(m))
                uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
        if (method_is(m->method, "notifications/progress"))
                return handle_progress(i, m);
        if (i->era == BACKEND_ERA_MODERN && subscribe_handle_notification(i, m))
                return;
        if (method_is(m->method, "notifications/cancelled"))
                return upcall_cancelled(i, m);
        if (method_is(m->method, "notifications/tasks/status")) {
                IdField f[2];
                Client *owner =
                        ids_fields(m, f, ELEMENTSOF(f)) == 1 ? instance_task_owner(i, f[0].text, f[0].len) : NULL;
                if (owner)
                        client_send_text(owner, m->text, m->len);
                return;
        }
        if (method_is(m->method, "notifications/tools/list_changed") ||
            method_is(m->method, "notifications/resources/list_changed") ||
            method_is(m->method, "notifications/prompts/list_changed"))
                contract_request(i); /* and the sessions hear of it too, below */
        for (Client *c = i->shim->clients; c; c = c->next) {
                if (c->instance != i)
                        continue;
                if (method_is(m->method, "notifications/resources/updated") && (!uri || !client_subscribed(c, uri)))
                        continue;
                client_send_text(c, m->text, m->len);
        }
}

static void handle_backend_request(Instance *i, const Message *m) {
        _cleanup_json_ cJSON *reply = NULL;

        if (!message_json(m)) {
                log_oom();
                return;
        }
        if (method_is(m->method, "roots/list") && roots_answer_backend(i, m))
                return;
        if (!method_is(m->method, "ping"))
                return upcall_forward(i, m);
        reply = jsonrpc_result_new(message_id_json(m), cJSON_CreateObject());
        if (reply)
                (void) instance_send(i, reply);
}

/* A line that is not JSON (NaN, bytes that are not UTF-8, nesting past the limit): when its beginning
 * shows the id of a call and no method, that call fails saying so, rather than wait for ever. */
/* A backend's line that shows a "method" but cannot be read is a request or a notification, never an
 * answer, however its "method" reads (twice, cut off) and whatever its id (the backend's own ids may
 * look like ours): it fails no call. A request's sender is told, under the id its beginning shows,
 * rather than wait for ever. True when the line was one. */
static bool backend_unreadable_request(Instance *i, const char *line, size_t len, const char *problem) {
        _cleanup_json_ cJSON *raw = NULL, *e = NULL;
        char text[256];

        if (!json_peek_has_key(line, len, "method"))
                return false;
        raw = jsonrpc_peek_id_raw(line, len);
        log_warning("Backend '%s' sent a %s that cannot be read (%s), ignoring it.", iname(i),
                    raw ? "request" : "notification", problem);
        snprintf(text, sizeof text, "mcp-lazy-shimd cannot read this request (%s)", problem);
        e = raw ? jsonrpc_error_new(raw, JSONRPC_INVALID_REQUEST, text) : NULL;
        if (e)
                (void) instance_send(i, e);
        return true;
}

/* A backend run through ssh ([/usr/bin/]ssh ...) that is still starting: a line that is not JSON-RPC
 * on its stdout is most likely its login's (a shell startup file that prints), not the server's. */
static bool backend_login_noise(const Instance *i) {
        return i->state == INSTANCE_STARTING && i->shim->backend->command &&
               command_is_ssh(i->shim->backend->command[0]);
}

static void handle_backend_garbage(Instance *i, const char *line, size_t len, int error) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_id(line, len);
        _cleanup_free_ char *quote = NULL;
        Route *r = NULL;
        char text[512];

        if (backend_unreadable_request(i, line, len,
                                       error == -E2BIG ? "JSON nested too deeply" : "not valid UTF-8 JSON"))
                return;
        quote = text_printable_n(line, len, 80);
        log_warning("Backend '%s' wrote a line that is not JSON-RPC to stdout, ignoring it: '%s'%s", iname(i),
                    quote ?: "?",
                    backend_login_noise(i) ? SSH_LOGIN_NOISE_SUFFIX : "");
        /* jsonrpc_peek_id() gives integers below 10^15 only. */
        if (cJSON_IsNumber(id) &&
            init_answer_bad(i, (int64_t) id->valuedouble,
                            error == -E2BIG ? "JSON nested too deeply" : "a line that is not valid UTF-8 JSON"))
                return;
        if (cJSON_IsNumber(id))
                r = route_find(i, (int64_t) id->valuedouble);
        if (!r)
                return;
        snprintf(text, sizeof text, "backend '%s' answered this call with a line that is not %s", iname(i),
                 error == -E2BIG ? "JSON within the nesting limit" : "valid UTF-8 JSON");
        reply_failure(r->client, r->client_id, r->is_tool_call, text);
        route_remove(i, r);
        shim_update(i->shim);
}

void instance_handle_backend_line(Instance *i, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        int r;

        /* The envelope alone: the tree is built where something reads past it (message_json()). */
        r = message_parse_envelope(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
        if (r < 0)
                return handle_backend_garbage(i, line, len, r);
        if (m->kind == JSONRPC_RESPONSE) /* the usual one first: no jump table to read (.rodata) */
                return handle_backend_response(i, m);
        switch (m->kind) {
        case JSONRPC_RESPONSE:
                return handle_backend_response(i, m);
        case JSONRPC_NOTIFICATION:
                return handle_backend_notification(i, m);
        case JSONRPC_REQUEST:
                return handle_backend_request(i, m);
        case JSONRPC_INVALID:
                return handle_backend_invalid(i, m);
        }
}

/* A message past the line limit: the call it answers fails saying so. One that shows neither an id
 * nor a method could be any call's answer: the backend is restarted rather than leave that call
 * hanging (and the shim never idle). */
static void backend_oversize(Instance *i, const char *line, size_t len) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_id(line, len);
        Route *r = cJSON_IsNumber(id) ? route_find(i, (int64_t) id->valuedouble) : NULL;
        char text[512];

        snprintf(text, sizeof text, "longer than the %zu-byte limit", i->shim->max_line);
        if (backend_unreadable_request(i, line, len, text))
                return;
        snprintf(text, sizeof text,
                 "backend '%s' answered with a message longer than the %zu-byte limit (see --max-line-bytes "
                 "of mcp-lazy-shimd)",
                 iname(i), i->shim->max_line);
        if (r) {
                log_warning("%s", text);
                reply_failure(r->client, r->client_id, r->is_tool_call, text);
                route_remove(i, r);
                shim_update(i->shim);
                return;
        }
        if (cJSON_IsNumber(id) && id->valuedouble == INIT_REQUEST_ID && i->state == INSTANCE_STARTING) {
                log_warning("%s", text);
                fail_everything(i, text);
                i->broken = true;
                return instance_stop(i);
        }
        if (id) {
                log_warning("Backend '%s' wrote a message past the %zu-byte line limit, dropped it.", iname(i),
                            i->shim->max_line);
                return;
        }
        log_warning("Backend '%s' wrote a message past the %zu-byte line limit without an id or method in its "
                    "first bytes; restarting it.",
                    iname(i), i->shim->max_line);
        i->broken = true;
        instance_terminate(i, true);
}

static void on_backend(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Instance *i = userdata;

        (void) ch;
        switch (ev) {
        case CHANNEL_LINE:
                return instance_handle_backend_line(i, line, len);
        case CHANNEL_OVERSIZE:
                return backend_oversize(i, line, len);
        case CHANNEL_EOF:
        case CHANNEL_WRITE_ERROR:
        case CHANNEL_CLOSED:
                /* Without its pipes the backend is useless even if it lives on: stop it. */
                if (i->state != INSTANCE_STOPPING && i->state != INSTANCE_DOWN) {
                        log_warning("Backend '%s' (pid %d) closed its %s.", iname(i), (int) i->pid,
                                    ev == CHANNEL_EOF ? "stdout" : "stdin");
                        i->broken = true;
                        instance_terminate(i, false);
                }
                return;
        case CHANNEL_DRAINED:
                return;
        }
}

/* A stop is not a refusal: calls that arrived while the backend stopped, calls it died before
 * reading, and calls that waited for a start that failed start the next one at once. When it cannot
 * start (the crash-loop backoff, or an error), they fail saying why: with failed_start, the text of
 * the start they waited for. */
static void instance_restart_for_held_work(Instance *i, const char *failed_start) {
        Client *c = i->queue ? i->queue->client : NULL;
        size_t state = 0;
        void *v;
        char text[512];
        int r;

        if (!instance_has_held_work(i))
                return;
        while (!c && idmap_iterate(&i->routes, &state, NULL, &v))
                if (((Route *) v)->resend)
                        c = ((Route *) v)->client;
        if (!c)
                return fail_everything(i, failed_start ?: "the backend stopped");
        r = instance_spawn_keyed(i, c, text, sizeof text);
        if (r < 0)
                fail_everything(i, r == -EAGAIN && failed_start ? failed_start : text);
}

/* lifecycle: resident: a crashed backend starts again without waiting for a call, after the same
 * backoff a call would meet (not once its definition changed: the next shim starts it). */
static void schedule_restart(Instance *i) {
        uint64_t now = now_usec();

        if (i->shim->backend->lifecycle != LIFECYCLE_RESIDENT || i->shim->draining || i->shim->reload_pending ||
            !i->init_params)
                return;
        if (arm_timer(i, i->retry_after_usec > now ? i->retry_after_usec - now : 0) < 0)
                log_warning("Cannot schedule a restart of backend '%s'; the next call starts it.", iname(i));
}

static void instance_restart(Instance *i) {
        char text[512];
        int r;

        if (!i->init_params || i->shim->draining)
                return; /* never started: nothing to start again */
        log_info("Starting backend '%s' again (lifecycle: resident).", iname(i));
        r = instance_spawn_keyed(i, NULL, text, sizeof text);
        if (r < 0) {
                uint64_t now = now_usec();
                if (r != -EAGAIN) {
                        i->crashes++;
                        i->retry_after_usec = now + backoff_usec(i->crashes < 2 ? 2 : i->crashes);
                }
                log_warning("%s; trying again in %.1f s.", text, (double) (i->retry_after_usec - now) / USEC_PER_SEC);
                schedule_restart(i);
        }
        shim_update(i->shim);
}

/* Some handshake-era servers exit on any request before initialize: one that dies on server/discover
 * is started again and initialized, and what waits for it waits on. */
static bool probe_died(Instance *i, const char *how) {
        char text[512];

        /* Starting, or stopping since it closed its pipes: not a stop we asked for. One that answered
         * initialize (server/discover unanswered, initialize followed) did not die on server/discover:
         * its death fails or resends what it was sent, as any backend's. */
        if (!i->probe_pending || i->init_result || i->shim->backend->protocol != PROTOCOL_AUTO ||
            (i->state != INSTANCE_STARTING && !(i->state == INSTANCE_STOPPING && i->broken)))
                return false;
        uint64_t now = now_usec();

        log_info("Backend '%s' (pid %d) %s on server/discover: a handshake-era server, starting it again.", iname(i),
                 (int) i->pid, how);
        /* It counts as a failed start: one that keeps dying whatever it is sent meets the backoff. */
        i->crashes = i->answered || now - i->started_usec > 30 * USEC_PER_SEC ? 1 : i->crashes + 1;
        i->retry_after_usec = now + backoff_usec(i->crashes);
        shim_learn_era(i->shim, BACKEND_ERA_LEGACY);
        i->probing = i->probe_pending = false;
        i->late_discover = (cJSON_Delete(i->late_discover), NULL);
        i->child_source = sd_event_source_disable_unref(i->child_source);
        sd_event_source_set_enabled(i->timer_source, SD_EVENT_OFF);
        i->ch = channel_free(i->ch);
        i->pid = 0;
        i->state = INSTANCE_DOWN;
        if (instance_spawn(i, i->init_params, text, sizeof text) < 0) {
                fail_everything(i, text);
                schedule_restart(i); /* resident: after the backoff, as for any failed start */
                shim_update(i->shim);
        }
        return true;
}

static int on_child(sd_event_source *s, const siginfo_t *si, void *userdata) {
        Instance *i = userdata;
        Shim *shim = i->shim;
        bool unexpected = i->state != INSTANCE_STOPPING || i->broken;
        uint64_t now = now_usec();
        bool failed_start;
        char how[128], text[512];

        (void) s;
        /* Still a zombie here, so its process group is still its own: whatever it left behind in it
         * goes too, before anyone else could read the stdin we are about to count. */
        process_kill(i->pid, SIGKILL);
        /* What it wrote before it died is handled before its death. */
        if (i->ch)
                channel_read_all(i->ch);
        failed_start = !i->init_result;
        process_describe_exit(si, how, sizeof how);
        free(i->last_exit);
        i->last_exit = strdup(how);
        if (probe_died(i, how))
                return 0;
        if (unexpected) {
                i->crashes = i->answered || now - i->started_usec > 30 * USEC_PER_SEC ? 1 : i->crashes + 1;
                i->retry_after_usec = now + backoff_usec(i->crashes);
                log_warning("Backend '%s' (pid %d) %s.", iname(i), (int) i->pid, how);
        } else
                log_info("Backend '%s' (pid %d) stopped: %s.", iname(i), (int) i->pid, how);
        if (failed_start)
                /* What waited for this start never reached a backend: it waits for the next start
                 * (see instance_restart_for_held_work()), which the backoff allows once at once. */
                snprintf(text, sizeof text, "backend '%s' failed to start: it %s before answering initialize", iname(i),
                         how);
        else {
                snprintf(text, sizeof text, "backend '%s' %s while handling this call; the next call starts it again",
                         iname(i), how);
                fail_reached(i, i->ch ? channel_delivered_bytes(i->ch) : UINT64_MAX, text);
        }
        upcall_forget_instance(shim, i);
        subscribe_reset(i, text);

        i->child_source = sd_event_source_disable_unref(i->child_source);
        sd_event_source_set_enabled(i->timer_source, SD_EVENT_OFF);
        i->ch = channel_free(i->ch);
        i->init_result = (cJSON_Delete(i->init_result), NULL);
        i->pid = 0;
        i->state = INSTANCE_DOWN;
        i->era = BACKEND_ERA_UNKNOWN;
        i->probing = i->probe_pending = false;
        i->late_discover = (cJSON_Delete(i->late_discover), NULL);
        if (i->session_owned && i->n_clients == 0)
                instance_free(i);
        else {
                instance_restart_for_held_work(i, failed_start ? text : NULL);
                if (unexpected && i->state == INSTANCE_DOWN)
                        schedule_restart(i);
        }
        shim_update(shim);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Instance *i = userdata;
        char text[512], d[32];

        (void) s, (void) usec;
        if (i->state == INSTANCE_DOWN) {
                instance_restart(i);
                return 0;
        }
        if (i->state == INSTANCE_STARTING && i->probing && i->shim->backend->protocol == PROTOCOL_AUTO) {
                /* No answer to server/discover in time: a handshake-era server (the spec), initialized on
                 * the same pipe, within what is left of init_timeout. A late answer still counts. */
                const uint64_t init = i->shim->backend->init_timeout_usec;
                _cleanup_json_ cJSON *req = bridge_initialize_request_new(i->init_params);
                log_info("Backend '%s' did not answer server/discover within %llu ms: initializing it.", iname(i),
                         (unsigned long long) (PROBE_TIMEOUT_USEC / USEC_PER_MSEC));
                i->probing = false;
                i->era = BACKEND_ERA_LEGACY;
                /* Remembered while the shim runs, not kept: a modern server slow to start once (npx
                 * fetching it) would be taken for a handshake-era one at every later activation. */
                i->shim->learned_era = BACKEND_ERA_LEGACY;
                if (req && instance_send(i, req) >= 0 &&
                    (init == USEC_INFINITY ||
                     arm_timer(i, init > PROBE_TIMEOUT_USEC ? init - PROBE_TIMEOUT_USEC : 1) >= 0))
                        return 0;
        }
        if (i->state == INSTANCE_STARTING) {
                snprintf(text, sizeof text,
                         "backend '%s' did not answer initialize within %s (init_timeout); stopped it", iname(i),
                         duration_format(i->shim->backend->init_timeout_usec, d, sizeof d));
                log_warning("%s", text);
                fail_everything(i, text);
                i->broken = true;
                instance_stop(i);
        } else if (i->state == INSTANCE_STOPPING && i->stop_stage == 0) {
                process_kill(i->pid, SIGTERM);
                i->stop_stage = 1;
                (void) arm_timer(i, STOP_TERM_GRACE_USEC);
        } else if (i->state == INSTANCE_STOPPING && i->stop_stage == 1) {
                log_warning("Backend '%s' (pid %d) ignored SIGTERM, killing it.", iname(i), (int) i->pid);
                process_kill(i->pid, SIGKILL);
                i->stop_stage = 2;
        }
        return 0;
}

static int arm_timer(Instance *i, uint64_t usec) {
        int r;

        if (!i->timer_source)
                return sd_event_add_time_relative(i->shim->event, &i->timer_source, CLOCK_MONOTONIC, usec, 0, on_timer,
                                                  i);
        r = sd_event_source_set_time_relative(i->timer_source, usec);
        if (r >= 0)
                r = sd_event_source_set_enabled(i->timer_source, SD_EVENT_ONESHOT);
        return r;
}

/* The shim's own client params: the newest protocol version's client with no capabilities. */
static cJSON *own_init_params_new(void) {
        _cleanup_json_ cJSON *params = cJSON_CreateObject();
        cJSON *info;

        if (!params || !cJSON_AddStringToObject(params, "protocolVersion", SHIM_AHEAD_PROTOCOL_VERSION) ||
            !cJSON_AddObjectToObject(params, "capabilities") ||
            !(info = cJSON_AddObjectToObject(params, "clientInfo")) ||
            !cJSON_AddStringToObject(info, "name", "mcp-lazy-shimd") ||
            !cJSON_AddStringToObject(info, "version", MCP_LAZY_VERSION))
                return NULL;
        return TAKE_PTR(params);
}

static bool client_keyed_as(const Client *c, const Instance *i) {
        _cleanup_free_ char *key = pool_key(c->init_params, c->roots_key);
        return key && i->key && streq(key, i->key);
}

/* Starts the backend with the client params its pool key stands for: c's, whose call starts it, when c
 * is pooled under that key (as is every session of a handshake-era backend); else another session's of
 * the instance that is; else, when none is (sessions of other keys share a 2026-07-28 backend), the
 * shim's own, which declare no capabilities. A process is never shown the capabilities and clientInfo of
 * a session pooled under another key than the one it serves, on a first start or on a restart alike. */
static int instance_spawn_keyed(Instance *i, Client *c, char *text, size_t size) {
        _cleanup_json_ cJSON *own = NULL;

        if (!c || !client_keyed_as(c, i)) {
                c = NULL;
                for (Client *o = i->shim->clients; o && !c; o = o->next)
                        if (o->instance == i && o->init_params && client_keyed_as(o, i))
                                c = o;
        }
        if (c)
                return instance_spawn(i, c->init_params, text, size);
        own = own_init_params_new();
        if (!own) {
                snprintf(text, size, "cannot start backend '%s': out of memory", iname(i));
                return -ENOMEM;
        }
        return instance_spawn(i, own, text, size);
}

/* Starts the backend and sends it its first request (server/discover, or initialize) with these
 * params (a client's, or our own for a start ahead of any call); they are kept for the probe's
 * fallback and a resident backend's restart. */
static int instance_spawn(Instance *i, const cJSON *init_params, char *text, size_t size) {
        const Backend *b = i->shim->backend;
        _cleanup_json_ cJSON *init = NULL;
        cJSON *params = cJSON_Duplicate(init_params, true);
        int in_fd = -EBADF, out_fd = -EBADF, r;
        uint64_t now = now_usec();

        if (now < i->retry_after_usec) {
                snprintf(text, size,
                         "backend '%s' crashed %u times in a row (last: it %s); not restarting it for another %.1f s",
                         b->name, i->crashes, i->last_exit ?: "exited",
                         (double) (i->retry_after_usec - now) / USEC_PER_SEC);
                cJSON_Delete(params);
                return -EAGAIN;
        }
        if (!params) {
                snprintf(text, size, "cannot start backend '%s': out of memory", b->name);
                return -ENOMEM;
        }
        cJSON_Delete(i->init_params);
        i->init_params = params;
        /* A restart planned for later (resident) is superseded by this start. */
        (void) sd_event_source_set_enabled(i->timer_source, SD_EVENT_OFF);
        log_debug("Starting backend '%s'.", b->name); /* a phase boundary of a cold start (tests/bench/cold.mjs) */
        r = process_spawn(b, &i->pid, &in_fd, &out_fd, text, size);
        if (r < 0) {
                log_error("%s", text);
                return r;
        }
        r = channel_new(i->shim->event, out_fd, in_fd, i->shim->max_line, on_backend, i, &i->ch);
        if (r >= 0) {
                channel_set_backpressure(i->ch, false);
                channel_set_last_line(i->ch, false);
                /* At the same priority as the connections, so that clients that keep sending cannot
                 * hold it off; on_child() reads what is left in the pipe first. */
                r = sd_event_add_child(i->shim->event, &i->child_source, i->pid, WEXITED, on_child, i);
        }
        /* What era it speaks is learned as a dual-era client learns it: server/discover first. */
        init = bridge_first_request_new(i, params);
        i->era_assumed = !i->probing && b->protocol == PROTOCOL_AUTO;
        /* Pinned modern: no fallback, the probe has all of init_timeout. */
        if (r >= 0 && i->probing && b->protocol == PROTOCOL_AUTO)
                r = arm_timer(i, b->init_timeout_usec < PROBE_TIMEOUT_USEC ? b->init_timeout_usec : PROBE_TIMEOUT_USEC);
        else if (r >= 0 && b->init_timeout_usec != USEC_INFINITY)
                r = arm_timer(i, b->init_timeout_usec);
        if (r >= 0 && (!init || instance_send(i, init) < 0))
                r = -ENOMEM;
        if (r < 0) {
                snprintf(text, size, "cannot start backend '%s': %s", b->name, strerror(-r));
                process_kill(i->pid, SIGKILL);
                if (!i->child_source)
                        (void) waitpid(i->pid, NULL, 0);
                i->child_source = sd_event_source_disable_unref(i->child_source);
                i->ch = channel_free(i->ch);
                i->pid = 0;
                return r;
        }
        i->state = INSTANCE_STARTING;
        i->started_usec = now;
        i->answered = i->broken = false;
        i->stop_stage = 0;
        log_info("Started backend '%s' as pid %d.", b->name, (int) i->pid);
        return 0;
}

/* Ends the process (stdin closed, then SIGTERM, then SIGKILL) without failing its calls: when it
 * dies on its own, its calls fail with how it died, in on_child(). */
static void instance_terminate(Instance *i, bool close_stdin) {
        if (i->state == INSTANCE_DOWN || i->state == INSTANCE_STOPPING)
                return;
        i->state = INSTANCE_STOPPING;
        i->stop_stage = 0;
        /* An MCP server on stdio ends when its stdin does; signals only if it will not. A backend
         * that lost its own pipes is most likely dying: its stdin stays open until it is dead, so
         * that what it never read can be counted (see fail_reached()). */
        if (i->ch && close_stdin)
                channel_close_write(i->ch);
        if (arm_timer(i, STOP_STDIN_GRACE_USEC) < 0)
                process_kill(i->pid, SIGKILL);
}

void instance_stop(Instance *i) {
        if (i->state == INSTANCE_DOWN || i->state == INSTANCE_STOPPING)
                return;
        fail_everything(i, "the backend is stopping; call again");
        instance_terminate(i, true);
}

void instance_submit(Instance *i, Client *c, Message *m) {
        bool was_ready = i->state == INSTANCE_READY;
        char text[512];
        int r;

        /* Its stdin is gone (it died, or closed it): it is stopping, whether we heard yet or not. */
        if (i->state == INSTANCE_READY && (!i->ch || channel_write_closed(i->ch))) {
                i->broken = true;
                instance_terminate(i, false);
        }
        /* A retry with a requestState of the shim's, while no process runs (or the one that made it is
         * going): the call it names has ended, or never was. It is answered or refused now (mrtr.c), and
         * starts no process: a new one could not go on with that call. */
        if ((i->state == INSTANCE_DOWN || i->state == INSTANCE_STOPPING) && m->kind == JSONRPC_REQUEST &&
            mrtr_retry(i, c, m))
                return shim_update(i->shim);
        switch (i->state) {
        case INSTANCE_READY:
                deliver(i, c, m);
                break;
        case INSTANCE_DOWN:
                r = instance_spawn_keyed(i, c, text, sizeof text);
                if (r < 0)
                        return client_fail_request(c, m, text);
                _fallthrough_;
        case INSTANCE_STARTING:
        case INSTANCE_STOPPING:
                /* Stopping: it waits for the next process, which on_child() starts. */
                r = queue_append(i, c, m);
                if (r < 0)
                        client_fail_request(c, m,
                                            r == -ENOBUFS ? "too many requests in flight on this connection"
                                                          : "out of memory");
                break;
        }
        /* A backend that starts or stops is news at once; a call in flight at a ready one only counts. */
        if (was_ready && i->state == INSTANCE_READY)
                shim_calls_changed(i->shim, c);
        else
                shim_update(i->shim);
}

void instance_cancel(Instance *i, Client *c, const Message *m) {
        IdField f[2];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));
        _cleanup_free_ char *key = n == 1 ? strndup(f[0].text, f[0].len) : NULL, *uri = NULL;
        Route *r = key ? hashmap_get(&c->pending, key) : NULL;
        Instance *at;

        if (!r) {
                /* Still waiting for the backend to start: it simply never goes. */
                for (QueueItem **q = &i->queue; key && *q; q = &(*q)->next) {
                        const Message *qm = (*q)->message;
                        if ((*q)->client == c && qm->id_text && streq(qm->id_text, key)) {
                                QueueItem *dead = *q;
                                *q = dead->next;
                                queue_item_free(dead);
                                shim_update(i->shim);
                                return;
                        }
                }
                return; /* already answered, or never ours: the spec says to ignore it */
        }
        at = r->instance;
        /* A subscribe's URI, which its end may take from the session (route_subscribe_ended()). */
        if (r->sub && !(uri = strdup(r->sub->uri)))
                log_oom();
        (void) send_to_backend(at, r, m);
        /* The late answer, if any, is dropped: the client has stopped waiting. */
        route_remove(at, r);
        if (uri)
                subscribe_cancelled(at, uri);
        shim_update(i->shim);
}

void instance_forget_client(Instance *i, Client *c) {
        size_t state = 0;
        void *v;

        instance_forget_tasks(i, c);
        subscribe_forget_client(i, c);

        while (hashmap_iterate(&c->pending, &state, NULL, &v)) {
                Route *r = v;
                _cleanup_json_ cJSON *params = cJSON_CreateObject(), *m = NULL;

                r->sub = NULL; /* a subscribe's: nothing to undo (subscribe_flights_drop()) */

                if (params && cJSON_AddNumberToObject(params, "requestId", (double) r->backend_id) &&
                    cJSON_AddStringToObject(params, "reason", "the client disconnected")) {
                        m = jsonrpc_notification_new("notifications/cancelled", TAKE_PTR(params));
                        if (m)
                                (void) instance_send(r->instance, m);
                }
                route_remove(r->instance, r);
        }
        subscribe_flights_drop(c);
        for (QueueItem **q = &i->queue; *q;) {
                if ((*q)->client == c) {
                        QueueItem *dead = *q;
                        *q = dead->next;
                        queue_item_free(dead);
                } else
                        q = &(*q)->next;
        }
        i->n_clients--;
        if (i->session_owned && i->n_clients == 0) {
                if (i->state == INSTANCE_DOWN)
                        instance_free(i);
                else
                        instance_stop(i);
        }
}

void instance_leave(Instance *i, Client *c) {
        instance_forget_tasks(i, c);
        i->n_clients--;
}

/* lifecycle: warm or resident: the backend starts with the shim, before any session, initialized
 * as the newest protocol version's client with no capabilities. The first session takes it. */
int instance_start_ahead(Shim *s) {
        _cleanup_json_ cJSON *params = own_init_params_new();
        Instance *i;
        char text[512];
        int r;

        if (!params)
                return -ENOMEM;
        i = instance_new(s, pool_key(params, NULL));
        if (!i || !i->key) {
                instance_free(i);
                return -ENOMEM;
        }
        i->unclaimed = true;
        log_info("Starting backend '%s' ahead of any call (lifecycle: %s).", iname(i),
                 lifecycle_to_string(s->backend->lifecycle));
        r = instance_spawn(i, params, text, sizeof text);
        if (r < 0) {
                log_warning("%s", text);
                i->crashes = 2;
                i->retry_after_usec = now_usec() + backoff_usec(i->crashes);
                schedule_restart(i);
        }
        shim_update(s);
        return 0;
}

bool instance_spare_needed(const Shim *s) {
        unsigned n = 0;

        for (const Instance *i = s->instances; i; i = i->next) {
                if (i->unclaimed || !i->session_owned)
                        return false;
                n++;
        }
        return n < SHIM_MAX_INSTANCES;
}
