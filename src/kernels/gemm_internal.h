/* Private contract between the GEMM driver (gemm.c), its per-ISA micro-kernels (ref/, x86_avx2/,
 * x86_avx512/) and the attention kernels. Nothing here is part of the public API. */
#ifndef TORCHBURN_KERNELS_GEMM_INTERNAL_H
#define TORCHBURN_KERNELS_GEMM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm.h"

/* Packed layouts (all panels are zero-padded to the full register tile):
 *   A panel: MR rows x kc, stored k-major: a_panel[p * MR + i] = A[i, p]   (i < MR, p < kc)
 *   B panel: kc x NR,      stored k-major: b_panel[p * NR + j] = B[p, j]   (j < NR, p < kc)
 *
 * Micro-kernel: computes the MR x NR product of one A panel and one B panel over kc (kc may be 0)
 * and writes rows < mr, columns < nr of C (c_row_stride between rows; columns contiguous):
 *     C = alpha * (A_panel B_panel) + beta * C
 * beta == 0 means C is not read at all (it may hold NaN garbage). 1 <= mr <= MR, 1 <= nr <= NR.
 * Never allocates, never fails. */
typedef void (*tb_gemm_microkernel_fn)(int64_t kc, const float *a_panel, const float *b_panel, float *c,
                                       int64_t c_row_stride, int mr, int nr, float alpha, float beta);

/* Packs rows [0, rows) x k-columns [0, kc) of A (A[i, p] = a[i * row_stride + p * col_stride]) into one
 * A panel (layout above, rows <= MR, rows past `rows` zero-filled). */
typedef void (*tb_gemm_pack_a_fn)(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc,
                                  float *a_panel);

/* Packs k-rows [0, kc) x columns [0, cols) of B (B[p, j] = b[p * row_stride + j * col_stride]) into one
 * B panel (cols <= NR, columns past `cols` zero-filled). */
typedef void (*tb_gemm_pack_b_fn)(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc,
                                  float *b_panel);

/* The packers above for bfloat16 sources (bf16 tensors read in place, element strides): the panel
 * they write is the one the f32 packer writes for the widened values. Tables without them (NULL)
 * cannot run tb_gemm_desc's a_bf16 / b_bf16 operands. */
typedef void (*tb_gemm_pack_bf16_fn)(const uint16_t *x, int64_t row_stride, int64_t col_stride, int lines, int64_t kc,
                                     float *panel);

/* The fused epilogue of one C tile (rows x cols at c), applied in order after the last k block:
 *   per-column bias: c[i, j] += bias[j]   per-row bias: c[i, j] += bias[i]   (bias already offset to
 *   the tile), then c = activation(c), then c[i, j] += residual[i * residual_row_stride + j] when
 *   residual is not NULL (also offset to the tile). */
typedef struct tb_gemm_epilogue {
    tb_bias_kind bias_kind;
    const float *bias;
    tb_activation activation;
    const float *residual;
    int64_t residual_row_stride;
} tb_gemm_epilogue;

typedef void (*tb_gemm_epilogue_fn)(float *c, int64_t c_row_stride, int rows, int cols, const tb_gemm_epilogue *e);

/* Unpacked product for very few rows (decode-style x W^T): rows <= TB_GEMM_SMALL_M_MAX rows, cols
 * columns, full k, reading B in place (each element once) instead of packing it:
 *   C[i, j] = alpha * sum_p A[i, p] B[p, j] + beta * C[i, j]     (beta == 0: C not read)
 * with A[i, p] = a[i * a_row_stride + p * a_col_stride] and
 *   b_transposed == false: B[p, j] = b[p * b_stride + j]   (row-major B)
 *   b_transposed == true:  B[p, j] = b[j * b_stride + p]   (nn.Linear weight [N, K]; needs
 *                                                           a_col_stride == 1)
 * Never allocates. */
enum { TB_GEMM_SMALL_M_MAX = 8 };
typedef void (*tb_gemm_small_m_fn)(int rows, int64_t cols, int64_t k, const float *a, int64_t a_row_stride,
                                   int64_t a_col_stride, const float *b, int64_t b_stride, bool b_transposed, float *c,
                                   int64_t c_row_stride, float alpha, float beta);

/* One ISA's GEMM building blocks and the cache blocking they were tuned for. */
typedef struct tb_gemm_microkernel {
    const char *isa_name;
    int mr, nr;        /* register tile */
    int packed_bytes;  /* bytes per packed A/B element (0: 4, f32; 2: bf16 pairs) */
    int64_t kc;        /* k block: a kc x NR B panel stays in L1 while A panels stream from L2 */
    int64_t mc;        /* rows of A packed at once (multiple of mr): an mc x kc block sits in L2 */
    int64_t nc;        /* columns of B packed at once (multiple of nr) */
    tb_gemm_microkernel_fn kernel;
    tb_gemm_pack_a_fn pack_a; /* NULL: the portable packer */
    tb_gemm_pack_b_fn pack_b;
    tb_gemm_epilogue_fn epilogue;
    tb_gemm_small_m_fn small_m; /* NULL: small products go through the packed path */
    tb_gemm_pack_bf16_fn pack_a_bf16, pack_b_bf16; /* NULL: no bf16 sources */
    /* Tile kernels (AMX) pad each k block to whole chunks of k_tile (0: no padding); their panels are
     * strided by tb_gemm_panel_depth. cell_begin / cell_end (NULL: none) bracket every run of kernel
     * calls on one thread (one GEMM cell), e.g. loading and releasing the tile configuration. */
    int k_tile;
    void (*cell_begin)(void);
    void (*cell_end)(void);
} tb_gemm_microkernel;

/* Float-sized units one panel line takes for a k block of depth kc: kc, or for a tile kernel the
 * padded depth's packed elements (packed_bytes each) in floats. A panel is mr (or nr) times this. */
static inline int64_t tb_gemm_panel_depth(const tb_gemm_microkernel *uk, int64_t kc) {
    if (uk->k_tile <= 0)
        return kc;
    return (kc + uk->k_tile - 1) / uk->k_tile * uk->k_tile * uk->packed_bytes / 4;
}

extern const tb_gemm_microkernel tb_gemm_microkernel_ref;
#if defined(TB_HAVE_X86)
extern const tb_gemm_microkernel tb_gemm_microkernel_avx2;
extern const tb_gemm_microkernel tb_gemm_microkernel_avx512;
extern const tb_gemm_microkernel tb_gemm_microkernel_avx512_bf16; /* needs AVX512-BF16 */
extern const tb_gemm_microkernel tb_gemm_microkernel_amx_bf16;    /* needs AMX-BF16 and the OS permission */
void tb_gemm_epilogue_avx512(float *c, int64_t c_row_stride, int rows, int cols, const tb_gemm_epilogue *e);
#endif

/* Cache blocking used at run time (formulas in gemm_blocking.c and docs/kernels.md): from the CPUID
 * cache sizes, or the override. source: "cpuid", "table" (no cache facts) or "override". */
typedef struct tb_gemm_blocking {
    int64_t mc, kc, nc;
    const char *source;
} tb_gemm_blocking;
tb_gemm_blocking tb_gemm_blocking_for(const tb_gemm_microkernel *uk);

/* Forces mc/kc/nc for every later product (values <= 0: that one back to the computed value; mc and
 * nc are rounded up to whole register tiles). For tests that must reach every edge path. */
TB_API void tb_gemm_set_blocking_override(int64_t mc, int64_t kc, int64_t nc);

/* Reads TORCHBURN_GEMM_BLOCKING=mc,kc,nc into the override; a malformed value is an error naming it
 * (the override then stays unset). Called by the Python extension at import. */
TB_API tb_status tb_gemm_blocking_init(void);

/* Whether TORCHBURN_DEBUG asks the kernels to log their choices (read once). */
bool tb_kernels_debug(void);

/* Which kernel each family runs at `isa` on this CPU, as cpu_info() reports it (NUL-terminated). */
void tb_kernel_variants(tb_isa isa, char gemm_f32[160], char gemm_bf16[96], char conv[160], char qmatmul[64]);

/* The bf16 GEMM variant name at `isa` (gemm_bf16.c). */
const char *tb_gemm_bf16_variant(tb_isa isa);

/* The micro-kernel table for a product at `isa` and `precision` (TB_GEMM_PRECISION_DEFAULT resolved
 * to the process setting): the bf16 table where bf16 is asked for and the CPU has AVX512-BF16 at the
 * AVX-512 level, else tb_gemm_microkernel_for(isa) (f32: bf16 precision permits, never demands). */
const tb_gemm_microkernel *tb_gemm_microkernel_for_precision(tb_isa isa, tb_gemm_precision precision);

/* Portable packers (used when a table leaves pack_a/pack_b NULL; tile sizes passed explicitly). */
void tb_gemm_pack_a_portable(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc,
                             int mr, float *a_panel);
void tb_gemm_pack_b_portable(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc,
                             int nr, float *b_panel);

/* Naive reference of the whole tb_gemm_desc contract (same validation, double accumulation, scalar
 * libm epilogue, single thread). The golden model for tests and the `reference` engine. */
tb_status tb_gemm_f32_reference(const tb_gemm_desc *desc);

/* Validates a descriptor (shared by the driver and the reference). `where` prefixes the message. */
tb_status tb_gemm_validate(const tb_gemm_desc *desc, const char *where);

/* Scalar activation used by the reference epilogue (exact-erf GELU for TB_ACTIVATION_GELU). */
float tb_gemm_activation_scalar(tb_activation activation, float x);

/* The portable epilogue (libm math), also the scalar ISA's. */
void tb_gemm_epilogue_portable(float *c, int64_t c_row_stride, int rows, int cols, const tb_gemm_epilogue *e);

/* Per-thread grow-only scratch (64-byte aligned, from tb_alloc, freed when the thread exits): at least
 * `bytes` for `slot` of the calling thread, valid until that slot is requested again on this thread.
 * Allocation failure returns its status. One slot per kernel family so that one may call another. */
typedef enum tb_scratch_slot { TB_SCRATCH_GEMM = 0, TB_SCRATCH_ATTENTION, TB_SCRATCH_SLOT_COUNT } tb_scratch_slot;
tb_status tb_kernel_scratch(tb_scratch_slot slot, size_t bytes, float **out);

/* Fallible work units (GEMM cells, attention units) over the thread pool: run(context, unit,
 * &failed_bytes) for every unit of [0, count), on the pool when `parallel`, else on the caller. After
 * the first failure the remaining units are skipped; its status is returned and, when it was an
 * allocation, *failed_bytes says how much (the unit's error message, if any, was set on another
 * thread, so the caller words its own). */
typedef tb_status (*tb_unit_fn)(void *context, int64_t unit, size_t *failed_bytes);
tb_status tb_run_units(tb_unit_fn run, void *context, int64_t count, bool parallel, size_t *failed_bytes);

/* The micro-kernel table for an ISA (the scalar one for ISAs without their own). */
const tb_gemm_microkernel *tb_gemm_microkernel_for(tb_isa isa);

/* ---- attention softmax helpers (per ISA) ----
 * attention.c does Q K^T and P V with the GEMM micro-kernel above; these do the online-softmax row
 * work in between. None allocates. */
typedef struct tb_attention_kernels {
    const char *isa_name;
    /* max of x[0, n) (n >= 1); NaN when any element is NaN */
    float (*row_max)(const float *x, int64_t n);
    /* x[j] = exp(x[j] - shift) in place for j < n (-inf gives 0); returns the sum of the new x */
    float (*exp_sum)(float *x, int64_t n, float shift);
    /* x[j] *= factor for j < n */
    void (*scale)(float *x, int64_t n, float factor);
    /* x[j] += mask[j] for j < n (an additive mask row, unit stride) */
    void (*add_mask)(float *x, const float *mask, int64_t n);
    /* x[j] = -inf where keep[j] == 0, for j < n (a boolean mask row, unit stride; 1 = attend) */
    void (*bool_mask)(float *x, const uint8_t *keep, int64_t n);
} tb_attention_kernels;

extern const tb_attention_kernels tb_attention_kernels_ref;
#if defined(TB_HAVE_X86)
extern const tb_attention_kernels tb_attention_kernels_avx2;
extern const tb_attention_kernels tb_attention_kernels_avx512;
#endif

/* The helpers for an ISA (the scalar ones for ISAs without their own). */
const tb_attention_kernels *tb_attention_kernels_for(tb_isa isa);

/* Adds the masks of query row i (head h, batch entry b) to its scores for keys [j0, j0 + kb): the
 * additive float mask, the boolean mask (0 = masked: -inf) and causal (key j visible to position i
 * iff j <= i), each optional; mask strides as in tb_attention_desc. The mask row is read in place
 * through its broadcast strides (nothing is expanded); a unit-stride row goes through ak's SIMD
 * add_mask / bool_mask. Forward and backward share it so they mask identically. */
void tb_attention_apply_masks(const tb_attention_kernels *ak, const float *float_mask, const int64_t *float_mask_strides, const uint8_t *bool_mask,
                              const int64_t *bool_mask_strides, bool causal, int64_t b, int64_t h, int64_t i,
                              int64_t j0, int64_t kb, float *srow);

#endif
