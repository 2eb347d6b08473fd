/* CPU feature detection (once, from CPUID / auxv) and the instruction-set level the kernels run at.
 * TORCHBURN_ISA=scalar|avx2|avx512|neon forces a level; a level the CPU lacks is refused. */
#ifndef TORCHBURN_CPU_H
#define TORCHBURN_CPU_H

#include <stdbool.h>
#include <stdint.h>

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

/* One cache level as CPUID describes it (Intel leaf 4, AMD leaf 0x8000001D, else AMD's legacy leaves
 * 0x80000005/6). size_bytes == 0: not reported. shared_by: logical processors sharing it (0: unknown). */
typedef struct tb_cache_level {
    int64_t size_bytes;
    int line_bytes;
    int ways;
    int shared_by;
} tb_cache_level;

typedef struct tb_cpu_features {
    bool sse42, avx, avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx512fp16, avx_vnni;
    /* AMX: the CPUID bits and, in amx_os, whether XCR0 enables the tile state (XTILECFG + XTILEDATA).
     * Linux additionally needs a per-process permission request (tb_cpu_amx_request). */
    bool amx_tile, amx_bf16, amx_int8, amx_os;
    bool neon, asimd_dotprod;
    char vendor[16];
    char brand[64];
    unsigned family, model, stepping; /* display family/model (extended fields folded in) */
    tb_cache_level l1d, l2, l3;
} tb_cpu_features;

/* The features of this CPU (detected once; also checks that the OS saves the wider registers). */
TB_API const tb_cpu_features *tb_cpu_get_features(void);

/* The microarchitecture this family/model is (e.g. "Zen 5", "Sapphire Rapids"), or a generic name
 * ("x86-64 (Intel family 6 model 200)") when the table does not know it. */
TB_API const char *tb_cpu_uarch_name(void);

/* Asks the OS for permission to use AMX tile data (Linux arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA)); done once per process. True when AMX-TILE is present, XCR0 enables it and
 * the request succeeded (or the OS needs none). */
TB_API bool tb_cpu_amx_request(void);

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
