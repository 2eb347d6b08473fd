// A fused elementwise chain: y[i] = the last of up to 16 steps over up to 4 inputs, one dispatch and
// no intermediate buffers. The chain is given as specialization constants (vk_fused.c sets them per
// chain, and caches one pipeline per distinct chain), so the driver compiles a shader specialized to that
// chain: the unused steps, the switches over op codes and the register indexing fold away. Registers 0-3
// hold the inputs (bindings 0, 1, 2 and 4; binding 3 is y), register 4 + s the result of step s.
// Input k is read at (i / inner_k) % len_k: len_k == n is elementwise, inner 1 with len_k < n a
// trailing broadcast (a bias), inner_k > 1 a leading or middle one ([B, 1] against [B, L]: inner L;
// a channel [C, 1, 1] against [N, C, H, W]: inner H W, len C).
// Step kinds: 0 unary(lhs), 1 binary(lhs, rhs), 2 binary(lhs, scalar), 3 binary(scalar, lhs); the ops
// are elementwise.glsl's, the same as the unary and binary kernels'.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "elementwise.glsl"

layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer Input0 { float in0[]; };
layout(std430, set = 0, binding = 1) readonly buffer Input1 { float in1[]; };
layout(std430, set = 0, binding = 2) readonly buffer Input2 { float in2[]; };
layout(std430, set = 0, binding = 4) readonly buffer Input3 { float in3[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Output { float y[]; };
layout(push_constant) uniform Params {
    uint n;
    uint len0, inner0, len1, inner1, len2, inner2, len3, inner3;
} p;

layout(constant_id = 0) const uint NSTEPS = 1u;
layout(constant_id = 1) const uint NINPUTS = 1u;
layout(constant_id = 8) const uint kind0 = 0u;
layout(constant_id = 9) const uint code0 = 0u;
layout(constant_id = 10) const uint lhs0 = 0u;
layout(constant_id = 11) const uint rhs0 = 0u;
layout(constant_id = 12) const float alpha0 = 0.0;
layout(constant_id = 13) const float lo0 = 0.0;
layout(constant_id = 14) const float hi0 = 0.0;
layout(constant_id = 15) const float scalar0 = 0.0;
layout(constant_id = 16) const uint kind1 = 0u;
layout(constant_id = 17) const uint code1 = 0u;
layout(constant_id = 18) const uint lhs1 = 0u;
layout(constant_id = 19) const uint rhs1 = 0u;
layout(constant_id = 20) const float alpha1 = 0.0;
layout(constant_id = 21) const float lo1 = 0.0;
layout(constant_id = 22) const float hi1 = 0.0;
layout(constant_id = 23) const float scalar1 = 0.0;
layout(constant_id = 24) const uint kind2 = 0u;
layout(constant_id = 25) const uint code2 = 0u;
layout(constant_id = 26) const uint lhs2 = 0u;
layout(constant_id = 27) const uint rhs2 = 0u;
layout(constant_id = 28) const float alpha2 = 0.0;
layout(constant_id = 29) const float lo2 = 0.0;
layout(constant_id = 30) const float hi2 = 0.0;
layout(constant_id = 31) const float scalar2 = 0.0;
layout(constant_id = 32) const uint kind3 = 0u;
layout(constant_id = 33) const uint code3 = 0u;
layout(constant_id = 34) const uint lhs3 = 0u;
layout(constant_id = 35) const uint rhs3 = 0u;
layout(constant_id = 36) const float alpha3 = 0.0;
layout(constant_id = 37) const float lo3 = 0.0;
layout(constant_id = 38) const float hi3 = 0.0;
layout(constant_id = 39) const float scalar3 = 0.0;
layout(constant_id = 40) const uint kind4 = 0u;
layout(constant_id = 41) const uint code4 = 0u;
layout(constant_id = 42) const uint lhs4 = 0u;
layout(constant_id = 43) const uint rhs4 = 0u;
layout(constant_id = 44) const float alpha4 = 0.0;
layout(constant_id = 45) const float lo4 = 0.0;
layout(constant_id = 46) const float hi4 = 0.0;
layout(constant_id = 47) const float scalar4 = 0.0;
layout(constant_id = 48) const uint kind5 = 0u;
layout(constant_id = 49) const uint code5 = 0u;
layout(constant_id = 50) const uint lhs5 = 0u;
layout(constant_id = 51) const uint rhs5 = 0u;
layout(constant_id = 52) const float alpha5 = 0.0;
layout(constant_id = 53) const float lo5 = 0.0;
layout(constant_id = 54) const float hi5 = 0.0;
layout(constant_id = 55) const float scalar5 = 0.0;
layout(constant_id = 56) const uint kind6 = 0u;
layout(constant_id = 57) const uint code6 = 0u;
layout(constant_id = 58) const uint lhs6 = 0u;
layout(constant_id = 59) const uint rhs6 = 0u;
layout(constant_id = 60) const float alpha6 = 0.0;
layout(constant_id = 61) const float lo6 = 0.0;
layout(constant_id = 62) const float hi6 = 0.0;
layout(constant_id = 63) const float scalar6 = 0.0;
layout(constant_id = 64) const uint kind7 = 0u;
layout(constant_id = 65) const uint code7 = 0u;
layout(constant_id = 66) const uint lhs7 = 0u;
layout(constant_id = 67) const uint rhs7 = 0u;
layout(constant_id = 68) const float alpha7 = 0.0;
layout(constant_id = 69) const float lo7 = 0.0;
layout(constant_id = 70) const float hi7 = 0.0;
layout(constant_id = 71) const float scalar7 = 0.0;
layout(constant_id = 72) const uint kind8 = 0u;
layout(constant_id = 73) const uint code8 = 0u;
layout(constant_id = 74) const uint lhs8 = 0u;
layout(constant_id = 75) const uint rhs8 = 0u;
layout(constant_id = 76) const float alpha8 = 0.0;
layout(constant_id = 77) const float lo8 = 0.0;
layout(constant_id = 78) const float hi8 = 0.0;
layout(constant_id = 79) const float scalar8 = 0.0;
layout(constant_id = 80) const uint kind9 = 0u;
layout(constant_id = 81) const uint code9 = 0u;
layout(constant_id = 82) const uint lhs9 = 0u;
layout(constant_id = 83) const uint rhs9 = 0u;
layout(constant_id = 84) const float alpha9 = 0.0;
layout(constant_id = 85) const float lo9 = 0.0;
layout(constant_id = 86) const float hi9 = 0.0;
layout(constant_id = 87) const float scalar9 = 0.0;
layout(constant_id = 88) const uint kind10 = 0u;
layout(constant_id = 89) const uint code10 = 0u;
layout(constant_id = 90) const uint lhs10 = 0u;
layout(constant_id = 91) const uint rhs10 = 0u;
layout(constant_id = 92) const float alpha10 = 0.0;
layout(constant_id = 93) const float lo10 = 0.0;
layout(constant_id = 94) const float hi10 = 0.0;
layout(constant_id = 95) const float scalar10 = 0.0;
layout(constant_id = 96) const uint kind11 = 0u;
layout(constant_id = 97) const uint code11 = 0u;
layout(constant_id = 98) const uint lhs11 = 0u;
layout(constant_id = 99) const uint rhs11 = 0u;
layout(constant_id = 100) const float alpha11 = 0.0;
layout(constant_id = 101) const float lo11 = 0.0;
layout(constant_id = 102) const float hi11 = 0.0;
layout(constant_id = 103) const float scalar11 = 0.0;
layout(constant_id = 104) const uint kind12 = 0u;
layout(constant_id = 105) const uint code12 = 0u;
layout(constant_id = 106) const uint lhs12 = 0u;
layout(constant_id = 107) const uint rhs12 = 0u;
layout(constant_id = 108) const float alpha12 = 0.0;
layout(constant_id = 109) const float lo12 = 0.0;
layout(constant_id = 110) const float hi12 = 0.0;
layout(constant_id = 111) const float scalar12 = 0.0;
layout(constant_id = 112) const uint kind13 = 0u;
layout(constant_id = 113) const uint code13 = 0u;
layout(constant_id = 114) const uint lhs13 = 0u;
layout(constant_id = 115) const uint rhs13 = 0u;
layout(constant_id = 116) const float alpha13 = 0.0;
layout(constant_id = 117) const float lo13 = 0.0;
layout(constant_id = 118) const float hi13 = 0.0;
layout(constant_id = 119) const float scalar13 = 0.0;
layout(constant_id = 120) const uint kind14 = 0u;
layout(constant_id = 121) const uint code14 = 0u;
layout(constant_id = 122) const uint lhs14 = 0u;
layout(constant_id = 123) const uint rhs14 = 0u;
layout(constant_id = 124) const float alpha14 = 0.0;
layout(constant_id = 125) const float lo14 = 0.0;
layout(constant_id = 126) const float hi14 = 0.0;
layout(constant_id = 127) const float scalar14 = 0.0;
layout(constant_id = 128) const uint kind15 = 0u;
layout(constant_id = 129) const uint code15 = 0u;
layout(constant_id = 130) const uint lhs15 = 0u;
layout(constant_id = 131) const uint rhs15 = 0u;
layout(constant_id = 132) const float alpha15 = 0.0;
layout(constant_id = 133) const float lo15 = 0.0;
layout(constant_id = 134) const float hi15 = 0.0;
layout(constant_id = 135) const float scalar15 = 0.0;

uint tb_at(uint i, uint len, uint inner) {
    if (inner == 1u)
        return len == p.n ? i : i % len;
    return (i / inner) % len;
}

float tb_step(uint kind, uint code, float l, float r, float alpha, float lo, float hi, float s) {
    if (kind == 0u) return tb_unary(code, l, alpha, lo, hi);
    if (kind == 1u) return tb_binary(code, l, r);
    if (kind == 2u) return tb_binary(code, l, s);
    return tb_binary(code, s, l);
}

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        float r[20];
        r[0] = in0[tb_at(i, p.len0, p.inner0)];
        r[1] = NINPUTS > 1u ? in1[tb_at(i, p.len1, p.inner1)] : 0.0;
        r[2] = NINPUTS > 2u ? in2[tb_at(i, p.len2, p.inner2)] : 0.0;
        r[3] = NINPUTS > 3u ? in3[tb_at(i, p.len3, p.inner3)] : 0.0;
        if (0u < NSTEPS) r[4] = tb_step(kind0, code0, r[lhs0], r[rhs0], alpha0, lo0, hi0, scalar0);
        if (1u < NSTEPS) r[5] = tb_step(kind1, code1, r[lhs1], r[rhs1], alpha1, lo1, hi1, scalar1);
        if (2u < NSTEPS) r[6] = tb_step(kind2, code2, r[lhs2], r[rhs2], alpha2, lo2, hi2, scalar2);
        if (3u < NSTEPS) r[7] = tb_step(kind3, code3, r[lhs3], r[rhs3], alpha3, lo3, hi3, scalar3);
        if (4u < NSTEPS) r[8] = tb_step(kind4, code4, r[lhs4], r[rhs4], alpha4, lo4, hi4, scalar4);
        if (5u < NSTEPS) r[9] = tb_step(kind5, code5, r[lhs5], r[rhs5], alpha5, lo5, hi5, scalar5);
        if (6u < NSTEPS) r[10] = tb_step(kind6, code6, r[lhs6], r[rhs6], alpha6, lo6, hi6, scalar6);
        if (7u < NSTEPS) r[11] = tb_step(kind7, code7, r[lhs7], r[rhs7], alpha7, lo7, hi7, scalar7);
        if (8u < NSTEPS) r[12] = tb_step(kind8, code8, r[lhs8], r[rhs8], alpha8, lo8, hi8, scalar8);
        if (9u < NSTEPS) r[13] = tb_step(kind9, code9, r[lhs9], r[rhs9], alpha9, lo9, hi9, scalar9);
        if (10u < NSTEPS) r[14] = tb_step(kind10, code10, r[lhs10], r[rhs10], alpha10, lo10, hi10, scalar10);
        if (11u < NSTEPS) r[15] = tb_step(kind11, code11, r[lhs11], r[rhs11], alpha11, lo11, hi11, scalar11);
        if (12u < NSTEPS) r[16] = tb_step(kind12, code12, r[lhs12], r[rhs12], alpha12, lo12, hi12, scalar12);
        if (13u < NSTEPS) r[17] = tb_step(kind13, code13, r[lhs13], r[rhs13], alpha13, lo13, hi13, scalar13);
        if (14u < NSTEPS) r[18] = tb_step(kind14, code14, r[lhs14], r[rhs14], alpha14, lo14, hi14, scalar14);
        if (15u < NSTEPS) r[19] = tb_step(kind15, code15, r[lhs15], r[rhs15], alpha15, lo15, hi15, scalar15);
        y[i] = r[3u + NSTEPS];
    }
}
