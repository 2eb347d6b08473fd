"""Reliability of torchburn.LLM against hostile files and calls (issue 15): FIFOs and other non-regular files
never block a load, a damaged or stale quantized-weight cache is detected and rebuilt, greedy decoding
refuses non-finite logits, greedy output does not depend on KV-cache prefix reuse, stale temporary cache
files are cleaned up and an unwritable cache folder is reported, plus the small argument checks.

Every load that could hang runs in a child process with a timeout, so a regression fails instead of
blocking the suite. Oracles: transformers builds the checkpoints, safetensors reads and writes files."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

import torchburn
from torchburn import _C
from torchburn.llm import LLM

VOCAB = 300
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The quick brown fox jumps over the lazy dog. Once upon a time in systems."] * 30,
                            trainer)
    return tok


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random Qwen2 (tied head) in f32, wide enough (K = 128) for int4 groups and int8 activation blocks."""
    folder = tmp_path_factory.mktemp("reliability") / "tiny-qwen2"
    torch.manual_seed(7)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      tie_word_embeddings=True, eos_token_id=2)
    transformers.Qwen2ForCausalLM(config).eval().save_pretrained(folder)
    _tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    return folder


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBURN_CACHE_DIR", str(tmp_path / "tbcache"))


def _copy(model_dir, tmp_path, name="copy"):
    folder = tmp_path / name
    shutil.copytree(model_dir, folder)
    return folder


def _run_child(code: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter; a hang becomes a test failure (TimeoutExpired) instead of a stuck suite."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


# ---------------------------------------------------------------- 2: FIFOs and other non-regular files


def _sharded(model_dir, tmp_path):
    """The model split into two shards with an index, as transformers writes large checkpoints."""
    from safetensors.numpy import load_file, save_file

    folder = _copy(model_dir, tmp_path, "sharded")
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {}
    for index, part in enumerate((names[:half], names[half:])):
        shard = f"model-0000{index + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(folder / shard))
        weight_map.update({n: shard for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("victim", ["generation_config.json", "tokenizer_config.json", "chat_template.jinja",
                                    "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                    "config.json", "tokenizer.json"])
def test_a_fifo_among_the_model_files_is_an_error_not_a_hang(model_dir, tmp_path, victim):
    folder = _sharded(model_dir, tmp_path)
    target = folder / victim
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    run = _run_child(f"""
        import torchburn
        try:
            torchburn.LLM.from_pretrained({str(folder)!r}, quant="none", quiet=True)
        except (ValueError, OSError) as error:
            print("ERROR", type(error).__name__, error)
        else:
            print("LOADED")
    """, timeout=20)
    assert run.returncode == 0, run.stderr
    assert "ERROR" in run.stdout and victim in run.stdout, run.stdout
    assert "not a regular file" in run.stdout, run.stdout


def test_a_fifo_as_the_cache_file_is_rebuilt_not_a_hang(model_dir, tmp_path):
    from torchburn.llm.quant_cache import cache_entry

    cache_path, _ = cache_entry(model_dir, "int8", 64)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(cache_path)
    run = _run_child(f"""
        import torchburn
        llm = torchburn.LLM.from_pretrained({str(model_dir)!r}, quant="int8", quiet=True)
        print("CACHE", llm.load_stats["cache"], llm.load_stats["cache_path"])
    """, timeout=20)
    assert run.returncode == 0, run.stderr
    assert "CACHE" in run.stdout, run.stdout


def test_safetensors_load_of_a_fifo_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "weights.safetensors"
    os.mkfifo(fifo)
    run = _run_child(f"""
        import torchburn.files as files
        for call in (files.safetensors_load, files.safetensors_header, files.safetensors_metadata):
            try:
                call({str(fifo)!r})
            except (ValueError, OSError) as error:
                print("ERROR", error)
        try:
            files.load_config({str(fifo)!r})
        except (ValueError, OSError) as error:
            print("ERROR", error)
    """, timeout=20)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("not a regular file") == 4, run.stdout


def test_tokenizer_from_a_folder_with_fifos(model_dir, tmp_path):
    folder = _copy(model_dir, tmp_path)
    (folder / "tokenizer_config.json").unlink()
    os.mkfifo(folder / "tokenizer_config.json")
    run = _run_child(f"""
        import torchburn
        try:
            torchburn.Tokenizer.from_pretrained({str(folder)!r})
        except (ValueError, OSError) as error:
            print("ERROR", error)
    """, timeout=20)
    assert run.returncode == 0, run.stderr
    assert "tokenizer_config.json" in run.stdout and "not a regular file" in run.stdout, run.stdout


# ---------------------------------------------------------------- 1: cache integrity


def _cache_file(model_dir, quant="int4"):
    llm = LLM.from_pretrained(model_dir, quant=quant, quiet=True)
    assert llm.load_stats["cache"] == "written"
    return llm, llm.load_stats["cache_path"]


def _logits(llm, ids=(5, 17, 40, 99, 3, 250, 12)):
    return np.asarray(llm.logits(list(ids)))


def _damage(path, how):
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    size = os.path.getsize(path)
    header = 8 + int.from_bytes(open(path, "rb").read(8), "little")
    if how == "flip":
        rng = np.random.default_rng(0)
        with open(path, "r+b") as f:
            for offset in rng.integers(header, size, 64):
                f.seek(int(offset))
                byte = f.read(1)[0]
                f.seek(int(offset))
                f.write(bytes([byte ^ 0xFF]))
    elif how == "random":
        with open(path, "r+b") as f:
            f.seek(header)
            f.write(np.random.default_rng(1).integers(0, 256, size - header, dtype=np.uint8).tobytes())
    elif how == "nan_scales":  # rewritten by the safetensors library with the metadata kept
        with safe_open(path, "np") as f:
            metadata = f.metadata()
        tensors = load_file(path)
        tensors["layers.0.qkv.scales"] = np.full_like(tensors["layers.0.qkv.scales"], np.nan)
        save_file(tensors, path, metadata=metadata)
    elif how == "swapped_tensor":  # a valid file whose digest entries no longer match the data
        with safe_open(path, "np") as f:
            metadata = f.metadata()
        tensors = load_file(path)
        tensors["layers.1.down.weight"] = tensors["layers.1.down.weight"][::-1].copy()
        save_file(tensors, path, metadata=metadata)


@pytest.mark.parametrize("how", ["flip", "random", "nan_scales", "swapped_tensor"])
def test_a_damaged_cache_is_rebuilt_with_a_warning(model_dir, how, capsys):
    first, path = _cache_file(model_dir)
    expected = _logits(first)
    del first
    _damage(path, how)
    capsys.readouterr()
    rebuilt = LLM.from_pretrained(model_dir, quant="int4")
    assert rebuilt.load_stats["cache"] == "rebuilt", rebuilt.load_stats
    assert "damaged" in capsys.readouterr().err
    np.testing.assert_array_equal(_logits(rebuilt), expected)
    again = LLM.from_pretrained(model_dir, quant="int4", quiet=True)
    assert again.load_stats["cache"] == "hit"
    np.testing.assert_array_equal(_logits(again), expected)


def test_a_checkpoint_rewritten_with_the_same_size_and_mtime_is_requantized(model_dir, tmp_path, monkeypatch):
    from safetensors.numpy import load_file, save_file

    folder = _copy(model_dir, tmp_path)
    weights = folder / "model.safetensors"
    first, _ = _cache_file(folder)
    before = _logits(first)
    stat = weights.stat()
    tensors = load_file(str(weights))
    save_file({k: -v if k.endswith("proj.weight") else v for k, v in tensors.items()}, str(weights),
              metadata={"format": "pt"})
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size and weights.stat().st_mtime_ns == stat.st_mtime_ns
    second = LLM.from_pretrained(folder, quant="int4", quiet=True)
    assert second.load_stats["cache"] == "written"
    monkeypatch.setenv("TORCHBURN_CACHE_DIR", str(tmp_path / "other-cache"))
    fresh = LLM.from_pretrained(folder, quant="int4", quiet=True)
    assert fresh.load_stats["cache"] == "written"
    assert not np.array_equal(_logits(second), before)
    np.testing.assert_array_equal(_logits(second), _logits(fresh))


# ---------------------------------------------------------------- 6: temp files, unwritable cache


def test_a_killed_cache_write_leaves_no_temp_file_forever(model_dir, tmp_path):
    from torchburn.llm.quant_cache import cache_entry

    cache_path, _ = cache_entry(model_dir, "int8", 64)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    stale = cache_path.parent / (cache_path.name + ".tmp-999999999-0")  # a writer that no longer exists
    stale.write_bytes(b"x" * 1000)
    mine = cache_path.parent / (cache_path.name + f".tmp-{os.getpid()}-7")  # a live writer's file stays
    mine.write_bytes(b"y")
    llm = LLM.from_pretrained(model_dir, quant="int8", quiet=True)
    assert llm.load_stats["cache"] == "written"
    assert not stale.exists() and mine.exists()


@pytest.mark.parametrize("how", ["read_only", "not_a_folder"])
def test_an_unwritable_cache_folder_is_reported(model_dir, tmp_path, how, capsys, monkeypatch):
    cache = tmp_path / "unwritable"
    cache.mkdir()
    if how == "read_only":
        if os.geteuid() == 0:
            pytest.skip("root ignores directory permissions; the not_a_folder case covers the root user")
        (cache / "llm").mkdir()
        os.chmod(cache / "llm", 0o555)
    else:
        (cache / "llm").write_text("a file where the cache folder should be")
    monkeypatch.setenv("TORCHBURN_CACHE_DIR", str(cache))
    capsys.readouterr()
    for _ in range(2):
        llm = LLM.from_pretrained(model_dir, quant="int8")
        assert llm.load_stats["cache"] == "write_failed"
        err = capsys.readouterr().err
        assert "could not save the quantized cache" in err and str(cache / "llm") in err, err
    assert LLM.from_pretrained(model_dir, quant="int8", quiet=True).load_stats["cache"] == "write_failed"
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- 4: non-finite logits in greedy mode


def test_greedy_decoding_refuses_non_finite_logits(model_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = _copy(model_dir, tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.norm.weight"] = np.full_like(tensors["model.norm.weight"], np.nan)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    llm = LLM.from_pretrained(folder, quant="none", quiet=True)
    for call in (lambda: llm.generate("Once upon a time", max_tokens=4, temperature=0.0),
                 lambda: llm.generate_tokens([5, 6, 7], max_tokens=4, temperature=0.0),
                 lambda: llm.generate_tokens([5, 6, 7], max_tokens=4, temperature=0.0, repetition_penalty=1.3),
                 lambda: llm.generate_tokens([5, 6, 7], max_tokens=4, temperature=0.7, top_k=1),
                 lambda: list(llm.stream("Once upon a time", max_tokens=4, temperature=0.0)),
                 lambda: llm.generate("Once upon a time", max_tokens=4, temperature=0.7, seed=1)):
        with pytest.raises(ValueError, match="logits are not finite"):
            call()


def test_greedy_sampler_refuses_a_single_nan(model_dir):
    logits = np.zeros(50, np.float32)
    logits[3] = 1.0
    logits[17] = np.nan
    with pytest.raises(ValueError, match="logits are not finite"):
        _C._llm_sampling_probs(logits, [], 0.0, 0, 1.0, 0.0, 1.0)
    logits[17] = np.inf
    with pytest.raises(ValueError, match="logits are not finite"):
        _C._llm_sampling_probs(logits, [], 0.0, 0, 1.0, 0.0, 1.0)


# ---------------------------------------------------------------- 5: greedy decoding and KV-cache reuse


@pytest.mark.parametrize("quant", ["int4", "int8", "none"])
@pytest.mark.parametrize("exact", [False, True])
def test_greedy_output_does_not_depend_on_prefix_reuse(model_dir, quant, exact):
    """Bit-exact logits are checked in tests/c/test_llm.c (check_reproducible); here the policy end to end:
    a greedy call reuses only whole 256-position prefill chunks and gives a fresh session's tokens."""
    llm = LLM.from_pretrained(model_dir, quant=quant, quiet=True, exact_activations=exact)
    for length in (18, 40, 300):
        ids = torch.randint(10, VOCAB, (length,), generator=torch.Generator().manual_seed(length)).tolist()
        llm.reset()
        fresh = llm.generate_tokens(ids, max_tokens=24, temperature=0.0, stop_token_ids=[])
        again = llm.generate_tokens(ids, max_tokens=24, temperature=0.0, stop_token_ids=[])
        assert llm.last_stats["reused_tokens"] == (256 if length > 256 else 0)
        assert again == fresh, (quant, exact, length)
        # a continuation of an earlier answer: its decoded positions are computed again, as a fresh run would
        longer = ids + fresh[:10]
        reused = llm.generate_tokens(longer, max_tokens=12, temperature=0.0, stop_token_ids=[])
        assert llm.last_stats["reused_tokens"] % 256 == 0
        llm.reset()
        assert llm.generate_tokens(longer, max_tokens=12, temperature=0.0, stop_token_ids=[]) == reused
    # sampling without a seed keeps the longest prefix (chat speed); with a seed it is reproducible
    llm.generate_tokens(ids, max_tokens=4, temperature=0.8, stop_token_ids=[])
    llm.generate_tokens(ids, max_tokens=4, temperature=0.8, stop_token_ids=[])
    assert llm.last_stats["reused_tokens"] == len(ids) - 1
    llm.generate_tokens(ids, max_tokens=4, temperature=0.8, seed=3, stop_token_ids=[])
    assert llm.last_stats["reused_tokens"] == 256


def test_greedy_text_is_reproducible_on_one_llm(model_dir):
    llm = LLM.from_pretrained(model_dir, quant="int4", quiet=True)
    prompt = "The quick brown fox jumps over the lazy dog. Once upon"
    first = llm.generate(prompt, max_tokens=32, temperature=0.0, stop_token_ids=[])
    assert llm.generate(prompt, max_tokens=32, temperature=0.0, stop_token_ids=[]) == first


# ---------------------------------------------------------------- 7: small argument checks


def test_argument_errors_name_the_argument(model_dir):
    llm = LLM.from_pretrained(model_dir, quant="none", quiet=True)
    with pytest.raises(ValueError, match="max_tokens"):
        llm.generate("hi", max_tokens=2**70)
    with pytest.raises(ValueError, match="top_k"):
        llm.generate("hi", top_k=2**70)
    with pytest.raises(ValueError, match="top_k"):
        llm.generate("hi", top_k=-3)
    with pytest.raises(ValueError, match=r"stop_token_ids.*\b1000\b.*vocabulary"):
        llm.generate("hi", stop_token_ids=[1000])
    with pytest.raises(ValueError, match=r"stop_token_ids.*-1"):
        llm.generate_tokens([5, 6], stop_token_ids=[-1])
    with pytest.raises(ValueError, match="got -5"):
        torchburn.set_num_threads(-5)
    with pytest.raises(ValueError, match="got 0"):
        torchburn.set_num_threads(0)


def test_a_dlpack_producer_that_raises_keeps_its_exception():
    class Broken:
        def __dlpack__(self, *args, **kwargs):
            raise RuntimeError("producer refused")

        def __dlpack_device__(self):
            return (1, 0)

    import torchburn.ops as ops

    with pytest.raises(RuntimeError, match="producer refused"):
        torchburn.from_dlpack(Broken())
    with pytest.raises(RuntimeError, match="producer refused"):
        ops.relu(Broken())


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is")
def test_var_correction_matches_torch():
    import torchburn.ops as ops

    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(3))
    for correction in (0, 0.5, 1, 1.5, 5, 6.5, 7, 9):
        for dim in (None, 0, 1):
            expected = torch.var(x, dim=dim, correction=correction)
            got = ops.var(x, dim=dim, correction=correction)
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), expected, equal_nan=True)


def test_sdpa_refuses_a_nan_scale():
    import torchburn.ops as ops

    q = torch.randn(1, 2, 4, 8)
    for scale in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="scale"):
            ops.scaled_dot_product_attention(q, q, q, scale=scale)


def test_cli_reports_a_bad_isa_without_a_traceback(model_dir):
    run = subprocess.run([sys.executable, "-m", "torchburn.llm", "generate", "hi", "-m", str(model_dir)],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, TORCHBURN_ISA="bogus"))
    assert run.returncode != 0
    assert "TORCHBURN_ISA" in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_cli_chat_survives_binary_stdin(model_dir):
    run = subprocess.run([sys.executable, "-m", "torchburn.llm", "chat", "-m", str(model_dir), "-q", "none",
                          "--max-tokens", "3", "--temperature", "0"],
                         input=b"\xff\xfe bad bytes\nhello\n/exit\n", capture_output=True, timeout=120,
                         env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    assert b"Traceback" not in run.stderr
    assert run.stdout.count(b"\n") >= 2  # both lines got an answer


# ---------------------------------------------------------------- thread-safety contract (docs/llm.md)


def test_one_call_at_a_time_per_llm_and_a_clear_error_for_a_second(model_dir):
    import threading

    llm = LLM.from_pretrained(model_dir, quant="int8", quiet=True)
    expected = llm.generate_tokens([5, 6, 7], max_tokens=40, temperature=0.0, stop_token_ids=[])
    started, release = threading.Event(), threading.Event()
    results, errors = [], []

    def slow(piece):  # holds the call open (the GIL is taken back once per token)
        started.set()
        release.wait(30)

    def first():
        results.append(llm.generate("Once upon a time", max_tokens=3, temperature=0.0, callback=slow))

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(30)
    try:
        llm.generate_tokens([5, 6, 7], max_tokens=4, temperature=0.0)
    except RuntimeError as error:
        errors.append(str(error))
    release.set()
    thread.join(30)
    assert errors and "already running a call in another thread" in errors[0]
    assert len(results) == 1
    # shared tokenizer from many threads, and separate LLMs in parallel, agree with one thread
    other = LLM.from_pretrained(model_dir, quant="int8", quiet=True)
    outputs = {}

    def run(name, model):
        outputs[name] = model.generate_tokens([5, 6, 7], max_tokens=40, temperature=0.0, stop_token_ids=[])
        outputs[name + "-tokens"] = [model.tokenizer.encode("The quick brown fox " * 20) for _ in range(20)]

    threads = [threading.Thread(target=run, args=(n, m)) for n, m in (("a", llm), ("b", other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outputs["a"] == outputs["b"] == expected
    reference = llm.tokenizer.encode("The quick brown fox " * 20)
    assert all(ids == reference for ids in outputs["a-tokens"] + outputs["b-tokens"])


# ---------------------------------------------------------------- 7: Ctrl-C during a long prefill or load

@pytest.fixture(scope="module")
def wide_model_dir(tmp_path_factory):
    """A random Llama big enough (hidden 512, 6 layers, ~20M parameters) that a long prefill and an int4 load
    take a good fraction of a second here, so a signal can land in the middle of them."""
    folder = tmp_path_factory.mktemp("interrupt") / "wide-llama"
    torch.manual_seed(3)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=512, intermediate_size=1536, num_hidden_layers=6,
                                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=8192,
                                      tie_word_embeddings=False, eos_token_id=2)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    _tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    return folder


# In a child: time the uninterrupted call, then run it again and send SIGINT (from another thread, as a
# terminal would) after a tenth of that time. The call must stop with KeyboardInterrupt before it finishes:
# `partial` checks what it left behind. Without cancel points the interrupt only lands after the call.
_INTERRUPT_CHILD = r"""
import os, signal, sys, threading, time
from torchburn.llm import LLM

signal.signal(signal.SIGINT, signal.default_int_handler)  # even if the parent ignored SIGINT

def interrupted_after(delay, call):
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    start = time.perf_counter()
    timer.start()
    try:
        call()
    except KeyboardInterrupt:
        return time.perf_counter() - start
    finally:
        timer.join()
    return None
"""


def test_ctrl_c_stops_a_long_prefill_between_layers(wide_model_dir):
    code = _INTERRUPT_CHILD + f"""
llm = LLM.from_pretrained({str(wide_model_dir)!r}, quant="int8", quiet=True, max_seq_len=8192)
# a prompt of whole 256-token chunks long enough to take ~1.5 s here (1,024..4,096 tokens): a sanitized
# build or a CPU without int8 dot products prefills many times slower than an optimized one
start = time.perf_counter()
llm.generate_tokens([5 + i % 250 for i in range(256)], max_tokens=1, temperature=0.0)
per_chunk = time.perf_counter() - start
llm.reset()
chunks = max(4, min(16, int(1.5 / max(per_chunk, 1e-6))))
prompt = [5 + i % 250 for i in range(256 * chunks)]
start = time.perf_counter()
llm.generate_tokens(prompt, max_tokens=1, temperature=0.0)
full = time.perf_counter() - start
for name, call in (("generate", lambda: llm.generate_tokens(prompt, max_tokens=1, temperature=0.0)),
                   ("logits", lambda: llm.logits(prompt))):
    llm.reset()
    took = interrupted_after(full / 10, call)
    cached = len(llm._session.tokens)
    print(name, full, took, cached, flush=True)
    assert took is not None, name + ": no KeyboardInterrupt"
    assert cached < len(prompt), name + ": the whole prompt ran before the interrupt was noticed"
    assert cached % 256 == 0, name + ": the cache must end on a whole prefill chunk"
# the session is usable after an interrupt and gives the uninterrupted answer
first = llm.generate_tokens(prompt[:300], max_tokens=4, temperature=0.0, stop_token_ids=[])
llm.reset()
assert llm.generate_tokens(prompt[:300], max_tokens=4, temperature=0.0, stop_token_ids=[]) == first
print("ok")
"""
    result = _run_child(code, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr


def test_ctrl_c_in_the_progress_display_stops_the_load(wide_model_dir, tmp_path):
    """A KeyboardInterrupt raised inside the load's progress callback (Ctrl-C while the bar is drawn) stops
    the load; other errors of the display are ignored. (Before: every exception there was swallowed and
    the load ran to the end. The loader's own cancel points are tested in tests/c/test_llm.c.)"""
    calls = []

    def interrupting(done, total):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    def broken(done, total):
        calls.append(done)
        raise ValueError("a broken progress display")

    with pytest.raises(KeyboardInterrupt):
        _C._LLMModel.load(str(wide_model_dir), quant="int4", cache_path=None, progress=interrupting)
    assert len(calls) == 2
    calls.clear()
    model = _C._LLMModel.load(str(wide_model_dir), quant="int4", cache_path=None, progress=broken)
    assert model.info["parameters"] > 0 and len(calls) == 1
