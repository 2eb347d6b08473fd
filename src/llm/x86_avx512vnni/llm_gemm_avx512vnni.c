/* AVX-512 VNNI GEMM for prompts (M >= 16 activation rows) on int4/int8 weights in the API layout, with the
 * same numbers as the row kernels: activations quantized to int8 per 32-block (bit-identical to
 * tb_llm_qact_prepare_block), exact int32 dots per 32-block, scaled in f32.
 *
 * Broadcast form: activations are transposed so one zmm holds 4 consecutive k of 16 activation rows
 * (u8 = xq + 128), and 4 weight bytes (s8, q) are broadcast straight from memory into vpdpbusd; a tile of
 * 4 weight rows x 48 activation rows keeps 12 int32 accumulators per 32-block and 12 f32 accumulators
 * across blocks. The +128 offset is cancelled per (row, block) with 128 * sum(q), computed when a tile's
 * weight rows are unpacked to s8 (int4 nibbles minus 8) into per-thread scratch.
 *
 * Prepared activations ("xt"), Mp = M rounded up to 16, KB = ceil(K / 32):
 *   bytes [b][quad 0..7][Mp][4]: xq[m, 32b + 4 quad + e] + 128 (0x80 padding past M and K)
 *   then f32 scales [b][Mp] (0 past M). */
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#include "llm/llm_internal.h"
#include "llm/x86_avx512vnni/llm_qmatmul_avx512vnni.h"
#include "torchburn/thread_pool.h"

enum { NR = 4, MV = 3, LANES = 16 };

int64_t tb_llm_gemm_xt_bytes_avx512vnni(int64_t m, int64_t k) {
    const int64_t mp = (m + LANES - 1) / LANES * LANES, kb = (k + 31) / 32;
    return kb * 32 * mp + kb * mp * 4;
}

/* Row groups [group_begin, group_end) (16 rows each; rows past m are padding) of x into the transposed
 * layout. A group's 32-value block is 16 rows x 8 quads: the rows are quantized, paired into zmm (row i in
 * the low half, row i + 8 in the high half) and transposed 8 x 8 per half, so each quad's 16 rows are one
 * contiguous 64-byte store. */
void tb_llm_gemm_prepare_avx512vnni(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                                    int64_t group_end, unsigned char *xt) {
    const int64_t mp = (m + LANES - 1) / LANES * LANES, kb = (k + 31) / 32;
    float *scales = (float *)(xt + kb * 32 * mp);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t group = group_begin; group < group_end; group++) {
        const int64_t row0 = group * LANES;
        for (int64_t b = 0; b < kb; b++) {
            const int64_t n = k - 32 * b < 32 ? k - 32 * b : 32;
            float block_scales[LANES];
            __m256i q[LANES];
            for (int i = 0; i < LANES; i++) {
                const int64_t row = row0 + i;
                block_scales[i] = 0.0f;
                q[i] = row < m ? _mm256_xor_si256(tb_llm_quantize32_avx512vnni(x + row * x_stride + 32 * b, n, &block_scales[i]), flip)
                               : flip; /* padding: xq = 0 */
            }
            tb_llm_transpose16x8_avx512vnni(q, xt + (b * 8 * mp + row0) * 4, mp * 4);
            memcpy(scales + b * mp + row0, block_scales, sizeof block_scales);
        }
    }
}

TB_INLINE float block_scale(const tb_quant_weight *w, const float *scales, int64_t b) {
    return w->type == TB_QUANT_INT4 ? scales[b * 32 / w->group_size] : scales[0];
}

/* 4 weight rows x `mv` vectors of 16 activation rows starting at m0 (mv is a constant after inlining). Only
 * the 4 x mv int32 block accumulators live in registers; the f32 totals are touched once per 32-block and
 * stay in memory (acc[r][v] is 16 floats). */
TB_INLINE void tile(const tb_quant_weight *w, const int8_t *const *q, const int32_t *const *corrections,
                    const float *const *scales, const unsigned char *xt, int64_t mp, int64_t kb, int64_t m0, const int mv,
                    float acc[NR][MV][LANES]) {
    const float *xs = (const float *)(xt + kb * 32 * mp);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (int v = 0; v < mv; v++)
            _mm512_storeu_ps(acc[r][v], _mm512_setzero_ps());
    for (int64_t b = 0; b < kb; b++) {
        __m512i d00 = _mm512_setzero_si512(), d01 = d00, d02 = d00, d10 = d00, d11 = d00, d12 = d00;
        __m512i d20 = d00, d21 = d00, d22 = d00, d30 = d00, d31 = d00, d32 = d00;
        const int8_t *q0 = q[0] + 32 * b, *q1 = q[1] + 32 * b, *q2 = q[2] + 32 * b, *q3 = q[3] + 32 * b;
#pragma GCC unroll 8
        for (int quad = 0; quad < 8; quad++) {
            const unsigned char *xq = xt + ((b * 8 + quad) * mp + m0) * 4;
            const __m512i x0 = _mm512_loadu_si512(xq);
            const __m512i x1 = mv > 1 ? _mm512_loadu_si512(xq + 64) : x0;
            const __m512i x2 = mv > 2 ? _mm512_loadu_si512(xq + 128) : x0;
            int32_t p0, p1, p2, p3;
            memcpy(&p0, q0 + 4 * quad, 4);
            memcpy(&p1, q1 + 4 * quad, 4);
            memcpy(&p2, q2 + 4 * quad, 4);
            memcpy(&p3, q3 + 4 * quad, 4);
            const __m512i w0 = _mm512_set1_epi32(p0), w1 = _mm512_set1_epi32(p1);
            const __m512i w2 = _mm512_set1_epi32(p2), w3 = _mm512_set1_epi32(p3);
            d00 = _mm512_dpbusd_epi32(d00, x0, w0);
            d10 = _mm512_dpbusd_epi32(d10, x0, w1);
            d20 = _mm512_dpbusd_epi32(d20, x0, w2);
            d30 = _mm512_dpbusd_epi32(d30, x0, w3);
            if (mv > 1) {
                d01 = _mm512_dpbusd_epi32(d01, x1, w0);
                d11 = _mm512_dpbusd_epi32(d11, x1, w1);
                d21 = _mm512_dpbusd_epi32(d21, x1, w2);
                d31 = _mm512_dpbusd_epi32(d31, x1, w3);
            }
            if (mv > 2) {
                d02 = _mm512_dpbusd_epi32(d02, x2, w0);
                d12 = _mm512_dpbusd_epi32(d12, x2, w1);
                d22 = _mm512_dpbusd_epi32(d22, x2, w2);
                d32 = _mm512_dpbusd_epi32(d32, x2, w3);
            }
        }
        const __m512i dots[NR][MV] = {{d00, d01, d02}, {d10, d11, d12}, {d20, d21, d22}, {d30, d31, d32}};
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m512i correction = _mm512_set1_epi32(corrections[r][b]);
            const __m512 ws = _mm512_set1_ps(block_scale(w, scales[r], b));
#pragma GCC unroll 3
            for (int v = 0; v < mv; v++) {
                const __m512 lane_scales = _mm512_mul_ps(ws, _mm512_loadu_ps(xs + b * mp + m0 + 16 * v));
                _mm512_storeu_ps(acc[r][v],
                                 _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dots[r][v], correction)),
                                                 lane_scales, _mm512_loadu_ps(acc[r][v])));
            }
        }
    }
}

/* Per-thread unpacked weight rows. */
static _Thread_local unsigned char *unpacked;
static _Thread_local size_t unpacked_capacity;

/* y rows [0, m) x columns [n_begin, n_end): false when scratch could not be allocated. */
bool tb_llm_gemm_rows_avx512vnni(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y,
                                 int64_t y_stride, const float *bias, int64_t n_begin, int64_t n_end) {
    const int64_t mp = (m + LANES - 1) / LANES * LANES, kb = (w->k + 31) / 32;
    const size_t row_bytes = (size_t)(kb * 32), needed = NR * (row_bytes + (size_t)kb * 4);
    if (tb_llm_thread_scratch_reserve(&unpacked, &unpacked_capacity, needed) != TB_OK)
        return false;
    for (int64_t n = n_begin; n < n_end; n += NR) {
        const int64_t nr = n_end - n < NR ? n_end - n : NR;
        const int8_t *q[NR];
        const int32_t *corrections[NR];
        const float *scales[NR];
        for (int r = 0; r < NR; r++) {
            int8_t *qr = (int8_t *)unpacked + r * row_bytes;
            int32_t *cr = (int32_t *)(unpacked + NR * row_bytes) + r * kb;
            if (r < nr) {
                tb_llm_unpack_row_avx512vnni(w, n + r, kb, qr, cr);
                q[r] = qr;
                corrections[r] = cr;
                scales[r] = w->scales + (n + r) * w->scales_per_row;
            } else { /* a short block repeats its last row; those results are dropped */
                q[r] = q[nr - 1];
                corrections[r] = corrections[nr - 1];
                scales[r] = scales[nr - 1];
            }
        }
        for (int64_t m0 = 0; m0 < mp; m0 += MV * LANES) {
            const int mv = (int)((mp - m0) / LANES < MV ? (mp - m0) / LANES : MV);
            float acc[NR][MV][LANES] __attribute__((aligned(64)));
            switch (mv) {
            case 1: tile(w, q, corrections, scales, xt, mp, kb, m0, 1, acc); break;
            case 2: tile(w, q, corrections, scales, xt, mp, kb, m0, 2, acc); break;
            default: tile(w, q, corrections, scales, xt, mp, kb, m0, 3, acc); break;
            }
            /* y[m, n..n+3]: 4x4 transposes of the accumulators (scatters are slow), bias added on the way */
            float bias4[NR] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t r = 0; r < nr; r++)
                bias4[r] = bias ? bias[n + r] : 0.0f;
            const __m128 b = _mm_loadu_ps(bias4);
            for (int v = 0; v < mv; v++) {
                for (int j = 0; j < LANES; j += 4) {
                    const int64_t first = m0 + 16 * v + j;
                    if (first >= m)
                        break;
                    __m128 c0 = _mm_load_ps(acc[0][v] + j), c1 = _mm_load_ps(acc[1][v] + j);
                    __m128 c2 = _mm_load_ps(acc[2][v] + j), c3 = _mm_load_ps(acc[3][v] + j);
                    _MM_TRANSPOSE4_PS(c0, c1, c2, c3);
                    const __m128 rows[4] = {_mm_add_ps(c0, b), _mm_add_ps(c1, b), _mm_add_ps(c2, b), _mm_add_ps(c3, b)};
                    for (int i = 0; i < 4 && first + i < m; i++) {
                        float *out = y + (first + i) * y_stride + n;
                        if (nr == NR) {
                            _mm_storeu_ps(out, rows[i]);
                        } else {
                            float values[4];
                            _mm_storeu_ps(values, rows[i]);
                            memcpy(out, values, (size_t)nr * sizeof(float));
                        }
                    }
                }
            }
        }
    }
    return true;
}
