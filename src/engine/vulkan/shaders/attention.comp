// Scaled dot-product attention of compiled graphs over contiguous q [B, Hq, Tq, D], k [B, Hkv, Tk, D],
// v [B, Hkv, Tk, Dv] into y [B, Hq, Tq, Dv] (grouped heads: query head h reads kv head h / (Hq / Hkv)):
// y[b, h, i] = softmax_j(scale * q_i . k_j + mask[b, h, i, j]) v_j over keys j < Tk (j <= i when
// causal, top-left aligned). The additive float mask (flags & 2) is read through its strides (0
// broadcasts). One 64-thread workgroup per query row (grid-strided); keys in tiles of 64 with an online
// softmax (running max and sum, the accumulator rescaled per tile), so any Tk fits fixed shared memory.
// Masked keys (-inf) weigh 0 and a row with every key masked gives 0, as the CPU kernel (and torch).
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 64u
#define MAX_D 512u
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Query { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer Keys { float k[]; };
layout(std430, set = 0, binding = 2) readonly buffer Values { float v[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(std430, set = 0, binding = 4) readonly buffer Mask { float mask[]; };
layout(push_constant) uniform Params {
    uint batch; uint q_heads; uint kv_heads; uint q_len; uint kv_len; uint head_dim; uint value_dim; uint flags;
    float scale; uint mask_strides[4];
} p;

shared float tb_scratch[TB_WG];
shared float q_shared[MAX_D];
shared float probs[TB_WG];
#include "reduce.glsl"

void main() {
    uint t = gl_LocalInvocationID.x;
    uint d = p.head_dim, dv = p.value_dim, group = p.q_heads / p.kv_heads;
    uint rows = p.batch * p.q_heads * p.q_len;
    for (uint item = gl_WorkGroupID.x; item < rows; item += gl_NumWorkGroups.x) {
        uint i = item % p.q_len, bh = item / p.q_len, h = bh % p.q_heads, b = bh / p.q_heads;
        uint kv = b * p.kv_heads + h / group;
        uint end = (p.flags & 1u) != 0u ? min(i + 1u, p.kv_len) : p.kv_len;
        for (uint c = t; c < d; c += TB_WG)
            q_shared[c] = q[item * d + c];
        barrier();
        float acc[MAX_D / TB_WG];
        for (uint jj = 0u; jj < MAX_D / TB_WG; jj++)
            acc[jj] = 0.0;
        float running_max = -TB_INF, running_sum = 0.0;
        uint mask_row = b * p.mask_strides[0] + h * p.mask_strides[1] + i * p.mask_strides[2];
        for (uint tile = 0u; tile < end; tile += TB_WG) {
            uint j = tile + t;
            float score = -TB_INF;
            if (j < end) {
                float s = 0.0;
                for (uint c = 0u; c < d; c++)
                    s = fma(q_shared[c], k[(kv * p.kv_len + j) * d + c], s);
                score = s * p.scale;
                if ((p.flags & 2u) != 0u)
                    score += mask[mask_row + j * p.mask_strides[3]];
            }
            float new_max = tb_max_nan(running_max, tb_workgroup_max(score));
            // nothing seen yet (or all masked): no rescale of the zero accumulator, no exp(-inf + inf)
            float rescale = running_max == -TB_INF ? 0.0 : exp(running_max - new_max);
            float prob = score == -TB_INF ? 0.0 : exp(score - new_max);
            probs[t] = prob;
            float tile_sum = tb_workgroup_sum(prob); // its barriers also publish probs[]
            running_sum = running_sum * rescale + tile_sum;
            running_max = new_max;
            uint count = min(TB_WG, end - tile);
            for (uint jj = 0u; jj * TB_WG + t < dv; jj++) {
                float s = acc[jj] * rescale;
                for (uint r = 0u; r < count; r++)
                    s = fma(probs[r], v[(kv * p.kv_len + tile + r) * dv + jj * TB_WG + t], s);
                acc[jj] = s;
            }
            barrier(); // probs[] is rewritten by the next tile
        }
        for (uint jj = 0u; jj * TB_WG + t < dv; jj++)
            y[item * dv + jj * TB_WG + t] = running_sum > 0.0 ? acc[jj] / running_sum : 0.0;
        barrier(); // q_shared is rewritten by the next item
    }
}
