// Quantized matmul of the LLM: y[M,N] = a[M,K] @ dequant(W[N,K]).T + bias[N], W in torchburn/quant.h's
// layout read as 32-bit words: int8 (code 8: one byte per weight, scale[n]) or int4 (code 4: two
// weights per byte, element 2j in the low nibble, value nibble - 8, scale[n, k / group]). Each weight is
// dequantized exactly (q * scale) and multiplied in f32, so the result is the W8A32 / W4A32 product up to
// summation order. One 64-thread workgroup per output column (grid-strided); rows go in blocks of 8,
// so every weight is read once per 8 rows (prefill) and once in total for a decode step.
#version 450
#extension GL_GOOGLE_include_directive : require
#define TB_WG 64u
#define ROWS 8u
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(std430, set = 0, binding = 4) readonly buffer Scales { float scales[]; };
// y_stride, y_col0: the output is columns [y_col0, y_col0 + n) of rows y_stride floats apart (a weight
// split by rows runs once per part, each part into its own columns)
layout(push_constant) uniform Params {
    uint m; uint n; uint k; uint code; uint has_bias; uint group; uint y_stride; uint y_col0;
} p;

shared float tb_scratch[TB_WG];
#include "reduce.glsl"

float weight(uint col, uint kk) {
    if (p.code == 8u) {
        uint index = col * p.k + kk;
        return float(bitfieldExtract(int(w[index >> 2u]), int((index & 3u) * 8u), 8)) * scales[col];
    }
    uint byte_index = col * (p.k / 2u) + kk / 2u;
    uint nibble = (w[byte_index >> 2u] >> ((byte_index & 3u) * 8u + (kk & 1u) * 4u)) & 15u;
    return float(int(nibble) - 8) * scales[col * (p.k / p.group) + kk / p.group];
}

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint col = gl_WorkGroupID.x; col < p.n; col += gl_NumWorkGroups.x) {
        for (uint row0 = 0u; row0 < p.m; row0 += ROWS) {
            uint rows = min(ROWS, p.m - row0);
            float acc[ROWS];
            for (uint r = 0u; r < ROWS; r++)
                acc[r] = 0.0;
            for (uint kk = t; kk < p.k; kk += TB_WG) {
                float v = weight(col, kk);
                for (uint r = 0u; r < rows; r++)
                    acc[r] = fma(a[(row0 + r) * p.k + kk], v, acc[r]);
            }
            for (uint r = 0u; r < rows; r++) {
                float s = tb_workgroup_sum(acc[r]);
                if (t == 0u)
                    y[(row0 + r) * p.y_stride + p.y_col0 + col] = p.has_bias != 0u ? s + bias[col] : s;
            }
        }
    }
}
