/* Run-time cache blocking of the f32 GEMM and the packed convolution (contract in gemm_internal.h).
 *
 * The packed loop nest (gemm.c) keeps one kc x NR B panel in L1 while MR x kc A panels stream past it
 * from L2, an mc x kc A block in L2, and a kc x nc B block in this thread's share of L3. From the
 * cache sizes CPUID reports (tb_cpu_get_features):
 *     kc = floor(2/3 L1d / (s NR))            to a multiple of 16, within [64, 1536]
 *     mc = floor(1/3 L2 / (s kc))             to a multiple of MR, within [MR, 64 MR]
 *     nc = floor(1/2 (L3 / sharing) / (s kc)) to a multiple of NR, within [4 NR, 128 NR]
 * where s is the packed element size (4 for f32, 2 for bf16 pairs), sharing is the number of logical processors CPUID says share the L3. A level CPUID does not
 * report keeps the micro-kernel table's constant. TORCHBURN_GEMM_BLOCKING=mc,kc,nc (or the test hook
 * tb_gemm_set_blocking_override) forces the three (rounded to whole register tiles), so tests can
 * drive every edge path with tiny blocks. TORCHBURN_DEBUG=1 logs the choice once per ISA. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "kernels/conv_winograd.h"
#include "kernels/nn_kernels.h"

static _Atomic int64_t override_mc, override_kc, override_nc;

void tb_gemm_set_blocking_override(int64_t mc, int64_t kc, int64_t nc) {
    atomic_store(&override_mc, mc > 0 ? mc : 0);
    atomic_store(&override_kc, kc > 0 ? kc : 0);
    atomic_store(&override_nc, nc > 0 ? nc : 0);
}

tb_status tb_gemm_blocking_init(void) {
    const char *text = getenv("TORCHBURN_GEMM_BLOCKING");
    if (!text || !text[0])
        return TB_OK;
    long long mc = 0, kc = 0, nc = 0;
    char tail = 0;
    if (sscanf(text, "%lld,%lld,%lld%c", &mc, &kc, &nc, &tail) != 3 || mc < 1 || kc < 1 || nc < 1 ||
        mc > (1 << 20) || kc > (1 << 20) || nc > (1 << 20))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "TORCHBURN_GEMM_BLOCKING='%s': expected three positive integers mc,kc,nc (each <= 2^20)",
                            text);
    tb_gemm_set_blocking_override(mc, kc, nc);
    return TB_OK;
}

static int64_t clamp(int64_t value, int64_t lo, int64_t hi) { return value < lo ? lo : value > hi ? hi : value; }

static int64_t round_down(int64_t value, int64_t multiple) {
    int64_t rounded = value / multiple * multiple;
    return rounded > 0 ? rounded : multiple;
}

static int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

/* Tile kernels (AMX) finish a 32 x 32 x kc product about ten times sooner than the FMA kernels, so
 * the load and store of the C tile per k block would dominate at the L1-sized kc above (measured: at
 * 4096^3 kc 512 ran at 2/3 of kc 2048). Their kc is deep instead and the panels live in L2, where
 * tile loads still keep up:
 *     kc = floor(1/8 L2 / (s (MR + NR)))       to a multiple of 256, within [256, 4096]
 *     mc = floor(1/4 L2 / (s kc))              to a multiple of MR, within [MR, 64 MR]
 * (nc as above). */
static void tile_blocking(const tb_gemm_microkernel *uk, const tb_cpu_features *f, int64_t bytes,
                          tb_gemm_blocking *b) {
    if (f->l2.size_bytes <= 0)
        return;
    b->kc = clamp(round_down(f->l2.size_bytes / 8 / (bytes * (int64_t)(uk->mr + uk->nr)), 256), 256, 4096);
    b->mc = clamp(round_down(f->l2.size_bytes / 4 / (bytes * b->kc), uk->mr), uk->mr, 64 * (int64_t)uk->mr);
    b->source = "cpuid";
}

static tb_gemm_blocking from_caches(const tb_gemm_microkernel *uk) {
    const tb_cpu_features *f = tb_cpu_get_features();
    tb_gemm_blocking b = {.mc = uk->mc, .kc = uk->kc, .nc = uk->nc, .source = "table"};
    int64_t bytes = uk->packed_bytes > 0 ? uk->packed_bytes : 4;
    if (uk->k_tile > 0) {
        tile_blocking(uk, f, bytes, &b);
    } else if (f->l1d.size_bytes > 0) {
        b.kc = clamp(round_down(f->l1d.size_bytes * 2 / 3 / (bytes * (int64_t)uk->nr), 16), 64, 1536);
        b.source = "cpuid";
    }
    if (f->l2.size_bytes > 0 && uk->k_tile <= 0)
        b.mc = clamp(round_down(f->l2.size_bytes / 3 / (bytes * b.kc), uk->mr), uk->mr, 64 * (int64_t)uk->mr);
    if (f->l3.size_bytes > 0) {
        int64_t share = f->l3.size_bytes / (f->l3.shared_by > 0 ? f->l3.shared_by : 1);
        b.nc = clamp(round_down(share / 2 / (bytes * b.kc), uk->nr), 4 * (int64_t)uk->nr, 128 * (int64_t)uk->nr);
    }
    return b;
}

static atomic_bool logged[16];
static atomic_int debug_state = -1; /* TORCHBURN_DEBUG, read once */

bool tb_kernels_debug(void) {
    int state = atomic_load(&debug_state);
    if (state < 0) {
        const char *debug = getenv("TORCHBURN_DEBUG");
        state = debug && debug[0] && strcmp(debug, "0") != 0;
        atomic_store(&debug_state, state);
    }
    return state != 0;
}

tb_gemm_blocking tb_gemm_blocking_for(const tb_gemm_microkernel *uk) {
    tb_gemm_blocking b = from_caches(uk);
    int64_t mc = atomic_load(&override_mc), kc = atomic_load(&override_kc), nc = atomic_load(&override_nc);
    if (mc > 0 || kc > 0 || nc > 0) {
        b.mc = mc > 0 ? round_up(mc, uk->mr) : b.mc;
        b.kc = kc > 0 ? kc : b.kc;
        b.nc = nc > 0 ? round_up(nc, uk->nr) : b.nc;
        b.source = "override";
    }
    unsigned slot = (unsigned)(uk->nr + uk->mr + uk->packed_bytes) % 16; /* per table; a collision only skips a line */
    if (tb_kernels_debug() && !atomic_exchange(&logged[slot], true))
        fprintf(stderr, "[torchburn] gemm %s: micro-kernel %dx%d, blocking mc=%lld kc=%lld nc=%lld (%s; %s)\n",
                uk->isa_name, uk->mr, uk->nr, (long long)b.mc, (long long)b.kc, (long long)b.nc, b.source,
                tb_cpu_uarch_name());
    return b;
}

void tb_kernel_variants(tb_isa isa, char gemm_f32[160], char gemm_bf16[96], char conv[160], char qmatmul[64]) {
    const tb_gemm_microkernel *uk = tb_gemm_microkernel_for(isa);
    tb_gemm_blocking b = tb_gemm_blocking_for(uk);
    snprintf(gemm_f32, 160, "%s %dx%d, mc=%lld kc=%lld nc=%lld (%s)", uk->isa_name, uk->mr, uk->nr, (long long)b.mc,
             (long long)b.kc, (long long)b.nc, b.source);
    snprintf(gemm_bf16, 96, "%s", tb_gemm_bf16_variant(isa));
    const tb_nn_kernels *nn = tb_nn_kernels_for(isa);
    const tb_conv_direct_choice choice = tb_conv_direct_choice_for(nn);
    char depth[32] = "";
    if (choice.max_k > 0)
        snprintf(depth, sizeof depth, ", K <= %lld", (long long)choice.max_k);
    const char *winograd = tb_winograd_enabled() ? "3x3/1 winograd F(2x2,3x3); " : "";
    if (nn->conv_direct)
        snprintf(conv, 160, "%sdirect %s %dx%d (stride <= %d%s), else implicit-GEMM %s %dx%d kc=%lld", winograd,
                 uk->isa_name, nn->conv_direct_rows, nn->conv_direct_lanes, choice.max_stride, depth, uk->isa_name,
                 uk->mr, uk->nr, (long long)b.kc);
    else
        snprintf(conv, 160, "%simplicit-GEMM %s %dx%d kc=%lld", winograd, uk->isa_name, uk->mr, uk->nr,
                 (long long)b.kc);
    /* The LLM's int8-activation matmul family, chosen as llm/llm_qmatmul.c chooses it. */
    const char *q = "scalar";
#ifdef TB_HAVE_X86
    const tb_cpu_features *features = tb_cpu_get_features();
    if (isa == TB_ISA_AVX512 && features->avx512vnni)
        q = features->amx_int8 && tb_gemm_amx_allowed() && tb_cpu_amx_request()
                ? "avx512_vnni (vpdpbusd), prompts on amx_int8 (tdpbssd)"
                : "avx512_vnni (vpdpbusd)";
    else if ((isa == TB_ISA_AVX2 || isa == TB_ISA_AVX512) && tb_isa_supported(TB_ISA_AVX2))
        q = "avx2 (vpmaddubsw + vpmaddwd), prompts on its int16-sum GEMM";
#endif
    snprintf(qmatmul, 64, "%s", q);
}
