/* CPU feature detection (once, from CPUID / auxv) and the instruction-set level the kernels run at.
 * TORCHBURN_ISA=scalar|avx2|avx512|neon forces a level; a level the CPU lacks is refused. */
#ifndef TORCHBURN_CPU_H
#define TORCHBURN_CPU_H

#include <stdbool.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tb_isa {
    TB_ISA_SCALAR = 0, /* portable C reference kernels */
    TB_ISA_AVX2,       /* AVX2 + FMA + F16C + BMI2 */
    TB_ISA_AVX512,     /* AVX-512 F + BW + VL + DQ, and the AVX2 set (+ VNNI kernels when present) */
    TB_ISA_NEON,       /* aarch64 Advanced SIMD */
    TB_ISA_COUNT
} tb_isa;

typedef struct tb_cpu_features {
    bool sse42, avx, avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx_vnni;
    bool amx_int8, neon, asimd_dotprod;
    char vendor[16];
    char brand[64];
} tb_cpu_features;

/* The features of this CPU (detected once; also checks that the OS saves the wider registers). */
TB_API const tb_cpu_features *tb_cpu_get_features(void);

/* The best level this CPU supports. */
TB_API tb_isa tb_isa_best(void);

/* The level kernels run at: TORCHBURN_ISA if set (an invalid or unsupported value makes
 * tb_isa_init fail), else tb_isa_best(). */
TB_API tb_isa tb_isa_active(void);

/* Reads TORCHBURN_ISA and fixes the active level; returns an error naming the problem when the
 * variable asks for something invalid or unsupported (the level then stays at the best one).
 * Called by the Python extension at import so that a bad value fails loudly. */
TB_API tb_status tb_isa_init(void);

/* Forces the active level (tests and benchmarks). Refuses a level the CPU lacks. */
TB_API tb_status tb_isa_set(tb_isa isa);

TB_API bool tb_isa_supported(tb_isa isa);
TB_API const char *tb_isa_name(tb_isa isa);
TB_API tb_status tb_isa_from_name(const char *name, tb_isa *out);

#ifdef __cplusplus
}
#endif
#endif
