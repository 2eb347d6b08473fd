/* The bf16-precision GEMM selection (contract in gemm.h / gemm_internal.h): the process default
 * precision (TORCHBURN_MATMUL_PRECISION), whether AMX may be used (TORCHBURN_AMX), the table a product
 * runs with, and its name for cpu_info. The kernels: x86_amx/gemm_bf16_amx.c (tdpbf16ps tiles) where
 * CPUID, XCR0 and the OS permission allow AMX-BF16, else x86_avx512vnni/gemm_bf16_avx512.c
 * (vdpbf16ps). Both round A and B alike, so which one ran changes only the summation order. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_internal.h"

static atomic_int default_precision = TB_GEMM_PRECISION_HIGHEST;
static atomic_bool amx_allowed = true;

void tb_gemm_set_amx_allowed(bool allowed) { atomic_store(&amx_allowed, allowed); }

bool tb_gemm_amx_allowed(void) { return atomic_load(&amx_allowed); }

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

tb_status tb_gemm_amx_init(void) {
    const char *text = getenv("TORCHBURN_AMX");
    if (!text || !text[0])
        return TB_OK;
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "TORCHBURN_AMX='%s': expected 0 (never use AMX tiles) or 1 (use them where the CPU and "
                            "the OS allow)",
                            text);
    tb_gemm_set_amx_allowed(text[0] == '1');
    return TB_OK;
}

/* AMX-BF16 tiles usable at `isa` in this process: CPUID, XCR0, the Linux permission, not switched off. */
static bool amx_kernel_available(tb_isa isa) {
#if defined(TB_HAVE_X86)
    const tb_cpu_features *f = tb_cpu_get_features();
    return isa == TB_ISA_AVX512 && f->amx_bf16 && f->avx512bf16 && atomic_load(&amx_allowed) && tb_cpu_amx_request();
#else
    (void)isa;
    return false;
#endif
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
    if (precision == TB_GEMM_PRECISION_BF16 && amx_kernel_available(isa))
        return &tb_gemm_microkernel_amx_bf16;
    if (precision == TB_GEMM_PRECISION_BF16 && bf16_kernel_available(isa))
        return &tb_gemm_microkernel_avx512_bf16;
#endif
    return tb_gemm_microkernel_for(isa);
}

const char *tb_gemm_bf16_variant(tb_isa isa) {
    if (amx_kernel_available(isa))
        return tb_gemm_default_precision() == TB_GEMM_PRECISION_BF16
                   ? "amx_bf16 32x32 tdpbf16ps tiles (also for f32: TORCHBURN_MATMUL_PRECISION=medium)"
                   : "amx_bf16 32x32 tdpbf16ps tiles";
    if (bf16_kernel_available(isa))
        return tb_gemm_default_precision() == TB_GEMM_PRECISION_BF16
                   ? "avx512_bf16 14x32 vdpbf16ps (also for f32: TORCHBURN_MATMUL_PRECISION=medium)"
                   : "avx512_bf16 14x32 vdpbf16ps";
    return "none: f32 GEMM (no AVX512-BF16 at this ISA)";
}
