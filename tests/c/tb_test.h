/* A tiny test harness for the C tests: TB_CHECK records a failure with file:line and keeps going;
 * tb_test_finish prints "N passed, N failed" and returns the process exit code. */
#ifndef TB_TEST_H
#define TB_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern _Atomic int tb_test_checks_passed; /* atomic: checks may run on several threads */
extern _Atomic int tb_test_checks_failed;

#define TB_CHECK(condition)                                                           \
    do {                                                                              \
        if (condition) {                                                              \
            tb_test_checks_passed++;                                                  \
        } else {                                                                      \
            tb_test_checks_failed++;                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
        }                                                                             \
    } while (0)

#define TB_CHECK_MSG(condition, ...)                                                  \
    do {                                                                              \
        if (condition) {                                                              \
            tb_test_checks_passed++;                                                  \
        } else {                                                                      \
            tb_test_checks_failed++;                                                  \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #condition); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

/* Fills buf with deterministic pseudo-random floats in [lo, hi). */
void tb_test_fill_uniform(float *buf, int64_t n, float lo, float hi, uint64_t seed);

/* Allocates n floats with 64 sentinel bytes on both sides; tb_test_guard_ok checks them. */
float *tb_test_guarded_alloc(int64_t n);
int tb_test_guard_ok(const float *buf, int64_t n);
void tb_test_guarded_free(float *buf);

/* Prints the summary line and returns 0 when nothing failed. */
int tb_test_finish(const char *suite);

#endif
