// Shared helpers of the compute shaders: IEEE-style NaN handling that does not rely on GLSL min/max
// (whose NaN behaviour is undefined), and a workgroup tree reduction over shared memory.
// Every shader is a grid-stride loop, so a dispatch never needs more than 65,535 workgroups per dimension.
// TB_SUBGROUP (the *_subgroup variants tools/gen_spirv.sh builds for Vulkan 1.1) turns on the subgroup
// extensions reduce.glsl uses; the extension lines must precede every declaration, hence here.
#ifdef TB_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

bool tb_isnan(float v) { return v != v; }

// NaN if either is NaN (torch.maximum / torch.minimum)
float tb_max_nan(float a, float b) { return tb_isnan(a) ? a : (tb_isnan(b) ? b : (a > b ? a : b)); }
float tb_min_nan(float a, float b) { return tb_isnan(a) ? a : (tb_isnan(b) ? b : (a < b ? a : b)); }

#define TB_INF uintBitsToFloat(0x7f800000u)
#define TB_NAN uintBitsToFloat(0x7fc00000u)
bool tb_signbit(float v) { return (floatBitsToUint(v) >> 31) != 0u; }
