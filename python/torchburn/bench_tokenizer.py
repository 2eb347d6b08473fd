"""Tokenizer benchmark: encode and decode MB/s of torchburn's C tokenizer next to HF ``tokenizers`` on
the same text, both on one thread, plus an id-parity check. Run ``python -m torchburn.bench tokenizer``.

Without ``--tokenizer`` it trains two tokenizers in-process with ``tokenizers`` (no downloads): a
Llama-3-style byte-level BPE and a Llama-2-style Metaspace/byte-fallback BPE. The default text is
English prose taken from the docstrings of Python's standard library (deterministic, offline).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from typing import Callable, Optional

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")


def english_text(target_bytes: int) -> str:
    """English prose from standard-library docstrings, repeated to about target_bytes."""
    import argparse as a, collections, email, json as j, logging, pathlib, subprocess, unittest, inspect
    docs = []
    for module in (collections, email, j, a, pathlib, subprocess, unittest, logging, inspect, os):
        for _, obj in sorted(vars(module).items()):
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 80 and doc.isascii():
                docs.append(doc.strip())
    text = "\n\n".join(docs)
    return (text + "\n\n") * max(1, target_bytes // max(1, len(text)))


def _train(kind: str, text: str, folder: str, vocab_size: int) -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    lines = text.splitlines()[:20000]
    if kind == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|begin_of_text|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(lines, trainer)
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", 0)])
        path = os.path.join(folder, "llama3.json")
        tok.save(path)
        return path
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False))
    data = json.loads(tok.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for token, _ in sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    data["model"].update(vocab=vocab, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    data["added_tokens"] = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    data["pre_tokenizer"] = None
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    path = os.path.join(folder, "llama2.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False)
    return path


def _median(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up (fills the word caches of both libraries)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _machine_facts() -> str:
    try:
        from torchburn.bench import machine_facts

        return machine_facts()
    except Exception:  # the rest of the package may be absent in a partial build
        return f"cpu: {platform.processor() or platform.machine()} | python {platform.python_version()}"


def _added_tokens_load(counts: list[int], repeats: int, folder: str) -> None:
    """Load time of a tokenizer.json with many added tokens (a vocabulary of 26 letters plus N added tokens,
    a third of them special), torchburn vs tokenizers."""
    from tokenizers import Tokenizer as HFTokenizer
    from torchburn.tokenizer import Tokenizer

    print(f"{'added tokens':>12} {'torchburn load s':>17} {'tokenizers load s':>18} {'ratio':>7}")
    for count in counts:
        vocab = {chr(c): i for i, c in enumerate(range(ord("a"), ord("z") + 1))}
        added = [{"id": 26 + i, "content": f"<tok{i}>", "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": i % 3 != 0, "special": i % 3 == 0} for i in range(count)]
        data = {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": None,
                "post_processor": None, "decoder": None, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
        path = os.path.join(folder, f"added-{count}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        ours = _median(lambda: Tokenizer.from_file(path), repeats)
        theirs = _median(lambda: HFTokenizer.from_file(path), repeats)
        print(f"{count:>12} {ours:>17.4f} {theirs:>18.4f} {theirs / ours:>6.2f}x")


def run_tokenizer_benchmark(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench tokenizer",
                                     description="Encode/decode throughput of torchburn vs HF tokenizers (one thread).")
    parser.add_argument("--tokenizer", action="append", default=[],
                        help="tokenizer.json file or model folder to benchmark (repeatable); default: train two")
    parser.add_argument("--text", help="UTF-8 text file to encode (default: English prose, see --megabytes)")
    parser.add_argument("--megabytes", type=float, default=2.0, help="size of the default text (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (median)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="vocabulary of the trained tokenizers")
    parser.add_argument("--added-tokens", type=int, nargs="*", metavar="N",
                        help="instead: time loading tokenizers with N added tokens (default 10000 40000 100000)")
    args = parser.parse_args(argv)

    # one thread for the peer; must be set before tokenizers starts its thread pool
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        print("the tokenizer benchmark needs the 'tokenizers' package (pip install tokenizers)")
        return 2
    from torchburn.tokenizer import Tokenizer

    if args.added_tokens is not None:
        print(_machine_facts())
        with tempfile.TemporaryDirectory() as folder:
            _added_tokens_load(args.added_tokens or [10000, 40000, 100000], max(1, args.repeats), folder)
        return 0
    if args.text:
        with open(args.text, encoding="utf-8") as fh:
            text = fh.read()
    else:
        text = english_text(int(args.megabytes * 1e6))
    megabytes = len(text.encode("utf-8")) / 1e6

    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for item in args.tokenizer:
            paths.append((os.path.basename(os.path.normpath(item)),
                          os.path.join(item, "tokenizer.json") if os.path.isdir(item) else item))
        if not paths:
            sample = english_text(1_000_000)
            for kind in ("llama3", "llama2"):
                paths.append((f"{kind}-style (trained, vocab {args.vocab_size})",
                              _train(kind, sample, folder, args.vocab_size)))

        print(_machine_facts())
        print(f"text: {megabytes:.2f} MB, one thread each, median of {args.repeats} runs")
        header = f"{'tokenizer':<38} {'op':<7} {'torchburn MB/s':>15} {'tokenizers MB/s':>16} {'ratio':>7}  ids equal"
        print(header)
        print("-" * len(header))
        for name, path in paths:
            hf = HFTokenizer.from_file(path)
            tok = Tokenizer.from_file(path)
            ours = tok.encode(text)
            theirs = hf.encode(text).ids
            t_ours = _median(lambda: tok.encode(text), args.repeats)
            t_theirs = _median(lambda: hf.encode(text), args.repeats)
            print(f"{name:<38} {'encode':<7} {megabytes / t_ours:>15.1f} {megabytes / t_theirs:>16.1f} "
                  f"{t_theirs / t_ours:>6.1f}x  {ours == theirs}")
            d_ours = _median(lambda: tok.decode(theirs), args.repeats)
            d_theirs = _median(lambda: hf.decode(theirs, skip_special_tokens=False), args.repeats)
            same_text = tok.decode(theirs) == hf.decode(theirs, skip_special_tokens=False)
            print(f"{name:<38} {'decode':<7} {megabytes / d_ours:>15.1f} {megabytes / d_theirs:>16.1f} "
                  f"{d_theirs / d_ours:>6.1f}x  {same_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_tokenizer_benchmark())
