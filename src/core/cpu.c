/* CPU feature detection and the active ISA level. x86 uses CPUID plus XGETBV (the OS must save the
 * YMM/ZMM/tile state), aarch64 uses getauxval. Also: family/model and the microarchitecture they
 * name, the data-cache hierarchy (Intel leaf 4, AMD leaf 0x8000001D or its legacy 0x80000005/6), and
 * the Linux permission request AMX tile data needs. */
#include "torchburn/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TB_CPU_X86 1
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if defined(__linux__) && defined(TB_CPU_X86)
#include <sys/syscall.h>
#include <unistd.h>
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

#ifdef TB_CPU_X86
/* Deterministic cache parameters: Intel leaf 4 and AMD leaf 0x8000001D share the layout
 * (EAX[4:0] type, EAX[7:5] level, EAX[25:14] sharing - 1; EBX line/partitions/ways - 1; ECX sets - 1). */
static void read_cache_leaf(unsigned int leaf) {
    for (unsigned int sub = 0; sub < 16; sub++) {
        unsigned int eax, ebx, ecx, edx;
        __cpuid_count(leaf, sub, eax, ebx, ecx, edx);
        unsigned int type = eax & 0x1f, level = (eax >> 5) & 0x7;
        if (type == 0)
            break;
        if (type == 2) /* instruction cache */
            continue;
        tb_cache_level c = {
            .line_bytes = (int)(ebx & 0xfff) + 1,
            .ways = (int)((ebx >> 22) & 0x3ff) + 1,
            .shared_by = (int)((eax >> 14) & 0xfff) + 1,
        };
        int64_t partitions = (int64_t)((ebx >> 12) & 0x3ff) + 1;
        c.size_bytes = (int64_t)c.ways * partitions * c.line_bytes * ((int64_t)ecx + 1);
        if (level == 1)
            features.l1d = c;
        else if (level == 2)
            features.l2 = c;
        else if (level == 3)
            features.l3 = c;
    }
}

/* AMD's legacy size leaves, for parts without topology extensions (no sharing information). */
static void read_amd_legacy_caches(unsigned int max_ext) {
    unsigned int eax, ebx, ecx, edx;
    if (max_ext >= 0x80000005u) {
        __cpuid(0x80000005u, eax, ebx, ecx, edx);
        features.l1d = (tb_cache_level){.size_bytes = (int64_t)(ecx >> 24) << 10, .line_bytes = (int)(ecx & 0xff),
                                        .ways = (int)((ecx >> 16) & 0xff)};
    }
    if (max_ext >= 0x80000006u) {
        __cpuid(0x80000006u, eax, ebx, ecx, edx);
        features.l2 = (tb_cache_level){.size_bytes = (int64_t)(ecx >> 16) << 10, .line_bytes = (int)(ecx & 0xff)};
        features.l3 = (tb_cache_level){.size_bytes = (int64_t)(edx >> 18) << 19, .line_bytes = (int)(edx & 0xff)};
    }
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
    unsigned base_family = (eax >> 8) & 0xf, base_model = (eax >> 4) & 0xf;
    features.family = base_family == 0xf ? base_family + ((eax >> 20) & 0xff) : base_family;
    features.model = base_family == 0x6 || base_family == 0xf ? base_model | (((eax >> 16) & 0xf) << 4) : base_model;
    features.stepping = eax & 0xf;
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
        features.avx512fp16 = features.avx512f && (edx & (1u << 23));
        /* AMX needs XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA) besides the CPUID bits */
        features.amx_os = (xcr0 & (3ull << 17)) == (3ull << 17);
        features.amx_tile = edx & (1u << 24);
        features.amx_bf16 = features.amx_tile && (edx & (1u << 22));
        features.amx_int8 = features.amx_tile && (edx & (1u << 25));
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
    bool amd = strcmp(features.vendor, "AuthenticAMD") == 0 || strcmp(features.vendor, "HygonGenuine") == 0;
    bool topology_ext = false;
    if (max_ext >= 0x80000001u) {
        __cpuid(0x80000001u, eax, ebx, ecx, edx);
        topology_ext = ecx & (1u << 22);
    }
    if (amd && topology_ext && max_ext >= 0x8000001du)
        read_cache_leaf(0x8000001du);
    else if (!amd && max_leaf >= 4)
        read_cache_leaf(4);
    if (amd && features.l1d.size_bytes == 0)
        read_amd_legacy_caches(max_ext);
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

/* ---- microarchitecture names (display family/model; sources: the vendors' model tables) ---- */

typedef struct uarch_entry {
    unsigned family, model_lo, model_hi;
    const char *name;
} uarch_entry;

static const uarch_entry intel_table[] = {
    {6, 0x3c, 0x3c, "Haswell"},          {6, 0x3f, 0x3f, "Haswell-EP"},       {6, 0x4f, 0x4f, "Broadwell-EP"},
    {6, 0x4e, 0x4e, "Skylake"},          {6, 0x5e, 0x5e, "Skylake"},          {6, 0x55, 0x55, "Skylake-SP/Cascade Lake"},
    {6, 0x6a, 0x6a, "Ice Lake-SP"},      {6, 0x6c, 0x6c, "Ice Lake-D"},       {6, 0x7d, 0x7e, "Ice Lake"},
    {6, 0x8c, 0x8d, "Tiger Lake"},       {6, 0x8f, 0x8f, "Sapphire Rapids"},  {6, 0x97, 0x9a, "Alder Lake"},
    {6, 0xb7, 0xb7, "Raptor Lake"},      {6, 0xba, 0xba, "Raptor Lake"},      {6, 0xbf, 0xbf, "Raptor Lake"},
    {6, 0xcf, 0xcf, "Emerald Rapids"},   {6, 0xad, 0xae, "Granite Rapids"},   {6, 0xaa, 0xac, "Meteor Lake"},
};

static const uarch_entry amd_table[] = {
    {0x17, 0x00, 0x2f, "Zen/Zen+"}, {0x17, 0x30, 0xff, "Zen 2"},  {0x19, 0x00, 0x0f, "Zen 3"},
    {0x19, 0x10, 0x1f, "Zen 4"},    {0x19, 0x20, 0x5f, "Zen 3"},  {0x19, 0x60, 0x7f, "Zen 4"},
    {0x19, 0xa0, 0xaf, "Zen 4c"},   {0x1a, 0x00, 0xff, "Zen 5"},
};

static char uarch_name[96];
static pthread_once_t uarch_once = PTHREAD_ONCE_INIT;

static const char *table_lookup(const uarch_entry *table, size_t count, unsigned family, unsigned model) {
    for (size_t i = 0; i < count; i++)
        if (table[i].family == family && model >= table[i].model_lo && model <= table[i].model_hi)
            return table[i].name;
    return NULL;
}

static void name_uarch(void) {
    const tb_cpu_features *f = tb_cpu_get_features();
    const char *name = NULL;
    if (strcmp(f->vendor, "GenuineIntel") == 0)
        name = table_lookup(intel_table, sizeof intel_table / sizeof intel_table[0], f->family, f->model);
    else if (strcmp(f->vendor, "AuthenticAMD") == 0)
        name = table_lookup(amd_table, sizeof amd_table / sizeof amd_table[0], f->family, f->model);
    if (name)
        snprintf(uarch_name, sizeof uarch_name, "%s", name);
    else if (f->neon)
        snprintf(uarch_name, sizeof uarch_name, "aarch64");
    else
        snprintf(uarch_name, sizeof uarch_name, "unknown (%s family %u model %u)", f->vendor, f->family, f->model);
}

const char *tb_cpu_uarch_name(void) {
    pthread_once(&uarch_once, name_uarch);
    return uarch_name;
}

/* ---- AMX permission ---- */

static bool amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void request_amx(void) {
    const tb_cpu_features *f = tb_cpu_get_features();
    if (!f->amx_tile || !f->amx_os)
        return;
#if defined(__linux__) && defined(TB_CPU_X86)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return;
    unsigned long long permitted = 0;
    amx_granted = syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &permitted) == 0 &&
                  (permitted & (1ull << XFEATURE_XTILEDATA)) != 0;
#else
    amx_granted = true; /* other systems enable the tile state without a request */
#endif
}

bool tb_cpu_amx_request(void) {
    pthread_once(&amx_once, request_amx);
    return amx_granted;
}
