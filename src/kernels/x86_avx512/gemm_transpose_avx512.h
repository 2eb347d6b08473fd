/* The 16 x 16 in-register transpose the AVX-512 GEMM packers share (f32 GEMM and the bf16-pair
 * packers). Include only from files compiled with AVX-512 F. */
#ifndef TORCHBURN_KERNELS_GEMM_TRANSPOSE_AVX512_H
#define TORCHBURN_KERNELS_GEMM_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* In-register transpose of 16 rows of 16 floats: on return r[j] holds column j. */
static inline void tb_transpose16_avx512(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    /* u[4g + e], 128-bit lane L = rows 4g..4g+3 of column 4L + e */
    for (int e = 0; e < 4; e++) {
        __m512 x_lo = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
        __m512 y_lo = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
        __m512 x_hi = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
        __m512 y_hi = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
        r[e] = _mm512_shuffle_f32x4(x_lo, x_hi, 0x88);
        r[8 + e] = _mm512_shuffle_f32x4(x_lo, x_hi, 0xDD);
        r[4 + e] = _mm512_shuffle_f32x4(y_lo, y_hi, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(y_lo, y_hi, 0xDD);
    }
}

#endif
