/* AVX2 GEMM building blocks: a 6 x 16 register micro-kernel (12 ymm accumulators; per k step two B
 * vector loads, 6 broadcasts of packed A, 12 FMAs), 8 x 8 register-transposing packers, the
 * vectorized fused epilogue and unpacked kernels for products of at most 8 rows. Contracts in
 * gemm_internal.h. */
#include <immintrin.h>

#include "kernels/gemm_internal.h"
#include "kernels/x86_avx2/gemm_math_avx2.h"

enum { MR = 6, NR = 16 };

/* Lane mask with the first `count` (clamped to [0, 8]) lanes set, for maskload/maskstore. */
static inline __m256i mask_first(int count) {
    count = count < 0 ? 0 : count > 8 ? 8 : count;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __attribute__((always_inline)) void tile_rows(const int ROWS, int64_t kc, const float *a,
                                                            const float *b, float *c, int64_t ldc, int nr,
                                                            float alpha, float beta) {
    __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++) {
        acc0[i] = _mm256_setzero_ps();
        acc1[i] = _mm256_setzero_ps();
        /* the C tile is read (beta != 0, later k blocks) and written after the k loop: fetch its
         * lines now so that their misses overlap the loop instead of following it */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_load_ps(b);
        __m256 b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
            acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
        }
        a += MR;
        b += NR;
    }
    __m256 valpha = _mm256_set1_ps(alpha);
    __m256 vbeta = _mm256_set1_ps(beta);
    if (nr == NR) {
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++) {
            float *row = c + i * ldc;
            __m256 r0 = _mm256_mul_ps(acc0[i], valpha), r1 = _mm256_mul_ps(acc1[i], valpha);
            if (beta != 0.0f) {
                r0 = _mm256_fmadd_ps(_mm256_loadu_ps(row), vbeta, r0);
                r1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8), vbeta, r1);
            }
            _mm256_storeu_ps(row, r0);
            _mm256_storeu_ps(row + 8, r1);
        }
    } else {
        __m256i m0 = mask_first(nr), m1 = mask_first(nr - 8);
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++) {
            float *row = c + i * ldc;
            __m256 r0 = _mm256_mul_ps(acc0[i], valpha), r1 = _mm256_mul_ps(acc1[i], valpha);
            if (beta != 0.0f) {
                r0 = _mm256_fmadd_ps(_mm256_maskload_ps(row, m0), vbeta, r0);
                r1 = _mm256_fmadd_ps(_mm256_maskload_ps(row + 8, m1), vbeta, r1);
            }
            _mm256_maskstore_ps(row, m0, r0);
            _mm256_maskstore_ps(row + 8, m1, r1);
        }
    }
}

#define TB_TILE_FN(rows)                                                                                       \
    static void tile_##rows(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int nr,         \
                            float alpha, float beta) {                                                         \
        tile_rows(rows, kc, a, b, c, ldc, nr, alpha, beta);                                                    \
    }
TB_TILE_FN(1) TB_TILE_FN(2) TB_TILE_FN(3) TB_TILE_FN(4) TB_TILE_FN(5) TB_TILE_FN(6)
#undef TB_TILE_FN

typedef void (*tile_fn)(int64_t, const float *, const float *, float *, int64_t, int, float, float);
static const tile_fn tiles_by_rows[MR + 1] = {NULL, tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

static void microkernel_avx2(int64_t kc, const float *a_panel, const float *b_panel, float *c, int64_t c_row_stride,
                             int mr, int nr, float alpha, float beta) {
    tiles_by_rows[mr](kc, a_panel, b_panel, c, c_row_stride, nr, alpha, beta);
}

/* In-register transpose of 8 rows of 8 floats: on return r[j] holds column j. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) {
        __m256d t0 = _mm256_castps_pd(t[4 * g]), t1 = _mm256_castps_pd(t[4 * g + 1]);
        __m256d t2 = _mm256_castps_pd(t[4 * g + 2]), t3 = _mm256_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2));
        u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2));
        u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3));
        u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3));
    }
    /* u[4g + e], 128-bit half L = rows 4g..4g+3 of column 4L + e */
    for (int e = 0; e < 4; e++) {
        r[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
    }
}

static void pack_a_avx2(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc, float *a_panel) {
    if (col_stride == 1) { /* row-major A: transpose 8 (k) x rows blocks, keep the first MR lanes */
        for (int64_t p0 = 0; p0 < kc; p0 += 8) {
            int count = kc - p0 < 8 ? (int)(kc - p0) : 8;
            __m256i k_mask = mask_first(count);
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i >= rows ? _mm256_setzero_ps()
                       : count == 8 ? _mm256_loadu_ps(a + i * row_stride + p0)
                                    : _mm256_maskload_ps(a + i * row_stride + p0, k_mask);
            transpose8(r);
            /* Whole 8-lane stores, each spilling two lanes into the next k's entries, which the next
             * store overwrites (masked stores are slow on AMD parts); the panel's last k stores its
             * MR = 6 floats exactly. */
            float *dst = a_panel + p0 * MR;
            int whole = p0 + count < kc ? count : count - 1;
            for (int p = 0; p < whole; p++)
                _mm256_storeu_ps(dst + p * MR, r[p]);
            if (whole < count) {
                _mm_storeu_ps(dst + whole * MR, _mm256_castps256_ps128(r[whole]));
                _mm_storel_pi((__m64 *)(dst + whole * MR + 4), _mm256_extractf128_ps(r[whole], 1));
            }
        }
        return;
    }
    tb_gemm_pack_a_portable(a, row_stride, col_stride, rows, kc, MR, a_panel);
}

static void pack_b_avx2(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc, float *b_panel) {
    if (col_stride == 1) {
        __m256i m0 = mask_first(cols), m1 = mask_first(cols - 8);
        for (int64_t p = 0; p < kc; p++) {
            const float *src = b + p * row_stride;
            _mm256_store_ps(b_panel + p * NR, _mm256_maskload_ps(src, m0));
            _mm256_store_ps(b_panel + p * NR + 8, _mm256_maskload_ps(src + 8, m1));
        }
        return;
    }
    if (row_stride == 1) { /* transposed B: columns contiguous in k */
        for (int j0 = 0; j0 < NR; j0 += 8) {
            for (int64_t p0 = 0; p0 < kc; p0 += 8) {
                int count = kc - p0 < 8 ? (int)(kc - p0) : 8;
                __m256i k_mask = mask_first(count);
                __m256 r[8];
                for (int j = 0; j < 8; j++)
                    r[j] = j0 + j < cols ? _mm256_maskload_ps(b + (j0 + j) * col_stride + p0, k_mask)
                                         : _mm256_setzero_ps();
                transpose8(r);
                for (int p = 0; p < count; p++)
                    _mm256_store_ps(b_panel + (p0 + p) * NR + j0, r[p]);
            }
        }
        return;
    }
    tb_gemm_pack_b_portable(b, row_stride, col_stride, cols, kc, NR, b_panel);
}

static void epilogue_avx2(float *c, int64_t c_row_stride, int rows, int cols, const tb_gemm_epilogue *e) {
    for (int i = 0; i < rows; i++) {
        float *row = c + i * c_row_stride;
        const float *residual = e->residual ? e->residual + i * e->residual_row_stride : NULL;
        __m256 row_bias = _mm256_set1_ps(e->bias_kind == TB_BIAS_PER_ROW ? e->bias[i] : 0.0f);
        for (int j = 0; j < cols; j += 8) {
            /* whole vectors use plain loads and stores (masked stores are slow on AMD parts) */
            bool whole = cols - j >= 8;
            __m256i m = mask_first(cols - j);
            __m256 x = whole ? _mm256_loadu_ps(row + j) : _mm256_maskload_ps(row + j, m);
            if (e->bias_kind == TB_BIAS_PER_COLUMN)
                x = _mm256_add_ps(x, whole ? _mm256_loadu_ps(e->bias + j) : _mm256_maskload_ps(e->bias + j, m));
            else if (e->bias_kind == TB_BIAS_PER_ROW)
                x = _mm256_add_ps(x, row_bias);
            x = tb_activation_avx2(x, e->activation);
            if (residual)
                x = _mm256_add_ps(x, whole ? _mm256_loadu_ps(residual + j) : _mm256_maskload_ps(residual + j, m));
            if (whole)
                _mm256_storeu_ps(row + j, x);
            else
                _mm256_maskstore_ps(row + j, m, x);
        }
    }
}

/* ---- unpacked small-m products (contract in gemm_internal.h) ---- */

/* Row-major B, one block of 8 VECS columns: VECS B vectors stay live while each row's A value is
 * broadcast (VECS + 1 + ROWS * VECS <= 16 registers). FULL blocks use plain loads. */
static inline __attribute__((always_inline)) void small_rowmajor_block(const int ROWS, const int VECS, const int FULL,
                                                                       int valid, int64_t k, const float *a,
                                                                       int64_t ars, int64_t acs, const float *b,
                                                                       int64_t ldb, float *c, int64_t ldc, float alpha,
                                                                       float beta) {
    __m256i mask[8];
#pragma GCC unroll 8
    for (int v = 0; v < VECS; v++)
        mask[v] = mask_first(FULL ? 8 : valid - 8 * v);
    __m256 acc[8][8];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 8
        for (int v = 0; v < VECS; v++)
            acc[i][v] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++, b += ldb) {
        __m256 bv[8];
#pragma GCC unroll 8
        for (int v = 0; v < VECS; v++)
            bv[v] = FULL ? _mm256_loadu_ps(b + 8 * v) : _mm256_maskload_ps(b + 8 * v, mask[v]);
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i * ars + p * acs);
#pragma GCC unroll 8
            for (int v = 0; v < VECS; v++)
                acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
        }
    }
    __m256 valpha = _mm256_set1_ps(alpha), vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 8
        for (int v = 0; v < VECS; v++) {
            float *dst = c + i * ldc + 8 * v;
            __m256 r = _mm256_mul_ps(acc[i][v], valpha);
            if (beta != 0.0f)
                r = _mm256_fmadd_ps(FULL ? _mm256_loadu_ps(dst) : _mm256_maskload_ps(dst, mask[v]), vbeta, r);
            if (FULL)
                _mm256_storeu_ps(dst, r);
            else
                _mm256_maskstore_ps(dst, mask[v], r);
        }
}

static inline __attribute__((always_inline)) void small_rowmajor(const int ROWS, const int VECS, int64_t cols,
                                                                 int64_t k, const float *a, int64_t ars, int64_t acs,
                                                                 const float *b, int64_t ldb, float *c, int64_t ldc,
                                                                 float alpha, float beta) {
    const int64_t width = 8 * VECS;
    int64_t j0 = 0;
    for (; j0 + width <= cols; j0 += width)
        small_rowmajor_block(ROWS, VECS, 1, (int)width, k, a, ars, acs, b + j0, ldb, c + j0, ldc, alpha, beta);
    if (j0 < cols)
        small_rowmajor_block(ROWS, VECS, 0, (int)(cols - j0), k, a, ars, acs, b + j0, ldb, c + j0, ldc, alpha, beta);
}

static inline float horizontal_sum(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Transposed B: ROWS x JB dot products over 8 k at a time, then one horizontal sum each. */
static inline __attribute__((always_inline)) void small_transposed(const int ROWS, const int JB, int64_t cols,
                                                                   int64_t k, const float *a, int64_t ars,
                                                                   const float *w, int64_t ldw, float *c, int64_t ldc,
                                                                   float alpha, float beta) {
    for (int64_t j0 = 0; j0 < cols; j0 += JB) {
        int jn = cols - j0 < JB ? (int)(cols - j0) : JB;
        __m256 acc[8][8];
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++)
                acc[i][jj] = _mm256_setzero_ps();
        for (int64_t p = 0; p < k; p += 8) {
            __m256i m = mask_first((int)(k - p < 8 ? k - p : 8));
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++) {
                /* columns past the edge re-read the last valid one; their sums are not stored */
                __m256 wv = _mm256_maskload_ps(w + (j0 + (jj < jn ? jj : jn - 1)) * ldw + p, m);
#pragma GCC unroll 8
                for (int i = 0; i < ROWS; i++)
                    acc[i][jj] = _mm256_fmadd_ps(_mm256_maskload_ps(a + i * ars + p, m), wv, acc[i][jj]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 8
            for (int jj = 0; jj < JB; jj++) {
                if (jj >= jn)
                    break;
                float *dst = c + i * ldc + j0 + jj;
                float sum = alpha * horizontal_sum(acc[i][jj]);
                *dst = beta != 0.0f ? sum + beta * *dst : sum;
            }
    }
}

static void small_m_avx2(int rows, int64_t cols, int64_t k, const float *a, int64_t a_row_stride, int64_t a_col_stride,
                         const float *b, int64_t b_stride, bool b_transposed, float *c, int64_t c_row_stride,
                         float alpha, float beta) {
#define TB_TRANSPOSED(R, J) small_transposed(R, J, cols, k, a, a_row_stride, b, b_stride, c, c_row_stride, alpha, beta)
#define TB_ROWMAJOR(R, V)                                                                                        \
    small_rowmajor(R, V, cols, k, a, a_row_stride, a_col_stride, b, b_stride, c, c_row_stride, alpha, beta)
    if (b_transposed) {
        switch (rows) {
        case 1: TB_TRANSPOSED(1, 8); break;
        case 2: TB_TRANSPOSED(2, 4); break;
        case 3: TB_TRANSPOSED(3, 3); break;
        case 4: TB_TRANSPOSED(4, 2); break;
        case 5: TB_TRANSPOSED(5, 2); break;
        case 6: TB_TRANSPOSED(6, 1); break;
        case 7: TB_TRANSPOSED(7, 1); break;
        default: TB_TRANSPOSED(8, 1); break;
        }
    } else {
        switch (rows) {
        case 1: TB_ROWMAJOR(1, 6); break;
        case 2: TB_ROWMAJOR(2, 4); break;
        case 3: TB_ROWMAJOR(3, 3); break;
        case 4: TB_ROWMAJOR(4, 3); break;
        case 5: TB_ROWMAJOR(5, 2); break;
        case 6: TB_ROWMAJOR(6, 2); break;
        case 7: TB_ROWMAJOR(7, 1); break;
        default: TB_ROWMAJOR(8, 1); break;
        }
    }
#undef TB_TRANSPOSED
#undef TB_ROWMAJOR
}

const tb_gemm_microkernel tb_gemm_microkernel_avx2 = {
    .isa_name = "avx2",
    .mr = MR,
    .nr = NR,
    .kc = 256,     /* 16 KiB B panel in L1 */
    .mc = MR * 24, /* 144 x 256 A block in L2 */
    .nc = NR * 128,
    .kernel = microkernel_avx2,
    .pack_a = pack_a_avx2,
    .pack_b = pack_b_avx2,
    .epilogue = epilogue_avx2,
    .small_m = small_m_avx2,
};
