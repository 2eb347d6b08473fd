"""LLM inference on the CPU straight from Hugging Face folders: :class:`LLM` (Qwen2/2.5/3, Llama 2/3,
Mistral; int4/int8/f32 weights; streaming; chat templates; interactive chat) and the
``python -m torchburn.llm`` / ``torchburn-llm`` command line (``chat``, ``generate``, ``benchmark``).

Example::

    >>> import torchburn as tb
    >>> llm = tb.LLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", quant="int4")   # doctest: +SKIP
    >>> llm.generate([{"role": "user", "content": "Hi!"}], max_tokens=32)          # doctest: +SKIP
"""
from .hub import ModelNotFoundError, hub_cache_dir, resolve_model_path
from .model import LLM

__all__ = ["LLM", "ModelNotFoundError", "hub_cache_dir", "resolve_model_path"]
