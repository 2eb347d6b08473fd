// SwiGLU of the LLM: y[r, i] = silu(a[r, i]) * a[r, L + i] for rows a[R, 2L] (gate half, then up half),
// silu(x) = x / (1 + exp(-x)). Grid-stride over R * L.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(push_constant) uniform Params { uint rows; uint len; } p;

void main() {
    for (uint i = gl_GlobalInvocationID.x; i < p.rows * p.len; i += gl_NumWorkGroups.x * 256u) {
        uint r = i / p.len, c = i % p.len;
        float gate = a[r * 2u * p.len + c];
        y[i] = gate / (1.0 + exp(-gate)) * a[r * 2u * p.len + p.len + c];
    }
}
