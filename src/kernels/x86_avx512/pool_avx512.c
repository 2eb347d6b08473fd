/* AVX-512 max pooling of one plane (contract in kernels/nn_kernels.h), 16 output columns per vector.
 * Each window tap is one vector of 16 inputs: a load for stride 1, two loads and an even/odd lane
 * shuffle for stride 2, a gather otherwise. Windows that hang over the image edge use masked loads:
 * masked-off lanes are neither read nor faulted and read as -inf, which never wins. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"
#include "kernels/x86_avx512/lanes_avx512.h"

/* The reference's window start along one axis: the first tap start + k * dilation that is >= 0. */
static inline int64_t first_tap(int64_t start, int64_t dilation) {
    return start >= 0 ? start : start + (-start + dilation - 1) / dilation * dilation;
}

/* True when the loops below handle g: dilations of at least 1 (first_tap divides by them), and every
 * column, window start and flat index they carry in int32 lanes fits, `lanes` being how many output
 * columns a vector may run past out_w. Each field is first bounded by 2^30 so that the bounds
 * themselves cannot overflow. */
static bool geometry_fits(const tb_window_geometry *g, int64_t lanes) {
    const int64_t fields[] = {g->in_h,     g->in_w,     g->out_h,   g->out_w,    g->kernel_h,   g->kernel_w,
                              g->stride_h, g->stride_w, g->pad_top, g->pad_left, g->dilation_h, g->dilation_w};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i] < 0 || fields[i] > ((int64_t)1 << 30))
            return false;
    if (g->dilation_h < 1 || g->dilation_w < 1)
        return false;
    int64_t last_row = g->out_h * g->stride_h + g->kernel_h * g->dilation_h;
    int64_t last_column = (g->out_w + lanes) * g->stride_w + g->kernel_w * g->dilation_w;
    return g->in_h * g->in_w < INT32_MAX && last_row < INT32_MAX && last_column < INT32_MAX &&
           last_row * g->in_w + last_column < INT32_MAX;
}

typedef enum tap_load {
    TAPS_CONTIGUOUS, /* stride 1: lane l reads column start + l */
    TAPS_PAIRED,     /* stride 2: 32 columns from start, the even (odd) ones picked */
    TAPS_GATHERED,   /* any stride: one gather */
} tap_load;

/* POOL_ROWS output rows run as independent max chains; POOL_BLOCKS blocks of 16 output columns are
 * swept together, row group by row group, so that input rows stream in order. */
enum { POOL_MAX_KERNEL_W = 32, POOL_ROWS = 4, POOL_BLOCKS = 4, LANES = 16 };

/* What one block of 16 output columns needs, whatever the output row: per tap kw, the column
 * loaded at lane 0 and the load masks; for stride 2 also whether the odd columns are picked and
 * whether the loads of tap kw - 1 serve again (with dilation 1, taps 2i and 2i + 1 share them). */
typedef struct column_block {
    int64_t ow0;
    __mmask16 store;      /* lanes that are output columns */
    bool inside;          /* every load is whole and in [0, in_w): no masks needed */
    __m512i columns;      /* input column of each lane's first tap */
    __m512i start_column; /* each lane's first in-range column, as the reference steps it */
    int64_t load_start[POOL_MAX_KERNEL_W];
    __mmask16 low_mask[POOL_MAX_KERNEL_W], high_mask[POOL_MAX_KERNEL_W];
    bool odd[POOL_MAX_KERNEL_W], reload[POOL_MAX_KERNEL_W];
} column_block;

/* Stride 2 picks the even (odd) columns of a 32-float pair of loads with an in-lane shuffle, which
 * leaves the 64-bit lane pairs in the order below; column vectors enter that order and results
 * leave it once per block, instead of a cross-lane permute per tap. */
static inline __m512i to_paired_order_avx512(__m512i v) {
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), v);
}

static inline __m512i from_paired_order_avx512(__m512i v) {
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), v);
}

static inline __attribute__((always_inline)) void column_block_init_avx512(const tap_load LOAD,
                                                                           const tb_window_geometry *g, int64_t ow0,
                                                                           column_block *b) {
    int n = g->out_w - ow0 < LANES ? (int)(g->out_w - ow0) : LANES;
    b->ow0 = ow0;
    b->store = (__mmask16)(((uint32_t)1 << n) - 1);
    int64_t first = ow0 * g->stride_w - g->pad_left; /* input column of lane 0's first tap */
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    b->columns = _mm512_add_epi32(_mm512_set1_epi32((int)first),
                                  _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int)g->stride_w)));
    b->start_column = b->columns;
    if (first < 0) {
        int32_t start[LANES];
        for (int l = 0; l < LANES; l++)
            start[l] = (int32_t)first_tap(first + l * g->stride_w, g->dilation_w);
        b->start_column = _mm512_loadu_si512(start);
    }
    if (LOAD == TAPS_PAIRED) {
        b->columns = to_paired_order_avx512(b->columns);
        b->start_column = to_paired_order_avx512(b->start_column);
    }
    b->inside = true;
    for (int64_t kw = 0; kw < g->kernel_w; kw++) {
        int64_t offset = kw * g->dilation_w;
        b->odd[kw] = LOAD == TAPS_PAIRED && (offset & 1);
        int64_t c = b->load_start[kw] = first + offset - b->odd[kw];
        b->reload[kw] = kw == 0 || c != b->load_start[kw - 1];
        if (LOAD == TAPS_GATHERED) {
            __m512i column = _mm512_add_epi32(b->columns, _mm512_set1_epi32((int)offset));
            b->low_mask[kw] = _mm512_mask_cmpge_epi32_mask(b->store, column, _mm512_setzero_si512()) &
                              _mm512_cmplt_epi32_mask(column, _mm512_set1_epi32((int)g->in_w));
            b->inside = false;
        } else {
            b->low_mask[kw] = tb_lanes_avx512(-c, g->in_w - c);
            b->high_mask[kw] = LOAD == TAPS_PAIRED ? tb_lanes_avx512(-(c + LANES), g->in_w - (c + LANES)) : 0xffff;
            b->inside &= b->low_mask[kw] == 0xffff && b->high_mask[kw] == 0xffff;
        }
    }
}

/* The reference's step: a tap replaces the best so far only when greater or NaN, so ties keep the
 * first tap in (kh, kw) order and a NaN the last. `keep` below is its complement: v is a number and
 * not greater than best (which may be NaN). */
static inline __attribute__((always_inline)) void take_if_greater_avx512(__m512 v, __m512i v_index, __m512 *best,
                                                                         __m512i *best_index) {
    __mmask16 keep = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v, *best, _CMP_NGT_UQ);
    *best = _mm512_mask_blend_ps(keep, v, *best);
    *best_index = _mm512_mask_blend_epi32(keep, v_index, *best_index);
}

static inline __attribute__((always_inline)) __m512 load_avx512(const bool MASKED, const float *row, int64_t start,
                                                                __mmask16 mask) {
    if (MASKED)
        return _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mask, tb_float_at(row, start));
    return _mm512_loadu_ps(row + start);
}

/* Output rows [oh0, oh0 + POOL_ROWS) of block b: independent max chains, one per row. Unless
 * MASKED, every row is an output row whose taps all lie in the image and b is inside. As in the
 * reference, best starts at -inf with the index of the window's first in-range element. */
static inline __attribute__((always_inline)) void pool_rows_avx512(const tap_load LOAD, const bool MASKED,
                                                                   const tb_window_geometry *g, const column_block *b,
                                                                   int64_t oh0, const float *x, float *y,
                                                                   int64_t *index) {
    __m512 best[POOL_ROWS];
    __m512i best_index[POOL_ROWS];
    for (int r = 0; r < POOL_ROWS; r++) {
        int64_t h_start = first_tap((oh0 + r) * g->stride_h - g->pad_top, g->dilation_h);
        best[r] = _mm512_set1_ps(-INFINITY);
        best_index[r] = _mm512_add_epi32(_mm512_set1_epi32((int)(h_start * g->in_w)), b->start_column);
    }
    for (int64_t kh = 0; kh < g->kernel_h; kh++) {
        const float *row[POOL_ROWS];
        bool live[POOL_ROWS];
        __m512i row_index[POOL_ROWS];
        for (int r = 0; r < POOL_ROWS; r++) {
            int64_t ih = (oh0 + r) * g->stride_h - g->pad_top + kh * g->dilation_h;
            live[r] = !MASKED || (oh0 + r < g->out_h && ih >= 0 && ih < g->in_h);
            row[r] = x + (live[r] ? ih * g->in_w : 0);
            row_index[r] = _mm512_add_epi32(_mm512_set1_epi32(live[r] ? (int)(ih * g->in_w) : 0), b->columns);
        }
        __m512 low[POOL_ROWS], high[POOL_ROWS];
        /* set only so that no path reads them unset: reload[0] is always true */
        for (int r = 0; r < POOL_ROWS; r++)
            low[r] = high[r] = _mm512_set1_ps(-INFINITY);
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            int64_t c = b->load_start[kw];
            __m512i offset = _mm512_set1_epi32((int)(kw * g->dilation_w));
            if (LOAD == TAPS_PAIRED && b->reload[kw]) {
                for (int r = 0; r < POOL_ROWS; r++) {
                    if (!live[r])
                        continue;
                    low[r] = load_avx512(MASKED, row[r], c, b->low_mask[kw]);
                    high[r] = load_avx512(MASKED, row[r], c + LANES, b->high_mask[kw]);
                }
            }
            for (int r = 0; r < POOL_ROWS; r++) {
                if (!live[r])
                    continue;
                __m512 v;
                if (LOAD == TAPS_CONTIGUOUS) {
                    v = load_avx512(MASKED, row[r], c, b->low_mask[kw]);
                } else if (LOAD == TAPS_PAIRED) {
                    v = b->odd[kw] ? _mm512_shuffle_ps(low[r], high[r], _MM_SHUFFLE(3, 1, 3, 1))
                                   : _mm512_shuffle_ps(low[r], high[r], _MM_SHUFFLE(2, 0, 2, 0));
                } else {
                    __m512i column = _mm512_add_epi32(b->columns, offset);
                    v = _mm512_mask_i32gather_ps(_mm512_set1_ps(-INFINITY), b->low_mask[kw], column, row[r], 4);
                }
                take_if_greater_avx512(v, _mm512_add_epi32(row_index[r], offset), &best[r], &best_index[r]);
            }
        }
    }
    for (int r = 0; r < POOL_ROWS && oh0 + r < g->out_h; r++) {
        __m512 values = best[r];
        __m512i where = best_index[r];
        if (LOAD == TAPS_PAIRED) {
            values = _mm512_castsi512_ps(from_paired_order_avx512(_mm512_castps_si512(values)));
            where = from_paired_order_avx512(where);
        }
        int64_t j = (oh0 + r) * g->out_w + b->ow0;
        _mm512_mask_storeu_ps(y + j, b->store, values);
        if (index) {
            __m512i low_index = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(where));
            __m512i high_index = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(where, 1));
            _mm512_mask_storeu_epi64(index + j, (__mmask8)(b->store & 0xff), low_index);
            _mm512_mask_storeu_epi64(index + j + 8, (__mmask8)(b->store >> 8), high_index);
        }
    }
}

/* Every output row of up to POOL_BLOCKS blocks from output column ow_begin. Row groups away from
 * the image edges in blocks away from its sides take the unmasked loop; a literal NULL index there
 * lets the compiler drop the index chains when no indices are wanted. */
static inline __attribute__((always_inline)) void pool_columns_avx512(const tap_load LOAD, const tb_window_geometry *g,
                                                                      int64_t ow_begin, const float *x, float *y,
                                                                      int64_t *index) {
    column_block blocks[POOL_BLOCKS];
    int count = 0;
    for (int64_t ow0 = ow_begin; ow0 < g->out_w && count < POOL_BLOCKS; ow0 += LANES)
        column_block_init_avx512(LOAD, g, ow0, &blocks[count++]);
    for (int64_t oh0 = 0; oh0 < g->out_h; oh0 += POOL_ROWS) {
        int64_t top = oh0 * g->stride_h - g->pad_top;
        int64_t bottom = (oh0 + POOL_ROWS - 1) * g->stride_h - g->pad_top + (g->kernel_h - 1) * g->dilation_h;
        bool rows_inside = oh0 + POOL_ROWS <= g->out_h && top >= 0 && bottom < g->in_h;
        for (int k = 0; k < count; k++) {
            if (!rows_inside || !blocks[k].inside)
                pool_rows_avx512(LOAD, true, g, &blocks[k], oh0, x, y, index);
            else if (index)
                pool_rows_avx512(LOAD, false, g, &blocks[k], oh0, x, y, index);
            else
                pool_rows_avx512(LOAD, false, g, &blocks[k], oh0, x, y, NULL);
        }
    }
}

void tb_max_pool2d_plane_avx512(const tb_window_geometry *g, const float *x, float *y, int64_t *index) {
    if (g->kernel_w > POOL_MAX_KERNEL_W || !geometry_fits(g, LANES)) {
        tb_max_pool2d_plane_f32(g, x, y, index);
        return;
    }
    for (int64_t ow0 = 0; ow0 < g->out_w; ow0 += POOL_BLOCKS * LANES) {
        if (g->stride_w == 1)
            pool_columns_avx512(TAPS_CONTIGUOUS, g, ow0, x, y, index);
        else if (g->stride_w == 2)
            pool_columns_avx512(TAPS_PAIRED, g, ow0, x, y, index);
        else
            pool_columns_avx512(TAPS_GATHERED, g, ow0, x, y, index);
    }
}
