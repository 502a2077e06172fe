/* Moving a backend's env values into its secrets file (frontend/secrets.c): what stays in the manifest
 * keeps its YAML as written, and a value systemd would refuse changes nothing and is named, never shown. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../frontend/import.h"
#include "envfile.h"
#include "macros.h"
#include "tests.h"

static char dir[] = "/tmp/test-secrets-XXXXXX";

static char *path_in(const char *name) {
        char *p = NULL;
        return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static void write_text(const char *name, const char *text) {
        _cleanup_free_ char *p = path_in(name);
        FILE *f = p ? fopen(p, "we") : NULL;

        CHECK(f);
        if (f) {
                fputs(text, f);
                fclose(f);
        }
}

static char *read_text(const char *name) {
        _cleanup_free_ char *p = path_in(name);
        char *text = NULL;
        size_t len;

        return p && read_file_full(p, 1 << 20, &text, &len) >= 0 ? text : NULL;
}

/* Sends output fd (stdout, stderr) to the file name of the test directory until
 * output_restore(): the descriptor it had, saved. */
static int output_to_file(int out, const char *name) {
        _cleanup_free_ char *path = path_in(name);
        int saved = dup(out), fd;

        fflush(stdout);
        fflush(stderr);
        fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
        CHECK(fd >= 0 && saved >= 0);
        dup2(fd, out);
        close(fd);
        return saved;
}

/* Puts back the output output_to_file() saved: what was written to it meanwhile. */
static char *output_restore(int out, int saved, const char *name) {
        fflush(stdout);
        fflush(stderr);
        dup2(saved, out);
        close(saved);
        return read_text(name);
}

/* What the manifest writer that secrets_split() calls does: fail with manifest_fails; or write the
 * manifest (test_write_manifest() makes the next renameat() fail with rename_fails_after then). */
static int manifest_fails, rename_fails_after, renameat_fails;
static unsigned manifest_writes;

static int test_write_manifest(ManifestDoc *doc, bool dry_run) {
        _cleanup_free_ char *text = NULL, *err = NULL;
        size_t len;

        manifest_writes++;
        if (manifest_fails) {
                fprintf(stderr, "mcp-lazy: cannot write the manifest (test): %s\n", strerror(manifest_fails));
                return -manifest_fails;
        }
        CHECK(manifest_doc_emit(doc, &text, &len, &err) >= 0);
        if (dry_run)
                printf("--- %s (would be written)\n%s", doc->path, text ?: "");
        else
                CHECK(text && write_file_atomic(doc->path, text, len, 0600, false) >= 0);
        renameat_fails = rename_fails_after;
        return 0;
}

/* The backends whose units the last secrets_split() reloaded, joined with " " (NULL: it reloaded none). */
static char *reloaded;

static void test_units_reload(char *const *backends) {
        CHECK(!reloaded && backends && backends[0]);
        for (char *const *b = backends; b && *b; b++) {
                char *l = NULL;

                CHECK(asprintf(&l, "%s%s%s", reloaded ?: "", reloaded ? " " : "", *b) >= 0);
                free(reloaded);
                reloaded = l;
        }
}

/* The next renameat() fails with renameat_fails (the link takes -Wl,--wrap=renameat). */
int __real_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
        if (renameat_fails) {
                errno = renameat_fails;
                renameat_fails = 0;
                return -1;
        }
        return __real_renameat(olddirfd, oldpath, newdirfd, newpath);
}

/* secrets_split() on the manifest text (with dry_run): its result, the emitted manifest, what it said
 * on stderr, and on stdout (if ret_stdout). */
static int split_run(const char *manifest, const char *on_disk, bool dry_run, char **ret_text, char **ret_stderr,
                     char **ret_stdout) {
        _cleanup_(manifest_doc_freep) ManifestDoc *doc = NULL;
        _cleanup_free_ char *p = path_in("manifest.yaml"), *err = NULL, *out = NULL;
        size_t len;
        int r, saved_err, saved_out = -1;

        write_text("manifest.yaml", manifest);
        saved_err = output_to_file(STDERR_FILENO, "stderr");
        if (ret_stdout)
                saved_out = output_to_file(STDOUT_FILENO, "stdout");
        r = manifest_doc_load(p, &doc, &err);
        CHECK(r >= 0);
        if (on_disk) /* the manifest as it was before this import changed it */
                write_text("manifest.yaml", on_disk);
        free(reloaded);
        reloaded = NULL;
        if (r >= 0)
                r = secrets_split(doc, dry_run, test_write_manifest, test_units_reload);
        if (ret_stdout)
                *ret_stdout = output_restore(STDOUT_FILENO, saved_out, "stdout");
        *ret_stderr = output_restore(STDERR_FILENO, saved_err, "stderr");
        *ret_text = NULL;
        if (r >= 0 && manifest_doc_emit(doc, ret_text, &len, &err) < 0)
                fprintf(stderr, "emit: %s\n", err ?: "?");
        return r;
}

static int split_over(const char *manifest, const char *on_disk, char **ret_text, char **ret_stderr) {
        return split_run(manifest, on_disk, false, ret_text, ret_stderr, NULL);
}

static int split(const char *manifest, char **ret_text, char **ret_stderr) {
        return split_over(manifest, NULL, ret_text, ret_stderr);
}

#define BACKEND(name, env) "  " name ":\n    command: [/bin/true]\n    env: " env "\n"

/* The values that stay are not retyped: before, 0077 became 77, 1.50 1.5, 0x1F 31 and ~ "null". */
static void test_stays_as_written(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *file = NULL;

        CHECK(split("backends:\n" BACKEND("a", "{MCP_LAZY_A: 0077, LD_B: 1.50, WATCHDOG_C: 0x1F, MCP_LAZY_D: ~, "
                                               "SECRET: 0077}"),
                    &text, &err) == 0);
        CHECK(text && strstr(text, "MCP_LAZY_A: 0077"));
        CHECK(text && strstr(text, "LD_B: 1.50"));
        CHECK(text && strstr(text, "WATCHDOG_C: 0x1F"));
        CHECK(text && strstr(text, "MCP_LAZY_D: ~"));
        CHECK(text && !strstr(text, "SECRET:") && strstr(text, "secret_env"));
        file = read_text("secrets/a.env");
        CHECK_STREQ(file, "SECRET=\"0077\"\n");
        if (!text)
                fprintf(stderr, "%s\n", err ?: "");
}

/* A value systemd would refuse (it would ignore the whole file): nothing written for any backend, the
 * variable and the reason named, the value nowhere. */
static void check_refused(const char *value, const char *reason, int want) {
        _cleanup_free_ char *manifest = NULL, *text = NULL, *err = NULL, *p = path_in("secrets/one.env");

        unlink(p);
        CHECK(asprintf(&manifest, "backends:\n" BACKEND("one", "{OK: fine}") BACKEND("two", "{GOOD: g, BAD: \"%s\"}"),
                       value) >= 0);
        CHECK(split(manifest, &text, &err) == want);
        CHECK(access(p, F_OK) < 0);
        CHECK(err && strstr(err, "'two'") && strstr(err, "BAD") && strstr(err, reason) && !strstr(err, value) &&
              !strstr(err, "GOOD"));
        if (err && !strstr(err, reason))
                fprintf(stderr, "said: %s\n", err);
}

static void test_refused(void) {
        _cleanup_free_ char *big = malloc(ENVFILE_ASSIGNMENT_MAX + 1);

        check_refused("MARK\\uFDD0", "noncharacter", -EINVAL);
        check_refused("MARK\\uFFFE", "noncharacter", -EINVAL);
        check_refused("MARK\\U0010FFFF", "noncharacter", -EINVAL);
        CHECK(big);
        if (!big)
                return;
        memset(big, 'v', ENVFILE_ASSIGNMENT_MAX);
        memcpy(big, "MARK", 4);
        big[ENVFILE_ASSIGNMENT_MAX - 4] = 0; /* BAD=MARKvvv...: 128 KiB in all */
        check_refused(big, "128 KiB", -E2BIG);
}

/* A file of secrets/ named file and then kind (".orphaned-"), as "secrets/NAME", or NULL. */
static char *beside(const char *file, const char *kind) {
        _cleanup_free_ char *p = path_in("secrets");
        DIR *d = p ? opendir(p) : NULL;
        char *found = NULL;

        for (struct dirent *de; d && !found && (de = readdir(d));)
                if (strncmp(de->d_name, file, strlen(file)) == 0 &&
                    strncmp(de->d_name + strlen(file), kind, strlen(kind)) == 0 &&
                    asprintf(&found, "secrets/%s", de->d_name) < 0)
                        found = NULL;
        if (d)
                closedir(d);
        return found;
}

static char *orphan_of(const char *file) {
        return beside(file, ".orphaned-");
}

static void check_orphaned(const char *file, const char *err, const char *want_text) {
        _cleanup_free_ char *o = orphan_of(file), *p = NULL, *text = NULL;
        struct stat st;

        CHECK(o);
        if (!o)
                return;
        p = path_in(o);
        text = read_text(o);
        CHECK_STREQ(text, want_text);
        CHECK(p && stat(p, &st) >= 0 && (st.st_mode & 07777) == 0600);
        CHECK(err && strstr(err, file) && strstr(err, "renamed") && !strstr(err, "MARK"));
        unlink(p);
}

/* A file no backend names in secret_env is never handed on: put aside, not merged, nothing lost. */
static unsigned count_of(const char *text, const char *s) {
        unsigned n = 0;
        for (const char *p = text; p && (p = strstr(p, s)); p++)
                n++;
        return n;
}

#define BARE(name)  "  " name ":\n    command: [/bin/true]\n"
#define NAMED(name) BARE(name) "    secret_env: [TOKEN]\n"

static void test_orphans(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *api = NULL, *kept = NULL, *stays = NULL, *bare = NULL;
        _cleanup_free_ char *dir_secrets = path_in("secrets");

        CHECK(dir_secrets && (mkdir(dir_secrets, 0700) >= 0 || errno == EEXIST));
        /* A backend gone from the manifest; one new with only a name that stays (nothing moves); a new
         * backend under the name of a file left behind: their files put aside. One that names its file
         * keeps it; and the manifest's own backends from before secret_env (the same command on disk)
         * with a file written by hand, as the README said then: adopted, now named in secret_env. */
        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        write_text("secrets/fresh.env", "TOKEN=MARKfresh\n");
        write_text("secrets/stays.env", "TOKEN=MARKstays\n");
        write_text("secrets/bare.env", "TOKEN=MARKbare\n");
        write_text("secrets/named.env", "TOKEN=\"MARKnamed\"\n");
        write_text("secrets/api.env", "TOKEN=MARKold\n");
        CHECK(split_over("backends:\n" BACKEND("stays", "{LD_LIBRARY_PATH: /x}") BARE("bare") NAMED("named")
                                 BACKEND("api", "{NEW: MARKnew}") BACKEND("fresh", "{LD_BIND_NOW: 1}"),
                         "backends:\n" BACKEND("stays", "{LD_LIBRARY_PATH: /x}") BARE("bare") NAMED("named"), &text,
                         &err) == 0);
        check_orphaned("gone.env", err, "TOKEN=MARKgone\n");
        check_orphaned("fresh.env", err, "TOKEN=MARKfresh\n");
        check_orphaned("api.env", err, "TOKEN=MARKold\n");
        CHECK(!orphan_of("stays.env") && !orphan_of("bare.env") && !orphan_of("named.env"));
        kept = read_text("secrets/named.env");
        CHECK_STREQ(kept, "TOKEN=\"MARKnamed\"\n");
        stays = read_text("secrets/stays.env");
        CHECK_STREQ(stays, "TOKEN=MARKstays\n");
        bare = read_text("secrets/bare.env");
        CHECK_STREQ(bare, "TOKEN=MARKbare\n");
        api = read_text("secrets/api.env");
        CHECK_STREQ(api, "NEW=\"MARKnew\"\n");
        CHECK(text && strstr(text, "secret_env: [NEW]") && !strstr(text, "TOKEN, NEW"));
        CHECK(count_of(text, "secret_env: [TOKEN]") == 3); /* named, and stays and bare adopted */
        if (count_of(text, "secret_env: [TOKEN]") != 3)
                fprintf(stderr, "%s\n", text ?: "");
}

/* What stays in the manifest's env: every variable systemd sets for a service (systemd.exec(5),
 * "Environment Variables in Spawned Processes"), what glibc, ld.so, libsystemd and the sanitizers
 * read, the shim's own; the rest moves. */
/* A link among the secrets files is renamed aside, never followed: its target keeps its mode. */
static void test_orphan_link(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *target = path_in("target"), *link = path_in("secrets/link.env"),
                            *o = NULL;
        struct stat st;

        write_text("target", "X=1\n");
        CHECK(target && chmod(target, 0644) >= 0 && link && symlink(target, link) >= 0);
        CHECK(split("backends: {}\n", &text, &err) == 0);
        CHECK(target && stat(target, &st) >= 0 && (st.st_mode & 07777) == 0644);
        CHECK(link && lstat(link, &st) < 0);
        o = orphan_of("link.env");
        CHECK(o);
}

/* The secrets file of backend db, and the one put aside, removed for the next case. */
static void db_files_remove(void) {
        _cleanup_free_ char *o = orphan_of("db.env"), *p = o ? path_in(o) : NULL, *f = path_in("secrets/db.env");

        if (p)
                unlink(p);
        if (f)
                unlink(f);
}

/* Review 10 LOW-1: a backend keeps the secrets file of its name only while it runs what it ran: the
 * same command, cwd and env that stays in the manifest, and no variable that moves which it did not
 * have. Else the file is put aside and the backend gets only its own config's values. */
static void check_owner_said(const char *on_disk, const char *file, const char *backend, bool owns,
                             const char *want_file, const char *want_names, const char *want_said) {
        _cleanup_free_ char *manifest = NULL, *text = NULL, *err = NULL, *now = NULL, *o = NULL;

        write_text("secrets/db.env", file);
        CHECK(asprintf(&manifest, "backends:\n  db:\n%s", backend) >= 0);
        CHECK(split_over(manifest, on_disk, &text, &err) == 0);
        o = orphan_of("db.env");
        now = read_text("secrets/db.env");
        CHECK(owns ? !o : o != NULL);
        if (want_file)
                CHECK_STREQ(now, want_file);
        else
                CHECK(!now);
        CHECK(err && !strstr(err, "MARK"));
        CHECK(owns ? !strstr(err ?: "", "no longer runs what it ran")
                   : strstr(err ?: "", "backend 'db' no longer runs what it ran") != NULL);
        if (!owns)
                CHECK(text && (want_file ? strstr(text, want_names) != NULL : !strstr(text, "secret_env")));
        if (want_said)
                CHECK(err && strstr(err, want_said));
        if ((owns ? o != NULL : o == NULL) || !text || (want_said && !strstr(err ?: "", want_said)))
                fprintf(stderr, "on disk:\n%snow:\n%s\nsaid: %s\n", on_disk, text ?: manifest, err ?: "");
        db_files_remove();
}

static void check_owner(const char *on_disk, const char *file, const char *backend, bool owns, const char *want_file) {
        check_owner_said(on_disk, file, backend, owns, want_file, "secret_env: [NODE_OPTIONS]", NULL);
}

static void test_owner_runs_the_same(void) {
        static const char *const disk = "backends:\n  db:\n    command: [/bin/true]\n    env: {LD_LIBRARY_PATH: /x}\n"
                                        "    secret_env: [TOKEN]\n";
        static const char *const hand = "backends:\n  db:\n    command: [/bin/true]\n";
#define DB(rest) "    command: [/bin/true]\n" rest "    secret_env: [TOKEN]\n"

        /* The same, the same token imported again: kept, merged; the token imported anew: another
         * definition (review 12 MEDIUM-1: every value counts), its own file of its own values. */
        check_owner(disk, "TOKEN=MARKold\nOLD=MARKo\n", DB("    env: {LD_LIBRARY_PATH: /x, TOKEN: MARKold}\n"), true,
                    "TOKEN=\"MARKold\"\nOLD=\"MARKo\"\n");
        check_owner_said(disk, "TOKEN=MARKold\nOLD=MARKo\n", DB("    env: {LD_LIBRARY_PATH: /x, TOKEN: MARKnew}\n"),
                         false, "TOKEN=\"MARKnew\"\n", "secret_env: [TOKEN]", "env TOKEN has another value");
        /* Another cwd, LD_PRELOAD, another LD_LIBRARY_PATH, none, another command. */
        check_owner(disk, "TOKEN=MARKold\n", DB("    env: {LD_LIBRARY_PATH: /x}\n    cwd: /tmp\n"), false, NULL);
        check_owner(disk, "TOKEN=MARKold\n", DB("    env: {LD_LIBRARY_PATH: /x, LD_PRELOAD: /tmp/x.so}\n"), false,
                    NULL);
        check_owner(disk, "TOKEN=MARKold\n", DB("    env: {LD_LIBRARY_PATH: /y}\n"), false, NULL);
        check_owner(disk, "TOKEN=MARKold\n", DB(""), false, NULL);
        check_owner(disk, "TOKEN=MARKold\n",
                    "    command: [/bin/false]\n    env: {LD_LIBRARY_PATH: /x}\n"
                    "    secret_env: [TOKEN]\n",
                    false, NULL);
        /* A variable that moves but changes what runs: its own file, without the old values. */
        check_owner(disk, "TOKEN=MARKold\n", DB("    env: {LD_LIBRARY_PATH: /x, NODE_OPTIONS: --require /tmp/x.js}\n"),
                    false, "NODE_OPTIONS=\"--require /tmp/x.js\"\n");
        /* Review 12 MEDIUM-1: a new value of a variable the old backend had changes what runs, whatever
         * its name (not a list of names): NODE_OPTIONS from the file, or any other; its own file. */
        static const char *const opts = "backends:\n  db:\n    command: [/bin/true]\n"
                                        "    secret_env: [GITHUB_TOKEN, NODE_OPTIONS]\n";
        check_owner_said(opts, "GITHUB_TOKEN=MARKold\nNODE_OPTIONS=--max-old-space-size=512\n",
                         "    command: [/bin/true]\n    env: {NODE_OPTIONS: \"--import=data:text/javascript,x\"}\n",
                         false, "NODE_OPTIONS=\"--import=data:text/javascript,x\"\n", "secret_env: [NODE_OPTIONS]",
                         "backend 'db' no longer runs what it ran (env NODE_OPTIONS has another value)");
        check_owner_said(opts, "GITHUB_TOKEN=MARKold\nNODE_OPTIONS=--max-old-space-size=512\nSOME_URL=https://a\n",
                         "    command: [/bin/true]\n    env: {SOME_URL: \"https://b\"}\n", false,
                         "SOME_URL=\"https://b\"\n", "secret_env: [SOME_URL]", "env SOME_URL has another value");
        /* Its arguments, and the same definition with a value left out: it keeps the file's. */
        check_owner_said(opts, "GITHUB_TOKEN=MARKold\n",
                         "    command: [/bin/true, -x]\n    env: {GITHUB_TOKEN: MARKold}\n", false,
                         "GITHUB_TOKEN=\"MARKold\"\n", "secret_env: [GITHUB_TOKEN]", "(its command changed)");
        check_owner(opts, "GITHUB_TOKEN=MARKold\nNODE_OPTIONS=--max-old-space-size=512\n",
                    "    command: [/bin/true]\n    env: {NODE_OPTIONS: --max-old-space-size=512}\n", true,
                    "GITHUB_TOKEN=\"MARKold\"\nNODE_OPTIONS=\"--max-old-space-size=512\"\n");
        /* A file written by hand before secret_env: its names count as the backend's. */
        check_owner(hand, "TOKEN=MARKhand\n", "    command: [/bin/true]\n    env: {TOKEN: MARKhand}\n", true,
                    "TOKEN=\"MARKhand\"\n");
        check_owner(hand, "TOKEN=MARKhand\n",
                    "    command: [/bin/true]\n    env: {NODE_OPTIONS: --require /tmp/x.js}\n", false,
                    "NODE_OPTIONS=\"--require /tmp/x.js\"\n");
#undef DB
}

/* The backends whose running shim lacks values its file gets (import reloads their units): not one
 * whose values were imported again as they are, nor one that has no file. */
static void test_news(void) {
        static const char *const disk = "backends:\n  db:\n    command: [/bin/true]\n    secret_env: [TOKEN]\n"
                                        "  plain:\n    command: [/bin/true]\n";
        static const char *const same = "backends:\n  db:\n    command: [/bin/true]\n    env: {TOKEN: MARKold}\n"
                                        "  plain:\n    command: [/bin/true]\n";
        _cleanup_free_ char *text = NULL, *err = NULL, *text2 = NULL, *err2 = NULL;

        write_text("secrets/db.env", "TOKEN=MARKold\n");
        CHECK(split_over(same, disk, &text, &err) == 0);
        CHECK(!reloaded);
        CHECK(split_over("backends:\n  db:\n    command: [/bin/true]\n    env: {TOKEN: MARKnew}\n"
                         "  plain:\n    command: [/bin/true]\n",
                         disk, &text2, &err2) == 0);
        CHECK_STREQ(reloaded, "db");
        db_files_remove();
}

/* secrets_files_pending() on the manifest text (also the manifest on disk): its result, and its stderr. */
static int files_pending(const char *manifest, bool say, char **ret_stderr) {
        _cleanup_(manifest_doc_freep) ManifestDoc *doc = NULL;
        _cleanup_free_ char *p = path_in("manifest.yaml"), *err = NULL;
        int r, saved;

        write_text("manifest.yaml", manifest);
        saved = output_to_file(STDERR_FILENO, "stderr");
        r = manifest_doc_load(p, &doc, &err);
        CHECK(r >= 0);
        if (r >= 0)
                r = secrets_files_pending(doc, say);
        *ret_stderr = output_restore(STDERR_FILENO, saved, "stderr");
        return r;
}

/* What refresh --check counts besides values to move: a file written by hand to adopt, a file no
 * backend owns to put aside, a secrets directory that would be refused; nothing is changed. */
static void test_files_pending(void) {
        _cleanup_free_ char *err = NULL, *quiet = NULL, *refused = NULL, *silent = NULL, *hand = NULL, *gone = NULL;
        _cleanup_free_ char *secrets = path_in("secrets"), *ph = path_in("secrets/hand.env"),
                            *pg = path_in("secrets/gone.env");
        static const char *const manifest = "backends:\n" BARE("hand") NAMED("named") BACKEND("moves", "{T: MARKm}");

        write_text("secrets/hand.env", "TOKEN=MARKhand\n");
        write_text("secrets/named.env", "TOKEN=MARKnamed\n");
        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        CHECK(files_pending(manifest, true, &err) == 2);
        CHECK(err && strstr(err, "gone.env") && strstr(err, "would be renamed") && !strstr(err, "named.env") &&
              !strstr(err, "MARK"));
        CHECK(files_pending(manifest, false, &quiet) == 2);
        CHECK_STREQ(quiet, "");
        hand = read_text("secrets/hand.env");
        gone = read_text("secrets/gone.env");
        CHECK_STREQ(hand, "TOKEN=MARKhand\n");
        CHECK_STREQ(gone, "TOKEN=MARKgone\n");
        CHECK(!orphan_of("gone.env") && !orphan_of("hand.env"));
        CHECK(secrets && chmod(secrets, 0777) >= 0);
        CHECK(files_pending(manifest, true, &refused) == -EPERM);
        CHECK(refused && secrets && strstr(refused, secrets) && strstr(refused, "writable by root alone"));
        CHECK(files_pending(manifest, false, &silent) == -EPERM);
        CHECK_STREQ(silent, "");
        CHECK(secrets && chmod(secrets, 0700) >= 0);
        CHECK(ph && unlink(ph) >= 0 && pg && unlink(pg) >= 0);
}

/* The secrets directory is checked before anything in it is renamed, as envfile_write() checks it
 * (review 10): one that others may write to changes nothing, and is named. */
static void test_orphans_dir_checked(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *secrets = path_in("secrets"),
                            *gone = path_in("secrets/gone.env");

        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        CHECK(secrets && chmod(secrets, 0777) >= 0);
        CHECK(split("backends: {}\n", &text, &err) == -EPERM);
        CHECK(gone && access(gone, F_OK) >= 0 && !orphan_of("gone.env"));
        CHECK(err && secrets && strstr(err, secrets) && strstr(err, "writable by root alone") && !strstr(err, "MARK"));
        CHECK(secrets && chmod(secrets, 0700) >= 0);
        CHECK(gone && unlink(gone) >= 0);
}

/* The directory swapped for a link to another one while the orphans are put aside: readdir() is where
 * the swap happens (the link takes -Wl,--wrap=readdir). What is renamed is in the directory that was
 * checked, through its descriptor, never by its path again. */
static const char *swap_dir, *swap_aside, *swap_to;

struct dirent *__real_readdir(DIR *d);
struct dirent *__wrap_readdir(DIR *d);
struct dirent *__wrap_readdir(DIR *d) {
        if (swap_dir) {
                const char *from = swap_dir;
                swap_dir = NULL;
                if (rename(from, swap_aside) < 0 || symlink(swap_to, from) < 0)
                        perror("swapping the directory");
        }
        return __real_readdir(d);
}

/* The next fchmod() but fchmod_skip fails with fchmod_fails (the link takes -Wl,--wrap=fchmod). */
static int fchmod_fails;
static unsigned fchmod_skip;

int __real_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode) {
        if (fchmod_fails && fchmod_skip == 0) {
                errno = fchmod_fails;
                fchmod_fails = 0;
                return -1;
        }
        if (fchmod_fails)
                fchmod_skip--;
        return __real_fchmod(fd, mode);
}

/* A file that cannot be written after another was put aside: what was done is not said undone. */
static void test_write_fails_after_orphan(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *o = NULL, *p = NULL, *pn = path_in("secrets/new.env");

        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        fchmod_fails = EIO, fchmod_skip = 1; /* the orphan's fchmod, then the new file's */
        CHECK(split("backends:\n" BACKEND("new", "{T: MARKnew}"), &text, &err) == -EIO);
        CHECK(fchmod_fails == 0);
        fchmod_fails = 0, fchmod_skip = 0;
        CHECK(err && strstr(err, "gone.env belongs") && strstr(err, "cannot write") && strstr(err, "new.env") &&
              strstr(err, "the manifest was not written") && !strstr(err, "nothing was changed") &&
              !strstr(err, "MARK"));
        if (err && !strstr(err, "the manifest was not written"))
                fprintf(stderr, "said: %s\n", err);
        CHECK(pn && access(pn, F_OK) < 0);
        o = orphan_of("gone.env");
        CHECK(o);
        p = o ? path_in(o) : NULL;
        CHECK(p && unlink(p) >= 0);
}

/* A file renamed aside that cannot be made 0600 is said to be renamed (review 10's nit: the message
 * said it could not be renamed). */
static void test_orphan_mode_fails(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *o = NULL, *p = NULL;

        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        fchmod_fails = EIO;
        CHECK(split("backends: {}\n", &text, &err) == -EIO);
        CHECK(fchmod_fails == 0);
        fchmod_fails = 0;
        CHECK(err && strstr(err, "gone.env belongs") && strstr(err, "secret_env: renamed ") &&
              strstr(err, "but cannot make it mode 0600") && !strstr(err, "cannot rename") && !strstr(err, "MARK"));
        if (err && !strstr(err, "cannot make it"))
                fprintf(stderr, "said: %s\n", err);
        o = orphan_of("gone.env");
        CHECK(o);
        p = o ? path_in(o) : NULL;
        CHECK(p && unlink(p) >= 0);
}

static void test_orphans_swapped_dir(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *secrets = path_in("secrets"), *aside = path_in("aside"),
                            *other = path_in("other"), *theirs = path_in("other/gone.env"), *o = NULL, *p = NULL;
        struct stat st;

        CHECK(other && mkdir(other, 0700) >= 0);
        write_text("other/gone.env", "TOKEN=MARKtheirs\n");
        CHECK(theirs && chmod(theirs, 0644) >= 0);
        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        swap_dir = secrets, swap_aside = aside, swap_to = other;
        CHECK(split("backends: {}\n", &text, &err) == 0);
        CHECK(!swap_dir); /* the swap happened */
        swap_dir = NULL;
        /* Theirs is as it was; ours was put aside where it was. */
        CHECK(theirs && lstat(theirs, &st) >= 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0644);
        CHECK(!orphan_of("gone.env")); /* secrets/ is the link to theirs now */
        CHECK(secrets && unlink(secrets) >= 0 && aside && rename(aside, secrets) >= 0);
        o = orphan_of("gone.env");
        CHECK(o);
        p = o ? path_in(o) : NULL;
        CHECK(p && unlink(p) >= 0);
        CHECK(theirs && unlink(theirs) >= 0 && rmdir(other) >= 0);
}

/* One backend's file that cannot be read leaves that backend as it is, not the others. */
static void test_unreadable_file(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *broken = NULL, *fine = NULL;

        write_text("secrets/broken.env", "A=1\nno equals sign\n");
        CHECK(split("backends:\n" BACKEND("broken", "{TOKEN: MARKbroken}") BACKEND("fine", "{T: MARKfine}"), &text,
                    &err) == 0);
        broken = read_text("secrets/broken.env");
        CHECK_STREQ(broken, "A=1\nno equals sign\n");
        fine = read_text("secrets/fine.env");
        CHECK_STREQ(fine, "T=\"MARKfine\"\n");
        CHECK(text && strstr(text, "TOKEN: MARKbroken") && !strstr(text, "MARKfine"));
        CHECK(err && strstr(err, "broken.env:2") && strstr(err, "backend 'broken' keeps its env") &&
              !strstr(err, "MARK"));
}

/* An unreadable file whose backend brings env values the manifest on disk does not have: those would
 * stay in the manifest, readable by the group (review 10): refused, nothing written, no value shown. */
static void test_unreadable_file_new_values(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *broken = NULL, *fine = NULL;
        _cleanup_free_ char *fp = path_in("secrets/fine.env");

        unlink(fp);
        write_text("secrets/broken.env", "A=1\nno equals sign\n");
        CHECK(split_over("backends:\n" BACKEND("broken", "{TOKEN: MARKnew}") BACKEND("fine", "{T: MARKfine}"),
                         "backends:\n  broken:\n    command: [/bin/true]\n", &text, &err) == -EBADMSG);
        broken = read_text("secrets/broken.env");
        CHECK_STREQ(broken, "A=1\nno equals sign\n");
        fine = read_text("secrets/fine.env");
        CHECK(!fine);
        CHECK(err && strstr(err, "broken.env:2") && strstr(err, "nothing was changed") && !strstr(err, "MARK"));
}

/* Review 12 MEDIUM-2: a backend moved to another host (host:) owns no secrets file here: its leftover
 * file is put aside, not adopted into a manifest the loader refuses (secret_env on a remote backend),
 * which failed every import and refresh after renaming files. */
static void test_remote_owns_no_file(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *o = NULL, *p = NULL, *g = NULL;

        write_text("secrets/db.env", "PGPASSWORD=MARKdb\n");
        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        /* refresh: the manifest on disk is the one the admin edited (db now on another host). */
        CHECK(split("backends:\n  db:\n    host: ssh://db.example\n", &text, &err) == 0);
        CHECK(text && !strstr(text, "secret_env"));
        CHECK(err && strstr(err, "backend 'db' lives on another host") && !strstr(err, "MARK"));
        if (!text || !err || !strstr(err, "lives on another host"))
                fprintf(stderr, "now:\n%s\nsaid: %s\n", text ?: "(none)", err ?: "");
        o = orphan_of("db.env");
        CHECK(o);
        p = o ? path_in(o) : NULL;
        CHECK(p && unlink(p) >= 0);
        free(o);
        o = orphan_of("gone.env");
        CHECK(o);
        g = o ? path_in(o) : NULL;
        CHECK(g && unlink(g) >= 0);
}

/* Review 12 MEDIUM-2: the manifest is built and checked before anything on disk changes: one the
 * loader refuses (env on a backend of another host) renames and writes nothing. */
static void test_invalid_changes_nothing(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *gone = NULL, *pr = path_in("secrets/r.env"),
                            *pl = path_in("secrets/l.env"), *pg = path_in("secrets/gone.env");

        write_text("secrets/gone.env", "TOKEN=MARKgone\n");
        CHECK(split("backends:\n" BACKEND("l",
                                          "{T: MARKl}") "  r:\n    host: ssh://r.example\n    env: {TOKEN: MARKr}\n",
                    &text, &err) < 0);
        gone = read_text("secrets/gone.env");
        CHECK_STREQ(gone, "TOKEN=MARKgone\n");
        CHECK(!orphan_of("gone.env"));
        CHECK(pr && access(pr, F_OK) < 0 && pl && access(pl, F_OK) < 0);
        CHECK(err && strstr(err, "lives on ssh://r.example") && strstr(err, "nothing was changed") &&
              !strstr(err, "renamed") && !strstr(err, "MARK"));
        if (!err || !strstr(err, "nothing was changed") || strstr(err, "renamed"))
                fprintf(stderr, "said: %s\n", err ?: "");
        CHECK(pg && unlink(pg) >= 0);
}

/* Review 12 LOW-1: a secrets file is read through the checked directory, never through a link. */
static void test_read_no_link(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *target = path_in("elsewhere.env"),
                            *link = path_in("secrets/db.env");

        write_text("elsewhere.env", "AWS_SECRET_ACCESS_KEY=MARKroot\n");
        CHECK(target && link && symlink(target, link) >= 0);
        /* db from before secret_env (the same on disk): a file of its own would be adopted. */
        CHECK(split("backends:\n" BARE("db"), &text, &err) == 0);
        CHECK(text && !strstr(text, "secret_env"));
        CHECK(err && strstr(err, "db.env") && strstr(err, "left as it is") && !strstr(err, "MARK"));
        if (!text || strstr(text, "secret_env"))
                fprintf(stderr, "now:\n%s\nsaid: %s\n", text ?: "(none)", err ?: "");
        CHECK(link && unlink(link) >= 0 && target && unlink(target) >= 0);
}

/* Review 12 LOW-2: refresh --check says a secrets file that systemd would ignore (a line it cannot
 * read, a value it refuses) and counts it; names and line numbers, never a value. */
static void test_pending_unreadable(void) {
        _cleanup_free_ char *err = NULL, *ph = path_in("secrets/hand.env"), *pn = path_in("secrets/named.env");

        write_text("secrets/hand.env", "TOKEN=MARKhand\nno equals sign\n");
        write_text("secrets/named.env", "TOKEN=\"MARK\xef\xb7\x90\"\n");
        CHECK(files_pending("backends:\n" BARE("hand") NAMED("named"), true, &err) == 2);
        CHECK(err && strstr(err, "hand.env:2") && strstr(err, "named.env") && strstr(err, "TOKEN") &&
              strstr(err, "ignores") && !strstr(err, "MARK"));
        if (!err || !strstr(err, "hand.env:2") || !strstr(err, "named.env"))
                fprintf(stderr, "said: %s\n", err ?: "");
        CHECK(ph && unlink(ph) >= 0 && pn && unlink(pn) >= 0);
}

/* Review 12 INFO: a temporary file of ours that an interrupted write left behind goes when the
 * directory is next written; a fresh one (a write under way) and others' files stay. */
static void test_stale_temp(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *stale = path_in("secrets/a.env.mcp-lazy-0123abcd"),
                            *fresh = path_in("secrets/a.env.mcp-lazy-89abcdef"),
                            *other = path_in("secrets/a.env.keep-me");
        struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};

        write_text("secrets/a.env.mcp-lazy-0123abcd", "T=MARKstale\n");
        write_text("secrets/a.env.mcp-lazy-89abcdef", "T=MARKfresh\n");
        write_text("secrets/a.env.keep-me", "T=MARKother\n");
        CHECK(stale && utimensat(AT_FDCWD, stale, old, 0) >= 0);
        CHECK(other && utimensat(AT_FDCWD, other, old, 0) >= 0);
        CHECK(split("backends:\n" BACKEND("a", "{T: MARKa}"), &text, &err) == 0);
        CHECK(stale && access(stale, F_OK) < 0);
        CHECK(fresh && unlink(fresh) >= 0 && other && unlink(other) >= 0);
}

/* Removes every file of secrets/. */
static void secrets_clear(void) {
        _cleanup_free_ char *p = path_in("secrets");
        DIR *d = p ? opendir(p) : NULL;

        CHECK(d);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_name[0] != '.')
                        CHECK(unlinkat(dirfd(d), de->d_name, 0) >= 0);
        if (d)
                closedir(d);
}

/* db on disk runs /bin/true with its file; the config imported now runs /bin/false with a new token,
 * beside a backend that runs what it ran and a new one. */
static const char *const changed_on_disk =
        "backends:\n  db:\n    command: [/bin/true]\n    secret_env: [TOKEN]\n" BACKEND("same", "{T: MARKsame}");
static const char *const changed_now =
        "backends:\n  db:\n    command: [/bin/false]\n    env: {TOKEN: MARKnew}\n" BACKEND("same", "{T: MARKsame}")
                BACKEND("fresh", "{F: MARKfresh}");

/* R13-4: the manifest cannot be written after the files of a changed backend and a new one were
 * made: they are not put in place, nor left staged, so the old definition (still in the manifest on
 * disk) never runs with the new one's values; the manifest on disk is as it was. The backend that
 * runs what it ran has its file written before the manifest, as always. Before, db.env held MARKnew
 * for /bin/true. */
static void test_manifest_fails(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *manifest = NULL, *same = NULL, *o = NULL, *staged = NULL,
                            *fresh_staged = NULL, *old = NULL, *pd = path_in("secrets/db.env"),
                            *pf = path_in("secrets/fresh.env");

        write_text("secrets/db.env", "TOKEN=MARKold\n");
        manifest_fails = EIO;
        manifest_writes = 0;
        CHECK(split_over(changed_now, changed_on_disk, &text, &err) == -EIO);
        manifest_fails = 0;
        CHECK(manifest_writes == 1);
        CHECK(pd && access(pd, F_OK) < 0 && pf && access(pf, F_OK) < 0);
        staged = beside("db.env", ".mcp-lazy-");
        fresh_staged = beside("fresh.env", ".mcp-lazy-");
        CHECK(!staged && !fresh_staged);
        manifest = read_text("manifest.yaml");
        CHECK_STREQ(manifest, changed_on_disk);
        o = orphan_of("db.env"); /* put aside before, as always: the old definition runs without it */
        old = o ? read_text(o) : NULL;
        CHECK_STREQ(old, "TOKEN=MARKold\n");
        same = read_text("secrets/same.env");
        CHECK_STREQ(same, "T=\"MARKsame\"\n");
        /* same.env is in place with a value its running shim lacks (a run again would find nothing new):
         * its unit is reloaded; the others' files are not in place. */
        CHECK_STREQ(reloaded, "same");
        CHECK(err && strstr(err, "cannot write the manifest") && strstr(err, "'db', 'fresh'") &&
              strstr(err, "were not put in place") && !strstr(err, "cannot remove") && !strstr(err, "MARK"));
        if (!err || !strstr(err, "were not put in place"))
                fprintf(stderr, "said: %s\n", err ?: "");
        secrets_clear();
}

/* The manifest written, then a staged file that cannot be renamed into place: it stays, holding the
 * values the manifest now names (nowhere else for a refresh), and the message says where they are and
 * how to finish; the others are put in place. A later run never removes it, however old, and says
 * it. */
static void test_rename_fails_after_manifest(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *later = NULL, *later_text = NULL, *manifest = NULL,
                            *staged = NULL, *kept = NULL, *fresh = NULL, *ps = NULL, *mv = NULL,
                            *pd = path_in("secrets/db.env");
        struct timespec old[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
        struct stat st;

        write_text("secrets/db.env", "TOKEN=MARKold\n");
        rename_fails_after = EIO;
        CHECK(split_over(changed_now, changed_on_disk, &text, &err) == -EIO);
        rename_fails_after = renameat_fails = 0;
        manifest = read_text("manifest.yaml");
        CHECK(manifest && strstr(manifest, "/bin/false") && strstr(manifest, "secret_env: [TOKEN]") &&
              !strstr(manifest, "MARK"));
        CHECK(pd && access(pd, F_OK) < 0);
        staged = beside("db.env", ".mcp-lazy-staged-");
        CHECK(staged);
        kept = staged ? read_text(staged) : NULL;
        CHECK_STREQ(kept, "TOKEN=\"MARKnew\"\n");
        ps = staged ? path_in(staged) : NULL;
        CHECK(ps && stat(ps, &st) >= 0 && (st.st_mode & 07777) == 0600);
        fresh = read_text("secrets/fresh.env");
        CHECK_STREQ(fresh, "F=\"MARKfresh\"\n");
        /* db's unit is not reloaded: it would start again without its file. */
        CHECK_STREQ(reloaded, "same fresh");
        CHECK(asprintf(&mv, "'mv %s %s', then, if it runs, 'systemctl reload mcp-lazy@db.service'", ps ?: "?",
                       pd ?: "?") >= 0);
        CHECK(err && strstr(err, "cannot rename") && strstr(err, "The manifest was written") &&
              strstr(err, "names TOKEN in secret_env of backend 'db'") && strstr(err, "it is not reloaded now") &&
              strstr(err, mv) && !strstr(err, "MARK"));
        if (!err || !strstr(err, mv))
                fprintf(stderr, "said: %s\n", err ?: "");

        /* A later run: the temporary files' cleanup leaves it, however old, and it is said. */
        CHECK(ps && utimensat(AT_FDCWD, ps, old, 0) >= 0);
        CHECK(split("backends:\n" BACKEND("a", "{T: MARKa}"), &later_text, &later) == 0);
        CHECK(ps && access(ps, F_OK) >= 0);
        CHECK(later && staged && strstr(later, staged + strlen("secrets/")) && strstr(later, "holds values (TOKEN)") &&
              strstr(later, "backend 'db'") && strstr(later, mv) && !strstr(later, "MARK"));
        if (!later || !strstr(later, "holds values (TOKEN)"))
                fprintf(stderr, "said: %s\n", later ?: "");
        secrets_clear();
}

/* --dry-run says every file, those put in place after the manifest too, and the manifest after them;
 * nothing on disk changes. */
static void test_dry_run(void) {
        _cleanup_free_ char *text = NULL, *err = NULL, *out = NULL, *db = NULL, *manifest = NULL,
                            *pf = path_in("secrets/fresh.env"), *ps = path_in("secrets/same.env"),
                            *pd = path_in("secrets/db.env");
        const char *dbw, *freshw, *samew, *mw;

        write_text("secrets/db.env", "TOKEN=MARKold\n");
        manifest_writes = 0;
        CHECK(split_run(changed_now, changed_on_disk, true, &text, &err, &out) == 0);
        CHECK(manifest_writes == 1);
        CHECK(!reloaded);
        dbw = out ? strstr(out, "secrets/db.env (would be written, mode 0600, for root alone: TOKEN; values not shown)")
                  : NULL;
        freshw = out ? strstr(out, "secrets/fresh.env (would be written, mode 0600, for root alone: F;") : NULL;
        samew = out ? strstr(out, "secrets/same.env (would be written, mode 0600, for root alone: T;") : NULL;
        mw = out ? strstr(out, "manifest.yaml (would be written)") : NULL;
        CHECK(dbw && freshw && samew && mw && mw > dbw && mw > freshw && mw > samew && !strstr(out, "MARK"));
        if (!mw)
                fprintf(stderr, "out: %s\n", out ?: "");
        CHECK(err && strstr(err, "db.env belongs to no backend") && strstr(err, "would be renamed") &&
              !strstr(err, "MARK"));
        db = read_text("secrets/db.env");
        CHECK_STREQ(db, "TOKEN=MARKold\n");
        manifest = read_text("manifest.yaml");
        CHECK_STREQ(manifest, changed_on_disk);
        CHECK(!orphan_of("db.env") && !beside("db.env", ".mcp-lazy-") && !beside("fresh.env", ".mcp-lazy-"));
        CHECK(pf && access(pf, F_OK) < 0 && ps && access(ps, F_OK) < 0);
        CHECK(pd && unlink(pd) >= 0);
}

static void test_names_that_stay(void) {
        static const char *const stay[] = {
                "JOURNAL_STREAM",
                "STATE_DIRECTORY",
                "RUNTIME_DIRECTORY",
                "CACHE_DIRECTORY",
                "LOGS_DIRECTORY",
                "CONFIGURATION_DIRECTORY",
                "CREDENTIALS_DIRECTORY",
                "INVOCATION_ID",
                "MAINPID",
                "MANAGERPID",
                "USER",
                "LOGNAME",
                "HOME",
                "SHELL",
                "PATH",
                "LANG",
                "LANGUAGE",
                "XDG_RUNTIME_DIR",
                "XDG_CONFIG_HOME",
                "TERM",
                "NOTIFY_SOCKET",
                "LISTEN_FDS",
                "LISTEN_PID",
                "LISTEN_FDNAMES",
                "WATCHDOG_USEC",
                "WATCHDOG_PID",
                "SYSTEMD_LOG_LEVEL",
                "SD_EVENT_PROFILE_DELAYS",
                "LD_PRELOAD",
                "LD_LIBRARY_PATH",
                "MCP_LAZY_MANIFEST",
                "GLIBC_TUNABLES",
                "MALLOC_ARENA_MAX",
                "MALLOC_CHECK_",
                "GCONV_PATH",
                "LOCPATH",
                "NLSPATH",
                "TZ",
                "TZDIR",
                "LC_ALL",
                "LC_CTYPE",
                "ASAN_OPTIONS",
                "UBSAN_OPTIONS",
                "LSAN_OPTIONS",
                "TMPDIR",
                "RES_OPTIONS",
                "LOCALDOMAIN",
                "HOSTALIASES",
                "POSIXLY_CORRECT",
                "TRIGGER_UNIT",
                "MONITOR_SERVICE_RESULT",
                "PIDFILE",
                "MEMORY_PRESSURE_WATCH",
                "EXIT_STATUS",
                "SERVICE_RESULT",
                NULL,
        };
        static const char *const move[] = {
                "API_TOKEN",
                "GITHUB_TOKEN",
                "PGPASSWORD",
                "HOMEDIR",
                "TZX",
                "PATHS",
                "USERNAME",
                "LANGX",
                "MAIN_PID",
                "LC",
                "LD",
                "SECRET_TZ",
                "XDG",
                "my_home",
                "SD_API_KEY",
                "SD_WEBUI_AUTH",
                "MONITOR_API_KEY",
                "MONITOR_TOKEN",
                "TRIGGER_SECRET_KEY",
                "XDG_TOKEN",
                "LC_SECRET",
                "MALLOC_KEY",
                NULL,
        };

        for (size_t i = 0; stay[i]; i++) {
                CHECK(secrets_env_name_stays(stay[i], strlen(stay[i])));
                if (!secrets_env_name_stays(stay[i], strlen(stay[i])))
                        fprintf(stderr, "moves: %s\n", stay[i]);
        }
        for (size_t i = 0; move[i]; i++) {
                CHECK(!secrets_env_name_stays(move[i], strlen(move[i])));
                if (secrets_env_name_stays(move[i], strlen(move[i])))
                        fprintf(stderr, "stays: %s\n", move[i]);
        }
        /* By its n bytes, not its NUL: "HOME" within "HOMEDIR". */
        CHECK(secrets_env_name_stays("HOMEDIR", 4));
        CHECK(!secrets_env_name_stays("HOMEDIR", 5));
}

int main(void) {
        _cleanup_free_ char *rm = NULL;

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return EXIT_FAILURE;
        }
        test_stays_as_written();
        test_refused();
        test_orphans();
        test_unreadable_file();
        test_unreadable_file_new_values();
        test_orphan_link();
        test_orphans_dir_checked();
        test_owner_runs_the_same();
        test_news();
        test_files_pending();
        test_orphans_swapped_dir();
        test_orphan_mode_fails();
        test_write_fails_after_orphan();
        test_remote_owns_no_file();
        test_invalid_changes_nothing();
        test_read_no_link();
        test_pending_unreadable();
        test_stale_temp();
        test_manifest_fails();
        test_rename_fails_after_manifest();
        test_dry_run();
        test_names_that_stay();
        free(reloaded);
        if (asprintf(&rm, "rm -rf '%s'", dir) >= 0 && system(rm) != 0)
                fprintf(stderr, "cannot remove %s\n", dir);
        return tests_finish("test-secrets");
}
