"""The LLM benchmark behind ``torchburn-llm benchmark``: time to first token for a prompt of N tokens,
prefill and decode tokens/s (medians of repeats, greedy, eos ignored so every run decodes the same
number of tokens), next to the machine facts and the decode roofline: measured read bandwidth divided by
the weight bytes one decode step reads."""
from __future__ import annotations

import os
import platform
import statistics
from typing import Any

from .. import _C

__all__ = ["run_benchmark", "format_report"]

_FILLER = (
    "In distributed systems, consensus protocols let a group of machines agree on a single value even "
    "when some of them fail. Raft splits the problem into leader election, log replication and safety. "
)


def prompt_ids(llm, count: int) -> list[int]:
    """Exactly ``count`` token ids of ordinary text (the filler repeated), starting with the model's
    usual prefix (e.g. a BOS)."""
    ids = llm.tokenizer.encode(_FILLER * 4, add_special_tokens=True)
    body = llm.tokenizer.encode(_FILLER, add_special_tokens=False)
    while len(ids) < count:
        ids += body
    return ids[:count]


def machine_facts(bandwidth_bytes: int = 512 << 20) -> dict[str, Any]:
    info = _C.cpu_info()
    return {
        "cpu": info["brand"] or info["vendor"],
        "isa": info["isa"],
        "physical_cores": info["physical_cores"],
        "threads": _C.get_num_threads(),
        "python": platform.python_version(),
        "read_bandwidth_gbs": _C._llm_read_bandwidth(bandwidth_bytes, 5),
    }


def resident_bytes() -> int:
    """Current resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_benchmark(llm, prompt_tokens: int = 512, tokens: int = 128, repeats: int = 3, warmup: int = 1) -> dict[str, Any]:
    """Runs the benchmark on a loaded :class:`torchburn.LLM` and returns a dict of results."""
    if prompt_tokens < 1 or tokens < 1 or repeats < 1:
        raise ValueError("prompt_tokens, tokens and repeats must be >= 1")
    if prompt_tokens + tokens > llm.max_seq_len:
        raise ValueError(f"prompt_tokens + tokens = {prompt_tokens + tokens} exceed max_seq_len {llm.max_seq_len}")
    ids = prompt_ids(llm, prompt_tokens)
    greedy = dict(temperature=0.0, stop_token_ids=[])
    for _ in range(warmup):
        llm.reset()
        llm.generate_tokens(ids[: min(prompt_tokens, 32)], max_tokens=4, **greedy)
    runs = []
    for _ in range(repeats):
        llm.reset()  # a cold cache: the whole prompt is prefilled every time
        llm.generate_tokens(ids, max_tokens=tokens, **greedy)
        runs.append(dict(llm.last_stats))
    rss = resident_bytes()  # while the model and its KV cache (prompt + generated positions) are live
    facts = machine_facts()
    info = llm.info
    median = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    decode = median("decode_tok_s")
    roofline = facts["read_bandwidth_gbs"] * 1e9 / info["decode_bytes_per_token"]
    return {
        "model": str(llm.model_path),
        "model_type": llm.config["model_type"],
        "quant": llm.quant,
        "group_size": llm.group_size,
        "parameters": info["parameters"],
        "weight_bytes": info["weight_bytes"],
        "decode_bytes_per_token": info["decode_bytes_per_token"],
        "load_s": llm.load_stats["load_s"],
        "load_cache": llm.load_stats["cache"],
        "prompt_tokens": prompt_tokens,
        "generated_tokens": tokens,
        "repeats": repeats,
        "ttft_s": median("ttft_s"),
        "prefill_tok_s": median("prefill_tok_s"),
        "decode_tok_s": decode,
        "roofline_tok_s": roofline,
        "decode_fraction_of_roofline": decode / roofline if roofline > 0 else 0.0,
        "rss_bytes": rss,
        "kv_cache_bytes": llm.kv_cache_bytes(prompt_tokens + tokens),
        "runs": runs,
        "machine": facts,
    }


def format_report(result: dict[str, Any]) -> str:
    m = result["machine"]
    quant = result["quant"] + (f" (group {result['group_size']})" if result["group_size"] else "")
    lines = [
        f"model        {result['model']} [{result['model_type']}, {result['parameters'] / 1e6:.1f}M parameters]",
        f"weights      {quant}, {result['weight_bytes'] / 1e6:.1f} MB; decode reads "
        f"{result['decode_bytes_per_token'] / 1e6:.1f} MB/token",
        f"machine      {m['cpu']}, isa {m['isa']}, {m['threads']} thread(s) of {m['physical_cores']} cores, "
        f"read bandwidth {m['read_bandwidth_gbs']:.1f} GB/s",
        f"load         {result['load_s']:.2f} s (quantized cache: {result['load_cache']})",
        f"prompt       {result['prompt_tokens']} tokens: TTFT {result['ttft_s'] * 1000:.0f} ms, "
        f"prefill {result['prefill_tok_s']:.1f} tok/s",
        f"decode       {result['generated_tokens']} tokens: {result['decode_tok_s']:.1f} tok/s "
        f"({100 * result['decode_fraction_of_roofline']:.0f}% of the {result['roofline_tok_s']:.1f} tok/s roofline)",
        f"memory       RSS {result['rss_bytes'] / 1e6:.0f} MB while decoding (weights {result['weight_bytes'] / 1e6:.0f} MB "
        f"+ KV cache {result['kv_cache_bytes'] / 1e6:.1f} MB)",
        f"(medians of {result['repeats']} runs, greedy, eos ignored)",
    ]
    return "\n".join(lines)
