"""torchburn.LLM against Hugging Face transformers on tiny random models built here (no downloads):
Qwen2 (tied embeddings, q/k/v bias), Qwen3 (q/k norm, untied), Llama (llama3 rope_scaling, untied head),
Mistral (sliding window shorter than the prompt), each saved in f32 and bf16 with a BPE tokenizer trained
here. Oracles: transformers' forward and greedy generate, its logits processors for the sampler, its
apply_chat_template for chat templates. Plus the quantized cache, bad inputs, Ctrl-C and the CLI."""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

import torchburn
from torchburn import _C
from torchburn.llm import LLM, ModelNotFoundError

VOCAB = 400
PROMPT = 64

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<|begin_of_text|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "[INST]", "[/INST]"]

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)

FAMILIES = ["qwen2", "qwen3", "llama", "mistral"]


# ---------------------------------------------------------------- fixtures


def _train_tokenizer(bos: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["The quick brown fox jumps over the lazy dog. " * 3,
              "Once upon a time in distributed systems, consensus was hard to reach.",
              "Héllo wörld — ünïcode ✓ 日本語 😀 and some more plain English text."] * 20
    tok.train_from_iterator(corpus, trainer)
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def _config(family: str):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6)
    if family == "qwen2":
        return transformers.Qwen2Config(**common, tie_word_embeddings=True, rope_theta=1000000.0,
                                        bos_token_id=0, eos_token_id=2)
    if family == "qwen3":
        return transformers.Qwen3Config(**common, head_dim=16, tie_word_embeddings=False, eos_token_id=2)
    if family == "llama":
        return transformers.LlamaConfig(
            **common, tie_word_embeddings=False, rope_theta=500000.0, bos_token_id=5, eos_token_id=[8, 4],
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64})
    return transformers.MistralConfig(**common, sliding_window=16, tie_word_embeddings=False, bos_token_id=3,
                                      eos_token_id=4)


TEMPLATES = {"qwen2": (CHATML, None, "<|im_end|>"), "qwen3": (CHATML, None, "<|im_end|>"),
             "llama": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"), "mistral": (MISTRAL, "<s>", "</s>")}


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """{(family, dtype): folder} for f32 and bf16 checkpoints with tokenizer files."""
    root = tmp_path_factory.mktemp("llm_models")
    dirs = {}
    for index, family in enumerate(FAMILIES):
        torch.manual_seed(1234 + index)
        model = _config_model(family)
        template, bos, eos = TEMPLATES[family]
        tok = _train_tokenizer(bos)
        for dtype in ("f32", "bf16"):
            folder = root / f"{family}-{dtype}"
            (model if dtype == "f32" else model.to(torch.bfloat16)).save_pretrained(folder)
            tok.save(str(folder / "tokenizer.json"))
            config = {"chat_template": template, "eos_token": eos, "model_max_length": 512}
            if bos is not None:
                config["bos_token"] = bos
            (folder / "tokenizer_config.json").write_text(json.dumps(config))
            dirs[(family, dtype)] = folder
    return dirs


def _config_model(family):
    cfg = _config(family)
    cls = {"qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
           "llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM}[family]
    return cls(cfg).eval()


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBURN_CACHE_DIR", str(tmp_path / "tbcache"))


_HF = {}


def hf_model(folder):
    if folder not in _HF:
        _HF[folder] = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return _HF[folder]


def prompt_ids(seed=0, count=PROMPT):
    return torch.randint(11, 380, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ---------------------------------------------------------------- forward parity


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(model_dirs, family, dtype):
    folder = model_dirs[(family, dtype)]
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    ids = prompt_ids()
    ours = torch.from_dlpack(llm.logits(ids))
    with torch.no_grad():
        ref = hf_model(folder)(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_long_prompt_runs_in_chunks(model_dirs):
    """300 tokens cross the 256-token prefill chunk and Mistral's 16-token window."""
    folder = model_dirs[("mistral", "f32")]
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    ids = prompt_ids(3, 300)
    with torch.no_grad():
        ref = hf_model(folder)(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(torch.from_dlpack(llm.logits(ids)), ref, rtol=1e-4, atol=1e-4)


def test_sharded_checkpoint(model_dirs, tmp_path):
    folder = tmp_path / "sharded"
    source = model_dirs[("llama", "bf16")]
    hf_model(model_dirs[("llama", "f32")]).save_pretrained(folder, max_shard_size="100KB")
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("*.safetensors"))) > 2
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, folder / name)
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    ids = prompt_ids()
    with torch.no_grad():
        ref = hf_model(model_dirs[("llama", "f32")])(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(torch.from_dlpack(llm.logits(ids)), ref, rtol=1e-4, atol=1e-4)


def _hf_greedy(folder, ids, count):
    model = hf_model(folder)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=count, min_new_tokens=count, do_sample=False,
                             eos_token_id=None, pad_token_id=0, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_matches_transformers(model_dirs, family):
    folder = model_dirs[(family, "f32")]
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    ids = prompt_ids(1, 24)
    ours = llm.generate_tokens(ids, max_tokens=32, temperature=0.0, stop_token_ids=[])
    assert ours == _hf_greedy(folder, ids, 32)
    assert llm.last_stats["generated_tokens"] == 32 and llm.last_stats["finish_reason"] == "length"


def test_kv_cache_f16_close(model_dirs):
    folder = model_dirs[("llama", "f32")]
    llm = LLM.from_pretrained(folder, quant="none", quiet=True, kv_cache_dtype="float16")
    ids = prompt_ids()
    with torch.no_grad():
        ref = hf_model(folder)(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(torch.from_dlpack(llm.logits(ids)), ref, rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------- quantization


def _dequantized_state(cache_file, config, family):
    """HF state dict rebuilt from the quantized cache file (numpy dequantization), fused tensors split."""
    from safetensors.numpy import load_file

    t = load_file(str(cache_file))

    def matrix(name):
        w, s = t[name + ".weight"], t[name + ".scales"]
        if w.dtype == np.int8:
            return w.astype(np.float32) * s
        q = np.empty((w.shape[0], w.shape[1] * 2), np.float32)
        q[:, 0::2] = (w & 15).astype(np.float32) - 8
        q[:, 1::2] = (w >> 4).astype(np.float32) - 8
        group = q.shape[1] // s.shape[1]
        return (q.reshape(q.shape[0], -1, group) * s[:, :, None]).reshape(q.shape)

    d, hq, hkv, inter = 16, 4, 2, 128
    state = {"model.embed_tokens.weight": matrix("embed"), "model.norm.weight": t["final_norm"]}
    state["lm_head.weight"] = matrix("lm_head") if "lm_head.weight" in t else state["model.embed_tokens.weight"]
    for i in range(2):
        p = f"model.layers.{i}."
        qkv = matrix(f"layers.{i}.qkv")
        state[p + "self_attn.q_proj.weight"] = qkv[: hq * d]
        state[p + "self_attn.k_proj.weight"] = qkv[hq * d: (hq + hkv) * d]
        state[p + "self_attn.v_proj.weight"] = qkv[(hq + hkv) * d:]
        if f"layers.{i}.qkv.bias" in t:
            b = t[f"layers.{i}.qkv.bias"]
            state[p + "self_attn.q_proj.bias"], state[p + "self_attn.k_proj.bias"] = b[: hq * d], b[hq * d: (hq + hkv) * d]
            state[p + "self_attn.v_proj.bias"] = b[(hq + hkv) * d:]
        state[p + "self_attn.o_proj.weight"] = matrix(f"layers.{i}.o")
        gu = matrix(f"layers.{i}.gate_up")
        state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"] = gu[:inter], gu[inter:]
        state[p + "mlp.down_proj.weight"] = matrix(f"layers.{i}.down")
        state[p + "input_layernorm.weight"] = t[f"layers.{i}.attn_norm"]
        state[p + "post_attention_layernorm.weight"] = t[f"layers.{i}.mlp_norm"]
        if family == "qwen3":
            state[p + "self_attn.q_norm.weight"] = t[f"layers.{i}.q_norm"]
            state[p + "self_attn.k_norm.weight"] = t[f"layers.{i}.k_norm"]
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_quantized_logits(model_dirs, family, capsys):
    folder = model_dirs[(family, "f32")]
    ids = prompt_ids(2)
    reference = np.asarray(LLM.from_pretrained(folder, quant="none", quiet=True).logits(ids))
    greedy_ref = np.argmax(reference, axis=-1)
    results = {}
    for quant, threshold in (("int8", 0.999), ("int4", 0.99)):
        llm = LLM.from_pretrained(folder, quant=quant, group_size=32, quiet=True)
        logits = np.asarray(llm.logits(ids))
        results[quant] = (cosine(logits, reference), float(np.mean(np.argmax(logits, -1) == greedy_ref)))
        assert results[quant][0] >= threshold, (quant, results[quant])
        # exactness of the engine: transformers on the dequantized weights of the cache file agrees with the
        # f32-activation path, and the int8-activation path (the default on VNNI CPUs) stays next to it
        model = _config_model(family)
        model.load_state_dict(_dequantized_state(llm.load_stats["cache_path"], llm.config, family), strict=True)
        with torch.no_grad():
            oracle = model(torch.tensor([ids])).logits[0]
        exact = LLM.from_pretrained(folder, quant=quant, group_size=32, quiet=True, exact_activations=True)
        assert exact.load_stats["cache"] == "hit"
        torch.testing.assert_close(torch.from_dlpack(exact.logits(ids)), oracle, rtol=2e-4, atol=2e-4)
        assert cosine(logits, oracle.numpy()) >= 0.9995
    with capsys.disabled():
        print(f"\n  {family}: int8 cos {results['int8'][0]:.5f} greedy agreement {results['int8'][1]:.2f}; "
              f"int4 cos {results['int4'][0]:.5f} greedy agreement {results['int4'][1]:.2f}")


def test_quantized_cache_is_reused(model_dirs, tmp_path):
    folder = model_dirs[("qwen2", "bf16")]
    first = LLM.from_pretrained(folder, quant="int4", quiet=True)
    assert first.load_stats["cache"] == "written"
    path = first.load_stats["cache_path"]
    assert path.startswith(os.environ["TORCHBURN_CACHE_DIR"]) and os.path.isfile(path)
    second = LLM.from_pretrained(folder, quant="int4", quiet=True)
    assert second.load_stats["cache"] == "hit" and second.load_stats["cache_path"] == path
    ids = prompt_ids()
    np.testing.assert_array_equal(np.asarray(first.logits(ids)), np.asarray(second.logits(ids)))
    # other settings get their own file; a damaged file is rebuilt
    other = LLM.from_pretrained(folder, quant="int4", group_size=32, quiet=True)
    assert other.load_stats["cache"] == "written" and other.load_stats["cache_path"] != path
    del second
    with open(path, "r+b") as f:
        f.truncate(100)
    rebuilt = LLM.from_pretrained(folder, quant="int4", quiet=True)
    assert rebuilt.load_stats["cache"] == "rebuilt"
    np.testing.assert_array_equal(np.asarray(first.logits(ids)), np.asarray(rebuilt.logits(ids)))


def test_info_counts_the_tied_head_once(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="int8", quiet=True)
    hf = hf_model(model_dirs[("qwen2", "f32")])
    assert llm.info["parameters"] == sum(p.numel() for p in hf.parameters())
    assert 0 < llm.info["decode_bytes_per_token"] <= llm.info["weight_bytes"]


# ---------------------------------------------------------------- sampling


def _hf_probs(logits, history, temperature, top_k, top_p, min_p, penalty):
    from transformers.generation import logits_process as lp

    scores = torch.tensor([logits], dtype=torch.float32)
    ids = torch.tensor([history], dtype=torch.long)
    if penalty != 1.0:
        scores = lp.RepetitionPenaltyLogitsProcessor(penalty)(ids, scores)
    if temperature == 0.0:
        one_hot = torch.zeros_like(scores[0])
        one_hot[int(torch.argmax(scores[0]))] = 1.0
        return one_hot
    if temperature != 1.0:
        scores = lp.TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k:
        scores = lp.TopKLogitsWarper(top_k)(ids, scores)
    if top_p < 1.0:
        scores = lp.TopPLogitsWarper(top_p)(ids, scores)
    if min_p > 0.0:
        scores = lp.MinPLogitsWarper(min_p)(ids, scores)
    return torch.softmax(scores[0], dim=-1)


SAMPLING_CASES = [
    # temperature, top_k, top_p, min_p, repetition_penalty
    (1.0, 0, 1.0, 0.0, 1.0),
    (0.7, 40, 0.9, 0.0, 1.0),
    (1.3, 5, 1.0, 0.0, 1.0),
    (1.0, 0, 0.5, 0.0, 1.0),
    (0.8, 0, 1.0, 0.1, 1.0),
    (1.0, 10, 0.8, 0.05, 1.3),
    (0.5, 3, 0.99, 0.2, 0.7),
    (0.0, 0, 1.0, 0.0, 1.5),
]


@pytest.mark.parametrize("case", SAMPLING_CASES)
def test_sampling_masks_match_transformers(case):
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(97) * 2.5).astype(np.float32)
    logits[[3, 50]] = logits.max()  # a tie at the top
    logits[10:14] = -3.0  # ties inside the distribution
    history = [3, 11, 11, 40, 96, 0]
    temperature, top_k, top_p, min_p, penalty = case
    ours = torch.from_dlpack(_C._llm_sampling_probs(logits, history, temperature, top_k, top_p, min_p, penalty))
    ref = _hf_probs(logits.tolist(), history, temperature, top_k, top_p, min_p, penalty)
    if temperature == 0.0:  # greedy: the first maximal logit after the penalty
        assert int(torch.argmax(ours)) == int(torch.argmax(ref)) and float(ours.max()) == 1.0
    else:
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_sampling_is_seeded_and_follows_the_distribution():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(20).astype(np.float32)
    draw = lambda seed, n: _C._llm_sampling_probs(logits, [], 1.0, 0, 1.0, 0.0, 1.0, seed=seed, draws=n)  # noqa: E731
    assert draw(42, 50) == draw(42, 50)
    assert draw(42, 50) != draw(43, 50)
    tokens = draw(5, 20000)
    freq = np.bincount(tokens, minlength=20) / len(tokens)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    assert np.abs(freq - probs).max() < 0.015


def test_sampling_rejects_bad_parameters():
    logits = np.zeros(8, np.float32)
    for args in [(float("nan"), 0, 1.0, 0.0, 1.0), (-1.0, 0, 1.0, 0.0, 1.0), (1.0, -2, 1.0, 0.0, 1.0),
                 (1.0, 0, 0.0, 0.0, 1.0), (1.0, 0, 1.5, 0.0, 1.0), (1.0, 0, 1.0, 2.0, 1.0), (1.0, 0, 1.0, 0.0, 0.0)]:
        with pytest.raises(ValueError, match="sampling"):
            _C._llm_sampling_probs(logits, [], *args)


def test_seeded_generation_is_deterministic(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="int8", quiet=True)
    kwargs = dict(max_tokens=24, temperature=1.0, top_k=0, top_p=1.0, stop_token_ids=[])
    ids = prompt_ids(4, 10)
    a = llm.generate_tokens(ids, seed=11, **kwargs)
    b = llm.generate_tokens(ids, seed=11, **kwargs)
    c = llm.generate_tokens(ids, seed=12, **kwargs)
    assert a == b and a != c
    text = llm.generate("The quick brown", seed=3, max_tokens=16)
    assert llm.generate("The quick brown", seed=3, max_tokens=16) == text
    assert "".join(llm.stream("The quick brown", seed=3, max_tokens=16)) == text


# ---------------------------------------------------------------- text API, chat


@pytest.mark.parametrize("family", ["qwen2", "llama", "mistral"])
def test_chat_template_matches_transformers(model_dirs, family):
    folder = model_dirs[(family, "f32")]
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    chats = [
        [{"role": "user", "content": "Hello there!"}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! "},
         {"role": "user", "content": "Ünïcode ✓ 日本語"}],
    ]
    if family != "mistral":
        chats.append([{"role": "system", "content": "Be concise."}, {"role": "user", "content": "Why?"}])
    for messages in chats:
        expected = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert llm.apply_chat_template(messages) == expected
        assert llm.encode_prompt(messages) == hf_tok.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    if family == "mistral":
        with pytest.raises(ValueError, match="alternate"):
            llm.apply_chat_template([{"role": "assistant", "content": "x"}])


def test_raw_prompt_adds_bos_like_transformers(model_dirs):
    folder = model_dirs[("llama", "f32")]
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert llm.encode_prompt("The quick brown fox") == hf_tok("The quick brown fox")["input_ids"]


def test_stream_generate_and_stop_strings(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True)
    full = llm.generate("Once upon a time", max_tokens=40, temperature=0.0, stop_token_ids=[])
    assert llm.last_stats["finish_reason"] == "length"
    pieces = list(llm.stream("Once upon a time", max_tokens=40, temperature=0.0, stop_token_ids=[]))
    assert "".join(pieces) == full
    stats = llm.last_stats
    assert stats["prompt_tokens"] > 0 and stats["generated_tokens"] == 40 and stats["decode_tok_s"] > 0
    assert stats["ttft_s"] > 0 and stats["prefill_tok_s"] > 0
    if len(full) > 6:
        stop = full[3:6]
        cut = llm.generate("Once upon a time", max_tokens=40, temperature=0.0, stop=stop, stop_token_ids=[])
        assert cut == full[: full.index(stop)] and llm.last_stats["finish_reason"] == "stop"
        streamed = "".join(llm.stream("Once upon a time", max_tokens=40, temperature=0.0, stop=[stop, "zzzz"],
                                      stop_token_ids=[]))
        assert streamed == cut


def test_eos_stops_generation(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True)
    ids = prompt_ids(5, 8)
    free = llm.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[])
    stopped = llm.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[free[2]])
    assert stopped == free[: free.index(free[2]) + 1] and llm.last_stats["finish_reason"] == "stop"
    assert 2 in llm.stop_token_ids  # eos from config.json


def test_chat_reuses_the_kv_cache(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True)
    # greedy calls reuse whole 256-position prefill chunks (reproducible); sampled ones the longest prefix
    history = [{"role": "system", "content": "Be brief. " * 40}, {"role": "user", "content": "Hello"}]
    answer = llm.generate(history, max_tokens=8, temperature=0.0)
    history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "More"}]
    llm.generate(history, max_tokens=2, temperature=0.7)
    assert llm.last_stats["reused_tokens"] >= 300
    again = llm.generate(history, max_tokens=8, temperature=0.0)
    assert llm.last_stats["reused_tokens"] == 256
    llm.reset()
    assert llm.generate(history, max_tokens=8, temperature=0.0) == again
    assert llm.last_stats["reused_tokens"] == 0


def test_interactive_chat_loop(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True)
    lines = iter(["hello", "/reset", "again", "/exit", "never read"])
    import io

    out = io.StringIO()
    history = llm.chat(system_prompt="You are terse.", max_tokens=5, temperature=0.0, input_fn=lambda _: next(lines),
                       output=out)
    assert [m["role"] for m in history] == ["system", "user", "assistant"]
    assert history[1]["content"] == "again" and "(history cleared)" in out.getvalue()


# ---------------------------------------------------------------- interruption


def test_ctrl_c_stops_generation_and_the_model_stays_usable(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True)
    seen = []

    def interrupt(piece):
        seen.append(piece)
        if len(seen) == 3:
            signal.raise_signal(signal.SIGINT)

    # Python's own SIGINT handler for the call (an imported library, e.g. ray, may have installed another)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate("Once upon a time", max_tokens=60, temperature=0.0, stop_token_ids=[], callback=interrupt)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(seen) == 3
    expected = llm.generate("Once upon a time", max_tokens=20, temperature=0.0, stop_token_ids=[])
    llm.reset()
    assert llm.generate("Once upon a time", max_tokens=20, temperature=0.0, stop_token_ids=[]) == expected
    # an abandoned stream leaves the model usable too
    stream = llm.stream("Once upon a time", max_tokens=30, temperature=0.0, stop_token_ids=[])
    next(stream)
    stream.close()
    assert llm.last_stats["finish_reason"] == "aborted"
    assert llm.generate("Once upon a time", max_tokens=20, temperature=0.0, stop_token_ids=[]) == expected


def test_a_call_invalidates_an_unfinished_stream(model_dirs):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True)
    stream = llm.stream("Once upon a time", max_tokens=30, temperature=0.0, stop_token_ids=[])
    next(stream)
    llm.generate("Hello", max_tokens=2)
    with pytest.raises(RuntimeError, match="interrupted by another call"):
        list(stream)


# ---------------------------------------------------------------- bad input


def test_model_without_chat_template(model_dirs, tmp_path):
    folder = tmp_path / "plain"
    shutil.copytree(model_dirs[("qwen2", "f32")], folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    assert llm.chat_template is None
    with pytest.raises(ValueError, match="no chat template"):
        llm.generate([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="no chat template"):
        llm.chat()
    assert isinstance(llm.generate("hi", max_tokens=3), str)


def test_missing_model_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ValueError, match="hub.*huggingface-cli download Org/Missing") as info:
        LLM.from_pretrained("Org/Missing")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ModelNotFoundError)
    with pytest.raises(ValueError, match="does not exist"):
        LLM.from_pretrained(str(tmp_path / "nowhere"))


def test_repo_id_resolves_from_the_hub_cache(model_dirs, tmp_path, monkeypatch):
    hub = tmp_path / "home" / "hub"
    snapshot = hub / "models--Org--Tiny" / "snapshots" / "abc123"
    shutil.copytree(model_dirs[("qwen2", "bf16")], snapshot)
    (hub / "models--Org--Tiny" / "refs").mkdir(parents=True)
    (hub / "models--Org--Tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    llm = LLM.from_pretrained("Org/Tiny", quant="int8", quiet=True)
    assert llm.model_path == snapshot.resolve()
    assert "Org--Tiny" in llm.load_stats["cache_path"]


def _copy(model_dirs, tmp_path, edit):
    folder = tmp_path / "edited"
    shutil.copytree(model_dirs[("llama", "f32")], folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_bad_checkpoints(model_dirs, tmp_path):
    folder = _copy(model_dirs, tmp_path, lambda c: c.update(model_type="gpt2"))
    with pytest.raises(ValueError, match="gpt2"):
        LLM.from_pretrained(folder, quiet=True)
    shutil.rmtree(folder)
    folder = _copy(model_dirs, tmp_path, lambda c: c.update(intermediate_size=96))
    with pytest.raises(ValueError, match=r"gate_proj.weight' has shape \[128, 64\] but config.json implies \[96, 64\]"):
        LLM.from_pretrained(folder, quant="int8", quiet=True)
    shutil.rmtree(folder)
    folder = _copy(model_dirs, tmp_path, lambda c: None)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors"):
        LLM.from_pretrained(folder, quiet=True)
    with pytest.raises(ValueError, match="group_size"):
        LLM.from_pretrained(model_dirs[("llama", "f32")], quant="int4", group_size=48, quiet=True)
    with pytest.raises(ValueError, match="multiple of it"):
        LLM.from_pretrained(model_dirs[("llama", "f32")], quant="int4", group_size=256, quiet=True)
    with pytest.raises(ValueError, match="quant"):
        LLM.from_pretrained(model_dirs[("llama", "f32")], quant="int3", quiet=True)


def test_bad_calls(model_dirs, monkeypatch):
    llm = LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", max_seq_len=32, quiet=True)
    with pytest.raises(ValueError, match="empty"):
        llm.generate("")
    with pytest.raises(ValueError, match="context"):
        llm.generate("The quick brown fox jumps over the lazy dog. " * 10)
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        llm.generate([{"role": "user", "content": "hi"}, "not a message"])
    with pytest.raises(ValueError, match=r"messages\[0\]\['content'\]"):
        llm.generate([{"role": "user", "content": 42}])
    with pytest.raises(ValueError, match="prompt must be"):
        llm.generate(42)
    with pytest.raises(ValueError, match="max_tokens"):
        llm.generate("hi", max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        llm.generate("hi", temperature=float("nan"))
    with pytest.raises(ValueError, match="top_p"):
        list(llm.stream("hi", top_p=0.0))
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate_tokens([1, 99999], max_tokens=2)
    with pytest.raises(ValueError, match="no usable GPU"):
        LLM.from_pretrained(model_dirs[("qwen2", "f32")], device="gpu", quiet=True)
    monkeypatch.setenv("TORCHBURN_DEVICE", "gpu")
    with pytest.raises(ValueError, match="TORCHBURN_DEVICE"):
        LLM.from_pretrained(model_dirs[("qwen2", "f32")], quiet=True)
    monkeypatch.setenv("TORCHBURN_DEVICE", "cpu")
    assert LLM.from_pretrained(model_dirs[("qwen2", "f32")], quant="none", quiet=True).device == "cpu"
    assert torchburn.gpu_available() is False and torchburn.active_engine() == "native_cpu"
    # generation runs into the end of the context: finish "length", no error
    tokens = llm.generate_tokens(prompt_ids(0, 28), max_tokens=50, temperature=0.0, stop_token_ids=[])
    assert len(tokens) == 5 and llm.last_stats["finish_reason"] == "length"


# ---------------------------------------------------------------- CLI


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "torchburn.llm", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))


def test_cli_generate_benchmark_and_chat(model_dirs):
    folder = str(model_dirs[("qwen2", "f32")])
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    expected = llm.generate("Once upon a time", max_tokens=8, temperature=0.0)
    run = _cli("generate", "Once upon a time", "-m", folder, "-q", "none", "--max-tokens", "8", "--temperature", "0")
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected + "\n"
    run = _cli("generate", "Once upon a time", "-m", folder, "-q", "none", "--max-tokens", "8", "--temperature", "0",
               "--stream")
    assert run.returncode == 0 and run.stdout == expected + "\n"
    run = _cli("benchmark", "-m", folder, "-q", "int8", "--tokens", "4", "--prompt-tokens", "16", "--repeats", "1",
               "--json", "--threads", "1")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    for key in ("ttft_s", "prefill_tok_s", "decode_tok_s", "decode_fraction_of_roofline"):
        assert result[key] > 0
    assert result["machine"]["threads"] == 1 and result["prompt_tokens"] == 16
    run = _cli("chat", "-m", folder, "-q", "none", "--max-tokens", "4", "--temperature", "0", "-s", "Be brief.",
               stdin="hello\n/reset\nhi again\n/exit\n")
    assert run.returncode == 0, run.stderr
    assert "(history cleared)" in run.stdout
    run = _cli("generate", "x", "-m", str(model_dirs[("qwen2", "f32")]) + "-missing")
    assert run.returncode == 2 and "does not exist" in run.stderr
