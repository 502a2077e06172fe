/* JSON-RPC classification and replies. */
#include <string.h>

#include "framing.h"
#include "jsonrpc.h"
#include "macros.h"
#include "tests.h"

static JsonRpcKind kind_of(const char *text) {
        _cleanup_json_ cJSON *j = cJSON_Parse(text);
        return jsonrpc_classify(j).kind;
}

static void test_classify(void) {
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}") == JSONRPC_REQUEST);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\",\"params\":{}}") == JSONRPC_REQUEST);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}") == JSONRPC_NOTIFICATION);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}") == JSONRPC_RESPONSE);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"x\"}}") == JSONRPC_RESPONSE);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{}}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"id\":1,\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":3}") == JSONRPC_INVALID);
        CHECK(kind_of("[1]") == JSONRPC_INVALID);
        /* Found by fuzzing: large ids do not survive printing through a double. */
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":999999999999999,\"method\":\"ping\"}") == JSONRPC_REQUEST);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":9007199254740991,\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("{\"jsonrpc\":\"2.0\",\"id\":9007199254740993,\"method\":\"ping\"}") == JSONRPC_INVALID);
        CHECK(kind_of("\"x\"") == JSONRPC_INVALID);
}

static void test_invalid_keeps_id(void) {
        _cleanup_json_ cJSON *j = cJSON_Parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":5}");
        JsonRpcMessage m = jsonrpc_classify(j);
        CHECK(m.kind == JSONRPC_INVALID);
        CHECK(m.id && m.id->valuedouble == 7);
        CHECK_STREQ(m.problem, "\"method\" must be a string");
}

static void test_builders(void) {
        _cleanup_json_ cJSON *id = cJSON_CreateString("x");
        _cleanup_json_ cJSON *e = jsonrpc_error_new(NULL, -32700, "Parse error");
        _cleanup_json_ cJSON *r = jsonrpc_result_new(id, tool_error_result_new("boom"));
        _cleanup_free_ char *es = cJSON_PrintUnformatted(e), *rs = cJSON_PrintUnformatted(r);
        _cleanup_free_ char *k1 = jsonrpc_id_key(id);
        _cleanup_json_ cJSON *n = cJSON_CreateNumber(42);
        _cleanup_free_ char *k2 = jsonrpc_id_key(n);

        CHECK_STREQ(es, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}");
        CHECK_STREQ(rs, "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
                        "\"boom\"}],\"isError\":true}}");
        CHECK_STREQ(k1, "s:x");
        CHECK_STREQ(k2, "n:42");
}

/* A text of ours that cut a peer's value inside a character still goes out as UTF-8: a peer drops a
 * line that is not, and the call it answers would wait for ever. */
static void test_texts_are_utf8(void) {
        static const char *const texts[] = {"cut \xc3", "cut \xe2\x82 in the middle", "\xf0\x9f\x98",
                                            "\x80\xbf\xc0\xaf\xff"};

        for (size_t i = 0; i < ELEMENTSOF(texts); i++) {
                _cleanup_json_ cJSON *id = cJSON_CreateNumber(1), *e = jsonrpc_error_new(id, -32603, texts[i]),
                                     *r = tool_error_result_new(texts[i]);
                _cleanup_free_ char *a = e ? cJSON_PrintUnformatted(e) : NULL,
                                    *b = r ? cJSON_PrintUnformatted(r) : NULL;
                CHECK(a && utf8_is_valid(a, strlen(a)) && strstr(a, "?"));
                CHECK(b && utf8_is_valid(b, strlen(b)) && strstr(b, "?"));
        }
        {
                _cleanup_json_ cJSON *id = cJSON_CreateNumber(1),
                                     *e = jsonrpc_error_new(id, -32603, "caf\xc3\xa9 \xe2\x82\xac");
                _cleanup_free_ char *a = e ? cJSON_PrintUnformatted(e) : NULL;
                CHECK(a && strstr(a, "\"caf\xc3\xa9 \xe2\x82\xac\"")); /* valid text as it is */
        }
}

int main(void) {
        test_classify();
        test_invalid_keeps_id();
        test_builders();
        test_texts_are_utf8();
        return tests_finish("test-jsonrpc");
}
