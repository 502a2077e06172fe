/* Progress tokens: which progress a peer may send on. A backend's progress reaches a session only for
 * a token of a call in flight (the routes, instance.c); a token a client used once at a backend is
 * not handed to it again as it is, so progress the backend sends late for the old call cannot land on
 * the new one; and a client's own progress reaches a backend only for the token of a request that
 * backend sent that client. */
#include <stdlib.h>
#include <string.h>

#include "ids.h"
#include "log.h"
#include "macros.h"
#include "shimd.h"

#define ENDED_TOKENS_MAX 1024U /* remembered per backend instance, the oldest forgotten first */

struct ProgressMemo {
        Hashmap *set;
        char *ring[ENDED_TOKENS_MAX];
        unsigned next;
};

void progress_token_ended(Instance *i, const char *token) {
        ProgressMemo *p = i->progress;

        if (!p && !(p = i->progress = calloc(1, sizeof *p)))
                return;
        if (!p->set && !(p->set = hashmap_new()))
                return;
        if (hashmap_get(p->set, token))
                return;
        if (p->ring[p->next]) {
                hashmap_remove(p->set, p->ring[p->next]);
                free(p->ring[p->next]);
        }
        p->ring[p->next] = strdup(token);
        if (!p->ring[p->next] || hashmap_put(p->set, token, p) < 0) {
                free(p->ring[p->next]);
                p->ring[p->next] = NULL;
                return;
        }
        p->next = (p->next + 1) % ENDED_TOKENS_MAX;
}

bool progress_token_used(const Instance *i, const char *token) {
        return i->progress && i->progress->set && hashmap_get(i->progress->set, token);
}

void progress_memo_free(Instance *i) {
        ProgressMemo *p = i->progress;

        if (!p)
                return;
        for (unsigned k = 0; k < ENDED_TOKENS_MAX; k++)
                free(p->ring[k]);
        hashmap_free(p->set);
        free(p);
        i->progress = NULL;
}

/* notifications/progress from a client: only for the token of a request a backend sent this client
 * and that is still open; else it could feed a backend progress for another session's request. */
void client_progress(Client *c, const Message *m) {
        IdField f[2];
        size_t n = ids_fields(m, f, ELEMENTSOF(f));
        Instance *target = n == 1 ? upcall_progress_target(c, f[0].text, f[0].len) : NULL;

        if (!target) {
                log_debug("Dropping notifications/progress from connection %llu: no request sent to it has "
                          "that token.",
                          (unsigned long long) c->serial);
                return;
        }
        (void) instance_send_text(target, m->text, m->len);
}
