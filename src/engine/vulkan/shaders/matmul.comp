// y[M,N] = a[M,K] @ B + bias[N], B = b[K,N] or (trans_b) b[N,K]. 16x16 output tiles, K in steps of 16
// through shared memory (2 KiB); tiles are grid-strided over both dispatch dimensions.
#version 450

layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer InputB { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(push_constant) uniform Params { uint m; uint n; uint k; uint trans_b; uint has_bias; } p;

shared float tile_a[16][16]; // [row in tile][k]
shared float tile_b[16][16]; // [k][col in tile]

void main() {
    uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
    uint tiles_n = (p.n + 15u) / 16u, tiles_m = (p.m + 15u) / 16u;
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
        for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
            uint row = tm * 16u + ty, col = tn * 16u + tx;
            float acc = 0.0;
            for (uint k0 = 0u; k0 < p.k; k0 += 16u) {
                uint ka = k0 + tx, kb = k0 + ty;
                tile_a[ty][tx] = (row < p.m && ka < p.k) ? a[row * p.k + ka] : 0.0;
                float bv = 0.0;
                if (col < p.n && kb < p.k)
                    bv = p.trans_b != 0u ? b[col * p.k + kb] : b[kb * p.n + col];
                tile_b[ty][tx] = bv;
                barrier();
                uint kend = min(16u, p.k - k0);
                for (uint kk = 0u; kk < kend; kk++)
                    acc = fma(tile_a[ty][kk], tile_b[kk][tx], acc);
                barrier();
            }
            if (row < p.m && col < p.n)
                y[row * p.n + col] = p.has_bias != 0u ? acc + bias[col] : acc;
        }
    }
}
