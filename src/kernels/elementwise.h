/* Contracts of the elementwise, reduction, softmax, normalization and rotary kernels.
 *
 * Every kernel here is single-threaded, works on f32, never allocates, and touches only the memory
 * its arguments describe (the ops layer splits work across threads and converts dtypes/strides).
 * Each has a scalar reference in ref/ and optional SIMD versions in x86_avx2/, x86_avx512/,
 * arm_neon/; a NULL entry in a SIMD table means "use the reference". SIMD versions must agree with
 * the reference within f32 rounding (tested in tests/c/test_kernels_elementwise.c) and follow
 * PyTorch's special-value semantics (NaN propagates through max/min/relu/clamp, etc.). */
#ifndef TORCHBURN_KERNELS_ELEMENTWISE_H
#define TORCHBURN_KERNELS_ELEMENTWISE_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/cpu.h"

#define TB_UNARY_OP_LIST(X) \
    X(NEG, "neg")           \
    X(ABS, "abs")           \
    X(EXP, "exp")           \
    X(LOG, "log")           \
    X(SQRT, "sqrt")         \
    X(RSQRT, "rsqrt")       \
    X(SIN, "sin")           \
    X(COS, "cos")           \
    X(TANH, "tanh")         \
    X(SIGMOID, "sigmoid")   \
    X(RELU, "relu")         \
    X(GELU, "gelu")         /* exact: x/2 * (1 + erf(x/sqrt(2))) */ \
    X(GELU_TANH, "gelu_tanh") /* x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) */ \
    X(SILU, "silu")         \
    X(LEAKY_RELU, "leaky_relu") /* x > 0 ? x : alpha * x */ \
    X(CLAMP, "clamp")       /* min(max(x, lo), hi); NaN stays NaN */

typedef enum tb_unary_op {
#define TB_UNARY_ENUM(id, name) TB_UNARY_##id,
    TB_UNARY_OP_LIST(TB_UNARY_ENUM)
#undef TB_UNARY_ENUM
    TB_UNARY_COUNT
} tb_unary_op;

typedef struct tb_unary_params {
    float alpha; /* leaky_relu negative slope */
    float lo;    /* clamp lower bound (-INFINITY when absent) */
    float hi;    /* clamp upper bound (+INFINITY when absent) */
} tb_unary_params;

/* y[i] = op(x[i]) for i < n. x and y may be the same pointer (in place) but must not partially overlap. */
typedef void (*tb_unary_kernel)(const float *x, float *y, int64_t n, const tb_unary_params *params);

#define TB_BINARY_OP_LIST(X) \
    X(ADD, "add")            \
    X(SUB, "sub")            \
    X(MUL, "mul")            \
    X(DIV, "div")            \
    X(POW, "pow")            /* powf semantics (pow(x, 0) = 1, pow(1, NaN) = 1, ...) */ \
    X(MAXIMUM, "maximum")    /* NaN if either is NaN */ \
    X(MINIMUM, "minimum")

typedef enum tb_binary_op {
#define TB_BINARY_ENUM(id, name) TB_BINARY_##id,
    TB_BINARY_OP_LIST(TB_BINARY_ENUM)
#undef TB_BINARY_ENUM
    TB_BINARY_COUNT
} tb_binary_op;

/* y[i] = a[i * a_step] op b[i * b_step], with a_step, b_step each 0 (a scalar repeated) or 1. y may
 * alias a or b when that operand's step is 1. */
typedef void (*tb_binary_kernel)(const float *a, int64_t a_step, const float *b, int64_t b_step, float *y, int64_t n);

#define TB_COMPARE_OP_LIST(X) X(EQ, "eq") X(NE, "ne") X(LT, "lt") X(LE, "le") X(GT, "gt") X(GE, "ge")

typedef enum tb_compare_op {
#define TB_COMPARE_ENUM(id, name) TB_COMPARE_##id,
    TB_COMPARE_OP_LIST(TB_COMPARE_ENUM)
#undef TB_COMPARE_ENUM
    TB_COMPARE_COUNT
} tb_compare_op;

/* y[i] = (a[i*a_step] op b[i*b_step]) ? 1 : 0 (IEEE: any comparison with NaN is false, ne is true). */
typedef void (*tb_compare_kernel)(const float *a, int64_t a_step, const float *b, int64_t b_step, uint8_t *y, int64_t n);

/* y[i] = cond[i*c_step] ? a[i*a_step] : b[i*b_step]; steps are 0 or 1; cond is 0/1 bytes. */
typedef void (*tb_where_kernel)(const uint8_t *cond, int64_t cond_step, const float *a, int64_t a_step,
                                const float *b, int64_t b_step, float *y, int64_t n);

/* Reductions view x as [outer, len, inner] (contiguous) and reduce the middle dim:
 * out[o * inner + i] = reduce_{r < len} x[(o * len + r) * inner + i]. len >= 1 (the ops layer handles
 * empty reductions). inner == 1 is the common row case and should be fast. */
#define TB_REDUCE_OP_LIST(X) \
    X(SUM, "sum")            \
    X(MAX, "max")            /* NaN if any NaN */ \
    X(MIN, "min")            \
    X(LOGSUMEXP, "logsumexp") /* max-shifted; all -inf -> -inf; any +inf -> +inf; NaN -> NaN */

typedef enum tb_reduce_op {
#define TB_REDUCE_ENUM(id, name) TB_REDUCE_##id,
    TB_REDUCE_OP_LIST(TB_REDUCE_ENUM)
#undef TB_REDUCE_ENUM
    TB_REDUCE_COUNT
} tb_reduce_op;

typedef void (*tb_reduce_kernel)(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);

/* Index of the first max (argmax) or min (argmin) along the middle dim; a NaN counts as the extreme
 * (first NaN wins), as in PyTorch. */
typedef void (*tb_arg_reduce_kernel)(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out);

/* Variance along the middle dim: sum((x - mean)^2) / (len - correction), computed in two passes (or
 * Welford) for accuracy. len - correction <= 0 gives NaN (PyTorch gives nan/inf; the ops layer
 * matches it). mean_out may be NULL. */
typedef void (*tb_var_kernel)(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t correction,
                              float *mean_out, float *var_out);

/* softmax / log_softmax along the middle dim of [outer, len, inner]; y may equal x. Rows (inner == 1)
 * shorter than 65,536 take three cache-resident sweeps (max, exp-and-sum, scale) with one exp per
 * element; longer rows use an online max+sum sweep and a write sweep. A row of all -inf gives NaN
 * (PyTorch does the same). */
typedef void (*tb_softmax_kernel)(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, bool log);

/* LayerNorm over the last `len` elements of each of `rows` contiguous rows:
 * y = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var_biased + eps). weight/bias may be NULL.
 * mean_out/rstd_out [rows] may be NULL (they feed the backward pass). y may equal x. */
typedef void (*tb_layer_norm_kernel)(const float *x, const float *weight, const float *bias, float *y,
                                     int64_t rows, int64_t len, float eps, float *mean_out, float *rstd_out);

/* RMSNorm: y = x * rsqrt(mean(x^2) + eps) * weight (weight may be NULL). y may equal x. */
typedef void (*tb_rms_norm_kernel)(const float *x, const float *weight, float *y, int64_t rows, int64_t len, float eps);

/* Rotary embedding of one row of `2 * half` values with per-pair cos/sin[half]:
 * split-half (interleaved false): pairs (x[i], x[i + half]);  interleaved: pairs (x[2i], x[2i + 1]);
 * (a, b) -> (a*cos - b*sin, b*cos + a*sin). y may equal x. */
typedef void (*tb_rope_kernel)(const float *x, const float *cos, const float *sin, float *y, int64_t half, bool interleaved);

/* Bulk conversions (F16C for f16; integer code for bf16 — the AVX-512 BF16 instruction flushes
 * denormals, so it is not used); same rounding as tb_f32_to_f16/bf16. */
typedef void (*tb_f16_to_f32_kernel)(const uint16_t *x, float *y, int64_t n);
typedef void (*tb_f32_to_f16_kernel)(const float *x, uint16_t *y, int64_t n);

typedef struct tb_elementwise_kernels {
    const char *isa_name;
    tb_unary_kernel unary[TB_UNARY_COUNT];
    tb_binary_kernel binary[TB_BINARY_COUNT];
    tb_compare_kernel compare[TB_COMPARE_COUNT];
    tb_where_kernel where;
    tb_reduce_kernel reduce[TB_REDUCE_COUNT];
    tb_arg_reduce_kernel argmax, argmin;
    tb_var_kernel var;
    tb_softmax_kernel softmax;
    tb_layer_norm_kernel layer_norm;
    tb_rms_norm_kernel rms_norm;
    tb_rope_kernel rope;
    tb_f16_to_f32_kernel f16_to_f32, bf16_to_f32;
    tb_f32_to_f16_kernel f32_to_f16, f32_to_bf16;
} tb_elementwise_kernels;

/* The per-ISA tables (entries may be NULL = reference). Defined in ref/ and the ISA folders. */
extern const tb_elementwise_kernels tb_elementwise_kernels_ref;
extern const tb_elementwise_kernels tb_elementwise_kernels_avx2;
extern const tb_elementwise_kernels tb_elementwise_kernels_avx512;

/* The complete table for an ISA (NULL entries filled from the reference; an ISA not compiled in or not
 * supported by the CPU gives the reference). Cheap: tables are built once. */
const tb_elementwise_kernels *tb_elementwise_kernels_for(tb_isa isa);
/* The table for tb_isa_active(). */
const tb_elementwise_kernels *tb_elementwise_kernels_active(void);

/* Shared names, derived from the lists above. */
extern const char *const tb_unary_op_names[TB_UNARY_COUNT];
extern const char *const tb_binary_op_names[TB_BINARY_COUNT];
extern const char *const tb_compare_op_names[TB_COMPARE_COUNT];
extern const char *const tb_reduce_op_names[TB_REDUCE_COUNT];

#endif
