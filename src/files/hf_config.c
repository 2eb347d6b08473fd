/* config.json and generation_config.json of HuggingFace llama-family checkpoints, parsed with the
 * defaults of transformers' LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config. */
#include "torchburn/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/file_io.h"
#include "torchburn/json.h"

static const size_t MAX_CONFIG_BYTES = (size_t)16 << 20;
static const int64_t MAX_DIMENSION = INT32_MAX; /* any size a config may state */

static const char *const model_type_names[TB_HF_MODEL_TYPE_COUNT] = {"llama", "mistral", "qwen2", "qwen3"};
static const char *const rope_type_names[TB_HF_ROPE_TYPE_COUNT] = {"default", "linear", "llama3", "yarn"};

const char *tb_hf_model_type_name(tb_hf_model_type type) {
    return (unsigned)type < TB_HF_MODEL_TYPE_COUNT ? model_type_names[type] : "invalid";
}

const char *tb_hf_rope_type_name(tb_hf_rope_type type) {
    return (unsigned)type < TB_HF_ROPE_TYPE_COUNT ? rope_type_names[type] : "invalid";
}

/* ---- typed field readers: absent or null fields keep the default ---- */

typedef struct reader {
    const char *source;
    const tb_json_value *object;
    const char *prefix; /* "" or "rope_scaling." for messages */
} reader;

static const tb_json_value *field(const reader *r, const char *key) {
    const tb_json_value *value = tb_json_object_get(r->object, key);
    return tb_json_type_of(value) == TB_JSON_NULL ? NULL : value;
}

/* True when the key is present with an explicit null (transformers' None, which may differ from the default). */
static bool is_null(const reader *r, const char *key) {
    const tb_json_value *value = tb_json_object_get(r->object, key);
    return value && tb_json_type_of(value) == TB_JSON_NULL;
}

/* "<file>: '<key>': <what>", or with the getter's message ("expected a string, got integer") when what is "". */
static tb_status field_error(const reader *r, const char *key, const char *what) {
    if (what[0])
        return tb_error_set(TB_ERR_FORMAT, "%s: '%s%s': %s", r->source, r->prefix, key, what);
    return tb_error_prefix(TB_ERR_FORMAT, "%s: '%s%s'", r->source, r->prefix, key);
}

static tb_status read_int(const reader *r, const char *key, int64_t fallback, int64_t lo, int64_t hi, int64_t *out) {
    const tb_json_value *value = field(r, key);
    *out = fallback;
    if (!value)
        return TB_OK;
    if (tb_json_type_of(value) == TB_JSON_BOOL || tb_json_get_int(value, out) != TB_OK)
        return field_error(r, key, tb_json_type_of(value) == TB_JSON_BOOL ? "expected an integer, got bool" : "");
    if (*out < lo || *out > hi)
        return tb_error_set(TB_ERR_FORMAT, "%s: '%s%s' is %lld, outside [%lld, %lld]", r->source, r->prefix, key,
                            (long long)*out, (long long)lo, (long long)hi);
    return TB_OK;
}

static tb_status read_double(const reader *r, const char *key, double fallback, double lo, double hi, double *out) {
    const tb_json_value *value = field(r, key);
    *out = fallback;
    if (!value)
        return TB_OK;
    if (tb_json_get_double(value, out) != TB_OK)
        return field_error(r, key, "");
    if (!(*out >= lo && *out <= hi))
        return tb_error_set(TB_ERR_FORMAT, "%s: '%s%s' is %g, outside [%g, %g]", r->source, r->prefix, key, *out, lo,
                            hi);
    return TB_OK;
}

static tb_status read_bool(const reader *r, const char *key, bool fallback, bool *out) {
    const tb_json_value *value = field(r, key);
    *out = fallback;
    if (value && tb_json_get_bool(value, out) != TB_OK)
        return field_error(r, key, "");
    return TB_OK;
}

/* An id given as an int, a list of ints, or null. */
static tb_status read_token_ids(const reader *r, const char *key, tb_hf_token_ids *out) {
    const tb_json_value *value = field(r, key);
    if (!value)
        return TB_OK;
    out->count = 0;
    if (tb_json_type_of(value) == TB_JSON_ARRAY) {
        size_t n = tb_json_length(value);
        if (n > TB_HF_MAX_TOKEN_IDS)
            return tb_error_set(TB_ERR_FORMAT, "%s: '%s%s' lists %zu ids, more than the %d supported", r->source,
                                r->prefix, key, n, TB_HF_MAX_TOKEN_IDS);
        for (size_t i = 0; i < n; i++) {
            const tb_json_value *item = tb_json_array_at(value, i);
            int64_t id;
            if (tb_json_type_of(item) == TB_JSON_BOOL || tb_json_get_int(item, &id) != TB_OK || id < 0 ||
                id > MAX_DIMENSION)
                return tb_error_set(TB_ERR_FORMAT, "%s: '%s%s[%zu]' must be a token id (a non-negative integer)",
                                    r->source, r->prefix, key, i);
            out->ids[out->count++] = id;
        }
        return TB_OK;
    }
    int64_t id;
    TB_TRY(read_int(r, key, -1, 0, MAX_DIMENSION, &id));
    out->ids[0] = id;
    out->count = 1;
    return TB_OK;
}

static tb_status read_single_id(const reader *r, const char *key, int64_t fallback, int64_t *out) {
    return read_int(r, key, fallback, 0, MAX_DIMENSION, out);
}

/* ---- rope ---- */

static tb_status parse_rope(const reader *top, const tb_hf_config *cfg, tb_hf_rope *rope) {
    memset(rope, 0, sizeof *rope);
    double top_theta;
    TB_TRY(read_double(top, "rope_theta", 10000.0, 1e-9, 1e300, &top_theta));
    /* transformers: rope_parameters = rope_scaling or rope_parameters (an empty object counts as absent) */
    const char *name = "rope_scaling";
    const tb_json_value *params = field(top, name);
    if (!params || (tb_json_type_of(params) == TB_JSON_OBJECT && tb_json_length(params) == 0)) {
        name = "rope_parameters";
        params = field(top, name);
    }
    rope->type = TB_HF_ROPE_DEFAULT;
    rope->theta = top_theta;
    if (!params)
        return TB_OK;
    if (tb_json_type_of(params) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: '%s' must be an object, got %s", top->source, name,
                            tb_json_type_name(tb_json_type_of(params)));
    if (tb_json_object_get(params, "full_attention") || tb_json_object_get(params, "sliding_attention"))
        return tb_error_set(TB_ERR_FORMAT, "%s: '%s' per layer type is not supported", top->source, name);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%s.", name);
    reader r = {.source = top->source, .object = params, .prefix = prefix};
    TB_TRY(read_double(&r, "rope_theta", top_theta, 1e-9, 1e300, &rope->theta));

    const tb_json_value *type = field(&r, "rope_type");
    const char *type_key = "rope_type";
    if (!type) {
        type = field(&r, "type");
        type_key = "type";
    }
    const char *type_name = "default";
    if (type && tb_json_get_string(type, &type_name, NULL) != TB_OK)
        return field_error(&r, type_key, "");
    int found = -1;
    for (int t = 0; t < TB_HF_ROPE_TYPE_COUNT; t++)
        if (strcmp(type_name, rope_type_names[t]) == 0)
            found = t;
    if (found < 0)
        return tb_error_set(TB_ERR_FORMAT,
                            "%s: rope type '%.40s' is not supported (supported: default, linear, llama3, yarn)",
                            top->source, type_name);
    rope->type = (tb_hf_rope_type)found;
    if (rope->type == TB_HF_ROPE_DEFAULT)
        return TB_OK;
    if (!field(&r, "factor"))
        return tb_error_set(TB_ERR_FORMAT, "%s: '%sfactor' is required for rope type '%s'", top->source, prefix,
                            type_name);
    TB_TRY(read_double(&r, "factor", 1.0, 1e-6, 1e6, &rope->factor));
    if (rope->type == TB_HF_ROPE_LINEAR)
        return TB_OK;
    int64_t original_default;
    TB_TRY(read_int(top, "original_max_position_embeddings", cfg->max_position_embeddings, 1, MAX_DIMENSION,
                    &original_default));
    TB_TRY(read_int(&r, "original_max_position_embeddings", original_default, 1, MAX_DIMENSION,
                    &rope->original_max_position_embeddings));
    if (rope->type == TB_HF_ROPE_LLAMA3) {
        if (!field(&r, "low_freq_factor") || !field(&r, "high_freq_factor"))
            return tb_error_set(TB_ERR_FORMAT, "%s: '%slow_freq_factor' and 'high_freq_factor' are required for llama3",
                                top->source, prefix);
        TB_TRY(read_double(&r, "low_freq_factor", 1.0, 1e-6, 1e6, &rope->low_freq_factor));
        TB_TRY(read_double(&r, "high_freq_factor", 1.0, 1e-6, 1e6, &rope->high_freq_factor));
        if (!(rope->high_freq_factor > rope->low_freq_factor))
            return tb_error_set(TB_ERR_FORMAT, "%s: llama3 rope needs high_freq_factor > low_freq_factor (got %g, %g)",
                                top->source, rope->high_freq_factor, rope->low_freq_factor);
        return TB_OK;
    }
    TB_TRY(read_double(&r, "beta_fast", 32.0, 1e-6, 1e6, &rope->beta_fast));
    TB_TRY(read_double(&r, "beta_slow", 1.0, 1e-6, 1e6, &rope->beta_slow));
    TB_TRY(read_double(&r, "attention_factor", 0.0, 0.0, 1e6, &rope->attention_factor));
    TB_TRY(read_double(&r, "mscale", 0.0, 0.0, 1e6, &rope->mscale));
    TB_TRY(read_double(&r, "mscale_all_dim", 0.0, 0.0, 1e6, &rope->mscale_all_dim));
    return TB_OK;
}

/* ---- generation_config.json ---- */

void tb_hf_generation_config_defaults(tb_hf_generation_config *out) {
    memset(out, 0, sizeof *out);
    out->temperature = 1.0;
    out->top_p = 1.0;
    out->top_k = 50;
    out->repetition_penalty = 1.0;
    out->do_sample = false;
    out->max_new_tokens = -1;
    out->max_length = 20;
    out->bos_token_id = -1;
    out->pad_token_id = -1;
}

static tb_status parse_generation(const reader *r, tb_hf_generation_config *g) {
    tb_hf_generation_config_defaults(g);
    static const struct {
        const char *key;
        unsigned bit;
    } keys[] = {{"temperature", TB_HF_GEN_TEMPERATURE},   {"top_p", TB_HF_GEN_TOP_P},
                {"top_k", TB_HF_GEN_TOP_K},               {"repetition_penalty", TB_HF_GEN_REPETITION_PENALTY},
                {"do_sample", TB_HF_GEN_DO_SAMPLE},       {"max_new_tokens", TB_HF_GEN_MAX_NEW_TOKENS},
                {"max_length", TB_HF_GEN_MAX_LENGTH},     {"bos_token_id", TB_HF_GEN_BOS},
                {"eos_token_id", TB_HF_GEN_EOS},          {"pad_token_id", TB_HF_GEN_PAD}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (field(r, keys[i].key))
            g->present |= keys[i].bit;
    TB_TRY(read_double(r, "temperature", 1.0, 0.0, 1e6, &g->temperature));
    TB_TRY(read_double(r, "top_p", 1.0, 0.0, 1.0, &g->top_p));
    TB_TRY(read_int(r, "top_k", 50, 0, MAX_DIMENSION, &g->top_k));
    TB_TRY(read_double(r, "repetition_penalty", 1.0, 1e-6, 1e6, &g->repetition_penalty));
    TB_TRY(read_bool(r, "do_sample", false, &g->do_sample));
    TB_TRY(read_int(r, "max_new_tokens", -1, 0, MAX_DIMENSION, &g->max_new_tokens));
    TB_TRY(read_int(r, "max_length", 20, 0, MAX_DIMENSION, &g->max_length));
    TB_TRY(read_single_id(r, "bos_token_id", -1, &g->bos_token_id));
    TB_TRY(read_single_id(r, "pad_token_id", -1, &g->pad_token_id));
    TB_TRY(read_token_ids(r, "eos_token_id", &g->eos));
    return TB_OK;
}

static tb_status parse_object(const char *text, size_t length, const char *source, tb_json_document **doc,
                              reader *r) {
    tb_json_limits limits = {.max_bytes = MAX_CONFIG_BYTES, .max_depth = 64};
    TB_TRY(tb_json_parse(text, length, &limits, source, doc));
    const tb_json_value *root = tb_json_root(*doc);
    if (tb_json_type_of(root) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: must be a JSON object, got %s", source,
                            tb_json_type_name(tb_json_type_of(root)));
    *r = (reader){.source = source, .object = root, .prefix = ""};
    return TB_OK;
}

tb_status tb_hf_generation_config_parse(const char *text, size_t length, const char *source_name,
                                        tb_hf_generation_config *out) {
    tb_hf_generation_config_defaults(out);
    const char *source = source_name ? source_name : "generation_config.json";
    tb_json_document *doc = NULL;
    reader r;
    tb_status status = parse_object(text, length, source, &doc, &r);
    if (status == TB_OK)
        status = parse_generation(&r, out);
    tb_json_free(doc);
    if (status != TB_OK)
        tb_hf_generation_config_defaults(out);
    return status;
}

/* ---- config.json ---- */

static tb_status parse_config(const reader *r, tb_hf_config *cfg) {
    const tb_json_value *type = tb_json_object_get(r->object, "model_type");
    const char *type_name;
    if (!type)
        return tb_error_set(TB_ERR_FORMAT, "%s: 'model_type' is missing (supported: llama, mistral, qwen2, qwen3)",
                            r->source);
    if (tb_json_get_string(type, &type_name, NULL) != TB_OK)
        return field_error(r, "model_type", "");
    int found = -1;
    for (int t = 0; t < TB_HF_MODEL_TYPE_COUNT; t++)
        if (strcmp(type_name, model_type_names[t]) == 0)
            found = t;
    if (found < 0)
        return tb_error_set(TB_ERR_FORMAT, "%s: model_type '%.60s' is not supported (supported: llama, mistral, qwen2, "
                            "qwen3)", r->source, type_name);
    tb_hf_model_type model = (tb_hf_model_type)found;
    cfg->model_type = model;
    bool qwen = model == TB_HF_MODEL_QWEN2 || model == TB_HF_MODEL_QWEN3;

    /* defaults of the transformers config classes */
    int64_t vocab = qwen ? 151936 : 32000;
    int64_t intermediate = qwen ? 22016 : model == TB_HF_MODEL_MISTRAL ? 14336 : 11008;
    int64_t max_positions = qwen ? 32768 : model == TB_HF_MODEL_MISTRAL ? 4096 * 32 : 2048;
    TB_TRY(read_int(r, "vocab_size", vocab, 1, MAX_DIMENSION, &cfg->vocab_size));
    TB_TRY(read_int(r, "hidden_size", 4096, 1, MAX_DIMENSION, &cfg->hidden_size));
    TB_TRY(read_int(r, "intermediate_size", intermediate, 1, MAX_DIMENSION, &cfg->intermediate_size));
    TB_TRY(read_int(r, "num_hidden_layers", 32, 1, 1 << 16, &cfg->num_hidden_layers));
    TB_TRY(read_int(r, "num_attention_heads", 32, 1, 1 << 16, &cfg->num_attention_heads));
    int64_t kv_default = model == TB_HF_MODEL_MISTRAL ? 8 : cfg->num_attention_heads;
    TB_TRY(read_int(r, "num_key_value_heads", kv_default, 1, 1 << 16, &cfg->num_key_value_heads));
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return tb_error_set(TB_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                            r->source, (long long)cfg->num_attention_heads, (long long)cfg->num_key_value_heads);
    if (model == TB_HF_MODEL_QWEN3) {
        TB_TRY(read_int(r, "head_dim", 128, 1, 1 << 16, &cfg->head_dim));
    } else if (field(r, "head_dim")) {
        TB_TRY(read_int(r, "head_dim", 0, 1, 1 << 16, &cfg->head_dim));
    } else {
        if (cfg->hidden_size % cfg->num_attention_heads != 0)
            return tb_error_set(TB_ERR_FORMAT,
                                "%s: hidden_size %lld is not a multiple of num_attention_heads %lld (and no head_dim)",
                                r->source, (long long)cfg->hidden_size, (long long)cfg->num_attention_heads);
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    }
    TB_TRY(read_int(r, "max_position_embeddings", max_positions, 1, MAX_DIMENSION, &cfg->max_position_embeddings));
    TB_TRY(read_double(r, "rms_norm_eps", 1e-6, 1e-30, 1.0, &cfg->rms_norm_eps));
    if (!(cfg->rms_norm_eps > 0))
        return tb_error_set(TB_ERR_FORMAT, "%s: 'rms_norm_eps' must be positive", r->source);
    TB_TRY(parse_rope(r, cfg, &cfg->rope));
    TB_TRY(read_bool(r, "tie_word_embeddings", false, &cfg->tie_word_embeddings));

    const tb_json_value *act = field(r, "hidden_act");
    const char *act_name = "silu";
    if (act && tb_json_get_string(act, &act_name, NULL) != TB_OK)
        return field_error(r, "hidden_act", "");
    if (strcmp(act_name, "silu") != 0 && strcmp(act_name, "swish") != 0)
        return tb_error_set(TB_ERR_FORMAT, "%s: hidden_act '%.40s' is not supported (only silu)", r->source, act_name);

    bool bias = false;
    if (model == TB_HF_MODEL_LLAMA || model == TB_HF_MODEL_QWEN3)
        TB_TRY(read_bool(r, "attention_bias", false, &bias));
    cfg->attention_bias = model == TB_HF_MODEL_QWEN2 ? true : bias;
    cfg->attention_output_bias = bias;
    if (model == TB_HF_MODEL_LLAMA)
        TB_TRY(read_bool(r, "mlp_bias", false, &cfg->mlp_bias));
    cfg->qk_norm = model == TB_HF_MODEL_QWEN3;

    if (qwen) {
        bool use_sliding;
        TB_TRY(read_bool(r, "use_sliding_window", false, &use_sliding));
        TB_TRY(read_int(r, "sliding_window", 4096, 0, MAX_DIMENSION, &cfg->sliding_window));
        TB_TRY(read_int(r, "max_window_layers", 28, 0, MAX_DIMENSION, &cfg->max_window_layers));
        if (!use_sliding || is_null(r, "sliding_window"))
            cfg->sliding_window = 0;
        if (cfg->sliding_window == 0)
            cfg->max_window_layers = 0;
    } else if (model == TB_HF_MODEL_MISTRAL) {
        TB_TRY(read_int(r, "sliding_window", 4096, 0, MAX_DIMENSION, &cfg->sliding_window));
        if (is_null(r, "sliding_window"))
            cfg->sliding_window = 0;
        cfg->max_window_layers = 0;
    }

    int64_t default_bos = qwen ? -1 : 1, default_eos = qwen ? -1 : 2;
    TB_TRY(read_single_id(r, "bos_token_id", is_null(r, "bos_token_id") ? -1 : default_bos, &cfg->bos_token_id));
    TB_TRY(read_single_id(r, "pad_token_id", -1, &cfg->pad_token_id));
    if (!tb_json_object_get(r->object, "eos_token_id") && default_eos >= 0) {
        cfg->eos.count = 1;
        cfg->eos.ids[0] = default_eos;
    }
    TB_TRY(read_token_ids(r, "eos_token_id", &cfg->eos));

    const char *dtype_key = field(r, "dtype") ? "dtype" : "torch_dtype";
    const tb_json_value *dtype = field(r, dtype_key);
    const char *dtype_name;
    size_t dtype_length;
    if (dtype) {
        if (tb_json_get_string(dtype, &dtype_name, &dtype_length) != TB_OK)
            return field_error(r, dtype_key, "");
        if (dtype_length >= sizeof cfg->dtype || memchr(dtype_name, 0, dtype_length))
            return tb_error_set(TB_ERR_FORMAT, "%s: '%s' value '%.40s' is not a dtype name", r->source, dtype_key,
                                dtype_name);
        memcpy(cfg->dtype, dtype_name, dtype_length + 1);
    }
    return TB_OK;
}

tb_status tb_hf_config_parse(const char *text, size_t length, const char *source_name, tb_hf_config *out) {
    memset(out, 0, sizeof *out);
    const char *source = source_name ? source_name : "config.json";
    tb_json_document *doc = NULL;
    reader r;
    tb_status status = parse_object(text, length, source, &doc, &r);
    if (status == TB_OK)
        status = parse_config(&r, out);
    tb_json_free(doc);
    if (status != TB_OK)
        memset(out, 0, sizeof *out);
    tb_hf_generation_config_defaults(&out->generation);
    return status;
}

tb_status tb_hf_config_load(const char *path, tb_hf_config *out) {
    memset(out, 0, sizeof *out);
    if (!path)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_hf_config_load: path is NULL");
    char *folder = tb_path_is_directory(path) ? strdup(path) : tb_path_dirname(path);
    char *config_path = folder && tb_path_is_directory(path) ? tb_path_join(folder, "config.json") : strdup(path);
    char *generation_path = folder ? tb_path_join(folder, "generation_config.json") : NULL;
    char *text = NULL;
    size_t size = 0;
    tb_status status = TB_OK;
    if (!folder || !config_path || !generation_path)
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (status == TB_OK)
        status = tb_files_read_all(config_path, MAX_CONFIG_BYTES, &text, &size);
    if (status == TB_OK)
        status = tb_hf_config_parse(text, size, config_path, out);
    free(text);
    text = NULL;
    if (status == TB_OK && access(generation_path, F_OK) == 0) {
        status = tb_files_read_all(generation_path, MAX_CONFIG_BYTES, &text, &size);
        if (status == TB_OK)
            status = tb_hf_generation_config_parse(text, size, generation_path, &out->generation);
        out->has_generation_config = status == TB_OK;
        free(text);
    }
    free(folder);
    free(config_path);
    free(generation_path);
    if (status != TB_OK)
        memset(out, 0, sizeof *out);
    return status;
}
