// y[M,N] = a[M,K] @ B + bias[N], B = b[K,N] or (trans_b) b[N,K]. 64x64 output tiles per 16x16
// workgroup, 4x4 outputs per thread (rows ty + 16i, columns tx + 16j), K in steps of 16 through 8 KiB of
// shared memory. Each output sums k in order with fma. Tiles are grid-strided over both dispatch
// dimensions (and the batch over the third), so no dispatch needs more than maxComputeWorkGroupCount.
// variants: w16 (B as 16-bit words: bf16/f16 weights kept 16-bit on the device)
#version 450
#extension GL_GOOGLE_include_directive : require
#ifdef TB_W16
#extension GL_EXT_shader_16bit_storage : require
#endif

layout(local_size_x = 16, local_size_y = 16) in;
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

shared float tile_a[16][64]; // [k][row in tile]
shared float tile_b[16][64]; // [k][column in tile]

void main() {
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
    uint tiles_n = (p.n + 63u) / 64u, tiles_m = (p.m + 63u) / 64u;
    for (uint z = gl_WorkGroupID.z; z < max(p.batch, 1u); z += gl_NumWorkGroups.z) {
    uint a0 = z * p.a_batch, b0 = z * p.b_batch, y0 = z * p.m * p.y_stride;
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
        for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
            float acc[4][4];
            for (uint i = 0u; i < 4u; i++)
                for (uint j = 0u; j < 4u; j++)
                    acc[i][j] = 0.0;
            for (uint k0 = 0u; k0 < p.k; k0 += 16u) {
                for (uint r = 0u; r < 4u; r++) {
                    uint index = tid + 256u * r;
                    uint row = index >> 4u, kk = index & 15u; // consecutive threads read along k
                    uint ga = tm * 64u + row, gk = k0 + kk;
                    tile_a[kk][row] = (ga < p.m && gk < p.k) ? a[a0 + ga * p.k + gk] : 0.0;
                    uint col, kb;
                    if (p.trans_b != 0u) {
                        col = index >> 4u; kb = index & 15u;  // b[N,K]: read along k
                    } else {
                        kb = index >> 6u; col = index & 63u;  // b[K,N]: read along n
                    }
                    uint gc = tn * 64u + col, gkb = k0 + kb;
                    float bv = 0.0;
                    if (gc < p.n && gkb < p.k)
                        bv = p.trans_b != 0u ? load_b(b0 + gc * p.k + gkb) : load_b(b0 + gkb * p.n + gc);
                    tile_b[kb][col] = bv;
                }
                barrier();
                uint kend = min(16u, p.k - k0);
                for (uint kk = 0u; kk < kend; kk++) {
                    float av[4], bw[4];
                    for (uint i = 0u; i < 4u; i++) {
                        av[i] = tile_a[kk][ty + 16u * i];
                        bw[i] = tile_b[kk][tx + 16u * i];
                    }
                    for (uint i = 0u; i < 4u; i++)
                        for (uint j = 0u; j < 4u; j++)
                            acc[i][j] = fma(av[i], bw[j], acc[i][j]);
                }
                barrier();
            }
            for (uint i = 0u; i < 4u; i++) {
                uint row = tm * 64u + ty + 16u * i;
                for (uint j = 0u; j < 4u; j++) {
                    uint col = tn * 64u + tx + 16u * j;
                    if (row < p.m && col < p.n)
                        y[y0 + row * p.y_stride + p.y_col0 + col] = p.has_bias != 0u ? acc[i][j] + bias[col] : acc[i][j];
                }
            }
        }
    }
    }
}
