/* The session with the client: JSON-RPC over stdio, answered from the manifest or routed to a backend. */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "frontend.h"
#include "jsonrpc.h"
#include "log.h"
#include "macros.h"
#include "peek.h"

/* Oldest first; an unknown version from the client gets the newest. */
static const char *const protocol_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"};
#define CURSOR_PREFIX "mcp-lazy:tools:"

Session *session_new(sd_event *e, Manifest *m, const Options *o) {
        /* Aligned, so that what a call reads of it is on two lines (see Session). */
        Session *s = aligned_alloc(_Alignof(Session), sizeof *s);

        if (!s)
                return NULL;
        memset(s, 0, sizeof *s);
        s->event = sd_event_ref(e);
        s->manifest = m;
        s->options = o;
        /* Keyed by each Pending's id_text, which lives as long as the entry. */
        s->pending = hashmap_new_borrowed();
        s->upcalls = hashmap_new();
        s->tasks = hashmap_new();
        s->upstreams = hashmap_new();
        if (!s->pending || !s->upcalls || !s->tasks || !s->upstreams)
                return session_free(s);
        /* The pool's first is taken first, and comes back first (spare_pending is a stack). Not under
         * ASan (HAVE_ASAN): every Pending is then malloc()'d and freed, and a use after free is seen. */
        for (size_t i = HAVE_ASAN ? 0 : ELEMENTSOF(s->pending_pool); i > 0; i--) {
                s->pending_pool[i - 1].spare_next = s->spare_pending;
                s->spare_pending = &s->pending_pool[i - 1];
                s->n_spare_pending++;
        }
        return s;
}

void session_set_answers(Session *s, Answers *a) {
        answers_free(s->answers);
        s->answers = a;
        /* The remembered route pointed into the old answers. */
        free(s->route_tool);
        s->route_tool = NULL;
        s->route_tool_len = 0;
        s->route_backend = NULL;
}

const Manifest *session_manifest(Session *s) {
        _cleanup_free_ char *err = NULL;
        Manifest *m = NULL;
        int r = -ENOENT;

        if (s->manifest)
                return s->manifest;
        /* The version the answers stand for, from the manifest cache; else the file as it is now (a
         * reload is on its way if it changed). */
        if (s->answers) {
                log_debug("Reading the manifest for a request the prepared answers do not cover.");
                r = manifest_load_cached(s->options->manifest_path, answers_stat(s->answers), &m);
                if (r >= 0 && s->options->backend && manifest_restrict(m, s->options->backend) < 0) {
                        m = manifest_free(m);
                        r = -ENOENT;
                }
        }
        if (r < 0)
                r = session_load_manifest(s->options, &m, NULL, &err);
        if (r < 0) {
                log_error("Cannot read the manifest: %s", err ?: strerror(-r));
                return NULL;
        }
        log_debug("Read the manifest: %zu backends, %zu tools.", m->n_backends, m->n_tools);
        /* Reading it took several times its size (the cache's text, two trees), and --backend dropped
         * the other backends: what is free goes back, every frontend of a fleet holds this. */
        (void) malloc_trim(0);
        return s->manifest = m;
}

static bool pending_pooled(const Session *s, const Pending *p) {
        return p >= s->pending_pool && p < s->pending_pool + ELEMENTSOF(s->pending_pool);
}

/* A Pending that was never in the lists, or whose Session goes: its message, and it unless pooled. */
static Pending *pending_free(Session *s, Pending *p) {
        if (!p)
                return NULL;
        p->request = message_unref(p->request);
        if (!pending_pooled(s, p))
                free(p);
        return NULL;
}

/* Calls in flight come and go by the dozen: their Pendings are kept for the next ones, up to a
 * window's worth, rather than handed back to malloc() one by one (none under ASan). */
#define PENDING_SPARE_MAX 64U

static void pending_recycle(Session *s, Pending *p) {
        p->request = message_unref(p->request);
        if (HAVE_ASAN || (s->n_spare_pending >= PENDING_SPARE_MAX && !pending_pooled(s, p))) {
                free(p);
                return;
        }
        p->spare_next = s->spare_pending;
        s->spare_pending = p;
        s->n_spare_pending++;
}

static Pending *pending_alloc(Session *s) {
        Pending *p = s->spare_pending;

        if (!p)
                return calloc(1, sizeof *p);
        s->spare_pending = p->spare_next;
        s->n_spare_pending--;
        *p = (Pending){};
        return p;
}

Session *session_free(Session *s) {
        const char *key;
        void *v;
        size_t state = 0;

        if (!s)
                return NULL;
        while (s->upstreams && hashmap_iterate(s->upstreams, &state, &key, &v))
                upstream_free(v);
        hashmap_free(s->upstreams);
        state = 0;
        while (s->pending && hashmap_iterate(s->pending, &state, &key, &v)) {
                Pending *p = v;
                Batch *b = p->batch;

                pending_free(s, p);
                /* Members of one batch share it: the last one out frees it. */
                if (b && --b->outstanding == 0) {
                        cJSON_Delete(b->responses);
                        free(b);
                }
        }
        while (s->spare_pending) {
                Pending *p = s->spare_pending;
                s->spare_pending = p->spare_next;
                pending_free(s, p);
        }
        upstream_free_upcalls(s);
        modern_free(s);
        hashmap_free(s->pending);
        hashmap_free(s->upcalls);
        hashmap_free(s->tasks);
        free(s->log_level);
        file_watch_free(s->watch);
        manifest_free(s->manifest);
        answers_free(s->answers);
        free(s->route_tool);
        channel_free(s->client);
        cJSON_Delete(s->client_params);
        free(s->protocol_version);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

void session_send_text(Session *s, const char *text, size_t len) {
        int r = channel_send(s->client, text, len);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for the client, dropping it: %m");
        if (channel_backed_up(s->client))
                upstream_set_reading(s, false);
}

void session_send(Session *s, const cJSON *message) {
        int r = channel_send_json(s->client, message);
        if (r < 0 && r != -EPIPE)
                log_warning_errno(r, "Failed to queue a message for the client, dropping it: %m");
        /* The client is not reading: stop taking more from the backends until it does. */
        if (channel_backed_up(s->client))
                upstream_set_reading(s, false);
}

static void batch_maybe_finish(Session *s, Batch *b) {
        if (!b->sealed || b->outstanding > 0)
                return;
        /* Only notifications in the batch: JSON-RPC says nothing at all is returned. */
        if (cJSON_GetArraySize(b->responses) > 0)
                session_send(s, b->responses);
        cJSON_Delete(b->responses);
        free(b);
}

static bool json_has_reference(const cJSON *j) {
        for (; j; j = j->next)
                if ((j->type & cJSON_IsReference) || json_has_reference(j->child))
                        return true;
        return false;
}

/* Takes msg. Within a batch the reply joins the batch's array; otherwise it is sent now. */
static void reply(Session *s, Batch *batch, cJSON *msg) {
        if (!msg) {
                log_oom();
                return;
        }
        if (batch && json_has_reference(msg)) {
                /* It waits for the batch's other members, and a reload may free the manifest
                 * meanwhile: it must own what it will print. */
                cJSON *own = cJSON_Duplicate(msg, true);
                cJSON_Delete(msg);
                if (!own) {
                        log_oom();
                        return;
                }
                msg = own;
        }
        if (batch) {
                if (!cJSON_AddItemToArray(batch->responses, msg))
                        cJSON_Delete(msg);
                return;
        }
        session_send(s, msg);
        cJSON_Delete(msg);
}

/* A backend's answer, as its bytes: within a batch it joins the array as they are. */
static void reply_text(Session *s, Batch *batch, const char *text, size_t len) {
        if (batch) {
                cJSON *raw = cJSON_CreateRaw(text);
                if (!raw || !cJSON_AddItemToArray(batch->responses, raw))
                        cJSON_Delete(raw);
                return;
        }
        session_send_text(s, text, len);
}

void session_reply(Session *s, Batch *batch, cJSON *msg) {
        reply(s, batch, msg);
}

static void reply_no_manifest(Session *s, Batch *batch, const Message *m) {
        char text[PATH_MAX + 128];

        snprintf(text, sizeof text, "the manifest %s cannot be read: mcp-lazy's log says why",
                 s->options->manifest_path);
        reply(s, batch, jsonrpc_error_new(message_id_json(m), JSONRPC_INTERNAL_ERROR, text));
}

static void reply_error(Session *s, Batch *batch, const cJSON *id, int code, const char *fmt, ...) _printf_(5, 6);
static void reply_error(Session *s, Batch *batch, const cJSON *id, int code, const char *fmt, ...) {
        char text[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        reply(s, batch, jsonrpc_error_new(id, code, text));
}

/* A task-augmented call's answer names a task: later tasks calls for it go to the same backend. */
static void track_task(Session *s, const Pending *p, const Message *answer) {
        Span t = message_span(answer, ID_PATH_RESULT_TASK_ID); /* the scan noted where it is */
        _cleanup_json_ cJSON *v = NULL;
        const char *id;

        if (!t.len) /* the usual answer: no task */
                return;
        v = cJSON_ParseWithLength(answer->text + t.start, t.len);
        id = cJSON_GetStringValue(v);
        if (id && !message_span_has_nul(answer, t) && hashmap_size(s->tasks) < 65536)
                (void) hashmap_put(s->tasks, id, p->upstream);
}

/* Forgets a pending request everywhere; returns its batch, if any, which still counts it. */
static Batch *pending_done(Session *s, Pending *p) {
        Batch *b = p->batch;

        *(p->older ? &p->older->newer : &s->oldest) = p->newer;
        *(p->newer ? &p->newer->older : &s->newest) = p->older;

        if (p->conn)
                upconn_release(p->conn);
        pending_recycle(s, p);
        return b;
}

static Batch *pending_forget(Session *s, Pending *p) {
        hashmap_remove_hashed(s->pending, p->id_text, p->hash);
        return pending_done(s, p);
}

static bool pending_on(const void *value, const void *conn) {
        return ((const Pending *) value)->conn == conn;
}

static void batch_member_done(Session *s, Batch *b) {
        if (!b)
                return;
        b->outstanding--;
        batch_maybe_finish(s, b);
}

/* Two ids' texts (short) compared here, not by strcmp(): on an answer's path it was the only call into
 * strcmp()'s page of libc. */
static inline bool id_text_same(const char *a, const char *b) {
        while (*a && *a == *b)
                a++, b++;
        return *a == *b;
}

/* The call an answer from c is for, taken out of the pending table; NULL when none is. */
static Pending *pending_take(Session *s, const UpConn *c, const Message *answer) {
        Pending *p = s->oldest;

        if (!answer->id_text)
                return NULL;
        /* Answers mostly come in the order the calls went: the oldest call's id is compared, not
         * hashed again. */
        if (p && p->conn == c && id_text_same(p->id_text, answer->id_text))
                return hashmap_remove_hashed(s->pending, p->id_text, p->hash);
        /* Taken out of the table in the same look-up that finds it, if c is where it went. */
        return hashmap_remove_if(s->pending, answer->id_text, pending_on, c);
}

/* The client is done sending, but answers already made may still sit in our queue (a pipe full of
 * them): they go out first, as long as the client reads, then we exit. */
#define EXIT_STALL_USEC (2ULL * USEC_PER_SEC)

/* After the client's input ended, the calls in flight are answered as a server run directly would
 * answer them (no timeout of ours: a hung backend waits for the client's SIGTERM); the last answer
 * starts the exit. */
static void session_maybe_end(Session *s) {
        if (s->input_ended && hashmap_size(s->pending) == 0)
                channel_shutdown(s->client, EXIT_STALL_USEC);
}

bool session_complete(Session *s, const UpConn *c, const Message *answer) {
        Pending *p = pending_take(s, c, answer);
        Batch *b;

        if (!p)
                return false;
        if (p->is_tool_call)
                track_task(s, p, answer);
        if (p->modern) {
                /* What the 2026-07-28 era requires of a handshake-era backend's answer. */
                cJSON *adapted = modern_adapt_response(p, answer);
                if (adapted) {
                        b = pending_done(s, p);
                        if (!b && cJSON_IsRaw(adapted)) {
                                /* The backend's bytes with what the era requires spliced in: as they are. */
                                session_send_text(s, adapted->valuestring, strlen(adapted->valuestring));
                                cJSON_Delete(adapted);
                        } else
                                reply(s, b, adapted);
                        batch_member_done(s, b);
                        session_maybe_end(s);
                        return true;
                }
        }
        b = pending_done(s, p);
        reply_text(s, b, answer->text, answer->len);
        batch_member_done(s, b);
        session_maybe_end(s);
        return true;
}

void session_fail(Session *s, Pending *p, const char *text) {
        /* The id as the client wrote it, which the answer copies. */
        const cJSON id = {.type = cJSON_Raw, .valuestring = (char *) p->id_text};
        cJSON *m = p->is_tool_call ? jsonrpc_result_new(&id, tool_error_result_new(text))
                                   : jsonrpc_error_new(&id, JSONRPC_INTERNAL_ERROR, text);
        Batch *b;

        /* A modern client requires resultType on every result. */
        if (m && p->modern && p->is_tool_call &&
            !cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(m, "result"), "resultType", "complete"))
                log_oom();
        b = pending_forget(s, p);

        reply(s, b, m);
        batch_member_done(s, b);
        session_maybe_end(s);
}

/* The index in protocol_versions of the version we agree on. */
static size_t negotiate_version(const char *asked) {
        for (size_t i = 0; i < ELEMENTSOF(protocol_versions); i++)
                if (streq(asked, protocol_versions[i]))
                        return i;
        return ELEMENTSOF(protocol_versions) - 1;
}

/* What initialize advertises: a backend's recorded capabilities (--backend), else only what we do
 * for the fleet: tools and logging always, resources, prompts and completions when a backend
 * declares some. */
static cJSON *capabilities_new(const Manifest *mf) {
        _cleanup_json_ cJSON *caps = NULL;
        cJSON *tools;

        if (mf->capabilities)
                return cJSON_Duplicate(mf->capabilities, true);
        caps = cJSON_CreateObject();
        /* listChanged: the manifest is watched, and a change is announced. */
        tools = caps ? cJSON_AddObjectToObject(caps, "tools") : NULL;
        if (!tools || !cJSON_AddBoolToObject(tools, "listChanged", true) || !cJSON_AddObjectToObject(caps, "logging"))
                return NULL;
        if (mf->has_resources || mf->has_resource_templates) {
                cJSON *res = cJSON_AddObjectToObject(caps, "resources");
                if (!res || !cJSON_AddBoolToObject(res, "subscribe", true) ||
                    !cJSON_AddBoolToObject(res, "listChanged", true))
                        return NULL;
        }
        if (mf->has_prompts) {
                cJSON *pr = cJSON_AddObjectToObject(caps, "prompts");
                if (!pr || !cJSON_AddBoolToObject(pr, "listChanged", true))
                        return NULL;
        }
        if ((mf->has_prompts || mf->has_resource_templates) && !cJSON_AddObjectToObject(caps, "completions"))
                return NULL;
        return TAKE_PTR(caps);
}

/* Whether initialize advertised capability 'cap' (and, with sub, that member of it as true). */
static bool advertised(const Manifest *mf, const char *cap, const char *sub) {
        const cJSON *c;

        if (!mf->capabilities) {
                bool res = mf->has_resources || mf->has_resource_templates;
                if (streq(cap, "resources"))
                        return res;
                if (streq(cap, "prompts"))
                        return mf->has_prompts;
                if (streq(cap, "completions"))
                        return mf->has_prompts || mf->has_resource_templates;
                return streq(cap, "tools") || streq(cap, "logging") || streq(cap, "tasks");
        }
        c = cJSON_GetObjectItemCaseSensitive(mf->capabilities, cap);
        return c && (!sub || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, sub)));
}

bool session_announces(const Manifest *mf, const char *cap) {
        if (mf->capabilities)
                return advertised(mf, cap, "listChanged");
        return streq(cap, "tools") || advertised(mf, cap, NULL);
}

bool session_advertises(const Manifest *mf, const char *cap) {
        return advertised(mf, cap, NULL);
}

bool session_notifies(const Manifest *mf, const char *cap) {
        /* A backend that does not announce changes (its recorded capabilities say so) stays silent. */
        return !mf->capabilities || advertised(mf, cap, "listChanged");
}

cJSON *session_capabilities_new(const Manifest *mf, bool modern) {
        /* resources.subscribe says the same in both eras: a listen stream's resourceSubscriptions are
         * honoured (modern.c), as resources/subscribe is. */
        (void) modern;
        return capabilities_new(mf);
}

cJSON *session_initialize_result_new(const Manifest *mf, const char *version) {
        _cleanup_json_ cJSON *r = cJSON_CreateObject();
        cJSON *caps, *info;

        if (!r || !cJSON_AddStringToObject(r, "protocolVersion", version))
                return NULL;
        caps = capabilities_new(mf);
        if (!caps || !cJSON_AddItemToObject(r, "capabilities", caps)) {
                cJSON_Delete(caps);
                return NULL;
        }
        info = cJSON_Duplicate(mf->server_info, true);
        if (!info || !cJSON_AddItemToObject(r, "serverInfo", info)) {
                cJSON_Delete(info);
                return NULL;
        }
        if (mf->instructions && !cJSON_AddStringToObject(r, "instructions", mf->instructions))
                return NULL;
        return TAKE_PTR(r);
}

static int param_has_nul(const Message *m, const char *key);

static void handle_initialize(Session *s, Message *m, Batch *batch) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->params, "protocolVersion");
        const Manifest *mf;
        const char *version;
        size_t k;
        int nul;

        if (!cJSON_IsObject(m->params) || !cJSON_IsString(v))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "initialize needs params with a string protocolVersion");
        if (s->protocol_version)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_REQUEST,
                                   "the session is already initialized");
        /* "2025-06-18\u0000x" is no version we speak: the newest is offered, as for any other. */
        nul = param_has_nul(m, "protocolVersion");
        if (nul < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        k = negotiate_version(nul ? "" : v->valuestring);
        version = protocol_versions[k];
        s->protocol_version = strdup(version);
        /* A modern request may have come first (a probe, then the fallback): initialize says it all. */
        if (s->client_params)
                upstream_era_changed(s);
        cJSON_Delete(s->client_params);
        s->client_params = cJSON_Duplicate(m->params, true);
        if (!s->protocol_version || !s->client_params) {
                log_oom();
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        }
        /* What the backends see is the version we agreed on, not one they would have to refuse. */
        cJSON_ReplaceItemInObjectCaseSensitive(s->client_params, "protocolVersion", cJSON_CreateString(version));
        s->batches_allowed = streq(version, "2025-03-26");
        if (session_reply_answer(s, batch, m, ANSWER_INITIALIZE, k))
                return;
        if (!(mf = session_manifest(s)))
                return reply_no_manifest(s, batch, m);
        reply(s, batch, jsonrpc_result_new(message_id_json(m), session_initialize_result_new(mf, version)));
}

/* Cursor -> offset; -EINVAL for anything we did not hand out. */
static int cursor_parse(size_t n_tools, const cJSON *params, size_t *ret) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(params, "cursor");
        const char *p;
        char *end;
        unsigned long long off;

        *ret = 0;
        if (!c || cJSON_IsNull(c))
                return 0;
        if (!cJSON_IsString(c) || strncmp(c->valuestring, CURSOR_PREFIX, strlen(CURSOR_PREFIX)) != 0)
                return -EINVAL;
        p = c->valuestring + strlen(CURSOR_PREFIX);
        if (*p < '1' || *p > '9')
                return -EINVAL;
        errno = 0;
        off = strtoull(p, &end, 10);
        if (*end || errno || off >= n_tools)
                return -EINVAL;
        *ret = (size_t) off;
        return 0;
}

cJSON *session_tools_page_new(const Manifest *mf, size_t offset) {
        _cleanup_json_ cJSON *r = cJSON_CreateObject();
        size_t end = mf->page_size ? offset + mf->page_size : mf->n_tools;
        cJSON *tools;

        if (end > mf->n_tools)
                end = mf->n_tools;
        if (!r || !(tools = cJSON_AddArrayToObject(r, "tools")))
                return NULL;
        /* References: the manifest's JSON is printed as it is, never copied. */
        for (size_t i = offset; i < end; i++)
                if (!cJSON_AddItemReferenceToArray(tools, mf->tools[i].json))
                        return NULL;
        if (end < mf->n_tools) {
                char cursor[64];
                snprintf(cursor, sizeof cursor, CURSOR_PREFIX "%zu", end);
                if (!cJSON_AddStringToObject(r, "nextCursor", cursor))
                        return NULL;
        }
        return TAKE_PTR(r);
}

static void handle_tools_list(Session *s, Message *m, Batch *batch) {
        const Manifest *mf = s->manifest;
        size_t offset, page;
        cJSON *r;

        if (!s->answers && !(mf = session_manifest(s)))
                return reply_no_manifest(s, batch, m);
        if (m->params && !cJSON_IsObject(m->params))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "tools/list params must be an object");
        if (cursor_parse(s->answers ? answers_n_tools(s->answers) : mf->n_tools, m->params, &offset) < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "unknown cursor: pass back a nextCursor from an earlier tools/list, or none");
        /* The pages we hand out cursors for are prepared; another offset is served from the manifest. */
        if (s->answers && answers_tools_page(s->answers, offset, &page) &&
            session_reply_answer(s, batch, m, ANSWER_TOOLS, page))
                return;
        if (!(mf = session_manifest(s)))
                return reply_no_manifest(s, batch, m);
        r = session_tools_page_new(mf, offset);
        modern_list_result(s, m, r);
        reply(s, batch, jsonrpc_result_new(message_id_json(m), r));
}

static void handle_core_request(Session *s, Message *m, Batch *batch);

/* One Upstream per backend name for the whole session, across manifest reloads. */
Upstream *session_upstream(Session *s, const char *name) {
        Upstream *u;

        /* Calls in a row mostly go to one backend: its name is compared, not hashed. Upstreams live
         * as long as the session. */
        if (s->last_upstream && streq(upstream_name(s->last_upstream), name))
                return s->last_upstream;
        u = hashmap_get(s->upstreams, name);
        if (!u) {
                u = upstream_new(s, name);
                if (u && hashmap_put(s->upstreams, name, u) < 0)
                        u = upstream_free(u);
        }
        if (u)
                s->last_upstream = u;
        return u;
}

static int pending_new(Session *s, Message *m, Batch *batch, Pending **ret) {
        Pending *p = pending_alloc(s);
        size_t id_size;
        int r;

        if (!p)
                return -ENOMEM;
        p->modern = modern_request(m);
        id_size = message_id_len(m) + 1; /* no strlen(): one libc page less per call */
        if (!p->modern && id_size <= sizeof p->id_buf)
                p->id_text = memcpy(p->id_buf, m->id_text, id_size);
        else {
                p->request = message_ref(m);
                p->id_text = m->id_text;
        }
        p->hash = hashmap_hash_len(p->id_text, id_size - 1);
        r = hashmap_put_hashed(s->pending, p->id_text, p->hash, p);
        if (r < 0) {
                pending_recycle(s, p);
                return r;
        }
        p->older = s->newest;
        *(s->newest ? &s->newest->newer : &s->oldest) = p;
        s->newest = p;
        p->upstream = NULL;
        p->batch = batch;
        p->is_tool_call = message_method_is(m, "tools/call");
        if (batch)
                batch->outstanding++;
        *ret = p;
        return 0;
}

/* What every request bound for a backend must pass, whichever method: false when it was refused. */
static bool routable(Session *s, Message *m, Batch *batch) {
        if (hashmap_size(s->pending) >= SESSION_MAX_PENDING) {
                reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR,
                            "too many requests in flight (%u); wait for some to finish", SESSION_MAX_PENDING);
                return false;
        }
        /* One id space: notifications/cancelled names either a request or a listen stream, never both. */
        if (s->listens && hashmap_get(s->listens, m->id_text)) {
                reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_REQUEST,
                            "request id is already used by a subscriptions/listen stream still open");
                return false;
        }
        if (message_id_is_string(m) &&
            strncmp(m->id->valuestring, UPSTREAM_OWN_PREFIX, strlen(UPSTREAM_OWN_PREFIX)) == 0) {
                reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_REQUEST,
                            "request ids starting with '%s' are reserved by mcp-lazy", UPSTREAM_OWN_PREFIX);
                return false;
        }
        return true;
}

/* Sends m to u (NULL: the backend's, made on first use); the answer comes back in session_complete(). */
static void route_to(Session *s, Message *m, Batch *batch, Upstream *u, const char *backend) {
        Pending *p;
        int r;

        if (!routable(s, m, batch))
                return;
        r = pending_new(s, m, batch, &p);
        if (r == -EEXIST)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_REQUEST,
                                   "request id is already used by a request still in flight");
        if (r < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        p->upstream = u ?: session_upstream(s, backend);
        if (!p->upstream)
                return session_fail(s, p, "out of memory");
        upstream_forward(p->upstream, p, m);
}

static void route_to_backend(Session *s, Message *m, size_t backend, Batch *batch) {
        route_to(s, m, batch, NULL, s->manifest->backends[backend].name);
}

/* The prepared answers' route of tool (NULL: none): the last one is remembered, calls in a row mostly
 * name one tool, and reading a route from the answers is a parse. */
static const char *prepared_route(Session *s, const char *tool) {
        const char *backend;

        if (s->route_tool && streq(s->route_tool, tool))
                return s->route_backend;
        if (!answers_tool_backend(s->answers, tool, &backend))
                return NULL;
        free(s->route_tool);
        s->route_tool = strdup(tool); /* out of memory: not remembered */
        s->route_tool_len = s->route_tool ? strlen(tool) : 0;
        s->route_backend = backend;
        return backend;
}

/* Whether the string at span is the remembered tool's name as it is written, without an escape:
 * then it decodes to that name, and there is nothing to decode. */
static bool prepared_route_same(const Session *s, const Message *m, const Span *span) {
        const char *t = m->text + span->start + 1;

        return s->route_tool && span->len == s->route_tool_len + 2 && m->text[span->start] == '"' &&
               memcmp(t, s->route_tool, s->route_tool_len) == 0 && !memchr(t, '\\', s->route_tool_len);
}

/* Routed by params.name alone, which the scan noted: the tree is not needed. A tool of a local backend
 * is routed by the prepared answers while the manifest is not read; else by the manifest. */
static void handle_tools_call(Session *s, Message *m, Batch *batch) {
        Span span = message_route(m, ROUTE_PATH_PARAMS_NAME);
        _cleanup_free_ char *big = NULL;
        char small[256], *name = small;
        const char *backend;
        size_t len;
        const Tool *t;
        int r;

        /* Calls in a row mostly name one tool: its name as written is compared, not decoded. */
        if (!s->manifest && s->answers && prepared_route_same(s, m, &span))
                return route_to(s, m, batch, NULL, s->route_backend);
        r = message_string(m, span, small, sizeof small, &len);
        if (r == -ENOBUFS) {
                name = big = malloc(span.len);
                r = name ? message_string(m, span, big, span.len, &len) : -ENOMEM;
        }
        if (r == -ENOMEM)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if (r < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "tools/call needs params with a string name");
        /* A name with a NUL in it names no tool: the backend would read all of it, not what we looked up. */
        if (len == strlen(name) && !s->manifest && s->answers && (backend = prepared_route(s, name)))
                return route_to(s, m, batch, NULL, backend);
        if (!session_manifest(s))
                return reply_no_manifest(s, batch, m);
        t = len == strlen(name) ? manifest_find_tool(s->manifest, name) : NULL;
        if (!t)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS, "Unknown tool: '%.200s'",
                                   name);
        route_to_backend(s, m, t->backend, batch);
}

cJSON *session_list_new(const Manifest *mf, size_t offset, const char *key) {
        _cleanup_json_ cJSON *r = cJSON_CreateObject();
        cJSON *list;

        if (!r || !(list = cJSON_AddArrayToObject(r, key)))
                return NULL;
        for (size_t i = 0; i < mf->n_backends; i++) {
                const cJSON *it, *l = backend_list(&mf->backends[i], offset);
                cJSON_ArrayForEach (it, l)
                        if (!cJSON_AddItemReferenceToArray(list, (cJSON *) it))
                                return NULL;
        }
        return TAKE_PTR(r);
}

/* resources/list and friends: every backend's declared entries, in manifest order. */
static void handle_surface_list(Session *s, Message *m, Batch *batch, size_t offset, const char *key) {
        const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(m->params, "cursor");
        cJSON *r;

        if (cursor && !cJSON_IsNull(cursor))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "unknown cursor: this list has one page");
        r = session_list_new(s->manifest, offset, key);
        if (!r)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        modern_list_result(s, m, r);
        reply(s, batch, jsonrpc_result_new(message_id_json(m), r));
}

/* Whether the string params[key] (or params.ref[key]) holds a NUL: it names nothing here (as a tool's
 * name in handle_tools_call()). 1 or 0; -ENOMEM when that cannot be said (the caller answers "out of
 * memory"). */
static int param_has_nul(const Message *m, const char *key) {
        return message_path_has_nul(m, (const char *const[]){"params", key, NULL});
}

static int ref_has_nul(const Message *m, const char *key) {
        return message_path_has_nul(m, (const char *const[]){"params", "ref", key, NULL});
}

/* To b, the backend found by name, unless nul (name's param_has_nul()) says name holds a NUL. */
static void route_by(Session *s, Message *m, Batch *batch, int nul, const Backend *b, const char *what,
                     const char *name) {
        if (nul < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if (!b || nul > 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS, "Unknown %s: '%.200s'", what,
                                   name ?: "");
        route_to_backend(s, m, (size_t) (b - s->manifest->backends), batch);
}

static void handle_completion(Session *s, Message *m, Batch *batch) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(m->params, "ref");
        /* "ref/prompt\u0000x" is no ref/prompt to the backend: none here either. */
        int nul = ref_has_nul(m, "type");
        const char *type = nul == 0 ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "type")) ?: "" : "";
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "name"));
        const char *uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "uri"));

        if (nul < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if (streq(type, "ref/prompt") && name)
                return route_by(s, m, batch, ref_has_nul(m, "name"), manifest_find_prompt_backend(s->manifest, name),
                                "prompt", name);
        if (streq(type, "ref/resource") && uri)
                return route_by(s, m, batch, ref_has_nul(m, "uri"), manifest_find_resource_backend(s->manifest, uri),
                                "resource", uri);
        reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                    "completion/complete needs a ref/prompt or ref/resource");
}

/* Task methods: the backend that answered the call that created the task. */
static void handle_task(Session *s, Message *m, Batch *batch) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "taskId"));
        int nul = id ? param_has_nul(m, "taskId") : 0;
        Upstream *u = id && nul == 0 ? hashmap_get(s->tasks, id) : NULL;

        if (nul < 0)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        if (!routable(s, m, batch))
                return;
        if (streq(m->method, "tasks/list")) {
                size_t state = 0;
                void *v;
                /* Only one backend can answer a list; with tasks at several it would be partial. */
                while (hashmap_iterate(s->tasks, &state, NULL, &v))
                        if (!u)
                                u = v;
                if (!u) {
                        cJSON *empty = cJSON_CreateObject();
                        if (empty)
                                cJSON_AddArrayToObject(empty, "tasks");
                        return reply(s, batch, jsonrpc_result_new(message_id_json(m), empty));
                }
        }
        if (!u)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS, "Unknown task: '%.200s'",
                                   id ?: "");
        route_to(s, m, batch, u, NULL);
}

static void handle_set_level(Session *s, Message *m, Batch *batch) {
        const char *level = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "level"));
        _cleanup_json_ cJSON *id = upstream_own_id(s, "setLevel"), *req = NULL;

        if (!level)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                   "logging/setLevel needs a string level");
        free(s->log_level);
        s->log_level = strdup(level);
        req = jsonrpc_request_new(id, "logging/setLevel", cJSON_Duplicate(m->params, true));
        if (!s->log_level || !req)
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        /* Running backends get it now, the others when they are first reached. */
        upstream_broadcast(s, req);
        reply(s, batch, jsonrpc_result_new(message_id_json(m), cJSON_CreateObject()));
}

/* The requests every session answers, with prepared answers or from the manifest: true when m was one. */
static bool handle_basic_request(Session *s, Message *m, Batch *batch) {
        if (streq(m->method, "initialize"))
                handle_initialize(s, m, batch);
        else if (streq(m->method, "ping"))
                reply(s, batch, jsonrpc_result_new(message_id_json(m), cJSON_CreateObject()));
        else if (streq(m->method, "tools/list"))
                handle_tools_list(s, m, batch);
        else
                return false;
        return true;
}

/* What prepared answers serve without the manifest: true when m was answered. */
static bool handle_prepared(Session *s, Message *m, Batch *batch) {
        static const struct {
                const char *method;
                AnswerKind kind;
        } lists[] = {
                {"resources/list", ANSWER_RESOURCES},
                {"resources/templates/list", ANSWER_RESOURCE_TEMPLATES},
                {"prompts/list", ANSWER_PROMPTS},
        };

        if (!s->answers)
                return false;
        if (handle_basic_request(s, m, batch))
                return true;
        /* A list is prepared only where it is advertised: else the manifest's path refuses it. */
        for (size_t i = 0; i < ELEMENTSOF(lists); i++) {
                const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(m->params, "cursor");

                if (!streq(m->method, lists[i].method) || !answers_get(s->answers, lists[i].kind, 0, NULL, NULL))
                        continue;
                if (cursor && !cJSON_IsNull(cursor))
                        reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_PARAMS,
                                    "unknown cursor: this list has one page");
                else if (!session_reply_answer(s, batch, m, lists[i].kind, 0))
                        reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
                return true;
        }
        return false;
}

/* A tools/call, the request on every call's path: what routes it (method, id, params.name, and a
 * 2026-07-28 envelope) came from the scan, and it goes on as the client wrote it, so no tree is built.
 * It takes the same way as below: nothing before handle_tools_call() answers a tools/call without an
 * envelope, or with one that modern_intercept() lets pass as it is. */
static bool handle_tools_call_fast(Session *s, Message *m, Batch *batch) {
        if (!message_method_is(m, "tools/call") || (message_has_envelope(m) && !modern_envelope_settled(s, m)))
                return false;
        handle_tools_call(s, m, batch);
        return true;
}

static void handle_request(Session *s, Message *m, Batch *batch) {
        const char *uri, *name;
        const Manifest *mf;

        if (handle_tools_call_fast(s, m, batch))
                return;
        /* Everything else reads params: the tree is built now. */
        if (!message_json(m))
                return reply_error(s, batch, message_id_json(m), JSONRPC_INTERNAL_ERROR, "out of memory");
        uri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "uri"));
        name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->params, "name"));
        if (modern_intercept(s, m, batch) || handle_prepared(s, m, batch))
                return;
        /* The prepared answers route a call to a local backend without the manifest (handle_tools_call()). */
        if (streq(m->method, "tools/call"))
                return handle_tools_call(s, m, batch);
        if (!(mf = session_manifest(s)))
                return reply_no_manifest(s, batch, m);

        /* What is not advertised (see capabilities_new()) is not there. */
        if ((!advertised(mf, "resources", NULL) && strncmp(m->method, "resources/", 10) == 0) ||
            (!advertised(mf, "prompts", NULL) && strncmp(m->method, "prompts/", 8) == 0) ||
            (!advertised(mf, "completions", NULL) && streq(m->method, "completion/complete")) ||
            (!advertised(mf, "tasks", NULL) && strncmp(m->method, "tasks/", 6) == 0) ||
            (!advertised(mf, "logging", NULL) && streq(m->method, "logging/setLevel")))
                return handle_core_request(s, m, batch);
        if (streq(m->method, "resources/list"))
                return handle_surface_list(s, m, batch, offsetof(Backend, resources), "resources");
        if (streq(m->method, "resources/templates/list"))
                return handle_surface_list(s, m, batch, offsetof(Backend, resource_templates), "resourceTemplates");
        if (streq(m->method, "prompts/list"))
                return handle_surface_list(s, m, batch, offsetof(Backend, prompts), "prompts");
        if (streq(m->method, "resources/read") || streq(m->method, "resources/subscribe") ||
            streq(m->method, "resources/unsubscribe"))
                return route_by(s, m, batch, uri ? param_has_nul(m, "uri") : 0,
                                uri ? manifest_find_resource_backend(s->manifest, uri) : NULL, "resource", uri);
        if (streq(m->method, "prompts/get"))
                return route_by(s, m, batch, name ? param_has_nul(m, "name") : 0,
                                name ? manifest_find_prompt_backend(s->manifest, name) : NULL, "prompt", name);
        if (streq(m->method, "completion/complete"))
                return handle_completion(s, m, batch);
        if (strncmp(m->method, "tasks/", 6) == 0)
                return handle_task(s, m, batch);
        if (streq(m->method, "logging/setLevel"))
                return handle_set_level(s, m, batch);
        handle_core_request(s, m, batch);
}

static void handle_core_request(Session *s, Message *m, Batch *batch) {
        if (handle_basic_request(s, m, batch))
                return;
        if (streq(m->method, "tools/call"))
                handle_tools_call(s, m, batch);
        else
                reply_error(s, batch, message_id_json(m), JSONRPC_METHOD_NOT_FOUND, "Method not found: '%.200s'",
                            m->method);
}

/* The client stopped waiting: the backend hears of it, and a late answer is dropped here. */
static void handle_cancelled(Session *s, Message *m) {
        IdField f[2];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));
        _cleanup_free_ char *key = n == 1 ? strndup(f[0].text, f[0].len) : NULL;
        Pending *p = key ? hashmap_get(s->pending, key) : NULL;

        if (key && modern_cancel(s, key))
                return;
        if (!p)
                return;
        upstream_cancel(s, p, m);
        batch_member_done(s, pending_forget(s, p));
}

static void handle_notification(Session *s, Message *m) {
        if (streq(m->method, "notifications/cancelled"))
                return handle_cancelled(s, m);
        if (streq(m->method, "notifications/roots/list_changed"))
                return upstream_broadcast_text(s, m->text, m->len);
        /* notifications/initialized and anything we do not know: nothing to do, and never an answer. */
        log_debug("Notification '%s' from the client.", m->method);
}

/* A client's answer to a backend's request that breaks the rules, or cannot be read: that request fails
 * saying why, rather than wait for ever (an error to the client's own answer would help nobody). A line
 * with a "method" is no answer; an id with a NUL in it ("...:3\u0000x") is none of ours. True when the
 * line was such an answer. */
static bool client_bad_answer(Session *s, const char *line, size_t len, const char *problem) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_answer_id(line, len);
        char text[256];

        if (!id)
                return false;
        snprintf(text, sizeof text, "the client's answer was invalid (%s)", problem);
        return upstream_fail_upcall(s, id, text);
}

static void handle_message(Session *s, Message *m, Batch *batch) {
        switch (m->kind) {
        case JSONRPC_REQUEST:
                return handle_request(s, m, batch);
        case JSONRPC_NOTIFICATION:
                return handle_notification(s, m);
        case JSONRPC_RESPONSE:
                if (!upstream_answer_upcall(s, m))
                        log_debug("Dropping a response to a request mcp-lazy never sent.");
                return;
        case JSONRPC_INVALID:
                if (client_bad_answer(s, m->text, m->len, m->problem))
                        return;
                return reply_error(s, batch, message_id_json(m), JSONRPC_INVALID_REQUEST, "Invalid Request: %s",
                                   m->problem);
        }
}

static void parse_error(Session *s, Batch *batch, int r) {
        if (r == -E2BIG)
                return reply_error(s, batch, NULL, JSONRPC_INVALID_REQUEST,
                                   "Invalid Request: JSON nested deeper than %u levels", JSONRPC_DEFAULT_MAX_DEPTH);
        if (r == -ENOMEM)
                return reply_error(s, batch, NULL, JSONRPC_INTERNAL_ERROR, "out of memory");
        reply_error(s, batch, NULL, JSONRPC_PARSE_ERROR, "Parse error: a message must be one line of valid UTF-8 JSON");
}

/* Each member is a message of its own: parsed and checked like a line. */
static void handle_batch(Session *s, const char *line, size_t len) {
        _cleanup_free_ Span *spans = NULL;
        size_t n;
        Batch *b;
        int r;

        r = message_split_batch(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &spans, &n);
        if (r < 0)
                return parse_error(s, NULL, r);
        if (!s->batches_allowed)
                return reply_error(
                        s, NULL, NULL, JSONRPC_INVALID_REQUEST,
                        "Invalid Request: JSON-RPC batches are only allowed with protocol version 2025-03-26");
        if (n == 0)
                return reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST, "Invalid Request: empty batch");
        /* Each member's answer is held until the last: 2 million "{}" in 6 MB took 1.9 GB. */
        if (n > SESSION_MAX_BATCH)
                return reply_error(s, NULL, NULL, JSONRPC_INVALID_REQUEST,
                                   "Invalid Request: a batch of %zu messages; at most %u, send more batches", n,
                                   SESSION_MAX_BATCH);
        b = calloc(1, sizeof *b);
        if (!b || !(b->responses = cJSON_CreateArray())) {
                free(b);
                return reply_error(s, NULL, NULL, JSONRPC_INTERNAL_ERROR, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
                _cleanup_message_ Message *m = NULL;

                r = message_parse_envelope(line + spans[i].start, spans[i].len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
                if (r < 0)
                        parse_error(s, b, r);
                else if (m->kind == JSONRPC_REQUEST && streq(m->method, "initialize"))
                        reply_error(s, b, message_id_json(m), JSONRPC_INVALID_REQUEST,
                                    "Invalid Request: initialize must not be part of a batch");
                else
                        handle_message(s, m, b);
        }
        b->sealed = true;
        batch_maybe_finish(s, b);
}

void session_handle_line(Session *s, const char *line, size_t len) {
        _cleanup_message_ Message *m = NULL;
        int r;

        if (message_is_batch(line, len))
                return handle_batch(s, line, len);
        /* The envelope alone: whatever reads params builds the tree (handle_request()). */
        r = message_parse_envelope(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &m);
        if (r < 0 && client_bad_answer(s, line, len,
                                       r == -E2BIG    ? "JSON nested too deeply"
                                       : r == -ENOMEM ? "out of memory reading it"
                                                      : "not one line of valid UTF-8 JSON"))
                return;
        if (r < 0)
                return parse_error(s, NULL, r);
        handle_message(s, m, NULL);
}

/* A line past the limit: refused under its own id when its beginning shows one. */
static void reply_oversize(Session *s, const char *line, size_t len) {
        _cleanup_json_ cJSON *id = jsonrpc_peek_id_raw(line, len), *parsed = NULL;
        char text[160];

        /* The client's answer to a backend's request: that request fails (an error to the client's
         * own answer would leave the backend waiting for ever). An answer as client_bad_answer() reads
         * one: no "method" however cut off or repeated, its id whole (one with \u0000 is none of ours). */
        if (id && (parsed = jsonrpc_peek_answer_id(line, len))) {
                snprintf(text, sizeof text,
                         "the client's answer was longer than the %zu-byte limit (see --max-line-bytes)",
                         s->options->max_line);
                if (upstream_fail_upcall(s, parsed, text))
                        return;
        }
        reply_error(s, NULL, id, JSONRPC_INVALID_REQUEST,
                    "Invalid Request: message longer than the %zu-byte limit (see --max-line-bytes)",
                    s->options->max_line);
}

static void on_client(Channel *c, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Session *s = userdata;

        (void) c;
        /* A line, the usual event, before the switch: its jump table is a line of .rodata on a page of
         * its own, read on every request's wakeup. */
        if (ev == CHANNEL_LINE)
                return session_handle_line(s, line, len);
        switch (ev) {
        case CHANNEL_LINE:
                break;
        case CHANNEL_OVERSIZE:
                reply_oversize(s, line, len);
                break;
        case CHANNEL_EOF:
                if (error < 0)
                        log_warning_errno(error, "Reading from the client failed: %m");
                s->input_ended = true;
                upstream_fail_upcalls(s);
                session_maybe_end(s);
                break;
        case CHANNEL_CLOSED:
        case CHANNEL_WRITE_ERROR:
                (void) sd_event_exit(s->event, 0);
                break;
        case CHANNEL_DRAINED:
                upstream_set_reading(s, true);
                break;
        }
}

int session_start(Session *s, int in_fd, int out_fd) {
        int r = channel_new(s->event, in_fd, out_fd, s->options->max_line, on_client, s, &s->client);

        if (r >= 0)
                channel_set_burst_head(s->client, SESSION_BURST_HEAD);
        return r;
}

/* The printed form of one list across the manifest, to see whether a reload changed it. */
char *session_surface_print(const Manifest *m, size_t offset) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();

        if (!a)
                return NULL;
        for (size_t i = 0; offset == (size_t) -1 && i < m->n_tools; i++)
                cJSON_AddItemReferenceToArray(a, m->tools[i].json);
        for (size_t i = 0; offset != (size_t) -1 && i < m->n_backends; i++) {
                const cJSON *it, *l = backend_list(&m->backends[i], offset);
                cJSON_ArrayForEach (it, l)
                        cJSON_AddItemReferenceToArray(a, (cJSON *) it);
        }
        return cJSON_PrintUnformatted(a);
}

static void notify_if_changed(Session *s, const uint64_t old[2], const uint64_t new[2], bool notifies,
                              const char *method) {
        _cleanup_json_ cJSON *n = NULL;

        if ((old[0] == new[0] && old[1] == new[1]) || !notifies)
                return;
        n = jsonrpc_notification_new(method, NULL);
        if (n && s->protocol_version)
                session_send(s, n);
        modern_list_changed(s, method);
}

int session_load_manifest(const Options *o, Manifest **ret, struct stat *ret_st, char **ret_error) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        int r = ret_st ? manifest_load_file_stat(o->manifest_path, &m, ret_st, ret_error)
                       : manifest_load_file(o->manifest_path, &m, ret_error);

        if (r < 0)
                return r;
        if (o->backend && manifest_restrict(m, o->backend) < 0) {
                _cleanup_free_ char *names = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&names, &len);

                for (size_t i = 0; f && i < m->n_backends; i++)
                        fprintf(f, "%s%s", i ? ", " : "", m->backends[i].name);
                if (f)
                        fclose(f);
                if (asprintf(ret_error, "%s: no backend '%s' in this manifest (it has: %s)", o->manifest_path,
                             o->backend, names && *names ? names : "none") < 0)
                        *ret_error = NULL;
                return -ENOENT;
        }
        *ret = TAKE_PTR(m);
        return 0;
}

/* What the session serves now, for a reload to compare: all changed if it cannot be said. */
static void session_surfaces(Session *s, const Manifest *m, const Answers *a, Surfaces *ret) {
        if (a)
                *ret = *answers_surfaces(a);
        else if (!m || surfaces_from_manifest(m, ret) < 0) {
                /* Distinct for each call (old and new are two locals): every list counts as changed. */
                uint64_t mark = (uint64_t) (uintptr_t) ret;
                log_oom();
                *ret = (Surfaces){.tools = {mark},
                                  .resources = {mark},
                                  .prompts = {mark},
                                  .notify_tools = true,
                                  .notify_resources = true,
                                  .notify_prompts = true};
        }
}

void session_reload(Session *s) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_(answers_freep) Answers *a = NULL;
        Surfaces old, new;
        int r = answers_open(s->options, &m, &a, &err);

        if (r < 0) {
                log_error("Manifest changed but cannot be used, keeping the one in force: %s", err ?: strerror(-r));
                return;
        }
        session_surfaces(s, s->manifest, s->answers, &old);
        session_surfaces(s, m, a, &new);
        manifest_free(s->manifest);
        s->manifest = TAKE_PTR(m);
        session_set_answers(s, TAKE_PTR(a));
        notify_if_changed(s, old.tools, new.tools, new.notify_tools, "notifications/tools/list_changed");
        notify_if_changed(s, old.resources, new.resources, new.notify_resources,
                          "notifications/resources/list_changed");
        notify_if_changed(s, old.prompts, new.prompts, new.notify_prompts, "notifications/prompts/list_changed");
        if (s->manifest)
                log_info("Reloaded %s: %zu backends, %zu tools.", s->options->manifest_path, s->manifest->n_backends,
                         s->manifest->n_tools);
        else
                log_info("Reloaded %s: %zu tools (prepared answers).", s->options->manifest_path,
                         answers_n_tools(s->answers));
}

static void on_manifest_changed(void *userdata) {
        session_reload(userdata);
}

/* inotify while the user has instances left (Linux gives 128 by default, one per frontend), else
 * the stat timer: a thousand frontends of one user all get reloads. */
int session_watch_manifest(Session *s) {
        return file_watch_new(s->event, s->options->manifest_path, on_manifest_changed, s, &s->watch);
}
