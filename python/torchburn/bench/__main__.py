"""Entry point: python -m torchburn.bench {kernels,quant,tokenizer,compile,eager,gpu,serve} [options]."""
from __future__ import annotations

import argparse
import importlib
import sys

SUITES = {
    "kernels": ("torchburn.bench.kernels", "main"),
    "quant": ("torchburn.bench_quant", "run_quant_benchmark"),
    "tokenizer": ("torchburn.bench_tokenizer", "run_tokenizer_benchmark"),
    "compile": ("torchburn.bench.compile", "main"),
    "eager": ("torchburn.bench.eager", "main"),
    "gpu": ("torchburn.bench.gpu", "main"),
    "serve": ("torchburn.bench.serve", "main"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUITES:  # the suite parses its own options (and its own --help)
        module_name, function = SUITES[argv[0]]
        return getattr(importlib.import_module(module_name), function)(argv[1:]) or 0
    parser = argparse.ArgumentParser(
        prog="python -m torchburn.bench",
        description="Benchmarks of torchburn side by side with its peers (medians and ratios, same process).",
    )
    parser.add_argument("suite", choices=sorted(SUITES), help="which benchmark suite to run")
    args, rest = parser.parse_known_args(argv)
    module_name, function = SUITES[args.suite]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        print(f"the '{args.suite}' suite is not available: {error}", file=sys.stderr)
        return 2
    return getattr(module, function)(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
