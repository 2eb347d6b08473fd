"""turbo_torch.save / turbo_torch.load in PyTorch's own checkpoint format.

A checkpoint is a stored zip archive ``<name>/data.pkl`` (pickle protocol 2), ``<name>/data/<key>`` (the raw
little-endian bytes of each storage, 64-byte aligned), ``<name>/byteorder`` and ``<name>/version``. Tensors are
pickled as ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict())``
with the storage as persistent id ``('storage', torch.<Type>Storage, key, 'cpu', numel)``.

Loading never executes code from the file: the zip index is checked in C (``src/files/zip_read.c``) and
the pickle is run by a restricted unpickler in C (``src/pyext/eager_pickle.c``) that knows only data opcodes
and the globals of :data:`_ALLOWED` below, which map to the safe functions of this module.

Example::

    >>> import turbo_torch as torch, io
    >>> buffer = io.BytesIO()
    >>> torch.save({"w": torch.ones(2, 3)}, buffer)
    >>> loaded = getattr(torch, "load")(io.BytesIO(buffer.getvalue()))  # the restricted C unpickler
    >>> loaded["w"].shape
    torch.Size([2, 3])
"""
from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from typing import Any, Dict

from torchburn import _C

from . import _types

_STORAGE_DTYPES = {
    "FloatStorage": _types.float32, "DoubleStorage": _types.float64, "HalfStorage": _types.float16,
    "BFloat16Storage": _types.bfloat16, "CharStorage": _types.int8, "ByteStorage": _types.uint8,
    "ShortStorage": _types.int16, "IntStorage": _types.int32, "LongStorage": _types.int64,
    "BoolStorage": _types.bool_,
}
_STORAGE_NAMES = {d: name for name, d in _STORAGE_DTYPES.items()}


class _StorageType:
    """What a ``torch.<Type>Storage`` global resolves to while loading: only its dtype matters."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: _types.dtype) -> None:
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return f"torch.{self.name}"


_STORAGE_TYPES = {name: _StorageType(name, d) for name, d in _STORAGE_DTYPES.items()}


def _rebuild_tensor_v2(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       backward_hooks: Any = None, metadata: Any = None) -> Any:
    from . import Tensor
    if not isinstance(storage, Tensor):
        raise pickle.UnpicklingError("turbo_torch.load: _rebuild_tensor_v2 needs a storage as its first argument, "
                                     f"got {type(storage).__name__}")
    if not isinstance(size, tuple) or not isinstance(stride, tuple) or not isinstance(storage_offset, int):
        raise pickle.UnpicklingError("turbo_torch.load: _rebuild_tensor_v2 needs (offset: int, size: tuple, "
                                     "stride: tuple)")
    if backward_hooks:
        raise pickle.UnpicklingError("turbo_torch.load: tensors with backward hooks cannot be loaded")
    tensor = _C._tt_as_strided(storage, size, stride, storage_offset)
    if requires_grad is True:
        tensor.requires_grad_(True)
    return tensor


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> Any:
    try:
        from .nn import Parameter  # the nn package may not exist yet
        return Parameter(data, requires_grad=bool(requires_grad))
    except ImportError:
        return data.requires_grad_(bool(requires_grad))


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    """How protocol 2 pickles bytes: ``_codecs.encode(str, 'latin1')``; only that is allowed."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("turbo_torch.load: _codecs.encode is allowed only as (str, 'latin1')")
    return text.encode("latin1")


def _device(spec: Any, index: Any = None) -> _types.device:
    return _types.device(spec) if index is None else _types.device(f"{spec}:{index}")


_ALLOWED: Dict[str, Any] = {
    "collections.OrderedDict": collections.OrderedDict,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "_codecs.encode": _codecs_encode,
    "torch.device": _device,
}
_ALLOWED.update({f"torch.{name}": storage_type for name, storage_type in _STORAGE_TYPES.items()})
_ALLOWED.update({f"torch.{d._name}": d for d in _types.ALL_DTYPES})


def _read_all(f: Any) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as handle:
            return handle.read()
    if hasattr(f, "read"):
        return f.read()
    raise TypeError(f"turbo_torch.load: expected a path or a readable file object, got {type(f).__name__}")


def _check_map_location(map_location: Any) -> None:
    if map_location is None or callable(map_location) or isinstance(map_location, dict):
        return
    _types.device(map_location)  # RuntimeError for anything but the CPU


def load(f: Any, map_location: Any = None, pickle_module: Any = None, *, weights_only: Any = True,
         mmap: Any = None, **pickle_load_args: Any) -> Any:
    """Loads a checkpoint written by ``torch.save`` or :func:`save` (tensors, containers, numbers, strings).

    Always loads as PyTorch's ``weights_only=True`` does, whatever ``weights_only`` says: turbo_torch never
    runs code from a file. Anything outside that subset is ``pickle.UnpicklingError``; a malformed archive
    is ``RuntimeError`` naming the problem.
    """
    _check_map_location(map_location)
    data = _read_all(f)
    if data[:4] != b"PK\x03\x04":
        raise RuntimeError("turbo_torch.load: not a zip checkpoint (PyTorch's legacy format and plain pickles "
                           "are not supported; re-save with torch.save's default zip format)")
    buffer = memoryview(data)
    records = {name: (offset, size) for name, offset, size in _C._tt_zip_index(data)}
    pickles = [name for name in records if name.endswith("/data.pkl") and name.count("/") == 1]
    if len(pickles) != 1:
        raise RuntimeError(f"turbo_torch.load: expected one '<archive>/data.pkl' record, found {len(pickles)}")
    prefix = pickles[0][: -len("data.pkl")]

    def record(name: str) -> memoryview:
        if prefix + name not in records:
            raise RuntimeError(f"turbo_torch.load: record '{prefix}{name}' is missing from the archive")
        offset, size = records[prefix + name]
        return buffer[offset: offset + size]

    if prefix + "byteorder" in records and bytes(record("byteorder")) != b"little":
        raise RuntimeError("turbo_torch.load: big-endian checkpoints are not supported")
    storages: Dict[str, Any] = {}

    def persistent_load(pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"turbo_torch.load: unsupported persistent id {pid!r:.100}")
        _, storage_type, key, location, numel = pid
        if not isinstance(storage_type, _StorageType) or not isinstance(key, str) or not isinstance(numel, int):
            raise pickle.UnpicklingError(f"turbo_torch.load: malformed storage id {pid!r:.100}")
        if not isinstance(location, str) or not location.startswith(("cpu", "cuda", "mps")):
            raise pickle.UnpicklingError(f"turbo_torch.load: unknown storage location {location!r:.50}")
        if key in storages:
            cached = storages[key]
            if cached.dtype is not storage_type.dtype:
                raise pickle.UnpicklingError(f"turbo_torch.load: storage '{key}' is used as {cached.dtype} and "
                                             f"{storage_type.dtype}")
            return cached
        if "/" in key or key in ("", ".", ".."):
            raise pickle.UnpicklingError(f"turbo_torch.load: storage key {key!r:.50} is not a record name")
        raw = record("data/" + key)
        expected = numel * storage_type.dtype.itemsize
        if numel < 0 or len(raw) != expected:
            raise RuntimeError(f"turbo_torch.load: storage '{key}' declares {numel} {storage_type.dtype} elements "
                               f"({expected} bytes) but its record has {len(raw)} bytes")
        storages[key] = _C._tt_storage_from_buffer(raw, storage_type.dtype)
        return storages[key]

    return _C._tt_unpickle(record("data.pkl"), _ALLOWED, (collections.OrderedDict,), persistent_load)


# ---- save -----------------------------------------------------------------------------------------------

class _Pickler:
    """Writes the subset of pickle protocol 2 that checkpoints use, in the opcodes torch.save emits."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.memo: Dict[int, int] = {}
        self.keep: list = []  # keeps memoized objects alive so their ids stay unique
        self.storages: Dict[int, tuple] = {}  # storage identity -> (key, tensor)

    def write(self, data: bytes) -> None:
        self.out.write(data)

    def memoize(self, obj: Any) -> None:
        index = len(self.memo)
        self.memo[id(obj)] = index
        self.keep.append(obj)
        self.write(b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index))

    def from_memo(self, obj: Any) -> bool:
        index = self.memo.get(id(obj))
        if index is None:
            return False
        self.write(b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index))
        return True

    def global_(self, module: str, name: str) -> None:
        key = ("global", module, name)
        index = self.memo.get(key)  # type: ignore[call-overload]
        if index is not None:
            self.write(b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index))
            return
        self.write(b"c" + module.encode() + b"\n" + name.encode() + b"\n")
        index = len(self.memo)
        self.memo[key] = index  # type: ignore[index]
        self.write(b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index))

    def dump(self, obj: Any) -> bytes:
        self.write(b"\x80\x02")
        self.save(obj)
        self.write(b".")
        return self.out.getvalue()

    def save(self, obj: Any) -> None:
        from . import Tensor
        if obj is None:
            self.write(b"N")
        elif obj is True or obj is False:
            self.write(b"\x88" if obj else b"\x89")
        elif type(obj) is int:
            self.save_int(obj)
        elif type(obj) is float:
            self.write(b"G" + struct.pack(">d", obj))
        elif type(obj) is str:
            data = obj.encode("utf-8", "surrogatepass")
            self.write(b"X" + struct.pack("<I", len(data)) + data)
        elif isinstance(obj, Tensor):
            self.save_tensor(obj)
        elif isinstance(obj, _types.dtype):
            self.global_("torch", obj._name)
        elif isinstance(obj, _types.device):
            self.global_("torch", "device")
            self.save(str(obj))
            self.write(b"\x85R")
        elif self.from_memo(obj):
            return
        elif type(obj) is bytes:
            self.global_("_codecs", "encode")
            self.save(obj.decode("latin1"))
            self.save("latin1")
            self.write(b"\x86R")
            self.memoize(obj)
        elif type(obj) is tuple or isinstance(obj, tuple) and hasattr(obj, "_fields"):
            if hasattr(obj, "_fields"):
                raise TypeError("turbo_torch.save: namedtuples are not loadable with weights_only=True; "
                                "convert to a tuple or dict")
            self.save_tuple(obj)
        elif type(obj) is list:
            self.write(b"]")
            self.memoize(obj)
            self.save_batches(obj, b"e", lambda item: self.save(item))
        elif type(obj) is dict or type(obj) is collections.OrderedDict:
            self.save_dict(obj)
        elif type(obj) in (set, frozenset):
            self.global_("__builtin__", type(obj).__name__)
            self.write(b"]")
            self.save_batches(list(obj), b"e", lambda item: self.save(item))
            self.write(b"\x85R")
            self.memoize(obj)
        else:
            hint = " (save its state_dict() instead)" if hasattr(obj, "state_dict") else ""
            raise TypeError(f"turbo_torch.save: cannot save a {type(obj).__name__}{hint}; checkpoints hold "
                            "tensors, dicts, lists, tuples, sets, numbers, strings, bytes and None")

    def save_int(self, value: int) -> None:
        if 0 <= value < 256:
            self.write(b"K" + bytes([value]))
        elif 0 <= value < 65536:
            self.write(b"M" + struct.pack("<H", value))
        elif -(1 << 31) <= value < (1 << 31):
            self.write(b"J" + struct.pack("<i", value))
        else:
            data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.write(b"\x8a" + bytes([len(data)]) + data)

    def save_tuple(self, obj: tuple) -> None:
        if len(obj) == 0:
            self.write(b")")
            return
        if len(obj) <= 3:
            for item in obj:
                self.save(item)
            self.write(bytes([0x84 + len(obj)]))
        else:
            self.write(b"(")
            for item in obj:
                self.save(item)
            self.write(b"t")
        self.memoize(obj)

    def save_batches(self, items: list, opcode: bytes, save_one: Any) -> None:
        for start in range(0, len(items), 1000):
            self.write(b"(")
            for item in items[start: start + 1000]:
                save_one(item)
            self.write(opcode)

    def save_dict(self, obj: dict) -> None:
        ordered = type(obj) is collections.OrderedDict
        if ordered:
            self.global_("collections", "OrderedDict")
            self.write(b")R")
        else:
            self.write(b"}")
        self.memoize(obj)

        def save_item(item: tuple) -> None:
            self.save(item[0])
            self.save(item[1])
        self.save_batches(list(obj.items()), b"u", save_item)
        state = getattr(obj, "__dict__", None)
        if ordered and state:
            self.save(dict(state))
            self.write(b"b")

    def save_tensor(self, tensor: Any) -> None:
        if self.from_memo(tensor):
            return
        if tensor.grad_fn is not None:
            raise RuntimeError("turbo_torch.save: cannot save a non-leaf tensor that requires grad; save "
                               "tensor.detach() instead")
        identity, nbytes, offset = _C._tt_storage_info(tensor)
        if identity not in self.storages:
            self.storages[identity] = (str(len(self.storages)), tensor)
        key = self.storages[identity][0]
        self.global_("torch._utils", "_rebuild_tensor_v2")
        self.write(b"((")
        self.save("storage")
        self.global_("torch", _STORAGE_NAMES[tensor.dtype])
        self.save(key)
        self.save("cpu")
        self.save_int(nbytes // tensor.dtype.itemsize)
        self.write(b"tQ")
        self.save_int(offset)
        self.save_tuple(tuple(tensor.shape))
        self.save_tuple(tuple(tensor.stride()))
        self.write(b"\x88" if tensor.requires_grad else b"\x89")
        self.global_("collections", "OrderedDict")
        self.write(b")RtR")
        self.memoize(tensor)


def _archive_name(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        base = os.path.splitext(os.path.basename(os.fspath(f)))[0]
        if base and all(c.isalnum() or c in "_-." for c in base):
            return base
    return "archive"


def _write_aligned(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    """A stored record whose data starts on a 64-byte boundary (padding in a local extra field, as torch)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    header_offset = archive.fp.tell()
    fixed = 30 + len(name.encode()) + 4 + (20 if len(data) > 0xFFFFFFFF else 0)
    padding = (-(header_offset + fixed)) % 64
    info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
    archive.writestr(info, data)


def save(obj: Any, f: Any, pickle_module: Any = None, pickle_protocol: int = 2,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> None:
    """Saves obj (tensors in dicts/lists/tuples, numbers, strings, None) in PyTorch's zip format; the file
    loads in PyTorch with weights_only=True and here with :func:`load`. Views of one storage stay views."""
    pickler = _Pickler()
    pickled = pickler.dump(obj)
    name = _archive_name(f)
    target = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
    try:
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as archive:
            _write_aligned(archive, f"{name}/data.pkl", pickled)
            _write_aligned(archive, f"{name}/.format_version", b"1")
            _write_aligned(archive, f"{name}/.storage_alignment", b"64")
            _write_aligned(archive, f"{name}/byteorder", b"little")
            for key, tensor in pickler.storages.values():
                raw = _C._tt_storage_bytes(tensor)  # whole elements only: the record is numel * itemsize
                _write_aligned(archive, f"{name}/data/{key}", raw[: len(raw) - len(raw) % tensor.dtype.itemsize])
            _write_aligned(archive, f"{name}/version", b"3\n")
    finally:
        if target is not f:
            target.close()


# ---- pickling of tensors (multiprocessing, copy): bytes + dtype + shape, never the file loader ---------

def _tensor_from_state(data: bytes, dtype_name: str, shape: tuple, requires_grad: bool) -> Any:
    flat = _C._tt_storage_from_buffer(data, _types.BY_NAME[dtype_name])
    tensor = flat.reshape(shape) if len(shape) != 1 else flat
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _reduce_tensor(self: Any, protocol: int) -> tuple:
    if self.grad_fn is not None:
        raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
                           "does not support crossing process boundaries.  If you just want to transfer the data, "
                           "call detach() on the tensor before serializing (e.g., putting it on the queue).")
    contiguous = self.detach().contiguous()
    nbytes = contiguous.numel() * self.dtype.itemsize
    raw = _C._tt_storage_bytes(contiguous)
    start = _C._tt_storage_info(contiguous)[2] * self.dtype.itemsize
    return (_tensor_from_state, (raw[start: start + nbytes], self.dtype._name, tuple(self.shape),
                                 bool(self.requires_grad)))


def _install_pickling() -> None:
    from . import Tensor
    Tensor.__reduce_ex__ = _reduce_tensor


# ---- safetensors (the C reader/writer of torchburn.files) ---------------------------------------------

def load_safetensors(filename: Any) -> Dict[str, Any]:
    """name -> turbo_torch tensor for every tensor of a ``.safetensors`` file (validated in C first).
    The tensors are writable copies, like ``safetensors.torch.load_file``'s."""
    from torchburn import files
    return {name: _C._tt_wrap_base(t).clone() for name, t in files.safetensors_load(filename).items()}


def save_safetensors(tensors: Dict[str, Any], filename: Any, metadata: Any = None) -> None:
    """Writes name -> turbo_torch tensor to ``filename`` in the safetensors format (the bytes the
    safetensors package writes); shared or strided tensors are written as contiguous copies."""
    from torchburn import files
    from . import Tensor
    items = {}
    for name, tensor in tensors.items():
        if not isinstance(tensor, Tensor):
            raise TypeError(f"save_safetensors: '{name}' is a {type(tensor).__name__}, not a turbo_torch tensor")
        items[name] = tensor.detach().contiguous()
    files.safetensors_save(filename, items, metadata)
