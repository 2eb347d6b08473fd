"""HuggingFace ``tokenizer.json`` tokenizers, implemented in C (no ``tokenizers`` needed at run time).

Loads the BPE tokenizers of Qwen2/2.5/3, Llama 2/3, Mistral and TinyLlama checkpoints (byte-level
BPE or Metaspace + byte-fallback BPE, with their normalizers, pre-tokenizer regexes, added/special
tokens, post-processor and decoder) and produces exactly the ids the ``tokenizers`` package does.

Example::

    >>> from torchburn import Tokenizer
    >>> tok = Tokenizer.from_pretrained("path/to/Qwen2.5-0.5B-Instruct")   # doctest: +SKIP
    >>> ids = tok.encode("Hello world")                                    # doctest: +SKIP
    >>> tok.decode(ids)                                                    # doctest: +SKIP
    'Hello world'
    >>> stream = tok.decode_stream()                                       # doctest: +SKIP
    >>> "".join(piece for i in ids if (piece := stream.step(i)))           # doctest: +SKIP
    'Hello world'
"""
from __future__ import annotations

import os
from typing import Iterable, Optional, Union

from . import _C

__all__ = ["Tokenizer", "DecodeStream"]

PathLike = Union[str, "os.PathLike[str]"]


class DecodeStream:
    """Incremental detokenizer for generation.

    ``step(id)`` returns the new text, or ``None`` while the text so far ends inside a character (for
    example after the first of three byte-fallback tokens ``<0xE2><0x82><0xAC>``). It never returns a
    partial UTF-8 character; results match ``tokenizers.decoders.DecodeStream``. ``flush()`` returns
    whatever is still held back (incomplete characters as U+FFFD) and resets the stream.
    """

    __slots__ = ("_stream",)

    def __init__(self, stream: "_C._DecodeStream") -> None:
        self._stream = stream

    def step(self, token_id: int) -> Optional[str]:
        return self._stream.step(int(token_id))

    def flush(self) -> str:
        return self._stream.flush()


class Tokenizer:
    """A tokenizer loaded from ``tokenizer.json`` (plus ``tokenizer_config.json`` when present).

    Use :meth:`from_file` or :meth:`from_pretrained`; the constructor is internal.

    Attributes:
        chat_template: the Jinja chat template (from ``chat_template.jinja`` or
            ``tokenizer_config.json``), or ``None``.
    """

    __slots__ = ("_tok", "chat_template", "name_or_path")

    def __init__(self, handle: "_C._Tokenizer", name_or_path: Optional[str] = None) -> None:
        self._tok = handle
        self.chat_template: Optional[str] = handle.chat_template
        self.name_or_path = name_or_path

    # ---- loading ----
    @classmethod
    def from_file(cls, path: PathLike, config_path: Optional[PathLike] = None) -> "Tokenizer":
        """Loads a ``tokenizer.json`` file.

        ``config_path`` may name a ``tokenizer_config.json`` for the bos/eos tokens and the chat
        template. Raises ``OSError`` for unreadable files, ``ValueError`` for malformed ones and
        ``RuntimeError`` for components this implementation does not support (the message names them).
        """
        path = os.fspath(path)
        config = os.fspath(config_path) if config_path is not None else None
        return cls(_C._Tokenizer.from_file(path, config), path)

    @classmethod
    def from_pretrained(cls, directory: PathLike) -> "Tokenizer":
        """Loads ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja`` from a
        local model directory (a Hugging Face snapshot folder)."""
        directory = os.fspath(directory)
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"tokenizer directory {directory!r} does not exist")
        if not os.path.lexists(os.path.join(directory, "tokenizer.json")):
            raise FileNotFoundError(
                f"{directory!r} has no tokenizer.json (only HF 'fast' tokenizer files are supported)"
            )
        return cls(_C._Tokenizer.from_directory(directory), directory)

    @classmethod
    def from_str(cls, json: str, config_json: Optional[str] = None) -> "Tokenizer":
        """Loads a tokenizer from the text of a ``tokenizer.json`` (and optionally its config)."""
        return cls(_C._Tokenizer.from_str(json, config_json))

    # ---- encoding / decoding ----
    def encode(self, text: Union[str, bytes], add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``, identical to ``tokenizers.Tokenizer.encode(text).ids``.

        ``bytes`` are accepted too; invalid UTF-8 is replaced by U+FFFD first (like
        ``bytes.decode("utf-8", "replace")``). ``add_special_tokens`` applies the post-processor
        (for example Llama's leading BOS).
        """
        return self._tok.encode(text, add_special_tokens)

    def encode_batch(self, texts: Iterable[Union[str, bytes]], add_special_tokens: bool = True) -> list[list[int]]:
        """``encode`` over several texts."""
        return [self._tok.encode(t, add_special_tokens) for t in texts]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``; unknown ids are skipped. Note the default differs from the
        ``tokenizers`` package (which skips special tokens by default) and matches transformers."""
        if not isinstance(ids, (list, tuple)):
            ids = list(ids)
        return self._tok.decode(ids, skip_special_tokens)

    def decode_stream(self, skip_special_tokens: bool = False) -> DecodeStream:
        """A :class:`DecodeStream` for printing tokens as they are generated."""
        return DecodeStream(self._tok.decode_stream(skip_special_tokens))

    # ---- vocabulary ----
    @property
    def vocab_size(self) -> int:
        """Number of distinct tokens, added tokens included (``get_vocab_size(True)``)."""
        return self._tok.vocab_size

    @property
    def id_limit(self) -> int:
        """One past the largest token id (rows an embedding table needs at least)."""
        return self._tok.id_limit

    def __len__(self) -> int:
        return self._tok.vocab_size

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> Optional[str]:
        return self._tok.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes ``token_id`` adds to a decoded text in the middle of it: the decoder chain on that token
        alone, without start-of-text rules, keeping a partial UTF-8 character as raw bytes (constrained
        generation reads these). Empty for an unknown id.

        >>> tok.token_bytes(tok.token_to_id("Ġ{"))  # doctest: +SKIP
        b' {'
        """
        return self._tok.token_bytes(token_id)

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special added token (dropped by ``skip_special_tokens``)."""
        return self._tok.is_special(token_id)

    @property
    def bos_token_id(self) -> Optional[int]:
        """The id of ``bos_token`` from ``tokenizer_config.json``, or ``None``."""
        return self._tok.bos_token_id

    @property
    def eos_token_id(self) -> Optional[int]:
        """The id of ``eos_token`` from ``tokenizer_config.json``, or ``None``."""
        return self._tok.eos_token_id

    def __repr__(self) -> str:
        where = f" {self.name_or_path!r}" if self.name_or_path else ""
        return f"<torchburn.Tokenizer{where} vocab_size={self.vocab_size}>"
