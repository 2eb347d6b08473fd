// The elementwise ops of the kernel tables (src/kernels/elementwise.h): tb_unary (TB_UNARY_OP_LIST
// order) and tb_binary (TB_BINARY_OP_LIST order), shared by unary.comp, binary.comp and fused.comp (the
// specialized elementwise chains), so every path computes each op the same way. Needs common.glsl.

// erfc(z) for z >= 0 with relative error below 1.2e-7 (Chebyshev fit from Numerical Recipes, "erfcc")
float tb_erfc_pos(float z) {
    float t = 1.0 / (1.0 + 0.5 * z);
    float poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
                 t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(-z * z + poly);
}

// tanh: an odd Taylor polynomial near 0 (the builtin loses all relative accuracy there on some drivers),
// 1 - 2 / (exp(2|x|) + 1) elsewhere, saturated past 15 (tanh(15) rounds to 1 in f32)
float tb_tanh(float v) {
    if (tb_isnan(v)) return v;
    float a = abs(v);
    if (a < 0.2) {
        float x2 = v * v;
        return v + v * x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0 +
                   x2 * (-1382.0 / 155925.0)))));
    }
    float t = a > 15.0 ? 1.0 : 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    return v < 0.0 ? -t : t;
}

// 1 / (1 + exp(-x)) without overflowing exp for very negative x (keeps tiny results instead of 0)
float tb_sigmoid(float v) {
    if (v >= 0.0) return 1.0 / (1.0 + exp(-v));
    float e = exp(v);
    return e / (1.0 + e);
}

// log with relative accuracy near 1, where the builtin only promises 2^-21 absolute: for x in
// [0.75, 1.5), log x = 2 atanh(u), u = (x - 1) / (x + 1) (x - 1 exact there), |u| < 0.2, as an odd series
float tb_log(float v) {
    if (v >= 0.75 && v < 1.5) {
        float u = (v - 1.0) / (v + 1.0);
        float u2 = u * u;
        return 2.0 * u * (1.0 + u2 * (1.0 / 3.0 + u2 * (1.0 / 5.0 + u2 * (1.0 / 7.0 + u2 * (1.0 / 9.0 +
               u2 * (1.0 / 11.0 + u2 * (1.0 / 13.0)))))));
    }
    return log(v);
}

float tb_unary(uint op, float v, float alpha, float lo, float hi) {
    switch (op) {
    case 0u: return -v;
    case 1u: return abs(v);
    case 2u: return exp(v);
    case 3u: return tb_log(v);
    case 4u: return sqrt(v);
    case 5u: return inversesqrt(v);
    case 6u: return sin(v);
    case 7u: return cos(v);
    case 8u: return tb_tanh(v);
    case 9u: return tb_sigmoid(v);
    case 10u: return tb_isnan(v) ? v : (v > 0.0 ? v : 0.0);
    case 11u: { // exact GELU: x/2 * erfc(-x/sqrt(2))
        if (tb_isnan(v)) return v;
        float z = v * 0.70710678118654752;
        float e = z >= 0.0 ? 2.0 - tb_erfc_pos(z) : tb_erfc_pos(-z);
        return 0.5 * v * e;
    }
    case 12u: { // x/2 * (1 + tanh(u)) = x * sigmoid(2u), without the cancellation of 1 + tanh(u) near -1
        if (tb_isnan(v)) return v;
        float inner = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        return v * tb_sigmoid(2.0 * inner);
    }
    case 13u: return v * tb_sigmoid(v);
    case 14u: return v > 0.0 ? v : alpha * v;
    case 15u: return tb_isnan(v) ? v : (v < lo ? lo : (v > hi ? hi : v));
    }
    return v;
}

bool tb_is_integer(float v) { return floor(v) == v; }
bool tb_is_odd_integer(float v) { return tb_is_integer(v) && abs(mod(v, 2.0)) == 1.0; }

// powf's special cases (C99 F.9.4.4), which GLSL's pow leaves undefined
float tb_pow(float x, float e) {
    if (e == 0.0 || x == 1.0) return 1.0;
    if (tb_isnan(x) || tb_isnan(e)) return x + e;
    float ax = abs(x);
    if (isinf(e)) {
        if (ax == 1.0) return 1.0;
        return (ax > 1.0) == (e > 0.0) ? TB_INF : 0.0;
    }
    bool odd = tb_is_odd_integer(e);
    if (x == 0.0) {
        float r = e > 0.0 ? 0.0 : TB_INF;
        return (odd && tb_signbit(x)) ? -r : r;
    }
    if (isinf(x)) {
        float r = e > 0.0 ? TB_INF : 0.0;
        return (x < 0.0 && odd) ? -r : r;
    }
    if (x < 0.0 && !tb_is_integer(e)) return TB_NAN;
    float r = exp2(e * log2(ax));
    return (x < 0.0 && odd) ? -r : r;
}

float tb_binary(uint op, float u, float v) {
    switch (op) {
    case 0u: return u + v;
    case 1u: return u - v;
    case 2u: return u * v;
    case 3u: return u / v;
    case 4u: return tb_pow(u, v);
    case 5u: return tb_max_nan(u, v);
    case 6u: return tb_min_nan(u, v);
    }
    return u;
}
