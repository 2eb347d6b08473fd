/* CPU feature detection and the active ISA level. x86 uses CPUID plus XGETBV (the OS must save the
 * YMM/ZMM state), aarch64 uses getauxval. */
#include "torchburn/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TB_CPU_X86 1
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

static tb_cpu_features features;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static atomic_int active_isa = -1;

#ifdef TB_CPU_X86
static unsigned long long read_xcr0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

static void detect(void) {
#ifdef TB_CPU_X86
    unsigned int eax, ebx, ecx, edx;
    unsigned int max_leaf = __get_cpuid_max(0, NULL);
    __cpuid(0, eax, ebx, ecx, edx);
    memcpy(features.vendor + 0, &ebx, 4);
    memcpy(features.vendor + 4, &edx, 4);
    memcpy(features.vendor + 8, &ecx, 4);
    __cpuid(1, eax, ebx, ecx, edx);
    bool osxsave = ecx & (1u << 27);
    features.sse42 = ecx & (1u << 20);
    features.fma = ecx & (1u << 12);
    features.f16c = ecx & (1u << 29);
    bool avx_bit = ecx & (1u << 28);
    unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
    bool os_ymm = (xcr0 & 0x6) == 0x6;
    bool os_zmm = (xcr0 & 0xe6) == 0xe6;
    features.avx = avx_bit && os_ymm;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, eax, ebx, ecx, edx);
        features.avx2 = features.avx && (ebx & (1u << 5));
        features.bmi2 = ebx & (1u << 8);
        features.avx512f = os_zmm && (ebx & (1u << 16));
        features.avx512dq = features.avx512f && (ebx & (1u << 17));
        features.avx512bw = features.avx512f && (ebx & (1u << 30));
        features.avx512vl = features.avx512f && (ebx & (1u << 31));
        features.avx512vnni = features.avx512f && (ecx & (1u << 11));
        features.amx_int8 = edx & (1u << 25);
        unsigned int eax1, ebx1, ecx1, edx1;
        __cpuid_count(7, 1, eax1, ebx1, ecx1, edx1);
        features.avx_vnni = features.avx2 && (eax1 & (1u << 4));
        features.avx512bf16 = features.avx512f && (eax1 & (1u << 5));
    }
    features.fma = features.fma && features.avx;
    features.f16c = features.f16c && features.avx;
    unsigned int max_ext = __get_cpuid_max(0x80000000u, NULL);
    if (max_ext >= 0x80000004u) {
        unsigned int regs[12];
        for (unsigned int i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, regs[i * 4], regs[i * 4 + 1], regs[i * 4 + 2], regs[i * 4 + 3]);
        memcpy(features.brand, regs, 48);
        features.brand[48] = '\0';
        /* trim leading spaces some vendors pad with */
        char *start = features.brand;
        while (*start == ' ')
            start++;
        memmove(features.brand, start, strlen(start) + 1);
    }
#elif defined(__aarch64__)
    unsigned long hwcap = getauxval(AT_HWCAP);
    features.neon = true;
#ifdef HWCAP_ASIMDDP
    features.asimd_dotprod = hwcap & HWCAP_ASIMDDP;
#endif
    strcpy(features.vendor, "arm");
    (void)hwcap;
#endif
}

const tb_cpu_features *tb_cpu_get_features(void) {
    pthread_once(&detect_once, detect);
    return &features;
}

bool tb_isa_supported(tb_isa isa) {
    const tb_cpu_features *f = tb_cpu_get_features();
    switch (isa) {
    case TB_ISA_SCALAR:
        return true;
    case TB_ISA_AVX2:
#ifdef TB_HAVE_X86
        return f->avx2 && f->fma && f->f16c && f->bmi2;
#else
        return false;
#endif
    case TB_ISA_AVX512:
#ifdef TB_HAVE_X86
        return f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx2 && f->fma && f->f16c && f->bmi2;
#else
        return false;
#endif
    case TB_ISA_NEON:
#ifdef TB_HAVE_NEON
        return f->neon;
#else
        return false;
#endif
    default:
        return false;
    }
}

tb_isa tb_isa_best(void) {
    if (tb_isa_supported(TB_ISA_AVX512))
        return TB_ISA_AVX512;
    if (tb_isa_supported(TB_ISA_AVX2))
        return TB_ISA_AVX2;
    if (tb_isa_supported(TB_ISA_NEON))
        return TB_ISA_NEON;
    return TB_ISA_SCALAR;
}

const char *tb_isa_name(tb_isa isa) {
    static const char *const names[TB_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon"};
    return (unsigned)isa < TB_ISA_COUNT ? names[isa] : "invalid";
}

tb_status tb_isa_from_name(const char *name, tb_isa *out) {
    for (int i = 0; i < TB_ISA_COUNT; i++) {
        if (strcmp(name, tb_isa_name((tb_isa)i)) == 0) {
            *out = (tb_isa)i;
            return TB_OK;
        }
    }
    return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown ISA '%s' (expected scalar, avx2, avx512 or neon)", name);
}

tb_status tb_isa_set(tb_isa isa) {
    if ((unsigned)isa >= TB_ISA_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "invalid ISA level %d", (int)isa);
    if (!tb_isa_supported(isa))
        return tb_error_set(TB_ERR_UNSUPPORTED, "ISA '%s' is not supported by this CPU (%s); best available is '%s'",
                            tb_isa_name(isa), tb_cpu_get_features()->brand, tb_isa_name(tb_isa_best()));
    atomic_store(&active_isa, (int)isa);
    return TB_OK;
}

tb_status tb_isa_init(void) {
    const char *requested = getenv("TORCHBURN_ISA");
    if (!requested || !requested[0] || strcmp(requested, "auto") == 0) {
        atomic_store(&active_isa, (int)tb_isa_best());
        return TB_OK;
    }
    tb_isa isa;
    tb_status status = tb_isa_from_name(requested, &isa);
    if (status == TB_OK)
        status = tb_isa_set(isa);
    if (status != TB_OK) {
        atomic_store(&active_isa, (int)tb_isa_best());
        return tb_error_prefix(status, "TORCHBURN_ISA");
    }
    return TB_OK;
}

tb_isa tb_isa_active(void) {
    int isa = atomic_load(&active_isa);
    if (isa < 0) {
        tb_isa_init(); /* an invalid env value falls back to best here; tb_isa_init reports it */
        isa = atomic_load(&active_isa);
    }
    return (tb_isa)isa;
}
