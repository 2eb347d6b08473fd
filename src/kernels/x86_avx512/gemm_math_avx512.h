/* AVX-512 vector math for the GEMM epilogue and attention softmax: thin adapters over the shared vector
 * math of the elementwise kernels (kernels/simd/vec_math.h, accuracy documented and tested there), so
 * an activation fused into a GEMM gives the same values as the standalone op. Only for translation
 * units under x86_avx512/: everything is static inline and compiled with that folder's flags. */
#ifndef TORCHBURN_GEMM_MATH_AVX512_H
#define TORCHBURN_GEMM_MATH_AVX512_H

#include "kernels/gemm.h"
#include "kernels/x86_avx512/simd_api_avx512.h"
#include "kernels/simd/vec_math.h"

static inline __m512 tb_exp_avx512(__m512 x) { return vmath_exp(x); }

/* One vector through an activation (TB_ACTIVATION_GELU is the exact erf form). */
static inline __m512 tb_activation_avx512(__m512 x, tb_activation activation) {
    switch (activation) {
    case TB_ACTIVATION_RELU:
        return _mm512_max_ps(_mm512_setzero_ps(), x); /* the second operand is returned for NaN */
    case TB_ACTIVATION_GELU:
        return vmath_gelu(x);
    case TB_ACTIVATION_GELU_TANH:
        return vmath_gelu_tanh(x);
    case TB_ACTIVATION_SILU:
        return _mm512_mul_ps(x, vmath_sigmoid(x));
    case TB_ACTIVATION_SIGMOID:
        return vmath_sigmoid(x);
    case TB_ACTIVATION_TANH:
        return vmath_tanh(x);
    default:
        return x;
    }
}

#endif
