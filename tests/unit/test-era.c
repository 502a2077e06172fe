/* The 2026-07-28 request envelope and the era's own answers. */
#include <errno.h>

#include "era.h"
#include "macros.h"
#include "tests.h"

static int parse(const char *json, Envelope *e, const char **problem) {
        _cleanup_json_ cJSON *p = cJSON_Parse(json);
        static cJSON *keep;
        int r;

        cJSON_Delete(keep);
        r = era_envelope_parse(p, e, problem);
        keep = TAKE_PTR(p); /* e points into it until the next call */
        return r;
}

int main(void) {
        const char *problem = NULL;
        Envelope e;
        _cleanup_json_ cJSON *err = NULL, *init = NULL, *result = NULL, *info = NULL;
        _cleanup_free_ char *printed = NULL;

        CHECK(parse("{}", &e, &problem) == 0);
        CHECK(parse("{\"_meta\":{\"progressToken\":1}}", &e, &problem) == 0);
        CHECK(parse("null", &e, &problem) == 0);
        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":\"2026-07-28\",\"" META_CLIENT_CAPABILITIES
                    "\":{\"sampling\":{}},\"" META_CLIENT_INFO "\":{\"name\":\"c\"},\"" META_LOG_LEVEL "\":\"debug\"}}",
                    &e, &problem) == 1);
        CHECK_STREQ(e.version, "2026-07-28");
        CHECK(cJSON_GetObjectItemCaseSensitive(e.capabilities, "sampling") != NULL);
        CHECK_STREQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e.client_info, "name")), "c");
        CHECK_STREQ(e.log_level, "debug");
        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":\"2026-07-28\"}}", &e, &problem) == -EINVAL);
        CHECK_STREQ(problem, "params._meta must carry the object " META_CLIENT_CAPABILITIES);
        CHECK(parse("{\"_meta\":{\"" META_CLIENT_CAPABILITIES "\":{}}}", &e, &problem) == -EINVAL);
        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":7,\"" META_CLIENT_CAPABILITIES "\":{}}}", &e,
                    &problem) == -EINVAL);
        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":\"2026-07-28\",\"" META_CLIENT_CAPABILITIES
                    "\":{},\"" META_LOG_LEVEL "\":3}}",
                    &e, &problem) == -EINVAL);
        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":\"2025-11-25\",\"" META_CLIENT_CAPABILITIES "\":{}}}",
                    &e, &problem) == -EPROTONOSUPPORT);
        CHECK_STREQ(e.version, "2025-11-25");

        err = era_unsupported_version_new(NULL, "1900-01-01");
        printed = cJSON_PrintUnformatted(err);
        CHECK_STREQ(printed, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32022,\"message\":\"Unsupported "
                             "protocol version\",\"data\":{\"supported\":[\"2026-07-28\"],\"requested\":"
                             "\"1900-01-01\"}}}");
        CHECK(era_method_removed("ping") && era_method_removed("resources/subscribe") &&
              !era_method_removed("tools/call"));

        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":\"2026-07-28\",\"" META_CLIENT_CAPABILITIES
                    "\":{\"roots\":{}},\"" META_CLIENT_INFO "\":{\"name\":\"c\",\"version\":\"1\"}}}",
                    &e, &problem) == 1);
        init = era_initialize_params_new(&e);
        free(printed);
        printed = cJSON_PrintUnformatted(init);
        CHECK_STREQ(printed, "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"roots\":{}},\"clientInfo\":{"
                             "\"name\":\"c\",\"version\":\"1\"}}");

        /* No clientInfo in the envelope: the backend's initialize names mcp-lazy (servers refuse none). */
        CHECK(parse("{\"_meta\":{\"" META_PROTOCOL_VERSION "\":\"2026-07-28\",\"" META_CLIENT_CAPABILITIES "\":{}}}",
                    &e, &problem) == 1);
        cJSON_Delete(init);
        init = era_initialize_params_new(&e);
        free(printed);
        printed = cJSON_PrintUnformatted(init);
        CHECK_STREQ(printed, "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{"
                             "\"name\":\"mcp-lazy\",\"version\":\"" MCP_LAZY_VERSION "\"}}");

        result = cJSON_Parse("{\"tools\":[]}");
        info = cJSON_Parse("{\"name\":\"s\"}");
        CHECK(era_result_complete(result, 1500, false, info) == 0);
        free(printed);
        printed = cJSON_PrintUnformatted(result);
        CHECK_STREQ(printed,
                    "{\"tools\":[],\"resultType\":\"complete\",\"ttlMs\":1500,\"cacheScope\":\"private\",\"_meta\":{"
                    "\"" META_SERVER_INFO "\":{\"name\":\"s\"}}}");
        /* What answering an input request needs: the elicitation mode (an empty object is form only),
         * sampling.tools for tool use. */
        {
                static const struct {
                        const char *method, *params, *caps, *missing;
                } cases[] = {
                        {"elicitation/create", "{}", "{}", "{\"elicitation\":{}}"},
                        {"elicitation/create", "{}", "{\"elicitation\":{}}", "{}"},
                        {"elicitation/create", "{\"mode\":\"form\"}", "{\"elicitation\":{\"url\":{}}}",
                         "{\"elicitation\":{\"form\":{}}}"},
                        {"elicitation/create", "{\"mode\":\"url\"}", "{\"elicitation\":{}}",
                         "{\"elicitation\":{\"url\":{}}}"},
                        {"elicitation/create", "{\"mode\":\"url\"}", "{}", "{\"elicitation\":{\"url\":{}}}"},
                        {"elicitation/create", "{\"mode\":\"url\"}", "{\"elicitation\":{\"form\":{},\"url\":{}}}",
                         "{}"},
                        {"sampling/createMessage", "{}", "{\"sampling\":{}}", "{}"},
                        {"sampling/createMessage", "{\"tools\":[]}", "{\"sampling\":{}}",
                         "{\"sampling\":{\"tools\":{}}}"},
                        {"sampling/createMessage", "{\"toolChoice\":{}}", "{}", "{\"sampling\":{\"tools\":{}}}"},
                        {"sampling/createMessage", "{\"tools\":[]}", "{\"sampling\":{\"tools\":{}}}", "{}"},
                        {"roots/list", NULL, "{\"roots\":{}}", "{}"},
                        {"roots/list", NULL, "{\"sampling\":{}}", "{\"roots\":{}}"},
                        {"ping", NULL, "{}", "{}"},
                };
                for (size_t k = 0; k < ELEMENTSOF(cases); k++) {
                        _cleanup_json_ cJSON *params = cases[k].params ? cJSON_Parse(cases[k].params) : NULL;
                        _cleanup_json_ cJSON *caps = cJSON_Parse(cases[k].caps), *missing = cJSON_CreateObject();
                        _cleanup_free_ char *got = NULL;
                        CHECK(era_input_missing(cases[k].method, params, caps, missing) == 0);
                        got = cJSON_PrintUnformatted(missing);
                        CHECK_STREQ(got, cases[k].missing);
                }
        }

        /* The era a frontend says its client speaks, in the initialize it sends a shim: put in over
         * whatever the client had there, taken out whole by the shim (an _meta left empty goes too). */
        {
                static const struct {
                        const char *params;
                        bool modern;
                        const char *put;
                } puts_[] = {
                        {"{\"protocolVersion\":\"2025-11-25\"}", true,
                         "{\"protocolVersion\":\"2025-11-25\",\"_meta\":{\"" META_CLIENT_ERA "\":\"2026-07-28\"}}"},
                        {"{\"_meta\":{\"k\":1,\"" META_CLIENT_ERA "\":\"2026-07-28\"}}", false,
                         "{\"_meta\":{\"k\":1,\"" META_CLIENT_ERA "\":\"handshake\"}}"},
                        {"{\"_meta\":7}", false, "{\"_meta\":{\"" META_CLIENT_ERA "\":\"handshake\"}}"},
                };
                for (size_t k = 0; k < ELEMENTSOF(puts_); k++) {
                        _cleanup_json_ cJSON *params = cJSON_Parse(puts_[k].params);
                        _cleanup_free_ char *got = NULL;
                        CHECK(era_client_era_put(params, puts_[k].modern) == 0);
                        got = cJSON_PrintUnformatted(params);
                        CHECK_STREQ(got, puts_[k].put);
                }
        }
        {
                static const struct {
                        const char *params;
                        int r;
                        bool modern;
                        const char *left;
                } takes[] = {
                        {"{\"protocolVersion\":\"x\"}", 0, false, "{\"protocolVersion\":\"x\"}"},
                        {"{\"_meta\":{\"" META_CLIENT_ERA "\":\"2026-07-28\"}}", 1, true, "{}"},
                        {"{\"_meta\":{\"k\":1,\"" META_CLIENT_ERA "\":\"handshake\"}}", 1, false,
                         "{\"_meta\":{\"k\":1}}"},
                        {"{\"_meta\":{\"" META_CLIENT_ERA "\":\"2025-11-25\"}}", -EINVAL, false,
                         "{\"_meta\":{\"" META_CLIENT_ERA "\":\"2025-11-25\"}}"},
                        {"{\"_meta\":{\"" META_CLIENT_ERA "\":true}}", -EINVAL, false,
                         "{\"_meta\":{\"" META_CLIENT_ERA "\":true}}"},
                        {"{\"_meta\":\"x\"}", 0, false, "{\"_meta\":\"x\"}"},
                };
                for (size_t k = 0; k < ELEMENTSOF(takes); k++) {
                        _cleanup_json_ cJSON *params = cJSON_Parse(takes[k].params);
                        _cleanup_free_ char *got = NULL;
                        const char *why = NULL;
                        bool modern = !takes[k].modern;
                        int r = era_client_era_take(params, &modern, &why);
                        CHECK(r == takes[k].r);
                        if (r >= 0)
                                CHECK(modern == takes[k].modern);
                        else
                                CHECK(why && strstr(why, META_CLIENT_ERA));
                        got = cJSON_PrintUnformatted(params);
                        CHECK_STREQ(got, takes[k].left);
                }
        }

        parse("{}", &e, &problem); /* frees the last kept tree */
        return tests_finish("test-era");
}
