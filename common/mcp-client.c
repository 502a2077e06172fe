/* The MCP client import and refresh use: one server on a child's stdio, driven step by step on sd-event. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-event.h>

#include "channel.h"
#include "era.h"
#include "framing.h"
#include "jsonrpc.h"
#include "macros.h"
#include "mcp-client.h"
#include "printable.h"

#ifndef MCP_LAZY_VERSION
#define MCP_LAZY_VERSION "0"
#endif

#define PROTOCOL_VERSION "2025-11-25"
#define STDERR_KEEP      (16U * 1024U)
#define PROBE_USEC       (2ULL * 1000000ULL) /* as the shim waits for server/discover */

typedef enum Step {
        STEP_PROBE, /* server/discover */
        STEP_INITIALIZE,
        STEP_TOOLS,
        STEP_RESOURCES,
        STEP_TEMPLATES,
        STEP_PROMPTS,
        STEP_DONE,
} Step;

static const struct {
        const char *method, *capability, *result_key;
} steps[] = {
        [STEP_TOOLS] = {"tools/list", "tools", "tools"},
        [STEP_RESOURCES] = {"resources/list", "resources", "resources"},
        [STEP_TEMPLATES] = {"resources/templates/list", "resources", "resourceTemplates"},
        [STEP_PROMPTS] = {"prompts/list", "prompts", "prompts"},
};

typedef struct Client {
        sd_event *event;
        Channel *channel;
        sd_event_source *stderr_source, *timer;
        int stderr_fd;
        char stderr_tail[STDERR_KEEP];
        size_t stderr_len;
        Step step;
        int64_t next_id, waiting_id;
        unsigned pages;
        char *cursor;
        const cJSON *client_capabilities;
        uint64_t timeout_usec;
        McpDiscovery *d;
        int result;
        char *error;
        const char *lost_during; /* the method it stopped answering in, when its stdio went away */
        McpEra era;
        bool modern;          /* it answered server/discover: lists are asked with the envelope */
        bool died_on_probe;   /* it went away on server/discover: started again for initialize */
        bool via_ssh;         /* its command is ssh: a line before its first answer may be the login's */
        sd_event_source *probe_timer;
} Client;

static const char *step_method(const Client *c) {
        return c->step == STEP_PROBE ? "server/discover" : c->step == STEP_INITIALIZE ? "initialize" : steps[c->step].method;
}

McpDiscovery *mcp_discovery_free(McpDiscovery *d) {
        if (!d)
                return NULL;
        cJSON_Delete(d->server_info);
        free(d->instructions);
        cJSON_Delete(d->capabilities);
        free(d->protocol_version);
        cJSON_Delete(d->tools);
        cJSON_Delete(d->resources);
        cJSON_Delete(d->resource_templates);
        cJSON_Delete(d->prompts);
        free(d);
        return NULL;
}

_printf_(3, 4) static void client_fail(Client *c, int r, const char *fmt, ...) {
        va_list ap;

        if (c->result < 0)
                return; /* the first failure is the one to report */
        c->result = r;
        va_start(ap, fmt);
        if (vasprintf(&c->error, fmt, ap) < 0)
                c->error = NULL;
        va_end(ap);
        (void) sd_event_exit(c->event, 0);
}

static cJSON **step_list(Client *c, Step s) {
        switch (s) {
        case STEP_TOOLS:
                return &c->d->tools;
        case STEP_RESOURCES:
                return &c->d->resources;
        case STEP_TEMPLATES:
                return &c->d->resource_templates;
        case STEP_PROMPTS:
                return &c->d->prompts;
        default:
                return NULL;
        }
}

static int client_send_request(Client *c, const char *method, cJSON *params) {
        _cleanup_json_ cJSON *id = cJSON_CreateNumber((double) c->next_id), *m = NULL;

        if (!id) {
                cJSON_Delete(params);
                return -ENOMEM;
        }
        m = jsonrpc_request_new(id, method, params);
        if (!m)
                return -ENOMEM;
        c->waiting_id = c->next_id++;
        return channel_send_json(c->channel, m);
}

/* {_meta: the 2026-07-28 envelope}, for a modern server's requests. */
static cJSON *envelope_params_new(const cJSON *client_capabilities) {
        _cleanup_json_ cJSON *p = cJSON_CreateObject();
        cJSON *meta = p ? cJSON_AddObjectToObject(p, "_meta") : NULL, *info;

        if (!meta || !cJSON_AddStringToObject(meta, META_PROTOCOL_VERSION, ERA_MODERN_VERSION) ||
            !cJSON_AddItemToObject(meta, META_CLIENT_CAPABILITIES,
                                   client_capabilities ? cJSON_Duplicate(client_capabilities, true)
                                                       : cJSON_CreateObject()) ||
            !(info = cJSON_AddObjectToObject(meta, META_CLIENT_INFO)) ||
            !cJSON_AddStringToObject(info, "name", "mcp-lazy-import") ||
            !cJSON_AddStringToObject(info, "version", MCP_LAZY_VERSION))
                return NULL;
        return TAKE_PTR(p);
}

/* Sends the request of the current step (or the next page of it); skips lists the server does not declare. */
static void client_advance(Client *c) {
        int r;

        for (; c->step < STEP_DONE; c->step++, c->pages = 0) {
                cJSON *params;

                if (!cJSON_GetObjectItemCaseSensitive(c->d->capabilities, steps[c->step].capability))
                        continue;
                params = c->modern ? envelope_params_new(c->client_capabilities) : cJSON_CreateObject();
                if (!params || (c->cursor && !cJSON_AddStringToObject(params, "cursor", c->cursor))) {
                        cJSON_Delete(params);
                        return client_fail(c, -ENOMEM, "out of memory");
                }
                r = client_send_request(c, steps[c->step].method, params);
                if (r < 0)
                        return client_fail(c, r, "cannot send %s: %s", steps[c->step].method, strerror(-r));
                return;
        }
        if (!c->d->tools && !(c->d->tools = cJSON_CreateArray()))
                return client_fail(c, -ENOMEM, "out of memory");
        c->result = 1;
        (void) sd_event_exit(c->event, 0);
}

static int take_string(const cJSON *o, const char *key, char **ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

        if (!v)
                return 0;
        if (!cJSON_IsString(v))
                return -EPROTO;
        *ret = strdup(v->valuestring);
        return *ret ? 0 : -ENOMEM;
}

static void client_on_initialize(Client *c, cJSON *result) {
        _cleanup_json_ cJSON *note = NULL;
        cJSON *caps = cJSON_GetObjectItemCaseSensitive(result, "capabilities");
        cJSON *info = cJSON_GetObjectItemCaseSensitive(result, "serverInfo");
        int r;

        if (!cJSON_IsObject(caps) || !cJSON_IsObject(info))
                return client_fail(c, -EPROTO, "its initialize result has no capabilities or serverInfo object");
        r = take_string(result, "instructions", &c->d->instructions);
        if (r >= 0)
                r = take_string(result, "protocolVersion", &c->d->protocol_version);
        if (r < 0)
                return client_fail(c, r, "its initialize result is not valid MCP (instructions or protocolVersion)");
        c->d->capabilities = cJSON_DetachItemViaPointer(result, caps);
        c->d->server_info = cJSON_DetachItemViaPointer(result, info);
        c->d->era = "legacy";

        note = jsonrpc_notification_new("notifications/initialized", NULL);
        if (!note)
                return client_fail(c, -ENOMEM, "out of memory");
        r = channel_send_json(c->channel, note);
        if (r < 0)
                return client_fail(c, r, "cannot send notifications/initialized: %s", strerror(-r));
        c->step = STEP_TOOLS;
        client_advance(c);
}

static void client_on_list(Client *c, cJSON *result) {
        const char *method = steps[c->step].method;
        cJSON **list = step_list(c, c->step), *items, *it, *next;

        items = cJSON_GetObjectItemCaseSensitive(result, steps[c->step].result_key);
        if (!cJSON_IsArray(items))
                return client_fail(c, -EPROTO, "its %s result has no '%s' list", method, steps[c->step].result_key);
        if (!*list && !(*list = cJSON_CreateArray()))
                return client_fail(c, -ENOMEM, "out of memory");
        while ((it = items->child)) {
                if (cJSON_GetArraySize(*list) >= (int) MCP_CLIENT_MAX_ITEMS)
                        return client_fail(c, -E2BIG, "its %s lists more than %u entries", method,
                                           MCP_CLIENT_MAX_ITEMS);
                if (!cJSON_IsObject(it))
                        return client_fail(c, -EPROTO, "its %s result lists something that is not an object", method);
                cJSON_AddItemToArray(*list, cJSON_DetachItemViaPointer(items, it));
        }
        next = cJSON_GetObjectItemCaseSensitive(result, "nextCursor");
        free(c->cursor);
        c->cursor = NULL;
        if (cJSON_IsString(next)) {
                if (++c->pages >= MCP_CLIENT_MAX_PAGES)
                        return client_fail(c, -E2BIG, "its %s goes on past %u pages", method, MCP_CLIENT_MAX_PAGES);
                c->cursor = strdup(next->valuestring);
                if (!c->cursor)
                        return client_fail(c, -ENOMEM, "out of memory");
        } else
                c->step++, c->pages = 0;
        client_advance(c);
}

/* Requests from the server: ping answered, roots/list with none, anything else refused. */
static void client_answer(Client *c, const JsonRpcMessage *msg) {
        _cleanup_json_ cJSON *reply = NULL;

        if (streq(msg->method, "ping"))
                reply = jsonrpc_result_new(msg->id, cJSON_CreateObject());
        else if (streq(msg->method, "roots/list")) {
                cJSON *res = cJSON_CreateObject();
                if (res && !cJSON_AddArrayToObject(res, "roots"))
                        res = (cJSON_Delete(res), NULL);
                reply = jsonrpc_result_new(msg->id, res);
        } else
                reply = jsonrpc_error_new(msg->id, JSONRPC_METHOD_NOT_FOUND,
                                          "mcp-lazy import only reads what the server lists; it answers no requests");
        if (reply)
                (void) channel_send_json(c->channel, reply);
}

static int send_initialize(Client *c) {
        _cleanup_json_ cJSON *params = cJSON_CreateObject();
        cJSON *info;

        c->step = STEP_INITIALIZE;
        c->probe_timer = sd_event_source_disable_unref(c->probe_timer);
        if (!params || !cJSON_AddStringToObject(params, "protocolVersion", PROTOCOL_VERSION) ||
            !cJSON_AddItemToObject(params, "capabilities",
                                   c->client_capabilities ? cJSON_Duplicate(c->client_capabilities, true)
                                                          : cJSON_CreateObject()) ||
            !(info = cJSON_AddObjectToObject(params, "clientInfo")) ||
            !cJSON_AddStringToObject(info, "name", "mcp-lazy-import") ||
            !cJSON_AddStringToObject(info, "version", MCP_LAZY_VERSION))
                return -ENOMEM;
        return client_send_request(c, "initialize", TAKE_PTR(params));
}

static bool speaks_modern(const cJSON *result) {
        const cJSON *v;
        cJSON_ArrayForEach (v, cJSON_GetObjectItemCaseSensitive(result, "supportedVersions"))
                if (streq(cJSON_GetStringValue(v) ?: "", ERA_MODERN_VERSION))
                        return true;
        return false;
}

/* The answer to server/discover: a modern server's DiscoverResult stands for initialize's; anything
 * else means the handshake era (unless only the modern era was asked for). */
static void client_on_probe(Client *c, cJSON *j) {
        cJSON *result = cJSON_GetObjectItemCaseSensitive(j, "result");
        cJSON *caps = cJSON_GetObjectItemCaseSensitive(result, "capabilities");
        cJSON *info = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(result, "_meta"),
                                                       META_SERVER_INFO);
        int r;

        c->probe_timer = sd_event_source_disable_unref(c->probe_timer);
        if (!cJSON_IsObject(result) || !speaks_modern(result)) {
                if (c->era == MCP_ERA_MODERN || (cJSON_IsObject(result) &&
                                                 cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(result, "supportedVersions"))))
                        return client_fail(c, -EPROTO, "it did not answer server/discover as a %s server",
                                           ERA_MODERN_VERSION);
                r = send_initialize(c);
                if (r < 0)
                        client_fail(c, r, "cannot send initialize: %s", strerror(-r));
                return;
        }
        if (!cJSON_IsObject(caps))
                return client_fail(c, -EPROTO, "its server/discover result has no capabilities object");
        r = take_string(result, "instructions", &c->d->instructions);
        if (r < 0)
                return client_fail(c, r, "its server/discover result is not valid MCP (instructions)");
        c->d->capabilities = cJSON_DetachItemViaPointer(result, caps);
        c->d->server_info = cJSON_IsObject(info) ? cJSON_Duplicate(info, true) : cJSON_CreateObject();
        c->d->protocol_version = strdup(ERA_MODERN_VERSION);
        if (!c->d->server_info || !c->d->protocol_version)
                return client_fail(c, -ENOMEM, "out of memory");
        c->d->era = "modern";
        c->modern = true;
        c->step = STEP_TOOLS;
        client_advance(c);
}

static int on_probe_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Client *c = userdata;
        int r;

        (void) s, (void) usec;
        /* No answer in time: a handshake-era server (the spec); initialize on the same pipe. */
        if (c->step == STEP_PROBE && (r = send_initialize(c)) < 0)
                client_fail(c, r, "cannot send initialize: %s", strerror(-r));
        return 0;
}

static void client_on_message(Client *c, const char *line, size_t len) {
        _cleanup_json_ cJSON *j = NULL;
        const cJSON *error;
        JsonRpcMessage msg;
        int r;

        r = jsonrpc_parse(line, len, JSONRPC_DEFAULT_MAX_DEPTH, &j);
        if (r == -E2BIG)
                return client_fail(c, r, "it sent a message nested deeper than %u levels", JSONRPC_DEFAULT_MAX_DEPTH);
        if (r < 0) {
                _cleanup_free_ char *quote = text_printable_n(line, len, 80);
                return client_fail(
                        c, -EPROTO, "it wrote something that is not JSON-RPC on stdout: '%s'%s", quote ?: "?",
                        c->via_ssh && c->step <= STEP_INITIALIZE ? SSH_LOGIN_NOISE_SUFFIX : "");
        }
        msg = jsonrpc_classify(j);
        if (msg.kind == JSONRPC_REQUEST)
                return client_answer(c, &msg);
        if (msg.kind != JSONRPC_RESPONSE)
                return; /* notifications (logging, progress) and oddities: not ours to act on */
        if (!cJSON_IsNumber(msg.id) || (int64_t) msg.id->valuedouble != c->waiting_id)
                return;
        c->waiting_id = -1;
        if (c->step == STEP_PROBE)
                return client_on_probe(c, j);
        error = cJSON_GetObjectItemCaseSensitive(j, "error");
        if (error) {
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(error, "message");
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
                return client_fail(c, -EPROTO, "it answered %s with error %d: %s", step_method(c),
                                   cJSON_IsNumber(code) ? code->valueint : 0,
                                   cJSON_IsString(m) ? m->valuestring : "(no message)");
        }
        cJSON *result = cJSON_GetObjectItemCaseSensitive(j, "result");
        if (!cJSON_IsObject(result))
                return client_fail(c, -EPROTO, "its answer has no result object");
        if (c->step == STEP_INITIALIZE)
                client_on_initialize(c, result);
        else
                client_on_list(c, result);
}

static void on_channel(Channel *ch, ChannelEvent ev, const char *line, size_t len, int error, void *userdata) {
        Client *c = userdata;

        (void) ch;
        switch (ev) {
        case CHANNEL_LINE:
                client_on_message(c, line, len);
                break;
        case CHANNEL_OVERSIZE:
                client_fail(c, -E2BIG, "it wrote a message longer than %u bytes", FRAMING_DEFAULT_MAX_LINE);
                break;
        case CHANNEL_EOF:
        case CHANNEL_WRITE_ERROR:
                /* Said once it is known how it ended (see mcp_discover()). */
                if (c->result == 0 && c->step == STEP_PROBE && c->era == MCP_ERA_AUTO) {
                        /* Some handshake-era servers exit on any request before initialize. */
                        c->died_on_probe = true;
                        (void) sd_event_exit(c->event, 0);
                        break;
                }
                if (c->result == 0 && !c->lost_during)
                        c->lost_during = step_method(c);
                client_fail(c, -EPROTO, "its stdio closed");
                break;
        default:
                break;
        }
}

/* Reads what stderr holds now into the tail; returns 0 at EOF or error, 1 if more may come. */
static int stderr_read(Client *c) {
        char buf[4096];
        ssize_t n = read(c->stderr_fd, buf, sizeof buf);

        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 1;
        if (n <= 0)
                return 0;
        text_tail_append(c->stderr_tail, &c->stderr_len, STDERR_KEEP, buf, (size_t) n);
        return n == sizeof buf ? 2 : 1;
}

static int on_stderr(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Client *c = userdata;

        (void) fd, (void) revents;
        if (stderr_read(c) == 0)
                c->stderr_source = sd_event_source_disable_unref(s);
        return 0;
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Client *c = userdata;
        char t[64];

        (void) s, (void) usec;
        if (c->timeout_usec % USEC_PER_SEC == 0)
                snprintf(t, sizeof t, "%llus", (unsigned long long) (c->timeout_usec / USEC_PER_SEC));
        else
                snprintf(t, sizeof t, "%llums", (unsigned long long) (c->timeout_usec / USEC_PER_MSEC));
        client_fail(c, -ETIMEDOUT, "it did not answer %s within %s", step_method(c), t);
        return 0;
}

static const char *const unset_vars[] = {
        "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", NULL};

_noreturn_ static void child_exec(const McpServerCommand *cmd, int in, int out, int err, int err_fd) {
        sigset_t none;
        int e;

        (void) setsid(); /* its own process group: stopping it reaches whatever it started */
        if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)
                goto fail;
        if (cmd->cwd && chdir(cmd->cwd) < 0)
                goto fail;
        for (const char *const *v = unset_vars; *v; v++)
                (void) unsetenv(*v);
        for (char **v = cmd->env; v && *v; v++)
                if (putenv(*v) < 0)
                        goto fail;
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
        (void) signal(SIGPIPE, SIG_DFL);
        execvp(cmd->argv[0], cmd->argv);
fail:
        e = errno;
        (void) !write(err_fd, &e, sizeof e);
        _exit(127);
}

/* fork/exec with pipes for stdin, stdout and stderr; an exec failure comes back through a CLOEXEC pipe. */
static int spawn(const McpServerCommand *cmd, pid_t *ret_pid, int fds[3]) {
        _cleanup_close_ int in_r = -EBADF, in_w = -EBADF, out_r = -EBADF, out_w = -EBADF, err_r = -EBADF,
                            err_w = -EBADF, e_r = -EBADF, e_w = -EBADF;
        int p[2], child_errno = 0;
        ssize_t n;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        in_r = p[0], in_w = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        out_r = p[0], out_w = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        err_r = p[0], err_w = p[1];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        e_r = p[0], e_w = p[1];

        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0)
                child_exec(cmd, in_r, out_w, err_w, e_w);
        e_w = safe_close(e_w);
        do
                n = read(e_r, &child_errno, sizeof child_errno);
        while (n < 0 && errno == EINTR);
        if (n == sizeof child_errno) {
                (void) waitpid(pid, NULL, 0);
                return -child_errno;
        }
        if (fcntl(err_r, F_SETFL, O_NONBLOCK) < 0) {
                (void) kill(-pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                return -errno;
        }
        *ret_pid = pid;
        fds[0] = TAKE_FD(in_w);
        fds[1] = TAKE_FD(out_r);
        fds[2] = TAKE_FD(err_r);
        return 0;
}

static int wait_exit(pid_t pid, uint64_t usec, int *ret_status) {
        struct timespec step = {0, 10 * 1000 * 1000};

        for (uint64_t waited = 0;; waited += 10 * USEC_PER_MSEC) {
                pid_t r = waitpid(pid, ret_status, WNOHANG);
                if (r == pid)
                        return 1;
                if (r < 0)
                        return -errno;
                if (waited >= usec)
                        return 0;
                (void) nanosleep(&step, NULL);
        }
}

/* stdin is closed already: give it 2 s to exit by itself, then SIGTERM to the group, 3 s more, then
 * SIGKILL. Whatever is left of the group afterwards (an npx's child) gets SIGKILL too. */
static int stop_server(pid_t pid, char *how, size_t how_size) {
        int status = 0, r;

        r = wait_exit(pid, 2 * USEC_PER_SEC, &status);
        if (r == 0) {
                (void) kill(-pid, SIGTERM);
                r = wait_exit(pid, 3 * USEC_PER_SEC, &status);
        }
        if (r == 0) {
                (void) kill(-pid, SIGKILL);
                r = wait_exit(pid, USEC_INFINITY, &status);
        }
        (void) kill(-pid, SIGKILL);
        if (r < 0)
                return r;
        if (WIFEXITED(status))
                snprintf(how, how_size, "exited with status %d", WEXITSTATUS(status));
        else
                snprintf(how, how_size, "was killed by signal %s%s", sigabbrev_np(WTERMSIG(status)) ?: "?",
                         WCOREDUMP(status) ? " (core dumped)" : "");
        return 0;
}

/* The last MCP_CLIENT_STDERR_LINES lines of stderr, each prefixed with "  | ". */
static char *stderr_lines(Client *c) {
        size_t len = c->stderr_len, start;
        unsigned lines = 0;
        char *out, *o;

        while (len > 0 && (c->stderr_tail[len - 1] == '\n' || c->stderr_tail[len - 1] == '\r'))
                len--;
        if (len == 0)
                return NULL;
        for (start = len; start > 0; start--)
                if (c->stderr_tail[start - 1] == '\n' && ++lines == MCP_CLIENT_STDERR_LINES)
                        break;
        out = o = malloc((len - start) * 2 + 16 * (MCP_CLIENT_STDERR_LINES + 1));
        if (!out)
                return NULL;
        o = stpcpy(o, "  | ");
        for (size_t i = start; i < len; i++) {
                unsigned char ch = (unsigned char) c->stderr_tail[i];
                if (ch == '\n')
                        o = stpcpy(o, "\n  | ");
                else if (ch == '\t' || ch >= 0x20 || ch == 0x1b)
                        *o++ = (char) ch;
        }
        *o = 0;
        return out;
}

int mcp_discover(const McpServerCommand *cmd, const cJSON *client_capabilities, uint64_t timeout_usec,
                 McpDiscovery **ret, char **ret_error) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_free_ char *tail = NULL;
        _cleanup_json_ cJSON *params = NULL;
        Client c = {.stderr_fd = -EBADF, .next_id = 1, .waiting_id = -1, .timeout_usec = timeout_usec,
                    .era = cmd->era, .client_capabilities = client_capabilities};
        int fds[3] = {-EBADF, -EBADF, -EBADF}, r;
        char how[96] = "";
        pid_t pid = 0;

        *ret_error = NULL;
        c.d = calloc(1, sizeof *c.d);
        if (!c.d)
                return -ENOMEM;
        r = spawn(cmd, &pid, fds);
        if (r < 0) {
                mcp_discovery_free(c.d);
                if (asprintf(ret_error, "cannot start %s%s%s: %s", cmd->argv[0], cmd->cwd ? " in " : "", cmd->cwd ?: "",
                             strerror(-r)) < 0)
                        *ret_error = NULL;
                return r;
        }
        c.stderr_fd = fds[2];
        c.via_ssh = command_is_ssh(cmd->argv[0]);

        r = sd_event_new(&e);
        if (r >= 0) {
                c.event = e;
                r = channel_new(e, fds[1], fds[0], FRAMING_DEFAULT_MAX_LINE, on_channel, &c, &c.channel);
                fds[0] = fds[1] = -EBADF; /* the channel owns them now, also on failure */
        }
        if (r >= 0)
                channel_set_backpressure(c.channel, false);
        if (r >= 0)
                r = sd_event_add_io(e, &c.stderr_source, c.stderr_fd, EPOLLIN, on_stderr, &c);
        if (r >= 0 && timeout_usec != USEC_INFINITY)
                r = sd_event_add_time_relative(e, &c.timer, CLOCK_MONOTONIC, timeout_usec, 0, on_timeout, &c);

        /* As a dual-era client: server/discover first (with the envelope), unless told the era. */
        if (r >= 0 && cmd->era == MCP_ERA_LEGACY)
                r = send_initialize(&c);
        else if (r >= 0) {
                c.step = STEP_PROBE;
                params = envelope_params_new(client_capabilities);
                r = params ? client_send_request(&c, "server/discover", TAKE_PTR(params)) : -ENOMEM;
                if (r >= 0 && cmd->era == MCP_ERA_AUTO)
                        r = sd_event_add_time_relative(e, &c.probe_timer, CLOCK_MONOTONIC,
                                                       timeout_usec < PROBE_USEC ? timeout_usec : PROBE_USEC, 0,
                                                       on_probe_timeout, &c);
        }
        if (r >= 0)
                r = sd_event_loop(e);
        if (r < 0 && c.result >= 0)
                client_fail(&c, r, "mcp-lazy failed to talk to it: %s", strerror(-r));

        /* Stop it: stdin closed first (freeing the channel closes both pipes), then signals. */
        c.channel = channel_free(c.channel);
        safe_close(fds[0]);
        safe_close(fds[1]);
        c.timer = sd_event_source_disable_unref(c.timer);
        c.probe_timer = sd_event_source_disable_unref(c.probe_timer);
        (void) stop_server(pid, how, sizeof how);
        /* Whatever it wrote to stderr until it went (a full buffer's worth means: read on). */
        if (c.stderr_source)
                while (stderr_read(&c) == 2)
                        ;
        c.stderr_source = sd_event_source_disable_unref(c.stderr_source);
        safe_close(c.stderr_fd);
        free(c.cursor);

        if (c.result > 0) {
                free(c.error);
                *ret = TAKE_PTR(c.d);
                return 0;
        }
        if (c.died_on_probe) {
                /* It exited on server/discover: once more, with initialize only. */
                McpServerCommand again = *cmd;
                again.era = MCP_ERA_LEGACY;
                free(c.error);
                mcp_discovery_free(c.d);
                return mcp_discover(&again, client_capabilities, timeout_usec, ret, ret_error);
        }
        tail = stderr_lines(&c);
        if (c.lost_during) {
                free(c.error);
                if (asprintf(&c.error, "it %s before answering %s", how[0] ? how : "closed its stdout", c.lost_during) <
                    0)
                        c.error = NULL;
        }
        if (asprintf(ret_error, "%s%s%s", c.error ?: "it failed", tail ? "; its stderr ended with:\n" : "",
                     tail ?: "") < 0)
                *ret_error = NULL;
        free(c.error);
        mcp_discovery_free(c.d);
        return c.result < 0 ? c.result : -EPROTO;
}
