/* Tests of config.json / generation_config.json parsing: real-world configs of each supported family
 * (values as published on the HuggingFace hub), defaults, rope scaling variants, and rejected files with
 * their messages. Defaults are compared against transformers itself in tests/python/test_hf_config.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_test.h"
#include "torchburn/hf_config.h"

static const char qwen25_config[] =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151645,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":21,\"model_type\":\"qwen2\","
    "\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,"
    "\"rope_theta\":1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.43.1\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

static const char llama32_config[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"head_dim\":64,\"hidden_act\":\"silu\","
    "\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":8192,\"max_position_embeddings\":131072,"
    "\"mlp_bias\":false,\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":16,"
    "\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":32.0,"
    "\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,"
    "\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.45.0.dev0\",\"use_cache\":true,\"vocab_size\":128256}";

static const char mistral_config[] =
    "{\"architectures\":[\"MistralForCausalLM\"],\"bos_token_id\":1,\"eos_token_id\":2,\"hidden_act\":\"silu\","
    "\"hidden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,\"max_position_embeddings\":32768,"
    "\"model_type\":\"mistral\",\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,\"sliding_window\":4096,\"tie_word_embeddings\":false,"
    "\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.34.0.dev0\",\"use_cache\":true,\"vocab_size\":32000}";

static const char qwen3_config[] =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":1024,"
    "\"initializer_range\":0.02,\"intermediate_size\":3072,\"max_position_embeddings\":40960,\"max_window_layers\":28,"
    "\"model_type\":\"qwen3\",\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

static const char qwen_generation[] =
    "{\"bos_token_id\":151643,\"pad_token_id\":151643,\"do_sample\":true,\"eos_token_id\":[151645,151643],"
    "\"repetition_penalty\":1.1,\"temperature\":0.7,\"top_p\":0.8,\"top_k\":20,\"transformers_version\":\"4.37.0\"}";

static tb_status parse(const char *text, tb_hf_config *cfg) {
    return tb_hf_config_parse(text, strlen(text), "config.json", cfg);
}

static void test_families(void) {
    tb_hf_config cfg;
    TB_CHECK_MSG(parse(qwen25_config, &cfg) == TB_OK, "%s", tb_error_message());
    TB_CHECK(cfg.model_type == TB_HF_MODEL_QWEN2 && cfg.hidden_size == 896 && cfg.num_hidden_layers == 24);
    TB_CHECK(cfg.num_attention_heads == 14 && cfg.num_key_value_heads == 2 && cfg.head_dim == 64);
    TB_CHECK(cfg.intermediate_size == 4864 && cfg.vocab_size == 151936 && cfg.max_position_embeddings == 32768);
    TB_CHECK(cfg.rms_norm_eps == 1e-6 && cfg.rope.theta == 1e6 && cfg.rope.type == TB_HF_ROPE_DEFAULT);
    TB_CHECK(cfg.tie_word_embeddings && cfg.attention_bias && !cfg.attention_output_bias && !cfg.qk_norm);
    TB_CHECK(cfg.sliding_window == 0 && cfg.max_window_layers == 0); /* use_sliding_window false */
    TB_CHECK(cfg.bos_token_id == 151643 && cfg.eos.count == 1 && cfg.eos.ids[0] == 151645 && cfg.pad_token_id == -1);
    TB_CHECK(strcmp(cfg.dtype, "bfloat16") == 0 && !cfg.has_generation_config);
    TB_CHECK(cfg.generation.top_k == 50 && cfg.generation.temperature == 1.0 && cfg.generation.present == 0);

    TB_CHECK_MSG(parse(llama32_config, &cfg) == TB_OK, "%s", tb_error_message());
    TB_CHECK(cfg.model_type == TB_HF_MODEL_LLAMA && cfg.head_dim == 64 && cfg.num_key_value_heads == 8);
    TB_CHECK(cfg.rope.type == TB_HF_ROPE_LLAMA3 && cfg.rope.factor == 32.0 && cfg.rope.low_freq_factor == 1.0 &&
             cfg.rope.high_freq_factor == 4.0 && cfg.rope.original_max_position_embeddings == 8192 &&
             cfg.rope.theta == 500000.0);
    TB_CHECK(cfg.eos.count == 3 && cfg.eos.ids[0] == 128001 && cfg.eos.ids[2] == 128009);
    TB_CHECK(cfg.rms_norm_eps == 1e-5 && !cfg.attention_bias && !cfg.mlp_bias && cfg.sliding_window == 0);

    TB_CHECK_MSG(parse(mistral_config, &cfg) == TB_OK, "%s", tb_error_message());
    TB_CHECK(cfg.model_type == TB_HF_MODEL_MISTRAL && cfg.head_dim == 128 && cfg.sliding_window == 4096 &&
             cfg.max_window_layers == 0 && cfg.bos_token_id == 1 && cfg.eos.ids[0] == 2);

    TB_CHECK_MSG(parse(qwen3_config, &cfg) == TB_OK, "%s", tb_error_message());
    TB_CHECK(cfg.model_type == TB_HF_MODEL_QWEN3 && cfg.head_dim == 128 && cfg.hidden_size == 1024 && cfg.qk_norm &&
             !cfg.attention_bias && cfg.rope.theta == 1e6 && cfg.sliding_window == 0 && cfg.max_position_embeddings == 40960);
}

static void test_defaults_and_variants(void) {
    tb_hf_config cfg;
    /* minimal files get the transformers class defaults */
    TB_CHECK(parse("{\"model_type\":\"llama\"}", &cfg) == TB_OK);
    TB_CHECK(cfg.vocab_size == 32000 && cfg.hidden_size == 4096 && cfg.intermediate_size == 11008 &&
             cfg.num_key_value_heads == 32 && cfg.head_dim == 128 && cfg.max_position_embeddings == 2048 &&
             cfg.rope.theta == 10000.0 && cfg.bos_token_id == 1 && cfg.eos.count == 1 && cfg.eos.ids[0] == 2);
    TB_CHECK(parse("{\"model_type\":\"mistral\"}", &cfg) == TB_OK);
    TB_CHECK(cfg.num_key_value_heads == 8 && cfg.intermediate_size == 14336 && cfg.sliding_window == 4096 &&
             cfg.max_position_embeddings == 131072);
    TB_CHECK(parse("{\"model_type\":\"qwen2\",\"use_sliding_window\":true}", &cfg) == TB_OK);
    TB_CHECK(cfg.sliding_window == 4096 && cfg.max_window_layers == 28 && cfg.bos_token_id == -1 && cfg.eos.count == 0);
    TB_CHECK(parse("{\"model_type\":\"qwen3\",\"num_key_value_heads\":null,\"bos_token_id\":null}", &cfg) == TB_OK);
    TB_CHECK(cfg.num_key_value_heads == 32 && cfg.head_dim == 128 && cfg.bos_token_id == -1);
    TB_CHECK(parse("{\"model_type\":\"llama\",\"eos_token_id\":null,\"hidden_size\":4096.0}", &cfg) == TB_OK);
    TB_CHECK(cfg.eos.count == 0 && cfg.hidden_size == 4096);
    TB_CHECK(parse("{\"model_type\":\"llama\",\"attention_bias\":true,\"mlp_bias\":true}", &cfg) == TB_OK);
    TB_CHECK(cfg.attention_bias && cfg.attention_output_bias && cfg.mlp_bias);
    TB_CHECK(parse("{\"model_type\":\"mistral\",\"sliding_window\":null}", &cfg) == TB_OK && cfg.sliding_window == 0);
    /* rope: transformers 5 rope_parameters, legacy "type", linear, yarn defaults */
    TB_CHECK(parse("{\"model_type\":\"llama\",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":5e5}}",
                   &cfg) == TB_OK && cfg.rope.theta == 5e5 && cfg.rope.type == TB_HF_ROPE_DEFAULT);
    TB_CHECK(parse("{\"model_type\":\"llama\",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}}", &cfg) == TB_OK &&
             cfg.rope.type == TB_HF_ROPE_LINEAR && cfg.rope.factor == 2.0);
    TB_CHECK(parse("{\"model_type\":\"qwen2\",\"max_position_embeddings\":32768,\"rope_scaling\":{\"type\":\"yarn\","
                   "\"factor\":4.0,\"original_max_position_embeddings\":32768}}", &cfg) == TB_OK);
    TB_CHECK(cfg.rope.type == TB_HF_ROPE_YARN && cfg.rope.factor == 4.0 && cfg.rope.beta_fast == 32.0 &&
             cfg.rope.beta_slow == 1.0 && cfg.rope.attention_factor == 0.0 &&
             cfg.rope.original_max_position_embeddings == 32768);
    TB_CHECK(parse("{\"model_type\":\"llama\",\"max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":"
                   "\"llama3\",\"factor\":8,\"low_freq_factor\":1,\"high_freq_factor\":4}}", &cfg) == TB_OK &&
             cfg.rope.original_max_position_embeddings == 4096);
    TB_CHECK(parse("{\"model_type\":\"llama\",\"rope_scaling\":{}}", &cfg) == TB_OK && cfg.rope.type == TB_HF_ROPE_DEFAULT);
    TB_CHECK(strcmp(tb_hf_model_type_name(TB_HF_MODEL_QWEN3), "qwen3") == 0);
    TB_CHECK(strcmp(tb_hf_rope_type_name(TB_HF_ROPE_LLAMA3), "llama3") == 0);
}

typedef struct bad_config {
    const char *text;
    const char *error;
} bad_config;

static const bad_config bad_configs[] = {
    {"{\"model_type\":\"gemma\"}", "config.json: model_type 'gemma' is not supported (supported: llama, mistral, qwen2, qwen3)"},
    {"{\"hidden_size\":8}", "'model_type' is missing"},
    {"{\"model_type\":3}", "'model_type': expected a string, got integer"},
    {"[]", "config.json: must be a JSON object, got array"},
    {"{\"model_type\":\"llama\",", "config.json: line 1, column 23"},
    {"{\"model_type\":\"llama\",\"hidden_size\":\"4096\"}", "config.json: 'hidden_size': expected an integer, got string"},
    {"{\"model_type\":\"llama\",\"hidden_size\":4096.5}", "'hidden_size': expected an integer, got 4096.5"},
    {"{\"model_type\":\"llama\",\"hidden_size\":-4}", "'hidden_size' is -4, outside [1, 2147483647]"},
    {"{\"model_type\":\"llama\",\"hidden_size\":1e300}", "'hidden_size': expected an integer"},
    {"{\"model_type\":\"llama\",\"num_hidden_layers\":true}", "'num_hidden_layers': expected an integer, got bool"},
    {"{\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_key_value_heads\":5}",
     "num_attention_heads 32 is not a multiple of num_key_value_heads 5"},
    {"{\"model_type\":\"llama\",\"hidden_size\":100,\"num_attention_heads\":3}",
     "hidden_size 100 is not a multiple of num_attention_heads 3"},
    {"{\"model_type\":\"llama\",\"rms_norm_eps\":0}", "'rms_norm_eps' is 0, outside"},
    {"{\"model_type\":\"llama\",\"rope_theta\":-1}", "'rope_theta' is -1, outside"},
    {"{\"model_type\":\"llama\",\"tie_word_embeddings\":1}", "'tie_word_embeddings': expected a bool, got integer"},
    {"{\"model_type\":\"llama\",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", "lists 9 ids, more than the 8 supported"},
    {"{\"model_type\":\"llama\",\"eos_token_id\":[1,\"2\"]}", "'eos_token_id[1]' must be a token id"},
    {"{\"model_type\":\"llama\",\"eos_token_id\":-5}", "'eos_token_id' is -5, outside"},
    {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}",
     "rope type 'dynamic' is not supported (supported: default, linear, llama3, yarn)"},
    {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}",
     "'rope_scaling.low_freq_factor' and 'high_freq_factor' are required for llama3"},
    {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"linear\"}}",
     "'rope_scaling.factor' is required for rope type 'linear'"},
    {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":\"8\",\"low_freq_factor\":1,"
     "\"high_freq_factor\":4}}", "'rope_scaling.factor': expected a number, got string"},
    {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
     "\"high_freq_factor\":1}}", "needs high_freq_factor > low_freq_factor"},
    {"{\"model_type\":\"llama\",\"rope_scaling\":[1]}", "'rope_scaling' must be an object, got array"},
    {"{\"model_type\":\"llama\",\"rope_parameters\":{\"full_attention\":{}}}", "per layer type is not supported"},
    {"{\"model_type\":\"llama\",\"hidden_act\":\"gelu\"}", "hidden_act 'gelu' is not supported"},
    {"{\"model_type\":\"llama\",\"torch_dtype\":\"a-very-long-dtype-name\"}", "is not a dtype name"},
    {"{\"model_type\":\"llama\",\"model_type\":\"qwen2\"}", "duplicate key \"model_type\""},
};

static void test_rejected(void) {
    for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
        tb_hf_config cfg;
        tb_status status = parse(bad_configs[i].text, &cfg);
        TB_CHECK_MSG(status == TB_ERR_FORMAT, "%s: accepted", bad_configs[i].text);
        TB_CHECK_MSG(strstr(tb_error_message(), bad_configs[i].error) != NULL, "%s: message '%s' lacks '%s'",
                     bad_configs[i].text, tb_error_message(), bad_configs[i].error);
    }
}

static void test_generation(void) {
    tb_hf_generation_config g;
    TB_CHECK(tb_hf_generation_config_parse(qwen_generation, strlen(qwen_generation), NULL, &g) == TB_OK);
    TB_CHECK(g.do_sample && g.temperature == 0.7 && g.top_p == 0.8 && g.top_k == 20 && g.repetition_penalty == 1.1);
    TB_CHECK(g.eos.count == 2 && g.eos.ids[0] == 151645 && g.eos.ids[1] == 151643 && g.pad_token_id == 151643);
    TB_CHECK(g.present == (TB_HF_GEN_DO_SAMPLE | TB_HF_GEN_TEMPERATURE | TB_HF_GEN_TOP_P | TB_HF_GEN_TOP_K |
                           TB_HF_GEN_REPETITION_PENALTY | TB_HF_GEN_EOS | TB_HF_GEN_PAD | TB_HF_GEN_BOS));
    TB_CHECK(g.max_length == 20 && g.max_new_tokens == -1);
    const char *bad = "{\"top_p\":1.5}";
    TB_CHECK(tb_hf_generation_config_parse(bad, strlen(bad), NULL, &g) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "generation_config.json: 'top_p' is 1.5, outside [0, 1]") != NULL);
    bad = "{\"temperature\":\"hot\"}";
    TB_CHECK(tb_hf_generation_config_parse(bad, strlen(bad), NULL, &g) == TB_ERR_FORMAT);
    TB_CHECK(g.temperature == 1.0); /* defaults after a failure */
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_load(void) {
    char dir[] = "/tmp/tb_hf_config_XXXXXX";
    if (!mkdtemp(dir)) {
        TB_CHECK(false);
        return;
    }
    char config_path[128], generation_path[128];
    snprintf(config_path, sizeof config_path, "%s/config.json", dir);
    snprintf(generation_path, sizeof generation_path, "%s/generation_config.json", dir);
    tb_hf_config cfg;
    TB_CHECK(tb_hf_config_load(dir, &cfg) == TB_ERR_IO);
    TB_CHECK(strstr(tb_error_message(), "config.json: cannot open") != NULL);
    write_text(config_path, qwen25_config);
    TB_CHECK(tb_hf_config_load(dir, &cfg) == TB_OK && !cfg.has_generation_config && cfg.hidden_size == 896);
    write_text(generation_path, qwen_generation);
    TB_CHECK(tb_hf_config_load(dir, &cfg) == TB_OK && cfg.has_generation_config && cfg.generation.top_k == 20);
    TB_CHECK(tb_hf_config_load(config_path, &cfg) == TB_OK && cfg.has_generation_config);
    write_text(generation_path, "{\"top_k\":-1}");
    TB_CHECK(tb_hf_config_load(dir, &cfg) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "generation_config.json: 'top_k' is -1") != NULL);
    unlink(generation_path);
    unlink(config_path);
    rmdir(dir);
}

int main(void) {
    test_families();
    test_defaults_and_variants();
    test_rejected();
    test_generation();
    test_load();
    return tb_test_finish("hf_config");
}
