/* HuggingFace model configuration: config.json of the llama family (model_type llama, mistral, qwen2,
 * qwen3) parsed into a plain struct with the defaults transformers applies, plus the sampling defaults of
 * generation_config.json. Files are untrusted: wrong types, out-of-range values and unknown model or
 * rope types are TB_ERR_FORMAT errors naming the file and the field. */
#ifndef TORCHBURN_HF_CONFIG_H
#define TORCHBURN_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TB_HF_MAX_TOKEN_IDS = 8, TB_HF_DTYPE_CAPACITY = 16 };

typedef enum tb_hf_model_type {
    TB_HF_MODEL_LLAMA,
    TB_HF_MODEL_MISTRAL,
    TB_HF_MODEL_QWEN2,
    TB_HF_MODEL_QWEN3,
    TB_HF_MODEL_TYPE_COUNT
} tb_hf_model_type;

/* "llama", "mistral", "qwen2", "qwen3". */
TB_API const char *tb_hf_model_type_name(tb_hf_model_type type);

typedef enum tb_hf_rope_type {
    TB_HF_ROPE_DEFAULT, /* plain RoPE with theta */
    TB_HF_ROPE_LINEAR,  /* positions divided by factor */
    TB_HF_ROPE_LLAMA3,  /* Llama 3.1 frequency-banded scaling */
    TB_HF_ROPE_YARN,
    TB_HF_ROPE_TYPE_COUNT
} tb_hf_rope_type;

/* "default", "linear", "llama3", "yarn". */
TB_API const char *tb_hf_rope_type_name(tb_hf_rope_type type);

/* Rotary embedding parameters, from "rope_scaling" (older files) or "rope_parameters" (transformers 5),
 * theta from there or from the top-level "rope_theta" (default 10000). Fields a type does not use are 0. */
typedef struct tb_hf_rope {
    tb_hf_rope_type type;
    double theta;
    double factor;                            /* linear, llama3, yarn */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int64_t original_max_position_embeddings; /* llama3, yarn (default: max_position_embeddings) */
    double beta_fast, beta_slow;              /* yarn (defaults 32 and 1) */
    double attention_factor;                  /* yarn; 0 when the file leaves it to be derived */
    double mscale, mscale_all_dim;            /* yarn; 0 when absent */
} tb_hf_rope;

/* Token ids given as an int or a list of ints; count 0 when absent or null. */
typedef struct tb_hf_token_ids {
    int count;
    int64_t ids[TB_HF_MAX_TOKEN_IDS];
} tb_hf_token_ids;

/* Bits of tb_hf_generation_config.present: which fields generation_config.json set. */
enum {
    TB_HF_GEN_TEMPERATURE = 1u << 0,
    TB_HF_GEN_TOP_P = 1u << 1,
    TB_HF_GEN_TOP_K = 1u << 2,
    TB_HF_GEN_REPETITION_PENALTY = 1u << 3,
    TB_HF_GEN_DO_SAMPLE = 1u << 4,
    TB_HF_GEN_MAX_NEW_TOKENS = 1u << 5,
    TB_HF_GEN_MAX_LENGTH = 1u << 6,
    TB_HF_GEN_BOS = 1u << 7,
    TB_HF_GEN_EOS = 1u << 8,
    TB_HF_GEN_PAD = 1u << 9,
};

/* Sampling defaults. Fields the file does not set keep transformers' GenerationConfig defaults
 * (temperature 1, top_p 1, top_k 50, repetition_penalty 1, do_sample false, max_length 20,
 * max_new_tokens -1 meaning unset, token ids -1 / count 0). */
typedef struct tb_hf_generation_config {
    unsigned present;
    double temperature, top_p, repetition_penalty;
    int64_t top_k;
    bool do_sample;
    int64_t max_new_tokens, max_length;
    int64_t bos_token_id, pad_token_id;
    tb_hf_token_ids eos;
} tb_hf_generation_config;

typedef struct tb_hf_config {
    tb_hf_model_type model_type;
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads; /* default: num_attention_heads (mistral: 8) */
    int64_t head_dim;            /* default: hidden_size / num_attention_heads (qwen3: 128) */
    int64_t max_position_embeddings;
    double rms_norm_eps;
    tb_hf_rope rope;
    bool tie_word_embeddings;
    bool attention_bias;        /* q, k, v projections carry a bias (always for qwen2) */
    bool attention_output_bias; /* o projection carries a bias (llama/qwen3: attention_bias) */
    bool mlp_bias;              /* llama only */
    bool qk_norm;               /* RMSNorm on q and k per head (qwen3) */
    /* Sliding-window attention: window 0 means full attention everywhere. When window > 0, layers
     * with index >= max_window_layers slide (mistral: max_window_layers 0, every layer; qwen2/3 only when
     * use_sliding_window is true). An explicit "layer_types" list is not read. */
    int64_t sliding_window;
    int64_t max_window_layers;
    int64_t bos_token_id; /* -1 when none */
    int64_t pad_token_id; /* -1 when none */
    tb_hf_token_ids eos;
    char dtype[TB_HF_DTYPE_CAPACITY]; /* "torch_dtype" or "dtype" ("bfloat16"), "" when absent */
    bool has_generation_config;
    tb_hf_generation_config generation; /* transformers' defaults when there is no file */
} tb_hf_config;

/* Parses config.json text. `source_name` (may be NULL) names the file in messages. Fills `out`
 * completely, including default generation settings. */
TB_API TB_NODISCARD tb_status tb_hf_config_parse(const char *text, size_t length, const char *source_name,
                                                 tb_hf_config *out);
/* Parses generation_config.json text into `out` (defaults for what it leaves out). */
TB_API TB_NODISCARD tb_status tb_hf_generation_config_parse(const char *text, size_t length, const char *source_name,
                                                            tb_hf_generation_config *out);
TB_API void tb_hf_generation_config_defaults(tb_hf_generation_config *out);

/* Loads a model folder (config.json, plus generation_config.json when present) or a config.json path
 * (its folder's generation_config.json is read when present). TB_ERR_IO naming the path when config.json
 * cannot be read. */
TB_API TB_NODISCARD tb_status tb_hf_config_load(const char *path, tb_hf_config *out);

#ifdef __cplusplus
}
#endif
#endif
