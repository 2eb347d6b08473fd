/* AVX-512 instance of the LLM kernels (bodies in llm/llm_kernels_body.h). */
#include "kernels/x86_avx512/simd_api_avx512.h"
#include "kernels/simd/vec_math.h"

#define TB_LLM_KERNELS_TABLE tb_llm_kernels_avx512
#include "llm/llm_kernels_body.h"
