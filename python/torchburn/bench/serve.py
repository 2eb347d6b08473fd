"""``python -m torchburn.bench serve``: the HTTP server under 1/4/8/16 concurrent streaming clients.

Each client sends one completion request with a prompt of exactly --prompt-tokens token ids and asks for
--tokens tokens (streamed); the table gives aggregate generated tok/s (all clients' tokens / wall time),
time to first token and inter-token latency (p50/p99 over every client's gaps), and the ratio to the
1-client row. With --shared-prefix S the first S tokens of every prompt (in a round) are the same (a system
prompt), so the engine maps their KV blocks instead of prefilling them again; the engine rows then report the
reused prompt tokens and the most KV blocks shared at once. The server runs in this process (uvicorn on a thread, loopback) with --parallel = the
largest client count, so every client has a slot.

The peer is llama.cpp's llama-server: set TORCHBURN_LLAMA_SERVER to its binary and pass --peer-model (or
TORCHBURN_LLAMA_GGUF) a GGUF of the same weights (Q4_0); it runs beside ours (each idle while the other is
measured), with --parallel = the same slot count, the same threads and context per slot, and gets the same
prompts (token ids) through the same OpenAI client right after ours, round by round (--repeats rounds per
client count, medians). Without them the peer is skipped with the reason printed. How to build
it and convert the bench model: docs/serving.md.

    python tools/make_bench_model.py
    python -m torchburn.bench serve -m ~/.cache/torchburn/bench-models/qwen2.5-0.5b-random --threads 2
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any, Optional, Sequence


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return ordered[index]


async def _client(client, model: str, prompt: list[int], tokens: int, peer: bool = False) -> dict[str, Any]:
    start = time.perf_counter()
    stamps: list[float] = []
    usage = None
    if peer:  # llama-server streams one chunk per token; ignore_eos keeps its length equal to ours
        extra = {"extra_body": {"ignore_eos": True, "cache_prompt": False}}
    else:  # logprobs=0 makes every token its own chunk (a random model's tokens often decode to no text)
        extra = {"logprobs": 0}
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=tokens, temperature=0,
                                             stream=True, stream_options={"include_usage": True}, **extra)
    async for chunk in stream:
        if chunk.choices and (peer or chunk.choices[0].logprobs is not None):
            now = time.perf_counter()
            logprobs = chunk.choices[0].logprobs
            stamps.extend([now] * (len(logprobs.tokens or [None]) if logprobs is not None and not peer else 1))
        if chunk.usage is not None:
            usage = chunk.usage
    return {"ttft": stamps[0] - start if stamps else float("nan"),
            "gaps": [b - a for a, b in zip(stamps, stamps[1:])],
            "tokens": usage.completion_tokens if usage else len(stamps), "end": time.perf_counter()}


async def _round(base: str, model: str, prompts: list[list[int]], tokens: int, peer: bool = False) -> dict[str, Any]:
    import openai

    async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=3600) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(_client(client, model, p, tokens, peer) for p in prompts))
    wall = max(r["end"] for r in results) - start
    gaps = [g for r in results for g in r["gaps"]]
    ttfts = [r["ttft"] for r in results]
    generated = sum(r["tokens"] for r in results)
    return {"clients": len(prompts), "generated": generated, "wall_s": wall, "tok_s": generated / wall,
            "ttft_p50": _percentile(ttfts, 50), "ttft_p99": _percentile(ttfts, 99),
            "itl_p50": _percentile(gaps, 50), "itl_p99": _percentile(gaps, 99)}


def _engine_round(llm, slots: int, ctx: int, chunk: int, batch_tokens: int, prompts: list[list[int]],
                  tokens: int) -> dict[str, Any]:
    """The C engine alone (no HTTP, no client parsing): events are timestamped as this thread polls them."""
    from .. import _C

    engine = _C._LLMBatch(llm._model, slots, ctx, chunk, llm._kv_f16, batch_tokens)
    peak_shared = 0
    try:
        start = time.perf_counter()
        ids = {engine.submit(p, tokens, stop_ids=[]): i for i, p in enumerate(prompts)}
        stamps: dict[int, list[float]] = {i: [] for i in ids}
        finished = 0
        while finished < len(ids):
            engine.wait(1.0)
            now = time.perf_counter()
            for request, token, finish, *_ in engine.poll(logprobs=False):
                if token >= 0:
                    stamps[request].append(now)
                finished += finish is not None
            peak_shared = max(peak_shared, engine.stats.get("kv_blocks_shared", 0))
        wall = time.perf_counter() - start
        stats = engine.stats
    finally:
        engine.close()
    generated = sum(len(s) for s in stamps.values())
    gaps = [b - a for s in stamps.values() for a, b in zip(s, s[1:])]
    ttfts = [s[0] - start for s in stamps.values() if s]
    return {"clients": len(prompts), "generated": generated, "wall_s": wall, "tok_s": generated / wall,
            "ttft_p50": _percentile(ttfts, 50), "ttft_p99": _percentile(ttfts, 99),
            "itl_p50": _percentile(gaps, 50), "itl_p99": _percentile(gaps, 99),
            "decode_tok_s": stats["decode_rows"] / stats["decode_seconds"] if stats["decode_seconds"] else 0.0,
            "mean_batch": stats["decode_rows"] / stats["decode_steps"] if stats["decode_steps"] else 0.0,
            "reused_tokens": stats["reused_tokens"], "prompt_tokens": stats["prompt_tokens"],
            "peak_shared_blocks": peak_shared}


def _peer_skip_reason(binary: Optional[str], gguf: Optional[str]) -> Optional[str]:
    """Why llama-server cannot run (None when it can)."""
    if not binary:
        return "TORCHBURN_LLAMA_SERVER is not set (the path of llama.cpp's llama-server binary)"
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return f"TORCHBURN_LLAMA_SERVER={binary} is not an executable file"
    if not gguf:
        return "no GGUF model for it: pass --peer-model or set TORCHBURN_LLAMA_GGUF"
    if not os.path.isfile(gguf):
        return f"the peer model {gguf} does not exist"
    return None


class _LlamaServer:
    """llama-server on a free loopback port for the duration of a `with` block (idle while ours runs)."""

    def __init__(self, binary: str, gguf: str, slots: int, ctx: int, threads: Optional[int]) -> None:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        # -c is the total context, split evenly across the --parallel slots; -b/-ub: its defaults
        self.cmd = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(self.port), "--parallel", str(slots),
                    "-c", str(slots * ctx), "--threads", str(threads or os.cpu_count() or 1), "--no-webui"]
        self.base = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "_LlamaServer":
        import subprocess
        import tempfile

        import httpx

        self.log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                text = self.log.read()[-2000:]
                self.__exit__(None, None, None)
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {text}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("llama-server did not become healthy in 300 s")
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        import subprocess

        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        os.unlink(self.log.name)


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-metric medians over repeated rounds (each metric separately)."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, float):
            out[key] = statistics.median(r[key] for r in rows)
    out["repeats"] = len(rows)
    return out


def _side_by_side(ours: list[dict[str, Any]], peer: list[dict[str, Any]]) -> None:
    print("| clients | ours tok/s | llama-server tok/s | ours / llama-server | TTFT p50 s ours / peer | "
          "TTFT p99 s ours / peer | ITL p50 ms ours / peer | ITL p99 ms ours / peer |")
    print("|---|---|---|---|---|---|---|---|")
    for a, b in zip(ours, peer):
        print(f"| {a['clients']} | {a['tok_s']:.1f} | {b['tok_s']:.1f} | {a['tok_s'] / b['tok_s']:.2f} | "
              f"{a['ttft_p50']:.2f} / {b['ttft_p50']:.2f} | {a['ttft_p99']:.2f} / {b['ttft_p99']:.2f} | "
              f"{1000 * a['itl_p50']:.1f} / {1000 * b['itl_p50']:.1f} | "
              f"{1000 * a['itl_p99']:.1f} / {1000 * b['itl_p99']:.1f} |")


def _table(title: str, rows: list[dict[str, Any]]) -> None:
    print(title)
    print("| clients | aggregate tok/s | x 1 client | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms |")
    print("|---|---|---|---|---|---|---|")
    single = rows[0]["tok_s"] if rows else float("nan")
    for r in rows:
        print(f"| {r['clients']} | {r['tok_s']:.1f} | {r['tok_s'] / single:.2f} | {r['ttft_p50']:.2f} | "
              f"{r['ttft_p99']:.2f} | {1000 * r['itl_p50']:.1f} | {1000 * r['itl_p99']:.1f} |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench serve", description=__doc__.split("\n")[0])
    default_model = Path(os.environ.get("TORCHBURN_CACHE_DIR", Path.home() / ".cache" / "torchburn")) / \
        "bench-models" / "qwen2.5-0.5b-random"
    parser.add_argument("--model", "-m", default=str(default_model), help="model folder (default: the bench model)")
    parser.add_argument("--quant", default="int4", choices=["int4", "int8", "none"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clients", default="1,4,8,16", help="comma-separated client counts")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--shared-prefix", type=int, default=0,
                        help="leading prompt tokens common to every client of a round (a system prompt; default 0)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prefill-chunk", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=0,
                        help="engine token budget per step (decode rows + prompt chunks); 0: one chunk per step")
    parser.add_argument("--engine-only", action="store_true", help="skip the HTTP rounds (and the peer)")
    parser.add_argument("--peer-model", default=os.environ.get("TORCHBURN_LLAMA_GGUF"),
                        help="GGUF (Q4_0) of the same weights for llama-server (default: $TORCHBURN_LLAMA_GGUF)")
    parser.add_argument("--no-peer", action="store_true", help="do not run llama-server")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds per client count (medians reported); ours and the peer alternate")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",")]
    if not 0 <= args.shared_prefix <= args.prompt_tokens:
        parser.error("--shared-prefix must be in [0, --prompt-tokens]")

    from ..llm import LLM
    from ..llm.bench import machine_facts
    from ..llm.serve import create_app, serve_in_thread

    ctx = args.prompt_tokens + args.tokens + 16
    llm = LLM.from_pretrained(args.model, quant=args.quant, num_threads=args.threads, max_seq_len=ctx, quiet=True)
    app = create_app(lambda: llm, "bench", parallel=max(counts), ctx_size=ctx, prefill_chunk=args.prefill_chunk,
                     batch_tokens=args.batch_tokens)
    server, port, thread = serve_in_thread(app)
    base = f"http://127.0.0.1:{port}/v1"
    import httpx

    while httpx.get(f"http://127.0.0.1:{port}/health").status_code != 200:
        time.sleep(0.05)
    rng = random.Random(0)
    vocab = llm.config["vocab_size"] - 1000

    def make_prompts(n: int) -> list[list[int]]:
        shared = [rng.randrange(1000, vocab) for _ in range(args.shared_prefix)]
        return [shared + [rng.randrange(1000, vocab) for _ in range(args.prompt_tokens - args.shared_prefix)]
                for _ in range(n)]

    binary = os.environ.get("TORCHBURN_LLAMA_SERVER")
    skip = "--no-peer" if args.no_peer else "--engine-only" if args.engine_only else \
        _peer_skip_reason(binary, args.peer_model)
    peer = _LlamaServer(binary, args.peer_model, max(counts), ctx, args.threads) if skip is None else None
    rows, engine_rows, peer_rows = [], [], []
    try:
        with peer or contextlib.nullcontext():
            # warm up both with a full-length prompt (first-use buffers, page faults)
            warm = [[rng.randrange(1000, vocab) for _ in range(args.prompt_tokens)]]
            asyncio.run(_round(base, "bench", warm, 8))
            if peer:
                asyncio.run(_round(peer.base, "peer", warm, 8, peer=True))
            for n in counts:  # fresh prompts each round: no reuse between rounds (within one: --shared-prefix)
                ours, theirs, alone = [], [], []
                for _ in range(max(1, args.repeats)):
                    prompts = make_prompts(n)
                    alone.append(_engine_round(llm, max(counts), ctx, args.prefill_chunk, args.batch_tokens,
                                               prompts, args.tokens))
                    if args.engine_only:
                        continue
                    prompts = make_prompts(n)
                    ours.append(asyncio.run(_round(base, "bench", prompts, args.tokens)))
                    if peer:  # the same prompts, right after ours
                        theirs.append(asyncio.run(_round(peer.base, "peer", prompts, args.tokens, peer=True)))
                engine_rows.append(_median_row(alone))
                if ours:
                    rows.append(_median_row(ours))
                if theirs:
                    peer_rows.append(_median_row(theirs))
    finally:
        server.should_exit = True
        thread.join(30)
    from ..llm.bench import run_benchmark

    single = run_benchmark(llm, prompt_tokens=args.prompt_tokens, tokens=args.tokens, repeats=3)
    peer_cmd = " ".join(peer.cmd) if peer else None
    result = {"machine": machine_facts(), "model": str(args.model), "quant": args.quant, "threads": args.threads,
              "prompt_tokens": args.prompt_tokens, "tokens": args.tokens, "http_rows": rows,
              "engine_rows": engine_rows, "single_stream": single,
              "batch_tokens": args.batch_tokens, "peer_rows": peer_rows, "peer_command": peer_cmd, "peer_skipped": skip}
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return 0
    print(f"machine: {json.dumps(result['machine'])}")
    print(f"model: {args.model} ({args.quant}), prompt {args.prompt_tokens} tokens, {args.tokens} generated, "
          f"shared prefix {args.shared_prefix}, threads {args.threads or 'default'}, prefill chunk {args.prefill_chunk}, "
          f"batch tokens {args.batch_tokens or 'off (one chunk per step)'}")
    decode = single.get("decode_tok_s") or single.get("decode", {}).get("tok_s")
    print(f"single-stream LLM.generate (torchburn-llm benchmark, same run): decode {decode:.1f} tok/s, prefill "
          f"{single.get('prefill_tok_s', float('nan')):.1f} tok/s ({args.prompt_tokens}-token prompt)")
    _table("engine alone (C batching engine, polled from Python):", engine_rows)
    for r in engine_rows:
        print(f"  {r['clients']} clients: batched-decode tok/s {r['decode_tok_s']:.1f}, mean rows per step "
              f"{r['mean_batch']:.1f}, prompt tokens reused {r['reused_tokens']} of {r['prompt_tokens']}, "
              f"KV blocks shared at most {r['peak_shared_blocks']}")
    if rows:
        _table("through HTTP (uvicorn + starlette, AsyncOpenAI streaming clients in this process, logprobs=0):",
               rows)
    if skip is not None:
        print(f"llama-server: skipped ({skip})")
    else:
        print(f"llama-server: {peer_cmd}")
        _table("llama-server through HTTP (same clients, same prompts):", peer_rows)
        print("side by side (HTTP, same prompts):")
        _side_by_side(rows, peer_rows)
    return 0
