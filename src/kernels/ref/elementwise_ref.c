/* Scalar reference kernels for the unary, binary, compare, where and conversion entries of
 * kernels/elementwise.h, and the reference table itself. Special values follow PyTorch: NaN propagates
 * through relu/clamp/maximum/minimum, relu(-0) = -0, gelu(-inf) = silu(-inf) = NaN. */
#include <math.h>
#include <string.h>

#include "kernels/ref/elementwise_ref.h"
#include "torchburn/dtype.h"

/* ---- unary: per-element functions; transcendental ones are evaluated in double and rounded once */

static float ref_neg(float x, const tb_unary_params *p) { return -x; }
static float ref_abs(float x, const tb_unary_params *p) { return fabsf(x); }
static float ref_exp(float x, const tb_unary_params *p) { return (float)exp(x); }
static float ref_log(float x, const tb_unary_params *p) { return (float)log(x); }
static float ref_sqrt(float x, const tb_unary_params *p) { return sqrtf(x); }
/* two roundings, as PyTorch computes it (1 / sqrt) */
static float ref_rsqrt(float x, const tb_unary_params *p) { return 1.0f / sqrtf(x); }
static float ref_sin(float x, const tb_unary_params *p) { return (float)sin(x); }
static float ref_cos(float x, const tb_unary_params *p) { return (float)cos(x); }
static float ref_tanh(float x, const tb_unary_params *p) { return (float)tanh(x); }
static float ref_sigmoid(float x, const tb_unary_params *p) { return (float)(1.0 / (1.0 + exp(-(double)x))); }
static float ref_relu(float x, const tb_unary_params *p) { return x < 0.0f ? 0.0f : x; }
/* x/2 * erfc(-x/sqrt2) = x/2 * (1 + erf(x/sqrt2)) without the 1 + erf cancellation for x << 0 */
static float ref_gelu(float x, const tb_unary_params *p) { return (float)(0.5 * x * erfc(-(double)x * M_SQRT1_2)); }
/* x/2 (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
static float ref_gelu_tanh(float x, const tb_unary_params *p) {
    double xd = x, u = sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd);
    return (float)(xd / (1.0 + exp(-2.0 * u)));
}
static float ref_silu(float x, const tb_unary_params *p) { return (float)((double)x / (1.0 + exp(-(double)x))); }
static float ref_leaky_relu(float x, const tb_unary_params *p) { return x > 0.0f ? x : p->alpha * x; }
static float ref_clamp(float x, const tb_unary_params *p) {
    if (isnan(p->lo) || isnan(p->hi))
        return NAN; /* PyTorch: a NaN bound gives NaN */
    float v = x < p->lo ? p->lo : x;
    return v > p->hi ? p->hi : v;
}

typedef float (*ref_scalar_fn)(float x, const tb_unary_params *p);

static inline __attribute__((always_inline)) void ref_map(const float *x, float *y, int64_t n, const tb_unary_params *p,
                                                          ref_scalar_fn fn) {
    for (int64_t i = 0; i < n; i++)
        y[i] = fn(x[i], p);
}

static void ref_unary_neg(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_neg); }
static void ref_unary_abs(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_abs); }
static void ref_unary_exp(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_exp); }
static void ref_unary_log(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_log); }
static void ref_unary_sqrt(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_sqrt); }
static void ref_unary_rsqrt(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_rsqrt); }
static void ref_unary_sin(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_sin); }
static void ref_unary_cos(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_cos); }
static void ref_unary_tanh(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_tanh); }
static void ref_unary_sigmoid(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_sigmoid); }
static void ref_unary_relu(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_relu); }
static void ref_unary_gelu(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_gelu); }
static void ref_unary_gelu_tanh(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_gelu_tanh); }
static void ref_unary_silu(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_silu); }
static void ref_unary_leaky_relu(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_leaky_relu); }
static void ref_unary_clamp(const float *x, float *y, int64_t n, const tb_unary_params *p) { ref_map(x, y, n, p, ref_clamp); }

/* ---- binary */

static float ref_add(float a, float b) { return a + b; }
static float ref_sub(float a, float b) { return a - b; }
static float ref_mul(float a, float b) { return a * b; }
static float ref_div(float a, float b) { return a / b; }
static float ref_maximum(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : (a > b ? a : b); }
static float ref_minimum(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : (a < b ? a : b); }

typedef float (*ref_binary_fn)(float a, float b);

static inline __attribute__((always_inline)) void ref_zip(const float *a, int64_t as, const float *b, int64_t bs, float *y,
                                                          int64_t n, ref_binary_fn fn) {
    for (int64_t i = 0; i < n; i++)
        y[i] = fn(a[i * as], b[i * bs]);
}

static void ref_binary_add(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { ref_zip(a, as, b, bs, y, n, ref_add); }
static void ref_binary_sub(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { ref_zip(a, as, b, bs, y, n, ref_sub); }
static void ref_binary_mul(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { ref_zip(a, as, b, bs, y, n, ref_mul); }
static void ref_binary_div(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { ref_zip(a, as, b, bs, y, n, ref_div); }
static void ref_binary_maximum(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { ref_zip(a, as, b, bs, y, n, ref_maximum); }
static void ref_binary_minimum(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { ref_zip(a, as, b, bs, y, n, ref_minimum); }
/* powf, except that a scalar exponent of 2 is a*a (the correctly rounded square; SIMD does the same) */
static void ref_binary_pow(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) {
    if (bs == 0 && n > 0 && b[0] == 2.0f) {
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i * as] * a[i * as];
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = powf(a[i * as], b[i * bs]);
}

/* ---- compare (IEEE: every comparison with NaN is false except ne) */

static void ref_compare_eq(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i * as] == b[i * bs];
}
static void ref_compare_ne(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i * as] != b[i * bs];
}
static void ref_compare_lt(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i * as] < b[i * bs];
}
static void ref_compare_le(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i * as] <= b[i * bs];
}
static void ref_compare_gt(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i * as] > b[i * bs];
}
static void ref_compare_ge(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i * as] >= b[i * bs];
}

static void ref_where(const uint8_t *cond, int64_t cs, const float *a, int64_t as, const float *b, int64_t bs, float *y,
                      int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = cond[i * cs] ? a[i * as] : b[i * bs];
}

/* ---- conversions (the scalar converters of torchburn/dtype.h) */

static void ref_f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = tb_f16_to_f32(x[i]);
}
static void ref_bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = tb_bf16_to_f32(x[i]);
}
static void ref_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = tb_f32_to_f16(x[i]);
}
static void ref_f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = tb_f32_to_bf16(x[i]);
}

const tb_elementwise_kernels tb_elementwise_kernels_ref = {
    .isa_name = "scalar",
    .unary =
        {
            [TB_UNARY_NEG] = ref_unary_neg,
            [TB_UNARY_ABS] = ref_unary_abs,
            [TB_UNARY_EXP] = ref_unary_exp,
            [TB_UNARY_LOG] = ref_unary_log,
            [TB_UNARY_SQRT] = ref_unary_sqrt,
            [TB_UNARY_RSQRT] = ref_unary_rsqrt,
            [TB_UNARY_SIN] = ref_unary_sin,
            [TB_UNARY_COS] = ref_unary_cos,
            [TB_UNARY_TANH] = ref_unary_tanh,
            [TB_UNARY_SIGMOID] = ref_unary_sigmoid,
            [TB_UNARY_RELU] = ref_unary_relu,
            [TB_UNARY_GELU] = ref_unary_gelu,
            [TB_UNARY_GELU_TANH] = ref_unary_gelu_tanh,
            [TB_UNARY_SILU] = ref_unary_silu,
            [TB_UNARY_LEAKY_RELU] = ref_unary_leaky_relu,
            [TB_UNARY_CLAMP] = ref_unary_clamp,
        },
    .binary =
        {
            [TB_BINARY_ADD] = ref_binary_add,
            [TB_BINARY_SUB] = ref_binary_sub,
            [TB_BINARY_MUL] = ref_binary_mul,
            [TB_BINARY_DIV] = ref_binary_div,
            [TB_BINARY_POW] = ref_binary_pow,
            [TB_BINARY_MAXIMUM] = ref_binary_maximum,
            [TB_BINARY_MINIMUM] = ref_binary_minimum,
        },
    .compare =
        {
            [TB_COMPARE_EQ] = ref_compare_eq,
            [TB_COMPARE_NE] = ref_compare_ne,
            [TB_COMPARE_LT] = ref_compare_lt,
            [TB_COMPARE_LE] = ref_compare_le,
            [TB_COMPARE_GT] = ref_compare_gt,
            [TB_COMPARE_GE] = ref_compare_ge,
        },
    .where = ref_where,
    .reduce =
        {
            [TB_REDUCE_SUM] = tb_ref_reduce_sum,
            [TB_REDUCE_MAX] = tb_ref_reduce_max,
            [TB_REDUCE_MIN] = tb_ref_reduce_min,
            [TB_REDUCE_LOGSUMEXP] = tb_ref_reduce_logsumexp,
        },
    .argmax = tb_ref_argmax,
    .argmin = tb_ref_argmin,
    .var = tb_ref_var,
    .softmax = tb_ref_softmax,
    .layer_norm = tb_ref_layer_norm,
    .rms_norm = tb_ref_rms_norm,
    .rope = tb_ref_rope,
    .f16_to_f32 = ref_f16_to_f32,
    .bf16_to_f32 = ref_bf16_to_f32,
    .f32_to_f16 = ref_f32_to_f16,
    .f32_to_bf16 = ref_f32_to_bf16,
};
