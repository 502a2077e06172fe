/* What of a backend's definition differs between two manifests: what a running shim compares when its
 * manifest changes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "macros.h"
#include "manifest.h"

static bool str_same(const char *a, const char *b) {
        return a == b || (a && b && streq(a, b));
}

static bool strv_same(char *const *a, char *const *b) {
        for (; a && *a && b && *b; a++, b++)
                if (!streq(*a, *b))
                        return false;
        return (!a || !*a) && (!b || !*b);
}

static bool strv_has(char *const *l, const char *s) {
        for (; l && *l; l++)
                if (streq(*l, s))
                        return true;
        return false;
}

/* The same names, in any order (secret_env names each once: the loader refuses one twice). */
static bool strv_same_set(char *const *a, char *const *b) {
        for (char *const *v = a; v && *v; v++)
                if (!strv_has(b, *v))
                        return false;
        for (char *const *v = b; v && *v; v++)
                if (!strv_has(a, *v))
                        return false;
        return true;
}

/* The assignment of env whose name is the one of assignment (its "NAME="), or NULL. */
static const char *env_find(char *const *env, const char *assignment) {
        size_t key = strcspn(assignment, "=");

        for (; env && *env; env++)
                if (strncmp(*env, assignment, key + 1) == 0)
                        return *env;
        return NULL;
}

/* Says ", env NAME" for each variable of a that b lacks or sets otherwise (new: of b that a lacks). */
static bool env_differs(FILE *f, char *const *a, char *const *b, bool new) {
        bool any = false;

        for (char *const *v = a; v && *v; v++) {
                const char *other = env_find(b, *v);
                if (other && (new || streq(other, *v)))
                        continue;
                fprintf(f, ", env %.*s", (int) strcspn(*v, "="), *v);
                any = true;
        }
        return any;
}

int backend_definition_diff(const Backend *a, const Backend *b, char **ret_what) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        bool any = false;
        FILE *f = open_memstream(&text, &len);

        if (!f)
                return -ENOMEM;
#define DIFFERS(cond, name)                  \
        do {                                 \
                if (cond) {                  \
                        fputs(", " name, f); \
                        any = true;          \
                }                            \
        } while (0)
        DIFFERS(!str_same(a->remote.host, b->remote.host) || !str_same(a->remote.remote_name, b->remote.remote_name),
                "host");
        DIFFERS(!strv_same(a->command, b->command), "command");
        if (env_differs(f, a->env, b->env, false))
                any = true;
        if (env_differs(f, b->env, a->env, true))
                any = true;
        DIFFERS(!strv_same_set(a->secret_env, b->secret_env), "secret_env");
        DIFFERS(!str_same(a->cwd, b->cwd), "cwd");
        DIFFERS(a->protocol != b->protocol, "protocol");
        DIFFERS(a->sharing != b->sharing, "sharing");
        DIFFERS(a->lifecycle != b->lifecycle, "lifecycle");
        DIFFERS(a->max_sessions != b->max_sessions, "max_sessions");
        DIFFERS(a->idle_timeout_usec != b->idle_timeout_usec, "idle_timeout");
        DIFFERS(a->init_timeout_usec != b->init_timeout_usec, "init_timeout");
        DIFFERS(a->input_timeout_usec != b->input_timeout_usec, "input_timeout");
#undef DIFFERS
        if (fclose(f) != 0 || !text)
                return -ENOMEM;
        if (!any)
                return 0;
        if (ret_what) {
                memmove(text, text + 2, len - 1); /* without the first ", " */
                *ret_what = TAKE_PTR(text);
        }
        return 1;
}
