// y[i] = op(x[i]) for i < n. op numbering follows TB_UNARY_OP_LIST (src/kernels/elementwise.h).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float x[]; };
layout(std430, set = 0, binding = 3) buffer Output { float y[]; };
layout(push_constant) uniform Params { uint n; uint op; uint b_len; float alpha; float lo; float hi; } p;

// erfc(z) for z >= 0 with relative error below 1.2e-7 (Chebyshev fit from Numerical Recipes, "erfcc")
float tb_erfc_pos(float z) {
    float t = 1.0 / (1.0 + 0.5 * z);
    float poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
                 t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(-z * z + poly);
}

float tb_tanh(float v) {
    if (tb_isnan(v)) return v;
    float c = clamp(v, -15.0, 15.0); // tanh(15) rounds to 1 in f32; avoids inf/inf in the builtin
    return tanh(c);
}

float tb_sigmoid(float v) { return 1.0 / (1.0 + exp(-v)); }

float apply(float v) {
    switch (p.op) {
    case 0u: return -v;
    case 1u: return abs(v);
    case 2u: return exp(v);
    case 3u: return log(v);
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
        return v / (1.0 + exp(-2.0 * inner));
    }
    case 13u: return v / (1.0 + exp(-v));
    case 14u: return v > 0.0 ? v : p.alpha * v;
    case 15u: return tb_isnan(v) ? v : (v < p.lo ? p.lo : (v > p.hi ? p.hi : v));
    }
    return v;
}

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride)
        y[i] = apply(x[i]);
}
