/* AVX-512 BF16 GEMM building blocks (vdpbf16ps): the f32 GEMM contract of gemm_internal.h with A and B
 * rounded to bfloat16 while they are packed, products of bf16 pairs accumulated in f32. Used for
 * TB_GEMM_PRECISION_BF16 (TORCHBURN_MATMUL_PRECISION=medium|bf16, and matmuls whose operands already
 * are bf16 values, for which the rounding is exact).
 *
 * Packed layouts (one 32-bit slot = two bf16, k = 2q in the low half, k = 2q + 1 in the high half, a
 * missing odd k zero), in the float-sized units the driver allocates (a bf16 panel takes at most the
 * f32 panel's space):
 *   A panel: slot[q * MR + i] = (A[i, 2q], A[i, 2q + 1])   (q < ceil(kc / 2))
 *   B panel: slot[q * NR + j] = (B[2q, j], B[2q + 1, j])
 * Rounding: bf16_pairs_avx512.h.
 * The 14 x 32 micro-kernel: per k pair two B loads, 14 32-bit broadcasts of A, 28 vdpbf16ps. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "kernels/x86_avx512/gemm_tile_avx512.h"
#include "kernels/x86_avx512/gemm_transpose_avx512.h"
#include "kernels/x86_avx512vnni/bf16_pairs_avx512.h"

enum { MR = TB_AVX512_MR, NR = TB_AVX512_NR };

static inline __mmask16 mask_first(int count) { return tb_avx512_mask_first(count); }

static inline __attribute__((always_inline)) void tile_rows(const int ROWS, int64_t kc, const float *a,
                                                            const float *b, float *c, int64_t ldc, int nr,
                                                            float alpha, float beta) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; i++) {
        acc0[i] = _mm512_setzero_ps();
        acc1[i] = _mm512_setzero_ps();
    }
    const int32_t *a32 = (const int32_t *)a;
    int64_t pairs = (kc + 1) / 2;
#pragma GCC unroll 4
    for (int64_t q = 0; q < pairs; q++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)b);
        __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(b + 16));
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32(a32[i]);
            acc0[i] = _mm512_dpbf16_ps(acc0[i], ai, b0);
            acc1[i] = _mm512_dpbf16_ps(acc1[i], ai, b1);
        }
        a32 += MR;
        b += NR;
    }
    tb_avx512_store_tile(ROWS, acc0, acc1, c, ldc, nr, alpha, beta);
}

TB_AVX512_MICROKERNEL(microkernel_bf16, tile_rows)

/* Rows of A (or columns of a transposed B) contiguous in k: 16 lines x 32 k per step become 16 pair
 * slots per line, transposed so each pair index holds its 16 lines; `width` is the panel's line count
 * (MR or NR) and lines past `lines` are zero. */
static void pack_k_contiguous(const float *x, int64_t line_stride, int lines, int64_t kc, int width, int line0,
                              float *panel) {
    const __mmask16 store_mask = mask_first(width - line0);
    int64_t pairs = (kc + 1) / 2;
    for (int64_t p0 = 0; p0 < kc; p0 += 32) {
        int count = kc - p0 < 32 ? (int)(kc - p0) : 32;
        __mmask16 lo_mask = mask_first(count), hi_mask = mask_first(count - 16);
        __m512 r[16];
        for (int l = 0; l < 16; l++) {
            if (line0 + l < lines) {
                const float *src = x + (line0 + l) * line_stride + p0;
                r[l] = tb_bf16_pairs_of_consecutive(_mm512_maskz_loadu_ps(lo_mask, src), _mm512_maskz_loadu_ps(hi_mask, src + 16));
            } else {
                r[l] = _mm512_setzero_ps();
            }
        }
        tb_transpose16_avx512(r);
        int64_t q0 = p0 / 2;
        for (int q = 0; q < 16 && q0 + q < pairs; q++)
            _mm512_mask_storeu_ps(panel + (q0 + q) * width + line0, store_mask, r[q]);
    }
}

/* Lines contiguous across the panel (row-major B, column-major A): one pair of k rows per step. */
static void pack_lines_contiguous(const float *x, int64_t k_stride, int lines, int64_t kc, int width, float *panel) {
    int64_t pairs = (kc + 1) / 2;
    for (int l0 = 0; l0 < width; l0 += 16) {
        __mmask16 m = mask_first(lines - l0), store = mask_first(width - l0);
        for (int64_t q = 0; q < pairs; q++) {
            __m512 even = _mm512_maskz_loadu_ps(m, x + 2 * q * k_stride + l0);
            __m512 odd = 2 * q + 1 < kc ? _mm512_maskz_loadu_ps(m, x + (2 * q + 1) * k_stride + l0) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(panel + q * width + l0, store, tb_bf16_pairs_of_rows(even, odd));
        }
    }
}

/* Any strides: element by element. */
static void pack_generic(const float *x, int64_t line_stride, int64_t k_stride, int lines, int64_t kc, int width,
                         float *panel) {
    uint32_t *slots = (uint32_t *)panel;
    int64_t pairs = (kc + 1) / 2;
    for (int64_t q = 0; q < pairs; q++)
        for (int l = 0; l < width; l++) {
            float even = l < lines ? x[l * line_stride + 2 * q * k_stride] : 0.0f;
            float odd = l < lines && 2 * q + 1 < kc ? x[l * line_stride + (2 * q + 1) * k_stride] : 0.0f;
            slots[q * width + l] = tb_bf16_pair_scalar(even, odd);
        }
}

static void pack_a_bf16(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc, float *a_panel) {
    if (col_stride == 1)
        pack_k_contiguous(a, row_stride, rows, kc, MR, 0, a_panel);
    else if (row_stride == 1)
        pack_lines_contiguous(a, col_stride, rows, kc, MR, a_panel);
    else
        pack_generic(a, row_stride, col_stride, rows, kc, MR, a_panel);
}

static void pack_b_bf16(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc, float *b_panel) {
    if (col_stride == 1) {
        pack_lines_contiguous(b, row_stride, cols, kc, NR, b_panel);
    } else if (row_stride == 1) {
        pack_k_contiguous(b, col_stride, cols, kc, NR, 0, b_panel);
        pack_k_contiguous(b, col_stride, cols, kc, NR, 16, b_panel);
    } else {
        pack_generic(b, col_stride, row_stride, cols, kc, NR, b_panel);
    }
}

const tb_gemm_microkernel tb_gemm_microkernel_avx512_bf16 = {
    .isa_name = "avx512_bf16",
    .mr = MR,
    .nr = NR,
    .packed_bytes = 2,
    .kc = 512,     /* 32 KiB bf16 B panel in the 48 KiB L1 */
    .mc = MR * 24,
    .nc = NR * 64,
    .kernel = microkernel_bf16,
    .pack_a = pack_a_bf16,
    .pack_b = pack_b_bf16,
    .epilogue = tb_gemm_epilogue_avx512,
    .small_m = NULL, /* few rows go through the packed path too, so every product rounds alike */
};
