"""``torchburn.LLM``: run Qwen2/2.5/3, Llama 2/3 and Mistral checkpoints from their Hugging Face folders
on the CPU, with weights quantized to int4/int8 at load (and cached), streaming, chat templates and an
interactive chat loop. The forward pass, the sampler and the generation loop are C (``torchburn._C``).

Example::

    >>> import torchburn as tb
    >>> llm = tb.LLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", quant="int4")   # doctest: +SKIP
    >>> print(llm.generate("Explain quantum superposition in two sentences."))    # doctest: +SKIP
    >>> for piece in llm.stream("Once upon a time in distributed systems:"):       # doctest: +SKIP
    ...     print(piece, end="", flush=True)
    >>> llm.chat(system_prompt="You are a helpful and concise AI assistant.")     # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from .. import _C
from ..tokenizer import Tokenizer
from .chat_template import render_chat, validate_messages
from .hub import ModelNotFoundError, resolve_model_path
from .quant_cache import cache_entry, remove_stale_temp_files

__all__ = ["LLM", "Prompt"]

Message = Mapping[str, Any]
Prompt = Union[str, Sequence[Message]]

QUANTS = ("int4", "int8", "none")
_INT64_MAX = 2**63 - 1
DEVICES = ("auto", "cpu", "gpu")


def _resolve_device(device: str) -> str:
    """'cpu' or 'gpu' for a device= argument: 'auto' (or TORCHBURN_DEVICE for it) takes a usable
    Vulkan GPU when one exists, which excludes CPU-type devices such as lavapipe unless
    TORCHBURN_VULKAN_ALLOW_CPU=1 (tests); 'gpu' demands one and names the reason when there is none."""
    if not isinstance(device, str):
        raise ValueError(f"device must be a str ('auto', 'cpu' or 'gpu'), not {type(device).__name__}")
    requested = device.lower()
    env = os.environ.get("TORCHBURN_DEVICE", "").strip().lower()
    if requested == "auto" and env:
        requested = env
    if requested == "cpu":
        return "cpu"
    from ..gpu import gpu_info

    if requested == "auto":
        return "gpu" if gpu_info()["available"] else "cpu"
    if requested in ("gpu", "cuda", "wgpu", "igpu", "dgpu", "vulkan", "metal"):
        source = f"TORCHBURN_DEVICE={env!r}" if device.lower() == "auto" else f"device={device!r}"
        info = gpu_info()
        if not info["available"]:
            raise ValueError(f"{source}: no usable GPU ({info['reason']}); use device='cpu' or 'auto'")
        return "gpu"
    raise ValueError(f"unknown device {device!r}; expected 'auto', 'cpu' or 'gpu'")


def _check_sampling(max_tokens: Any, temperature: Any, top_p: Any, top_k: Any, min_p: Any,
                    repetition_penalty: Any, seed: Any) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise ValueError(f"max_tokens must be an int, not {type(max_tokens).__name__}")
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if max_tokens > _INT64_MAX:
        raise ValueError(f"max_tokens must be at most 2**63 - 1, got {max_tokens}")
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p),
                        ("repetition_penalty", repetition_penalty)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, not {type(value).__name__}")
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{name} must be finite, got {value}")
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise ValueError(f"top_k must be an int, not {type(top_k).__name__}")
    if not 0 <= top_k <= _INT64_MAX:
        raise ValueError(f"top_k must be >= 0 (0 keeps every token) and at most 2**63 - 1, got {top_k}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be an int or None, not {type(seed).__name__}")


class _StopMatcher:
    """Cuts streamed text at the first stop string, holding back just enough text to see one that
    straddles two pieces."""

    def __init__(self, stop: Optional[Union[str, Sequence[str]]]) -> None:
        if stop is None:
            stops: list[str] = []
        elif isinstance(stop, str):
            stops = [stop]
        else:
            stops = list(stop)
        for s in stops:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty str, got {s!r}")
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.buffer = ""
        self.hit = False

    def feed(self, text: str) -> str:
        """Returns the text that is safe to show; sets ``hit`` when a stop string appeared."""
        if not self.stops:
            return text
        self.buffer += text
        first = min((i for i in (self.buffer.find(s) for s in self.stops) if i >= 0), default=-1)
        if first >= 0:
            out, self.buffer, self.hit = self.buffer[:first], "", True
            return out
        if len(self.buffer) <= self.hold:
            return ""
        cut = len(self.buffer) - self.hold
        out, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return out

    def flush(self) -> str:
        out, self.buffer = self.buffer, ""
        return out


class LLM:
    """A llama-family language model loaded by :meth:`from_pretrained`.

    Attributes:
        tokenizer: the model's :class:`torchburn.Tokenizer` (C implementation of ``tokenizer.json``).
        config: the parsed ``config.json`` (and generation defaults) as a dict.
        model_path: the folder the model was loaded from.
        quant: ``"int4"``, ``"int8"`` or ``"none"``.
        device: always ``"cpu"`` for now.
        last_stats: a dict about the last call (``prompt_tokens``, ``reused_tokens``, ``generated_tokens``,
            ``ttft_s``, ``prefill_tok_s``, ``decode_tok_s``, ``finish_reason`` ``"stop"``/``"length"``...).
        load_stats: ``load_s`` and the quantized-cache state (``"hit"``, ``"written"``, ...).
    """

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("create an LLM with LLM.from_pretrained(model_id_or_path, ...)")

    # ---- loading ----
    @classmethod
    def from_pretrained(
        cls,
        model_id_or_path: Union[str, "os.PathLike[str]"],
        quant: str = "int4",
        device: str = "auto",
        num_threads: Optional[int] = None,
        max_seq_len: Optional[int] = None,
        group_size: int = 64,
        local_files_only: bool = True,
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        quiet: bool = False,
        kv_cache_dtype: str = "float32",
        exact_activations: bool = False,
    ) -> "LLM":
        """Loads a model folder or a Hub repo id from the local Hugging Face cache.

        Args:
            model_id_or_path: a folder with ``config.json``, ``*.safetensors`` and ``tokenizer.json``, or a
                repo id such as ``"Qwen/Qwen2.5-0.5B-Instruct"`` found under ``cache_dir`` / ``HF_HUB_CACHE``
                / ``HF_HOME``.
            quant: ``"int4"`` (grouped, ``group_size`` along K), ``"int8"`` (per row) or ``"none"`` (f32;
                f16/bf16 checkpoints are converted once at load). Every linear layer is quantized, the
                tied LM head included; the result is cached under ``TORCHBURN_CACHE_DIR`` or
                ``~/.cache/torchburn`` and memory-mapped on the next load.
            device: ``"cpu"``, ``"gpu"`` (the Vulkan engine: weights uploaded once and resident, the whole
                forward on the device, sampling on the CPU; an error naming the reason when no usable GPU
                exists) or ``"auto"`` (the GPU when one exists, CPU-type Vulkan devices such as lavapipe
                excluded; ``TORCHBURN_DEVICE`` is honoured). On the GPU the KV cache is float32 and
                int8/int4 weights multiply f32 activations (as ``exact_activations=True``).
            num_threads: sets torchburn's (process-wide) kernel thread count.
            max_seq_len: positions the KV cache may hold (default: ``max_position_embeddings``; the cache
                grows on demand).
            local_files_only: when False and the model is not cached, ``huggingface_hub`` (if installed)
                downloads it; tests never need this.
            quiet: no progress bar or messages.
            kv_cache_dtype: ``"float32"`` or ``"float16"``.
            exact_activations: int4/int8 weights normally multiply activations quantized to int8 in
                blocks of 32 (like llama.cpp's Q8_0) on CPUs with AVX-512 VNNI or AVX2; True keeps
                activations in f32 everywhere (exact W4A32/W8A32, slower).
        """
        start = time.perf_counter()
        if quant not in QUANTS:
            raise ValueError(f"quant must be one of {QUANTS}, got {quant!r}")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size not in (32, 64, 128, 256):
            raise ValueError(f"group_size must be 32, 64, 128 or 256, got {group_size!r}")
        if kv_cache_dtype not in ("float32", "float16"):
            raise ValueError(f"kv_cache_dtype must be 'float32' or 'float16', got {kv_cache_dtype!r}")
        resolved_device = _resolve_device(device)
        if num_threads is not None:
            if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
                raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
            _C.set_num_threads(num_threads)
        path = resolve_model_path(model_id_or_path, cache_dir=cache_dir, local_files_only=local_files_only)
        if not os.path.lexists(path / "tokenizer.json"):  # present but not a file: the C reader names the problem
            raise ModelNotFoundError(f"{str(path)!r} has no tokenizer.json (only Hugging Face 'fast' tokenizers are supported)")
        if not os.path.lexists(path / "model.safetensors") and not os.path.lexists(path / "model.safetensors.index.json"):
            raise ModelNotFoundError(
                f"{str(path)!r} has no model.safetensors or model.safetensors.index.json (only safetensors checkpoints load; "
                "pickled .bin weights are never read)"
            )
        cache_path, cache_key = (None, "")
        if quant != "none":
            cache_path, cache_key = cache_entry(path, quant, group_size)
            if cache_path is not None:
                remove_stale_temp_files(cache_path)
        progress = None if quiet else _progress_bar(f"quantizing to {quant}" if quant != "none" else "loading")
        try:
            handle = _C._LLMModel.load(
                str(path),
                quant=quant,
                group_size=group_size,
                cache_path=None if cache_path is None else str(cache_path),
                cache_key=cache_key,
                progress=progress,
                exact_activations=bool(exact_activations),
            )
        finally:
            if progress is not None:
                progress.close()
        if resolved_device == "gpu":
            if kv_cache_dtype != "float32":
                raise ValueError("kv_cache_dtype='float16' is not supported on the GPU (its KV cache is float32)")
            handle.to_engine("vulkan")
        info = handle.info
        if info["cache"] == "write_failed" and not quiet:
            print(f"torchburn: could not save the quantized cache (every load will quantize again): "
                  f"{info['cache_message']}", file=sys.stderr)
        elif info["cache"] == "rebuilt" and not quiet:
            print(f"torchburn: warning: the quantized cache {info['cache_message']}; quantized again and rewrote it",
                  file=sys.stderr)
        self = object.__new__(cls)
        self._model = handle
        self.config = handle.config
        self.model_path = path
        self.quant = quant
        self.group_size = group_size if quant == "int4" else None
        self.device = resolved_device
        self.tokenizer = Tokenizer.from_pretrained(path)
        self._special_tokens = _special_tokens(path, self.tokenizer)
        if self.tokenizer.id_limit > self.config["vocab_size"]:
            raise ValueError(
                f"the tokenizer uses ids up to {self.tokenizer.id_limit - 1} but the model's vocab_size is "
                f"{self.config['vocab_size']}"
            )
        limit = self.config["max_position_embeddings"] if max_seq_len is None else max_seq_len
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_seq_len must be a positive int, got {max_seq_len!r}")
        self._kv_f16 = kv_cache_dtype == "float16"
        self._session = _C._LLMSession(handle, limit, self._kv_f16)
        self.max_seq_len = limit
        self.stop_token_ids = self._default_stop_ids()
        self.last_stats: dict[str, Any] = {}
        self.load_stats = {"load_s": time.perf_counter() - start, "cache": info["cache"],
                           "cache_path": None if cache_path is None else str(cache_path)}
        return self

    def _default_stop_ids(self) -> list[int]:
        ids: list[int] = []
        for source in (self.config["eos_token_ids"], self.config["generation"]["eos_token_ids"]):
            ids += [i for i in source if i not in ids]
        eos = self.tokenizer.eos_token_id
        if eos is not None and eos not in ids:
            ids.append(eos)
        return ids

    # ---- facts ----
    @property
    def info(self) -> dict[str, Any]:
        """Run format and sizes: ``quant``, ``group_size``, ``parameters``, ``weight_bytes``,
        ``decode_bytes_per_token`` (weights one decode step reads), quantized-cache state."""
        return dict(self._model.info)

    def kv_cache_bytes(self, positions: int) -> int:
        """Bytes the KV cache takes for ``positions`` tokens (it grows on demand, doubling)."""
        c = self.config
        per_position = 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"]
        return per_position * positions * (2 if self._kv_f16 else 4)

    @property
    def chat_template(self) -> Optional[str]:
        return self.tokenizer.chat_template

    def __repr__(self) -> str:
        return (f"<torchburn.LLM {self.config['model_type']} {self.model_path.name!r} quant={self.quant} "
                f"params={self.info['parameters'] / 1e6:.1f}M>")

    # ---- prompts ----
    def apply_chat_template(self, messages: Sequence[Message], add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The text of a chat rendered with the model's template, as ``transformers`` renders it."""
        template = self.tokenizer.chat_template
        if template is None:
            raise ValueError(
                f"{self.model_path.name!r} has no chat template (tokenizer_config.json / chat_template.jinja); "
                "pass a plain string prompt instead"
            )
        return render_chat(template, messages, add_generation_prompt=add_generation_prompt,
                           special_tokens=self._special_tokens, **kwargs)

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids for a raw string (with the tokenizer's special tokens, e.g. a BOS) or a chat (its
        template already holds them)."""
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("the prompt is empty")
            ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        elif isinstance(prompt, (list, tuple)):
            text = self.apply_chat_template(validate_messages(prompt))
            ids = self.tokenizer.encode(text, add_special_tokens=False)
        else:
            raise ValueError(f"prompt must be a str or a list of chat messages, not {type(prompt).__name__}")
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        return ids

    def _sampling_args(self, max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, seed):
        _check_sampling(max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, seed)
        # greedy and seeded calls must not depend on what the session ran before (see docs/llm.md)
        reproducible = temperature == 0 or top_k == 1 or seed is not None
        if seed is None:
            seed = random.SystemRandom().getrandbits(64)
        return dict(max_tokens=max_tokens, temperature=float(temperature), top_k=top_k, top_p=float(top_p),
                    min_p=float(min_p), repetition_penalty=float(repetition_penalty), seed=seed & (2**64 - 1),
                    reproducible=reproducible)

    def _stop_ids(self, stop_token_ids: Optional[Sequence[int]]) -> list[int]:
        if stop_token_ids is None:
            return list(self.stop_token_ids)
        ids = list(stop_token_ids)
        vocab = self.config["vocab_size"]
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise ValueError(f"stop_token_ids must be ints, got {i!r}")
            if not 0 <= i < vocab:
                raise ValueError(f"stop_token_ids: {i} is outside the vocabulary [0, {vocab})")
        return ids

    # ---- generation ----
    def stream(
        self,
        prompt: Prompt,
        max_tokens: int = 128,
        temperature: float = 0.7,
        top_p: float = 0.9,
        top_k: int = 40,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, Sequence[str]]] = None,
        stop_token_ids: Optional[Sequence[int]] = None,
    ) -> Iterator[str]:
        """Yields the generated text piece by piece (never a partial UTF-8 character).

        ``prompt`` is a raw string or a list of chat messages (rendered with the model's chat template).
        Generation stops at an end-of-sequence token (config/generation_config/tokenizer eos, or
        ``stop_token_ids``), at a ``stop`` string (not included in the text), or after ``max_tokens``.
        ``temperature=0`` is greedy; ``seed`` makes sampling reproducible. Stats go to ``last_stats``.
        """
        ids = self.encode_prompt(prompt)
        args = self._sampling_args(max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, seed)
        stops = self._stop_ids(stop_token_ids)
        matcher = _StopMatcher(stop)
        generation = self._session.begin(ids, stop_ids=stops, **args)  # runs the prompt; errors surface here
        return self._stream(generation, set(stops), matcher)

    def _stream(self, generation: Any, stop_set: set, matcher: _StopMatcher) -> Iterator[str]:
        decoder = self.tokenizer.decode_stream(skip_special_tokens=True)
        finish = None
        completed = False
        try:
            while finish is None:
                token, finish = generation.next()
                if token in stop_set:
                    continue
                piece = decoder.step(token)
                if piece:
                    out = matcher.feed(piece)
                    if out:
                        yield out
                    if matcher.hit:
                        finish = "stop"
                        break
            if not matcher.hit:
                tail = matcher.feed(decoder.flush()) + matcher.flush()
                if tail:
                    yield tail
            completed = True
        finally:
            stats = generation.stats
            if matcher.hit:
                stats["finish_reason"] = "stop"
            elif not completed:
                stats["finish_reason"] = "aborted"
            self.last_stats = stats

    def generate(
        self,
        prompt: Prompt,
        max_tokens: int = 128,
        temperature: float = 0.7,
        top_p: float = 0.9,
        top_k: int = 40,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, Sequence[str]]] = None,
        stop_token_ids: Optional[Sequence[int]] = None,
        callback: Optional[Callable[[str], Any]] = None,
    ) -> str:
        """Generates a completion and returns its text (arguments as in :meth:`stream`).

        The whole loop runs in C with the GIL released; once per token it takes the GIL back to
        detokenize, check stop strings, call ``callback(piece)`` (if given; a truthy return stops) and
        notice Ctrl-C (``KeyboardInterrupt`` propagates; the model stays usable).
        """
        ids = self.encode_prompt(prompt)
        args = self._sampling_args(max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, seed)
        stops = self._stop_ids(stop_token_ids)
        stop_set = set(stops)
        matcher = _StopMatcher(stop)
        decoder = self.tokenizer.decode_stream(skip_special_tokens=True)
        pieces: list[str] = []

        def on_token(token: int) -> bool:
            if token in stop_set:
                return False
            piece = decoder.step(token)
            if piece:
                out = matcher.feed(piece)
                if out:
                    pieces.append(out)
                    if callback is not None and callback(out):
                        return True
            return matcher.hit

        try:
            _, stats = self._session.generate(ids, stop_ids=stops, callback=on_token, **args)
        except KeyboardInterrupt:
            self.last_stats = {"finish_reason": "aborted"}
            raise
        if not matcher.hit:
            tail = matcher.feed(decoder.flush()) + matcher.flush()
            if tail:
                pieces.append(tail)
                if callback is not None:
                    callback(tail)
        else:
            stats["finish_reason"] = "stop"
        self.last_stats = stats
        return "".join(pieces)

    def generate_tokens(
        self,
        token_ids: Sequence[int],
        max_tokens: int = 128,
        temperature: float = 0.7,
        top_p: float = 0.9,
        top_k: int = 40,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        stop_token_ids: Optional[Sequence[int]] = None,
    ) -> list[int]:
        """Token-level generation: returns the new token ids (a final stop token included, as
        transformers' ``generate`` does). ``stop_token_ids=[]`` disables stopping on eos."""
        ids = list(token_ids)
        if not ids:
            raise ValueError("token_ids is empty")
        args = self._sampling_args(max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, seed)
        tokens, stats = self._session.generate(ids, stop_ids=self._stop_ids(stop_token_ids), **args)
        self.last_stats = stats
        return tokens

    def logits(self, token_ids: Sequence[int]):
        """Logits for every position of ``token_ids``: a torchburn ``Tensor`` of shape [T, vocab] (f32),
        convertible with ``torch.from_dlpack`` / ``numpy.asarray``. Resets the KV cache to these tokens."""
        ids = list(token_ids)
        if not ids:
            raise ValueError("token_ids is empty")
        if len(ids) > self.max_seq_len:
            raise ValueError(f"{len(ids)} tokens do not fit in the context of {self.max_seq_len} (max_seq_len)")
        return self._session.logits(ids, all=True)

    def reset(self) -> None:
        """Forgets the cached conversation (the next call runs its whole prompt)."""
        self._session.truncate(0)

    # ---- interactive chat ----
    def chat(
        self,
        system_prompt: Optional[str] = None,
        max_tokens: int = 512,
        temperature: float = 0.7,
        top_p: float = 0.9,
        top_k: int = 40,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        seed: Optional[int] = None,
        input_fn: Callable[[str], str] = input,
        output=None,
    ) -> list[dict]:
        """An interactive multi-turn chat on stdin/stdout. The history is kept and the KV cache of the
        shared prefix is reused between turns. ``/reset`` starts over, ``/exit`` (or EOF) quits, Ctrl-C
        interrupts an answer (Ctrl-C at the prompt quits). Returns the conversation."""
        out = output if output is not None else sys.stdout
        if self.tokenizer.chat_template is None:
            raise ValueError(f"{self.model_path.name!r} has no chat template; use generate() with a plain prompt")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"system_prompt must be a str, not {type(system_prompt).__name__}")
        start: list[dict] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        history = list(start)
        interactive = hasattr(sys.stdin, "isatty") and sys.stdin.isatty()
        if interactive:
            print(f"torchburn chat: {self.model_path.name} ({self.quant}). /reset clears the history, /exit quits.",
                  file=out, flush=True)
        while True:
            try:
                line = input_fn(">>> " if interactive else "")
            except EOFError:
                break
            except KeyboardInterrupt:
                print(file=out)
                break
            except UnicodeDecodeError:
                print("(that line is not valid UTF-8; skipped)", file=out, flush=True)
                continue
            text = line.strip()
            if text in ("/exit", "/quit"):
                break
            if text == "/reset":
                history = list(start)
                self.reset()
                print("(history cleared)", file=out, flush=True)
                continue
            if not text:
                continue
            history.append({"role": "user", "content": line})
            pieces: list[str] = []
            try:
                for piece in self.stream(history, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                                         top_k=top_k, min_p=min_p, repetition_penalty=repetition_penalty, seed=seed):
                    pieces.append(piece)
                    print(piece, end="", file=out, flush=True)
            except KeyboardInterrupt:
                print("\n(interrupted)", end="", file=out)
            print(file=out, flush=True)
            history.append({"role": "assistant", "content": "".join(pieces)})
        return history


def _special_tokens(path: Path, tokenizer: Tokenizer) -> dict[str, str]:
    """bos/eos/unk/pad token strings as transformers passes them to chat templates."""
    tokens: dict[str, str] = {}
    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        try:
            data = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
            value = data.get(name) if isinstance(data, dict) else None
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                tokens[name] = value
    for name, token_id in (("bos_token", tokenizer.bos_token_id), ("eos_token", tokenizer.eos_token_id)):
        if name not in tokens and token_id is not None:
            text = tokenizer.id_to_token(token_id)
            if text is not None:
                tokens[name] = text
    return tokens


class _TqdmProgress:
    def __init__(self, description: str) -> None:
        from tqdm import tqdm  # type: ignore

        self.bar = tqdm(total=0, desc=f"torchburn: {description}", unit="weights", unit_scale=True, leave=False)

    def __call__(self, done: int, total: int) -> None:
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def _progress_bar(description: str):
    """A tqdm bar when stderr is a terminal and tqdm is installed, else None."""
    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return None
    try:
        return _TqdmProgress(description)
    except ImportError:
        return None
