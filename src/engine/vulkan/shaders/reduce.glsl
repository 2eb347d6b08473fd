// Workgroup reductions for the row kernels (softmax, norms): TB_WG threads, one row per workgroup.
// Needs `shared float tb_scratch[TB_WG];` declared by the includer. Every thread gets the result.
// The tree uses shared memory only (no subgroup operations), so it runs on every Vulkan 1.0 device.

float tb_workgroup_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    tb_scratch[t] = v;
    barrier();
    for (uint stride = TB_WG / 2u; stride > 0u; stride >>= 1u) {
        if (t < stride)
            tb_scratch[t] += tb_scratch[t + stride];
        barrier();
    }
    float total = tb_scratch[0];
    barrier();
    return total;
}

float tb_workgroup_max(float v) {
    uint t = gl_LocalInvocationID.x;
    tb_scratch[t] = v;
    barrier();
    for (uint stride = TB_WG / 2u; stride > 0u; stride >>= 1u) {
        if (t < stride)
            tb_scratch[t] = tb_max_nan(tb_scratch[t], tb_scratch[t + stride]);
        barrier();
    }
    float total = tb_scratch[0];
    barrier();
    return total;
}
