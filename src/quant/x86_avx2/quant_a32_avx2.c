/* AVX2 W8A32 / W4A32 kernels (contract in quant/quant_kernels.h), for CPUs without AVX-512 and for
 * TORCHBURN_ISA=avx2. GEMV streams one weight row at a time with a software prefetch (see
 * quant_a32_avx512.c for why); GEMM uses blocks of 4 weight rows x up to 2 activation rows (16 ymm
 * registers) with the same prefetch on the 4 row streams.
 *   int8: y = s[n] * sum x * q (q sign-extended and converted exactly).
 *   int4: 8 bytes (16 weights) -> dwords; w = float(nibble - 8) * s is the exact dequantized weight
 *         (the GEMV computes it as fma(nibble, s, -8s), the same single rounding while 8s is finite).
 *         The prepared activation row is x de-interleaved per 16-block: x[16b + 2i] at 16b + i and
 *         x[16b + 2i + 1] at 16b + 8 + i (i < 8). */
#include <immintrin.h>
#include <string.h>

#include "quant/quant_kernels.h"

#define TB_INLINE static inline __attribute__((always_inline))

enum { NR = 4, MB = 2, PREFETCH_BYTES = 8192 };

TB_INLINE float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- int8 ---- */

TB_INLINE __m256 int8_load_avx2(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

TB_INLINE void int8_tile_avx2(const int8_t *const *rows, const float *x, int64_t ldx, int mb, int64_t k,
                              float dots[MB][NR]) {
    __m256 acc[MB][NR];
    for (int i = 0; i < MB; i++)
        for (int r = 0; r < NR; r++)
            acc[i][r] = _mm256_setzero_ps();
    int64_t kk = 0;
    if (mb == 1) { /* GEMV: the second accumulator set keeps 8 FMA chains in flight */
        for (; kk + 16 <= k; kk += 16) {
            __m256 x0 = _mm256_loadu_ps(x + kk), x1 = _mm256_loadu_ps(x + kk + 8);
            for (int r = 0; r < NR; r++) {
                acc[0][r] = _mm256_fmadd_ps(int8_load_avx2(rows[r] + kk), x0, acc[0][r]);
                acc[1][r] = _mm256_fmadd_ps(int8_load_avx2(rows[r] + kk + 8), x1, acc[1][r]);
            }
        }
    }
    for (; kk + 8 <= k; kk += 8) {
        __m256 wv[NR];
        if ((kk & 63) == 0)
            for (int r = 0; r < NR; r++)
                _mm_prefetch((const char *)(rows[r] + kk + PREFETCH_BYTES), _MM_HINT_T0);
        for (int r = 0; r < NR; r++)
            wv[r] = int8_load_avx2(rows[r] + kk);
        for (int i = 0; i < mb; i++) {
            __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
            for (int r = 0; r < NR; r++)
                acc[i][r] = _mm256_fmadd_ps(wv[r], xv, acc[i][r]);
        }
    }
    for (int i = 0; i < mb; i++) {
        for (int r = 0; r < NR; r++) {
            float dot = mb == 1 ? hsum_avx2(_mm256_add_ps(acc[0][r], acc[1][r])) : hsum_avx2(acc[i][r]);
            for (int64_t t = kk; t < k; t++)
                dot += x[i * ldx + t] * (float)rows[r][t];
            dots[i][r] = dot;
        }
    }
}

/* GEMV: sum_k x[k] * q[k] over one row, 8 accumulator chains, one prefetch per 64 bytes. */
TB_INLINE float int8_row_dot_avx2(const int8_t *row, const float *x, int64_t k) {
    __m256 acc[8];
    for (int j = 0; j < 8; j++)
        acc[j] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 64 <= k; kk += 64) {
        _mm_prefetch((const char *)(row + kk + PREFETCH_BYTES), _MM_HINT_T0);
        for (int j = 0; j < 8; j++)
            acc[j] = _mm256_fmadd_ps(int8_load_avx2(row + kk + 8 * j), _mm256_loadu_ps(x + kk + 8 * j), acc[j]);
    }
    for (; kk + 8 <= k; kk += 8)
        acc[0] = _mm256_fmadd_ps(int8_load_avx2(row + kk), _mm256_loadu_ps(x + kk), acc[0]);
    for (int j = 0; j < 4; j++)
        acc[j] = _mm256_add_ps(acc[j], acc[j + 4]);
    float dot = hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; kk < k; kk++)
        dot += x[kk] * (float)row[kk];
    return dot;
}

static void int8_rows_avx2(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    if (run->m == 1) {
        for (int64_t n = n_begin; n < n_end; n++)
            run->y[n] = w->scales[n] * int8_row_dot_avx2((const int8_t *)w->data + n * w->row_bytes, run->x, w->k) +
                        (run->bias ? run->bias[n] : 0.0f);
        return;
    }
    for (int64_t n = n_begin; n < n_end; n += NR) {
        const int64_t nr = n_end - n < NR ? n_end - n : NR;
        const int8_t *rows[NR];
        for (int r = 0; r < NR; r++) /* a short block repeats its last row; those results are dropped */
            rows[r] = (const int8_t *)w->data + (n + (r < nr ? r : nr - 1)) * w->row_bytes;
        for (int64_t m = 0; m < run->m; m += MB) {
            const int64_t mb = run->m - m < MB ? run->m - m : MB;
            float dots[MB][NR];
            if (mb == 1)
                int8_tile_avx2(rows, run->x + m * run->x_row_stride, run->x_row_stride, 1, w->k, dots);
            else
                int8_tile_avx2(rows, run->x + m * run->x_row_stride, run->x_row_stride, 2, w->k, dots);
            for (int64_t i = 0; i < mb; i++)
                for (int64_t r = 0; r < nr; r++)
                    run->y[(m + i) * run->y_row_stride + n + r] =
                        w->scales[n + r] * dots[i][r] + (run->bias ? run->bias[n + r] : 0.0f);
        }
    }
}

/* ---- int4 ---- */

static int64_t int4_act_row_bytes_avx2(const tb_quant_weight *w) {
    return tb_quant_round_up(w->k * (int64_t)sizeof(float), 64);
}

static void int4_act_prepare_avx2(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    float *out = (float *)dst;
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int64_t b = 0; b < w->k; b += 16) { /* K is a multiple of 32 */
        __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + b), pick);     /* e0..e3 | o0..o3 */
        __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + b + 8), pick); /* e4..e7 | o4..o7 */
        _mm256_storeu_ps(out + b, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(out + b + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}

TB_INLINE void int4_tile_avx2(const uint8_t *const *rows, const float *const *scales, const float *act,
                              int64_t ld_act, int mb, int64_t k, int64_t group, float dots[MB][NR]) {
    const __m256i low_mask = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    const int shift = __builtin_ctzll((unsigned long long)group); /* group is a power of two */
    __m256 acc[MB][NR];
    for (int i = 0; i < MB; i++)
        for (int r = 0; r < NR; r++)
            acc[i][r] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < k; g0 += group) {
        for (int64_t kk = g0; kk < g0 + group; kk += 16) {
            if ((kk & 127) == 0)
                for (int r = 0; r < NR; r++)
                    _mm_prefetch((const char *)(rows[r] + kk / 2 + PREFETCH_BYTES), _MM_HINT_T0);
            for (int r = 0; r < NR; r++) {
                const __m256 scale = _mm256_broadcast_ss(&scales[r][g0 >> shift]);
                __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(rows[r] + kk / 2)));
                __m256i q_lo = _mm256_sub_epi32(_mm256_and_si256(bytes, low_mask), eight);
                __m256i q_hi = _mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight);
                __m256 lo = _mm256_mul_ps(_mm256_cvtepi32_ps(q_lo), scale);
                __m256 hi = _mm256_mul_ps(_mm256_cvtepi32_ps(q_hi), scale);
                for (int i = 0; i < mb; i++) {
                    const float *a = act + i * ld_act + kk;
                    acc[i][r] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(a), acc[i][r]);
                    acc[i][r] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(a + 8), acc[i][r]);
                }
            }
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = hsum_avx2(acc[i][r]);
}

/* GEMV on one row: 64 weights (32 bytes) per step, 8 accumulator chains; the dequantized weight is
 * fma(nibble, s, -8s). */
TB_INLINE float int4_row_dot_avx2(const uint8_t *row, const float *scales, const float *act, int64_t k, int64_t group) {
    const __m256i low_mask = _mm256_set1_epi32(15);
    const int shift = __builtin_ctzll((unsigned long long)group); /* group is a power of two */
    __m256 acc[8];
    for (int j = 0; j < 8; j++)
        acc[j] = _mm256_setzero_ps();
    int64_t kk = 0;
    for (; kk + 64 <= k; kk += 64) {
        if ((kk & 127) == 0)
            _mm_prefetch((const char *)(row + kk / 2 + PREFETCH_BYTES), _MM_HINT_T0);
        /* the step holds 1 group (group >= 64) or 2 (group 32): scales for its halves */
        const __m256 scale_a = _mm256_broadcast_ss(scales + (kk >> shift));
        const __m256 scale_b = group == 32 ? _mm256_broadcast_ss(scales + ((kk + 32) >> shift)) : scale_a;
        const __m256 offset_a = _mm256_mul_ps(scale_a, _mm256_set1_ps(-8.0f));
        const __m256 offset_b = group == 32 ? _mm256_mul_ps(scale_b, _mm256_set1_ps(-8.0f)) : offset_a;
        for (int q = 0; q < 4; q++) {
            const __m256 scale = q < 2 ? scale_a : scale_b, offset = q < 2 ? offset_a : offset_b;
            __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + kk / 2 + 8 * q)));
            __m256 lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(bytes, low_mask)), scale, offset);
            __m256 hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4)), scale, offset);
            acc[2 * q] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(act + kk + 16 * q), acc[2 * q]);
            acc[2 * q + 1] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(act + kk + 16 * q + 8), acc[2 * q + 1]);
        }
    }
    for (; kk < k; kk += 16) { /* K % 64 == 32 */
        const __m256 scale = _mm256_broadcast_ss(scales + (kk >> shift));
        const __m256 offset = _mm256_mul_ps(scale, _mm256_set1_ps(-8.0f));
        __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + kk / 2)));
        acc[0] = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(bytes, low_mask)), scale, offset),
                                 _mm256_loadu_ps(act + kk), acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4)), scale, offset),
                                 _mm256_loadu_ps(act + kk + 8), acc[1]);
    }
    for (int j = 0; j < 4; j++)
        acc[j] = _mm256_add_ps(acc[j], acc[j + 4]);
    return hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

static void int4_rows_avx2(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const int64_t ld_act = run->act_row_bytes / (int64_t)sizeof(float);
    if (run->m == 1) {
        for (int64_t n = n_begin; n < n_end; n++) {
            const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
            const float *scales = w->scales + n * w->scales_per_row;
            const float *act = (const float *)run->act;
            float dot = w->group_size == 32 ? int4_row_dot_avx2(row, scales, act, w->k, 32)
                                            : int4_row_dot_avx2(row, scales, act, w->k, w->group_size);
            run->y[n] = dot + (run->bias ? run->bias[n] : 0.0f);
        }
        return;
    }
    for (int64_t n = n_begin; n < n_end; n += NR) {
        const int64_t nr = n_end - n < NR ? n_end - n : NR;
        const uint8_t *rows[NR];
        const float *scales[NR];
        for (int r = 0; r < NR; r++) {
            int64_t row = n + (r < nr ? r : nr - 1);
            rows[r] = (const uint8_t *)w->data + row * w->row_bytes;
            scales[r] = w->scales + row * w->scales_per_row;
        }
        for (int64_t m = 0; m < run->m; m += MB) {
            const int64_t mb = run->m - m < MB ? run->m - m : MB;
            const float *act = (const float *)(run->act + m * run->act_row_bytes);
            float dots[MB][NR];
            if (mb == 1)
                int4_tile_avx2(rows, scales, act, ld_act, 1, w->k, w->group_size, dots);
            else
                int4_tile_avx2(rows, scales, act, ld_act, 2, w->k, w->group_size, dots);
            for (int64_t i = 0; i < mb; i++)
                for (int64_t r = 0; r < nr; r++)
                    run->y[(m + i) * run->y_row_stride + n + r] = dots[i][r] + (run->bias ? run->bias[n + r] : 0.0f);
        }
    }
}

static int64_t no_act_avx2(const tb_quant_weight *w) {
    (void)w;
    return 0;
}

static const tb_quant_impl int8_a32_avx2 = {.act_row_bytes = no_act_avx2, .rows = int8_rows_avx2};
static const tb_quant_impl int4_a32_avx2 = {
    .act_row_bytes = int4_act_row_bytes_avx2, .act_prepare = int4_act_prepare_avx2, .rows = int4_rows_avx2};

const tb_quant_impl *tb_quant_impl_avx2(tb_quant_type type, tb_quant_act act) {
    if (act == TB_QUANT_ACT_INT8)
        return tb_quant_impl_avx2_a8(type);
    return type == TB_QUANT_INT8 ? &int8_a32_avx2 : &int4_a32_avx2;
}
