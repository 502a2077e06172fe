/* Differential fuzz target (`make fuzz-diff-message DIFF_BASE=REV`): the message layer of REV (its
 * common/message.c, names prefixed old_ by diff-old.h) and today's, on the same input, must say the same:
 * the result at several depth limits, kind, problem, method, id (text, value, rules), every id and route
 * span, the batch split, message_find() on the paths the hops read, message_members() of the objects on
 * them, message_string() and message_key_is() on what those give. For a scanner made faster: nothing it
 * accepts, refuses or notes may change. Each side's Messages are read through its own message.h (a
 * MessageView, diff-view.c built against each): the layout of struct Message may differ. */
#include <string.h>

#include "diff-view.h"
#include "fuzz.h"
#include "macros.h"
#include "message.h"

int old_message_parse_envelope(const char *line, size_t len, unsigned max_depth, Message **ret);
Message *old_message_unref(Message *m);
int old_message_split_batch(const char *line, size_t len, unsigned max_depth, Span **ret_spans, size_t *ret_n);
bool old_message_is_batch(const char *line, size_t len);
int old_message_find(const Message *m, const char *const *path, Span *ret);
int old_message_members(const Message *m, Span object, Member **ret, size_t *ret_n);
bool old_message_key_is(const Message *m, const Member *mb, const char *name);
int old_message_string(const Message *m, Span s, char *buf, size_t size, size_t *ret_len);
bool old_message_has_envelope(const Message *m);

static bool same_text(const char *a, const char *b) {
        return (!a && !b) || (a && b && streq(a, b));
}

static bool same_span(Span a, Span b) {
        return a.start == b.start && a.len == b.len;
}

static void compare_string(const Message *a, const Message *b, Span s) {
        char ba[64], bb[64];
        size_t la = 0, lb = 0;
        int ra = old_message_string(a, s, ba, sizeof ba, &la), rb = message_string(b, s, bb, sizeof bb, &lb);

        FUZZ_ASSERT(ra == rb);
        FUZZ_ASSERT(ra < 0 || (la == lb && memcmp(ba, bb, la + 1) == 0));
}

static void compare_members(const Message *a, const Message *b, Span object) {
        static const char *const names[] = {"id", "params", "name", "_meta", "jsonrpc", "progressToken", "a"};
        _cleanup_free_ Member *ma = NULL, *mb = NULL;
        size_t na = 0, nb = 0;
        int ra = old_message_members(a, object, &ma, &na), rb = message_members(b, object, &mb, &nb);

        FUZZ_ASSERT(ra == rb);
        if (ra < 0)
                return;
        FUZZ_ASSERT(na == nb);
        for (size_t i = 0; i < na; i++) {
                FUZZ_ASSERT(same_span(ma[i].key, mb[i].key) && same_span(ma[i].member, mb[i].member) &&
                            same_span(ma[i].value, mb[i].value));
                for (size_t k = 0; k < ELEMENTSOF(names); k++)
                        FUZZ_ASSERT(old_message_key_is(a, &ma[i], names[k]) == message_key_is(b, &mb[i], names[k]));
                compare_string(a, b, ma[i].value);
        }
}

static void compare_messages(const Message *a, const Message *b) {
        static const char *const paths[][4] = {
                {NULL},
                {"params", NULL},
                {"params", "_meta", NULL},
                {"params", "arguments", NULL},
                {"result", NULL},
                {"result", "content", NULL},
                {"result", "requestState", NULL},
                {"error", NULL},
                {"error", "data", NULL},
                {"id", NULL},
                {"a", "b", NULL},
        };
        MessageView va, vb;

        old_diff_message_view(a, &va);
        diff_message_view(b, &vb);
        FUZZ_ASSERT(va.kind == vb.kind && va.len == vb.len && memcmp(va.text, vb.text, va.len + 1) == 0);
        FUZZ_ASSERT(same_text(va.problem, vb.problem));
        FUZZ_ASSERT(same_text(va.method, vb.method));
        FUZZ_ASSERT(same_text(va.id_text, vb.id_text));
        FUZZ_ASSERT(!va.id_json == !vb.id_json);
        FUZZ_ASSERT(!va.id == !vb.id);
        if (va.id) {
                FUZZ_ASSERT(va.id->type == vb.id->type);
                FUZZ_ASSERT(same_text(va.id->valuestring, vb.id->valuestring));
                FUZZ_ASSERT(va.id->valuedouble == vb.id->valuedouble ||
                            (va.id->valuedouble != va.id->valuedouble && vb.id->valuedouble != vb.id->valuedouble));
                FUZZ_ASSERT(va.id->valueint == vb.id->valueint);
        }
        if (va.id_json) {
                FUZZ_ASSERT(va.id_json->type == vb.id_json->type);
                FUZZ_ASSERT(same_text(va.id_json->valuestring, vb.id_json->valuestring));
        }
        FUZZ_ASSERT(va.id_rules == vb.id_rules);
        FUZZ_ASSERT(va.n_paths == vb.n_paths);
        for (size_t i = 0; i < va.n_paths; i++) {
                Span s = {va.spans[i].start, va.spans[i].len};
                FUZZ_ASSERT(va.spans[i].start == vb.spans[i].start && va.spans[i].len == vb.spans[i].len);
                if (i >= _ID_PATH_MAX)
                        compare_string(a, b, s);
        }
        FUZZ_ASSERT(old_message_has_envelope(a) == message_has_envelope(b));
        for (size_t k = 0; k < ELEMENTSOF(paths); k++) {
                Span sa = {}, sb = {};
                int ra = old_message_find(a, paths[k], &sa), rb = message_find(b, paths[k], &sb);
                FUZZ_ASSERT(ra == rb);
                if (ra < 0)
                        continue;
                FUZZ_ASSERT(same_span(sa, sb));
                compare_string(a, b, sa);
                if (va.text[sa.start] == '{')
                        compare_members(a, b, sa);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const unsigned depths[] = {JSONRPC_DEFAULT_MAX_DEPTH, 3, size > 0 ? data[0] % 8 : 1};
        const char *text = (const char *) data;

        FUZZ_ASSERT(old_message_is_batch(text, size) == message_is_batch(text, size));
        for (size_t d = 0; d < ELEMENTSOF(depths); d++) {
                Message *a = NULL, *b = NULL;
                _cleanup_free_ Span *ea = NULL, *eb = NULL;
                size_t na = 0, nb = 0;
                int ra = old_message_parse_envelope(text, size, depths[d], &a);
                int rb = message_parse_envelope(text, size, depths[d], &b);

                FUZZ_ASSERT(ra == rb);
                if (ra >= 0)
                        compare_messages(a, b);
                old_message_unref(a);
                message_unref(b);
                ra = old_message_split_batch(text, size, depths[d], &ea, &na);
                rb = message_split_batch(text, size, depths[d], &eb, &nb);
                FUZZ_ASSERT(ra == rb);
                FUZZ_ASSERT(ra < 0 || (na == nb && (na == 0 || memcmp(ea, eb, na * sizeof *ea) == 0)));
        }
        return 0;
}
