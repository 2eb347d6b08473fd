// load_b(i): element i of the matmul operand B as f32. The *_w16 variants (TB_W16; Vulkan 1.1 with
// storageBuffer16BitAccess) declare b as 16-bit words and widen them exactly: p.b_format 1 = bfloat16
// (the high half of an f32), 2 = IEEE half. Otherwise b is f32. Include after `b` and `p`.
#ifdef TB_W16
float load_b(uint i) {
    uint h = uint(b[i]);
    return p.b_format == 1u ? uintBitsToFloat(h << 16) : unpackHalf2x16(h).x;
}
#else
float load_b(uint i) { return b[i]; }
#endif
