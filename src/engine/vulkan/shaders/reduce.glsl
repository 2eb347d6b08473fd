// Workgroup reductions for the row kernels (softmax, norms, attention, the GEMV-like matmuls): TB_WG
// threads, one reduction per call by the whole workgroup. Needs `shared float tb_scratch[TB_WG];` declared
// by the includer. Every thread gets the same result (every thread sums the same partials in the same
// order). Two barriers per call, so shared memory the caller wrote before the call is visible after it.
//
// With TB_SUBGROUP (devices reporting subgroup arithmetic + vote in compute shaders) each subgroup
// reduces in registers (subgroupAdd / subgroupMax) and only one partial per subgroup goes through
// shared memory; otherwise (Vulkan 1.0, or TORCHBURN_VULKAN_NO_SUBGROUP=1) a tree in shared memory.
// Max propagates NaN like tb_max_nan in both forms (subgroupMax's NaN behaviour is undefined, so NaN
// lanes are found with subgroupAny and left out of the max).

#ifdef TB_SUBGROUP
float tb_workgroup_sum(float v) {
    float partial = subgroupAdd(v);
    if (subgroupElect())
        tb_scratch[gl_SubgroupID] = partial;
    barrier();
    float total = tb_scratch[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++)
        total += tb_scratch[i];
    barrier();
    return total;
}

float tb_workgroup_max(float v) {
    bool nan = subgroupAny(tb_isnan(v));
    float partial = subgroupMax(tb_isnan(v) ? -TB_INF : v);
    if (subgroupElect())
        tb_scratch[gl_SubgroupID] = nan ? TB_NAN : partial;
    barrier();
    float total = tb_scratch[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++)
        total = tb_max_nan(total, tb_scratch[i]);
    barrier();
    return total;
}
#else
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
#endif
