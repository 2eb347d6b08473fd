// RMSNorm over each row of x[rows, len]: y = x * rsqrt(mean(x^2) + eps) * weight (flags & 1: weight
// present). One workgroup per row, rows grid-strided.
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 256u
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weight { float w[]; };
layout(std430, set = 0, binding = 3) buffer Output { float y[]; };
layout(push_constant) uniform Params { uint rows; uint len; uint flags; float eps; } p;

shared float tb_scratch[TB_WG];
#include "reduce.glsl"

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
        uint base = row * p.len;
        float s = 0.0;
        for (uint i = t; i < p.len; i += TB_WG) {
            float v = x[base + i];
            s = fma(v, v, s);
        }
        s = tb_workgroup_sum(s);
        float rstd = 1.0 / sqrt(s / float(p.len) + p.eps);
        for (uint i = t; i < p.len; i += TB_WG) {
            float v = x[base + i] * rstd;
            y[base + i] = (p.flags & 1u) != 0u ? v * w[i] : v;
        }
    }
}
