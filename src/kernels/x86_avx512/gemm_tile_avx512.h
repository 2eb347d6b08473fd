/* What the 14 x 32 AVX-512 micro-kernels share (the f32 FMA kernel and the bf16-pair kernel): writing
 * the accumulators of a tile to C (C = alpha * acc + beta * C; beta == 0: C not read), and the table
 * of per-row-count tile functions the micro-kernel entry dispatches to. Include only from files
 * compiled with AVX-512 F. */
#ifndef TORCHBURN_KERNELS_GEMM_TILE_AVX512_H
#define TORCHBURN_KERNELS_GEMM_TILE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

enum { TB_AVX512_MR = 14, TB_AVX512_NR = 32 };

static inline __mmask16 tb_avx512_mask_first(int count) {
    return count >= 16 ? (__mmask16)0xFFFF : count <= 0 ? (__mmask16)0 : (__mmask16)((1u << count) - 1u);
}

/* Rows [0, ROWS) x columns [0, nr) of the tile: acc0 holds columns 0..15, acc1 16..31. */
static inline __attribute__((always_inline)) void tb_avx512_store_tile(const int ROWS, const __m512 *acc0,
                                                                      const __m512 *acc1, float *c, int64_t ldc,
                                                                      int nr, float alpha, float beta) {
    __m512 valpha = _mm512_set1_ps(alpha);
    __m512 vbeta = _mm512_set1_ps(beta);
    if (nr == TB_AVX512_NR) {
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; i++) {
            float *row = c + i * ldc;
            __m512 r0 = _mm512_mul_ps(acc0[i], valpha), r1 = _mm512_mul_ps(acc1[i], valpha);
            if (beta != 0.0f) {
                r0 = _mm512_fmadd_ps(_mm512_loadu_ps(row), vbeta, r0);
                r1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + 16), vbeta, r1);
            }
            _mm512_storeu_ps(row, r0);
            _mm512_storeu_ps(row + 16, r1);
        }
    } else {
        __mmask16 m0 = tb_avx512_mask_first(nr), m1 = tb_avx512_mask_first(nr - 16);
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; i++) {
            float *row = c + i * ldc;
            __m512 r0 = _mm512_mul_ps(acc0[i], valpha), r1 = _mm512_mul_ps(acc1[i], valpha);
            if (beta != 0.0f) {
                r0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, row), vbeta, r0);
                r1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, row + 16), vbeta, r1);
            }
            _mm512_mask_storeu_ps(row, m0, r0);
            _mm512_mask_storeu_ps(row + 16, m1, r1);
        }
    }
}

/* Defines `static void NAME(kc, a_panel, b_panel, c, ldc, mr, nr, alpha, beta)` (the micro-kernel
 * contract of gemm_internal.h) over TILE_ROWS(ROWS, kc, a, b, c, ldc, nr, alpha, beta), an always-inline
 * body for a compile-time row count: one function per row count 1..14 so the accumulators stay in
 * registers, and a table to pick one by mr. */
#define TB_AVX512_MICROKERNEL(NAME, TILE_ROWS)                                                                 \
    typedef void (*NAME##_tile_fn)(int64_t, const float *, const float *, float *, int64_t, int, float, float);  \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 1) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 2)                              \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 3) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 4)                              \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 5) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 6)                              \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 7) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 8)                              \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 9) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 10)                             \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 11) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 12)                            \
    TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 13) TB_AVX512_TILE_FN_(NAME, TILE_ROWS, 14)                            \
    static const NAME##_tile_fn NAME##_tiles[TB_AVX512_MR + 1] = {                                             \
        NULL,           NAME##_tile_1,  NAME##_tile_2,  NAME##_tile_3,  NAME##_tile_4,                         \
        NAME##_tile_5,  NAME##_tile_6,  NAME##_tile_7,  NAME##_tile_8,  NAME##_tile_9,                         \
        NAME##_tile_10, NAME##_tile_11, NAME##_tile_12, NAME##_tile_13, NAME##_tile_14};                       \
    static void NAME(int64_t kc, const float *a_panel, const float *b_panel, float *c, int64_t c_row_stride,     \
                     int mr, int nr, float alpha, float beta) {                                                 \
        NAME##_tiles[mr](kc, a_panel, b_panel, c, c_row_stride, nr, alpha, beta);                              \
    }

#define TB_AVX512_TILE_FN_(NAME, TILE_ROWS, ROWS)                                                              \
    static void NAME##_tile_##ROWS(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int nr,   \
                                   float alpha, float beta) {                                                   \
        TILE_ROWS(ROWS, kc, a, b, c, ldc, nr, alpha, beta);                                                    \
    }

#endif
