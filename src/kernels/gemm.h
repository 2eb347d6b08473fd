/* Contract of the f32 GEMM driver and of scaled-dot-product attention (forward and backward).
 *
 * C[m, n] = epilogue(alpha * sum_k A[m, k] * B[k, n] + beta * C[m, n]), where the epilogue is, in
 * order: + bias, activation, + residual. Operands use general (row, col) strides in elements so
 * transposed views need no copy. The driver packs panels of A and B into per-thread scratch
 * (_Thread_local, grown with tb_alloc; that growth is the only allocation and failure is returned),
 * runs a register-blocked micro-kernel chosen by ISA, applies the epilogue while the C tile is hot, and
 * splits the work over the thread pool. */
#ifndef TORCHBURN_KERNELS_GEMM_H
#define TORCHBURN_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/cpu.h"
#include "torchburn/status.h"

typedef enum tb_activation {
    TB_ACTIVATION_NONE = 0,
    TB_ACTIVATION_RELU,
    TB_ACTIVATION_GELU,      /* exact erf form */
    TB_ACTIVATION_GELU_TANH, /* tanh approximation */
    TB_ACTIVATION_SILU,
    TB_ACTIVATION_SIGMOID,
    TB_ACTIVATION_TANH,
    TB_ACTIVATION_COUNT
} tb_activation;

typedef enum tb_bias_kind {
    TB_BIAS_NONE = 0,
    TB_BIAS_PER_COLUMN, /* bias[n] (nn.Linear) */
    TB_BIAS_PER_ROW,    /* bias[m] (convolution as GEMM with output channels as rows) */
} tb_bias_kind;

/* Internal precision of an f32 product (like torch.set_float32_matmul_precision):
 *   DEFAULT: the process setting (tb_gemm_set_default_precision / TORCHBURN_MATMUL_PRECISION)
 *   HIGHEST: f32 multiply-adds
 *   BF16:    A and B rounded to bfloat16 (nearest even), products accumulated in f32; exact for
 *            operands that already are bf16 values. Used where the CPU has AMX-BF16 (tiles) or
 *            AVX512-BF16, else f32. */
typedef enum tb_gemm_precision {
    TB_GEMM_PRECISION_DEFAULT = 0,
    TB_GEMM_PRECISION_HIGHEST,
    TB_GEMM_PRECISION_BF16,
} tb_gemm_precision;

/* The process-wide precision DEFAULT resolves to (initially HIGHEST). */
TB_API void tb_gemm_set_default_precision(tb_gemm_precision precision);
TB_API tb_gemm_precision tb_gemm_default_precision(void);

/* Reads TORCHBURN_MATMUL_PRECISION: highest | high (both f32: there is no TF32 on CPUs) | medium | bf16
 * (both bf16); anything else is an error naming the value. Called by the Python extension at import. */
TB_API TB_NODISCARD tb_status tb_gemm_precision_init(void);

/* Whether bf16 products may run on AMX tiles where CPUID, XCR0 and the OS permission allow them
 * (initially true; false: the AVX512-BF16 kernel). Packed Bs made under the other setting no longer
 * match (tb_gemm_packed_b_matches), so callers repack. */
TB_API void tb_gemm_set_amx_allowed(bool allowed);
/* The setting above (also read by the LLM layer's AMX-INT8 prompt GEMM). */
TB_API bool tb_gemm_amx_allowed(void);

/* Reads TORCHBURN_AMX: 0 (never use AMX) | 1 (use it where allowed, the default); anything else is an
 * error naming the value. Called by the Python extension at import. */
TB_API TB_NODISCARD tb_status tb_gemm_amx_init(void);

/* B packed once into the driver's panel layout (for one ISA, precision, k and n), so products that use
 * the same B again (nn.Linear weights, the graph's constant operands) skip packing it each call.
 * Made by tb_gemm_pack_b; freed with tb_gemm_packed_b_free. */
typedef struct tb_gemm_packed_b tb_gemm_packed_b;

typedef struct tb_gemm_desc {
    int64_t m, n, k;
    const float *a; /* A[i, p] = a[i * a_row_stride + p * a_col_stride] */
    int64_t a_row_stride, a_col_stride;
    const float *b; /* B[p, j] = b[p * b_row_stride + j * b_col_stride] */
    int64_t b_row_stride, b_col_stride;
    float *c; /* C[i, j] = c[i * c_row_stride + j] */
    int64_t c_row_stride;
    float alpha; /* usually 1 */
    float beta;  /* 0: C is write-only (never read, so NaN garbage in C is harmless) */
    tb_bias_kind bias_kind;
    const float *bias;
    tb_activation activation;
    const float *residual; /* R[i, j] = residual[i * residual_row_stride + j]; may be NULL */
    int64_t residual_row_stride;
    /* batch: `batch` independent products; pointer offsets per batch entry (elements) */
    int64_t batch;
    int64_t a_batch_stride, b_batch_stride, c_batch_stride, residual_batch_stride;
    tb_gemm_precision precision; /* 0 (DEFAULT): the process setting */
    /* optional: B already packed (tb_gemm_pack_b of this k x n B at the ISA and precision this product
     * runs with; shared by every batch entry). `b` may then be NULL; when it is given too, products
     * of a few rows may read it in place instead. A packed B made for another shape, ISA, precision
     * or blocking is an error (TB_ERR_INVALID_ARGUMENT), never a wrong product. */
    const tb_gemm_packed_b *b_packed;
    /* optional: bfloat16 operands read in place (bf16 tensors, no widened copy). When a_bf16 and
     * b_bf16 are given (both, with a and b NULL), A[i, p] = a_bf16[i * a_row_stride + p * a_col_stride]
     * and B likewise, and the product runs at BF16 precision (exact for such operands). Supported
     * where tb_gemm_bf16_operands_supported(isa) says so; elsewhere TB_ERR_UNSUPPORTED (widen to f32
     * and use a / b instead). Not with b_packed. */
    const uint16_t *a_bf16, *b_bf16;
} tb_gemm_desc;

/* Whether products at `isa` can take a_bf16 / b_bf16 operands (the bf16 kernel packs bf16 sources). */
TB_API bool tb_gemm_bf16_operands_supported(tb_isa isa);

/* Packs B (k x n, B[p, j] = b[p * b_row_stride + j * b_col_stride]) for products at `isa` and
 * `precision` (DEFAULT: the process setting now). k, n >= 1. Errors: bad sizes, an unsupported ISA,
 * allocation failure. */
TB_API TB_NODISCARD tb_status tb_gemm_pack_b(int64_t k, int64_t n, const float *b, int64_t b_row_stride,
                                             int64_t b_col_stride, tb_isa isa, tb_gemm_precision precision,
                                             tb_gemm_packed_b **out);
TB_API void tb_gemm_packed_b_free(tb_gemm_packed_b *packed);
/* Bytes the packed copy holds. */
TB_API size_t tb_gemm_packed_b_bytes(const tb_gemm_packed_b *packed);
/* Whether `packed` fits a product of this k x n at `isa` and `precision` with the current blocking
 * (what the driver checks; a cache uses it to decide to repack). */
TB_API bool tb_gemm_packed_b_matches(const tb_gemm_packed_b *packed, int64_t k, int64_t n, tb_isa isa,
                                     tb_gemm_precision precision);

/* Runs the product at the active ISA (or the given one with _isa). k == 0 gives the epilogue of zero.
 * Errors: invalid sizes/NULL pointers (TB_ERR_INVALID_ARGUMENT), scratch allocation failure. */
TB_API TB_NODISCARD tb_status tb_gemm_f32(const tb_gemm_desc *desc);
TB_API TB_NODISCARD tb_status tb_gemm_f32_isa(const tb_gemm_desc *desc, tb_isa isa);

/* tb_gemm_f32 with B taken from `b_storage` (desc->b points into it): a packed copy of B is kept on the
 * storage (tb_storage_derived) and reused while the storage's version, the view of B, the ISA, the
 * precision and the blocking stay the same — B is packed on the second product at one version, so
 * weights that change every step are never packed for nothing. Storages that are not cacheable
 * (memory from outside torchburn, or exported: tb_storage_cacheable) and products that would not pack
 * B (a few rows, batches) run plain tb_gemm_f32. Same results as tb_gemm_f32 bit for bit. */
struct tb_storage;
TB_API TB_NODISCARD tb_status tb_gemm_f32_cached_b(const tb_gemm_desc *desc, struct tb_storage *b_storage);
/* Bytes of the packed copy cached on `storage` (0: none) — for tests and stats. */
TB_API size_t tb_gemm_cached_b_bytes(struct tb_storage *storage);
/* Process-wide counts of tb_gemm_f32_cached_b: B operands packed into a cache, products that used one. */
TB_API void tb_gemm_cached_b_counts(int64_t *packs, int64_t *hits);
/* Prepacking on or off for the process (initially on unless TORCHBURN_PREPACK=0). */
TB_API void tb_gemm_set_prepack(bool enabled);
TB_API bool tb_gemm_prepack_enabled(void);

/* Scaled dot-product attention, PyTorch semantics:
 * out[b, h, i, :] = softmax_j(scale * q[b,h,i,:] . k[b,h',j,:] + mask[b,h,i,j]) @ v[b,h',j,:]
 * with h' = h / (q_heads / kv_heads) (grouped-query attention). Causal masking keeps j <= i
 * (top-left aligned, as torch's is_causal). Tiled over keys with an online softmax, so memory is
 * O(T * D) per thread, never O(T^2). Rows whose every key is masked (or kv_len == 0) give 0, as
 * torch 2.13's scaled_dot_product_attention does on CPU (math and flash backends alike). */
typedef struct tb_attention_desc {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
    const float *q; int64_t q_strides[4];  /* [B, Hq, Tq, D], last stride must be 1 */
    const float *k; int64_t k_strides[4];  /* [B, Hkv, Tk, D], last stride must be 1 */
    const float *v; int64_t v_strides[4];  /* [B, Hkv, Tk, Dv], last stride must be 1 */
    float *out; int64_t out_strides[4];    /* [B, Hq, Tq, Dv], last stride must be 1 */
    const float *float_mask; int64_t float_mask_strides[4]; /* additive [B,Hq,Tq,Tk], 0-strides broadcast; or NULL */
    const uint8_t *bool_mask; int64_t bool_mask_strides[4]; /* 1 = attend; or NULL */
    bool causal;
    float scale; /* usually 1/sqrt(D) */
    /* optional log-sum-exp of each row's scores, the second output of torch's CPU flash kernel:
     * lse[b, h, i] = log(sum_j exp(scale * q_i . k_j + mask_ij)) (natural log). A row whose every
     * key is masked (or kv_len == 0) gets 0, as torch gives (its backward then sees P = exp(-inf) = 0). */
    float *lse; int64_t lse_strides[3];    /* [B, Hq, Tq]; NULL: not wanted */
} tb_attention_desc;

TB_API TB_NODISCARD tb_status tb_attention_f32(const tb_attention_desc *desc);
TB_API TB_NODISCARD tb_status tb_attention_f32_isa(const tb_attention_desc *desc, tb_isa isa);

/* Gradients of scaled dot-product attention (the forward above) given the forward's out and lse:
 *   P = exp(scale * Q K^T + mask - lse)            (the softmax, rebuilt a query block at a time)
 *   grad_v[b,h'] = sum over the group's heads of P^T dO
 *   dS = P * (dO V^T - rowsum(dO * O))
 *   grad_q = scale * dS K,  grad_k[b,h'] = sum over the group's heads of scale * dS^T Q
 * Layouts, masks (broadcast through 0 strides), causal (top-left aligned) and GQA as in
 * tb_attention_desc; every last-dim stride must be 1. Rows whose lse is -inf or whose every key is
 * masked give zero gradients (torch's own backward gives NaN for lse = -inf, but its forward never
 * produces it: it writes 0 for those rows). Work is split over (batch, kv head), so each task owns
 * its grad_k/grad_v slices; scratch is 2 x (query block x Tk) floats per task from tb_alloc.
 * Errors: TB_ERR_INVALID_ARGUMENT / TB_ERR_SHAPE for a bad descriptor, TB_ERR_OUT_OF_MEMORY. */
typedef struct tb_attention_backward_desc {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
    const float *grad_out; int64_t grad_out_strides[4]; /* [B, Hq, Tq, Dv] */
    const float *q; int64_t q_strides[4];               /* [B, Hq, Tq, D] */
    const float *k; int64_t k_strides[4];               /* [B, Hkv, Tk, D] */
    const float *v; int64_t v_strides[4];               /* [B, Hkv, Tk, Dv] */
    const float *out; int64_t out_strides[4];           /* [B, Hq, Tq, Dv], the forward's output */
    const float *lse; int64_t lse_strides[3];           /* [B, Hq, Tq], the forward's log-sum-exp */
    const float *float_mask; int64_t float_mask_strides[4]; /* as in tb_attention_desc; or NULL */
    const uint8_t *bool_mask; int64_t bool_mask_strides[4];
    bool causal;
    float scale;
    float *grad_q; int64_t grad_q_strides[4];           /* [B, Hq, Tq, D] */
    float *grad_k; int64_t grad_k_strides[4];           /* [B, Hkv, Tk, D] */
    float *grad_v; int64_t grad_v_strides[4];           /* [B, Hkv, Tk, Dv] */
} tb_attention_backward_desc;

TB_API TB_NODISCARD tb_status tb_attention_backward_f32(const tb_attention_backward_desc *desc);

#endif
