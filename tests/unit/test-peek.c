/* Peeking at the id of a message cut off at the line limit. */
#include "message.h"
#include "peek.h"
#include "tests.h"

static void check_id(const char *text, const char *want) {
        cJSON *id = jsonrpc_peek_id(text, strlen(text));
        char *printed = id ? cJSON_PrintUnformatted(id) : NULL;

        if (want)
                CHECK_STREQ(printed, want);
        else
                CHECK(!id);
        free(printed);
        cJSON_Delete(id);
}

int main(void) {
        check_id("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"a\":\"xxxx", "7");
        check_id(" { \"id\" : \"a\\\"b\" , \"result\":{\"content\":[{\"text\":\"xx", "\"a\\\"b\"");
        check_id("{\"params\":{\"id\":1,\"x\":[1,{\"y\":\"}\"}]},\"id\":42,\"result\":\"xx", "42");
        check_id("{\"method\":\"x\",\"params\":{\"id\":1,\"p\":\"zzz", NULL); /* only a nested id */
        check_id("{\"jsonrpc\":\"2.0\",\"id\":12", NULL);                     /* may go on: 123... */
        check_id("{\"id\":\"abc", NULL);                                      /* cut off inside */
        check_id("{\"id\":1,\"id\":2,\"x\":\"", NULL);                        /* twice: neither */
        check_id("{\"id\":null,\"x\":\"", NULL);
        check_id("{\"id\":1.5,\"x\":\"", NULL);
        check_id("[{\"id\":1},", NULL);
        check_id("", NULL);

        /* The raw id goes into a reply as its text: only strict JSON (cJSON takes all of these). */
        const char *raw[] = {"{\"id\":01,\"x\":\"",  "{\"id\":1.,\"x\":\"",         "{\"id\":+1,\"x\":\"",
                             "{\"id\":0x1,\"x\":\"", "{\"id\":\"a\001b\",\"x\":\"", "{\"id\":\"\xff\",\"x\":\""};
        for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
                cJSON *id = jsonrpc_peek_id_raw(raw[i], strlen(raw[i]));
                CHECK(!id);
                cJSON_Delete(id);
        }
        cJSON *r = jsonrpc_peek_id_raw("{\"id\":\"a\\u0062\",\"x\":\"", 19);
        CHECK(r && strcmp(r->valuestring, "\"a\\u0062\"") == 0);
        cJSON_Delete(r);
        r = jsonrpc_peek_id_raw("{\"id\":-12,\"x\":\"", 15);
        CHECK(r && strcmp(r->valuestring, "-12") == 0);
        cJSON_Delete(r);

        cJSON *m = json_peek_member("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"d", 58,
                                    "method");
        CHECK(cJSON_IsString(m) && strcmp(m->valuestring, "notifications/message") == 0);
        cJSON_Delete(m);

        /* A key that decodes with a NUL in it is not the key its first bytes spell (the next hop reads
         * all of it); an escaped backslash before "u0000" is no NUL. */
        check_id("{\"id\\u0000\":7,\"x\":\"", NULL);
        check_id("{\"i\\u0064\":7,\"x\":\"", "7");
        CHECK(!json_peek_has_key("{\"method\\u0000x\":\"a\",\"id\":1", 27, "method"));
        CHECK(json_peek_has_key("{\"metho\\u0064\":\"a\",\"id\":1", 25, "method"));

        /* A key shows whatever its value: cut off, repeated, or after members that are whole. */
        const char *with[] = {
                "{\"id\":1,\"method\":\"sampling/createMessage\",\"params\":{\"x\":[[[",
                "{\"id\":1,\"method\":\"sampl",
                "{\"method\":\"a\",\"method\":\"b\",\"id\":\"x\",\"params\":{",
                " { \"id\" : \"a\\\"b\" , \"params\":{\"p\":[1,{\"q\":\"}\"}]}, \"method\":",
        };
        for (size_t i = 0; i < sizeof with / sizeof with[0]; i++)
                CHECK(json_peek_has_key(with[i], strlen(with[i]), "method"));
        /* Not at the top level, not yet shown, or no key at all. */
        const char *without[] = {
                "{\"id\":1,\"result\":{\"method\":\"x\",\"content\":[",
                "{\"id\":1,\"result\":{\"content\":[\"a\"]},\"meth",
                "{\"id\":1,\"params\":{\"a\":\"\\\"method\\\":\"}",
                "[{\"method\":\"x\"}]",
                "",
        };
        for (size_t i = 0; i < sizeof without / sizeof without[0]; i++)
                CHECK(!json_peek_has_key(without[i], strlen(without[i]), "method"));

        /* An id past MESSAGE_MAX_ID_BYTES (its text, quotes included) is not read: it would be echoed. */
        {
                char line[1200];
                for (size_t len = MESSAGE_MAX_ID_BYTES - 1; len <= MESSAGE_MAX_ID_BYTES + 1; len++) {
                        int k = snprintf(line, sizeof line, "{\"id\":\"%0*d\",\"method\":\"x\",\"params\":{\"a\":[[",
                                         (int) len - 2, 0);
                        cJSON *got = jsonrpc_peek_id_raw(line, (size_t) k);
                        CHECK(len <= MESSAGE_MAX_ID_BYTES ? got && strlen(got->valuestring) == len : !got);
                        cJSON_Delete(got);
                }
        }

        /* An answer's id: not from a line with a method, with no single whole id, or one that holds a NUL. */
        const char *answers[][2] = {
                {"{\"jsonrpc\":\"2.0\",\"id\":\"mcp-lazy-upcall:3\",\"result\":[[[", "\"mcp-lazy-upcall:3\""},
                {"{\"id\":7,\"error\":{\"code\":1,\"message\":\"x", "7"},
                {"{\"id\":\"mcp-lazy-upcall:3\",\"method\":\"x\",\"params\":[[[", NULL},
                {"{\"result\":{},\"id\":1,\"method\":", NULL},
                {"{\"id\":\"mcp-lazy-upcall:3\\u0000x\",\"result\":[[[", NULL},
                {"{\"id\":1,\"id\":2,\"result\":[[[", NULL},
                {"{\"result\":[[[", NULL},
        };
        for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++) {
                cJSON *id = jsonrpc_peek_answer_id(answers[i][0], strlen(answers[i][0]));
                char *printed = id ? cJSON_PrintUnformatted(id) : NULL;

                if (answers[i][1])
                        CHECK_STREQ(printed, answers[i][1]);
                else
                        CHECK(!id);
                free(printed);
                cJSON_Delete(id);
        }
        return tests_finish("test-peek");
}
