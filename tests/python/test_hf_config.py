"""config.json / generation_config.json parsing against transformers (AutoConfig, GenerationConfig) as
the oracle for values and defaults, plus rejected files."""
from __future__ import annotations

import json

import pytest

import torchburn
from torchburn.files import parse_config

transformers = pytest.importorskip("transformers")

QWEN25 = {"architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151645,
          "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
          "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
          "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
          "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936}
LLAMA32 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000,
           "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
           "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
           "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
           "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
           "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 128256}
MISTRAL = {"bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
           "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000}
QWEN3 = {"attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
         "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
         "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
         "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
         "tie_word_embeddings": True, "use_sliding_window": False, "vocab_size": 151936}

CONFIGS = {
    "qwen2.5": QWEN25, "llama3.2": LLAMA32, "mistral": MISTRAL, "qwen3": QWEN3,
    "llama_minimal": {"model_type": "llama"}, "mistral_minimal": {"model_type": "mistral"},
    "qwen2_minimal": {"model_type": "qwen2"}, "qwen3_minimal": {"model_type": "qwen3"},
    "qwen2_sliding": {"model_type": "qwen2", "use_sliding_window": True, "num_hidden_layers": 30},
    "qwen2_yarn": {"model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 32768}},
    "llama_linear": {"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "llama_rope_parameters": {"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
    "llama3_default_original": {"model_type": "llama", "max_position_embeddings": 4096,
                                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0}},
    "mistral_no_window": {"model_type": "mistral", "sliding_window": None, "head_dim": 96},
}


def hf_value(config, name):
    value = getattr(config, name, None)
    return value


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_matches_transformers(tmp_path, name: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS[name]))
    ours = torchburn.load_config(tmp_path)
    hf = transformers.AutoConfig.from_pretrained(tmp_path)
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings"):
        assert ours[field] == getattr(hf, field), field
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    assert ours["head_dim"] == head_dim
    rope = hf.rope_parameters
    assert ours["rope"]["theta"] == rope["rope_theta"]
    assert ours["rope"]["type"] == rope["rope_type"]
    for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
        if key in rope and ours["rope"]["type"] != "default":
            assert ours["rope"][key] == rope[key], key
    # sliding window: transformers' per-layer pattern must match ours
    window = getattr(hf, "sliding_window", None)
    layer_types = getattr(hf, "layer_types", None)
    if layer_types is not None:
        sliding = [i for i, kind in enumerate(layer_types) if kind == "sliding_attention"]
        if sliding:
            assert ours["sliding_window"] == window
            assert sliding == list(range(ours["max_window_layers"], ours["num_hidden_layers"]))
        else:
            assert ours["sliding_window"] is None
    else:
        assert ours["sliding_window"] == window
    assert ours["bos_token_id"] == hf.bos_token_id
    eos = hf.eos_token_id
    assert ours["eos_token_id"] == ([] if eos is None else eos if isinstance(eos, list) else [eos])
    assert ours["attention_bias"] == (name.startswith("qwen2") or bool(getattr(hf, "attention_bias", False)))


def test_generation_config_matches_transformers(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN25))
    generation = {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
                  "repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.8, "top_k": 20}
    (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    ours = torchburn.load_config(tmp_path)
    assert ours["has_generation_config"]
    hf = transformers.GenerationConfig.from_pretrained(tmp_path)
    defaults = transformers.GenerationConfig._get_default_generation_params()
    for field in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample", "max_length"):
        expected = getattr(hf, field)
        assert ours["generation"][field] == (defaults[field] if expected is None else expected), field
    assert ours["generation"]["eos_token_id"] == hf.eos_token_id
    assert sorted(ours["generation"]["explicit"]) == sorted(generation)
    # without the file: transformers' generate-time defaults
    (tmp_path / "generation_config.json").unlink()
    plain = torchburn.load_config(tmp_path / "config.json")
    assert not plain["has_generation_config"]
    for field in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample", "max_length"):
        assert plain["generation"][field] == defaults[field]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "gemma"}, "model_type 'gemma' is not supported (supported: llama, mistral, qwen2, qwen3)"),
        ({"hidden_size": 8}, "'model_type' is missing"),
        ({"model_type": "llama", "hidden_size": "4096"}, "'hidden_size': expected an integer, got string"),
        ({"model_type": "llama", "hidden_size": -4}, "'hidden_size' is -4, outside"),
        ({"model_type": "llama", "num_key_value_heads": 5}, "not a multiple of num_key_value_heads 5"),
        ({"model_type": "llama", "eos_token_id": list(range(9))}, "more than the 8 supported"),
        ({"model_type": "llama", "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
         "rope type 'dynamic' is not supported"),
        ({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "are required for llama3"),
        ({"model_type": "llama", "tie_word_embeddings": "yes"}, "'tie_word_embeddings': expected a bool"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_rejected(tmp_path, config, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as info:
        torchburn.load_config(tmp_path)
    assert message in str(info.value)
    assert "config.json" in str(info.value)


def test_not_json_and_missing(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        torchburn.load_config(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama",}')
    with pytest.raises(ValueError, match="line 1, column 24"):
        torchburn.load_config(tmp_path)
    assert parse_config(json.dumps(QWEN3))["qk_norm"] is True
