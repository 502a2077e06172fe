/* Environment files: what is written reads back as exactly what went in, hand-written files read as
 * systemd reads them, and the file is root's alone from the start. */
#include <dirent.h>
#include <errno.h>
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

        check_refused("A=1\nno equals sign\n", 2);
        check_refused("A=1\n1A=2\n", 2);
        check_refused("MY-VAR=1\n", 1);
        check_refused("A=1\nB=\"never closed\n", 2);
        check_refused("A='x' trailing\n", 1);
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

int main(void) {
        test_round_trip();
        test_format_refuses();
        test_hand_written();
        test_write();
        return tests_finish("test-envfile");
}
