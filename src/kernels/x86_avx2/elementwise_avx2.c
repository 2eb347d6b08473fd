/* The AVX2 table of elementwise, reduction, softmax, norm, rotary and conversion kernels: the shared
 * bodies in ../simd/ compiled against the AVX2 vector API (this folder's build flags). */
#include "kernels/x86_avx2/simd_api_avx2.h"
#include "kernels/simd/norm_body.h"

const tb_elementwise_kernels tb_elementwise_kernels_avx2 = {
    .isa_name = "avx2",
    .unary =
        {
            [TB_UNARY_NEG] = simd_unary_neg,
            [TB_UNARY_ABS] = simd_unary_abs,
            [TB_UNARY_EXP] = simd_unary_exp,
            [TB_UNARY_LOG] = simd_unary_log,
            [TB_UNARY_SQRT] = simd_unary_sqrt,
            [TB_UNARY_RSQRT] = simd_unary_rsqrt,
            [TB_UNARY_SIN] = simd_unary_sin,
            [TB_UNARY_COS] = simd_unary_cos,
            [TB_UNARY_TANH] = simd_unary_tanh,
            [TB_UNARY_SIGMOID] = simd_unary_sigmoid,
            [TB_UNARY_RELU] = simd_unary_relu,
            [TB_UNARY_GELU] = simd_unary_gelu,
            [TB_UNARY_GELU_TANH] = simd_unary_gelu_tanh,
            [TB_UNARY_SILU] = simd_unary_silu,
            [TB_UNARY_LEAKY_RELU] = simd_unary_leaky_relu,
            [TB_UNARY_CLAMP] = simd_unary_clamp,
        },
    .binary =
        {
            [TB_BINARY_ADD] = simd_binary_add,
            [TB_BINARY_SUB] = simd_binary_sub,
            [TB_BINARY_MUL] = simd_binary_mul,
            [TB_BINARY_DIV] = simd_binary_div,
            [TB_BINARY_POW] = simd_binary_pow,
            [TB_BINARY_MAXIMUM] = simd_binary_maximum,
            [TB_BINARY_MINIMUM] = simd_binary_minimum,
        },
    .compare =
        {
            [TB_COMPARE_EQ] = simd_compare_eq,
            [TB_COMPARE_NE] = simd_compare_ne,
            [TB_COMPARE_LT] = simd_compare_lt,
            [TB_COMPARE_LE] = simd_compare_le,
            [TB_COMPARE_GT] = simd_compare_gt,
            [TB_COMPARE_GE] = simd_compare_ge,
        },
    .where = simd_where,
    .reduce =
        {
            [TB_REDUCE_SUM] = simd_reduce_sum,
            [TB_REDUCE_MAX] = simd_reduce_max,
            [TB_REDUCE_MIN] = simd_reduce_min,
            [TB_REDUCE_LOGSUMEXP] = simd_reduce_logsumexp,
        },
    .argmax = simd_argmax,
    .argmin = simd_argmin,
    .var = simd_var,
    .softmax = simd_softmax,
    .layer_norm = simd_layer_norm,
    .rms_norm = simd_rms_norm,
    .rope = simd_rope,
    .f16_to_f32 = simd_f16_to_f32,
    .bf16_to_f32 = simd_bf16_to_f32,
    .f32_to_f16 = simd_f32_to_f16,
    .f32_to_bf16 = simd_f32_to_bf16,
};
