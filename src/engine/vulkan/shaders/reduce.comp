// Reductions over the middle dim of x viewed as [outer, len, inner] (contiguous):
// y[o * inner + i] = reduce_{r < len} x[(o * len + r) * inner + i]. code: 0 sum, 1 max, 2 min, 4 mean
// (src/kernels/elementwise.h TB_REDUCE_OP_LIST, then the graph's mean); max and min propagate NaN.
// inner == 1 (rows): one workgroup per row, rows grid-strided, a workgroup reduction (reduce.glsl);
// inner > 1: one thread per output, grid-strided, reading len values a stride of inner apart (adjacent
// threads read adjacent values).
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 256u
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float x[]; };
layout(std430, set = 0, binding = 3) buffer Output { float y[]; };
layout(push_constant) uniform Params { uint outer; uint len; uint inner; uint code; } p;

shared float tb_scratch[TB_WG];
#include "reduce.glsl"

// max (code 1) or the max of the negated values (min, code 2): min(x) = -max(-x), NaN kept
float tb_signed(float v) { return p.code == 2u ? -v : v; }

void main() {
    const bool extreme = p.code == 1u || p.code == 2u;
    if (p.inner == 1u) {
        uint t = gl_LocalInvocationID.x;
        for (uint row = gl_WorkGroupID.x; row < p.outer; row += gl_NumWorkGroups.x) {
            uint base = row * p.len;
            float acc = extreme ? -TB_INF : 0.0;
            for (uint r = t; r < p.len; r += TB_WG)
                acc = extreme ? tb_max_nan(acc, tb_signed(x[base + r])) : acc + x[base + r];
            float total = extreme ? tb_signed(tb_workgroup_max(acc)) : tb_workgroup_sum(acc);
            if (t == 0u)
                y[row] = p.code == 4u ? total / float(p.len) : total;
        }
        return;
    }
    uint count = p.outer * p.inner, stride = gl_NumWorkGroups.x * 256u;
    for (uint j = gl_GlobalInvocationID.x; j < count; j += stride) {
        uint o = j / p.inner, i = j - o * p.inner;
        uint at = o * p.len * p.inner + i;
        float acc = extreme ? -TB_INF : 0.0;
        for (uint r = 0u; r < p.len; r++, at += p.inner)
            acc = extreme ? tb_max_nan(acc, tb_signed(x[at])) : acc + x[at];
        float total = extreme ? tb_signed(acc) : acc;
        y[j] = p.code == 4u ? total / float(p.len) : total;
    }
}
