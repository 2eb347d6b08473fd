// Query/key preparation of the LLM for T rows of qkv[T, (Hq + 2 Hkv) D] (q heads, k heads, v heads):
// optional per-head RMSNorm of q and k (weights norms = [q_norm D | k_norm D], flags & 1), rotate-half
// RoPE with table[t] = [cos D/2 | sin D/2] (the CPU's table, so angles match bit for bit), q and k
// written back in place, and k and v stored at position pos0 + t of the caches keys / values
// ([Hkv][capacity][D]). One 64-thread workgroup per (row, head), grid-strided.
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 64u
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Table { float table[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Keys { float keys[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Values { float values[]; };
layout(std430, set = 0, binding = 3) buffer Qkv { float qkv[]; };
layout(std430, set = 0, binding = 4) readonly buffer Norms { float norms[]; };
layout(push_constant) uniform Params {
    uint tokens; uint heads; uint kv_heads; uint head_dim; uint capacity; uint pos0; uint flags; float eps; uint stride;
} p;

shared float tb_scratch[TB_WG];
#include "reduce.glsl"

void main() {
    uint t = gl_LocalInvocationID.x;
    uint d = p.head_dim, half_d = d / 2u, per_row = p.heads + 2u * p.kv_heads;
    for (uint item = gl_WorkGroupID.x; item < p.tokens * per_row; item += gl_NumWorkGroups.x) {
        uint row = item / per_row, head = item % per_row;
        uint base = row * p.stride + head * d;
        uint pos = p.pos0 + row;
        if (head >= p.heads + p.kv_heads) { // v: copy into the cache
            uint g = head - p.heads - p.kv_heads;
            for (uint i = t; i < d; i += TB_WG)
                values[(g * p.capacity + pos) * d + i] = qkv[base + i];
            continue;
        }
        bool is_k = head >= p.heads;
        float rstd = 1.0;
        if ((p.flags & 1u) != 0u) {
            float s = 0.0;
            for (uint i = t; i < d; i += TB_WG)
                s = fma(qkv[base + i], qkv[base + i], s);
            s = tb_workgroup_sum(s);
            rstd = 1.0 / sqrt(s / float(d) + p.eps);
        }
        uint norm_base = is_k ? d : 0u;
        for (uint i = t; i < half_d; i += TB_WG) {
            float x0 = qkv[base + i], x1 = qkv[base + i + half_d];
            if ((p.flags & 1u) != 0u) {
                x0 = x0 * rstd * norms[norm_base + i];
                x1 = x1 * rstd * norms[norm_base + i + half_d];
            }
            float c = table[row * d + i], sn = table[row * d + half_d + i];
            float r0 = x0 * c - x1 * sn, r1 = x1 * c + x0 * sn;
            qkv[base + i] = r0;
            qkv[base + i + half_d] = r1;
            if (is_k) {
                uint g = head - p.heads;
                keys[(g * p.capacity + pos) * d + i] = r0;
                keys[(g * p.capacity + pos) * d + i + half_d] = r1;
            }
        }
    }
}
