/* Ownership and small helpers shared by every file: _cleanup_, TAKE_PTR, ELEMENTSOF. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#define _cleanup_(f)   __attribute__((cleanup(f)))
#define _unused_       __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* Hand a pointer on: returns it and leaves NULL behind, so the local's cleanup does nothing. */
#define TAKE_PTR(p)                      \
        ({                               \
                __typeof__(p) _p_ = (p); \
                (p) = NULL;              \
                _p_;                     \
        })

#define TAKE_FD(fd)              \
        ({                       \
                int _fd_ = (fd); \
                (fd) = -EBADF;   \
                _fd_;            \
        })

/* The cleanups test for NULL themselves: most of them find nothing to free, and on the warm path a call
 * into another library costs its PLT and GOT lines and the callee's code page, cache-cold after a slow
 * backend has run (tests/bench hot-path.mjs, bench section 2). */
static inline void freep(void *p) {
        if (*(void **) p)
                free(*(void **) p);
}

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                (void) close(fd);
                errno = saved;
        }
        return -EBADF;
}

static inline void closep(int *fd) {
        *fd = safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_free_  _cleanup_(freep)

static inline void cJSON_Deletep(cJSON **j) {
        if (*j)
                cJSON_Delete(*j);
}
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

static inline void strv_free(char **l) {
        if (!l)
                return;
        for (char **i = l; *i; i++)
                free(*i);
        free(l);
}
static inline void strv_freep(char ***l) {
        strv_free(*l);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)

#define streq(a, b) (strcmp((a), (b)) == 0)

/* A static that a message's path reads or writes on every wakeup: those of every file together, in a
 * section of their own (a few 64-byte lines after .data), not each on a line of its own among the cold
 * statics. A process woken cache-cold after a slow backend fetches each such line again. */
#define _hot_ __attribute__((section("mcp_lazy_hot")))
/* A static object a wakeup reads a line or two of, too large to be prefetched whole with the hot
 * statics: linked right before them, on their page (the Makefile's hot-path.ld). */
#define _warm_ __attribute__((section("mcp_lazy_warm")))

/* Built with AddressSanitizer: gcc says so with __SANITIZE_ADDRESS__, clang (the fuzzers' compiler)
 * only through __has_feature(). The process-wide pools that hand a freed block to the next user (a
 * Message's rooms, the shim's free list of routes) are off then, so that ASan sees every use after
 * free instead of the next user's bytes. */
#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifndef HAVE_ASAN
#define HAVE_ASAN 0
#endif

/* calloc() of an object laid out by 64-byte cache line (its fields that a message's path touches
 * together, together): it starts on a line, so that each group is the lines it was laid out for. */
static inline void *calloc_lines(size_t size) {
        size_t n = (size + 63) & ~(size_t) 63;
        void *p = aligned_alloc(64, n);

        if (p)
                memset(p, 0, n);
        return p;
}

/* strlen() and memcmp() of the few bytes of an id or a method name, inline: for a handful of bytes a loop
 * costs what the call does, and a message's path then calls into no libc function of its own (a code
 * page each, a PLT line, a GOT line, in a process woken cache-cold). The empty asm keeps GCC from
 * turning the loop back into the call. */
static inline size_t short_strlen(const char *s) {
        size_t n = 0;

        while (s[n]) {
                n++;
                __asm__("" : "+r"(n));
        }
        return n;
}

static inline bool short_memeq(const char *a, const char *b, size_t n) {
        if (n > 16)
                return memcmp(a, b, n) == 0;
        for (size_t i = 0; i < n; i++)
                if (a[i] != b[i])
                        return false;
        return true;
}

#define USEC_PER_MSEC 1000ULL
#define USEC_PER_SEC  1000000ULL
#define USEC_INFINITY ((uint64_t) UINT64_MAX)

#define _fallthrough_ __attribute__((fallthrough))
#define _noreturn_    __attribute__((noreturn))

/* Set ("1") by mcp-lazy for a shim it starts itself, in a session of its own: the shim starts its
 * backends in that session (each in a process group of its own), so that mcp-lazy can end whatever is
 * left in it when the shim ends, killed or not. Never passed on to a backend. */
#define SHIMD_SESSION_ENV "MCP_LAZY_SHIMD_SESSION"
