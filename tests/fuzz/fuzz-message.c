/* Fuzz target: one line from a peer (client or backend) through message_parse() and the id translation
 * every hop makes. Invariants: cJSON agrees with the scan; a valid message has no duplicate key; each id
 * field's bytes hold the value the tree has there; a translated line parses to the same message with only
 * the translated ids changed; an id sent on under our number and answered comes back as its exact text;
 * the envelope alone (message_parse_envelope(), the forwarding path) says the same as the full parse,
 * and its tree, built later, is the same tree. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "framing.h"
#include "fuzz.h"
#include "ids.h"
#include "macros.h"
#include "message.h"

static bool has_duplicate(const cJSON *j) {
        const cJSON *c, *d;

        if (cJSON_IsObject(j))
                for (c = j->child; c; c = c->next)
                        for (d = c->next; d; d = d->next)
                                if (streq(c->string, d->string))
                                        return true;
        for (c = j ? j->child : NULL; c; c = c->next)
                if (has_duplicate(c))
                        return true;
        return false;
}

/* No raw control character inside a string, and none but white space outside one: JSON's rule, which
 * cJSON does not keep (it takes a raw tab or \x01 in a string), so agreeing with cJSON does not show it. */
static bool controls_only_between_tokens(const char *t, size_t n) {
        bool in_string = false;

        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) t[i];
                if (in_string && c == '\\')
                        i++;
                else if (c == '"')
                        in_string = !in_string;
                else if (c < 0x20 && (in_string || (c != ' ' && c != '\t' && c != '\n' && c != '\r')))
                        return false;
        }
        return true;
}

/* Same tree, in order (cJSON_Compare() finds inf unequal to itself). */
static bool same_tree(const cJSON *a, const cJSON *b) {
        if ((a->type & 0xFF) != (b->type & 0xFF))
                return false;
        if (cJSON_IsNumber(a))
                return a->valuedouble == b->valuedouble || (isnan(a->valuedouble) && isnan(b->valuedouble));
        if (cJSON_IsString(a))
                return streq(a->valuestring, b->valuestring);
        for (a = a->child, b = b->child; a && b; a = a->next, b = b->next)
                if ((a->string || b->string) && (!a->string || !b->string || !streq(a->string, b->string)))
                        return false;
                else if (!same_tree(a, b))
                        return false;
        return !a && !b;
}

/* Replaces every id field with a value of ours: a string for even fields, an integer for odd ones. */
static int map_all(void *userdata, const IdField *f, char **ret) {
        unsigned *n = userdata, k = (*n)++;
        char *t;

        if (asprintf(&t, k % 2 ? "%u" : "\"ours-%u\"", k) < 0)
                return -ENOMEM;
        *ret = t;
        return 1;
}

static void check_fields(const Message *m) {
        IdField f[16];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));

        FUZZ_ASSERT(n <= ELEMENTSOF(f));
        for (size_t i = 0; i < n; i++) {
                _cleanup_json_ cJSON *v = cJSON_ParseWithLength(f[i].text, f[i].len);
                FUZZ_ASSERT(v && f[i].value);
                FUZZ_ASSERT(same_tree(v, f[i].value));
        }
}

static void check_translation(const Message *m) {
        _cleanup_free_ char *out = NULL;
        _cleanup_message_ Message *t = NULL;
        IdField before[16], after[16];
        size_t len, nb, na;
        unsigned counter = 0;

        FUZZ_ASSERT(ids_translate(m, map_all, &counter, &out, &len) == 0);
        nb = ids_fields(m, before, ELEMENTSOF(before));
        FUZZ_ASSERT(counter == nb);
        if (!out) {
                FUZZ_ASSERT(nb == 0 && len == m->len);
                return;
        }
        FUZZ_ASSERT(strlen(out) == len);
        /* One line stays one line (framing never hands out a '\n'; white space inside is the peer's). */
        FUZZ_ASSERT(!memchr(out, '\n', len) || memchr(m->text, '\n', m->len));
        FUZZ_ASSERT(message_parse(out, len, JSONRPC_DEFAULT_MAX_DEPTH + 1, &t) == 0);
        FUZZ_ASSERT(t->kind == m->kind);
        FUZZ_ASSERT(!m->method || streq(t->method, m->method));
        na = ids_fields(t, after, ELEMENTSOF(after));
        FUZZ_ASSERT(na == nb);
        /* Only the ids changed: put the old ones back into the new tree and it is the old tree. */
        {
                _cleanup_json_ cJSON *back = cJSON_Duplicate(t->json, true);
                FUZZ_ASSERT(back);
                for (size_t i = 0; i < nb; i++) {
                        cJSON *parent = back;
                        unsigned l = 0;
                        for (; id_paths[before[i].path][l + 1]; l++)
                                parent = cJSON_GetObjectItemCaseSensitive(parent, id_paths[before[i].path][l]);
                        FUZZ_ASSERT(parent);
                        FUZZ_ASSERT(cJSON_ReplaceItemInObjectCaseSensitive(parent, id_paths[before[i].path][l],
                                                                           cJSON_Duplicate(before[i].value, true)));
                }
                FUZZ_ASSERT(same_tree(back, m->json));
        }
}

/* The shim's trip: out under our number, the answer back under the client's exact text. */
static int map_to(void *userdata, const IdField *f, char **ret) {
        if (f->kind != ID_KIND_REQUEST)
                return 0;
        *ret = strdup(userdata);
        return *ret ? 1 : -ENOMEM;
}

static void check_round_trip(const Message *m) {
        static const char answer[] = "{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{\"n\":12345678901234567890}}";
        _cleanup_message_ Message *a = NULL, *b = NULL;
        _cleanup_free_ char *out = NULL, *back = NULL;
        size_t len;

        FUZZ_ASSERT(ids_translate(m, map_to, (void *) "42", &out, &len) == 0 && out);
        FUZZ_ASSERT(message_parse(out, len, JSONRPC_DEFAULT_MAX_DEPTH, &a) == 0);
        FUZZ_ASSERT(a->kind == JSONRPC_REQUEST && streq(a->id_text, "42"));
        message_unref(a), a = NULL;
        FUZZ_ASSERT(message_parse(answer, strlen(answer), JSONRPC_DEFAULT_MAX_DEPTH, &a) == 0);
        FUZZ_ASSERT(ids_translate(a, map_to, (void *) m->id_text, &back, &len) == 0 && back);
        FUZZ_ASSERT(message_parse(back, len, JSONRPC_DEFAULT_MAX_DEPTH, &b) == 0);
        FUZZ_ASSERT(b->kind == JSONRPC_RESPONSE && streq(b->id_text, m->id_text));
        FUZZ_ASSERT(strstr(back, "12345678901234567890}")); /* the payload as it was */
}

/* The spans the bridges keep a peer's bytes by: each holds the value cJSON has there, and an object's
 * members are its own, in order. */
static void check_members(const Message *m, Span obj, const cJSON *j, unsigned depth) {
        _cleanup_free_ Member *mb = NULL;
        const cJSON *c;
        size_t n = 0, k = 0;

        FUZZ_ASSERT(message_members(m, obj, &mb, &n) == 0);
        for (c = j->child; c; c = c->next, k++) {
                _cleanup_json_ cJSON *v = NULL;
                FUZZ_ASSERT(k < n);
                v = cJSON_ParseWithLength(m->text + mb[k].value.start, mb[k].value.len);
                FUZZ_ASSERT(v && same_tree(v, c));
                FUZZ_ASSERT(mb[k].member.start < mb[k].value.start &&
                            mb[k].value.start + mb[k].value.len == mb[k].member.start + mb[k].member.len);
                if (cJSON_IsObject(c) && depth < 3)
                        check_members(m, mb[k].value, c, depth + 1);
        }
        FUZZ_ASSERT(k == n);
}

static void check_find(const Message *m) {
        static const char *const paths[][4] = {
                {"params", NULL},
                {"result", NULL},
                {"params", "_meta", NULL},
                {"result", "requestState", NULL},
                {"params", "inputResponses", NULL},
                {"error", "code", NULL},
        };
        Span s;

        if (!cJSON_IsObject(m->json))
                return;
        FUZZ_ASSERT(message_find(m, (const char *const[]){NULL}, &s) == 0);
        check_members(m, s, m->json, 0);
        for (size_t k = 0; k < ELEMENTSOF(paths); k++) {
                const cJSON *j = m->json;
                for (size_t l = 0; j && paths[k][l]; l++)
                        j = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, paths[k][l]) : NULL;
                if (message_find(m, paths[k], &s) < 0) {
                        FUZZ_ASSERT(!j);
                        continue;
                }
                _cleanup_json_ cJSON *v = cJSON_ParseWithLength(m->text + s.start, s.len);
                FUZZ_ASSERT(j && v && same_tree(v, j));
        }
}

/* What routing reads without the tree (RoutePath) is where the tree has it, and nowhere else; the
 * envelope test agrees with era_envelope_parse()'s look into params._meta. */
static void check_route(const Message *m) {
        static const char *const paths[_ROUTE_PATH_MAX][4] = {
                [ROUTE_PATH_PARAMS_NAME] = {"params", "name"},
                [ROUTE_PATH_META_VERSION] = {"params", "_meta", "io.modelcontextprotocol/protocolVersion"},
                [ROUTE_PATH_META_CAPABILITIES] = {"params", "_meta", "io.modelcontextprotocol/clientCapabilities"},
                [ROUTE_PATH_META_CLIENT_INFO] = {"params", "_meta", "io.modelcontextprotocol/clientInfo"},
                [ROUTE_PATH_META_LOG_LEVEL] = {"params", "_meta", "io.modelcontextprotocol/logLevel"},
                [ROUTE_PATH_RESULT] = {"result"},
                [ROUTE_PATH_RESULT_TYPE] = {"result", "resultType"},
                [ROUTE_PATH_ERROR] = {"error"},
                [ROUTE_PATH_META] = {"params", "_meta"},
                [ROUTE_PATH_REQUEST_STATE] = {"params", "requestState"},
        };
        bool any = false;

        for (size_t k = 0; k < _ROUTE_PATH_MAX; k++) {
                const cJSON *j = m->json;
                for (size_t l = 0; j && paths[k][l]; l++)
                        j = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, paths[k][l]) : NULL;
                any = any || (k >= ROUTE_PATH_META_VERSION && k <= ROUTE_PATH_META_LOG_LEVEL && j);
                Span s = message_route(m, (RoutePath) k);
                if (s.len == 0) {
                        FUZZ_ASSERT(!j);
                        continue;
                }
                _cleanup_json_ cJSON *v = cJSON_ParseWithLength(m->text + s.start, s.len);
                FUZZ_ASSERT(j && v && same_tree(v, j));
                if (cJSON_IsString(j)) {
                        char buf[64];
                        size_t len;
                        int r = message_string(m, s, buf, sizeof buf, &len);
                        FUZZ_ASSERT(r == 0 || (r == -ENOBUFS && s.len > sizeof buf));
                        FUZZ_ASSERT(r < 0 || streq(buf, j->valuestring));
                } else
                        FUZZ_ASSERT(message_string(m, s, NULL, 0, NULL) == -EINVAL);
        }
        FUZZ_ASSERT(message_has_envelope(m) == any);
}

static bool same_text(const char *a, const char *b) {
        return (!a && !b) || (a && b && streq(a, b));
}

static void check_envelope(const char *text, size_t size, int r, const Message *m) {
        _cleanup_message_ Message *e = NULL;
        int k = message_parse_envelope(text, size, JSONRPC_DEFAULT_MAX_DEPTH, &e);
        IdField fm[16], fe[16];
        size_t nm, ne;

        FUZZ_ASSERT(k == r);
        if (k < 0)
                return;
        FUZZ_ASSERT(!e->json && !e->params);
        FUZZ_ASSERT(e->kind == m->kind && same_text(e->method, m->method) && same_text(e->id_text, m->id_text));
        FUZZ_ASSERT(same_text(e->problem, m->problem) && !!e->id == !!m->id &&
                    !!message_id_json(e) == !!message_id_json(m));
        for (unsigned p = 0; p < MESSAGE_PATHS; p++) {
                Span se = message_path_span(e, p), sm = message_path_span(m, p);
                FUZZ_ASSERT(se.start == sm.start && se.len == sm.len);
        }
        nm = ids_fields(m, fm, ELEMENTSOF(fm));
        ne = ids_fields(e, fe, ELEMENTSOF(fe));
        FUZZ_ASSERT(nm == ne);
        for (size_t i = 0; i < ne && i < ELEMENTSOF(fe); i++)
                FUZZ_ASSERT(fe[i].path == fm[i].path && fe[i].len == fm[i].len && !memcmp(fe[i].text, fm[i].text, fe[i].len));
        FUZZ_ASSERT(message_json(e) && same_tree(e->json, m->json));
        FUZZ_ASSERT((!e->params && !m->params) || (e->params && m->params && same_tree(e->params, m->params)));
}

static void check_line(const char *text, size_t size) {
        _cleanup_message_ Message *m = NULL;
        int r = message_parse(text, size, JSONRPC_DEFAULT_MAX_DEPTH, &m);

        check_envelope(text, size, r, m);

        if (r == -E2BIG) {
                FUZZ_ASSERT(json_text_depth(text, size) > JSONRPC_DEFAULT_MAX_DEPTH);
                return;
        }
        if (r < 0) {
                FUZZ_ASSERT(r == -EBADMSG);
                return;
        }
        /* What the scan took, cJSON took too, and UTF-8 without NUL. */
        FUZZ_ASSERT(m->json && !memchr(text, 0, size) && utf8_is_valid(text, size));
        FUZZ_ASSERT(controls_only_between_tokens(text, size));
        if (m->kind != JSONRPC_INVALID) {
                FUZZ_ASSERT(!has_duplicate(m->json));
                FUZZ_ASSERT(!m->problem);
        } else
                FUZZ_ASSERT(m->problem && !m->method);
        /* "id" twice at the top: which would the next hop read? No id is taken. */
        if (cJSON_IsObject(m->json)) {
                unsigned ids = 0;
                for (const cJSON *c = m->json->child; c; c = c->next)
                        ids += streq(c->string, "id");
                FUZZ_ASSERT(ids < 2 || (!m->id_text && !message_id_json(m)));
        }
        /* A problem goes into an error a peer reads: UTF-8, however a key it quotes was cut. */
        FUZZ_ASSERT(!m->problem || utf8_is_valid(m->problem, strlen(m->problem)));
        FUZZ_ASSERT(message_id_len(m) == (m->id_text ? strlen(m->id_text) : 0));
        if (m->kind == JSONRPC_REQUEST)
                FUZZ_ASSERT(m->method && m->id && m->id_text && message_id_json(m));
        if (m->kind == JSONRPC_NOTIFICATION)
                FUZZ_ASSERT(m->method && !m->id_text);
        /* What the scan found of the envelope, the tree has too. */
        if (m->method)
                FUZZ_ASSERT(streq(m->method, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m->json, "method"))));
        /* message_method_is() reads the method's length: the whole name, none without one. */
        FUZZ_ASSERT(m->method_len == (m->method ? strlen(m->method) : 0));
        /* The id's value, made without a parse, is the tree's. */
        if (m->id)
                FUZZ_ASSERT(same_tree(m->id, cJSON_GetObjectItemCaseSensitive(m->json, "id")));
        if (m->id_text) {
                _cleanup_json_ cJSON *v = cJSON_Parse(m->id_text);
                FUZZ_ASSERT(v && same_tree(v, cJSON_GetObjectItemCaseSensitive(m->json, "id")));
        }
        if (message_id_json(m)) {
                /* The reply to it carries the id's exact text. */
                _cleanup_json_ cJSON *e = jsonrpc_error_new(message_id_json(m), JSONRPC_INVALID_REQUEST, "x");
                _cleanup_free_ char *s = e ? cJSON_PrintUnformatted(e) : NULL;
                _cleanup_message_ Message *back = NULL;
                FUZZ_ASSERT(s);
                FUZZ_ASSERT(message_parse(s, strlen(s), JSONRPC_DEFAULT_MAX_DEPTH, &back) == 0);
                FUZZ_ASSERT(back->kind == JSONRPC_RESPONSE && streq(back->id_text, m->id_text));
        }
        check_fields(m);
        /* With a key twice, the tree has the first and the spans the last: only valid messages are routed. */
        if (m->kind != JSONRPC_INVALID)
                check_route(m);
        check_translation(m);
        if (m->kind != JSONRPC_INVALID)
                check_find(m);
        if (m->kind == JSONRPC_REQUEST)
                check_round_trip(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *text = (const char *) data;
        _cleanup_free_ Span *spans = NULL;
        size_t n;

        if (size > 1024 * 1024)
                return 0;
        if (!message_is_batch(text, size))
                check_line(text, size);
        else if (message_split_batch(text, size, JSONRPC_DEFAULT_MAX_DEPTH, &spans, &n) == 0)
                for (size_t i = 0; i < n; i++) {
                        FUZZ_ASSERT(spans[i].start + spans[i].len <= size);
                        check_line(text + spans[i].start, spans[i].len);
                }
        return 0;
}
