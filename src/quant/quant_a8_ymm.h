/* The 256-bit W8A8 / W4A8 kernels, written once and compiled twice: by x86_avx2/quant_a8_avx2.c with a
 * maddubs-based dot and by x86_avxvnni/quant_a8_avxvnni.c with vpdpbusd. The including file defines
 * TB_QUANT_YMM_DOT(acc, u8, s8): acc + (per dword lane) the sum of 4 products u8 * s8, exactly (no
 * saturation for the operands used here: |u8| <= 128 or <= 15, |s8| <= 127). Everything is static.
 * GEMV streams one weight row at a time with a software prefetch (see quant_a32_avx512.c); GEMM uses
 * blocks of 4 weight rows x up to 2 activation rows (16 ymm registers), prefetching the 4 streams.
 *
 * Prepared activation rows (after the 64-byte tb_quant_act_header):
 *   int8: xq int8[K rounded up to 32], natural order, zero padded. The dot uses |q| as the unsigned
 *         operand and sign(xq, q) as the signed one, so it is exactly sum xq * q.
 *   int4: per 64-block b, 32 bytes of xq at even k then 32 bytes at odd k (matching the low and high
 *         nibbles of 32 packed bytes), K rounded up to 64; then per block 8 int32 lane seeds
 *         -8 * (sum of xq over the lane's 8 consecutive k), which cancel the +8 of the nibbles, so
 *         each lane ends at exactly sum xq * q over its 8 elements. Lane l covers k in [64b + 8l, +8). */
#ifndef TORCHBURN_QUANT_A8_YMM_H
#define TORCHBURN_QUANT_A8_YMM_H

#include <immintrin.h>
#include <string.h>

#include "quant/quant_kernels.h"

#ifndef TB_QUANT_YMM_DOT
#error "define TB_QUANT_YMM_DOT before including quant_a8_ymm.h"
#endif

#define TB_YMM_INLINE static inline __attribute__((always_inline))

enum { YMM_NR = 4, YMM_MB = 2, YMM_PREFETCH_BYTES = 8192 };

TB_YMM_INLINE int64_t ymm_hsum_epi32(__m256i v) {
    __m256i wide = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)),
                                    _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
    __m128i pair = _mm_add_epi64(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    return _mm_cvtsi128_si64(pair) + _mm_extract_epi64(pair, 1);
}

TB_YMM_INLINE float ymm_hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TB_YMM_INLINE float ymm_act_scale(const unsigned char *act) {
    tb_quant_act_header header;
    memcpy(&header, act, sizeof header);
    return header.scale;
}

/* tb_quant_act_quantize_row with AVX2, bit for bit (same amax, same multiply, RNE conversion). */
static float ymm_quantize_row(const float *x, int64_t k, int8_t *xq) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i amax = _mm256_setzero_si256();
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8)
        amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + kk)), abs_mask));
    uint32_t lanes[8], amax_bits = 0;
    _mm256_storeu_si256((__m256i *)lanes, amax);
    for (int i = 0; i < 8; i++)
        amax_bits = lanes[i] > amax_bits ? lanes[i] : amax_bits;
    for (; kk < k; kk++) {
        uint32_t bits;
        memcpy(&bits, x + kk, sizeof bits);
        bits &= 0x7fffffffu;
        amax_bits = bits > amax_bits ? bits : amax_bits;
    }
    bool done;
    const float scale = tb_quant_act_finish_scale(amax_bits, x, k, xq, &done);
    if (done)
        return scale;
    float amax_value;
    memcpy(&amax_value, &amax_bits, sizeof amax_value);
    const float inverse_value = 127.0f / amax_value;
    const __m256 inverse = _mm256_set1_ps(inverse_value);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (kk = 0; kk + 32 <= k; kk += 32) {
        __m256i q[4];
        for (int j = 0; j < 4; j++) { /* MXCSR rounding: nearest even */
            q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + kk + 8 * j), inverse));
            q[j] = _mm256_max_epi32(_mm256_min_epi32(q[j], hi), lo);
        }
        __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(xq + kk), _mm256_permutevar8x32_epi32(packed, order));
    }
    tb_quant_act_quantize_span(x + kk, k - kk, inverse_value, xq + kk);
    return scale;
}

/* ---- int8 ---- */

static int64_t ymm_int8_act_row_bytes(const tb_quant_weight *w) {
    return TB_QUANT_ACT_HEADER_BYTES + tb_quant_round_up(tb_quant_round_up(w->k, 32), 64);
}

static void ymm_int8_act_prepare(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    int8_t *xq = (int8_t *)(dst + TB_QUANT_ACT_HEADER_BYTES);
    tb_quant_act_header header = {.scale = ymm_quantize_row(x, w->k, xq)};
    memset(xq + w->k, 0, (size_t)(tb_quant_round_up(w->k, 32) - w->k));
    memcpy(dst, &header, sizeof header);
}

TB_YMM_INLINE void ymm_int8_step(const __m256i wv, const unsigned char *act, int64_t ld_act, int mb, int64_t kk,
                                 __m256i acc[YMM_MB]) {
    const __m256i magnitude = _mm256_abs_epi8(wv);
    for (int i = 0; i < mb; i++) {
        __m256i xq = _mm256_loadu_si256((const __m256i *)(act + i * ld_act + TB_QUANT_ACT_HEADER_BYTES + kk));
        acc[i] = TB_QUANT_YMM_DOT(acc[i], magnitude, _mm256_sign_epi8(xq, wv));
    }
}

TB_YMM_INLINE void ymm_int8_tile(const int8_t *const *rows, const unsigned char *act, int64_t ld_act, int mb,
                                 int64_t k, int64_t dots[YMM_MB][YMM_NR]) {
    __m256i acc[YMM_NR][YMM_MB];
    for (int r = 0; r < YMM_NR; r++)
        for (int i = 0; i < YMM_MB; i++)
            acc[r][i] = _mm256_setzero_si256();
    const int64_t full = k / 32 * 32;
    for (int64_t kk = 0; kk < full; kk += 32)
        for (int r = 0; r < YMM_NR; r++) {
            if ((kk & 63) == 0)
                _mm_prefetch((const char *)(rows[r] + kk + YMM_PREFETCH_BYTES), _MM_HINT_T0);
            ymm_int8_step(_mm256_loadu_si256((const __m256i *)(rows[r] + kk)), act, ld_act, mb, kk, acc[r]);
        }
    if (full < k) { /* the last partial block of each row goes through a zeroed copy */
        for (int r = 0; r < YMM_NR; r++) {
            int8_t tail[32] = {0};
            memcpy(tail, rows[r] + full, (size_t)(k - full));
            ymm_int8_step(_mm256_loadu_si256((const __m256i *)tail), act, ld_act, mb, full, acc[r]);
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < YMM_NR; r++)
            dots[i][r] = ymm_hsum_epi32(acc[r][i]);
}

/* GEMV: exact sum_k xq[k] * q[k] over one row, two accumulator chains, prefetch ahead. */
TB_YMM_INLINE int64_t ymm_int8_row_dot(const int8_t *row, const int8_t *xq, int64_t k) {
    __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0;
    int64_t kk = 0;
    for (; kk + 64 <= k; kk += 64) {
        _mm_prefetch((const char *)(row + kk + YMM_PREFETCH_BYTES), _MM_HINT_T0);
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(row + kk));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(row + kk + 32));
        acc0 = TB_QUANT_YMM_DOT(acc0, _mm256_abs_epi8(w0),
                                _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xq + kk)), w0));
        acc1 = TB_QUANT_YMM_DOT(acc1, _mm256_abs_epi8(w1),
                                _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xq + kk + 32)), w1));
    }
    for (; kk < k; kk += 32) { /* the last partial block goes through a zeroed copy */
        int8_t tail[32] = {0};
        memcpy(tail, row + kk, (size_t)(k - kk < 32 ? k - kk : 32));
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)tail);
        acc0 = TB_QUANT_YMM_DOT(acc0, _mm256_abs_epi8(w0),
                                _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xq + kk)), w0));
    }
    return ymm_hsum_epi32(acc0) + ymm_hsum_epi32(acc1);
}

static void ymm_int8_rows(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    if (run->m == 1) {
        const float x_scale = ymm_act_scale(run->act);
        const int8_t *xq = (const int8_t *)(run->act + TB_QUANT_ACT_HEADER_BYTES);
        for (int64_t n = n_begin; n < n_end; n++) {
            int64_t dot = ymm_int8_row_dot((const int8_t *)w->data + n * w->row_bytes, xq, w->k);
            run->y[n] = (x_scale * w->scales[n]) * (float)dot + (run->bias ? run->bias[n] : 0.0f);
        }
        return;
    }
    for (int64_t n = n_begin; n < n_end; n += YMM_NR) {
        const int64_t nr = n_end - n < YMM_NR ? n_end - n : YMM_NR;
        const int8_t *rows[YMM_NR];
        for (int r = 0; r < YMM_NR; r++) /* a short block repeats its last row; those results are dropped */
            rows[r] = (const int8_t *)w->data + (n + (r < nr ? r : nr - 1)) * w->row_bytes;
        for (int64_t m = 0; m < run->m; m += YMM_MB) {
            const int64_t mb = run->m - m < YMM_MB ? run->m - m : YMM_MB;
            const unsigned char *act = run->act + m * run->act_row_bytes;
            int64_t dots[YMM_MB][YMM_NR];
            if (mb == 1)
                ymm_int8_tile(rows, act, run->act_row_bytes, 1, w->k, dots);
            else
                ymm_int8_tile(rows, act, run->act_row_bytes, 2, w->k, dots);
            for (int64_t i = 0; i < mb; i++) {
                const float x_scale = ymm_act_scale(act + i * run->act_row_bytes);
                for (int64_t r = 0; r < nr; r++)
                    run->y[(m + i) * run->y_row_stride + n + r] =
                        (x_scale * w->scales[n + r]) * (float)dots[i][r] + (run->bias ? run->bias[n + r] : 0.0f);
            }
        }
    }
}

/* ---- int4 ---- */

static int64_t ymm_int4_act_row_bytes(const tb_quant_weight *w) {
    const int64_t k64 = tb_quant_round_up(w->k, 64);
    return TB_QUANT_ACT_HEADER_BYTES + tb_quant_round_up(k64 + k64 / 2, 64);
}

static void ymm_int4_act_prepare(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    const int64_t k64 = tb_quant_round_up(w->k, 64);
    int8_t *xq = (int8_t *)(dst + TB_QUANT_ACT_HEADER_BYTES);
    int32_t *seeds = (int32_t *)(dst + TB_QUANT_ACT_HEADER_BYTES + k64);
    tb_quant_act_header header = {.scale = ymm_quantize_row(x, w->k, xq)};
    memset(xq + w->k, 0, (size_t)(k64 - w->k));
    const __m256i low_bytes = _mm256_set1_epi16(0x00ff), ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < k64 / 64; b++) {
        /* natural 64 bytes -> 32 at even k, 32 at odd k: split the 16-bit pairs, pack, fix lane order */
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(xq + 64 * b));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(xq + 64 * b + 32));
        __m256i even = _mm256_packus_epi16(_mm256_and_si256(v0, low_bytes), _mm256_and_si256(v1, low_bytes));
        __m256i odd = _mm256_packus_epi16(_mm256_srli_epi16(v0, 8), _mm256_srli_epi16(v1, 8));
        even = _mm256_permute4x64_epi64(even, 0xD8);
        odd = _mm256_permute4x64_epi64(odd, 0xD8);
        _mm256_storeu_si256((__m256i *)(xq + 64 * b), even);
        _mm256_storeu_si256((__m256i *)(xq + 64 * b + 32), odd);
        /* lane l sums bytes 4l..4l+3 of both halves: exactly k in [64b + 8l, +8) */
        __m256i sums = TB_QUANT_YMM_DOT(TB_QUANT_YMM_DOT(_mm256_setzero_si256(), ones, even), ones, odd);
        const __m256i negated = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 3));
        _mm256_storeu_si256((__m256i *)(seeds + 8 * b), negated);
    }
    memcpy(dst, &header, sizeof header);
}

/* Per-lane weight scales of block b: lane l covers k in [64b + 8l, 64b + 8l + 8). */
TB_YMM_INLINE __m256 ymm_int4_lane_scales(const float *scales, int64_t b, int64_t group, int64_t groups) {
    if (group == 32) {
        __m128 pair = 2 * b + 1 < groups ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(scales + 2 * b)))
                                         : _mm_load_ss(scales + 2 * b);
        return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(pair), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    }
    return _mm256_broadcast_ss(scales + ((b * 64) >> __builtin_ctzll((unsigned long long)group))); /* power of 2 */
}

TB_YMM_INLINE void ymm_int4_tile(const uint8_t *const *rows, const float *const *scales, const unsigned char *act,
                                 int64_t ld_act, int mb, int64_t k, int64_t group, float dots[YMM_MB][YMM_NR]) {
    const __m256i low_mask = _mm256_set1_epi8(15);
    const int64_t k64 = tb_quant_round_up(k, 64), groups = k / group;
    __m256 acc[YMM_MB][YMM_NR];
    for (int i = 0; i < YMM_MB; i++)
        for (int r = 0; r < YMM_NR; r++)
            acc[i][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k64 / 64; b++) {
        const bool half = 64 * b + 64 > k; /* K % 64 == 32: the last block holds 16 bytes per row */
        for (int r = 0; r < YMM_NR; r++) {
            const uint8_t *src = rows[r] + 32 * b;
            if ((b & 1) == 0)
                _mm_prefetch((const char *)(src + YMM_PREFETCH_BYTES), _MM_HINT_T0);
            __m256i packed = half ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)src))
                                  : _mm256_loadu_si256((const __m256i *)src);
            __m256i lo = _mm256_and_si256(packed, low_mask);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
            __m256 lane_scales = ymm_int4_lane_scales(scales[r], b, group, groups);
            for (int i = 0; i < mb; i++) {
                const unsigned char *a = act + i * ld_act + TB_QUANT_ACT_HEADER_BYTES;
                __m256i dot = _mm256_loadu_si256((const __m256i *)(a + k64 + 32 * b));
                dot = TB_QUANT_YMM_DOT(dot, lo, _mm256_loadu_si256((const __m256i *)(a + 64 * b)));
                dot = TB_QUANT_YMM_DOT(dot, hi, _mm256_loadu_si256((const __m256i *)(a + 64 * b + 32)));
                acc[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), lane_scales, acc[i][r]);
            }
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < YMM_NR; r++)
            dots[i][r] = ymm_hsum_ps(acc[i][r]);
}

/* GEMV on one row: lane-scaled exact lane dots of each 64-block, two chains, prefetch ahead. */
TB_YMM_INLINE float ymm_int4_row_dot(const uint8_t *row, const float *scales, const unsigned char *a, int64_t k,
                                     int64_t group) {
    const __m256i low_mask = _mm256_set1_epi8(15);
    const int64_t k64 = tb_quant_round_up(k, 64), groups = k / group;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t b = 0; b < k64 / 64; b++) {
        const uint8_t *src = row + 32 * b;
        if ((b & 1) == 0)
            _mm_prefetch((const char *)(src + YMM_PREFETCH_BYTES), _MM_HINT_T0);
        const __m256i packed = 64 * b + 64 > k ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)src))
                                               : _mm256_loadu_si256((const __m256i *)src);
        const __m256i lo = _mm256_and_si256(packed, low_mask);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
        __m256i dot = _mm256_loadu_si256((const __m256i *)(a + k64 + 32 * b));
        dot = TB_QUANT_YMM_DOT(dot, lo, _mm256_loadu_si256((const __m256i *)(a + 64 * b)));
        dot = TB_QUANT_YMM_DOT(dot, hi, _mm256_loadu_si256((const __m256i *)(a + 64 * b + 32)));
        const __m256 part = _mm256_cvtepi32_ps(dot), lane_scales = ymm_int4_lane_scales(scales, b, group, groups);
        if (b & 1)
            acc1 = _mm256_fmadd_ps(part, lane_scales, acc1);
        else
            acc0 = _mm256_fmadd_ps(part, lane_scales, acc0);
    }
    return ymm_hsum_ps(_mm256_add_ps(acc0, acc1));
}

static void ymm_int4_rows(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    if (run->m == 1) {
        const float x_scale = ymm_act_scale(run->act);
        const unsigned char *a = run->act + TB_QUANT_ACT_HEADER_BYTES;
        for (int64_t n = n_begin; n < n_end; n++) {
            const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
            const float *scales = w->scales + n * w->scales_per_row;
            float dot = w->group_size == 32 ? ymm_int4_row_dot(row, scales, a, w->k, 32)
                                            : ymm_int4_row_dot(row, scales, a, w->k, w->group_size);
            run->y[n] = x_scale * dot + (run->bias ? run->bias[n] : 0.0f);
        }
        return;
    }
    for (int64_t n = n_begin; n < n_end; n += YMM_NR) {
        const int64_t nr = n_end - n < YMM_NR ? n_end - n : YMM_NR;
        const uint8_t *rows[YMM_NR];
        const float *scales[YMM_NR];
        for (int r = 0; r < YMM_NR; r++) {
            int64_t row = n + (r < nr ? r : nr - 1);
            rows[r] = (const uint8_t *)w->data + row * w->row_bytes;
            scales[r] = w->scales + row * w->scales_per_row;
        }
        for (int64_t m = 0; m < run->m; m += YMM_MB) {
            const int64_t mb = run->m - m < YMM_MB ? run->m - m : YMM_MB;
            const unsigned char *act = run->act + m * run->act_row_bytes;
            float dots[YMM_MB][YMM_NR];
            if (mb == 1)
                ymm_int4_tile(rows, scales, act, run->act_row_bytes, 1, w->k, w->group_size, dots);
            else
                ymm_int4_tile(rows, scales, act, run->act_row_bytes, 2, w->k, w->group_size, dots);
            for (int64_t i = 0; i < mb; i++) {
                const float x_scale = ymm_act_scale(act + i * run->act_row_bytes);
                for (int64_t r = 0; r < nr; r++)
                    run->y[(m + i) * run->y_row_stride + n + r] =
                        x_scale * dots[i][r] + (run->bias ? run->bias[n + r] : 0.0f);
            }
        }
    }
}

static const tb_quant_impl ymm_int8_a8 = {
    .act_row_bytes = ymm_int8_act_row_bytes, .act_prepare = ymm_int8_act_prepare, .rows = ymm_int8_rows};
static const tb_quant_impl ymm_int4_a8 = {
    .act_row_bytes = ymm_int4_act_row_bytes, .act_prepare = ymm_int4_act_prepare, .rows = ymm_int4_rows};

#endif
