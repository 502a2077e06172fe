/* Reloading: the manifest is watched, and when this backend's definition changed (or SIGHUP asks, for
 * what the manifest does not show: the unit's environment file) the shim stops once nothing is in
 * flight, for the next one to run what the manifest says now. */
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>

#include "log.h"
#include "macros.h"
#include "shimd.h"

/* What the contract check compares with: the backend's tools, resources and prompts. */
static bool declared_same(const Manifest *a, const Manifest *b) {
        const Backend *x = &a->backends[0], *y = &b->backends[0];

        if (a->n_tools != b->n_tools)
                return false;
        for (size_t i = 0; i < a->n_tools; i++)
                if (!cJSON_Compare(a->tools[i].json, b->tools[i].json, true))
                        return false;
        return cJSON_Compare(x->resources, y->resources, true) &&
               cJSON_Compare(x->resource_templates, y->resource_templates, true) &&
               cJSON_Compare(x->prompts, y->prompts, true);
}

/* The backend runs as it did: what it declares is taken from m, and checked again at the backends
 * that run when it changed. Nothing holds on to the old manifest past the callback it is read in. */
static void reload_declared(Shim *s, Manifest *m) {
        bool same = declared_same(s->manifest, m);
        Manifest old = *s->manifest;

        /* Contents swapped: s->manifest stays the object run() owns. */
        *s->manifest = *m;
        *m = old;
        manifest_free(m);
        s->backend = &s->manifest->backends[0];
        if (same)
                return;
        log_info("Backend '%s' declares other tools, resources or prompts in %s: checking them again.", s->name,
                 s->manifest_path);
        for (Instance *i = s->instances; i; i = i->next)
                if (i->state == INSTANCE_READY)
                        contract_request(i);
}

/* requested: SIGHUP, which restarts the shim whether or not the definition changed (the unit's
 * environment file may have). A manifest that does not load changes nothing. */
static void reload_check(Shim *s, bool requested) {
        _cleanup_(manifest_freep) Manifest *m = NULL;
        _cleanup_free_ char *err = NULL, *what = NULL;
        int r;

        if (s->draining || s->reload_pending)
                return; /* on its way out already */
        r = manifest_load_file_backend(s->manifest_path, s->name, &m, &err);
        if (r < 0)
                return (void) log_error("Manifest %s cannot be used, backend '%s' keeps running as it is: %s",
                                        s->manifest_path, s->name, err ?: strerror(-r));
        if (manifest_restrict(m, s->name) < 0) {
                log_info("Backend '%s' is no longer in %s: stopping once no call is in flight.", s->name,
                         s->manifest_path);
                return shim_reload(s, false);
        }
        r = backend_definition_diff(s->backend, &m->backends[0], &what);
        if (r < 0)
                return (void) log_oom();
        if (r == 0 && !requested)
                return reload_declared(s, TAKE_PTR(m));
        if (r > 0)
                log_info("Backend '%s' changed in %s (%s): stopping once no call is in flight, to start again as it "
                         "says now.",
                         s->name, s->manifest_path, what);
        else
                log_info("Stopping once no call is in flight, to start again with %s and the environment read anew.",
                         s->manifest_path);
        /* warm, resident: the unit starts the next shim at once (a shim of one connection has no next). */
        shim_reload(s, !s->inetd && m->backends[0].lifecycle != LIFECYCLE_LAZY);
}

static void on_manifest_changed(void *userdata) {
        reload_check(userdata, false);
}

static int on_sighup(sd_event_source *src, const struct signalfd_siginfo *si, void *userdata) {
        Shim *s = userdata;

        (void) src, (void) si;
        log_info("Received SIGHUP: reading %s again.", s->manifest_path);
        reload_check(s, true);
        return 0;
}

int reload_setup(Shim *s, const struct stat *loaded) {
        struct stat now;
        sigset_t hup;
        int r;

        sigemptyset(&hup);
        sigaddset(&hup, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &hup, NULL) < 0)
                return -errno;
        r = sd_event_add_signal(s->event, NULL, SIGHUP, on_sighup, s);
        if (r < 0)
                return r;
        r = file_watch_new(s->event, s->manifest_path, on_manifest_changed, s, &s->watch);
        if (r < 0)
                return r;
        /* Changed between its reading and the watch: it is read again now. */
        if (stat(s->manifest_path, &now) < 0 || !file_stat_same(&now, loaded))
                reload_check(s, false);
        return 0;
}

void reload_done(Shim *s) {
        s->watch = file_watch_free(s->watch);
        s->reload_source = sd_event_source_disable_unref(s->reload_source);
}
