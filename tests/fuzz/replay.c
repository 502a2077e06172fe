/* Replays fuzz inputs without libFuzzer: each file (or each file of each directory) on the command line
 * runs through LLVMFuzzerTestOneInput in a child of its own, so one crasher cannot hide the rest. */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"

static unsigned n_passed, n_failed;

static int slurp(const char *path, uint8_t **ret, size_t *ret_len) {
        FILE *f = fopen(path, "re");
        uint8_t *buf = NULL;
        size_t len = 0, alloc = 0;

        if (!f)
                return -errno;
        for (;;) {
                size_t n;
                if (alloc - len < 4096) {
                        uint8_t *p = realloc(buf, alloc + 65536);
                        if (!p) {
                                free(buf);
                                fclose(f);
                                return -ENOMEM;
                        }
                        buf = p;
                        alloc += 65536;
                }
                n = fread(buf + len, 1, alloc - len, f);
                len += n;
                if (n == 0)
                        break;
        }
        fclose(f);
        /* libFuzzer hands out exactly len bytes: so do we, or overreads past the input go unseen. */
        *ret = len ? realloc(buf, len) ?: buf : buf;
        *ret_len = len;
        return 0;
}

static void replay_file(const char *path) {
        pid_t pid;
        int status;

        fflush(NULL);
        pid = fork();
        if (pid < 0) {
                fprintf(stderr, "fuzz-replay: %s: cannot fork: %s\n", path, strerror(errno));
                n_failed++;
                return;
        }
        if (pid == 0) {
                uint8_t *data = NULL;
                size_t len = 0;
                int r = slurp(path, &data, &len);

                if (r < 0) {
                        fprintf(stderr, "fuzz-replay: %s: cannot read: %s\n", path, strerror(-r));
                        exit(2);
                }
                (void) LLVMFuzzerTestOneInput(data, len);
                free(data);
                exit(0); /* exit(), not _exit(): LeakSanitizer runs at exit */
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) {
                        status = -1;
                        break;
                }
        if (status == 0)
                n_passed++;
        else {
                n_failed++;
                if (WIFSIGNALED(status))
                        fprintf(stderr, "fuzz-replay: FAILED %s (signal %d)\n", path, WTERMSIG(status));
                else
                        fprintf(stderr, "fuzz-replay: FAILED %s (exit status %d)\n", path, WEXITSTATUS(status));
        }
}

static int by_name(const struct dirent **a, const struct dirent **b) {
        return strcmp((*a)->d_name, (*b)->d_name);
}

static void replay_dir(const char *dir) {
        struct dirent **names;
        int n = scandir(dir, &names, NULL, by_name);

        if (n < 0) {
                fprintf(stderr, "fuzz-replay: %s: %s\n", dir, strerror(errno));
                n_failed++;
                return;
        }
        for (int i = 0; i < n; i++) {
                char *path = NULL;
                struct stat st;

                if (names[i]->d_name[0] != '.' && asprintf(&path, "%s/%s", dir, names[i]->d_name) >= 0 &&
                    stat(path, &st) == 0 && S_ISREG(st.st_mode))
                        replay_file(path);
                free(path);
                free(names[i]);
        }
        free(names);
}

int main(int argc, char *argv[]) {
        if (argc < 2) {
                fprintf(stderr, "Usage: %s DIR|FILE...\n", argv[0]);
                return 2;
        }
        for (int i = 1; i < argc; i++) {
                struct stat st;

                if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
                        replay_dir(argv[i]);
                else
                        replay_file(argv[i]);
        }
        printf("fuzz-replay: %s: %u passed, %u failed\n", argv[0], n_passed, n_failed);
        return n_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
