/* libFuzzer harness for config.json and generation_config.json parsing: arbitrary bytes must give a
 * config or a clean error; an accepted config must satisfy the invariants the LLM engine relies on. */
#include <stdint.h>

#include "torchburn/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tb_hf_config cfg;
    if (tb_hf_config_parse((const char *)data, size, "fuzz/config.json", &cfg) == TB_OK) {
        if (cfg.hidden_size <= 0 || cfg.num_attention_heads <= 0 || cfg.num_key_value_heads <= 0 ||
            cfg.head_dim <= 0 || cfg.num_attention_heads % cfg.num_key_value_heads != 0 || cfg.vocab_size <= 0 ||
            cfg.num_hidden_layers <= 0 || cfg.intermediate_size <= 0 || !(cfg.rms_norm_eps > 0) ||
            !(cfg.rope.theta > 0) || cfg.eos.count < 0 || cfg.eos.count > TB_HF_MAX_TOKEN_IDS ||
            (unsigned)cfg.model_type >= TB_HF_MODEL_TYPE_COUNT || (unsigned)cfg.rope.type >= TB_HF_ROPE_TYPE_COUNT)
            __builtin_trap();
    }
    tb_hf_generation_config generation;
    if (tb_hf_generation_config_parse((const char *)data, size, NULL, &generation) == TB_OK) {
        if (generation.eos.count < 0 || generation.eos.count > TB_HF_MAX_TOKEN_IDS || !(generation.top_p <= 1.0))
            __builtin_trap();
    }
    return 0;
}
