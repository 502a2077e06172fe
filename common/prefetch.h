/* Prefetching, at the start of a wakeup, what the wakeup is about to touch. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* After a slow peer ran on the same CPU (a node backend: ~350 us), a wakeup finds its lines out of the
 * caches and its pages out of the TLB, and takes the misses one after another as the code reaches them
 * (a wakeup is ~5,000 instructions, far past what the CPU looks ahead). Asked for at its start, they
 * overlap. A prefetch never faults; still, every range here is computed from an object the process
 * owns. A prefetch per line or page, over a few lines or pages: a few dozen per wakeup. */

#define PREFETCH_LINE 64U
#define PREFETCH_PAGE 4096U

/* The lines of [p, p + len): to be read, or (prefetchw_lines()) written. */
static inline void prefetch_lines(const void *p, size_t len) {
        for (uintptr_t a = (uintptr_t) p & ~(uintptr_t) (PREFETCH_LINE - 1); a < (uintptr_t) p + len;
             a += PREFETCH_LINE)
                __builtin_prefetch((const void *) a, 0, 3);
}

/* x86-64: PREFETCHW asks for the line ready to be written (a CPU without it takes the opcode as a NOP);
 * gcc emits it only where told the target has it (-mprfchw). */
static inline void prefetchw_line(const void *p) {
#if defined(__x86_64__)
        __asm__("prefetchw %0" : : "m"(*(const char *) p));
#else
        __builtin_prefetch(p, 1, 3);
#endif
}

static inline void prefetchw_lines(const void *p, size_t len) {
        for (uintptr_t a = (uintptr_t) p & ~(uintptr_t) (PREFETCH_LINE - 1); a < (uintptr_t) p + len;
             a += PREFETCH_LINE)
                prefetchw_line((const void *) a);
}

/* A line in each page of [p, p + len): the page's translation then waits in the TLB (and the walk's
 * upper levels in the page-walk caches) for the code or data that runs there. */
static inline void prefetch_pages(const void *p, size_t len) {
        for (uintptr_t a = (uintptr_t) p; a < (uintptr_t) p + len; a += PREFETCH_PAGE)
                __builtin_prefetch((const void *) a, 0, 2);
}

/* What every wakeup of this process touches, whatever woke it: our hot statics, the message layer's
 * tables and first room, a line of each page of the code a message runs (the build's hot-path section,
 * and the event loop's and libc's functions called per message). Called where a channel's input wakes
 * the process (channel.c's on_in(), the entry of all four wakeups of a relayed call). */
void prefetch_wakeup(void);
