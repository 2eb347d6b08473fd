"""Command line of the LLM engine: ``python -m torchburn.llm`` and the ``torchburn-llm`` console script.

    torchburn-llm chat      -m Qwen/Qwen2.5-0.5B-Instruct -q int4 [-s "You are concise."]
    torchburn-llm generate  "Explain neural ODEs" -m PATH [--stream] [--max-tokens 128]
    torchburn-llm benchmark -m PATH [--tokens 128] [--prompt-tokens 512] [--json]
    torchburn-llm serve     -m PATH [--port 8000] [--parallel 4] [--api-key K]   (OpenAI-compatible HTTP)
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def _common(parser: argparse.ArgumentParser, max_tokens: int) -> None:
    parser.add_argument("--model", "-m", default=DEFAULT_MODEL,
                        help=f"model folder or Hugging Face repo id in the local cache (default: {DEFAULT_MODEL})")
    parser.add_argument("--quant", "-q", default="int4", choices=["int4", "int8", "none"],
                        help="weight format (default: int4; quantized weights are cached)")
    parser.add_argument("--device", "-d", default="auto",
                        help="auto, cpu or gpu (default: auto = the Vulkan GPU when one exists, CPU-type devices "
                             "excluded; TORCHBURN_DEVICE honoured)")
    parser.add_argument("--threads", type=int, default=None, help="kernel threads (default: physical cores)")
    parser.add_argument("--group-size", type=int, default=64, choices=[32, 64, 128, 256], help="int4 group size")
    parser.add_argument("--max-seq-len", type=int, default=None, help="context positions (default: the model's)")
    parser.add_argument("--max-tokens", type=int, default=max_tokens, help=f"tokens to generate (default: {max_tokens})")
    parser.add_argument("--temperature", type=float, default=0.7, help="0 = greedy (default: 0.7)")
    parser.add_argument("--top-p", type=float, default=0.9, help="nucleus sampling mass (default: 0.9)")
    parser.add_argument("--top-k", type=int, default=40, help="keep the k most likely tokens, 0 = off (default: 40)")
    parser.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min_p x the top probability")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="1 = off (default)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same text)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or load messages")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchburn-llm",
        description="Run Qwen2/2.5/3, Llama 2/3 and Mistral models from their Hugging Face folders on the CPU.",
    )
    commands = parser.add_subparsers(dest="command", metavar="{chat,generate,benchmark,serve}")
    commands.required = True
    chat = commands.add_parser("chat", help="interactive multi-turn chat (/reset, /exit)")
    _common(chat, 512)
    chat.add_argument("--system", "-s", default=None, help="system prompt")
    generate = commands.add_parser("generate", help="complete one prompt")
    generate.add_argument("prompt", help="the prompt text")
    _common(generate, 128)
    generate.add_argument("--system", "-s", default=None, help="system prompt (renders the prompt as a chat)")
    generate.add_argument("--chat", action="store_true", help="render the prompt with the model's chat template")
    generate.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    generate.add_argument("--stats", action="store_true", help="print timing stats to stderr")
    bench = commands.add_parser("benchmark", help="TTFT, prefill and decode tok/s, roofline")
    _common(bench, 128)
    bench.add_argument("--tokens", type=int, default=128, help="tokens to decode per run (default: 128)")
    bench.add_argument("--prompt-tokens", type=int, default=512, help="prompt length (default: 512)")
    bench.add_argument("--repeats", type=int, default=3, help="timed runs; medians are reported (default: 3)")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")
    from .serve import build_parser as serve_parser

    serve_parser(commands.add_parser("serve", help="OpenAI-compatible HTTP server with continuous batching"))
    return parser


def _load(args):
    from .model import LLM

    return LLM.from_pretrained(
        args.model,
        quant=args.quant,
        device=args.device,
        num_threads=args.threads,
        max_seq_len=args.max_seq_len,
        group_size=args.group_size,
        quiet=args.quiet,
    )


def _sampling(args) -> dict:
    return dict(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                min_p=args.min_p, repetition_penalty=args.repetition_penalty, seed=args.seed)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from .serve import main as serve_main

        return serve_main(args=args)
    try:
        llm = _load(args)
        if args.command == "chat":
            if hasattr(sys.stdin, "reconfigure"):  # bytes that are not UTF-8 become U+FFFD, not an exit
                sys.stdin.reconfigure(errors="replace")
            llm.chat(system_prompt=args.system, **_sampling(args))
        elif args.command == "generate":
            prompt = args.prompt
            if args.chat or args.system:
                prompt = ([{"role": "system", "content": args.system}] if args.system else []) + [
                    {"role": "user", "content": args.prompt}
                ]
            if args.stream:
                for piece in llm.stream(prompt, **_sampling(args)):
                    sys.stdout.write(piece)
                    sys.stdout.flush()
                sys.stdout.write("\n")
            else:
                print(llm.generate(prompt, **_sampling(args)))
            if args.stats:
                print(json.dumps(llm.last_stats), file=sys.stderr)
        else:
            from .bench import format_report, run_benchmark

            result = run_benchmark(llm, prompt_tokens=args.prompt_tokens, tokens=args.tokens, repeats=args.repeats)
            print(json.dumps(result, indent=2) if args.json else format_report(result))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except (ValueError, OSError, RuntimeError) as error:
        print(f"torchburn-llm: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
