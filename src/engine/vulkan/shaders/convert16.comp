// Between f32 and a 16-bit format for n elements (p.format 1 = bfloat16, 2 = IEEE half):
//   p.mode 0 widens the 16-bit words in w_in to f32 y (exact);
//   p.mode 1 narrows f32 x to the 16-bit words w_out, rounding to nearest, ties to even (NaN -> a quiet
//            NaN, overflow -> inf), bit for bit as PyTorch's CPU casts (c10::Half, c10::BFloat16);
//   p.mode 2 rounds f32 x through the format into f32 y (the value a 16-bit tensor would hold; in place ok).
// Compiled graphs with 16-bit tensors compute every op in f32 and round each 16-bit result this way,
// which is what PyTorch's CPU kernels do per op. packHalf2x16's rounding is implementation-defined, so
// the rounding is done in integers here. 256 threads per workgroup, grid-stride.
// variants: w16 only (needs storageBuffer16BitAccess)
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x = 256) in;
// the engine binds the 16-bit input at binding 1 and the 16-bit output at binding 4
layout(std430, set = 0, binding = 0) readonly buffer InputA { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer InputW { uint16_t w_in[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(std430, set = 0, binding = 4) writeonly buffer OutputW { uint16_t w_out[]; };
layout(push_constant) uniform Params { uint n; uint mode; uint format; } p;

uint to_bf16(float v) {
    uint bits = floatBitsToUint(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

uint to_f16(float v) {
    uint bits = floatBitsToUint(v);
    uint sign = (bits >> 16) & 0x8000u;
    uint mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) return sign | 0x7e00u;  // NaN
    if (mag >= 0x477ff000u) return sign | 0x7c00u; // 65520 and up (and inf) round to inf
    if (mag < 0x38800000u) {                       // below 2^-14: a subnormal half (units of 2^-24) or 0
        uint e = mag >> 23;
        if (e < 102u) return sign;                 // below 2^-25
        uint m = (mag & 0x7fffffu) | 0x800000u;
        uint shift = 126u - e;                     // 14 .. 24
        uint q = m >> shift, rem = m & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) q++;
        return sign | q;
    }
    uint r = mag - 0x38000000u;                    // exponent bias 127 -> 15
    uint q = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u)) q++; // a carry into the exponent is right
    return sign | q;
}

float widen(uint h) { return p.format == 1u ? uintBitsToFloat(h << 16) : unpackHalf2x16(h).x; }

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        if (p.mode == 0u) {
            y[i] = widen(uint(w_in[i]));
        } else {
            uint h = p.format == 1u ? to_bf16(x[i]) : to_f16(x[i]);
            if (p.mode == 1u) w_out[i] = uint16_t(h);
            else y[i] = widen(h);
        }
    }
}
