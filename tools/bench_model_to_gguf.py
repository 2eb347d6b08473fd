#!/usr/bin/env python3
"""Converts the random bench model (tools/make_bench_model.py) to GGUF for llama.cpp's llama-server, the peer
of `python -m torchburn.bench serve`. Runs llama.cpp's own convert_hf_to_gguf.py; the only change is that the
bench model's small trained tokenizer, which that script cannot recognize by hash, is declared to use the
Qwen2 pre-tokenizer (the benchmark sends token ids, so the tokenizer does not affect the measurement).

    python tools/bench_model_to_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf     (f16; then llama-quantize Q4_0)
Needs `pip install gguf sentencepiece` and torch.
"""
import runpy
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    llama_cpp, model, out = sys.argv[1:]
    sys.path.insert(0, llama_cpp)
    from conversion import base  # llama.cpp's converter package

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, "--outtype", "f16"]
    runpy.run_path(str(Path(llama_cpp) / "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
