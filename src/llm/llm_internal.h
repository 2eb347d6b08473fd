/* Internal structures of the LLM layer shared by its files: the model (weights in their run format),
 * the session (KV cache and scratch), and the per-ISA table of the small kernels the forward pass needs
 * beyond the GEMM and quantized-matmul drivers. Shape letters as in torchburn/llm.h. */
#ifndef TORCHBURN_LLM_INTERNAL_H
#define TORCHBURN_LLM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "torchburn/cpu.h"
#include "torchburn/llm.h"
#include "torchburn/quant.h"
#include "torchburn/safetensors.h"

/* Prompt positions run per forward chunk (bounded scratch); also the unit of reproducible KV reuse. */
#define TB_LLM_PREFILL_CHUNK 256

/* Version of the quantized-weight cache layout (bumped whenever tensor names or formats change). */
#define TB_LLM_CACHE_FORMAT "torchburn-llm-cache-2" /* 2: per-tensor BLAKE3 digests */

/* ---- kernels (contracts; scalar reference in llm_kernels_ref.c, SIMD bodies in llm_kernels_body.h) ---- */

enum { TB_LLM_KEY_BLOCK = 16 };

typedef struct tb_llm_kernels {
    const char *name;
    /* y[j] = sum_p w[j * k + p] * x[p] for j < n (rows of w contiguous, K = k). */
    void (*gemv_f32)(const float *w, int64_t k, const float *x, float *y, int64_t n);
    /* Keys are stored in blocks of TB_LLM_KEY_BLOCK positions, d-major inside a block: element i of key
     * 16b + l is key_blocks[(b * d + i) * 16 + l], so 16 scores come out of d vector FMAs with no horizontal
     * sums. scores[g * score_stride + j] = scale * sum_i q[g * d + i] * key_j[i] for g < groups and every
     * j < 16 * blocks (f32 or IEEE half keys, by keys_f16). */
    void (*attn_scores)(const float *q, int64_t groups, int64_t d, const void *key_blocks, bool keys_f16,
                        int64_t blocks, float scale, float *scores, int64_t score_stride);
    /* out[g * d + i] = sum_j p[g * p_stride + j] * value_j[i] (overwrites out). */
    void (*attn_values)(const float *p, int64_t groups, int64_t p_stride, const void *values, bool values_f16,
                        int64_t len, int64_t d, float *out);
    /* x[0..n) <- softmax(x) in place (max-shifted; n >= 1). */
    void (*softmax)(float *x, int64_t n);
    /* out[i] = silu(gate[i]) * up[i], silu(v) = v / (1 + exp(-v)). out may equal gate. */
    void (*silu_mul)(const float *gate, const float *up, float *out, int64_t n);
    /* y = weight * (x * rsqrt(mean(x^2) + eps)) over n values (transformers' order of roundings); y may be x. */
    void (*rms_norm)(const float *x, const float *weight, float *y, int64_t n, float eps);
    /* IEEE half <-> f32, round to nearest even. */
    void (*to_f16)(const float *x, uint16_t *y, int64_t n);
    /* Reads n floats with the widest loads and returns their sum (the bandwidth probe's sweep). */
    /* Index of the first maximum of x[0..n) (n >= 1; NaN never compares greater, as the scalar loop). */
    int64_t (*argmax)(const float *x, int64_t n);
} tb_llm_kernels;

extern const tb_llm_kernels tb_llm_kernels_ref;
#ifdef TB_HAVE_X86
extern const tb_llm_kernels tb_llm_kernels_avx2;
extern const tb_llm_kernels tb_llm_kernels_avx512;
#endif
/* The table for `isa` (the reference when the ISA is not compiled in or unsupported). */
const tb_llm_kernels *tb_llm_kernels_for(tb_isa isa);
const tb_llm_kernels *tb_llm_kernels_active(void);

/* ---- int4/int8 weights x int8 activations in blocks of 32 (llm_qmatmul.c) ----
 * Prepared activation row layouts (K padded with zeros; every value below is per row of x):
 *   int4 weights, per 128 values of K (block b, 256 bytes): xq int8[64] at k = 128b + 2i, xq int8[64] at
 *     k = 128b + 2i + 1, seeds int32[16] (lane l: -8 * sum of xq over k in [128b + 8l, +8)), lane scales
 *     f32[16] (lane l: scale of the 32-block holding k = 128b + 8l). Lane l of a VNNI dot product over the
 *     block covers exactly those 8 k, so it never straddles a weight group (G >= 32) or an x block.
 *   int8 weights, per 64 values of K (block c, 192 bytes): xq int8[64] in k order, seeds int32[16] (lane l:
 *     -128 * sum of xq over k in [64c + 4l, +4); the weights are read as unsigned w + 128), lane scales
 *     f32[16] (lane l: scale of the 32-block holding 64c + 4l). */
enum { TB_LLM_QACT_INT4_BLOCK_BYTES = 256, TB_LLM_QACT_INT8_BLOCK_BYTES = 192 };

typedef struct tb_llm_qrun {
    const tb_quant_weight *w;
    int64_t m;
    const unsigned char *act; /* m prepared rows, act_row_bytes apart */
    int64_t act_row_bytes;
    float *y;                 /* y[m * y_row_stride + n] */
    int64_t y_row_stride;
    const float *bias;        /* [N] or NULL */
} tb_llm_qrun;

typedef struct tb_llm_qkernels {
    const char *name;
    /* x[0..k) -> one prepared row (layout above); every kernel family produces the same bytes */
    void (*prepare)(tb_llm_quant format, const float *x, int64_t k, unsigned char *dst);
    /* y rows [0, m) x columns [n_begin, n_end); neither allocates nor fails */
    void (*rows)(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end);
    /* Optional GEMM for prompts (NULL: rows() runs them): its own transposed activation layout of
     * gemm_xt_bytes(m, k) bytes, filled by ranges of 16-row groups over [0, ceil(m / 16)), then columns
     * [n_begin, n_end) of y[m, N] (y_stride = N); gemm_rows returns false when its scratch allocation
     * failed. Same numbers as rows() up to f32 summation order. */
    int64_t (*gemm_xt_bytes)(int64_t m, int64_t k);
    void (*gemm_prepare)(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                         int64_t group_end, unsigned char *xt);
    bool (*gemm_rows)(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y, int64_t y_stride,
                      const float *bias, int64_t n_begin, int64_t n_end);
    /* The server's batched decode (NULL: none): like rows(), but each row of y has exactly the bits of an
     * m = 1 rows() call on that activation row (docs/serving.md "The batching contract"). */
    void (*batch_rows)(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end);
} tb_llm_qkernels;

#ifdef TB_HAVE_X86
int64_t tb_llm_gemm_xt_bytes_avx512vnni(int64_t m, int64_t k);
void tb_llm_gemm_prepare_avx512vnni(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                                    int64_t group_end, unsigned char *xt);
bool tb_llm_gemm_rows_avx512vnni(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y,
                                 int64_t y_stride, const float *bias, int64_t n_begin, int64_t n_end);
/* The AVX2 prompt GEMM (x86_avx2/llm_gemm_avx2.c): its own activation layout, the VNNI GEMM's bits. */
int64_t tb_llm_gemm_xt_bytes_avx2(int64_t m, int64_t k);
void tb_llm_gemm_prepare_avx2(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                              int64_t group_end, unsigned char *xt);
bool tb_llm_gemm_rows_avx2(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y, int64_t y_stride,
                           const float *bias, int64_t n_begin, int64_t n_end);
/* The AMX-INT8 prompt GEMM (x86_amx/llm_gemm_amx.c): its own activation layout, the VNNI GEMM's bits. */
int64_t tb_llm_gemm_xt_bytes_amx(int64_t m, int64_t k);
void tb_llm_gemm_prepare_amx(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                             int64_t group_end, unsigned char *xt);
bool tb_llm_gemm_rows_amx(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y, int64_t y_stride,
                          const float *bias, int64_t n_begin, int64_t n_end);
#endif

extern const tb_llm_qkernels tb_llm_qkernels_ref;
#ifdef TB_HAVE_X86
extern const tb_llm_qkernels tb_llm_qkernels_avx512vnni;
extern const tb_llm_qkernels tb_llm_qkernels_amx; /* avx512vnni with the AMX-INT8 prompt GEMM */
extern const tb_llm_qkernels tb_llm_qkernels_avx2; /* AVX2 + FMA, no VNNI: the reference's bits */
/* Rows [n_begin, n_end) of y for run->m prepared activation rows, each with the roundings of the single-row
 * VNNI decode kernel (x86_avx512vnni/llm_batch_rows_avx512vnni.c). */
void tb_llm_batch_rows_avx512vnni(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end);
#endif
/* The fast kernels for the active ISA, or NULL when there are none (the f32-activation path runs then);
 * the AMX family where CPUID, the OS permission and TORCHBURN_AMX allow AMX-INT8 tiles. */
const tb_llm_qkernels *tb_llm_qkernels_active(void);
int64_t tb_llm_qact_row_bytes(tb_llm_quant format, int64_t k);
/* One 32-value block x[0..n) (n <= 32) as int8 (scale = max|x| / 127, rint, zero past n; a non-finite value
 * makes the scale NaN and xq zero): the activation quantization every kernel family shares. */
void tb_llm_quantize_blocks32(const float *x, int64_t n, int8_t xq[32], float *scale);
/* One block of the layout (n <= 128 for int4, <= 64 for int8 values of x; the rest is zero padding). */
void tb_llm_qact_prepare_block(tb_llm_quant format, const float *x, int64_t n, unsigned char *out);
/* A whole prepared row by tb_llm_qact_prepare_block (the reference's prepare). */
void tb_llm_qact_prepare_ref(tb_llm_quant format, const float *x, int64_t k, unsigned char *dst);

/* ---- model ---- */

/* A linear layer's weight W[N, K] (y = x @ W.T + bias) in its run format. */
typedef struct llm_matrix {
    int64_t n, k;
    tb_llm_quant format;
    const float *f32;    /* [N, K] when format is none */
    tb_quant_weight q;   /* when quantized */
    bool has_bias;       /* the config says this layer carries a bias */
    const float *bias;   /* [N] when has_bias, else NULL */
} llm_matrix;

/* y[M, N] = x @ W.T + bias for quantized W through `kernels` (prepares x into thread-local scratch). */
tb_status tb_llm_qmatmul(const tb_llm_qkernels *kernels, const llm_matrix *w, const float *x, int64_t x_stride,
                         int64_t m, float *y);

typedef struct llm_layer {
    const float *attn_norm; /* [C] */
    llm_matrix qkv;         /* [(Hq + 2 Hkv) D, C]: q rows, then k rows, then v rows */
    const float *q_norm;    /* [D] per-head RMSNorm of q (qwen3) or NULL */
    const float *k_norm;    /* [D] or NULL */
    llm_matrix o;           /* [C, Hq D] */
    const float *mlp_norm;  /* [C] */
    llm_matrix gate_up;     /* [2 I, C]: gate rows, then up rows */
    llm_matrix down;        /* [C, I] */
    int64_t window;         /* sliding window (keys j with p - j < window); 0 = full attention */
} llm_layer;

/* One owned buffer (tb_alloc), listed so the model can free everything. */
typedef struct llm_buffer {
    void *data;
    int64_t bytes;
} llm_buffer;

struct tb_llm_model {
    tb_hf_config config;
    tb_llm_quant quant;
    int64_t group_size;
    int64_t n_layers, hidden, n_heads, n_kv_heads, head_dim, intermediate, vocab;
    float norm_eps;
    /* rotary embedding: inv_freq[D/2] and the factor cos/sin are multiplied by */
    float *inv_freq;
    float rope_attention_factor;
    llm_layer *layers;
    /* token embedding [V, C]: when quantized, rows are dequantized on lookup; tied models share it with
     * the LM head. */
    llm_matrix embed;
    llm_matrix lm_head; /* a copy of `embed`'s description when tied (same memory) */
    bool tied;
    bool exact_activations; /* quantized weights multiply f32 activations (no int8 activation blocks) */
    const float *final_norm; /* [C] */
    /* memory: every weight lives in one anonymous mapping advised for transparent huge pages and bump-
     * allocated (decode streams it ~20% faster than 4 KB page-cache pages of a mapped file); tb_alloc
     * buffers only when that mapping cannot be made */
    unsigned char *arena;
    size_t arena_size, arena_used;
    llm_buffer *buffers;
    int64_t buffer_count, buffer_capacity;
    tb_llm_model_info info;
    struct tb_llm_gpu_model *gpu; /* weights resident on a GPU engine (llm_gpu.c), or NULL */
};

/* Every weight of a model, named as in the quantized cache ("layers.3.qkv", "final_norm"): a matrix
 * (tensors <name>.weight, <name>.scales when quantized, <name>.bias when has_bias) or an f32 vector. */
typedef struct llm_slot {
    char name[48];
    llm_matrix *matrix;   /* or NULL */
    const float **vector; /* or NULL */
    int64_t length;       /* vector length */
} llm_slot;

/* Fills slots[0..count) (slots may be NULL to count them) and returns the count. */
int64_t tb_llm_model_slots(tb_llm_model *model, llm_slot *slots);

/* Bytes of a matrix in its run format (weights, scales, bias). */
int64_t tb_llm_matrix_bytes(const llm_matrix *matrix);

/* Fills the quantized view of a matrix whose data and scales are set (tb_quant_weight_init). */
tb_status tb_llm_matrix_bind(llm_matrix *matrix, const void *data, const float *scales, int64_t group_size);

/* Allocates `bytes` owned by the model (freed with it), 64-byte aligned, from the arena when it has room. */
tb_status tb_llm_model_alloc(tb_llm_model *model, int64_t bytes, void **out);

/* Rotary inverse frequencies of the config (default, linear, llama3, yarn) as transformers computes them
 * in f32; inv_freq has head_dim / 2 entries. */
tb_status tb_llm_rope_init(const tb_hf_config *config, float *inv_freq, float *attention_factor);

/* Quantized-weight cache (llm_cache.c). Loading returns TB_OK unless memory runs out, with *result: ABSENT
 * (no file), LOADED (every weight bound, digests verified), STALE (another format version or key) or
 * DAMAGED (unreadable, settings or tensors that disagree, or bytes that fail their digest; `why` says
 * which). Nothing of a rejected file stays in the model. */
typedef enum llm_cache_result { LLM_CACHE_ABSENT, LLM_CACHE_LOADED, LLM_CACHE_STALE, LLM_CACHE_DAMAGED } llm_cache_result;
tb_status tb_llm_cache_try_load(tb_llm_model *model, const char *path, const char *key, llm_cache_result *result,
                                char *why, size_t why_size);
tb_status tb_llm_cache_save(const tb_llm_model *model, const char *path, const char *key);

/* y[M, N] = x[M, K] @ W.T + bias with x rows x_stride floats apart and y contiguous, on the thread pool
 * (f32 GEMM, f32 GEMV for M = 1; quantized weights through qkernels when not NULL, else through
 * tb_quant_matmul with f32 activations). */
tb_status tb_llm_matmul(const tb_llm_kernels *kernels, const tb_llm_qkernels *qkernels, const llm_matrix *w,
                        const float *x, int64_t x_stride, int64_t m, float *y);

/* int4 quantization into the tb_quantize_int4_grouped format with per-group least-squares scales
 * (llm_quantize.c): w f32[rows, k] -> packed uint8[rows, k/2], scales f32[rows, k/group]. */
tb_status tb_llm_quantize_int4(const float *w, int64_t rows, int64_t k, int64_t group, uint8_t *packed, float *scales);

/* The model a session runs. */
const tb_llm_model *tb_llm_session_model(const tb_llm_session *session);
/* Cached positions (a multiple of the prefill chunk) whose keys/values equal a fresh prefill's bit for bit. */
int64_t tb_llm_session_canonical_length(const tb_llm_session *session);

/* Pieces of the forward pass shared with the batched decode step (llm_batch_forward.c); shapes as in
 * llm_forward.c. reserve grows the KV cache to hold `needed` positions; prepare_row applies q/k norms and
 * RoPE to one qkv row (q[(Hq + 2 Hkv) D]) and stores its key/value at `pos`; attend_row writes heads
 * [h0, h0 + heads) of one position's attention output (false: out of memory for scores); commit appends
 * tokens whose keys/values are stored. */
tb_status tb_llm_session_reserve(tb_llm_session *session, int64_t needed);
void tb_llm_prepare_row(tb_llm_session *session, const tb_llm_kernels *kernels, const llm_layer *layer,
                        int64_t layer_index, float *q, const float *cos_row, const float *sin_row, int64_t pos);
bool tb_llm_attend_row(tb_llm_session *session, const tb_llm_kernels *kernels, const llm_layer *layer,
                       int64_t layer_index, const float *q, int64_t h0, int64_t heads, int64_t pos, float scale,
                       float *out);
/* cos/sin (times the attention factor) of RoPE at position pos: [D / 2] each. */
void tb_llm_rope_row(const tb_llm_model *model, int64_t pos, float *cos_row, float *sin_row);
void tb_llm_session_commit(tb_llm_session *session, const int32_t *tokens, int64_t count);

/* Registers a thread-local scratch pointer of the calling thread (a tb_alloc buffer) to be freed when the
 * thread exits (llm_thread_scratch.c). */
void tb_llm_thread_scratch_track(void **buffer);
/* Grows the calling thread's scratch *buffer (*capacity bytes; contents not kept) to at least `needed`
 * bytes, with a quarter of headroom, and tracks it for release at thread exit. */
tb_status tb_llm_thread_scratch_reserve(unsigned char **buffer, size_t *capacity, size_t needed);

/* Row `token` of the embedding as f32 (dequantized when quantized). */
tb_status tb_llm_embed_row(const tb_llm_model *model, int32_t token, float *out);

/* ---- the forward on a GPU engine (llm_gpu.c) ---- */

typedef struct tb_llm_gpu_model tb_llm_gpu_model;
typedef struct tb_llm_gpu_session tb_llm_gpu_session;
struct tb_engine;
tb_status tb_llm_gpu_model_new(const tb_llm_model *model, const struct tb_engine *engine, tb_llm_gpu_model **out);
void tb_llm_gpu_model_free(tb_llm_gpu_model *gpu);
tb_status tb_llm_gpu_session_new(const tb_llm_model *model, bool kv_f16, tb_llm_gpu_session **out);
void tb_llm_gpu_session_free(tb_llm_gpu_session *session);
/* Runs `count` tokens after the `length` cached positions (checked by the caller) on the device. */
tb_status tb_llm_gpu_forward(tb_llm_gpu_session *session, int64_t length, int64_t max_seq_len, const int32_t *tokens,
                             int64_t count, float *logits, bool all_logits);

#endif
