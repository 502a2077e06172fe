/* Durations as manifests write them: "90s", "5m", "2h", "1h30m", "500ms", "0". */
#pragma once

#include <stdint.h>

/* Parses into microseconds. A bare integer is seconds, as in systemd. -EINVAL on anything else,
 * -ERANGE past a year. */
int duration_parse(const char *s, uint64_t *ret_usec);
/* "5m", "90s", "1h30m"... into buf (32 bytes is plenty). */
const char *duration_format(uint64_t usec, char *buf, unsigned size);
