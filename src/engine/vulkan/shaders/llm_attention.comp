// Causal grouped-query attention of the LLM over the caches keys / values ([Hkv][capacity][D]): for row
// t (position pos = pos0 + t) and query head h (kv head g = h / (Hq / Hkv)), out = softmax over
// positions j in [lo, pos] of scale * q.k_j, times v_j, where lo = pos - window + 1 (window > 0) or 0.
// One 64-thread workgroup per (row, head), grid-strided; positions go in tiles of 64 (one score per
// thread) with an online softmax (running max and sum, the accumulator rescaled per tile), so any
// context length works with fixed shared memory. Each thread accumulates dims i, i + 64, ... (D <= 512).
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 64u
#define MAX_D 512u
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Qkv { float qkv[]; };
layout(std430, set = 0, binding = 1) readonly buffer Keys { float keys[]; };
layout(std430, set = 0, binding = 2) readonly buffer Values { float values[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(push_constant) uniform Params {
    uint tokens; uint heads; uint kv_heads; uint head_dim; uint capacity; uint pos0; uint window; float scale;
    uint stride;
} p;

shared float tb_scratch[TB_WG];
shared float q_shared[MAX_D];
shared float probs[TB_WG];
#include "reduce.glsl"

void main() {
    uint t = gl_LocalInvocationID.x;
    uint d = p.head_dim, group = p.heads / p.kv_heads;
    for (uint item = gl_WorkGroupID.x; item < p.tokens * p.heads; item += gl_NumWorkGroups.x) {
        uint row = item / p.heads, h = item % p.heads, g = h / group;
        uint pos = p.pos0 + row;
        uint lo = (p.window > 0u && pos + 1u > p.window) ? pos + 1u - p.window : 0u;
        for (uint i = t; i < d; i += TB_WG)
            q_shared[i] = qkv[row * p.stride + h * d + i];
        barrier();
        float acc[MAX_D / TB_WG];
        for (uint j = 0u; j < MAX_D / TB_WG; j++)
            acc[j] = 0.0;
        float running_max = -TB_INF, running_sum = 0.0;
        uint cache = g * p.capacity;
        for (uint tile = lo; tile <= pos; tile += TB_WG) {
            uint j = tile + t;
            float score = -TB_INF;
            if (j <= pos) {
                float s = 0.0;
                for (uint i = 0u; i < d; i++)
                    s = fma(q_shared[i], keys[(cache + j) * d + i], s);
                score = s * p.scale;
            }
            float tile_max = tb_workgroup_max(score);
            float new_max = max(running_max, tile_max);
            float rescale = exp(running_max - new_max);
            float prob = j <= pos ? exp(score - new_max) : 0.0;
            probs[t] = prob;
            float tile_sum = tb_workgroup_sum(prob); // its barriers also publish probs[]
            running_sum = running_sum * rescale + tile_sum;
            running_max = new_max;
            uint count = min(TB_WG, pos + 1u - tile);
            for (uint jj = 0u; jj * TB_WG + t < d; jj++) {
                float s = acc[jj] * rescale;
                for (uint r = 0u; r < count; r++)
                    s = fma(probs[r], values[(cache + tile + r) * d + jj * TB_WG + t], s);
                acc[jj] = s;
            }
            barrier(); // probs[] is rewritten by the next tile
        }
        for (uint jj = 0u; jj * TB_WG + t < d; jj++)
            y[row * p.heads * d + h * d + jj * TB_WG + t] = acc[jj] / running_sum;
        barrier(); // q_shared is rewritten by the next item
    }
}
