/* AVX-512 GEMM building blocks: a 14 x 32 register micro-kernel (28 zmm accumulators; per k step two
 * B vector loads, 14 broadcasts of packed A, 28 FMAs), packers that transpose 16 x 16 blocks in
 * registers, the vectorized fused epilogue, and unpacked kernels for products of at most 8 rows
 * (decode-style x W^T). Contracts in gemm_internal.h. */
#include <immintrin.h>

#include "kernels/gemm_internal.h"
#include "kernels/x86_avx512/gemm_math_avx512.h"
#include "kernels/x86_avx512/gemm_tile_avx512.h"
#include "kernels/x86_avx512/gemm_transpose_avx512.h"

enum { MR = TB_AVX512_MR, NR = TB_AVX512_NR };
enum { W_PREFETCH = 64 }; /* floats ahead on each streamed W row in the transposed small-m kernel */

static inline __mmask16 mask_first(int count) { return tb_avx512_mask_first(count); }

/* The micro-kernel body for a compile-time row count ROWS (<= MR); always inlined into one function
 * per row count so the accumulators live in registers. */
static inline __attribute__((always_inline)) void tile_rows(const int ROWS, int64_t kc, const float *a,
                                                            const float *b, float *c, int64_t ldc, int nr,
                                                            float alpha, float beta) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; i++) {
        acc0[i] = _mm512_setzero_ps();
        acc1[i] = _mm512_setzero_ps();
    }
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 31), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_load_ps(b);
        __m512 b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
            acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
        }
        a += MR;
        b += NR;
    }
    tb_avx512_store_tile(ROWS, acc0, acc1, c, ldc, nr, alpha, beta);
}

TB_AVX512_MICROKERNEL(microkernel_avx512, tile_rows)

static void pack_a_avx512(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc,
                          float *a_panel) {
    const __mmask16 panel_mask = mask_first(MR);
    if (col_stride == 1) { /* row-major A: transpose 16 (k) x rows blocks */
        for (int64_t p0 = 0; p0 < kc; p0 += 16) {
            int count = kc - p0 < 16 ? (int)(kc - p0) : 16;
            __mmask16 k_mask = mask_first(count);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < rows ? _mm512_maskz_loadu_ps(k_mask, a + i * row_stride + p0) : _mm512_setzero_ps();
            tb_transpose16_avx512(r);
            for (int p = 0; p < count; p++)
                _mm512_mask_storeu_ps(a_panel + (p0 + p) * MR, panel_mask, r[p]);
        }
        return;
    }
    if (row_stride == 1) { /* column-major A: each k column is contiguous */
        __mmask16 row_mask = mask_first(rows);
        for (int64_t p = 0; p < kc; p++)
            _mm512_mask_storeu_ps(a_panel + p * MR, panel_mask, _mm512_maskz_loadu_ps(row_mask, a + p * col_stride));
        return;
    }
    tb_gemm_pack_a_portable(a, row_stride, col_stride, rows, kc, MR, a_panel);
}

static void pack_b_avx512(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc,
                          float *b_panel) {
    if (col_stride == 1) { /* row-major B: copy 32 floats per k */
        if (cols == NR) {
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + p * row_stride;
                _mm512_store_ps(b_panel + p * NR, _mm512_loadu_ps(src));
                _mm512_store_ps(b_panel + p * NR + 16, _mm512_loadu_ps(src + 16));
            }
        } else {
            __mmask16 m0 = mask_first(cols), m1 = mask_first(cols - 16);
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + p * row_stride;
                _mm512_store_ps(b_panel + p * NR, _mm512_maskz_loadu_ps(m0, src));
                _mm512_store_ps(b_panel + p * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
            }
        }
        return;
    }
    if (row_stride == 1) { /* transposed B (e.g. nn.Linear weight): columns are contiguous in k */
        for (int j0 = 0; j0 < NR; j0 += 16) {
            for (int64_t p0 = 0; p0 < kc; p0 += 16) {
                int count = kc - p0 < 16 ? (int)(kc - p0) : 16;
                __mmask16 k_mask = mask_first(count);
                __m512 r[16];
                for (int j = 0; j < 16; j++)
                    r[j] = j0 + j < cols ? _mm512_maskz_loadu_ps(k_mask, b + (j0 + j) * col_stride + p0)
                                         : _mm512_setzero_ps();
                tb_transpose16_avx512(r);
                for (int p = 0; p < count; p++)
                    _mm512_store_ps(b_panel + (p0 + p) * NR + j0, r[p]);
            }
        }
        return;
    }
    tb_gemm_pack_b_portable(b, row_stride, col_stride, cols, kc, NR, b_panel);
}

void tb_gemm_epilogue_avx512(float *c, int64_t c_row_stride, int rows, int cols, const tb_gemm_epilogue *e) {
    for (int i = 0; i < rows; i++) {
        float *row = c + i * c_row_stride;
        const float *residual = e->residual ? e->residual + i * e->residual_row_stride : NULL;
        __m512 row_bias = _mm512_set1_ps(e->bias_kind == TB_BIAS_PER_ROW ? e->bias[i] : 0.0f);
        for (int j = 0; j < cols; j += 16) {
            __mmask16 m = mask_first(cols - j);
            __m512 x = _mm512_maskz_loadu_ps(m, row + j);
            if (e->bias_kind == TB_BIAS_PER_COLUMN)
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, e->bias + j));
            else if (e->bias_kind == TB_BIAS_PER_ROW)
                x = _mm512_add_ps(x, row_bias);
            x = tb_activation_avx512(x, e->activation);
            if (residual)
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, residual + j));
            _mm512_mask_storeu_ps(row + j, m, x);
        }
    }
}

/* ---- unpacked small-m products (contract in gemm_internal.h) ---- */

static inline __m512 finish(__m512 acc, float alpha, float beta, const float *c_old, __mmask16 m) {
    __m512 r = _mm512_mul_ps(acc, _mm512_set1_ps(alpha));
    if (beta != 0.0f)
        r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c_old), _mm512_set1_ps(beta), r);
    return r;
}

/* Row-major B, one block of 16 VECS columns: ROWS x VECS accumulators (ROWS * VECS <= 16); each k
 * step broadcasts the ROWS values of A and reads one contiguous stretch of a B row. FULL blocks use
 * plain loads; the last, partial block masks (up to `valid` columns). */
static inline __attribute__((always_inline)) void small_rowmajor_block(const int ROWS, const int VECS, const int FULL,
                                                                       int valid, int64_t k, const float *a,
                                                                       int64_t ars, int64_t acs, const float *b,
                                                                       int64_t ldb, float *c, int64_t ldc, float alpha,
                                                                       float beta) {
    __mmask16 mask[16];
#pragma GCC unroll 16
    for (int v = 0; v < VECS; v++)
        mask[v] = FULL ? (__mmask16)0xFFFF : mask_first(valid - 16 * v);
    __m512 acc[8][16];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 16
        for (int v = 0; v < VECS; v++)
            acc[i][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++, b += ldb) {
        __m512 av[8];
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++)
            av[i] = _mm512_set1_ps(a[i * ars + p * acs]);
#pragma GCC unroll 16
        for (int v = 0; v < VECS; v++) {
            __m512 bv = FULL ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(mask[v], b + 16 * v);
#pragma GCC unroll 8
            for (int i = 0; i < ROWS; i++)
                acc[i][v] = _mm512_fmadd_ps(av[i], bv, acc[i][v]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 16
        for (int v = 0; v < VECS; v++) {
            float *dst = c + i * ldc + 16 * v;
            _mm512_mask_storeu_ps(dst, mask[v], finish(acc[i][v], alpha, beta, dst, mask[v]));
        }
}

static inline __attribute__((always_inline)) void small_rowmajor(const int ROWS, const int VECS, int64_t cols,
                                                                 int64_t k, const float *a, int64_t ars, int64_t acs,
                                                                 const float *b, int64_t ldb, float *c, int64_t ldc,
                                                                 float alpha, float beta) {
    const int64_t width = 16 * VECS;
    int64_t j0 = 0;
    for (; j0 + width <= cols; j0 += width)
        small_rowmajor_block(ROWS, VECS, 1, (int)width, k, a, ars, acs, b + j0, ldb, c + j0, ldc, alpha, beta);
    if (j0 < cols)
        small_rowmajor_block(ROWS, VECS, 0, (int)(cols - j0), k, a, ars, acs, b + j0, ldb, c + j0, ldc, alpha, beta);
}

/* Transposed B (rows of W contiguous in k): ROWS x JB dot products at a time, 16 k per step, then one
 * horizontal sum each. */
static inline __attribute__((always_inline)) void small_transposed(const int ROWS, const int JB, int64_t cols,
                                                                   int64_t k, const float *a, int64_t ars,
                                                                   const float *w, int64_t ldw, float *c, int64_t ldc,
                                                                   float alpha, float beta) {
    for (int64_t j0 = 0; j0 < cols; j0 += JB) {
        int jn = cols - j0 < JB ? (int)(cols - j0) : JB;
        __m512 acc[8][8];
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++)
                acc[i][jj] = _mm512_setzero_ps();
        for (int64_t p = 0; p < k; p += 16) {
            __mmask16 m = mask_first((int)(k - p < 16 ? k - p : 16));
            __m512 av[8];
#pragma GCC unroll 8
            for (int i = 0; i < ROWS; i++)
                av[i] = _mm512_maskz_loadu_ps(m, a + i * ars + p);
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++) {
                /* columns past the edge re-read the last valid one; their sums are not stored */
                const float *wj = w + (j0 + (jj < jn ? jj : jn - 1)) * ldw + p;
                _mm_prefetch((const char *)(wj + W_PREFETCH), _MM_HINT_T0);
                __m512 wv = _mm512_maskz_loadu_ps(m, wj);
#pragma GCC unroll 8
                for (int i = 0; i < ROWS; i++)
                    acc[i][jj] = _mm512_fmadd_ps(av[i], wv, acc[i][jj]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++) {
                if (jj >= jn)
                    break;
                float *dst = c + i * ldc + j0 + jj;
                float sum = alpha * _mm512_reduce_add_ps(acc[i][jj]);
                *dst = beta != 0.0f ? sum + beta * *dst : sum;
            }
    }
}

static void small_m_avx512(int rows, int64_t cols, int64_t k, const float *a, int64_t a_row_stride,
                           int64_t a_col_stride, const float *b, int64_t b_stride, bool b_transposed, float *c,
                           int64_t c_row_stride, float alpha, float beta) {
#define TB_TRANSPOSED(R, J) small_transposed(R, J, cols, k, a, a_row_stride, b, b_stride, c, c_row_stride, alpha, beta)
#define TB_ROWMAJOR(R, V)                                                                                        \
    small_rowmajor(R, V, cols, k, a, a_row_stride, a_col_stride, b, b_stride, c, c_row_stride, alpha, beta)
    if (b_transposed) {
        switch (rows) {
        case 1: TB_TRANSPOSED(1, 8); break;
        case 2: TB_TRANSPOSED(2, 6); break;
        case 3: TB_TRANSPOSED(3, 4); break;
        case 4: TB_TRANSPOSED(4, 4); break;
        case 5: TB_TRANSPOSED(5, 3); break;
        case 6: TB_TRANSPOSED(6, 2); break;
        case 7: TB_TRANSPOSED(7, 2); break;
        default: TB_TRANSPOSED(8, 2); break;
        }
    } else {
        switch (rows) {
        /* one or two rows: a block as wide as the (often short, e.g. Dv = 64 or 128) row */
        case 1:
            if (cols <= 64)
                TB_ROWMAJOR(1, 4);
            else if (cols <= 128)
                TB_ROWMAJOR(1, 8);
            else
                TB_ROWMAJOR(1, 16);
            break;
        case 2:
            if (cols <= 64)
                TB_ROWMAJOR(2, 4);
            else
                TB_ROWMAJOR(2, 8);
            break;
        case 3: TB_ROWMAJOR(3, 5); break;
        case 4: TB_ROWMAJOR(4, 4); break;
        case 5: TB_ROWMAJOR(5, 3); break;
        case 6: TB_ROWMAJOR(6, 2); break;
        case 7: TB_ROWMAJOR(7, 2); break;
        default: TB_ROWMAJOR(8, 2); break;
        }
    }
#undef TB_TRANSPOSED
#undef TB_ROWMAJOR
}

const tb_gemm_microkernel tb_gemm_microkernel_avx512 = {
    .isa_name = "avx512",
    .mr = MR,
    .nr = NR,
    .kc = 256,     /* 32 KiB B panel in the 48 KiB L1 */
    .mc = MR * 24, /* 336 x 256 A block: 336 KiB of the 1 MiB L2 */
    .nc = NR * 64, /* 256 x 2048 B block: 2 MiB, from L3 */
    .kernel = microkernel_avx512,
    .pack_a = pack_a_avx512,
    .pack_b = pack_b_avx512,
    .epilogue = tb_gemm_epilogue_avx512,
    .small_m = small_m_avx512,
};
