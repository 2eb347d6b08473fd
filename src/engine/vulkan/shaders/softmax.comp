// softmax (or log_softmax when flags & 1) over each row of x[rows, len]; one workgroup per row,
// rows grid-strided. Three sweeps: max, sum of exp(x - max), write. An all -inf row gives NaN.
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 256u
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float x[]; };
layout(std430, set = 0, binding = 3) buffer Output { float y[]; };
layout(push_constant) uniform Params { uint rows; uint len; uint flags; float eps; } p;

shared float tb_scratch[TB_WG];
#include "reduce.glsl"

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
        uint base = row * p.len;
        float m = -TB_INF;
        for (uint i = t; i < p.len; i += TB_WG)
            m = tb_max_nan(m, x[base + i]);
        m = tb_workgroup_max(m);
        float s = 0.0;
        for (uint i = t; i < p.len; i += TB_WG)
            s += exp(x[base + i] - m);
        s = tb_workgroup_sum(s);
        if ((p.flags & 1u) != 0u) {
            float shift = m + log(s);
            for (uint i = t; i < p.len; i += TB_WG)
                y[base + i] = x[base + i] - shift;
        } else {
            float inv = 1.0 / s;
            for (uint i = t; i < p.len; i += TB_WG)
                y[base + i] = exp(x[base + i] - m) * inv;
        }
    }
}
