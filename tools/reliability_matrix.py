"""The hostile-input cases of issue 15, each in a fresh interpreter with a timeout, classified as
ok (the documented behaviour), clear error, crash, hang or wrong result. Run it with the interpreter of
the build to judge:  python tools/reliability_matrix.py [--python /path/to/python] [--timeout 20]"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter, defaultdict

SETUP = r'''
import json, os, shutil, sys, numpy as np
import torchburn
from torchburn.llm import LLM
from safetensors.numpy import load_file, save_file
MODEL = os.environ["TB_MATRIX_MODEL"]
def copy(name="m"):
    d = os.path.join(os.environ["TB_MATRIX_TMP"], name); shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(MODEL, d); return d
def logits(llm): return np.asarray(llm.logits([5, 17, 40, 99, 3]))
'''

# (category, name, code): code prints OK (documented behaviour) or WRONG, or raises (a clear error when
# the message names the problem: the case's `expect` substring)
CASES = []


def case(category, name, expect=None):
    def register(code):
        CASES.append((category, name, textwrap.dedent(code), expect))
        return code
    return register


for how in ("flip64", "random", "nan_scales", "swapped"):
    case("damaged quantized cache", how)(f'''
        a = LLM.from_pretrained(MODEL, quant="int4", quiet=True); ref = logits(a); path = a.load_stats["cache_path"]; del a
        size = os.path.getsize(path); header = 8 + int.from_bytes(open(path, "rb").read(8), "little")
        rng = np.random.default_rng(0)
        if "{how}" == "flip64":
            with open(path, "r+b") as f:
                for o in rng.integers(header, size, 64): f.seek(int(o)); b = f.read(1)[0]; f.seek(int(o)); f.write(bytes([b ^ 255]))
        elif "{how}" == "random":
            with open(path, "r+b") as f: f.seek(header); f.write(rng.integers(0, 256, size - header, dtype=np.uint8).tobytes())
        else:
            from safetensors import safe_open
            with safe_open(path, "np") as f: meta = f.metadata()
            t = load_file(path)
            if "{how}" == "nan_scales": t["layers.0.qkv.scales"][:] = np.nan
            else: t["layers.1.down.weight"] = t["layers.1.down.weight"][::-1].copy()
            save_file(t, path, metadata=meta)
        b = LLM.from_pretrained(MODEL, quant="int4", quiet=True)
        print("OK" if np.array_equal(logits(b), ref) else "WRONG")
    ''')
case("damaged quantized cache", "checkpoint rewritten, same size and mtime")('''
    d = copy(); w = os.path.join(d, "model.safetensors")
    a = LLM.from_pretrained(d, quant="int4", quiet=True); before = logits(a); st = os.stat(w)
    t = load_file(w); save_file({k: -v if k.endswith("proj.weight") else v for k, v in t.items()}, w, metadata={"format": "pt"})
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    b = LLM.from_pretrained(d, quant="int4", quiet=True)
    print("WRONG" if np.array_equal(logits(b), before) else "OK")
''')
for victim in ("generation_config.json", "tokenizer_config.json", "chat_template.jinja", "config.json", "tokenizer.json",
               "model.safetensors", "cache file"):
    case("FIFO instead of a file", victim, expect="not a regular file" if victim != "cache file" else None)(f'''
        d = copy(); victim = "{victim}"
        if victim == "cache file":
            from torchburn.llm.quant_cache import cache_entry
            p, _ = cache_entry(__import__("pathlib").Path(d), "int8", 64); p.parent.mkdir(parents=True, exist_ok=True); os.mkfifo(p)
            LLM.from_pretrained(d, quant="int8", quiet=True); print("OK")
        else:
            p = os.path.join(d, victim)
            if os.path.exists(p): os.unlink(p)
            os.mkfifo(p); LLM.from_pretrained(d, quant="none", quiet=True); print("WRONG")
    ''')
case("FIFO instead of a file", "safetensors_load", expect="not a regular file")('''
    p = os.path.join(os.environ["TB_MATRIX_TMP"], "f.safetensors"); os.path.exists(p) and os.unlink(p); os.mkfifo(p)
    import torchburn.files as files; files.safetensors_load(p); print("WRONG")
''')
case("greedy decoding, non-finite logits", "NaN final norm", expect="not finite")('''
    d = copy(); w = os.path.join(d, "model.safetensors"); t = load_file(w); t["model.norm.weight"][:] = np.nan
    save_file(t, w, metadata={"format": "pt"}); llm = LLM.from_pretrained(d, quant="none", quiet=True)
    llm.generate("Once upon a time", max_tokens=4, temperature=0.0); print("WRONG")
''')
case("temp files and unwritable cache", "stale temp file of a killed writer")('''
    from torchburn.llm.quant_cache import cache_entry
    import pathlib
    p, _ = cache_entry(pathlib.Path(MODEL), "int8", 64); p.parent.mkdir(parents=True, exist_ok=True)
    stale = p.parent / (p.name + ".tmp-999999999-0"); stale.write_bytes(b"x")
    LLM.from_pretrained(MODEL, quant="int8", quiet=True); print("WRONG" if stale.exists() else "OK")
''')
case("temp files and unwritable cache", "cache folder not writable")('''
    import io, contextlib
    root = os.environ["TORCHBURN_CACHE_DIR"]; os.makedirs(root, exist_ok=True); open(os.path.join(root, "llm"), "w").write("x")
    err = io.StringIO()
    with contextlib.redirect_stderr(err): llm = LLM.from_pretrained(MODEL, quant="int8")
    print("OK" if "could not save" in err.getvalue() else "WRONG")
''')
case("argument checks", "__dlpack__ raises", expect="producer refused")('''
    class B:
        def __dlpack__(self, *a, **k): raise RuntimeError("producer refused")
        def __dlpack_device__(self): return (1, 0)
    torchburn.from_dlpack(B())
''')
for name, call, expect in (("max_tokens = 2**70", 'llm.generate("hi", max_tokens=2**70)', "max_tokens"),
                           ("top_k = 2**70", 'llm.generate("hi", top_k=2**70)', "top_k"),
                           ("stop id outside the vocabulary", 'llm.generate("hi", max_tokens=2, stop_token_ids=[10**6]); print("WRONG")', "stop_token_ids"),
                           ("set_num_threads(-5)", "torchburn.set_num_threads(-5)", "-5")):
    case("argument checks", name, expect=expect)(f'''
        llm = LLM.from_pretrained(MODEL, quant="none", quiet=True)
        {call}
    ''')
case("argument checks", "var(correction=0.5), correction >= N")('''
    import torch, torchburn.ops as ops
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(3))
    good = all(torch.allclose(torch.as_tensor(np.asarray(ops.var(x, dim=0, correction=c))), torch.var(x, dim=0, correction=c), equal_nan=True)
               for c in (0.5, 7, 9))
    print("OK" if good else "WRONG")
''')
case("argument checks", "sdpa(scale=NaN)", expect="scale")('''
    import torch, torchburn.ops as ops
    q = torch.randn(1, 2, 4, 8); ops.scaled_dot_product_attention(q, q, q, scale=float("nan")); print("WRONG")
''')
case("command line", "TORCHBURN_ISA=bogus")('''
    import subprocess
    r = subprocess.run([sys.executable, "-m", "torchburn.llm", "generate", "hi", "-m", MODEL], capture_output=True, text=True,
                       env=dict(os.environ, TORCHBURN_ISA="bogus"))
    print("OK" if r.returncode != 0 and "Traceback" not in r.stderr and "TORCHBURN_ISA" in r.stderr else "WRONG")
''')
case("command line", "binary stdin in chat")(r'''
    import subprocess
    r = subprocess.run([sys.executable, "-m", "torchburn.llm", "chat", "-m", MODEL, "-q", "none", "--max-tokens", "2",
                        "--temperature", "0"], input=b"\xff\xfe\nhello\n/exit\n", capture_output=True)
    print("OK" if r.returncode == 0 and b"Traceback" not in r.stderr else "WRONG")
''')


def make_model(folder: str) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    torch.manual_seed(7)
    config = transformers.Qwen2Config(vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                      tie_word_embeddings=True, eos_token_id=2)
    transformers.Qwen2ForCausalLM(config).eval().save_pretrained(folder)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["The quick brown fox jumps over the lazy dog."] * 30, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(folder, "tokenizer.json"))
    chatml = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": chatml, "eos_token": "<|im_end|>"}, f)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": 2}, f)


def classify(run, expect, timed_out):
    if timed_out:
        return "hang"
    out = run.stdout.strip().splitlines()
    if run.returncode < 0 or "SystemError" in run.stderr or "Segmentation" in run.stderr:
        return "crash"
    if out and out[-1] == "OK":
        return "ok"
    if out and out[-1] == "WRONG":
        return "wrong result"
    last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
    if run.returncode != 0 and expect is not None and expect in last and ("Error" in last or "Exception" in last):
        return "clear error"
    return f"unclear error ({last[:80]})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny-qwen2")
        make_model(model)
        results = []
        for index, (category, name, code, expect) in enumerate(CASES):
            work = os.path.join(tmp, f"case{index}")
            os.makedirs(work)
            env = dict(os.environ, TB_MATRIX_MODEL=model, TB_MATRIX_TMP=work, TORCHBURN_CACHE_DIR=os.path.join(work, "cache"))
            try:
                run = subprocess.run([args.python, "-c", SETUP + code], capture_output=True, text=True,
                                     timeout=args.timeout, env=env)
                outcome = classify(run, expect, False)
            except subprocess.TimeoutExpired:
                outcome = classify(None, expect, True)
            results.append((category, name, outcome))
            print(f"{category:<36} {name:<42} {outcome}", file=sys.stderr)
    table = defaultdict(Counter)
    for category, _, outcome in results:
        table[category]["cases"] += 1
        table[category][outcome.split(" (")[0]] += 1
    print(f"| category | cases | ok | clear errors | crashes | hangs | wrong results | unclear errors |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for category, c in table.items():
        print(f"| {category} | {c['cases']} | {c['ok']} | {c['clear error']} | {c['crash']} | {c['hang']} | "
              f"{c['wrong result']} | {c['unclear error']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
