// Matrix-vector form of matmul for few rows (M <= 4, the decode shape): y[M,N] = a[M,K] @ B + bias[N].
// trans_b (B = b[N,K], nn.Linear's layout): one 64-thread workgroup per output column, each thread
// summing a strided slice of K, then a shared-memory tree; reads along K are coalesced.
// Otherwise (B = b[K,N]): one thread per column summing K in order; reads along N are coalesced.
// Columns are grid-strided; batched products over the third dispatch dimension.
// variants: w16 (B as 16-bit words: bf16/f16 weights kept 16-bit on the device)
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef TB_W16
#extension GL_EXT_shader_16bit_storage : require
#endif
#define TB_WG 64u
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float a[]; };
#ifdef TB_W16
layout(std430, set = 0, binding = 1) readonly buffer InputB { uint16_t b[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer InputB { float b[]; };
#endif
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
// y_stride, y_col0: the output is columns [y_col0, y_col0 + n) of rows y_stride floats apart
// batch (0 or 1: one product), a_batch / b_batch: elements between consecutive A / B matrices (b_batch 0:
// one B for all); product z writes rows from z * m * y_stride
layout(push_constant) uniform Params { uint m; uint n; uint k; uint trans_b; uint has_bias; uint y_stride; uint y_col0;
                                      uint b_format; uint batch; uint a_batch; uint b_batch; } p;
#include "weights16.glsl"

shared float tb_scratch[TB_WG];
#include "reduce.glsl"

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint z = gl_WorkGroupID.z; z < max(p.batch, 1u); z += gl_NumWorkGroups.z) {
    uint a0 = z * p.a_batch, b0 = z * p.b_batch, y0 = z * p.m * p.y_stride;
    if (p.trans_b != 0u) {
        for (uint col = gl_WorkGroupID.x; col < p.n; col += gl_NumWorkGroups.x) {
            for (uint row = 0u; row < p.m; row++) {
                float s = 0.0;
                for (uint kk = t; kk < p.k; kk += TB_WG)
                    s = fma(a[a0 + row * p.k + kk], load_b(b0 + col * p.k + kk), s);
                s = tb_workgroup_sum(s);
                if (t == 0u)
                    y[y0 + row * p.y_stride + p.y_col0 + col] = p.has_bias != 0u ? s + bias[col] : s;
            }
        }
    } else {
        for (uint col = gl_GlobalInvocationID.x; col < p.n; col += gl_NumWorkGroups.x * TB_WG) {
            for (uint row = 0u; row < p.m; row++) {
                float s = 0.0;
                for (uint kk = 0u; kk < p.k; kk++)
                    s = fma(a[a0 + row * p.k + kk], load_b(b0 + kk * p.n + col), s);
                y[y0 + row * p.y_stride + p.y_col0 + col] = p.has_bias != 0u ? s + bias[col] : s;
            }
        }
    }
    }
}
