#!/usr/bin/env python3
"""Times the continuous-batching engine's decode step for R rows: R requests with 16-token prompts and 160
tokens each run together in R slots; prints the engine's mean decode-step time and rows per step (prefill
is a negligible share). For profiling the batched step, e.g. `perf record -g python tools/batch_step_probe.py 8`.

    python tools/batch_step_probe.py ROWS [--model DIR] [--threads N]
"""
import argparse
import os
import random
import time

from torchburn import _C
from torchburn.llm import LLM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rows", type=int)
    parser.add_argument("--model", default=os.path.join(os.environ.get("TORCHBURN_CACHE_DIR", os.path.expanduser(
        "~/.cache/torchburn")), "bench-models", "qwen2.5-0.5b-random"))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    llm = LLM.from_pretrained(args.model, quant="int4", num_threads=args.threads, max_seq_len=512, quiet=True)
    engine = _C._LLMBatch(llm._model, args.rows, 512, 64, llm._kv_f16)
    rng = random.Random(0)
    for _ in range(args.rows):
        engine.submit([rng.randrange(1000, 150000) for _ in range(16)], 160, stop_ids=[])
    done, start = 0, time.perf_counter()
    while done < args.rows:
        engine.wait(1.0)
        done += sum(event[2] is not None for event in engine.poll(logprobs=False))
    stats = engine.stats
    engine.close()
    print(f"{args.rows} rows: decode step {1000 * stats['decode_seconds'] / stats['decode_steps']:.2f} ms, "
          f"{stats['decode_rows'] / stats['decode_steps']:.2f} rows per step, wall {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
