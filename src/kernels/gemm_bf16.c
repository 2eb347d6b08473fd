/* The bf16 GEMM family: which variant runs where (cpu_info). No dedicated bf16 kernel yet: bf16
 * matmuls widen to f32 and run the f32 GEMM (exact products, f32 accumulation). */
#include "kernels/gemm_internal.h"

const char *tb_gemm_bf16_variant(tb_isa isa) {
    (void)isa;
    return "none (bf16 widened to f32, f32 GEMM)";
}
