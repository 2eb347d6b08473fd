/* AVX-512 VNNI W8A8 / W4A8 kernels (contract in quant/quant_kernels.h): vpdpbusd on 512-bit vectors.
 * Every kernel streams one weight row at a time with a software prefetch (see quant_a32_avx512.c for
 * why) and applies it to up to MB = 8 activation rows: int8 activations are 4x smaller than f32, so 8
 * rows of them stay in L1 (48 KiB) for K up to ~5000 and no multi-row weight blocking is needed. Masked
 * loads only touch the last partial block of a row (in the main loop they streamed 5x slower).
 * Prepared activation rows, after the 64-byte tb_quant_act_header:
 *   int8: xu uint8[K rounded up to 64] = xq + 128. vpdpbusd(xu, q) gives sum xq*q + 128 * sum q; a
 *         second vpdpbusd(1, q) per weight block yields sum q, so the exact dot is recovered.
 *   int4: per 128-block b, 64 bytes of xq at even k then 64 at odd k (matching the low and high nibbles
 *         of 64 packed bytes), K rounded up to 128; then per block 16 int32 lane seeds -8 * (sum of xq
 *         over the lane's 8 consecutive k) that cancel the +8 of the nibbles. Lane l of block b covers
 *         k in [128b + 8l, +8), so a lane never straddles a group and is scaled by its group's scale. */
#include <immintrin.h>
#include <string.h>

#include "quant/quant_kernels.h"

#define TB_INLINE static inline __attribute__((always_inline))

enum { MB = 8, PREFETCH_BYTES = 8192 };

/* acc + per-lane sum of 4 products u8 * s8 (vpdpbusd). Inline asm instead of _mm512_dpbusd_epi32:
 * GCC 12 copies the accumulator around every intrinsic call (and spills the tile to the stack),
 * which halved the GEMM speed; the asm ties the accumulator to one register. */
TB_INLINE __m512i dpbusd_avx512vnni(__m512i acc, __m512i u8, __m512i s8) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
    return acc;
}

TB_INLINE int64_t hsum_epi32_avx512vnni(__m512i v) {
    return _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v))) +
           _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
}

TB_INLINE float act_scale_avx512vnni(const unsigned char *act) {
    tb_quant_act_header header;
    memcpy(&header, act, sizeof header);
    return header.scale;
}

/* ---- activations ---- */

/* tb_quant_act_quantize_row with AVX-512, bit for bit (same amax, same multiply, RNE conversion). */
static float quantize_row_avx512vnni(const float *x, int64_t k, int8_t *xq) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512i amax = _mm512_setzero_si512();
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16)
        amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_loadu_si512(x + kk), abs_mask));
    if (kk < k) {
        const __mmask16 tail = (__mmask16)((1u << (k - kk)) - 1);
        amax = _mm512_max_epu32(amax, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail, x + kk), abs_mask));
    }
    bool done;
    const uint32_t amax_bits = (uint32_t)_mm512_reduce_max_epu32(amax);
    const float scale = tb_quant_act_finish_scale(amax_bits, x, k, xq, &done);
    if (done)
        return scale;
    float amax_value;
    memcpy(&amax_value, &amax_bits, sizeof amax_value);
    const __m512 inverse = _mm512_set1_ps(127.0f / amax_value);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    for (kk = 0; kk + 16 <= k; kk += 16) {
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + kk), inverse)); /* MXCSR: nearest even */
        _mm_storeu_si128((__m128i *)(xq + kk), _mm512_cvtsepi32_epi8(_mm512_max_epi32(_mm512_min_epi32(q, hi), lo)));
    }
    tb_quant_act_quantize_span(x + kk, k - kk, 127.0f / amax_value, xq + kk);
    return scale;
}

/* ---- int8 ---- */

static int64_t int8_act_row_bytes_avx512vnni(const tb_quant_weight *w) {
    return TB_QUANT_ACT_HEADER_BYTES + tb_quant_round_up(w->k, 64);
}

static void int8_act_prepare_avx512vnni(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    unsigned char *xu = dst + TB_QUANT_ACT_HEADER_BYTES;
    const int64_t k64 = tb_quant_round_up(w->k, 64);
    tb_quant_act_header header = {.scale = quantize_row_avx512vnni(x, w->k, (int8_t *)xu)};
    memset(xu + w->k, 0, (size_t)(k64 - w->k));
    const __m512i bias = _mm512_set1_epi8((char)0x80); /* xq + 128 == xq ^ 0x80 on the bit pattern */
    for (int64_t kk = 0; kk < k64; kk += 64)
        _mm512_storeu_si512(xu + kk, _mm512_xor_si512(_mm512_loadu_si512(xu + kk), bias));
    memcpy(dst, &header, sizeof header);
}

/* dots[i] = exact sum_k xq_i[k] * q[k] for i < mb (a constant after inlining); xu rows ld_act apart. */
TB_INLINE void int8_row_batch_avx512vnni(const int8_t *row, const unsigned char *xu, int64_t ld_act, int mb,
                                         int64_t k, int64_t dots[MB]) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i acc[MB], acc2[MB], weight_sum = _mm512_setzero_si512(), weight_sum2 = weight_sum;
    for (int i = 0; i < MB; i++)
        acc[i] = acc2[i] = _mm512_setzero_si512();
    int64_t kk = 0;
    if (mb < 4) { /* few rows: two sets of accumulators keep enough vpdpbusd chains in flight */
        for (; kk + 128 <= k; kk += 128) {
            _mm_prefetch((const char *)(row + kk + PREFETCH_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(row + kk + PREFETCH_BYTES + 64), _MM_HINT_T0);
            const __m512i w0 = _mm512_loadu_si512(row + kk), w1 = _mm512_loadu_si512(row + kk + 64);
            weight_sum = dpbusd_avx512vnni(weight_sum, ones, w0);
            weight_sum2 = dpbusd_avx512vnni(weight_sum2, ones, w1);
            for (int i = 0; i < mb; i++) {
                acc[i] = dpbusd_avx512vnni(acc[i], _mm512_loadu_si512(xu + i * ld_act + kk), w0);
                acc2[i] = dpbusd_avx512vnni(acc2[i], _mm512_loadu_si512(xu + i * ld_act + kk + 64), w1);
            }
        }
    }
    for (; kk + 64 <= k; kk += 64) {
        _mm_prefetch((const char *)(row + kk + PREFETCH_BYTES), _MM_HINT_T0);
        const __m512i wv = _mm512_loadu_si512(row + kk);
        weight_sum = dpbusd_avx512vnni(weight_sum, ones, wv);
        for (int i = 0; i < mb; i++)
            acc[i] = dpbusd_avx512vnni(acc[i], _mm512_loadu_si512(xu + i * ld_act + kk), wv);
    }
    if (kk < k) { /* the last partial block; the prepared activations are zero padded */
        const __m512i wv = _mm512_maskz_loadu_epi8((__mmask64)((1ull << (k - kk)) - 1), row + kk);
        weight_sum = dpbusd_avx512vnni(weight_sum, ones, wv);
        for (int i = 0; i < mb; i++)
            acc[i] = dpbusd_avx512vnni(acc[i], _mm512_loadu_si512(xu + i * ld_act + kk), wv);
    }
    const int64_t correction = 128 * (hsum_epi32_avx512vnni(weight_sum) + hsum_epi32_avx512vnni(weight_sum2));
    for (int i = 0; i < mb; i++)
        dots[i] = hsum_epi32_avx512vnni(acc[i]) + hsum_epi32_avx512vnni(acc2[i]) - correction;
}

static void int8_rows_avx512vnni(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    for (int64_t n = n_begin; n < n_end; n++) {
        const int8_t *row = (const int8_t *)w->data + n * w->row_bytes;
        for (int64_t m = 0; m < run->m; m += MB) {
            const int64_t mb = run->m - m < MB ? run->m - m : MB;
            const unsigned char *act = run->act + m * run->act_row_bytes;
            const unsigned char *xu = act + TB_QUANT_ACT_HEADER_BYTES;
            int64_t dots[MB];
            switch (mb) {
            case 1: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 1, w->k, dots); break;
            case 2: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 2, w->k, dots); break;
            case 3: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 3, w->k, dots); break;
            case 4: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 4, w->k, dots); break;
            case 5: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 5, w->k, dots); break;
            case 6: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 6, w->k, dots); break;
            case 7: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 7, w->k, dots); break;
            default: int8_row_batch_avx512vnni(row, xu, run->act_row_bytes, 8, w->k, dots); break;
            }
            for (int64_t i = 0; i < mb; i++) {
                const float x_scale = act_scale_avx512vnni(act + i * run->act_row_bytes);
                run->y[(m + i) * run->y_row_stride + n] =
                    (x_scale * w->scales[n]) * (float)dots[i] + (run->bias ? run->bias[n] : 0.0f);
            }
        }
    }
}

/* ---- int4 ---- */

static int64_t int4_act_row_bytes_avx512vnni(const tb_quant_weight *w) {
    const int64_t k128 = tb_quant_round_up(w->k, 128);
    return TB_QUANT_ACT_HEADER_BYTES + k128 + k128 / 2;
}

static void int4_act_prepare_avx512vnni(const tb_quant_weight *w, const float *x, unsigned char *dst) {
    const int64_t k128 = tb_quant_round_up(w->k, 128);
    int8_t *xq = (int8_t *)(dst + TB_QUANT_ACT_HEADER_BYTES);
    int32_t *seeds = (int32_t *)(dst + TB_QUANT_ACT_HEADER_BYTES + k128);
    tb_quant_act_header header = {.scale = quantize_row_avx512vnni(x, w->k, xq)};
    memset(xq + w->k, 0, (size_t)(k128 - w->k));
    const __m512i low_bytes = _mm512_set1_epi16(0x00ff), ones = _mm512_set1_epi8(1);
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    for (int64_t b = 0; b < k128 / 128; b++) {
        /* natural 128 bytes -> 64 at even k, 64 at odd k: split the 16-bit pairs, pack, fix lane order */
        __m512i v0 = _mm512_loadu_si512(xq + 128 * b), v1 = _mm512_loadu_si512(xq + 128 * b + 64);
        __m512i even = _mm512_packus_epi16(_mm512_and_si512(v0, low_bytes), _mm512_and_si512(v1, low_bytes));
        __m512i odd = _mm512_packus_epi16(_mm512_srli_epi16(v0, 8), _mm512_srli_epi16(v1, 8));
        even = _mm512_permutexvar_epi64(order, even);
        odd = _mm512_permutexvar_epi64(order, odd);
        _mm512_storeu_si512(xq + 128 * b, even);
        _mm512_storeu_si512(xq + 128 * b + 64, odd);
        /* lane l sums bytes 4l..4l+3 of both halves: exactly k in [128b + 8l, +8) */
        __m512i sums = dpbusd_avx512vnni(dpbusd_avx512vnni(_mm512_setzero_si512(), ones, even), ones, odd);
        _mm512_storeu_si512(seeds + 16 * b, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 3)));
    }
    memcpy(dst, &header, sizeof header);
}

/* Per-lane weight scales of block b (lane l covers k in [128b + 8l, +8)); `groups` = scales in the row,
 * never read past. GROUP is a constant after inlining. */
TB_INLINE __m512 int4_lane_scales_avx512vnni(const float *scales, int64_t b, int64_t group, int64_t groups) {
    if (group == 32 || group == 64) {
        const int64_t per_block = 128 / group, first = b * per_block;
        __m128 few;
        if (groups - first >= per_block) /* unmasked in the main loop: masked loads stream slowly */
            few = group == 32 ? _mm_loadu_ps(scales + first)
                              : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(scales + first)));
        else
            few = _mm_maskz_loadu_ps((__mmask8)((1u << (groups - first)) - 1), scales + first);
        const __m512i pick = group == 32 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                         : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(few));
    }
    return _mm512_set1_ps(scales[(b * 128) >> __builtin_ctzll((unsigned long long)group)]); /* power of two */
}

/* The exact per-lane dots of one 128-block (seeded with the -8 correction), as floats. */
TB_INLINE __m512 int4_block_avx512vnni(__m512i lo, __m512i hi, const unsigned char *a, int64_t k128, int64_t b) {
    __m512i dot = _mm512_loadu_si512(a + k128 + 64 * b);
    dot = dpbusd_avx512vnni(dot, lo, _mm512_loadu_si512(a + 128 * b));
    dot = dpbusd_avx512vnni(dot, hi, _mm512_loadu_si512(a + 128 * b + 64));
    return _mm512_cvtepi32_ps(dot);
}

/* dots[i] for i < mb prepared activation rows (`a` points at row 0's data, ld_act bytes apart). */
TB_INLINE void int4_row_batch_avx512vnni(const uint8_t *row, const float *scales, const unsigned char *a,
                                         int64_t ld_act, int mb, int64_t k, int64_t group, float dots[MB]) {
    const __m512i low_mask = _mm512_set1_epi8(15);
    const int64_t k128 = tb_quant_round_up(k, 128), groups = k / group, full = k / 128;
    __m512 acc[MB], acc2[MB];
    for (int i = 0; i < MB; i++)
        acc[i] = acc2[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k128 / 128; b++) {
        __m512i packed;
        if (b < full) {
            if ((b & 1) == 0)
                _mm_prefetch((const char *)(row + 64 * b + PREFETCH_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(row + 64 * b + PREFETCH_BYTES + 64), _MM_HINT_T0);
            packed = _mm512_loadu_si512(row + 64 * b);
        } else { /* K % 128 in {32, 64, 96}: the last block is partial */
            packed = _mm512_maskz_loadu_epi8((__mmask64)((1ull << ((k - 128 * b) / 2)) - 1), row + 64 * b);
        }
        const __m512i lo = _mm512_and_si512(packed, low_mask);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_mask);
        const __m512 lane_scales = int4_lane_scales_avx512vnni(scales, b, group, groups);
        for (int i = 0; i < mb; i++) {
            const __m512 part = int4_block_avx512vnni(lo, hi, a + i * ld_act, k128, b);
            if (mb < 4 && (b & 1)) /* two chains per row hide the FMA latency when mb is small */
                acc2[i] = _mm512_fmadd_ps(part, lane_scales, acc2[i]);
            else
                acc[i] = _mm512_fmadd_ps(part, lane_scales, acc[i]);
        }
    }
    for (int i = 0; i < mb; i++)
        dots[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], acc2[i]));
}

TB_INLINE void int4_row_any_avx512vnni(const uint8_t *row, const float *scales, const unsigned char *a,
                                       int64_t ld_act, int mb, int64_t k, int64_t group, float dots[MB]) {
    if (group == 32)
        int4_row_batch_avx512vnni(row, scales, a, ld_act, mb, k, 32, dots);
    else if (group == 64)
        int4_row_batch_avx512vnni(row, scales, a, ld_act, mb, k, 64, dots);
    else
        int4_row_batch_avx512vnni(row, scales, a, ld_act, mb, k, group, dots);
}

static void int4_rows_avx512vnni(const tb_quant_run *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const int64_t ld = run->act_row_bytes;
    for (int64_t n = n_begin; n < n_end; n++) {
        const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
        const float *scales = w->scales + n * w->scales_per_row;
        for (int64_t m = 0; m < run->m; m += MB) {
            const int64_t mb = run->m - m < MB ? run->m - m : MB;
            const unsigned char *act = run->act + m * ld;
            const unsigned char *a = act + TB_QUANT_ACT_HEADER_BYTES;
            float dots[MB];
            switch (mb) {
            case 1: int4_row_any_avx512vnni(row, scales, a, ld, 1, w->k, w->group_size, dots); break;
            case 2: int4_row_any_avx512vnni(row, scales, a, ld, 2, w->k, w->group_size, dots); break;
            case 3: int4_row_any_avx512vnni(row, scales, a, ld, 3, w->k, w->group_size, dots); break;
            case 4: int4_row_any_avx512vnni(row, scales, a, ld, 4, w->k, w->group_size, dots); break;
            case 5: int4_row_any_avx512vnni(row, scales, a, ld, 5, w->k, w->group_size, dots); break;
            case 6: int4_row_any_avx512vnni(row, scales, a, ld, 6, w->k, w->group_size, dots); break;
            case 7: int4_row_any_avx512vnni(row, scales, a, ld, 7, w->k, w->group_size, dots); break;
            default: int4_row_any_avx512vnni(row, scales, a, ld, 8, w->k, w->group_size, dots); break;
            }
            for (int64_t i = 0; i < mb; i++)
                run->y[(m + i) * run->y_row_stride + n] =
                    act_scale_avx512vnni(act + i * ld) * dots[i] + (run->bias ? run->bias[n] : 0.0f);
        }
    }
}

static const tb_quant_impl int8_a8_avx512vnni = {.act_row_bytes = int8_act_row_bytes_avx512vnni,
                                                  .act_prepare = int8_act_prepare_avx512vnni,
                                                  .rows = int8_rows_avx512vnni};
static const tb_quant_impl int4_a8_avx512vnni = {.act_row_bytes = int4_act_row_bytes_avx512vnni,
                                                  .act_prepare = int4_act_prepare_avx512vnni,
                                                  .rows = int4_rows_avx512vnni};

const tb_quant_impl *tb_quant_impl_avx512vnni(tb_quant_type type, tb_quant_act act) {
    if (act != TB_QUANT_ACT_INT8)
        return NULL; /* A32 at this level runs the AVX-512 kernels (see tb_quant_kernel_resolve) */
    return type == TB_QUANT_INT8 ? &int8_a8_avx512vnni : &int4_a8_avx512vnni;
}
