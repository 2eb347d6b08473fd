/* The bf16-precision GEMM selection (contract in gemm.h / gemm_internal.h): the process default
 * precision (TORCHBURN_MATMUL_PRECISION), the table a product runs with, and its name for cpu_info.
 * The kernel itself is x86_avx512vnni/gemm_bf16_avx512.c (vdpbf16ps). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_internal.h"

static atomic_int default_precision = TB_GEMM_PRECISION_HIGHEST;

void tb_gemm_set_default_precision(tb_gemm_precision precision) {
    atomic_store(&default_precision,
                 precision == TB_GEMM_PRECISION_BF16 ? TB_GEMM_PRECISION_BF16 : TB_GEMM_PRECISION_HIGHEST);
}

tb_gemm_precision tb_gemm_default_precision(void) { return (tb_gemm_precision)atomic_load(&default_precision); }

tb_status tb_gemm_precision_init(void) {
    const char *text = getenv("TORCHBURN_MATMUL_PRECISION");
    if (!text || !text[0])
        return TB_OK;
    if (strcmp(text, "highest") == 0 || strcmp(text, "high") == 0) {
        tb_gemm_set_default_precision(TB_GEMM_PRECISION_HIGHEST);
        return TB_OK;
    }
    if (strcmp(text, "medium") == 0 || strcmp(text, "bf16") == 0) {
        tb_gemm_set_default_precision(TB_GEMM_PRECISION_BF16);
        return TB_OK;
    }
    return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                        "TORCHBURN_MATMUL_PRECISION='%s': expected highest, high, medium or bf16", text);
}

static bool bf16_kernel_available(tb_isa isa) {
#if defined(TB_HAVE_X86)
    return isa == TB_ISA_AVX512 && tb_cpu_get_features()->avx512bf16;
#else
    (void)isa;
    return false;
#endif
}

const tb_gemm_microkernel *tb_gemm_microkernel_for_precision(tb_isa isa, tb_gemm_precision precision) {
    if (precision == TB_GEMM_PRECISION_DEFAULT)
        precision = tb_gemm_default_precision();
#if defined(TB_HAVE_X86)
    if (precision == TB_GEMM_PRECISION_BF16 && bf16_kernel_available(isa))
        return &tb_gemm_microkernel_avx512_bf16;
#endif
    return tb_gemm_microkernel_for(isa);
}

const char *tb_gemm_bf16_variant(tb_isa isa) {
    if (bf16_kernel_available(isa))
        return tb_gemm_default_precision() == TB_GEMM_PRECISION_BF16
                   ? "avx512_bf16 14x32 vdpbf16ps (also for f32: TORCHBURN_MATMUL_PRECISION=medium)"
                   : "avx512_bf16 14x32 vdpbf16ps";
    return "none: f32 GEMM (no AVX512-BF16 at this ISA)";
}
