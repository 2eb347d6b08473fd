/* Scalar formulas and derivatives of the ops in include/torchburn/op_table.h, one place per op.
 *
 * For op ID: tb_pw_<id>(x, p) computes it in double (the float domain: f16/bf16/f32 results are
 * rounded from it, f64 is exact IEEE double math); SAME and integer binary ops also have
 * tb_pwi_<id> on int64 (wrapping like C unsigned arithmetic, as PyTorch's integer kernels do);
 * tb_pw_grad_<id>(x, y, p) is d op / d x at x with result y (unary), and tb_pwb_grad_<id>_a/_b give
 * the partial derivatives of a binary op. Special values follow PyTorch (NaN propagates through
 * max/min/clamp/relu; sign(NaN) = 0 as torch's (0 < x) - (x < 0)). */
#ifndef TORCHBURN_EAGER_POINTWISE_MATH_H
#define TORCHBURN_EAGER_POINTWISE_MATH_H

#include <math.h>
#include <stdint.h>

#include "torchburn/op_table.h"

#define TB_PW_PI 3.14159265358979323846
#define TB_PW_LN2 0.69314718055994530942
#define TB_PW_LN10 2.30258509299404568402
#define TB_PW_SQRT1_2 0.70710678118654752440
#define TB_PW_2_SQRTPI 1.12837916709551257390

typedef const tb_pw_params *tb_pwp;

static inline double tb_pw_sigmoid_value(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

/* digamma: recurrence to x >= 6 then the asymptotic series; reflection for x < 0. */
static inline double tb_pw_digamma_value(double x) {
    if (x == 0)
        return signbit(x) ? INFINITY : -INFINITY; /* torch: digamma(+-0) = -+inf */
    if (x < 0) {
        if (x == floor(x))
            return NAN;
        return tb_pw_digamma_value(1 - x) - TB_PW_PI / tan(TB_PW_PI * x);
    }
    double result = 0;
    while (x < 6) {
        result -= 1 / x;
        x += 1;
    }
    double f = 1 / (x * x);
    return result + log(x) - 0.5 / x -
           f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
}

static inline double tb_pw_trigamma_value(double x) {
    double sign = 1, result = 0;
    if (x < 0.5) {
        sign = -1;
        double s = sin(TB_PW_PI * x);
        result = -TB_PW_PI * TB_PW_PI / (s * s);
        x = 1 - x;
    }
    for (int i = 0; i < 6; i++, x += 1)
        result += 1 / (x * x);
    double ixx = 1 / (x * x);
    result += (1 + 1 / (2 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x;
    return sign * result;
}

/* erfinv: a rational first guess refined by Newton steps on erf (double accurate). */
static inline double tb_pw_erfinv_value(double y) {
    if (isnan(y) || y < -1 || y > 1)
        return NAN;
    if (y == 1)
        return INFINITY;
    if (y == -1)
        return -INFINITY;
    double w = -log((1 - y) * (1 + y)), x;
    if (w < 5) {
        w -= 2.5;
        double p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w; p = -0.00125372503 + p * w; p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w; p = 1.50140941 + p * w;
        x = p * y;
    } else {
        w = sqrt(w) - 3;
        double p = -0.000200214257;
        p = 0.000100950558 + p * w; p = 0.00134934322 + p * w; p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w; p = -0.0076224613 + p * w; p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w; p = 2.83297682 + p * w;
        x = p * y;
    }
    for (int i = 0; i < 3; i++)
        x -= (erf(x) - y) / (TB_PW_2_SQRTPI * exp(-x * x));
    return x;
}

/* ---- FLOAT unary ---- */
static inline double tb_pw_exp(double x, tb_pwp p) { return exp(x); }
static inline double tb_pw_exp2(double x, tb_pwp p) { return exp2(x); }
static inline double tb_pw_expm1(double x, tb_pwp p) { return expm1(x); }
static inline double tb_pw_log(double x, tb_pwp p) { return log(x); }
static inline double tb_pw_log2(double x, tb_pwp p) { return log2(x); }
static inline double tb_pw_log10(double x, tb_pwp p) { return log10(x); }
static inline double tb_pw_log1p(double x, tb_pwp p) { return log1p(x); }
static inline double tb_pw_sqrt(double x, tb_pwp p) { return sqrt(x); }
static inline double tb_pw_rsqrt(double x, tb_pwp p) { return 1.0 / sqrt(x); }
static inline double tb_pw_sin(double x, tb_pwp p) { return sin(x); }
static inline double tb_pw_cos(double x, tb_pwp p) { return cos(x); }
static inline double tb_pw_tan(double x, tb_pwp p) { return tan(x); }
static inline double tb_pw_asin(double x, tb_pwp p) { return asin(x); }
static inline double tb_pw_acos(double x, tb_pwp p) { return acos(x); }
static inline double tb_pw_atan(double x, tb_pwp p) { return atan(x); }
static inline double tb_pw_sinh(double x, tb_pwp p) { return sinh(x); }
static inline double tb_pw_cosh(double x, tb_pwp p) { return cosh(x); }
static inline double tb_pw_tanh(double x, tb_pwp p) { return tanh(x); }
static inline double tb_pw_asinh(double x, tb_pwp p) { return asinh(x); }
static inline double tb_pw_acosh(double x, tb_pwp p) { return acosh(x); }
static inline double tb_pw_atanh(double x, tb_pwp p) { return atanh(x); }
static inline double tb_pw_sigmoid(double x, tb_pwp p) { return tb_pw_sigmoid_value(x); }
static inline double tb_pw_logit(double x, tb_pwp p) {
    if (p->alpha >= 0) /* eps given: clamp to [eps, 1 - eps] */
        x = x < p->alpha ? p->alpha : x > 1 - p->alpha ? 1 - p->alpha : x;
    return log(x / (1 - x));
}
static inline double tb_pw_erf(double x, tb_pwp p) { return erf(x); }
static inline double tb_pw_erfc(double x, tb_pwp p) { return erfc(x); }
static inline double tb_pw_erfinv(double x, tb_pwp p) { return tb_pw_erfinv_value(x); }
static inline double tb_pw_lgamma(double x, tb_pwp p) { return lgamma(x); }
static inline double tb_pw_digamma(double x, tb_pwp p) { return tb_pw_digamma_value(x); }
static inline double tb_pw_reciprocal(double x, tb_pwp p) { return 1.0 / x; }
static inline double tb_pw_gelu(double x, tb_pwp p) { return 0.5 * x * (1 + erf(x * TB_PW_SQRT1_2)); }
static inline double tb_pw_gelu_tanh(double x, tb_pwp p) {
    double k = sqrt(2 / TB_PW_PI);
    return 0.5 * x * (1 + tanh(k * (x + 0.044715 * x * x * x)));
}
static inline double tb_pw_silu(double x, tb_pwp p) { return x * tb_pw_sigmoid_value(x); }
static inline double tb_pw_softplus(double x, tb_pwp p) {
    return x * p->alpha > p->hi ? x : log1p(exp(x * p->alpha)) / p->alpha;
}
static inline double tb_pw_mish(double x, tb_pwp p) { return x * tanh(x > 20 ? x : log1p(exp(x))); }
static inline double tb_pw_elu(double x, tb_pwp p) { return x > 0 ? x : p->alpha * expm1(x); }
static inline double tb_pw_celu(double x, tb_pwp p) { return x > 0 ? x : p->alpha * expm1(x / p->alpha); }
#define TB_PW_SELU_ALPHA 1.6732632423543772848170429916717
#define TB_PW_SELU_SCALE 1.0507009873554804934193349852946
static inline double tb_pw_selu(double x, tb_pwp p) { return TB_PW_SELU_SCALE * (x > 0 ? x : TB_PW_SELU_ALPHA * expm1(x)); }
static inline double tb_pw_leaky_relu(double x, tb_pwp p) { return x > 0 ? x : x * p->alpha; }
static inline double tb_pw_hardtanh(double x, tb_pwp p) { return x < p->lo ? p->lo : x > p->hi ? p->hi : x; }
static inline double tb_pw_hardsigmoid(double x, tb_pwp p) { return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5; }
static inline double tb_pw_hardswish(double x, tb_pwp p) { return x <= -3 ? 0 : x >= 3 ? x : x * (x + 3) / 6; }
static inline double tb_pw_sinc(double x, tb_pwp p) {
    if (x == 0)
        return 1;
    double px = TB_PW_PI * x;
    return sin(px) / px;
}
static inline double tb_pw_frac(double x, tb_pwp p) { return x - trunc(x); }
static inline double tb_pw_logsigmoid(double x, tb_pwp p) { return x < 0 ? x - log1p(exp(x)) : -log1p(exp(-x)); }
static inline double tb_pw_pow_scalar(double x, tb_pwp p) { return pow(x, p->alpha); }
static inline double tb_pw_softsign(double x, tb_pwp p) { return x / (1 + fabs(x)); }
static inline double tb_pw_tanhshrink(double x, tb_pwp p) { return x - tanh(x); }

static inline double tb_pw_grad_exp(double x, double y, tb_pwp p) { return y; }
static inline double tb_pw_grad_exp2(double x, double y, tb_pwp p) { return y * TB_PW_LN2; }
static inline double tb_pw_grad_expm1(double x, double y, tb_pwp p) { return y + 1; }
static inline double tb_pw_grad_log(double x, double y, tb_pwp p) { return 1 / x; }
static inline double tb_pw_grad_log2(double x, double y, tb_pwp p) { return 1 / (x * TB_PW_LN2); }
static inline double tb_pw_grad_log10(double x, double y, tb_pwp p) { return 1 / (x * TB_PW_LN10); }
static inline double tb_pw_grad_log1p(double x, double y, tb_pwp p) { return 1 / (1 + x); }
static inline double tb_pw_grad_sqrt(double x, double y, tb_pwp p) { return 0.5 / y; }
static inline double tb_pw_grad_rsqrt(double x, double y, tb_pwp p) { return -0.5 * y * y * y; }
static inline double tb_pw_grad_sin(double x, double y, tb_pwp p) { return cos(x); }
static inline double tb_pw_grad_cos(double x, double y, tb_pwp p) { return -sin(x); }
static inline double tb_pw_grad_tan(double x, double y, tb_pwp p) { return 1 + y * y; }
static inline double tb_pw_grad_asin(double x, double y, tb_pwp p) { return 1 / sqrt(1 - x * x); }
static inline double tb_pw_grad_acos(double x, double y, tb_pwp p) { return -1 / sqrt(1 - x * x); }
static inline double tb_pw_grad_atan(double x, double y, tb_pwp p) { return 1 / (1 + x * x); }
static inline double tb_pw_grad_sinh(double x, double y, tb_pwp p) { return cosh(x); }
static inline double tb_pw_grad_cosh(double x, double y, tb_pwp p) { return sinh(x); }
static inline double tb_pw_grad_tanh(double x, double y, tb_pwp p) { return 1 - y * y; }
static inline double tb_pw_grad_asinh(double x, double y, tb_pwp p) { return 1 / sqrt(x * x + 1); }
static inline double tb_pw_grad_acosh(double x, double y, tb_pwp p) { return 1 / sqrt(x * x - 1); }
static inline double tb_pw_grad_atanh(double x, double y, tb_pwp p) { return 1 / (1 - x * x); }
static inline double tb_pw_grad_sigmoid(double x, double y, tb_pwp p) { return y * (1 - y); }
static inline double tb_pw_grad_logit(double x, double y, tb_pwp p) {
    if (p->alpha >= 0 && (x < p->alpha || x > 1 - p->alpha))
        return 0;
    return 1 / (x * (1 - x));
}
static inline double tb_pw_grad_erf(double x, double y, tb_pwp p) { return TB_PW_2_SQRTPI * exp(-x * x); }
static inline double tb_pw_grad_erfc(double x, double y, tb_pwp p) { return -TB_PW_2_SQRTPI * exp(-x * x); }
static inline double tb_pw_grad_erfinv(double x, double y, tb_pwp p) { return 0.5 * sqrt(TB_PW_PI) * exp(y * y); }
static inline double tb_pw_grad_lgamma(double x, double y, tb_pwp p) { return tb_pw_digamma_value(x); }
static inline double tb_pw_grad_digamma(double x, double y, tb_pwp p) { return tb_pw_trigamma_value(x); }
static inline double tb_pw_grad_reciprocal(double x, double y, tb_pwp p) { return -y * y; }
static inline double tb_pw_grad_gelu(double x, double y, tb_pwp p) {
    return 0.5 * (1 + erf(x * TB_PW_SQRT1_2)) + x * exp(-0.5 * x * x) / sqrt(2 * TB_PW_PI);
}
static inline double tb_pw_grad_gelu_tanh(double x, double y, tb_pwp p) {
    double k = sqrt(2 / TB_PW_PI), inner = k * (x + 0.044715 * x * x * x), t = tanh(inner);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}
static inline double tb_pw_grad_silu(double x, double y, tb_pwp p) {
    double s = tb_pw_sigmoid_value(x);
    return s * (1 + x * (1 - s));
}
static inline double tb_pw_grad_softplus(double x, double y, tb_pwp p) {
    return x * p->alpha > p->hi ? 1 : tb_pw_sigmoid_value(x * p->alpha);
}
static inline double tb_pw_grad_mish(double x, double y, tb_pwp p) {
    double sp = x > 20 ? x : log1p(exp(x)), t = tanh(sp);
    return t + x * (1 - t * t) * tb_pw_sigmoid_value(x);
}
static inline double tb_pw_grad_elu(double x, double y, tb_pwp p) { return x > 0 ? 1 : p->alpha * exp(x); }
static inline double tb_pw_grad_celu(double x, double y, tb_pwp p) { return x > 0 ? 1 : exp(x / p->alpha); }
static inline double tb_pw_grad_selu(double x, double y, tb_pwp p) {
    return x > 0 ? TB_PW_SELU_SCALE : TB_PW_SELU_SCALE * TB_PW_SELU_ALPHA * exp(x);
}
static inline double tb_pw_grad_leaky_relu(double x, double y, tb_pwp p) { return x > 0 ? 1 : p->alpha; }
static inline double tb_pw_grad_hardtanh(double x, double y, tb_pwp p) { return x > p->lo && x < p->hi ? 1 : 0; }
static inline double tb_pw_grad_hardsigmoid(double x, double y, tb_pwp p) { return x > -3 && x < 3 ? 1.0 / 6 : 0; }
static inline double tb_pw_grad_hardswish(double x, double y, tb_pwp p) { return x < -3 ? 0 : x <= 3 ? x / 3 + 0.5 : 1; }
static inline double tb_pw_grad_sinc(double x, double y, tb_pwp p) {
    if (x == 0)
        return 0;
    double px = TB_PW_PI * x;
    return (cos(px) * px - sin(px)) / (px * x);
}
static inline double tb_pw_grad_frac(double x, double y, tb_pwp p) { return 1; }
static inline double tb_pw_grad_logsigmoid(double x, double y, tb_pwp p) { return tb_pw_sigmoid_value(-x); }
static inline double tb_pw_grad_pow_scalar(double x, double y, tb_pwp p) {
    return p->alpha == 0 ? 0 : p->alpha * pow(x, p->alpha - 1);
}
static inline double tb_pw_grad_softsign(double x, double y, tb_pwp p) { return 1 / ((1 + fabs(x)) * (1 + fabs(x))); }
static inline double tb_pw_grad_tanhshrink(double x, double y, tb_pwp p) { double t = tanh(x); return t * t; }

/* ---- SAME unary (float domain and int64) ---- */
static inline double tb_pw_neg(double x, tb_pwp p) { return -x; }
static inline double tb_pw_abs(double x, tb_pwp p) { return fabs(x); }
static inline double tb_pw_sign(double x, tb_pwp p) { return (double)((0 < x) - (x < 0)); }
static inline double tb_pw_sgn(double x, tb_pwp p) { return (double)((0 < x) - (x < 0)); }
static inline double tb_pw_floor(double x, tb_pwp p) { return floor(x); }
static inline double tb_pw_ceil(double x, tb_pwp p) { return ceil(x); }
static inline double tb_pw_round(double x, tb_pwp p) {
    if (p->alpha == 0)
        return nearbyint(x);
    double scale = pow(10.0, p->alpha);
    return nearbyint(x * scale) / scale;
}
static inline double tb_pw_trunc(double x, tb_pwp p) { return trunc(x); }
static inline double tb_pw_relu(double x, tb_pwp p) { return x > 0 || isnan(x) ? x : 0; }
static inline double tb_pw_square(double x, tb_pwp p) { return x * x; }
static inline double tb_pw_clamp(double x, tb_pwp p) {
    if (isnan(x))
        return x;
    double r = x < p->lo ? p->lo : x;
    return r > p->hi ? p->hi : r;
}
static inline double tb_pw_positive(double x, tb_pwp p) { return x; }
static inline double tb_pw_bitwise_not(double x, tb_pwp p) { return NAN; } /* refused for floats */
static inline double tb_pw_nan_to_num(double x, tb_pwp p) {
    return isnan(x) ? p->alpha : x == INFINITY ? p->hi : x == -INFINITY ? p->lo : x;
}

static inline int64_t tb_pwi_neg(int64_t x, tb_pwp p) { return (int64_t)(0 - (uint64_t)x); }
static inline int64_t tb_pwi_abs(int64_t x, tb_pwp p) { return x < 0 ? (int64_t)(0 - (uint64_t)x) : x; }
static inline int64_t tb_pwi_sign(int64_t x, tb_pwp p) { return (0 < x) - (x < 0); }
static inline int64_t tb_pwi_sgn(int64_t x, tb_pwp p) { return (0 < x) - (x < 0); }
static inline int64_t tb_pwi_floor(int64_t x, tb_pwp p) { return x; }
static inline int64_t tb_pwi_ceil(int64_t x, tb_pwp p) { return x; }
static inline int64_t tb_pwi_round(int64_t x, tb_pwp p) { return x; }
static inline int64_t tb_pwi_trunc(int64_t x, tb_pwp p) { return x; }
static inline int64_t tb_pwi_relu(int64_t x, tb_pwp p) { return x > 0 ? x : 0; }
static inline int64_t tb_pwi_square(int64_t x, tb_pwp p) { return (int64_t)((uint64_t)x * (uint64_t)x); }
static inline int64_t tb_pwi_clamp(int64_t x, tb_pwp p) {
    int64_t r = (double)x < p->lo ? (int64_t)p->lo : x;
    return (double)r > p->hi ? (int64_t)p->hi : r;
}
static inline int64_t tb_pwi_positive(int64_t x, tb_pwp p) { return x; }
static inline int64_t tb_pwi_bitwise_not(int64_t x, tb_pwp p) { return ~x; }
static inline int64_t tb_pwi_nan_to_num(int64_t x, tb_pwp p) { return x; }

static inline double tb_pw_grad_neg(double x, double y, tb_pwp p) { return -1; }
static inline double tb_pw_grad_abs(double x, double y, tb_pwp p) { return (double)((0 < x) - (x < 0)); }
static inline double tb_pw_grad_sign(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_sgn(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_floor(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_ceil(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_round(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_trunc(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_relu(double x, double y, tb_pwp p) { return y > 0 ? 1 : 0; }
static inline double tb_pw_grad_square(double x, double y, tb_pwp p) { return 2 * x; }
static inline double tb_pw_grad_clamp(double x, double y, tb_pwp p) { return x >= p->lo && x <= p->hi ? 1 : 0; }
static inline double tb_pw_grad_positive(double x, double y, tb_pwp p) { return 1; }
static inline double tb_pw_grad_bitwise_not(double x, double y, tb_pwp p) { return 0; }
static inline double tb_pw_grad_nan_to_num(double x, double y, tb_pwp p) { return isfinite(x) ? 1 : 0; }

/* ---- TEST unary (bool results) ---- */
static inline int tb_pwt_isnan(double x) { return isnan(x); }
static inline int tb_pwt_isinf(double x) { return isinf(x); }
static inline int tb_pwt_isfinite(double x) { return isfinite(x); }
static inline int tb_pwt_isposinf(double x) { return x == INFINITY; }
static inline int tb_pwt_isneginf(double x) { return x == -INFINITY; }
static inline int tb_pwt_signbit(double x) { return signbit(x) != 0; }
static inline int tb_pwt_logical_not(double x) { return x == 0; }

/* ---- binary, float domain ---- */
static inline double tb_pwb_add(double a, double b, tb_pwp p) { return a + p->alpha * b; }
static inline double tb_pwb_sub(double a, double b, tb_pwp p) { return a - p->alpha * b; }
static inline double tb_pwb_mul(double a, double b, tb_pwp p) { return a * b; }
static inline double tb_pwb_maximum(double a, double b, tb_pwp p) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static inline double tb_pwb_minimum(double a, double b, tb_pwp p) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }
static inline double tb_pwb_fmax(double a, double b, tb_pwp p) { return fmax(a, b); }
static inline double tb_pwb_fmin(double a, double b, tb_pwp p) { return fmin(a, b); }
static inline double tb_pwb_floor_divide(double a, double b, tb_pwp p) {
    if (b == 0)
        return a / b;
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0))
        div -= 1;
    if (div == 0)
        return copysign(0.0, a / b);
    double floordiv = floor(div);
    if (div - floordiv > 0.5)
        floordiv += 1;
    return floordiv;
}
static inline double tb_pwb_remainder(double a, double b, tb_pwp p) {
    double mod = fmod(a, b);
    if (mod != 0 && (b < 0) != (mod < 0))
        mod += b;
    return mod;
}
static inline double tb_pwb_fmod(double a, double b, tb_pwp p) { return fmod(a, b); }
static inline double tb_pwb_pow(double a, double b, tb_pwp p) { return pow(a, b); }
static inline double tb_pwb_div(double a, double b, tb_pwp p) { return a / b; }
static inline double tb_pwb_atan2(double a, double b, tb_pwp p) { return atan2(a, b); }
static inline double tb_pwb_hypot(double a, double b, tb_pwp p) { return hypot(a, b); }
static inline double tb_pwb_copysign(double a, double b, tb_pwp p) { return copysign(a, b); }
static inline double tb_pwb_xlogy(double a, double b, tb_pwp p) {
    if (isnan(b))
        return NAN;
    return a == 0 ? 0 : a * log(b);
}
static inline double tb_pwb_logaddexp(double a, double b, tb_pwp p) {
    if (isinf(a) && a == b)
        return a;
    double m = a > b ? a : b;
    if (isnan(a) || isnan(b))
        return NAN;
    return m + log1p(exp(-fabs(a - b)));
}
static inline double tb_pwb_nextafter(double a, double b, tb_pwp p) { return nextafter(a, b); }
static inline double tb_pwb_eq(double a, double b, tb_pwp p) { return a == b; }
static inline double tb_pwb_ne(double a, double b, tb_pwp p) { return a != b; }
static inline double tb_pwb_lt(double a, double b, tb_pwp p) { return a < b; }
static inline double tb_pwb_le(double a, double b, tb_pwp p) { return a <= b; }
static inline double tb_pwb_gt(double a, double b, tb_pwp p) { return a > b; }
static inline double tb_pwb_ge(double a, double b, tb_pwp p) { return a >= b; }
static inline double tb_pwb_logical_and(double a, double b, tb_pwp p) { return a != 0 && b != 0; }
static inline double tb_pwb_logical_or(double a, double b, tb_pwp p) { return a != 0 || b != 0; }
static inline double tb_pwb_logical_xor(double a, double b, tb_pwp p) { return (a != 0) != (b != 0); }
static inline double tb_pwb_bitwise_and(double a, double b, tb_pwp p) { return NAN; }
static inline double tb_pwb_bitwise_or(double a, double b, tb_pwp p) { return NAN; }
static inline double tb_pwb_bitwise_xor(double a, double b, tb_pwp p) { return NAN; }
static inline double tb_pwb_bitwise_left_shift(double a, double b, tb_pwp p) { return NAN; }
static inline double tb_pwb_bitwise_right_shift(double a, double b, tb_pwp p) { return NAN; }

/* ---- binary, int64 domain (integral and bool dtypes). Division by zero is reported by the caller
 * (it checks b before calling floor_divide / remainder / fmod). ---- */
static inline int64_t tb_pwbi_add(int64_t a, int64_t b, tb_pwp p) {
    return (int64_t)((uint64_t)a + (uint64_t)((int64_t)p->alpha * b));
}
static inline int64_t tb_pwbi_sub(int64_t a, int64_t b, tb_pwp p) {
    return (int64_t)((uint64_t)a - (uint64_t)((int64_t)p->alpha * b));
}
static inline int64_t tb_pwbi_mul(int64_t a, int64_t b, tb_pwp p) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t tb_pwbi_maximum(int64_t a, int64_t b, tb_pwp p) { return a > b ? a : b; }
static inline int64_t tb_pwbi_minimum(int64_t a, int64_t b, tb_pwp p) { return a < b ? a : b; }
static inline int64_t tb_pwbi_fmax(int64_t a, int64_t b, tb_pwp p) { return a > b ? a : b; }
static inline int64_t tb_pwbi_fmin(int64_t a, int64_t b, tb_pwp p) { return a < b ? a : b; }
static inline int64_t tb_pwbi_floor_divide(int64_t a, int64_t b, tb_pwp p) {
    if (b == -1)
        return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t tb_pwbi_remainder(int64_t a, int64_t b, tb_pwp p) {
    if (b == -1)
        return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t tb_pwbi_fmod(int64_t a, int64_t b, tb_pwp p) { return b == -1 ? 0 : a % b; }
static inline int64_t tb_pwbi_pow(int64_t a, int64_t b, tb_pwp p) {
    if (b < 0)
        return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t result = 1, base = (uint64_t)a;
    while (b) {
        if (b & 1)
            result *= base;
        base *= base;
        b >>= 1;
    }
    return (int64_t)result;
}
static inline int64_t tb_pwbi_eq(int64_t a, int64_t b, tb_pwp p) { return a == b; }
static inline int64_t tb_pwbi_ne(int64_t a, int64_t b, tb_pwp p) { return a != b; }
static inline int64_t tb_pwbi_lt(int64_t a, int64_t b, tb_pwp p) { return a < b; }
static inline int64_t tb_pwbi_le(int64_t a, int64_t b, tb_pwp p) { return a <= b; }
static inline int64_t tb_pwbi_gt(int64_t a, int64_t b, tb_pwp p) { return a > b; }
static inline int64_t tb_pwbi_ge(int64_t a, int64_t b, tb_pwp p) { return a >= b; }
static inline int64_t tb_pwbi_logical_and(int64_t a, int64_t b, tb_pwp p) { return a != 0 && b != 0; }
static inline int64_t tb_pwbi_logical_or(int64_t a, int64_t b, tb_pwp p) { return a != 0 || b != 0; }
static inline int64_t tb_pwbi_logical_xor(int64_t a, int64_t b, tb_pwp p) { return (a != 0) != (b != 0); }
static inline int64_t tb_pwbi_bitwise_and(int64_t a, int64_t b, tb_pwp p) { return a & b; }
static inline int64_t tb_pwbi_bitwise_or(int64_t a, int64_t b, tb_pwp p) { return a | b; }
static inline int64_t tb_pwbi_bitwise_xor(int64_t a, int64_t b, tb_pwp p) { return a ^ b; }
static inline int64_t tb_pwbi_bitwise_left_shift(int64_t a, int64_t b, tb_pwp p) {
    return b < 0 || b >= 64 ? 0 : (int64_t)((uint64_t)a << b);
}
static inline int64_t tb_pwbi_bitwise_right_shift(int64_t a, int64_t b, tb_pwp p) {
    return b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b;
}
/* float-domain-only ops never run on int64 (FDIV promotes to float first) */
static inline int64_t tb_pwbi_div(int64_t a, int64_t b, tb_pwp p) { return 0; }
static inline int64_t tb_pwbi_atan2(int64_t a, int64_t b, tb_pwp p) { return 0; }
static inline int64_t tb_pwbi_hypot(int64_t a, int64_t b, tb_pwp p) { return 0; }
static inline int64_t tb_pwbi_copysign(int64_t a, int64_t b, tb_pwp p) { return 0; }
static inline int64_t tb_pwbi_xlogy(int64_t a, int64_t b, tb_pwp p) { return 0; }
static inline int64_t tb_pwbi_logaddexp(int64_t a, int64_t b, tb_pwp p) { return 0; }
static inline int64_t tb_pwbi_nextafter(int64_t a, int64_t b, tb_pwp p) { return 0; }

/* ---- binary derivatives: d/da and d/db at (a, b) with result y ---- */
static inline double tb_pwb_grad_add_a(double a, double b, double y, tb_pwp p) { return 1; }
static inline double tb_pwb_grad_add_b(double a, double b, double y, tb_pwp p) { return p->alpha; }
static inline double tb_pwb_grad_sub_a(double a, double b, double y, tb_pwp p) { return 1; }
static inline double tb_pwb_grad_sub_b(double a, double b, double y, tb_pwp p) { return -p->alpha; }
static inline double tb_pwb_grad_mul_a(double a, double b, double y, tb_pwp p) { return b; }
static inline double tb_pwb_grad_mul_b(double a, double b, double y, tb_pwp p) { return a; }
static inline double tb_pwb_grad_div_a(double a, double b, double y, tb_pwp p) { return 1 / b; }
static inline double tb_pwb_grad_div_b(double a, double b, double y, tb_pwp p) { return -a / (b * b); }
/* max/min: ties split the gradient evenly, as PyTorch does */
static inline double tb_pwb_grad_maximum_a(double a, double b, double y, tb_pwp p) { return a > b ? 1 : a == b ? 0.5 : 0; }
static inline double tb_pwb_grad_maximum_b(double a, double b, double y, tb_pwp p) { return b > a ? 1 : a == b ? 0.5 : 0; }
static inline double tb_pwb_grad_minimum_a(double a, double b, double y, tb_pwp p) { return a < b ? 1 : a == b ? 0.5 : 0; }
static inline double tb_pwb_grad_minimum_b(double a, double b, double y, tb_pwp p) { return b < a ? 1 : a == b ? 0.5 : 0; }
static inline double tb_pwb_grad_fmax_a(double a, double b, double y, tb_pwp p) { return a >= b || isnan(b) ? 1 : 0; }
static inline double tb_pwb_grad_fmax_b(double a, double b, double y, tb_pwp p) { return !(a >= b || isnan(b)) ? 1 : 0; }
static inline double tb_pwb_grad_fmin_a(double a, double b, double y, tb_pwp p) { return a <= b || isnan(b) ? 1 : 0; }
static inline double tb_pwb_grad_fmin_b(double a, double b, double y, tb_pwp p) { return !(a <= b || isnan(b)) ? 1 : 0; }
static inline double tb_pwb_grad_floor_divide_a(double a, double b, double y, tb_pwp p) { return 0; }
static inline double tb_pwb_grad_floor_divide_b(double a, double b, double y, tb_pwp p) { return 0; }
static inline double tb_pwb_grad_remainder_a(double a, double b, double y, tb_pwp p) { return 1; }
static inline double tb_pwb_grad_remainder_b(double a, double b, double y, tb_pwp p) { return -floor(a / b); }
static inline double tb_pwb_grad_fmod_a(double a, double b, double y, tb_pwp p) { return 1; }
static inline double tb_pwb_grad_fmod_b(double a, double b, double y, tb_pwp p) { return -trunc(a / b); }
static inline double tb_pwb_grad_pow_a(double a, double b, double y, tb_pwp p) { return b == 0 ? 0 : b * pow(a, b - 1); }
static inline double tb_pwb_grad_pow_b(double a, double b, double y, tb_pwp p) {
    return (a == 0 && b >= 0) ? 0 : y * log(a);
}
static inline double tb_pwb_grad_atan2_a(double a, double b, double y, tb_pwp p) { return b / (a * a + b * b); }
static inline double tb_pwb_grad_atan2_b(double a, double b, double y, tb_pwp p) { return -a / (a * a + b * b); }
static inline double tb_pwb_grad_hypot_a(double a, double b, double y, tb_pwp p) { return a / y; }
static inline double tb_pwb_grad_hypot_b(double a, double b, double y, tb_pwp p) { return b / y; }
static inline double tb_pwb_grad_copysign_a(double a, double b, double y, tb_pwp p) {
    return a == 0 ? 0 : (signbit(a) == signbit(b) ? 1 : -1);
}
static inline double tb_pwb_grad_copysign_b(double a, double b, double y, tb_pwp p) { return 0; }
static inline double tb_pwb_grad_xlogy_a(double a, double b, double y, tb_pwp p) {
    return (a == 0 && !isnan(b)) ? 0 : log(b);
}
static inline double tb_pwb_grad_xlogy_b(double a, double b, double y, tb_pwp p) { return (a == 0 && !isnan(b)) ? 0 : a / b; }
static inline double tb_pwb_grad_logaddexp_a(double a, double b, double y, tb_pwp p) { return 1 / (1 + exp(b - a)); }
static inline double tb_pwb_grad_logaddexp_b(double a, double b, double y, tb_pwp p) { return 1 / (1 + exp(a - b)); }
static inline double tb_pwb_grad_nextafter_a(double a, double b, double y, tb_pwp p) { return 1; } /* as torch */
static inline double tb_pwb_grad_nextafter_b(double a, double b, double y, tb_pwp p) { return 0; }

#endif
