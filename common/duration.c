/* Durations: parsing the manifest's spelling, and printing it back for summaries. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "duration.h"
#include "macros.h"

static const struct {
        const char *suffix;
        uint64_t usec;
} units[] = {
        /* Longest first, so "ms" and "min" are not read as "m". */
        {"min", 60 * USEC_PER_SEC},  {"ms", USEC_PER_MSEC},    {"us", 1},
        {"h", 3600 * USEC_PER_SEC},  {"m", 60 * USEC_PER_SEC}, {"s", USEC_PER_SEC},
        {"d", 86400 * USEC_PER_SEC},
};

#define DURATION_MAX (366ULL * 86400ULL * USEC_PER_SEC)

int duration_parse(const char *s, uint64_t *ret_usec) {
        uint64_t total = 0;
        const char *p = s;

        if (!s || !*s)
                return -EINVAL;
        while (*p) {
                uint64_t n = 0, mult = 0;
                const char *start = p;

                while (*p >= '0' && *p <= '9') {
                        n = n * 10 + (uint64_t) (*p++ - '0');
                        if (n > DURATION_MAX)
                                return -ERANGE;
                }
                if (p == start)
                        return -EINVAL;
                if (!*p && start == s) {
                        mult = USEC_PER_SEC; /* bare number */
                } else {
                        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                                size_t l = strlen(units[i].suffix);
                                if (strncmp(p, units[i].suffix, l) == 0) {
                                        mult = units[i].usec;
                                        p += l;
                                        break;
                                }
                        }
                        if (!mult)
                                return -EINVAL;
                }
                if (n > DURATION_MAX / mult)
                        return -ERANGE;
                total += n * mult;
                if (total > DURATION_MAX)
                        return -ERANGE;
        }
        *ret_usec = total;
        return 0;
}

const char *duration_format(uint64_t usec, char *buf, unsigned size) {
        if (usec == USEC_INFINITY)
                snprintf(buf, size, "never");
        else if (usec % (3600 * USEC_PER_SEC) == 0 && usec > 0)
                snprintf(buf, size, "%lluh", (unsigned long long) (usec / (3600 * USEC_PER_SEC)));
        else if (usec % (60 * USEC_PER_SEC) == 0 && usec > 0)
                snprintf(buf, size, "%llum", (unsigned long long) (usec / (60 * USEC_PER_SEC)));
        else if (usec % USEC_PER_SEC == 0)
                snprintf(buf, size, "%llus", (unsigned long long) (usec / USEC_PER_SEC));
        else
                snprintf(buf, size, "%llums", (unsigned long long) (usec / USEC_PER_MSEC));
        return buf;
}
