// y[i] = a[i] op b[i % b_len] for i < n. op numbering follows TB_BINARY_OP_LIST (src/kernels/elementwise.h).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer InputB { float b[]; };
layout(std430, set = 0, binding = 3) buffer Output { float y[]; };
layout(push_constant) uniform Params { uint n; uint op; uint b_len; float alpha; float lo; float hi; } p;

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

float apply(float u, float v) {
    switch (p.op) {
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

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride)
        y[i] = apply(a[i], b[p.b_len == p.n ? i : i % p.b_len]);
}
