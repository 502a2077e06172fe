/* What the fuzz targets share: libFuzzer's entry point (also driven by replay.c) and a hard assert. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant that does not hold is a finding: abort, so libFuzzer keeps the input and the replay counts it. */
#define FUZZ_ASSERT(cond)                                                                            \
        do {                                                                                         \
                if (!(cond)) {                                                                       \
                        fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
                        abort();                                                                     \
                }                                                                                    \
        } while (0)
