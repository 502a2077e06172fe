/* Environment files: what is written reads back as exactly what went in, hand-written files read as
 * systemd reads them, and the file is root's alone from the start. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envfile.h"
#include "macros.h"
#include "manifest-write.h"
#include "tests.h"

static const char *const values[] = {
        "",
        "plain",
        " leading and trailing blanks ",
        "a \"quoted\" word",
        "back\\slash\\",
        "$HOME and ${HOME} and $(id) and `id`",
        "it's",
        "two\nlines\n",
        "tab\there",
        "# not a comment",
        "a=b=c",
        "\\n is not a newline",
        "ünïcödé ✓",
        "\"",
        "\\",
        NULL,
};

static void test_round_trip(void) {
        char *env[ELEMENTSOF(values)] = {};
        _cleanup_free_ char *text = NULL;
        _cleanup_strv_free_ char **back = NULL;
        size_t len, n = 0;
        unsigned line = 0;

        for (size_t i = 0; values[i]; i++, n++)
                CHECK(asprintf(&env[i], "V%zu=%s", i, values[i]) >= 0);
        CHECK(envfile_format(env, &text, &len) == 0);
        CHECK(strlen(text) == len);
        CHECK(envfile_parse(text, len, &back, &line) == 0);
        for (size_t i = 0; i < n; i++)
                CHECK_STREQ(back ? back[i] : NULL, env[i]);
        CHECK(back && !back[n]);
        for (size_t i = 0; i < n; i++)
                free(env[i]);
}

static void test_format_refuses(void) {
        char *bad_name[] = {(char *) "1X=a", NULL}, *dash[] = {(char *) "MY-VAR=a", NULL};
        char *no_eq[] = {(char *) "NAME", NULL}, *latin1[] = {(char *) "X=caf\xe9", NULL};
        char *text = NULL;
        size_t len;

        CHECK(envfile_format(bad_name, &text, &len) == -EINVAL);
        CHECK(envfile_format(dash, &text, &len) == -EINVAL);
        CHECK(envfile_format(no_eq, &text, &len) == -EINVAL);
        CHECK(envfile_format(latin1, &text, &len) == -EINVAL);
        CHECK(text == NULL);
}

/* What systemd 252 refuses (its whole file then ignored): Unicode noncharacters; what the kernel
 * cannot pass to a program: NAME=VALUE of MAX_ARG_STRLEN (128 KiB) or more. */
static void test_format_refuses_what_systemd_refuses(void) {
        static const char *const refused[] = {
                "\xef\xb7\x90",     /* U+FDD0 */
                "\xef\xb7\xaf",     /* U+FDEF */
                "x\xef\xbf\xbe",    /* U+FFFE */
                "\xef\xbf\xbfx",    /* U+FFFF */
                "\xf0\x9f\xbf\xbe", /* U+1FFFE */
                "\xf4\x8f\xbf\xbf", /* U+10FFFF */
                NULL,
        };
        static const char *const taken[] = {
                "\xef\xb7\x8f",     /* U+FDCF */
                "\xef\xb7\xb0",     /* U+FDF0 */
                "\xef\xbf\xbd",     /* U+FFFD */
                "\xf4\x8f\xbf\xbd", /* U+10FFFD */
                NULL,
        };
        _cleanup_free_ char *big = malloc(ENVFILE_ASSIGNMENT_MAX + 1);
        char *text = NULL, *env[2] = {};
        const char *reason = NULL;
        size_t len;

        for (size_t i = 0; refused[i]; i++) {
                CHECK(asprintf(&env[0], "SECRET=%s", refused[i]) >= 0);
                reason = NULL;
                CHECK(envfile_assignment_check(env[0], &reason) == -EINVAL);
                CHECK(reason && strstr(reason, "noncharacter") && !strstr(reason, refused[i]));
                CHECK(envfile_format(env, &text, &len) == -EINVAL);
                CHECK(text == NULL);
                free(env[0]);
        }
        for (size_t i = 0; taken[i]; i++) {
                CHECK(asprintf(&env[0], "SECRET=%s", taken[i]) >= 0);
                CHECK(envfile_assignment_check(env[0], &reason) == 0);
                CHECK(envfile_format(env, &text, &len) == 0);
                free(text);
                text = NULL;
                free(env[0]);
        }
        CHECK(big);
        if (!big)
                return;
        /* The longest that goes (NAME=VALUE and its NUL: 128 KiB), and one byte more. */
        memset(big, 'v', ENVFILE_ASSIGNMENT_MAX);
        memcpy(big, "BIG=", 4);
        big[ENVFILE_ASSIGNMENT_MAX - 1] = 0;
        env[0] = big;
        CHECK(envfile_assignment_check(big, NULL) == 0);
        CHECK(envfile_format(env, &text, &len) == 0);
        free(text);
        text = NULL;
        big[ENVFILE_ASSIGNMENT_MAX - 1] = 'v';
        big[ENVFILE_ASSIGNMENT_MAX] = 0;
        reason = NULL;
        CHECK(envfile_assignment_check(big, &reason) == -E2BIG);
        CHECK(reason && strstr(reason, "128 KiB") && !strstr(reason, "vvvv"));
        CHECK(envfile_format(env, &text, &len) == -E2BIG);
        CHECK(text == NULL);
}

static void check_parse(const char *text, const char *const *want) {
        _cleanup_strv_free_ char **env = NULL;
        unsigned line = 0;
        size_t i = 0;

        CHECK(envfile_parse(text, strlen(text), &env, &line) == 0);
        for (; want[i]; i++)
                CHECK_STREQ(env ? env[i] : NULL, want[i]);
        CHECK(env && !env[i]);
}

static void check_refused(const char *text, unsigned want_line) {
        _cleanup_strv_free_ char **env = NULL;
        unsigned line = 0;

        CHECK(envfile_parse(text, strlen(text), &env, &line) == -EBADMSG);
        CHECK(line == want_line);
        CHECK(env == NULL);
}

static void test_hand_written(void) {
        check_parse("", (const char *const[]){NULL});
        check_parse("# a comment\n; another\n\n   \nA=1\n", (const char *const[]){"A=1", NULL});
        check_parse("A = spaced value  \nB=\"quoted  \"  \nC='single \\n $x'\n",
                    (const char *const[]){"A=spaced value", "B=quoted  ", "C=single \\n $x", NULL});
        check_parse("A=one \\\ntwo\nB=x\\ \n", (const char *const[]){"A=one two", "B=x ", NULL});
        check_parse("A=\"a\\qb\"\n", (const char *const[]){"A=a\\qb", NULL});
        check_parse("A=first\nB=b\nA=second", (const char *const[]){"A=second", "B=b", NULL});
        check_parse("A=\"multi\nline\"\nB=2\n", (const char *const[]){"A=multi\nline", "B=2", NULL});
        check_parse("A=#x\n", (const char *const[]){"A=#x", NULL});
        /* As systemd 252 reads them: CR ends a line as LF does; text after a closing quote goes on
         * with the value (blanks between skipped); a quote inside unquoted text is a character. */
        check_parse("A=b\r\nB=c \r\nC=\"q\r\"\r\n", (const char *const[]){"A=b", "B=c", "C=q\r", NULL});
        check_parse("A=b\rB=c", (const char *const[]){"A=b", "B=c", NULL});
        check_parse("A=\"x\"y\nB='x' trailing \nC=\"a\" 'b'  c\\ \nD=x\"y\"\nE=\"x\"  \n",
                    (const char *const[]){"A=xy", "B=xtrailing", "C=abc ", "D=x\"y\"", "E=x", NULL});
        check_parse("# even \\\\\nA=1\n# escaped \\x\nB=2\n", (const char *const[]){"A=1", "B=2", NULL});

        check_refused("A=1\nno equals sign\n", 2);
        check_refused("A=1\n1A=2\n", 2);
        check_refused("MY-VAR=1\n", 1);
        check_refused("A=1\nB=\"never closed\n", 2);
        check_refused("A=1\r\nB=\"never closed\r\n", 2);
        /* A comment ending in an escaping \: systemd 252 comments out the next line too, 254 does not. */
        check_refused("A=1\n# note \\\nB=hidden\n", 2);
        check_refused("A=1\r\n; note \\\r\nB=hidden\r\n", 2);
        check_refused("=value\n", 1);
}

static unsigned files_in(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *de;
        unsigned n = 0;

        while (d && (de = readdir(d)))
                n += de->d_name[0] != '.';
        if (d)
                closedir(d);
        return n;
}

static void test_write(void) {
        char base[] = "/tmp/test-envfile-XXXXXX";
        _cleanup_free_ char *dir = NULL, *path = NULL, *link = NULL, *text = NULL;
        _cleanup_strv_free_ char **back = NULL;
        char *env[] = {(char *) "TOKEN=s3cr\"t $x", NULL};
        struct stat st;
        unsigned line;
        size_t len;
        mode_t old = umask(0);

        CHECK(mkdtemp(base) != NULL);
        CHECK(asprintf(&dir, "%s/secrets", base) >= 0 && asprintf(&path, "%s/one.env", dir) >= 0);
        CHECK(asprintf(&link, "%s/link.env", dir) >= 0);
        /* umask 0 widens nothing: the directory is 0700 and the file 0600. */
        CHECK(envfile_write(path, env) == 0);
        CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700);
        CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600 && st.st_uid == geteuid());
        CHECK(files_in(dir) == 1); /* no temporary file left */
        CHECK(read_file_full(path, 4096, &text, &len) == 0);
        CHECK(envfile_parse(text, len, &back, &line) == 0);
        CHECK_STREQ(back ? back[0] : NULL, env[0]);
        /* A directory others may enter is made 0700; one others may write to is refused. */
        CHECK(chmod(dir, 0755) == 0);
        CHECK(envfile_write(path, env) == 0);
        CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700);
        CHECK(chmod(dir, 0730) == 0);
        CHECK(envfile_write(path, env) == -EPERM);
        CHECK(chmod(dir, 0700) == 0);
        /* A link in its place is not followed. */
        CHECK(symlink("/tmp/elsewhere.env", link) == 0);
        CHECK(envfile_write(link, env) == -EPERM);
        CHECK(access("/tmp/elsewhere.env", F_OK) < 0);
        /* Even umask 0777 leaves the owner able to read it back. */
        umask(0777);
        CHECK(envfile_write(path, env) == 0);
        CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600);
        umask(old);
        CHECK(unlink(link) == 0 && unlink(path) == 0 && rmdir(dir) == 0 && rmdir(base) == 0);
}

/* The race review 10 saw: the directory swapped for a link to another one right after envfile_write()
 * checked it. fchmod() is where the swap happens (the link takes -Wl,--wrap=fchmod): envfile_write()
 * makes a directory that others may enter 0700 right after checking it. */
static const char *swap_dir, *swap_aside, *swap_to;

int __real_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode) {
        if (swap_dir) {
                const char *d = swap_dir;
                swap_dir = NULL;
                if (rename(d, swap_aside) < 0 || symlink(swap_to, d) < 0)
                        perror("swapping the directory");
        }
        return __real_fchmod(fd, mode);
}

/* What is written goes into the directory that was checked, through its descriptor: never by its path
 * again, which may lead elsewhere by then. */
static void test_write_swapped_dir(void) {
        char base[] = "/tmp/test-envfile-XXXXXX";
        _cleanup_free_ char *dir = NULL, *path = NULL, *aside = NULL, *other = NULL, *in_aside = NULL;
        char *env[] = {(char *) "TOKEN=x", NULL};

        CHECK(mkdtemp(base) != NULL);
        CHECK(asprintf(&dir, "%s/secrets", base) >= 0 && asprintf(&path, "%s/one.env", dir) >= 0);
        CHECK(asprintf(&aside, "%s/aside", base) >= 0 && asprintf(&other, "%s/other", base) >= 0);
        CHECK(asprintf(&in_aside, "%s/one.env", aside) >= 0);
        CHECK(mkdir(dir, 0755) == 0 && mkdir(other, 0700) == 0);
        swap_dir = dir, swap_aside = aside, swap_to = other;
        CHECK(envfile_write(path, env) == 0);
        CHECK(!swap_dir); /* the swap happened */
        swap_dir = NULL;
        CHECK(files_in(other) == 0);
        CHECK(access(in_aside, F_OK) == 0);
        CHECK(files_in(aside) == 1); /* no temporary file left */
        (void) unlink(in_aside);
        (void) unlink(dir);
        CHECK(rmdir(aside) == 0 && rmdir(other) == 0 && rmdir(base) == 0);
}

/* A file larger than the limit is refused from its size, before anything is allocated or read for it:
 * a sparse 1 TiB file gave -ENOMEM (or, under ASan, an allocation-size abort) before, not -EFBIG. */
static void test_read_bounded(void) {
        char path[] = "/tmp/test-envfile-big-XXXXXX";
        _cleanup_close_ int fd = mkstemp(path);
        char *text = NULL;
        size_t len = 0;

        CHECK(fd >= 0);
        if (fd < 0)
                return;
        CHECK(ftruncate(fd, (off_t) 1 << 40) == 0);
        CHECK(read_fd_full(fd, 4096, &text, &len, NULL) == -EFBIG);
        CHECK(read_file_full(path, 4096, &text, &len) == -EFBIG);
        CHECK(!text);
        CHECK(ftruncate(fd, 5000) == 0);
        CHECK(read_file_full(path, 4096, &text, &len) == -EFBIG);
        CHECK(ftruncate(fd, 4096) == 0);
        CHECK(read_file_full(path, 4096, &text, &len) == 0 && len == 4096);
        free(text);
        (void) unlink(path);
}

/* A staged file is written, synced and 0600 under a name no cleanup of temporary files takes, and put
 * in place only by envfile_commit_at(); the two kinds of names never overlap. */
static void test_stage(void) {
        char base[] = "/tmp/test-envfile-XXXXXX";
        _cleanup_free_ char *staged = NULL, *text = NULL, *path = NULL;
        _cleanup_close_ int dfd = -EBADF;
        char *env[] = {(char *) "TOKEN=x", NULL};
        struct stat st;
        size_t len;

        CHECK(mkdtemp(base) != NULL);
        CHECK(envfile_dir_open(base, true, &dfd) == 0);
        CHECK(envfile_stage_at(dfd, "one.env", env, &staged) == 0);
        CHECK(staged && envfile_is_staged_name(staged) && !envfile_is_temp_name(staged));
        CHECK(staged && strncmp(staged, "one.env.mcp-lazy-staged-", 24) == 0);
        CHECK(staged && fstatat(dfd, staged, &st, 0) == 0 && (st.st_mode & 07777) == 0600);
        CHECK(faccessat(dfd, "one.env", F_OK, 0) < 0 && files_in(base) == 1);
        CHECK(staged && envfile_commit_at(dfd, staged, "one.env") == 0);
        CHECK(asprintf(&path, "%s/one.env", base) >= 0 && read_file_full(path, 4096, &text, &len) == 0);
        CHECK_STREQ(text, "TOKEN=\"x\"\n");
        CHECK(files_in(base) == 1);
        /* A link in its place is refused, as envfile_write() refuses it. */
        CHECK(symlinkat("/tmp/elsewhere.env", dfd, "link.env") == 0);
        free(staged);
        staged = NULL;
        CHECK(envfile_stage_at(dfd, "link.env", env, &staged) == -EPERM && !staged && files_in(base) == 2);
        CHECK(unlinkat(dfd, "link.env", 0) == 0);

        CHECK(envfile_is_temp_name("a.env.mcp-lazy-0123abcd") && !envfile_is_staged_name("a.env.mcp-lazy-0123abcd"));
        CHECK(envfile_is_staged_name("a.env.mcp-lazy-staged-0123abcd"));
        CHECK(envfile_is_temp_name("x.env.y.env.mcp-lazy-0123abcd"));
        CHECK(!envfile_is_temp_name("a.env.mcp-lazy-staged-0123abcd"));
        CHECK(!envfile_is_temp_name("a.env.mcp-lazy-0123abcdX") && !envfile_is_temp_name(".env.mcp-lazy-0123abcd"));
        CHECK(!envfile_is_staged_name("a.env.mcp-lazy-staged-0123ABCD") && !envfile_is_temp_name("a.env"));
        CHECK(unlink(path) == 0 && rmdir(base) == 0);
}

int main(void) {
        test_round_trip();
        test_format_refuses();
        test_format_refuses_what_systemd_refuses();
        test_hand_written();
        test_write();
        test_write_swapped_dir();
        test_stage();
        test_read_bounded();
        return tests_finish("test-envfile");
}
