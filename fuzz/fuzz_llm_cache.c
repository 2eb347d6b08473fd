/* libFuzzer harness for the quantized-weight cache loader: arbitrary bytes become the cache file of a
 * tiny int8 model written at start-up (one Qwen2 layer, tied head). Loading must always succeed: a file
 * that is stale or damaged in any way is rebuilt from the checkpoint (state WRITTEN or REBUILT), and only
 * a file whose every tensor matches its digest is used (HIT); a loaded model must run a token. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "torchburn/llm.h"
#include "torchburn/safetensors.h"

enum { VOCAB = 16, HIDDEN = 32, INTER = 64, HEADS = 2, KV_HEADS = 1, HEAD_DIM = 16 };

static char folder[64], cache_path[128];

static void add(tb_safetensors_entry *entries, int *count, char (*names)[80], float **buffers, const char *name,
                int64_t rows, int64_t cols) {
    const int64_t numel = rows * (cols > 0 ? cols : 1);
    buffers[*count] = malloc(sizeof(float) * (size_t)numel);
    if (!buffers[*count])
        __builtin_trap();
    for (int64_t i = 0; i < numel; i++) /* deterministic values in [-0.5, 0.5) (norm weights near 1) */
        buffers[*count][i] = (float)((i * 7919 + *count * 104729) % 1000) / 1000.0f - 0.5f + (cols > 0 ? 0.0f : 1.0f);
    snprintf(names[*count], 80, "%s", name);
    entries[*count] = (tb_safetensors_entry){.name = names[*count], .dtype = TB_SAFETENSORS_F32,
                                             .ndim = cols > 0 ? 2 : 1, .shape = {rows, cols},
                                             .data = buffers[*count]};
    (*count)++;
}

static void write_model(void) {
    char path[160];
    snprintf(path, sizeof path, "%s/config.json", folder);
    FILE *f = fopen(path, "wb");
    if (!f)
        __builtin_trap();
    fprintf(f, "{\"model_type\": \"qwen2\", \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
               "\"num_hidden_layers\": 1, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
               "\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
               "\"tie_word_embeddings\": true, \"eos_token_id\": 2, \"hidden_act\": \"silu\"}",
            VOCAB, HIDDEN, INTER, HEADS, KV_HEADS);
    fclose(f);
    tb_safetensors_entry entries[16];
    char names[16][80];
    float *buffers[16];
    int count = 0;
    add(entries, &count, names, buffers, "model.embed_tokens.weight", VOCAB, HIDDEN);
    add(entries, &count, names, buffers, "model.norm.weight", HIDDEN, 0);
    add(entries, &count, names, buffers, "model.layers.0.input_layernorm.weight", HIDDEN, 0);
    add(entries, &count, names, buffers, "model.layers.0.post_attention_layernorm.weight", HIDDEN, 0);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.q_proj.weight", HEADS * HEAD_DIM, HIDDEN);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.k_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.v_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.q_proj.bias", HEADS * HEAD_DIM, 0);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.k_proj.bias", KV_HEADS * HEAD_DIM, 0);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.v_proj.bias", KV_HEADS * HEAD_DIM, 0);
    add(entries, &count, names, buffers, "model.layers.0.self_attn.o_proj.weight", HIDDEN, HEADS * HEAD_DIM);
    add(entries, &count, names, buffers, "model.layers.0.mlp.gate_proj.weight", INTER, HIDDEN);
    add(entries, &count, names, buffers, "model.layers.0.mlp.up_proj.weight", INTER, HIDDEN);
    add(entries, &count, names, buffers, "model.layers.0.mlp.down_proj.weight", HIDDEN, INTER);
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    if (tb_safetensors_write(path, entries, (size_t)count, NULL, NULL, 0) != TB_OK)
        __builtin_trap();
    for (int i = 0; i < count; i++)
        free(buffers[i]);
}

static tb_llm_model *load(tb_llm_cache_state *state) {
    tb_llm_load_options options = {.quant = TB_LLM_QUANT_INT8, .cache_path = cache_path, .cache_key = "fuzz"};
    tb_llm_model *model = NULL;
    if (tb_llm_model_load(folder, &options, &model) != TB_OK)
        __builtin_trap(); /* a bad cache file is never an error */
    tb_llm_model_info info;
    tb_llm_model_get_info(model, &info);
    *state = info.cache_state;
    return model;
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    if (!in || !out)
        __builtin_trap();
    char buffer[65536];
    size_t got;
    while ((got = fread(buffer, 1, sizeof buffer, in)) > 0)
        if (fwrite(buffer, 1, got, out) != got)
            __builtin_trap();
    fclose(in);
    if (fclose(out) != 0)
        __builtin_trap();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(folder, sizeof folder, "/tmp/tb-fuzz-cache-XXXXXX");
    if (!mkdtemp(folder))
        __builtin_trap();
    write_model();
    snprintf(cache_path, sizeof cache_path, "%s/cache.safetensors", folder);
    tb_llm_cache_state state;
    tb_llm_model_free(load(&state)); /* writes a valid cache; TB_FUZZ_SEED_OUT copies it out (the seed) */
    const char *seed_out = getenv("TB_FUZZ_SEED_OUT");
    if (seed_out)
        copy_file(cache_path, seed_out);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(cache_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        __builtin_trap();
    tb_llm_cache_state state;
    tb_llm_model *model = load(&state);
    if (state != TB_LLM_CACHE_HIT && state != TB_LLM_CACHE_WRITTEN && state != TB_LLM_CACHE_REBUILT)
        __builtin_trap();
    tb_llm_session *session = NULL;
    float logits[VOCAB];
    const int32_t token = 3;
    if (tb_llm_session_new(model, 8, false, &session) != TB_OK || tb_llm_forward(session, &token, 1, logits, false) != TB_OK)
        __builtin_trap();
    tb_llm_session_free(session);
    tb_llm_model_free(model);
    return 0;
}
