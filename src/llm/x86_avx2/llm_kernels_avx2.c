/* AVX2 + FMA + F16C instance of the LLM kernels (bodies in llm/llm_kernels_body.h). */
#include "kernels/x86_avx2/simd_api_avx2.h"
#include "kernels/simd/vec_math.h"

#define TB_LLM_KERNELS_TABLE tb_llm_kernels_avx2
#include "llm/llm_kernels_body.h"
