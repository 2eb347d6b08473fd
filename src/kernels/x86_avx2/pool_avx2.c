/* AVX2 max pooling of one plane (contract in kernels/nn_kernels.h), 8 output columns per vector.
 * Each window tap is one vector of 8 inputs: a load for stride 1, two loads and an even/odd lane
 * shuffle for stride 2, a gather otherwise. Windows that hang over the image edge use masked loads:
 * vmaskmov and masked gathers neither read nor fault masked-off lanes, which then read as -inf and
 * never win. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"

/* Bit l set for the lanes l of [0, 8) with lo <= l < hi. */
static inline unsigned lane_bits_avx2(int64_t lo, int64_t hi) {
    if (lo < 0)
        lo = 0;
    if (hi > 8)
        hi = 8;
    if (hi <= lo)
        return 0;
    return ((1u << hi) - 1) & ~((1u << lo) - 1);
}

/* The vector lane mask (all-ones lanes) of a lane bitmap. */
static inline __m256i lane_mask_avx2(unsigned bits) {
    const __m256i lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane_bits), lane_bits);
}

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
    TAPS_PAIRED,     /* stride 2: 16 columns from start, the even (odd) ones picked */
    TAPS_GATHERED,   /* any stride: one gather */
} tap_load;

/* POOL_ROWS output rows run as independent max chains (each holds five vectors, and AVX2 has
 * sixteen registers); POOL_BLOCKS blocks of 8 output columns are swept together, row group by row
 * group, so that input rows stream in order. */
enum { POOL_MAX_KERNEL_W = 32, POOL_ROWS = 2, POOL_BLOCKS = 8, LANES = 8 };

/* What one block of 8 output columns needs, whatever the output row: per tap kw, the column loaded
 * at lane 0 and the load lane bitmaps; for stride 2 also whether the odd columns are picked and
 * whether the loads of tap kw - 1 serve again (with dilation 1, taps 2i and 2i + 1 share them). */
typedef struct column_block {
    int64_t ow0;
    unsigned store;       /* lanes that are output columns */
    bool inside;          /* every load is whole and in [0, in_w): no masks needed */
    __m256i columns;      /* input column of each lane's first tap */
    __m256i start_column; /* each lane's first in-range column, as the reference steps it */
    int64_t load_start[POOL_MAX_KERNEL_W];
    uint8_t low_lanes[POOL_MAX_KERNEL_W], high_lanes[POOL_MAX_KERNEL_W];
    bool odd[POOL_MAX_KERNEL_W], reload[POOL_MAX_KERNEL_W];
} column_block;

/* Stride 2 picks the even (odd) columns of a 16-float pair of loads with an in-lane shuffle, which
 * swaps the middle two 64-bit lane pairs; column vectors enter that order and results leave it once
 * per block, instead of a cross-lane permute per tap. The swap is its own inverse. */
static inline __m256i paired_order_avx2(__m256i v) { return _mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0)); }

static inline __attribute__((always_inline)) void column_block_init_avx2(const tap_load LOAD,
                                                                         const tb_window_geometry *g, int64_t ow0,
                                                                         column_block *b) {
    int n = g->out_w - ow0 < LANES ? (int)(g->out_w - ow0) : LANES;
    b->ow0 = ow0;
    b->store = lane_bits_avx2(0, n);
    int64_t first = ow0 * g->stride_w - g->pad_left; /* input column of lane 0's first tap */
    b->columns = _mm256_add_epi32(_mm256_set1_epi32((int)first),
                                  _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                     _mm256_set1_epi32((int)g->stride_w)));
    b->start_column = b->columns;
    if (first < 0) {
        int32_t start[LANES];
        for (int l = 0; l < LANES; l++)
            start[l] = (int32_t)first_tap(first + l * g->stride_w, g->dilation_w);
        b->start_column = _mm256_loadu_si256((const __m256i *)start);
    }
    if (LOAD == TAPS_PAIRED) {
        b->columns = paired_order_avx2(b->columns);
        b->start_column = paired_order_avx2(b->start_column);
    }
    b->inside = true;
    for (int64_t kw = 0; kw < g->kernel_w; kw++) {
        int64_t offset = kw * g->dilation_w;
        b->odd[kw] = LOAD == TAPS_PAIRED && (offset & 1);
        int64_t c = b->load_start[kw] = first + offset - b->odd[kw];
        b->reload[kw] = kw == 0 || c != b->load_start[kw - 1];
        if (LOAD == TAPS_GATHERED) {
            /* lanes l with 0 <= first + l * stride + offset < in_w */
            unsigned lanes = 0;
            for (int l = 0; l < n; l++)
                lanes |= (unsigned)(c + l * g->stride_w >= 0 && c + l * g->stride_w < g->in_w) << l;
            b->low_lanes[kw] = (uint8_t)lanes;
            b->inside = false;
        } else {
            b->low_lanes[kw] = (uint8_t)lane_bits_avx2(-c, g->in_w - c);
            b->high_lanes[kw] =
                LOAD == TAPS_PAIRED ? (uint8_t)lane_bits_avx2(-(c + LANES), g->in_w - (c + LANES)) : 0xff;
            b->inside &= b->low_lanes[kw] == 0xff && b->high_lanes[kw] == 0xff;
        }
    }
}

/* The reference's step: a tap replaces the best so far only when greater or NaN, so ties keep the
 * first tap in (kh, kw) order and a NaN the last. */
static inline __attribute__((always_inline)) void take_if_greater_avx2(__m256 v, __m256i v_index, __m256 *best,
                                                                       __m256i *best_index) {
    __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    *best = _mm256_blendv_ps(*best, v, take);
    *best_index = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(*best_index), _mm256_castsi256_ps(v_index), take));
}

/* The same step on values alone, in fewer operations: vmaxps returns its second operand (best) on
 * ties and when either is NaN, so only a NaN v needs patching in. */
static inline __attribute__((always_inline)) void max_step_avx2(__m256 v, __m256 *best) {
    *best = _mm256_blendv_ps(_mm256_max_ps(v, *best), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* vmaskmov reads masked-off lanes as 0; the blend makes them -inf. */
static inline __attribute__((always_inline)) __m256 load_avx2(const bool MASKED, const float *row, int64_t start,
                                                              unsigned lanes) {
    if (MASKED) {
        __m256i mask = lane_mask_avx2(lanes);
        return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(tb_float_at(row, start), mask),
                                _mm256_castsi256_ps(mask));
    }
    return _mm256_loadu_ps(row + start);
}

/* Output rows [oh0, oh0 + POOL_ROWS) of block b: independent max chains, one per row. Unless
 * MASKED, every row is an output row whose taps all lie in the image and b is inside. As in the
 * reference, best starts at -inf with the index of the window's first in-range element. */
static inline __attribute__((always_inline)) void pool_rows_avx2(const tap_load LOAD, const bool MASKED,
                                                                 const tb_window_geometry *g, const column_block *b,
                                                                 int64_t oh0, const float *x, float *y,
                                                                 int64_t *index) {
    __m256 best[POOL_ROWS];
    __m256i best_index[POOL_ROWS];
    for (int r = 0; r < POOL_ROWS; r++) {
        int64_t h_start = first_tap((oh0 + r) * g->stride_h - g->pad_top, g->dilation_h);
        best[r] = _mm256_set1_ps(-INFINITY);
        best_index[r] = _mm256_add_epi32(_mm256_set1_epi32((int)(h_start * g->in_w)), b->start_column);
    }
    for (int64_t kh = 0; kh < g->kernel_h; kh++) {
        const float *row[POOL_ROWS];
        bool live[POOL_ROWS];
        __m256i row_index[POOL_ROWS];
        for (int r = 0; r < POOL_ROWS; r++) {
            int64_t ih = (oh0 + r) * g->stride_h - g->pad_top + kh * g->dilation_h;
            live[r] = !MASKED || (oh0 + r < g->out_h && ih >= 0 && ih < g->in_h);
            row[r] = x + (live[r] ? ih * g->in_w : 0);
            row_index[r] = _mm256_add_epi32(_mm256_set1_epi32(live[r] ? (int)(ih * g->in_w) : 0), b->columns);
        }
        __m256 low[POOL_ROWS], high[POOL_ROWS];
        /* set only so that no path reads them unset: reload[0] is always true */
        for (int r = 0; r < POOL_ROWS; r++)
            low[r] = high[r] = _mm256_set1_ps(-INFINITY);
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            int64_t c = b->load_start[kw];
            __m256i offset = _mm256_set1_epi32((int)(kw * g->dilation_w));
            if (LOAD == TAPS_PAIRED && b->reload[kw]) {
                for (int r = 0; r < POOL_ROWS; r++) {
                    if (!live[r])
                        continue;
                    low[r] = load_avx2(MASKED, row[r], c, b->low_lanes[kw]);
                    high[r] = load_avx2(MASKED, row[r], c + LANES, b->high_lanes[kw]);
                }
            }
            for (int r = 0; r < POOL_ROWS; r++) {
                if (!live[r])
                    continue;
                __m256 v;
                if (LOAD == TAPS_CONTIGUOUS) {
                    v = load_avx2(MASKED, row[r], c, b->low_lanes[kw]);
                } else if (LOAD == TAPS_PAIRED) {
                    v = b->odd[kw] ? _mm256_shuffle_ps(low[r], high[r], _MM_SHUFFLE(3, 1, 3, 1))
                                   : _mm256_shuffle_ps(low[r], high[r], _MM_SHUFFLE(2, 0, 2, 0));
                } else {
                    __m256i column = _mm256_add_epi32(b->columns, offset);
                    v = _mm256_mask_i32gather_ps(_mm256_set1_ps(-INFINITY), row[r], column,
                                                 _mm256_castsi256_ps(lane_mask_avx2(b->low_lanes[kw])), 4);
                }
                if (index)
                    take_if_greater_avx2(v, _mm256_add_epi32(row_index[r], offset), &best[r], &best_index[r]);
                else
                    max_step_avx2(v, &best[r]);
            }
        }
    }
    for (int r = 0; r < POOL_ROWS && oh0 + r < g->out_h; r++) {
        __m256 values = best[r];
        __m256i where = best_index[r];
        if (LOAD == TAPS_PAIRED) {
            values = _mm256_castsi256_ps(paired_order_avx2(_mm256_castps_si256(values)));
            where = paired_order_avx2(where);
        }
        int64_t j = (oh0 + r) * g->out_w + b->ow0;
        __m256i store = lane_mask_avx2(b->store);
        _mm256_maskstore_ps(y + j, store, values);
        if (index) {
            __m256i store_low = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(store));
            __m256i store_high = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(store, 1));
            _mm256_maskstore_epi64((long long *)(index + j), store_low,
                                   _mm256_cvtepi32_epi64(_mm256_castsi256_si128(where)));
            _mm256_maskstore_epi64((long long *)(index + j + 4), store_high,
                                   _mm256_cvtepi32_epi64(_mm256_extracti128_si256(where, 1)));
        }
    }
}

/* Every output row of up to POOL_BLOCKS blocks from output column ow_begin. Row groups away from
 * the image edges in blocks away from its sides take the unmasked loop; a literal NULL index there
 * lets the compiler drop the index chains when no indices are wanted. */
static inline __attribute__((always_inline)) void pool_columns_avx2(const tap_load LOAD, const tb_window_geometry *g,
                                                                    int64_t ow_begin, const float *x, float *y,
                                                                    int64_t *index) {
    column_block blocks[POOL_BLOCKS];
    int count = 0;
    for (int64_t ow0 = ow_begin; ow0 < g->out_w && count < POOL_BLOCKS; ow0 += LANES)
        column_block_init_avx2(LOAD, g, ow0, &blocks[count++]);
    for (int64_t oh0 = 0; oh0 < g->out_h; oh0 += POOL_ROWS) {
        int64_t top = oh0 * g->stride_h - g->pad_top;
        int64_t bottom = (oh0 + POOL_ROWS - 1) * g->stride_h - g->pad_top + (g->kernel_h - 1) * g->dilation_h;
        bool rows_inside = oh0 + POOL_ROWS <= g->out_h && top >= 0 && bottom < g->in_h;
        for (int k = 0; k < count; k++) {
            if (!rows_inside || !blocks[k].inside)
                pool_rows_avx2(LOAD, true, g, &blocks[k], oh0, x, y, index);
            else if (index)
                pool_rows_avx2(LOAD, false, g, &blocks[k], oh0, x, y, index);
            else
                pool_rows_avx2(LOAD, false, g, &blocks[k], oh0, x, y, NULL);
        }
    }
}

void tb_max_pool2d_plane_avx2(const tb_window_geometry *g, const float *x, float *y, int64_t *index) {
    if (g->kernel_w > POOL_MAX_KERNEL_W || !geometry_fits(g, LANES)) {
        tb_max_pool2d_plane_f32(g, x, y, index);
        return;
    }
    for (int64_t ow0 = 0; ow0 < g->out_w; ow0 += POOL_BLOCKS * LANES) {
        if (g->stride_w == 1)
            pool_columns_avx2(TAPS_CONTIGUOUS, g, ow0, x, y, index);
        else if (g->stride_w == 2)
            pool_columns_avx2(TAPS_PAIRED, g, ow0, x, y, index);
        else
            pool_columns_avx2(TAPS_GATHERED, g, ow0, x, y, index);
    }
}
