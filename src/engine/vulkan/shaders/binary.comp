// y[i] = a[i] op b[i % b_len] for i < n. op numbering follows TB_BINARY_OP_LIST (src/kernels/elementwise.h).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "elementwise.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer InputB { float b[]; };
layout(std430, set = 0, binding = 3) buffer Output { float y[]; };
layout(push_constant) uniform Params { uint n; uint op; uint b_len; float alpha; float lo; float hi; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride)
        y[i] = tb_binary(p.op, a[i], b[p.b_len == p.n ? i : i % p.b_len]);
}
