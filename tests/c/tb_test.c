/* Shared helpers for the C tests (see tb_test.h). */
#include "tb_test.h"

#include <string.h>

_Atomic int tb_test_checks_passed;
_Atomic int tb_test_checks_failed;

enum { GUARD_BYTES = 64, GUARD_VALUE = 0xA5 };

void tb_test_fill_uniform(float *buf, int64_t n, float lo, float hi, uint64_t seed) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        float unit = (float)(state >> 40) / (float)(1ull << 24);
        buf[i] = lo + (hi - lo) * unit;
    }
}

float *tb_test_guarded_alloc(int64_t n) {
    size_t bytes = (size_t)n * sizeof(float);
    unsigned char *raw = malloc(bytes + 2 * GUARD_BYTES + sizeof(size_t));
    if (!raw)
        return NULL;
    memcpy(raw, &bytes, sizeof bytes);
    memset(raw + sizeof(size_t), GUARD_VALUE, GUARD_BYTES);
    memset(raw + sizeof(size_t) + GUARD_BYTES + bytes, GUARD_VALUE, GUARD_BYTES);
    return (float *)(raw + sizeof(size_t) + GUARD_BYTES);
}

int tb_test_guard_ok(const float *buf, int64_t n) {
    const unsigned char *payload = (const unsigned char *)buf;
    const unsigned char *raw = payload - GUARD_BYTES - sizeof(size_t);
    size_t bytes;
    memcpy(&bytes, raw, sizeof bytes);
    (void)n;
    for (int i = 0; i < GUARD_BYTES; i++) {
        if (payload[-GUARD_BYTES + i] != GUARD_VALUE || payload[bytes + (size_t)i] != GUARD_VALUE)
            return 0;
    }
    return 1;
}

void tb_test_guarded_free(float *buf) {
    if (buf)
        free((unsigned char *)buf - GUARD_BYTES - sizeof(size_t));
}

int tb_test_finish(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, (int)tb_test_checks_passed, (int)tb_test_checks_failed);
    return tb_test_checks_failed == 0 ? 0 : 1;
}
