#!/usr/bin/env python3
"""Trains small tokenizers with the HF `tokenizers` package, configured like real checkpoints:

* ``qwen2``   byte-level BPE, NFC, Split(Qwen2 regex) + ByteLevel, <|endoftext|>/<|im_start|>/<|im_end|>
* ``llama3``  byte-level BPE, ignore_merges, Split(Llama 3 regex) + ByteLevel, BOS template
* ``llama2``  Metaspace-style BPE as converted from SentencePiece (Llama 2 / TinyLlama legacy files):
              Prepend("▁") + Replace(" ", "▁") normalizer, byte_fallback, fuse_unk, <0x00>..<0xFF>,
              Replace/ByteFallback/Fuse/Strip decoder, "<s> $A" template
* ``mistral`` the newer form of the same: Metaspace(prepend_scheme="first", split=False) pre-tokenizer
              and Metaspace decoder

Used by tests/python/test_tokenizer.py (written to a temporary folder) and, with ``--write-c-fixture``,
to regenerate the small committed fixtures next to this script that tests/c/test_tokenizer.c reads
(tiny_qwen2.json, tiny_llama2.json, each with a .cases.json of oracle ids).
"""
from __future__ import annotations

import inspect
import json
import os
import random
import sys

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")

SCRIPT_SAMPLES = [
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ο γρήγορος καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧。",
    "私はガラスを食べられます。それは私を傷つけません。カタカナもひらがなも。",
    "나는 유리를 먹을 수 있어요. 그래도 아프지 않아요. 한국어 문장입니다.",
    "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم.",
    "אני יכול לאכול זכוכית וזה לא מזיק לי. שלום עולם.",
    "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. नमस्ते दुनिया",
    "ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ สวัสดีชาวโลก",
    "Tôi có thể ăn thủy tinh mà không hại gì. Xin chào thế giới.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. Ça va très bien, merci! ¿Qué tal?",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨ and math ∑∫√∞ ≤ ≥ ≠ and arrows ← → ↑ ↓",
    "def f(x):\n    return x ** 2  # square\n\nfor i in range(10):\n\tprint(f(i), end='')\r\n",
    "Numbers 1234567890 3.14159 2,718 ٣٤٥ १२३ ①②③ Ⅻ ½ ¾ 10^9 0xFF 1e-5",
    "I'm sure you're right, they've said we'll go. He'd've known. IT'S FINE. 'twas 'S 'LL 'Re",
]


def corpus(limit_chars: int = 400_000) -> list[str]:
    """Deterministic English text (stdlib docstrings) mixed with multilingual / code lines."""
    import collections, email, json as json_module, argparse, pathlib, subprocess, unittest, logging
    texts = []
    for module in (collections, email, json_module, argparse, pathlib, subprocess, unittest, logging,
                   inspect, os, random):
        for _, obj in sorted(vars(module).items()):
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 40:
                texts.append(doc)
    rng = random.Random(1234)
    lines = []
    total = 0
    for doc in texts:
        for line in doc.splitlines():
            if total > limit_chars:
                break
            lines.append(line)
            total += len(line)
            if rng.random() < 0.08:
                lines.append(rng.choice(SCRIPT_SAMPLES))
    lines.extend(SCRIPT_SAMPLES * 3)
    return lines


def _byte_level_trainer(vocab_size: int, specials: list[str]):
    from tokenizers import pre_tokenizers, trainers
    return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


def train_qwen2(lines: list[str], vocab_size: int = 3000):
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, processors
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(lines, _byte_level_trainer(vocab_size, specials))
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken("<s>", special=True, normalized=False),
                            AddedToken("</s>", special=True, normalized=False)])
    # a non-special added token, matched on normalized text
    tok.add_tokens([AddedToken("<think>", special=False, normalized=True)])
    return tok


def train_llama3(lines: list[str], vocab_size: int = 3000):
    from tokenizers import Tokenizer, Regex, decoders, models, pre_tokenizers, processors
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>"]
    tok.train_from_iterator(lines, _byte_level_trainer(vocab_size, specials))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def _sentencepiece_like(lines: list[str], vocab_size: int):
    """Trains a ▁-BPE and rebuilds the vocabulary like a SentencePiece conversion: <unk> <s> </s>,
    then <0x00>..<0xFF>, then the pieces. Returns the tokenizer.json dict (without pipeline parts)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False, limit_alphabet=160,
                                  special_tokens=[])
    tok.train_from_iterator(lines, trainer)
    data = json.loads(tok.to_str())
    trained = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in trained:
        if token not in vocab:
            vocab[token] = len(vocab)
    data["model"]["vocab"] = vocab
    data["model"].update(unk_token="<unk>", byte_fallback=True, fuse_unk=True, ignore_merges=False)
    data["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])
    ]
    for content in ("<|im_start|>", "<|im_end|>"):
        data["added_tokens"].append({"id": len(vocab) + len(data["added_tokens"]) - 3, "content": content,
                                     "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                                     "special": True})
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    return data


def llama2_json(lines: list[str], vocab_size: int = 2500) -> str:
    data = _sentencepiece_like(lines, vocab_size)
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]  # the older "a b" form
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    ]}
    data["pre_tokenizer"] = None
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0},
    ]}
    return json.dumps(data, ensure_ascii=False)


def mistral_json(lines: list[str], vocab_size: int = 2500) -> str:
    data = _sentencepiece_like(lines, vocab_size)
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    data["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    return json.dumps(data, ensure_ascii=False)


CONFIGS = {
    "qwen2": {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False,
              "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
               "chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
               "add_eos_token": False},
    "mistral": {"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>",
                "add_bos_token": True, "add_eos_token": False,
                "chat_template": [{"name": "default", "template": "{{ messages }}"}]},
}


def build_all(directory: str, vocab_size: int = 3000) -> dict[str, str]:
    """Writes <directory>/<name>/tokenizer.json and tokenizer_config.json; returns name -> folder."""
    lines = corpus()
    out = {}
    for name in ("qwen2", "llama3", "llama2", "mistral"):
        folder = os.path.join(directory, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "tokenizer.json")
        if name == "qwen2":
            train_qwen2(lines, vocab_size).save(path)
        elif name == "llama3":
            train_llama3(lines, vocab_size).save(path)
        else:
            text = llama2_json(lines, vocab_size - 500) if name == "llama2" else mistral_json(lines, vocab_size - 500)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
            json.dump(CONFIGS[name], fh, ensure_ascii=False)
        out[name] = folder
    return out


C_CASES = [
    "", "Hello world", " Hello  world ", "I'm here, aren't you? 'S 'LL", "naïve café — 数字 1234567",
    "<|im_start|>user\nHi there<|im_end|>\n", "emoji 😀👍🏽 and tabs\t\tand\r\nnewlines\n\n\n",
    "   leading and trailing   ", "ﬁ ﬀ e\u0301 \u1e9b\u0323 한국어", "<s>a </s> b", "x" * 300,
]


def write_c_fixture(here: str) -> None:
    """Small tokenizers (a few hundred merges) plus oracle ids for the C test."""
    from tokenizers import Tokenizer
    lines = corpus(limit_chars=60_000)
    tiny = {
        "tiny_qwen2": train_qwen2(lines, 700).to_str(),
        "tiny_llama2": llama2_json(lines, 600),
    }
    for name, text in tiny.items():
        with open(os.path.join(here, name + ".json"), "w", encoding="utf-8") as fh:
            fh.write(text)
        oracle = Tokenizer.from_str(text)
        cases = []
        for case in C_CASES:
            ids = oracle.encode(case, add_special_tokens=True).ids
            cases.append({"text": case, "ids": ids, "decoded": oracle.decode(ids, skip_special_tokens=False)})
        with open(os.path.join(here, name + ".cases.json"), "w", encoding="utf-8") as fh:
            json.dump(cases, fh, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    if "--write-c-fixture" in sys.argv:
        write_c_fixture(here)
        print("wrote C fixtures to", here)
    else:
        target = sys.argv[1] if len(sys.argv) > 1 else "/tmp/torchburn_tokenizers"
        print(build_all(target))
