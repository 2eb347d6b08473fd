// y[i] = x[offset + sum_d index_d(i) * strides[d]] for i < n, where index(i) is i's position in the
// row-major shape (up to 5 dims, the last fastest): a view (slice, permute, expand) made contiguous.
// With row > 0 the output is rows of `row` elements placed at y[r * y_stride + y_col0 + j] (one
// input's block of a cat).
#version 450

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer InputA { float x[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(push_constant) uniform Params {
    uint n; uint offset; uint ndim; uint shape[5]; uint strides[5]; uint row; uint y_stride; uint y_col0;
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uint rest = i, at = p.offset;
        for (int d = int(p.ndim) - 1; d >= 0; d--) {
            uint size = p.shape[d];
            at += (rest % size) * p.strides[d];
            rest /= size;
        }
        y[p.row == 0u ? i : (i / p.row) * p.y_stride + p.y_col0 + i % p.row] = x[at];
    }
}
