/* AVX2 GEMM for prompts (M >= 16 activation rows) on int4/int8 weights in the API layout, for x86 CPUs
 * without AVX-512 VNNI. Same numbers as the VNNI GEMM (x86_avx512vnni/llm_gemm_avx512vnni.c), bit for bit:
 * activations quantized to int8 per 32-block exactly as tb_llm_qact_prepare_block does, the exact int32
 * dot of every (activation row, weight row, 32-block), then acc = fma(dot, ws * xs, acc) in block order
 * and the bias added last. Only the way the integer dot is formed differs (AVX2 has no vpdpbusd).
 *
 * Broadcast form: one ymm holds 4 consecutive k of 8 activation rows (s8), and 4 weight bytes of one weight
 * row are broadcast. A tile is 4 weight rows x 16 activation rows (8 accumulators, 4 broadcasts, 2 rows of
 * activations: 14 of the 16 ymm).
 *   int4: the weights are the stored nibbles u = q + 8 (0..15), unsigned; vpmaddubsw(u, x) gives int16
 *         sums of 2 products (|.| <= 2 * 15 * 127) that are added in int16 over the block's 8 quads
 *         (|.| <= 16 * 15 * 127 = 30480 < 32767, no saturation), then vpmaddwd by 1 makes the int32 block
 *         sum; subtracting 8 * sum(x) of the block (prepared with the activations) gives sum(q * x).
 *   int8: vpmaddubsw(|w|, x with w's sign) (|pair| <= 2 * 128 * 127 < 32767), widened to int32 per quad.
 *
 * Prepared activations ("xt"), Mp = M rounded up to 16, KB = ceil(K / 32):
 *   bytes [b][quad 0..7][Mp][4]: xq[m, 32b + 4 quad + e] (0 past M and K)
 *   then int32 [b][Mp]: 8 * sum of the block's xq, then f32 scales [b][Mp] (0 past M). */
#include <immintrin.h>
#include <string.h>

#include "llm/llm_internal.h"

#define TB_INLINE static inline __attribute__((always_inline))

enum { NR = 4, ROWS = 16 }; /* a tile: 4 weight rows x 16 activation rows (two ymm of 8) */

int64_t tb_llm_gemm_xt_bytes_avx2(int64_t m, int64_t k) {
    const int64_t mp = (m + ROWS - 1) / ROWS * ROWS, kb = (k + 31) / 32;
    return kb * 32 * mp + kb * mp * 8;
}

/* tb_llm_quantize_blocks32 in AVX2, the same bits: 32 values (n valid, zeros past n) -> xq, the scale and
 * the sum of xq. */
TB_INLINE void quantize32(const float *x, int64_t n, int8_t xq[32], float *scale, int32_t *sum) {
    __m256 v[4];
    for (int i = 0; i < 4; i++) {
        const int64_t valid = n - 8 * i;
        if (valid >= 8) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
        } else {
            float lanes[8] = {0};
            for (int64_t e = 0; e < valid; e++)
                lanes[e] = x[8 * i + e];
            v[i] = _mm256_loadu_ps(lanes);
        }
    }
    const __m256 sign = _mm256_set1_ps(-0.0f), largest = _mm256_set1_ps(3.4028235e38f);
    __m256 amax = _mm256_setzero_ps();
    int finite = 0xff;
    for (int i = 0; i < 4; i++) {
        const __m256 a = _mm256_andnot_ps(sign, v[i]);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(a, largest, _CMP_LE_OQ)); /* false for inf and NaN */
        amax = _mm256_max_ps(amax, a);
    }
    if (finite != 0xff) { /* the block (and every output it reaches) becomes NaN */
        *scale = __builtin_nanf("");
        *sum = 0;
        memset(xq, 0, 32);
        return;
    }
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    const float largest_abs = _mm_cvtss_f32(_mm_max_ss(half, _mm_movehdup_ps(half)));
    const float inverse = largest_abs > 0.0f ? 127.0f / largest_abs : 0.0f;
    *scale = largest_abs / 127.0f;
    const __m256 inv = _mm256_set1_ps(inverse), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i q[4];
    for (int i = 0; i < 4; i++) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    __m256i total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    *sum = _mm_cvtsi128_si32(t);
    /* packs work per 128-bit lane: the dwords come out as 0,2,4,6,1,3,5,7 of the natural order */
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)xq, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* Row groups [group_begin, group_end) of 16 rows (rows past m are padding) of x into the layout above. */
void tb_llm_gemm_prepare_avx2(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                              int64_t group_end, unsigned char *xt) {
    const int64_t mp = (m + ROWS - 1) / ROWS * ROWS, kb = (k + 31) / 32;
    int32_t *sums = (int32_t *)(xt + kb * 32 * mp);
    float *scales = (float *)(sums + kb * mp);
    for (int64_t row = group_begin * ROWS; row < group_end * ROWS; row++) {
        for (int64_t b = 0; b < kb; b++) {
            int8_t xq[32] = {0};
            float scale = 0.0f;
            int32_t sum = 0;
            if (row < m)
                quantize32(x + row * x_stride + 32 * b, k - 32 * b < 32 ? k - 32 * b : 32, xq, &scale, &sum);
            for (int quad = 0; quad < 8; quad++)
                memcpy(xt + ((b * 8 + quad) * mp + row) * 4, xq + 4 * quad, 4);
            sums[b * mp + row] = 8 * sum;
            scales[b * mp + row] = scale;
        }
    }
}

/* The exact int32 dots of one 32-block, NR weight rows x 2 vectors of 8 activation rows: dots[r][v]. */
TB_INLINE void block_dots(const uint8_t *const *u, bool int4, const unsigned char *xq, int64_t mp,
                          __m256i dots[NR][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (int4) {
        __m256i d00 = _mm256_setzero_si256(), d01 = d00, d10 = d00, d11 = d00;
        __m256i d20 = d00, d21 = d00, d30 = d00, d31 = d00;
        /* The quad step in assembly: from intrinsics GCC keeps all four broadcasts and a copy of every sum
         * live, spills one sum and makes its loop-carried add wait on a store (measured 2.7x slower). Here
         * it is 8 sums + 2 activation vectors + 1 broadcast + 1 product register. */
        for (int quad = 0; quad < 8; quad++) {
            __m256i x0, x1, w, t;
#define TB_INT4_ROW(U, D0, D1)                                                                         \
    "vpbroadcastd (%[" U "]), %[w]\n\t"                                                               \
    "vpmaddubsw %[x0], %[w], %[t]\n\t"                                                                \
    "vpaddw %[t], %[" D0 "], %[" D0 "]\n\t"                                                            \
    "vpmaddubsw %[x1], %[w], %[t]\n\t"                                                                \
    "vpaddw %[t], %[" D1 "], %[" D1 "]\n\t"
            __asm__("vmovdqu (%[x]), %[x0]\n\t"
                    "vmovdqu 32(%[x]), %[x1]\n\t"
                    TB_INT4_ROW("u0", "d00", "d01") TB_INT4_ROW("u1", "d10", "d11")
                    TB_INT4_ROW("u2", "d20", "d21") TB_INT4_ROW("u3", "d30", "d31")
                    : [d00] "+x"(d00), [d01] "+x"(d01), [d10] "+x"(d10), [d11] "+x"(d11), [d20] "+x"(d20),
                      [d21] "+x"(d21), [d30] "+x"(d30), [d31] "+x"(d31), [x0] "=&x"(x0), [x1] "=&x"(x1),
                      [w] "=&x"(w), [t] "=&x"(t)
                    : [x] "r"(xq + quad * mp * 4), [u0] "r"(u[0] + 4 * quad), [u1] "r"(u[1] + 4 * quad),
                      [u2] "r"(u[2] + 4 * quad), [u3] "r"(u[3] + 4 * quad)
                    : "memory");
#undef TB_INT4_ROW
        }
        dots[0][0] = _mm256_madd_epi16(d00, ones);
        dots[0][1] = _mm256_madd_epi16(d01, ones);
        dots[1][0] = _mm256_madd_epi16(d10, ones);
        dots[1][1] = _mm256_madd_epi16(d11, ones);
        dots[2][0] = _mm256_madd_epi16(d20, ones);
        dots[2][1] = _mm256_madd_epi16(d21, ones);
        dots[3][0] = _mm256_madd_epi16(d30, ones);
        dots[3][1] = _mm256_madd_epi16(d31, ones);
        return;
    }
    /* int8: |w| x (x with w's sign), widened per quad; in assembly for the same reason as the int4 step */
    __m256i e00 = _mm256_setzero_si256(), e01 = e00, e10 = e00, e11 = e00;
    __m256i e20 = e00, e21 = e00, e30 = e00, e31 = e00;
    for (int quad = 0; quad < 8; quad++) {
        __m256i x0, x1, w, magnitude, t;
#define TB_INT8_ROW(U, D0, D1)                                                                         \
    "vpbroadcastd (%[" U "]), %[w]\n\t"                                                               \
    "vpabsb %[w], %[m]\n\t"                                                                           \
    "vpsignb %[w], %[x0], %[t]\n\t"                                                                   \
    "vpmaddubsw %[t], %[m], %[t]\n\t"                                                                 \
    "vpmaddwd %[ones], %[t], %[t]\n\t"                                                                \
    "vpaddd %[t], %[" D0 "], %[" D0 "]\n\t"                                                            \
    "vpsignb %[w], %[x1], %[t]\n\t"                                                                   \
    "vpmaddubsw %[t], %[m], %[t]\n\t"                                                                 \
    "vpmaddwd %[ones], %[t], %[t]\n\t"                                                                \
    "vpaddd %[t], %[" D1 "], %[" D1 "]\n\t"
        __asm__("vmovdqu (%[x]), %[x0]\n\t"
                "vmovdqu 32(%[x]), %[x1]\n\t"
                TB_INT8_ROW("u0", "d00", "d01") TB_INT8_ROW("u1", "d10", "d11")
                TB_INT8_ROW("u2", "d20", "d21") TB_INT8_ROW("u3", "d30", "d31")
                : [d00] "+x"(e00), [d01] "+x"(e01), [d10] "+x"(e10), [d11] "+x"(e11), [d20] "+x"(e20),
                  [d21] "+x"(e21), [d30] "+x"(e30), [d31] "+x"(e31), [x0] "=&x"(x0), [x1] "=&x"(x1),
                  [w] "=&x"(w), [m] "=&x"(magnitude), [t] "=&x"(t)
                : [x] "r"(xq + quad * mp * 4), [u0] "r"(u[0] + 4 * quad), [u1] "r"(u[1] + 4 * quad),
                  [u2] "r"(u[2] + 4 * quad), [u3] "r"(u[3] + 4 * quad), [ones] "x"(ones)
                : "memory");
#undef TB_INT8_ROW
    }
    dots[0][0] = e00;
    dots[0][1] = e01;
    dots[1][0] = e10;
    dots[1][1] = e11;
    dots[2][0] = e20;
    dots[2][1] = e21;
    dots[3][0] = e30;
    dots[3][1] = e31;
}

/* NR weight rows (u: nibbles or s8 bytes in k order, zero past K; ws: their scale per 32-block) x 16
 * activation rows from m0; the f32 totals stay in memory (acc[r] is 16 floats) and are touched once per
 * 32-block. */
TB_INLINE void tile(bool int4, const uint8_t *const *u, const float *const *ws, const unsigned char *xt, int64_t mp,
                 int64_t kb, int64_t m0, float acc[NR][ROWS]) {
    const int32_t *sums = (const int32_t *)(xt + kb * 32 * mp);
    const float *xs = (const float *)(sums + kb * mp);
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 2; v++)
            _mm256_storeu_ps(acc[r] + 8 * v, _mm256_setzero_ps());
    for (int64_t b = 0; b < kb; b++) {
        const uint8_t *ub[NR] = {u[0] + 32 * b, u[1] + 32 * b, u[2] + 32 * b, u[3] + 32 * b};
        __m256i dots[NR][2];
        block_dots(ub, int4, xt + (b * 8 * mp + m0) * 4, mp, dots);
        const __m256 xs0 = _mm256_loadu_ps(xs + b * mp + m0), xs1 = _mm256_loadu_ps(xs + b * mp + m0 + 8);
        const __m256i sums0 = _mm256_loadu_si256((const __m256i *)(sums + b * mp + m0));
        const __m256i sums1 = _mm256_loadu_si256((const __m256i *)(sums + b * mp + m0 + 8));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m256 w_scale = _mm256_broadcast_ss(ws[r] + b);
            __m256i dot0 = dots[r][0], dot1 = dots[r][1];
            if (int4) {
                dot0 = _mm256_sub_epi32(dot0, sums0);
                dot1 = _mm256_sub_epi32(dot1, sums1);
            }
            _mm256_storeu_ps(acc[r], _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot0), _mm256_mul_ps(w_scale, xs0),
                                                     _mm256_loadu_ps(acc[r])));
            _mm256_storeu_ps(acc[r] + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot1), _mm256_mul_ps(w_scale, xs1),
                                                         _mm256_loadu_ps(acc[r] + 8)));
        }
    }
}

/* One weight row as its stored int4 nibbles (q + 8, 0..15) or int8 bytes, in k order, zero up to kb * 32,
 * and its scale per 32-block in ws[0..kb). */
static void unpack_row(const tb_quant_weight *w, int64_t n, int64_t kb, uint8_t *u, float *ws) {
    const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
    const float *scales = w->scales + n * w->scales_per_row;
    const int64_t k = w->k;
    for (int64_t b = 0; b < kb; b++)
        ws[b] = w->type == TB_QUANT_INT4 ? scales[b * 32 / w->group_size] : scales[0];
    if (w->type == TB_QUANT_INT4) {
        const __m256i low = _mm256_set1_epi16(15);
        int64_t i = 0;
        for (; i + 32 <= k; i += 32) { /* 16 packed bytes -> 32 values */
            const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(row + i / 2)));
            const __m256i pairs =
                _mm256_or_si256(_mm256_and_si256(words, low), _mm256_slli_epi16(_mm256_srli_epi16(words, 4), 8));
            _mm256_storeu_si256((__m256i *)(u + i), pairs);
        }
        for (; i < k; i += 2) {
            u[i] = row[i / 2] & 15;
            u[i + 1] = row[i / 2] >> 4;
        }
    } else {
        memcpy(u, row, (size_t)k);
    }
    memset(u + k, 0, (size_t)(kb * 32 - k));
}

/* Per-thread unpacked weight rows. */
static _Thread_local unsigned char *unpacked;
static _Thread_local size_t unpacked_capacity;

/* y rows [0, m) x columns [n_begin, n_end): false when scratch could not be allocated. */
bool tb_llm_gemm_rows_avx2(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y,
                           int64_t y_stride, const float *bias, int64_t n_begin, int64_t n_end) {
    const int64_t mp = (m + ROWS - 1) / ROWS * ROWS, kb = (w->k + 31) / 32;
    const size_t row_bytes = (size_t)(kb * 32), needed = NR * (row_bytes + (size_t)kb * sizeof(float));
    if (tb_llm_thread_scratch_reserve(&unpacked, &unpacked_capacity, needed) != TB_OK)
        return false;
    for (int64_t n = n_begin; n < n_end; n += NR) {
        const int64_t nr = n_end - n < NR ? n_end - n : NR;
        const uint8_t *u[NR];
        const float *ws[NR];
        for (int r = 0; r < NR; r++) {
            if (r < nr) {
                uint8_t *ur = unpacked + r * row_bytes;
                float *wr = (float *)(unpacked + NR * row_bytes) + r * kb;
                unpack_row(w, n + r, kb, ur, wr);
                u[r] = ur;
                ws[r] = wr;
            } else { /* a short block repeats its last row; those results are dropped */
                u[r] = u[nr - 1];
                ws[r] = ws[nr - 1];
            }
        }
        for (int64_t m0 = 0; m0 < m; m0 += ROWS) {
            float acc[NR][ROWS] __attribute__((aligned(32)));
            if (w->type == TB_QUANT_INT4)
                tile(true, u, ws, xt, mp, kb, m0, acc);
            else
                tile(false, u, ws, xt, mp, kb, m0, acc);
            for (int64_t i = 0; i < ROWS && m0 + i < m; i++)
                for (int64_t r = 0; r < nr; r++)
                    y[(m0 + i) * y_stride + n + r] = acc[r][i] + (bias ? bias[n + r] : 0.0f);
        }
    }
    return true;
}
