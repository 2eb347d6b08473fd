/* Quantized weights: int8 per output row and int4 grouped along K (both symmetric, f32 scales),
 * their quantize/dequantize routines, and the quantized matmul y = x @ dequant(W).T + bias with f32
 * activations (W8A32, W4A32) or activations quantized to int8 per row on the fly (W8A8, W4A8).
 *
 * Formats (the API layout; the kernels read it directly, no repacking; see docs/quantization.md):
 *   int8:  q int8[N, K] row-major, scales f32[N];            w[n,k] ~ q[n,k] * scales[n]
 *          scales[n] = max_k |w[n,k]| / 127, q = clamp(round_half_even(w / s), -127, 127)
 *   int4:  packed uint8[N, K/2], scales f32[N, K/G] (G = group_size in {32, 64, 128, 256}, K % G == 0)
 *          s = max |w| / 7 over each group of G consecutive k, q = clamp(round_half_even(w / s), -8, 7),
 *          nibble = q + 8; element 2j sits in the low nibble of byte j, element 2j+1 in the high one.
 * A group (or row) whose max |w| is 0 gets scale 0 and q = 0. A NaN weight makes its group's (row's)
 * scale NaN and its q values 0, so the whole group dequantizes to NaN (NaN propagates). An infinite
 * weight is an error (TB_ERR_INVALID_ARGUMENT naming its position): no finite scale represents it.
 *
 * Shape letters: M rows of activations (the batch), N output features, K input features. */
#ifndef TORCHBURN_QUANT_H
#define TORCHBURN_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tb_quant_type {
    TB_QUANT_INT8 = 0, /* int8 per output row */
    TB_QUANT_INT4 = 1, /* int4 grouped along K */
    TB_QUANT_TYPE_COUNT
} tb_quant_type;

/* What the kernel does with the activations. */
typedef enum tb_quant_act {
    TB_QUANT_ACT_F32 = 0,  /* W8A32 / W4A32: exact dequantized weights, f32 arithmetic */
    TB_QUANT_ACT_INT8 = 1, /* W8A8 / W4A8: each row of x quantized to int8 (s = max|x|/127), integer dots */
    TB_QUANT_ACT_COUNT
} tb_quant_act;

/* Kernel families, for tests and benchmarks (TB_QUANT_KERNEL_AUTO follows tb_isa_active()). For A32
 * the VNNI families run the same code as their base (AVXVNNI -> AVX2, AVX512VNNI -> AVX512); for A8
 * AVX2 uses maddubs, AVXVNNI/AVX512VNNI use vpdpbusd, and AVX512 without VNNI runs the best ymm one. */
typedef enum tb_quant_kernel {
    TB_QUANT_KERNEL_AUTO = 0,
    TB_QUANT_KERNEL_SCALAR,
    TB_QUANT_KERNEL_AVX2,
    TB_QUANT_KERNEL_AVXVNNI,
    TB_QUANT_KERNEL_AVX512,
    TB_QUANT_KERNEL_AVX512VNNI,
    TB_QUANT_KERNEL_COUNT
} tb_quant_kernel;

/* ---- quantize / dequantize (API layout; contiguous row-major buffers; parallel over rows) ---- */

/* w f32[N, K] -> q int8[N, K], scales f32[N]. N, K >= 0. Errors: inf in w, bad sizes, NULL. */
TB_API TB_NODISCARD tb_status tb_quantize_int8(const float *w, int64_t n, int64_t k, int8_t *q, float *scales);

/* w f32[N, K] -> packed uint8[N, K/2], scales f32[N, K/group_size]. Errors: group_size not in
 * {32, 64, 128, 256}, K % group_size != 0, inf in w. */
TB_API TB_NODISCARD tb_status tb_quantize_int4_grouped(const float *w, int64_t n, int64_t k, int64_t group_size,
                                                       uint8_t *packed, float *scales);

/* The inverses: w[n,k] = q * scale, computed in f32 (one rounding). */
TB_API TB_NODISCARD tb_status tb_dequantize_int8(const int8_t *q, const float *scales, int64_t n, int64_t k, float *w);
TB_API TB_NODISCARD tb_status tb_dequantize_int4_grouped(const uint8_t *packed, const float *scales, int64_t n,
                                                         int64_t k, int64_t group_size, float *w);

/* Checks (type, N, K, group_size) the way every entry point does; group_size is ignored for int8. */
TB_API TB_NODISCARD tb_status tb_quant_check_dims(tb_quant_type type, int64_t n, int64_t k, int64_t group_size);

/* ---- the weight handle the matmul runs on ---- */

/* A validated, non-owning view of quantized weights in the API layout (the caller keeps the buffers
 * alive while the view is used). Plain struct: fill it with tb_quant_weight_init. */
typedef struct tb_quant_weight {
    tb_quant_type type;
    int64_t n, k;
    int64_t group_size;   /* int4: G; int8: K (one "group" per row) */
    int64_t row_bytes;    /* bytes of one weight row: K (int8) or K/2 (int4) */
    int64_t scales_per_row; /* 1 (int8) or K/G (int4) */
    const void *data;     /* int8[N, K] or uint8[N, K/2] */
    const float *scales;  /* f32[N] or f32[N, K/G] */
} tb_quant_weight;

/* Fills *out after checking the dims (tb_quant_check_dims) and that data/scales are non-NULL when N*K > 0.
 * For data in a 64-byte aligned buffer the kernels stream best; any alignment works. */
TB_API TB_NODISCARD tb_status tb_quant_weight_init(tb_quant_type type, int64_t n, int64_t k, int64_t group_size,
                                                   const void *data, const float *scales, tb_quant_weight *out);

/* Bytes of weights + scales one full pass reads (what bandwidth figures count). */
TB_API int64_t tb_quant_weight_bytes(const tb_quant_weight *w);

/* ---- matmul ---- */

typedef struct tb_quant_matmul_desc {
    const float *x;      /* x[m, k] = x[m * x_row_stride + k]; M x K */
    int64_t m;           /* batch rows M >= 0 (1 = GEMV) */
    int64_t x_row_stride;/* >= K (elements) */
    float *y;            /* y[m, n] = y[m * y_row_stride + n]; M x N, written (never read) */
    int64_t y_row_stride;/* >= N (elements) */
    const float *bias;   /* f32[N] or NULL */
    tb_quant_act act;    /* TB_QUANT_ACT_F32 or TB_QUANT_ACT_INT8 */
    tb_quant_kernel kernel; /* TB_QUANT_KERNEL_AUTO unless testing */
} tb_quant_matmul_desc;

/* y = x @ dequant(w).T + bias, split over N on the thread pool. x and y must not overlap.
 * A32 result: equals the f32 product with the exactly dequantized weights up to f32 summation
 * rounding. A8 result: as if each row of x were replaced by round(x / s) * s with s = max|x|/127,
 * up to f32 rounding; a row of x containing NaN or inf gives a NaN output row.
 * Errors: NULL pointers, negative sizes, short strides, a kernel the CPU lacks (TB_ERR_UNSUPPORTED),
 * scratch allocation failure. Safe to call from several threads at once. */
TB_API TB_NODISCARD tb_status tb_quant_matmul_ex(const tb_quant_weight *w, const tb_quant_matmul_desc *desc);

/* Shorthand for the LLM: contiguous x[batch, K] and y[batch, N], A32, automatic kernel. */
TB_API TB_NODISCARD tb_status tb_quant_matmul(const tb_quant_weight *w, const float *x, int64_t batch, float *y,
                                              const float *bias);

/* Whether this CPU (and build) can run a kernel family; AUTO and SCALAR always can. */
TB_API bool tb_quant_kernel_supported(tb_quant_kernel kernel);
/* "auto", "scalar", "avx2", "avxvnni", "avx512", "avx512vnni". */
TB_API const char *tb_quant_kernel_name(tb_quant_kernel kernel);
TB_API TB_NODISCARD tb_status tb_quant_kernel_from_name(const char *name, tb_quant_kernel *out);
/* The family AUTO resolves to for `act` under the active ISA level. */
TB_API tb_quant_kernel tb_quant_kernel_resolve(tb_quant_kernel kernel, tb_quant_act act);

/* ---- benchmark support ---- */

/* Measures memory read bandwidth the way the GEMV benchmark reads weights: allocates and touches
 * buffer_bytes, then reads it in slices of slice_bytes (rotating, so a slice is never cache-hot when
 * buffer_bytes is several times the last-level cache), split over the current thread count. Reports
 * the best and the median GB/s over `slices` timed slices (the best is the figure to compare against on
 * a shared machine; noise only ever slows a slice down). */
TB_API TB_NODISCARD tb_status tb_quant_read_bandwidth(size_t buffer_bytes, size_t slice_bytes, int slices,
                                                      double *best_gbps, double *median_gbps);

#ifdef __cplusplus
}
#endif
#endif
