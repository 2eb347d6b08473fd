"""Parity of torchburn's C tokenizer with the HF `tokenizers` package (the oracle).

Small tokenizers are trained in-process (tests/data/tokenizer/make_fixtures.py) in the shapes of real
checkpoints: Qwen2 (NFC + Qwen2 split regex + byte-level), Llama 3 (Llama 3 regex, ignore_merges, BOS
template), Llama 2 legacy (Prepend/Replace normalizer, byte fallback, "a b" merges) and Mistral
(Metaspace prepend_scheme=first). Both libraries load the same tokenizer.json; every mismatch prints
the input.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import string

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402

from torchburn.tokenizer import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "tokenizer")
FLAVORS = ["qwen2", "llama3", "llama2", "mistral"]


def _load_make_fixtures():
    spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(FIXTURES, "make_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_fixtures = _load_make_fixtures()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return make_fixtures.build_all(str(tmp_path_factory.mktemp("tokenizers")))


@pytest.fixture(scope="module", params=FLAVORS)
def pair(request, folders):
    path = os.path.join(folders[request.param], "tokenizer.json")
    return request.param, HFTokenizer.from_file(path), Tokenizer.from_file(path)


def assert_same_ids(hf, tok, texts, add_special_tokens=True, label=""):
    expected = [e.ids for e in hf.encode_batch(list(texts), add_special_tokens=add_special_tokens)]
    bad = []
    for text, want in zip(texts, expected):
        got = tok.encode(text, add_special_tokens)
        if got != want:
            bad.append((text, want, got))
    if bad:
        lines = [f"{label}: {len(bad)} of {len(expected)} inputs differ; first ones:"]
        for text, want, got in bad[:5]:
            lines.append(f"  input {ascii(text)}\n    tokenizers {want}\n    torchburn  {got}")
        pytest.fail("\n".join(lines))


# ---- random text -------------------------------------------------------------------------------

RANGES = [(0x41, 0x7A), (0xC0, 0xFF), (0x100, 0x17F), (0x391, 0x3C9), (0x410, 0x44F), (0x621, 0x64A),
          (0x5D0, 0x5EA), (0x905, 0x94C), (0xE01, 0xE3A), (0x4E00, 0x4FFF), (0x3041, 0x3096), (0x30A1, 0x30FA),
          (0xAC00, 0xD7A3), (0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2), (0x1F300, 0x1F64F),
          (0x1F900, 0x1F9FF), (0x300, 0x36F), (0x0, 0x1F), (0x7F, 0x9F), (0x660, 0x669), (0x966, 0x96F),
          (0xFF10, 0xFF19), (0x2460, 0x24FF), (0x2000, 0x206F), (0xFB00, 0xFB4F), (0x1E00, 0x1EFF),
          (0x2150, 0x218F), (0x1D400, 0x1D7FF), (0xFE00, 0xFE0F), (0x1F3FB, 0x1F3FF)]
WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\x85", "\x0b", "\x0c", "  ", "   "]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<|endoftext|>", "<think>", "<|begin_of_text|>", "<unk>"]


def random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 12)):
        k = rng.random()
        if k < 0.35:
            lo, hi = rng.choice(RANGES)
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        elif k < 0.5:
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 6))
        elif k < 0.6:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
        elif k < 0.68:
            parts.append(rng.choice(SPECIALS))
        elif k < 0.75:
            parts.append("'" + rng.choice(["s", "S", "t", "re", "RE", "Ve", "m", "ll", "lL", "d", "D", "\u017f", "x"]))
        elif k < 0.82:
            while True:
                c = rng.randrange(0x110000)
                if not 0xD800 <= c < 0xE000:
                    break
            parts.append(chr(c))
        else:
            parts.append(rng.choice(["hello", "The", " world", "don't", "a", "!!", "...", "->", "😀", "é",
                                     "e\u0301\u0316", "x", "👨‍👩‍👧", "\u1100\u1161\u11a8"]))
    return "".join(parts)


def random_texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [random_text(rng) for _ in range(count)]


# ---- encode parity -----------------------------------------------------------------------------

def test_every_vocab_entry(pair):
    name, hf, tok = pair
    texts = [hf.decode([i], skip_special_tokens=False) for i in range(hf.get_vocab_size(True))]
    assert_same_ids(hf, tok, texts, add_special_tokens=False, label=f"{name} vocab entries")
    assert_same_ids(hf, tok, texts[:500], add_special_tokens=True, label=f"{name} vocab entries + specials")


def test_ascii_pairs_with_whitespace(pair):
    name, hf, tok = pair
    printable = [chr(c) for c in range(0x20, 0x7F)]
    texts = [a + ws + b for ws in ("", " ", "  ", "\n", "\t") for a in printable for b in printable]
    assert_same_ids(hf, tok, texts, label=f"{name} ASCII pairs")


def test_special_tokens_with_spaces(pair):
    name, hf, tok = pair
    texts = []
    for special in SPECIALS:
        for left in ("", " ", "  ", "\n", "a", "a "):
            for right in ("", " ", "  ", "\n", "b", " b"):
                texts.append(left + special + right)
                texts.append(left + special + special + right)
    texts += ["<s>a", "a </s> b", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<<s>>", "<s"]
    assert_same_ids(hf, tok, texts, label=f"{name} special tokens")
    assert_same_ids(hf, tok, texts, add_special_tokens=False, label=f"{name} special tokens (no post-processor)")


def test_random_unicode_strings(pair):
    name, hf, tok = pair
    assert_same_ids(hf, tok, random_texts(20240601, 1000), label=f"{name} random Unicode")


def test_documents(pair):
    name, hf, tok = pair
    lines = make_fixtures.corpus(200_000)
    rng = random.Random(7)
    docs = []
    for start in range(0, len(lines), 120):
        doc = "\n".join(lines[start:start + 120])
        if rng.random() < 0.5:
            doc = doc.replace("\n", "\r\n") + "\n\n\n   \t "
        docs.append(doc)
    assert sum(len(d) for d in docs) > 100_000 and max(len(d) for d in docs) > 4000
    assert_same_ids(hf, tok, docs, label=f"{name} documents")


@pytest.mark.parametrize("flavor", ["qwen2", "llama2"])
def test_every_code_point(folders, flavor):
    """Character classes (\\p{L}, \\p{N}, \\s), NFC data and byte fallback over all of Unicode."""
    path = os.path.join(folders[flavor], "tokenizer.json")
    hf, tok = HFTokenizer.from_file(path), Tokenizer.from_file(path)
    cps = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = []
    for i in range(0, len(cps), 96):
        chunk = cps[i:i + 96]
        texts.append("".join(chunk))
        texts.append("a" + " 1".join(chunk) + "'s")
    assert_same_ids(hf, tok, texts, label=f"{flavor} all code points")


def test_invalid_utf8_bytes(pair):
    name, hf, tok = pair
    rng = random.Random(99)
    samples = [b"\xff", b"a\xffb", b"\xe2\x82", b"\xe2\x82x", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xc0\xaf",
               b"\xf4\x90\x80\x80", "héllo".encode("latin-1"), b"<s>\xfe</s>"]
    for _ in range(300):
        samples.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 24))))
        good = random_text(rng).encode()
        cut = rng.randint(0, len(good))
        samples.append(good[:cut] + bytes([rng.randrange(0x80, 0x100)]) + good[cut:])
    for raw in samples:
        want = hf.encode(raw.decode("utf-8", "replace")).ids
        assert tok.encode(raw) == want, f"{name}: input {raw!r}"


# ---- decode parity -----------------------------------------------------------------------------

def test_every_id_decodes_like_the_oracle(pair):
    name, hf, tok = pair
    for i in range(hf.get_vocab_size(True) + 3):
        for skip in (False, True):
            want = hf.decode([i], skip_special_tokens=skip)
            assert tok.decode([i], skip) == want, f"{name}: id {i} skip={skip}"
    assert tok.decode([]) == hf.decode([])


def test_decode_round_trip(pair):
    name, hf, tok = pair
    for text in random_texts(5, 400) + make_fixtures.SCRIPT_SAMPLES:
        ids = hf.encode(text).ids
        for skip in (False, True):
            want = hf.decode(ids, skip_special_tokens=skip)
            assert tok.decode(ids, skip) == want, f"{name}: input {ascii(text)} skip={skip}"
        if name in ("qwen2", "llama3") and not any(s in text for s in SPECIALS):
            # byte-level BPE is lossless up to the normalizer (the oracle's NFC for Qwen2)
            expected = hf.normalizer.normalize_str(text) if hf.normalizer else text
            assert tok.decode(tok.encode(text, False)) == expected, f"{name}: input {ascii(text)}"


def test_decode_stream_matches_oracle(pair):
    name, hf, tok = pair
    DecodeStream = tokenizers.decoders.DecodeStream
    for text in random_texts(11, 150) + make_fixtures.SCRIPT_SAMPLES:
        ids = hf.encode(text).ids
        for skip in (False, True):
            ours, theirs = tok.decode_stream(skip), DecodeStream(skip_special_tokens=skip)
            got, want = [], []
            for i in ids:
                got.append(ours.step(i))
                want.append(theirs.step(hf, i))
            assert got == want, f"{name}: input {ascii(text)} skip={skip}"
            for piece in got:
                assert piece is None or "\ufffd" not in piece or "\ufffd" in text, ascii(text)
            whole = "".join(p for p in got if p) + ours.flush()
            assert whole == tok.decode(ids, skip)


def test_stream_joins_byte_fallback_characters(folders):
    tok = Tokenizer.from_pretrained(folders["llama2"])
    ids = [tok.token_to_id(t) for t in ("<0xE2>", "<0x82>", "<0xAC>")]
    stream = tok.decode_stream()
    assert [stream.step(i) for i in ids] == [None, None, "€"]
    assert tok.decode(ids) == "€"
    assert tok.decode(ids[:2]) == "\ufffd\ufffd"


# ---- vocabulary, configuration, loading ---------------------------------------------------------

def test_token_bytes_concatenate_to_the_decoded_text(pair):
    """token_bytes (what constrained generation checks) against the oracle's decode: after an anchor token,
    the bytes of any id sequence whose decode is whole characters are exactly the decoded text's new bytes
    (single ids, every one, and 400 random runs of 1-4 ids)."""
    name, hf, tok = pair
    anchor = next(i for i in range(hf.get_vocab_size()) if hf.id_to_token(i) in ("a", "e", "t"))
    ids = [i for i in range(hf.get_vocab_size()) if not tok.is_special(i)]
    rng = random.Random(5)
    runs = [[i] for i in ids] + [rng.sample(ids, rng.randint(1, 4)) for _ in range(400)]
    base = hf.decode([anchor], skip_special_tokens=False).encode()
    checked = 0
    for run in runs:
        text = hf.decode([anchor] + run, skip_special_tokens=False)
        if "\ufffd" in text:
            continue  # a partial character: its bytes show up only with its other tokens
        checked += 1
        got = base + b"".join(tok.token_bytes(i) for i in run)
        assert got == text.encode(), (name, run, [hf.id_to_token(i) for i in run], got, text)
    assert checked > len(runs) // 2
    partial = [i for i in ids if "\ufffd" in hf.decode([anchor, i], skip_special_tokens=False)]
    for i in partial[:50]:  # half characters come out as their raw bytes, not U+FFFD
        assert b"\xef\xbf\xbd" not in tok.token_bytes(i) or "\ufffd" in hf.id_to_token(i)


def test_vocabulary_queries(pair):
    name, hf, tok = pair
    assert tok.vocab_size == hf.get_vocab_size(True) == len(tok)
    vocab = hf.get_vocab(with_added_tokens=True)
    for token, i in vocab.items():
        assert tok.token_to_id(token) == hf.token_to_id(token) == i, (name, token)
    for i in range(tok.id_limit + 2):
        assert tok.id_to_token(i) == hf.id_to_token(i), (name, i)
    assert tok.token_to_id("definitely not a token \u2603") is None
    assert tok.id_to_token(-1) is None and tok.id_to_token(10**12) is None


def test_from_pretrained_reads_config(folders):
    qwen = Tokenizer.from_pretrained(folders["qwen2"])
    assert qwen.bos_token_id is None
    assert qwen.eos_token_id == qwen.token_to_id("<|im_end|>")
    assert qwen.chat_template.startswith("{% for m in messages %}")
    llama3 = Tokenizer.from_pretrained(folders["llama3"])
    assert llama3.bos_token_id == llama3.token_to_id("<|begin_of_text|>")
    assert llama3.encode("hi")[0] == llama3.bos_token_id
    assert llama3.encode("hi", add_special_tokens=False)[0] != llama3.bos_token_id
    mistral = Tokenizer.from_pretrained(folders["mistral"])
    assert (mistral.bos_token_id, mistral.eos_token_id) == (1, 2)
    assert mistral.chat_template == "{{ messages }}"
    assert mistral.is_special(1) and not mistral.is_special(300)
    with open(os.path.join(folders["mistral"], "chat_template.jinja"), "w") as fh:
        fh.write("{{ from_file }}")
    try:
        assert Tokenizer.from_pretrained(folders["mistral"]).chat_template == "{{ from_file }}"
    finally:
        os.remove(os.path.join(folders["mistral"], "chat_template.jinja"))
    plain = Tokenizer.from_file(os.path.join(folders["qwen2"], "tokenizer.json"))
    assert plain.chat_template is None and plain.eos_token_id is None


def test_bytes_and_str_agree(folders):
    tok = Tokenizer.from_pretrained(folders["qwen2"])
    text = "naïve café 😀 <|im_end|>"
    assert tok.encode(text) == tok.encode(text.encode()) == tok.encode(bytearray(text.encode()))
    with pytest.raises(TypeError):
        tok.encode(123)


def _minimal(**overrides):
    data = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}
    data.update(overrides)
    return json.dumps(data)


@pytest.mark.parametrize("text, error, needle", [
    ("{", ValueError, "tokenizer.json"),
    (json.dumps({"version": "1.0"}), ValueError, "model"),
    (_minimal(model={"type": "BPE", "vocab": {"a": 0}, "merges": ["a zz"]}), ValueError, "'zz'"),
    (_minimal(model={"type": "BPE", "vocab": {"a": "0"}, "merges": []}), ValueError, "'a'"),
    (_minimal(model={"type": "WordPiece", "vocab": {}}), RuntimeError, "WordPiece"),
    (_minimal(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Isolated"}),
     RuntimeError, "\\p{L}+"),
    (_minimal(normalizer={"type": "Lowercase"}), RuntimeError, "Lowercase"),
    (_minimal(added_tokens=[{"id": 5}]), ValueError, "content"),
])
def test_malformed_files_raise_clear_errors(text, error, needle):
    with pytest.raises(error) as info:
        Tokenizer.from_str(text)
    assert needle in str(info.value)


def test_missing_files(tmp_path):
    with pytest.raises(OSError):
        Tokenizer.from_file(tmp_path / "nope.json")
    with pytest.raises(FileNotFoundError):
        Tokenizer.from_pretrained(tmp_path)


VARIANTS = {
    # GPT-2 style ByteLevel with its own regex and prefix space; added tokens with strip options
    "gpt2": ("qwen2", lambda d: (d.update(normalizer=None, pre_tokenizer={
        "type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}),
        [t.update(lstrip=True) for t in d["added_tokens"] if t["content"] == "<|im_start|>"],
        [t.update(rstrip=True) for t in d["added_tokens"] if t["content"] == "<|im_end|>"],
        [t.update(single_word=True) for t in d["added_tokens"] if t["content"] == "<think>"],
        [t.update(lstrip=True, rstrip=True, single_word=True) for t in d["added_tokens"] if t["content"] == "<s>"])),
    # every normalizer and split behaviour at once
    "mixed": ("qwen2", lambda d: (d.update(normalizer={"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"String": "ab"}, "content": "X"}, {"type": "Prepend", "prepend": "_"}]}),
        d["pre_tokenizer"].update(pretokenizers=[
            {"type": "Split", "pattern": {"String": "i"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"String": "o"}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"String": "a"}, "behavior": "MergedWithPrevious", "invert": True},
            {"type": "Split", "pattern": {"String": "e"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Digits", "individual_digits": False}] + d["pre_tokenizer"]["pretokenizers"]))),
    "nfd": ("llama3", lambda d: d.update(normalizer={"type": "NFD"})),
    "nfkd": ("llama3", lambda d: d.update(normalizer={"type": "NFKD"})),
    "metaspace_split": ("mistral", lambda d: (d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
        decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}),
        d["model"].update(fuse_unk=False, byte_fallback=False))),
    "old_metaspace": ("mistral", lambda d: (d.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "CharDelimiterSplit", "delimiter": "a"},
        {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}]}, decoder=None),
        d["model"].update(unk_token=None))),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_component_variants(folders, variant, tmp_path):
    base, edit = VARIANTS[variant]
    with open(os.path.join(folders[base], "tokenizer.json"), encoding="utf-8") as fh:
        data = json.load(fh)
    edit(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    hf, tok = HFTokenizer.from_file(str(path)), Tokenizer.from_file(path)
    texts = random_texts(31, 400) + make_fixtures.SCRIPT_SAMPLES + [
        " ".join(string.ascii_letters), "aaa iii ooo eee 123 4567 a1b2", "  <s>  x <s>y <|im_start|> z"]
    assert_same_ids(hf, tok, texts, label=variant)
    for text in texts[:200]:
        ids = hf.encode(text).ids
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=False), f"{variant}: {ascii(text)}"


def test_many_added_tokens_match_the_oracle(tmp_path):
    """Thousands of added tokens (duplicates, identical repeats, ones already in the vocabulary, config
    extras) get the oracle's ids; loading them is linear (issue 15: it was quadratic, 40k tokens took 4 s;
    `python -m torchburn.bench tokenizer --added-tokens` measures it)."""
    oracle_module = pytest.importorskip("tokenizers")
    vocab = {chr(c): i for i, c in enumerate(range(ord("a"), ord("z") + 1))}
    added = [{"id": 1000 + i, "content": f"<tok{i}>", "special": i % 3 == 0, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": i % 3 != 0} for i in range(12000)]
    added += [dict(added[5]), dict(added[7], special=True), {"id": 0, "content": "a", "special": False, "single_word": False, "lstrip": False, "rstrip": False, "normalized": True}]
    data = json.loads(_minimal(model={"type": "BPE", "vocab": vocab, "merges": []}))
    data["added_tokens"] = added
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    config = {"added_tokens_decoder": {str(20000 + i): {"content": f"<extra{i}>", "special": True}
                                      for i in range(3000)}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    ours = Tokenizer.from_pretrained(tmp_path)
    oracle = oracle_module.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    text = "ab<tok5>c<tok11999> <tok3>z<tok12000>" + "".join(f"<tok{i}>" for i in range(0, 12000, 997))
    assert ours.encode(text) == oracle.encode(text).ids
    for token_id in (0, 25, 26, 1005, 12025):
        assert ours.id_to_token(token_id) == oracle.id_to_token(token_id)
    assert ours.token_to_id("<extra2999>") == 26 + 12000 + 2999  # config extras follow, as transformers adds them
