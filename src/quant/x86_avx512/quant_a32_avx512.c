/* AVX-512 W8A32 / W4A32 kernels (contract in quant/quant_kernels.h), reading the API layout directly.
 *
 * GEMV (M = 1) streams ONE weight row at a time, front to back, with a software prefetch
 * PREFETCH_BYTES ahead. On the Zen 5 this was tuned on, a single sequential stream per thread reads
 * DRAM ~25% faster than 4 interleaved row streams (2-3x for short rows such as K = 896) and the
 * prefetch adds ~20%. GEMM (M > 1) is compute-bound instead: blocks of NR = 4 weight rows x MB = 4
 * activation rows, so a decoded weight vector feeds 4 FMAs and an activation load feeds 4 rows (one
 * row at a time against 8 activation rows ran 2x slower: the x loads then come from L2); the 4 row
 * streams get the same software prefetch.
 *   int8: q is sign-extended and converted (exact); y = s[n] * sum x * q.
 *   int4: 16 bytes (32 weights) are zero-extended to dwords; vpermps looks each nibble up in the
 *         16-entry table (i - 8) * s of its group, which gives the exactly dequantized weights (low
 *         nibbles: even k, high nibbles: odd k). The prepared activation row is x de-interleaved per
 *         32-block: x[32b + 2i] at 32b + i and x[32b + 2i + 1] at 32b + 16 + i (i < 16). */
#include <immintrin.h>
#include <string.h>

#include "quant/quant_kernels.h"

#define TB_INLINE static inline __attribute__((always_inline))

enum { NR = 4, MB = 4, PREFETCH_BYTES = 8192 };

TB_INLINE float bias_at_avx512(const tb_quant_run *run, int64_t n) { return run->bias ? run->bias[n] : 0.0f; }

/* ---- int8 ---- */

TB_INLINE __m512 int8_load_avx512(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

TB_INLINE __m512 int8_load_masked_avx512(const int8_t *p, __mmask16 mask) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p)));
}

/* GEMV: sum_k x[k] * q[k] over one row with 8 accumulator chains. */
TB_INLINE float int8_row_dot_avx512(const int8_t *row, const float *x, int64_t k) {
    __m512 acc[8];
    for (int j = 0; j < 8; j++)
        acc[j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 128 <= k; kk += 128) {
        _mm_prefetch((const char *)(row + kk + PREFETCH_BYTES), _MM_HINT_T0);
        _mm_prefetch((const char *)(row + kk + PREFETCH_BYTES + 64), _MM_HINT_T0);
        for (int j = 0; j < 8; j++)
            acc[j] = _mm512_fmadd_ps(int8_load_avx512(row + kk + 16 * j), _mm512_loadu_ps(x + kk + 16 * j), acc[j]);
    }
    for (; kk + 16 <= k; kk += 16)
        acc[0] = _mm512_fmadd_ps(int8_load_avx512(row + kk), _mm512_loadu_ps(x + kk), acc[0]);
    if (kk < k) { /* masked loads only here: in the main loop they stream far slower */
        __mmask16 mask = (__mmask16)((1u << (k - kk)) - 1);
        acc[1] = _mm512_fmadd_ps(int8_load_masked_avx512(row + kk, mask), _mm512_maskz_loadu_ps(mask, x + kk), acc[1]);
    }
    for (int j = 0; j < 4; j++)
        acc[j] = _mm512_add_ps(acc[j], acc[j + 4]);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* dots[i][r] = sum_k x_i[k] * q_r[k] for i < mb, r < NR. mb is a constant after inlining. */
TB_INLINE void int8_tile_avx512(const int8_t *const *rows, const float *x, int64_t ldx, int mb, int64_t k,
                                float dots[MB][NR]) {
    __m512 acc[MB][NR];
    for (int i = 0; i < MB; i++)
        for (int r = 0; r < NR; r++)
            acc[i][r] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
        __m512 wv[NR];
        if ((kk & 63) == 0)
            for (int r = 0; r < NR; r++)
                _mm_prefetch((const char *)(rows[r] + kk + PREFETCH_BYTES), _MM_HINT_T0);
        for (int r = 0; r < NR; r++)
            wv[r] = int8_load_avx512(rows[r] + kk);
        for (int i = 0; i < mb; i++) {
            __m512 xv = _mm512_loadu_ps(x + i * ldx + kk);
            for (int r = 0; r < NR; r++)
                acc[i][r] = _mm512_fmadd_ps(wv[r], xv, acc[i][r]);
        }
    }
    if (kk < k) {
        __mmask16 mask = (__mmask16)((1u << (k - kk)) - 1);
        __m512 wv[NR];
        for (int r = 0; r < NR; r++)
            wv[r] = int8_load_masked_avx512(rows[r] + kk, mask);
        for (int i = 0; i < mb; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + kk);
            for (int r = 0; r < NR; r++)
                acc[i][r] = _mm512_fmadd_ps(wv[r], xv, acc[i][r]);
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = _mm512_reduce_add_ps(acc[i][r]);
}

static void int8_rows_avx512(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const int64_t k = w->k;
    if (run->m == 1) {
        for (int64_t n = n_begin; n < n_end; n++)
            run->y[n] = w->scales[n] * int8_row_dot_avx512((const int8_t *)w->data + n * w->row_bytes, run->x, k) +
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
            const float *x = run->x + m * run->x_row_stride;
            float dots[MB][NR];
            switch (mb) {
            case 1: int8_tile_avx512(rows, x, run->x_row_stride, 1, k, dots); break;
            case 2: int8_tile_avx512(rows, x, run->x_row_stride, 2, k, dots); break;
            case 3: int8_tile_avx512(rows, x, run->x_row_stride, 3, k, dots); break;
            default: int8_tile_avx512(rows, x, run->x_row_stride, 4, k, dots); break;
            }
            for (int64_t i = 0; i < mb; i++)
                for (int64_t r = 0; r < nr; r++)
                    run->y[(m + i) * run->y_row_stride + n + r] =
                        w->scales[n + r] * dots[i][r] + (run->bias ? run->bias[n + r] : 0.0f);
        }
    }
}

/* ---- int4 ---- */

static int64_t int4_act_row_bytes_avx512(const tb_quant_weight *w) {
    return tb_quant_round_up(w->k * (int64_t)sizeof(float), 64);
}

static void int4_act_prepare_avx512(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    float *out = (float *)dst;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t b = 0; b < w->k; b += 32) { /* K is a multiple of 32 (group_size >= 32) */
        __m512 lo = _mm512_loadu_ps(x + b), hi = _mm512_loadu_ps(x + b + 16);
        _mm512_storeu_ps(out + b, _mm512_permutex2var_ps(lo, even, hi));
        _mm512_storeu_ps(out + b + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
}

TB_INLINE __m512 int4_table_avx512(float scale) {
    const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm512_mul_ps(levels, _mm512_set1_ps(scale));
}

/* GEMV: 128 weights (64 bytes, one prefetch) per step, 8 accumulator chains; `group` is a constant
 * after inlining (32, 64, or a runtime value >= 128) so the step builds 4, 2 or 1 tables. */
TB_INLINE float int4_row_dot_avx512(const uint8_t *row, const float *scales, const float *act, int64_t k,
                                    int64_t group) {
    const int shift = __builtin_ctzll((unsigned long long)group); /* group is a power of two */
    __m512 acc[8];
    for (int j = 0; j < 8; j++)
        acc[j] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 128 <= k; kk += 128) {
        _mm_prefetch((const char *)(row + kk / 2 + PREFETCH_BYTES), _MM_HINT_T0);
        __m512 table[4];
        table[0] = int4_table_avx512(scales[kk >> shift]);
        if (group == 32) {
            for (int q = 1; q < 4; q++)
                table[q] = int4_table_avx512(scales[(kk >> shift) + q]);
        } else if (group == 64) {
            table[1] = table[0];
            table[2] = table[3] = int4_table_avx512(scales[(kk >> shift) + 1]);
        } else {
            table[1] = table[2] = table[3] = table[0];
        }
        for (int q = 0; q < 4; q++) {
            __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + kk / 2 + 16 * q)));
            acc[2 * q] = _mm512_fmadd_ps(_mm512_permutexvar_ps(bytes, table[q]), _mm512_loadu_ps(act + kk + 32 * q),
                                         acc[2 * q]);
            acc[2 * q + 1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table[q]),
                                             _mm512_loadu_ps(act + kk + 32 * q + 16), acc[2 * q + 1]);
        }
    }
    for (; kk < k; kk += 32) { /* K % 128 in {32, 64, 96} */
        const __m512 table = int4_table_avx512(scales[kk >> shift]);
        __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + kk / 2)));
        acc[0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(bytes, table), _mm512_loadu_ps(act + kk), acc[0]);
        acc[1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table),
                                 _mm512_loadu_ps(act + kk + 16), acc[1]);
    }
    for (int j = 0; j < 4; j++)
        acc[j] = _mm512_add_ps(acc[j], acc[j + 4]);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* dots[i][r] = sum_k x_i[k] * dequant(w_r)[k]; act rows are de-interleaved x, `group` >= 32. */
TB_INLINE void int4_tile_avx512(const uint8_t *const *rows, const float *const *scales, const float *act,
                                int64_t ld_act, int mb, int64_t k, int64_t group, float dots[MB][NR]) {
    const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const int shift = __builtin_ctzll((unsigned long long)group); /* group is a power of two */
    __m512 acc[MB][NR];
    for (int i = 0; i < MB; i++)
        for (int r = 0; r < NR; r++)
            acc[i][r] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < k; g0 += group) {
        __m512 table[NR];
        for (int r = 0; r < NR; r++)
            table[r] = _mm512_mul_ps(levels, _mm512_set1_ps(scales[r][g0 >> shift]));
        for (int64_t kk = g0; kk < g0 + group; kk += 32) {
            __m512 lo[NR], hi[NR];
            if ((kk & 127) == 0)
                for (int r = 0; r < NR; r++)
                    _mm_prefetch((const char *)(rows[r] + kk / 2 + PREFETCH_BYTES), _MM_HINT_T0);
            for (int r = 0; r < NR; r++) {
                __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows[r] + kk / 2)));
                lo[r] = _mm512_permutexvar_ps(bytes, table[r]);
                hi[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table[r]);
            }
            for (int i = 0; i < mb; i++) {
                __m512 xe = _mm512_loadu_ps(act + i * ld_act + kk), xo = _mm512_loadu_ps(act + i * ld_act + kk + 16);
                for (int r = 0; r < NR; r++) {
                    acc[i][r] = _mm512_fmadd_ps(lo[r], xe, acc[i][r]);
                    acc[i][r] = _mm512_fmadd_ps(hi[r], xo, acc[i][r]);
                }
            }
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = _mm512_reduce_add_ps(acc[i][r]);
}

TB_INLINE float int4_row_dot_any_avx512(const uint8_t *row, const float *scales, const float *act, int64_t k,
                                        int64_t group) {
    if (group == 32)
        return int4_row_dot_avx512(row, scales, act, k, 32);
    if (group == 64)
        return int4_row_dot_avx512(row, scales, act, k, 64);
    return int4_row_dot_avx512(row, scales, act, k, group);
}

static void int4_rows_avx512(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const int64_t k = w->k, group = w->group_size;
    const int64_t ld_act = run->act_row_bytes / (int64_t)sizeof(float);
    if (run->m == 1) {
        for (int64_t n = n_begin; n < n_end; n++)
            run->y[n] = int4_row_dot_any_avx512((const uint8_t *)w->data + n * w->row_bytes,
                                                w->scales + n * w->scales_per_row, (const float *)run->act, k, group) +
                        bias_at_avx512(run, n);
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
            switch (mb) {
            case 1: int4_tile_avx512(rows, scales, act, ld_act, 1, k, group, dots); break;
            case 2: int4_tile_avx512(rows, scales, act, ld_act, 2, k, group, dots); break;
            case 3: int4_tile_avx512(rows, scales, act, ld_act, 3, k, group, dots); break;
            default: int4_tile_avx512(rows, scales, act, ld_act, 4, k, group, dots); break;
            }
            for (int64_t i = 0; i < mb; i++)
                for (int64_t r = 0; r < nr; r++)
                    run->y[(m + i) * run->y_row_stride + n + r] = dots[i][r] + (run->bias ? run->bias[n + r] : 0.0f);
        }
    }
}

static int64_t no_act_avx512(const tb_quant_weight *w) {
    (void)w;
    return 0;
}

static const tb_quant_impl int8_a32_avx512 = {.act_row_bytes = no_act_avx512, .rows = int8_rows_avx512};
static const tb_quant_impl int4_a32_avx512 = {
    .act_row_bytes = int4_act_row_bytes_avx512, .act_prepare = int4_act_prepare_avx512, .rows = int4_rows_avx512};

const tb_quant_impl *tb_quant_impl_avx512(tb_quant_type type, tb_quant_act act) {
    if (act != TB_QUANT_ACT_F32)
        return NULL; /* A8 at this level runs the ymm VNNI / maddubs kernels (see tb_quant_kernel_resolve) */
    return type == TB_QUANT_INT8 ? &int8_a32_avx512 : &int4_a32_avx512;
}
