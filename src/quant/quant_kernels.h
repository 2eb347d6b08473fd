/* Internal contract between the quantized-matmul driver (quant_matmul.c) and its kernels, one
 * implementation table per (kernel family, weight type, activation mode).
 *
 * A call runs in two steps:
 *  1. the driver asks the kernel how many bytes one prepared activation row needs (act_row_bytes; 0
 *     means the kernel reads x directly), and runs act_prepare on every row of x into scratch. The
 *     prepared layout is private to each kernel (de-interleaved floats for the A32 int4 kernels,
 *     int8 activations plus their scale for the A8 kernels, see each file).
 *  2. rows() computes y[m, n] for every m < run->m and n in [n_begin, n_end), from any thread; the
 *     driver splits N over the pool. rows() neither allocates nor fails.
 * Every per-ISA file keeps its helpers static; only the tb_quant_impl_* getters are exported. */
#ifndef TORCHBURN_QUANT_KERNELS_H
#define TORCHBURN_QUANT_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/quant.h"

typedef struct tb_quant_run {
    const tb_quant_weight *w;
    int64_t m;                  /* rows of x / y */
    const float *x;             /* original activations, row stride x_row_stride (elements) */
    int64_t x_row_stride;
    const unsigned char *act;   /* prepared rows, act_row_bytes apart (NULL when act_row_bytes is 0) */
    int64_t act_row_bytes;
    float *y;
    int64_t y_row_stride;
    const float *bias;          /* f32[N] or NULL */
} tb_quant_run;

typedef struct tb_quant_impl {
    /* Bytes of one prepared activation row, a multiple of 64 (0: rows() reads run->x). */
    int64_t (*act_row_bytes)(const tb_quant_weight *w);
    /* Prepares x[0..K) into dst (act_row_bytes, 64-byte aligned). */
    void (*act_prepare)(const tb_quant_weight *w, const float *x, unsigned char *dst);
    void (*rows)(const tb_quant_run *run, int64_t n_begin, int64_t n_end);
} tb_quant_impl;

/* The A8 kernels refuse larger K so that their int32 lane sums cannot overflow. */
enum { TB_QUANT_A8_MAX_K = 1 << 20 };

/* Header at the start of every A8 prepared activation row (64 bytes, then the kernel's data). */
typedef struct tb_quant_act_header {
    float scale; /* max|x| / 127; NaN when x has NaN or inf (every output of the row is then NaN) */
} tb_quant_act_header;
enum { TB_QUANT_ACT_HEADER_BYTES = 64 };

/* Quantizes x[0..k) to int8 in natural order: amax = max|x|, scale = amax / 127,
 * xq = clamp(round_half_even(x * (127 / amax)), -127, 127). amax == 0 gives xq = 0, scale 0; a NaN or
 * inf in x gives xq = 0 and scale NaN. Portable code shared by every A8 kernel so that all of them
 * see the same integers. Returns the scale. */
float tb_quant_act_quantize_row(const float *x, int64_t k, int8_t *xq);

/* The two halves of tb_quant_act_quantize_row, for SIMD versions that find amax_bits (the largest
 * |x| as IEEE bits) themselves: finish_scale returns the scale and sets *done unless the caller must
 * still write xq[i] = clamp(round_half_even(x[i] * (127 / amax)), -127, 127), which quantize_span
 * does for a span (SIMD code must match it exactly: multiply, round half to even, clamp). */
float tb_quant_act_finish_scale(uint32_t amax_bits, const float *x, int64_t k, int8_t *xq, bool *done);
void tb_quant_act_quantize_span(const float *x, int64_t count, float inverse, int8_t *xq);

/* Getters; NULL when the family has no kernel for (type, act) in this build. The caller checks CPU
 * support before using the result. */
const tb_quant_impl *tb_quant_impl_scalar(tb_quant_type type, tb_quant_act act);
const tb_quant_impl *tb_quant_impl_avx2(tb_quant_type type, tb_quant_act act);
const tb_quant_impl *tb_quant_impl_avxvnni(tb_quant_type type, tb_quant_act act);
const tb_quant_impl *tb_quant_impl_avx512(tb_quant_type type, tb_quant_act act);
const tb_quant_impl *tb_quant_impl_avx512vnni(tb_quant_type type, tb_quant_act act);
/* The A8 half of the AVX2 family (maddubs), used by tb_quant_impl_avx2. */
const tb_quant_impl *tb_quant_impl_avx2_a8(tb_quant_type type);

/* Read loops of the bandwidth probe (sum of the data as uint64 lanes; bytes a multiple of 64). */
uint64_t tb_quant_read_bytes_avx2(const void *data, int64_t bytes);
uint64_t tb_quant_read_bytes_avx512(const void *data, int64_t bytes);

static inline int64_t tb_quant_round_up(int64_t value, int64_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
}

#endif
