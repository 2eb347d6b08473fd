"""Model files: safetensors load/save, HuggingFace checkpoint folders and ``config.json``.

Everything is parsed and validated by torchburn's C reader (no pickle, no PyTorch needed): a malformed
or hostile file raises :class:`ValueError` naming the file, the tensor and the broken rule; a missing
file raises :class:`FileNotFoundError`. Loaded tensors are read-only views of the memory-mapped file
(zero copy); convert them with ``torch.from_dlpack(t)`` or ``numpy.asarray(t)``.

Example::

    >>> import numpy as np, tempfile, os, torchburn
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> torchburn.safetensors_save(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    >>> t = torchburn.safetensors_load(path)["w"]
    >>> t.shape, np.asarray(t).tolist()
    ((2, 3), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, Union

from . import _C

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "safetensors_load",
    "safetensors_save",
    "safetensors_metadata",
    "safetensors_header",
    "load_config",
    "parse_config",
    "json_parse",
    "Checkpoint",
    "TensorInfo",
]

# safetensors dtypes that torchburn tensors cannot hold, by torch / numpy dtype name. They are written
# from (and read back into) raw bytes.
_RAW_FROM_TORCH = {
    "torch.float8_e4m3fn": "F8_E4M3",
    "torch.float8_e5m2": "F8_E5M2",
    "torch.float8_e8m0fnu": "F8_E8M0",
    "torch.uint16": "U16",
    "torch.uint32": "U32",
    "torch.uint64": "U64",
    "torch.complex64": "C64",
}
_RAW_FROM_NUMPY = {"uint16": "U16", "uint32": "U32", "uint64": "U64", "complex64": "C64"}
_TORCH_FROM_SAFETENSORS = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "C64": "complex64",
}
_NUMPY_FROM_SAFETENSORS = {
    "F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32", "I16": "int16",
    "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "C64": "complex64",
}


_TORCHBURN_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"})


class TensorInfo(NamedTuple):
    """Where a tensor lives: its safetensors dtype ("BF16"), shape, file, and byte range in the data
    section of that file."""

    dtype: str
    shape: tuple[int, ...]
    file: str
    data_offset: int
    nbytes: int


def safetensors_load(path: PathLike, framework: str = "torchburn") -> dict[str, Any]:
    """Loads every tensor of a ``.safetensors`` file, validating the whole file first.

    ``framework`` picks the result type: ``"torchburn"`` (read-only zero-copy :class:`torchburn.Tensor`
    views of the mapped file), ``"pt"`` (torch tensors) or ``"np"`` (numpy arrays). Float8, unsigned
    16/32/64-bit and complex dtypes cannot be held by torchburn tensors: loading them as ``"torchburn"``
    raises :class:`TypeError` naming the tensor; ``"pt"`` (and ``"np"`` where numpy has the type) read them
    as copy-on-write memory maps.

    Example::

        >>> tensors = safetensors_load("model.safetensors")            # doctest: +SKIP
        >>> import torch; w = torch.from_dlpack(tensors["lm_head.weight"])  # doctest: +SKIP
    """
    path = os.fspath(path)
    if framework not in ("torchburn", "pt", "np"):
        raise ValueError(f"framework must be 'torchburn', 'pt' or 'np', got {framework!r}")
    if framework == "torchburn":
        return _C.safetensors_load(path)
    entries, _ = _C.safetensors_header(path)
    # zero copy through torchburn tensors when it can hold every dtype, else copy-on-write memory maps
    tensors = _C.safetensors_load(path) if all(e[1] in _TORCHBURN_DTYPES for e in entries) else None
    result: dict[str, Any] = {}
    data_start = None
    for name, dtype, shape, offset, nbytes in entries:
        if tensors is not None and framework == "pt":
            import torch

            result[name] = torch.from_dlpack(tensors[name])
        elif tensors is not None and dtype != "BF16":
            import numpy as np

            result[name] = np.asarray(tensors[name])
        else:
            if data_start is None:
                with open(path, "rb") as f:
                    data_start = 8 + int.from_bytes(f.read(8), "little")
            result[name] = _load_raw(path, data_start + offset, nbytes, dtype, shape, framework)
    return result


def _load_raw(path: str, start: int, nbytes: int, dtype: str, shape: tuple[int, ...], framework: str) -> Any:
    """A copy-on-write memory map of one tensor's bytes, viewed as its dtype (header already validated)."""
    import numpy as np

    if framework == "pt":
        import torch

        torch_dtype = getattr(torch, _TORCH_FROM_SAFETENSORS[dtype])
        if nbytes == 0:
            return torch.empty(shape, dtype=torch_dtype)
        raw = np.memmap(path, dtype=np.uint8, mode="c", offset=start, shape=(nbytes,))
        return torch.from_numpy(raw).view(torch_dtype).reshape(shape)
    if dtype not in _NUMPY_FROM_SAFETENSORS:
        raise TypeError(f"{path}: tensor dtype {dtype} has no numpy equivalent; load it with framework='pt'")
    if nbytes == 0:
        return np.empty(shape, dtype=_NUMPY_FROM_SAFETENSORS[dtype])
    raw = np.memmap(path, dtype=np.uint8, mode="c", offset=start, shape=(nbytes,))
    return raw.view(_NUMPY_FROM_SAFETENSORS[dtype]).reshape(shape)


def _save_item(name: Any, value: Any) -> tuple:
    if not isinstance(name, str):
        raise TypeError(f"tensor names must be str, got {type(name).__name__}")
    if isinstance(value, _C.Tensor):
        return (name, value)
    module = type(value).__module__
    if module.startswith("torch"):
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        raw = _RAW_FROM_TORCH.get(str(tensor.dtype))
        if raw is not None:
            import torch

            data = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
            return (name, data, raw, tuple(tensor.shape))
        return (name, tensor)
    if module == "numpy":
        import numpy as np

        array = np.asarray(value)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        raw = _RAW_FROM_NUMPY.get(array.dtype.name)
        if raw is not None:
            return (name, np.ascontiguousarray(array).reshape(-1).view(np.uint8), raw, array.shape)
        return (name, np.ascontiguousarray(array))
    return (name, value)


def safetensors_save(path: PathLike, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``tensors`` (name -> torch tensor, numpy array or :class:`torchburn.Tensor`) to ``path``.

    The bytes are identical to what the ``safetensors`` package writes for the same input (its layout:
    tensors sorted by dtype then name, compact header padded to 8 bytes), except that with two or more
    ``metadata`` entries the package orders them by hash while we keep the given order. The file is
    written under a temporary name and renamed, so a failure never leaves a partial file.

    Example::

        >>> safetensors_save("out.safetensors", {"w": torch.ones(2, 2)}, metadata={"format": "pt"})  # doctest: +SKIP
    """
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a mapping of name -> tensor, got {type(tensors).__name__}")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a mapping of str -> str, got {type(metadata).__name__}")
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"metadata keys and values must be str, got {key!r}: {value!r}")
        metadata = dict(metadata)
    items = [_save_item(name, value) for name, value in tensors.items()]
    _C.safetensors_save(os.fspath(path), items, metadata)


def safetensors_metadata(path: PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (``{}`` when it has none), after validating it."""
    return _C.safetensors_header(os.fspath(path))[1]


def safetensors_header(path: PathLike) -> dict[str, TensorInfo]:
    """The validated header of a safetensors file: name -> :class:`TensorInfo`, in file order."""
    path = os.fspath(path)
    entries, _ = _C.safetensors_header(path)
    return {name: TensorInfo(dtype, shape, path, offset, nbytes) for name, dtype, shape, offset, nbytes in entries}


def load_config(path: PathLike) -> dict[str, Any]:
    """Parses a model's ``config.json`` (``path`` is the model folder or the file itself), plus its
    ``generation_config.json`` when present, into a plain dict.

    Supported ``model_type``: llama, mistral, qwen2, qwen3 (others raise :class:`ValueError` naming them).
    Missing fields get transformers' defaults for the family; ``head_dim`` defaults to
    ``hidden_size // num_attention_heads``; ``rope`` holds ``type`` (default, linear, llama3, yarn),
    ``theta`` and the scaling fields; ``eos_token_id`` is always a list; ``generation`` holds the sampling
    defaults, with ``generation["explicit"]`` naming the fields the file set.

    Example::

        >>> cfg = load_config("Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
        >>> cfg["num_key_value_heads"], cfg["rope"]["theta"]  # doctest: +SKIP
        (2, 1000000.0)
    """
    return _C.hf_config_load(os.fspath(path))


def parse_config(text: str | bytes, source_name: str = "config.json") -> dict[str, Any]:
    """Like :func:`load_config` for ``config.json`` text already in memory (no generation config)."""
    return _C.hf_config_parse(text, source_name)


def json_parse(text: str | bytes, max_bytes: int = 0, max_depth: int = 0) -> Any:
    """Parses JSON with torchburn's strict reader (RFC 8259: UTF-8 validated, duplicate keys and lone
    surrogates rejected, integers that fit int64 kept exact). ``max_bytes`` / ``max_depth`` of 0 mean
    the defaults (64 MiB, 128 levels). Raises :class:`ValueError` with line and column on bad input."""
    return _C.json_parse(text, max_bytes, max_depth)


class Checkpoint(Mapping):
    """A HuggingFace checkpoint: a folder with ``model.safetensors.index.json`` (sharded) or
    ``model.safetensors``, an index file, or a single ``.safetensors`` file.

    Every shard the index names is validated when the checkpoint opens. Tensors are looked up by name
    across shards and returned as read-only zero-copy :class:`torchburn.Tensor` views; they stay valid
    after :meth:`close`.

    Example::

        >>> with Checkpoint("Llama-3.2-1B") as ckpt:                      # doctest: +SKIP
        ...     w = ckpt["model.embed_tokens.weight"]
        ...     ckpt.info("lm_head.weight").dtype
        'BF16'
    """

    def __init__(self, path: PathLike) -> None:
        self.path = os.fspath(path)
        self._handle = _C.checkpoint_open(self.path)
        self._names = _C.checkpoint_names(self._handle)
        self._name_set = frozenset(self._names)

    def __getitem__(self, name: str) -> Any:
        return _C.checkpoint_get(self._handle, name)

    def __contains__(self, name: object) -> bool:
        return name in self._name_set

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def info(self, name: str) -> TensorInfo:
        """The dtype, shape, shard file and byte range of tensor ``name`` (KeyError when absent)."""
        dtype, shape, file, offset, nbytes = _C.checkpoint_info(self._handle, name)
        return TensorInfo(dtype, shape, file, offset, nbytes)

    @property
    def shards(self) -> list[str]:
        """Paths of the safetensors files, in the order the index first names them."""
        return _C.checkpoint_shards(self._handle)

    def close(self) -> None:
        """Releases the handle (tensors already taken stay valid)."""
        _C.checkpoint_close(self._handle)

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, {len(self._names)} tensors)"
