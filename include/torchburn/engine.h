/* Engines: where computation runs. An engine is a table of function pointers (device facts, which ops
 * it takes, buffers, running a sequence of ops, synchronizing) and the registry lists the engines of
 * this build: `native_cpu` (SIMD kernels over the thread pool, the default), `reference` (the scalar
 * reference kernels on one thread, the golden path; alias `burn`) and `vulkan` (compute shaders
 * through a dlopen'd Vulkan loader; present in the registry even when no loader or device exists, in
 * which case it reports itself unavailable).
 *
 * Selection (tb_engine_select_from_env, called once by the Python extension at import):
 *   TORCHBURN_ENGINE = native_cpu | reference | burn | vulkan | gpu   (unset: from TORCHBURN_DEVICE)
 *   TORCHBURN_DEVICE = cpu | auto | gpu   (auto: vulkan when a non-CPU Vulkan device exists)
 * Choosing `reference` forces the scalar ISA and one kernel thread for every front door (compile
 * backend, ops, LLM), since all of them dispatch through tb_isa_active() and the thread pool.
 *
 * Ops: an engine runs tb_engine_op records on its own buffers (f32, contiguous). Shape letters: M, N,
 * K of a matmul; R rows of L elements for softmax and the norms. */
#ifndef TORCHBURN_ENGINE_H
#define TORCHBURN_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tb_engine_op_kind {
    TB_ENGINE_OP_UNARY = 0,   /* y[i] = op(a[i]), i < n; code: tb_unary_op (kernels/elementwise.h order) */
    TB_ENGINE_OP_BINARY,      /* y[i] = a[i] op b[i % b_len], i < n; b_len divides n; code: tb_binary_op */
    TB_ENGINE_OP_MATMUL,      /* y[M,N] = a[M,K] @ B + bias[N]; B = b[K,N], or b[N,K] when trans_b; batched
                               * when batch > 1 (a_batch / b_batch elements apart; b_batch 0 shares B) */
    TB_ENGINE_OP_SOFTMAX,     /* over each row of a[R,L]; log_softmax when `log` */
    TB_ENGINE_OP_RMS_NORM,    /* y = a * rsqrt(mean(a^2) + eps) * weight(b)[L] (b optional) */
    TB_ENGINE_OP_LAYER_NORM,  /* y = (a - mean) * rsqrt(var + eps) * weight(b)[L] + bias(c)[L] (b, c optional) */
    TB_ENGINE_OP_FUSED,       /* an elementwise chain (op->fused): y[i] = the last step over inputs a, b, c, d,
                               * i < n; input k read at (i / inner[k]) % len[k]. One dispatch on a GPU engine
                               * (a pipeline specialized to the chain, cached), no intermediate buffers */
    TB_ENGINE_OP_REDUCE,      /* a viewed as [R = rows, L = len, inner]: y[r * inner + i] = reduce over l of
                               * a[(r * L + l) * inner + i]; code: tb_reduce_op (0 sum, 1 max, 2 min, 3
                               * logsumexp: CPU engines only) or 4 mean; max/min propagate NaN */
    TB_ENGINE_OP_STRIDED_COPY, /* y (n elements of op->strided.shape) = a read at a_offset + sum_d index_d *
                               * strides[d]: materializes a view (slice, permute, expand). y is contiguous,
                               * or (strided.row > 0) rows of `row` elements at y[r * y_stride + y_col0 + j]:
                               * one input's block of a cat */
    TB_ENGINE_OP_ATTENTION,   /* scaled dot-product attention (op->attention) over contiguous q = a
                               * [B, Hq, Tq, D], k = b [B, Hkv, Tk, D], v = c [B, Hkv, Tk, Dv] into y
                               * [B, Hq, Tq, Dv]; d = an additive float mask read through mask_strides
                               * (0: broadcast), optional; causal is top-left aligned (key j <= query i);
                               * a row with every key masked gives 0 */
    /* The LLM forward's ops (src/llm/llm_gpu.c; only GPU engines take them). Fields in op->llm. */
    TB_ENGINE_OP_QMATMUL,     /* y[M,N] = a[M,K] @ dequant(W[N,K]).T + bias(c)[N]; b = the quantized rows
                               * (torchburn/quant.h layout: int8[N,K], or uint8[N,K/2] nibbles q + 8 with
                               * element 2j in the low nibble), d = the f32 scales ([N] or [N, K/G]);
                               * code = 8 or 4, llm.group = G (int4) */
    TB_ENGINE_OP_LLM_ROPE,    /* for T rows of y = qkv[T, (Hq + 2 Hkv) D]: per-head RMSNorm of q and k by
                               * d = [q_norm D | k_norm D] (optional), rotate-half RoPE with a = [T][cos D/2,
                               * sin D/2], then k and v stored at positions pos0 + t of b = keys and
                               * c = values, both [Hkv][capacity][D] */
    TB_ENGINE_OP_LLM_ATTENTION, /* y[T, Hq D] = causal GQA softmax(q k / sqrt(D)) v for q in a = qkv (rows
                               * of llm.stride), keys b, values c as above, over positions [lo, pos] */
    TB_ENGINE_OP_SILU_MUL,    /* a[R, 2L] -> y[R, L]: silu(gate) * up with gate = a[r, :L], up = a[r, L:] */
    TB_ENGINE_OP_COPY,        /* y[y_col0 + i] = a[a_offset + i], i < n (floats; a != y): a row moved between
                               * buffers inside a run, e.g. the LLM prompt's last hidden row */
    TB_ENGINE_OP_CONVERT16,   /* n elements between f32 and a 16-bit format (`format`: 1 bf16, 2 f16): code 0
                               * widens a (16-bit words) to y (f32, exact); code 1 narrows a (f32) to y (16-bit
                               * words, round to nearest even, as PyTorch's CPU casts); code 2 rounds a (f32)
                               * through the format into y (f32; may be a). Needs 16-bit storage (GPU only) */
    TB_ENGINE_OP_COUNT
} tb_engine_op_kind;

/* How a matmul's b operand is stored. The 16-bit words are widened exactly to f32 in the kernel, so a
 * bf16/f16 weight gives the same products as its f32 widening at half the bytes. */
typedef enum tb_engine_weight_format {
    TB_ENGINE_WEIGHT_F32 = 0,
    TB_ENGINE_WEIGHT_BF16 = 1,
    TB_ENGINE_WEIGHT_F16 = 2,
} tb_engine_weight_format;

/* An elementwise chain (TB_ENGINE_OP_FUSED). Registers 0..3 are the inputs a, b, c, d (the first
 * `ninputs` of them), register 4 + s the result of step s; the op's result is the last step's. */
enum { TB_ENGINE_FUSED_INPUTS = 4, TB_ENGINE_FUSED_STEPS = 16 };

typedef enum tb_engine_step_kind {
    TB_ENGINE_STEP_UNARY = 0,        /* code: tb_unary_op of register lhs (alpha, lo, hi as the unary op's) */
    TB_ENGINE_STEP_BINARY = 1,       /* code: tb_binary_op, lhs op rhs */
    TB_ENGINE_STEP_SCALAR = 2,       /* lhs op scalar */
    TB_ENGINE_STEP_SCALAR_FIRST = 3, /* scalar op lhs (1 - x, 2 / x) */
} tb_engine_step_kind;

typedef struct tb_engine_fused_step {
    int kind, code, lhs, rhs;
    float alpha, lo, hi, scalar;
} tb_engine_fused_step;

typedef struct tb_engine_fused {
    int ninputs, nsteps;
    int64_t len[TB_ENGINE_FUSED_INPUTS], inner[TB_ENGINE_FUSED_INPUTS]; /* len * inner divides n */
    tb_engine_fused_step steps[TB_ENGINE_FUSED_STEPS];
} tb_engine_fused;

enum { TB_ENGINE_STRIDED_DIMS = 5 };

typedef struct tb_engine_strided {
    int ndim; /* 0 to TB_ENGINE_STRIDED_DIMS; n = the product of shape */
    int64_t shape[TB_ENGINE_STRIDED_DIMS], strides[TB_ENGINE_STRIDED_DIMS]; /* strides in elements, >= 0 */
    int64_t row; /* 0: y contiguous; else elements per output row (the op's y_stride, y_col0 place them) */
} tb_engine_strided;

typedef struct tb_engine_attention {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
    int64_t mask_strides[4]; /* over [B, Hq, Tq, Tk] */
    bool causal;
    float scale;
} tb_engine_attention;

/* An engine-owned buffer of `bytes` bytes (opaque; each engine extends it). */
typedef struct tb_engine_buffer tb_engine_buffer;

/* A copy out of an engine buffer into host memory that run_download does after the ops. */
typedef struct tb_engine_download {
    const tb_engine_buffer *buffer;
    size_t offset, bytes;
    void *dst;
} tb_engine_download;

typedef struct tb_engine_op {
    tb_engine_op_kind kind;
    int code;         /* unary / binary op index */
    int64_t n;        /* unary, binary: elements of y (and of a) */
    int64_t b_len;    /* binary: elements of b (n, 1, or a divisor of n: b repeats) */
    int64_t m, k;     /* matmul: M and K (N is `n`) */
    int64_t rows, len; /* softmax, norms, reduce: R and L */
    int64_t inner;    /* reduce: the trailing elements each reduced position spans (1: rows) */
    bool trans_b, log;
    int b_format;     /* matmul: tb_engine_weight_format of b (16-bit: engines with 16-bit storage only) */
    int format;       /* convert16: the 16-bit format (TB_ENGINE_WEIGHT_BF16 or TB_ENGINE_WEIGHT_F16) */
    float eps;        /* norms */
    float alpha, lo, hi; /* unary: leaky_relu slope, clamp bounds */
    union { /* the parameters of one kind: llm (the LLM ops), strided (strided_copy), attention */
    struct {
        int64_t group;                   /* qmatmul int4 group size */
        int64_t heads, kv_heads, head_dim; /* rope, attention */
        int64_t tokens, pos0, capacity;  /* T rows at positions pos0 + t; cache positions per kv head */
        int64_t window, stride;          /* sliding window (0: full); floats per qkv row */
    } llm;
    tb_engine_strided strided; /* strided_copy: the view read from a (at a_offset) */
    tb_engine_attention attention;
    };
    /* matmul, qmatmul: the output may be a column block of a wider matrix: row r, column j of the
     * product goes to y[r * y_stride + y_col0 + j] (y_stride 0 means n, then y_col0 must be 0). A weight
     * split by rows across buffers (larger than maxStorageBufferRange) runs as one op per part. */
    int64_t y_stride, y_col0;
    int64_t batch, a_batch, b_batch; /* matmul: products (0 or 1: one); product z reads a + z a_batch, b + z
                                      * b_batch and writes rows from z * M * y_stride */
    int64_t a_offset; /* copy: the first float of a that is read */
    const tb_engine_fused *fused; /* fused: the chain (owned by the caller; kept small, since the LLM
                                   * builds hundreds of ops a step) */
    tb_engine_buffer *a, *b, *c; /* inputs; NULL when absent (b: weight / matmul B, c: bias) */
    tb_engine_buffer *d;         /* fourth input of the LLM ops (scales, norm weights); NULL otherwise */
    tb_engine_buffer *y;         /* output; may equal a for unary, binary and row ops (in place) */
} tb_engine_op;

/* Facts about an engine's device. Strings are "" when unknown; numbers 0. */
typedef struct tb_engine_device_info {
    bool available;
    char reason[256];       /* why not available (or "") */
    char backend[16];       /* "cpu" or "Vulkan" */
    char adapter_name[256];
    char device_type[16];   /* "cpu", "discrete", "integrated", "virtual", "other" */
    char driver_name[256];
    char driver_info[256];
    uint32_t api_version, driver_version, vendor_id, device_id;
    uint64_t vram_bytes;    /* device-local heap bytes (0 for CPU engines) */
    uint64_t max_storage_buffer_range;
    uint32_t max_workgroup_count[3];
    uint32_t max_workgroup_invocations;
    uint32_t max_shared_memory_bytes;
    uint32_t subgroup_size;
    bool subgroup_reductions; /* vulkan: the reductions use subgroup operations (else shared memory) */
    bool storage_16bit;       /* vulkan: storageBuffer16BitAccess is on: matmul takes bf16/f16 b operands */
    int device_index, device_count;
    bool staging;           /* vulkan: buffers in device-local memory, copied through a staging buffer */
    uint64_t submits, dispatches; /* counters since the engine started (batching is visible here) */
    uint64_t specialized_pipelines; /* vulkan: pipelines built for fused elementwise chains (one per distinct
                                     * chain; a cached chain builds none) */
    uint64_t transfers;     /* staging: submissions of copies alone (outside any run; 0 without staging) */
    uint64_t batched_copies; /* staging: copies recorded into a run's own submission (uploads before its
                              * ops, downloads after them) */
    uint64_t upload_bytes, download_bytes; /* host <-> engine buffer copies, staged or not */
} tb_engine_device_info;

typedef struct tb_engine {
    const char *name;
    /* Brings the engine up (idempotent; cheap after the first call). An unavailable device is an
     * error whose message says why (TB_ERR_UNSUPPORTED). */
    tb_status (*init)(void);
    /* Fills `out` (also when unavailable: `available` false and `reason` set). Never fails. */
    void (*device_info)(tb_engine_device_info *out);
    /* Whether run() accepts this op (kinds, codes, sizes within device limits). Buffers are not read. */
    bool (*supports_op)(const tb_engine_op *op);
    tb_status (*buffer_alloc)(size_t bytes, tb_engine_buffer **out);
    void (*buffer_free)(tb_engine_buffer *buffer); /* NULL is a no-op */
    /* Copies src (the caller may reuse it on return). An engine with device-local memory may defer the
     * copy into the buffer to its next run (it then goes into that run's submission, before the ops);
     * every later run, download or synchronize observes it. */
    tb_status (*buffer_upload)(tb_engine_buffer *buffer, size_t offset, const void *src, size_t bytes);
    tb_status (*buffer_download)(const tb_engine_buffer *buffer, size_t offset, void *dst, size_t bytes);
    /* Runs ops[0..count) in order (each sees the previous ones' writes) and returns when all are done.
     * A GPU engine records them into one command buffer and submits once. Errors name the op index. */
    tb_status (*run)(const tb_engine_op *ops, int count);
    /* Optional (NULL: run, then buffer_download each): run() followed by the downloads, in the same
     * submission on a GPU engine. Call it through tb_engine_run_download. */
    tb_status (*run_download)(const tb_engine_op *ops, int count, const tb_engine_download *downloads, int ndownloads);
    /* Waits for outstanding work (run() already waits; kept for engines that queue). */
    tb_status (*synchronize)(void);
} tb_engine;

/* ---- registry ---- */

TB_API int tb_engine_count(void);
TB_API const tb_engine *tb_engine_at(int index);
/* By name or alias (native_cpu, cpu; reference, burn; vulkan, gpu). NULL when unknown. */
TB_API const tb_engine *tb_engine_find(const char *name);

/* Reads TORCHBURN_ENGINE / TORCHBURN_DEVICE once and fixes the active engine. An unknown name is an
 * error (the active engine stays native_cpu). Selecting `reference` forces the scalar ISA and one
 * thread (a conflicting TORCHBURN_ISA is an error). A GPU request whose device is missing is NOT
 * failed here (import must work without a GPU): tb_engine_active reports it. */
TB_API tb_status tb_engine_select_from_env(void);

/* The active engine. When TORCHBURN_DEVICE=gpu (or TORCHBURN_ENGINE=vulkan) asked for a GPU that is
 * not there, returns TB_ERR_UNSUPPORTED with the reason and leaves *out NULL. */
TB_API tb_status tb_engine_active(const tb_engine **out);

/* Convenience: `op` checked against `engine`'s supports_op with a message on refusal. */
TB_API tb_status tb_engine_check_op(const tb_engine *engine, const tb_engine_op *op);

/* ops[0..count) then the downloads: one submission (queued uploads included) where the engine batches. */
TB_API tb_status tb_engine_run_download(const tb_engine *engine, const tb_engine_op *ops, int count,
                                        const tb_engine_download *downloads, int ndownloads);

/* The op kind's name ("unary", "binary", "matmul", "softmax", "rms_norm", "layer_norm", "fused", ...). */
TB_API const char *tb_engine_op_kind_name(tb_engine_op_kind kind);

/* Forgets the vulkan engine's device so the next use probes again with the current settings (tests
 * change TORCHBURN_VULKAN_* between cases). Refused while any vulkan buffer is alive. */
TB_API tb_status tb_engine_vulkan_reset(void);

/* ---- compiled graphs on an engine (src/engine/engine_graph.c) ---- */

struct tb_graph;
typedef struct tb_engine_program tb_engine_program;

/* Translates a whole graph (f32 values; see engine_graph.c for the ops taken) into ops over engine
 * buffers. TB_ERR_UNSUPPORTED names the first node the engine does not take; then run the CPU plan. */
TB_API tb_status tb_engine_program_build(const tb_engine *engine, const struct tb_graph *graph, tb_engine_program **out);
/* Runs it as one batch: uploads inputs[i] (contiguous, the graph's input order), runs, downloads into
 * outputs[j] (contiguous). Thread-safe. */
TB_API tb_status tb_engine_program_run(const tb_engine_program *program, void *const *inputs, void *const *outputs);
TB_API int tb_engine_program_num_ops(const tb_engine_program *program);
/* Bytes one run copies: inputs to the engine, outputs back (the cost of leaving native_cpu). */
TB_API void tb_engine_program_copy_bytes(const tb_engine_program *program, size_t *to_engine, size_t *from_engine);
TB_API void tb_engine_program_free(tb_engine_program *program);

/* The engines themselves (also reachable through the registry). */
extern const tb_engine tb_engine_native_cpu;
extern const tb_engine tb_engine_reference;
extern const tb_engine tb_engine_vulkan;

#ifdef __cplusplus
}
#endif
#endif
