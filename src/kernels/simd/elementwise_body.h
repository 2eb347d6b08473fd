/* Unary, binary, compare, where and f16/bf16 conversion kernels written once against the float-vector
 * API of the including ISA (see vec_math.h). Everything is static: each ISA translation unit compiles
 * its own copy with its own flags and puts the functions into its kernel table.
 * Loops run full vectors, then one partial vector whose loads and stores touch only the first n
 * lanes, so nothing is read or written past n. */
#ifndef TB_SIMD_ELEMENTWISE_BODY_H
#define TB_SIMD_ELEMENTWISE_BODY_H

#include <math.h>

#include "kernels/elementwise.h"
#include "kernels/simd/vec_math.h"

#define SIMD_INLINE static inline __attribute__((always_inline))

/* ---- unary: y = fn(x, p0, p1); p0/p1 carry the op's parameters broadcast to all lanes. The driver is
 * always inlined with a constant fn, so the call through the pointer disappears. */
typedef vf (*simd_unary_fn)(vf x, vf p0, vf p1);

SIMD_INLINE void simd_map(const float *x, float *y, int64_t n, simd_unary_fn fn, vf p0, vf p1) {
    int64_t i = 0;
    for (; i + 2 * VF_LANES <= n; i += 2 * VF_LANES) {
        vf a = vf_load(x + i), b = vf_load(x + i + VF_LANES);
        vf_store(y + i, fn(a, p0, p1));
        vf_store(y + i + VF_LANES, fn(b, p0, p1));
    }
    for (; i + VF_LANES <= n; i += VF_LANES)
        vf_store(y + i, fn(vf_load(x + i), p0, p1));
    if (i < n)
        vf_store_part(y + i, fn(vf_load_part(x + i, n - i), p0, p1), n - i);
}

SIMD_INLINE vf simd_op_neg(vf x, vf p0, vf p1) { return vf_neg(x); }
SIMD_INLINE vf simd_op_abs(vf x, vf p0, vf p1) { return vf_abs(x); }
SIMD_INLINE vf simd_op_exp(vf x, vf p0, vf p1) { return vmath_exp(x); }
SIMD_INLINE vf simd_op_log(vf x, vf p0, vf p1) { return vmath_log(x); }
SIMD_INLINE vf simd_op_sqrt(vf x, vf p0, vf p1) { return vf_sqrt(x); }
SIMD_INLINE vf simd_op_rsqrt(vf x, vf p0, vf p1) { return vf_div(vf_set1(1.0f), vf_sqrt(x)); }
SIMD_INLINE vf simd_op_sin(vf x, vf p0, vf p1) { return vmath_sincos(x, false); }
SIMD_INLINE vf simd_op_cos(vf x, vf p0, vf p1) { return vmath_sincos(x, true); }
SIMD_INLINE vf simd_op_tanh(vf x, vf p0, vf p1) { return vmath_tanh(x); }
SIMD_INLINE vf simd_op_sigmoid(vf x, vf p0, vf p1) { return vmath_sigmoid(x); }
/* max(0, x) returns x when x is NaN or -0 (both as PyTorch) */
SIMD_INLINE vf simd_op_relu(vf x, vf p0, vf p1) { return vf_max(vf_zero(), x); }
SIMD_INLINE vf simd_op_gelu(vf x, vf p0, vf p1) { return vmath_gelu(x); }
SIMD_INLINE vf simd_op_gelu_tanh(vf x, vf p0, vf p1) { return vmath_gelu_tanh(x); }
SIMD_INLINE vf simd_op_silu(vf x, vf p0, vf p1) { return vf_mul(x, vmath_sigmoid(x)); }
SIMD_INLINE vf simd_op_leaky_relu(vf x, vf alpha, vf p1) { return vf_select(vf_gt(x, vf_zero()), x, vf_mul(alpha, x)); }
/* lo, hi are not NaN here; max/min return their second operand on NaN, so a NaN x stays NaN */
SIMD_INLINE vf simd_op_clamp(vf x, vf lo, vf hi) { return vf_min(hi, vf_max(lo, x)); }

static void simd_unary_neg(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_neg, vf_zero(), vf_zero()); }
static void simd_unary_abs(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_abs, vf_zero(), vf_zero()); }
static void simd_unary_exp(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_exp, vf_zero(), vf_zero()); }
static void simd_unary_log(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_log, vf_zero(), vf_zero()); }
static void simd_unary_sqrt(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_sqrt, vf_zero(), vf_zero()); }
static void simd_unary_rsqrt(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_rsqrt, vf_zero(), vf_zero()); }
static void simd_unary_sin(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_sin, vf_zero(), vf_zero()); }
static void simd_unary_cos(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_cos, vf_zero(), vf_zero()); }
static void simd_unary_tanh(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_tanh, vf_zero(), vf_zero()); }
static void simd_unary_sigmoid(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_sigmoid, vf_zero(), vf_zero()); }
static void simd_unary_relu(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_relu, vf_zero(), vf_zero()); }
static void simd_unary_gelu(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_gelu, vf_zero(), vf_zero()); }
static void simd_unary_gelu_tanh(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_gelu_tanh, vf_zero(), vf_zero()); }
static void simd_unary_silu(const float *x, float *y, int64_t n, const tb_unary_params *p) { simd_map(x, y, n, simd_op_silu, vf_zero(), vf_zero()); }
static void simd_unary_leaky_relu(const float *x, float *y, int64_t n, const tb_unary_params *p) {
    simd_map(x, y, n, simd_op_leaky_relu, vf_set1(p->alpha), vf_zero());
}
static void simd_unary_clamp(const float *x, float *y, int64_t n, const tb_unary_params *p) {
    if (isnan(p->lo) || isnan(p->hi)) { /* PyTorch: a NaN bound makes every element NaN */
        for (int64_t i = 0; i < n; i++)
            y[i] = NAN;
        return;
    }
    simd_map(x, y, n, simd_op_clamp, vf_set1(p->lo), vf_set1(p->hi));
}

/* ---- binary: an operand with step 0 is read from a local buffer of VF_LANES copies with a pointer
 * increment of 0, so one loop serves all four step combinations. */
typedef vf (*simd_binary_fn)(vf a, vf b);

SIMD_INLINE void simd_zip(const float *a, int64_t a_step, const float *b, int64_t b_step, float *y, int64_t n,
                          simd_binary_fn fn) {
    float a_copies[VF_LANES], b_copies[VF_LANES];
    if (n <= 0)
        return;
    if (a_step == 0) {
        vf_store(a_copies, vf_set1(a[0]));
        a = a_copies;
    }
    if (b_step == 0) {
        vf_store(b_copies, vf_set1(b[0]));
        b = b_copies;
    }
    const int64_t a_inc = a_step ? VF_LANES : 0, b_inc = b_step ? VF_LANES : 0;
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES, a += a_inc, b += b_inc)
        vf_store(y + i, fn(vf_load(a), vf_load(b)));
    if (i < n)
        vf_store_part(y + i, fn(vf_load_part(a, n - i), vf_load_part(b, n - i)), n - i);
}

SIMD_INLINE vf simd_op_add(vf a, vf b) { return vf_add(a, b); }
SIMD_INLINE vf simd_op_sub(vf a, vf b) { return vf_sub(a, b); }
SIMD_INLINE vf simd_op_mul(vf a, vf b) { return vf_mul(a, b); }
SIMD_INLINE vf simd_op_div(vf a, vf b) { return vf_div(a, b); }
/* NaN if either is NaN: vf_max(a, b) already returns b when either is NaN, so only a NaN a needs fixing */
SIMD_INLINE vf simd_op_maximum(vf a, vf b) { return vf_select(vf_isnan(a), a, vf_max(a, b)); }
SIMD_INLINE vf simd_op_minimum(vf a, vf b) { return vf_select(vf_isnan(a), a, vf_min(a, b)); }
SIMD_INLINE vf simd_op_square(vf a, vf b) { return vf_mul(a, a); }

static void simd_binary_add(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { simd_zip(a, as, b, bs, y, n, simd_op_add); }
static void simd_binary_sub(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { simd_zip(a, as, b, bs, y, n, simd_op_sub); }
static void simd_binary_mul(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { simd_zip(a, as, b, bs, y, n, simd_op_mul); }
static void simd_binary_div(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { simd_zip(a, as, b, bs, y, n, simd_op_div); }
static void simd_binary_maximum(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { simd_zip(a, as, b, bs, y, n, simd_op_maximum); }
static void simd_binary_minimum(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) { simd_zip(a, as, b, bs, y, n, simd_op_minimum); }
/* powf per element, except a scalar exponent of 2, whose correctly rounded result is a*a; the
 * reference makes the same choice. */
static void simd_binary_pow(const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) {
    if (bs == 0 && n > 0 && b[0] == 2.0f) {
        simd_zip(a, as, b, bs, y, n, simd_op_square);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = powf(a[i * as], b[i * bs]);
}

/* ---- compare: 0/1 bytes */
typedef vm (*simd_compare_fn)(vf a, vf b);

SIMD_INLINE void simd_compare_loop(const float *a, int64_t a_step, const float *b, int64_t b_step, uint8_t *y, int64_t n,
                                   simd_compare_fn fn) {
    float a_copies[VF_LANES], b_copies[VF_LANES];
    if (n <= 0)
        return;
    if (a_step == 0) {
        vf_store(a_copies, vf_set1(a[0]));
        a = a_copies;
    }
    if (b_step == 0) {
        vf_store(b_copies, vf_set1(b[0]));
        b = b_copies;
    }
    const int64_t a_inc = a_step ? VF_LANES : 0, b_inc = b_step ? VF_LANES : 0;
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES, a += a_inc, b += b_inc)
        vm_store_bytes(y + i, fn(vf_load(a), vf_load(b)));
    if (i < n)
        vm_store_bytes_part(y + i, fn(vf_load_part(a, n - i), vf_load_part(b, n - i)), n - i);
}

static void simd_compare_eq(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) { simd_compare_loop(a, as, b, bs, y, n, vf_eq); }
static void simd_compare_ne(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) { simd_compare_loop(a, as, b, bs, y, n, vf_ne); }
static void simd_compare_lt(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) { simd_compare_loop(a, as, b, bs, y, n, vf_lt); }
static void simd_compare_le(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) { simd_compare_loop(a, as, b, bs, y, n, vf_le); }
static void simd_compare_gt(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) { simd_compare_loop(a, as, b, bs, y, n, vf_gt); }
static void simd_compare_ge(const float *a, int64_t as, const float *b, int64_t bs, uint8_t *y, int64_t n) { simd_compare_loop(a, as, b, bs, y, n, vf_ge); }

/* ---- where: y = cond ? a : b, any nonzero condition byte is true */
static void simd_where(const uint8_t *cond, int64_t cond_step, const float *a, int64_t a_step, const float *b,
                       int64_t b_step, float *y, int64_t n) {
    float a_copies[VF_LANES], b_copies[VF_LANES];
    uint8_t cond_copies[VF_LANES];
    if (n <= 0)
        return;
    if (cond_step == 0) {
        memset(cond_copies, cond[0], sizeof cond_copies);
        cond = cond_copies;
    }
    if (a_step == 0) {
        vf_store(a_copies, vf_set1(a[0]));
        a = a_copies;
    }
    if (b_step == 0) {
        vf_store(b_copies, vf_set1(b[0]));
        b = b_copies;
    }
    const int64_t c_inc = cond_step ? VF_LANES : 0, a_inc = a_step ? VF_LANES : 0, b_inc = b_step ? VF_LANES : 0;
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES, cond += c_inc, a += a_inc, b += b_inc)
        vf_store(y + i, vf_select(vm_load_bytes(cond), vf_load(a), vf_load(b)));
    if (i < n) {
        int64_t rest = n - i;
        vf_store_part(y + i, vf_select(vm_load_bytes_part(cond, rest), vf_load_part(a, rest), vf_load_part(b, rest)), rest);
    }
}

/* ---- conversions. Half goes through the hardware converter (round to nearest even, NaN stays NaN).
 * bfloat16 uses integer lanes with exactly tb_f32_to_bf16's rounding: NaN -> (bits >> 16) | 0x40,
 * otherwise (bits + 0x7fff + bit16) >> 16 (an overflow of the rounding carries into inf, as it should). */
static void simd_f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES)
        vf_store(y + i, vf_load_f16(x + i));
    if (i < n)
        vf_store_part(y + i, vf_load_f16_part(x + i, n - i), n - i);
}

static void simd_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES)
        vf_store_f16(y + i, vf_load(x + i));
    if (i < n)
        vf_store_f16_part(y + i, vf_load_part(x + i, n - i), n - i);
}

static void simd_bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES)
        vf_store(y + i, vi_as_vf(vi_shl(vi_load_u16(x + i), 16)));
    if (i < n)
        vf_store_part(y + i, vi_as_vf(vi_shl(vi_load_u16_part(x + i, n - i), 16)), n - i);
}

SIMD_INLINE vi simd_bf16_bits(vf v) {
    vi bits = vf_as_vi(v);
    vm nan = vi_gt(vi_and(bits, vi_set1(0x7fffffff)), vi_set1(0x7f800000));
    vi rounded = vi_shr(vi_add(bits, vi_add(vi_set1(0x7fff), vi_and(vi_shr(bits, 16), vi_set1(1)))), 16);
    vi quiet = vi_or(vi_shr(bits, 16), vi_set1(0x40));
    return vi_select(nan, quiet, rounded);
}

static void simd_f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES)
        vi_store_u16(y + i, simd_bf16_bits(vf_load(x + i)));
    if (i < n)
        vi_store_u16_part(y + i, simd_bf16_bits(vf_load_part(x + i, n - i)), n - i);
}

#endif
