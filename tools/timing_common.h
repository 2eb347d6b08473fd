/* The clock and the median helper the standalone timing tools (gemm_timing.c, qmatmul_timing.c) share. */
#ifndef TORCHBURN_TOOLS_TIMING_COMMON_H
#define TORCHBURN_TOOLS_TIMING_COMMON_H

#include <time.h>

static inline double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* qsort comparator of doubles, ascending. */
static inline int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
