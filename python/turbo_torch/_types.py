"""dtype, Size and device objects of turbo_torch, with PyTorch's names and behaviour."""
from __future__ import annotations

from typing import Any


class dtype:
    """An element type, e.g. ``turbo_torch.float32``. Compare by identity, like torch.dtype."""

    __slots__ = ("_name", "_index", "is_floating_point", "is_signed", "itemsize", "is_complex")

    def __init__(self, name: str, index: int, floating: bool, signed: bool, itemsize: int) -> None:
        self._name = name
        self._index = index
        self.is_floating_point = floating
        self.is_signed = signed
        self.itemsize = itemsize
        self.is_complex = False

    def __repr__(self) -> str:
        return f"torch.{self._name}"  # PyTorch's spelling: printed output matches a torch program

    def __reduce__(self) -> str:
        return self._name

    def to_real(self) -> "dtype":
        return self


# index = tb_dtype numbering of include/torchburn/dtype.h
float32 = dtype("float32", 0, True, True, 4)
float64 = dtype("float64", 1, True, True, 8)
float16 = dtype("float16", 2, True, True, 2)
bfloat16 = dtype("bfloat16", 3, True, True, 2)
int8 = dtype("int8", 4, False, True, 1)
uint8 = dtype("uint8", 5, False, False, 1)
int16 = dtype("int16", 6, False, True, 2)
int32 = dtype("int32", 7, False, True, 4)
int64 = dtype("int64", 8, False, True, 8)
bool_ = dtype("bool", 9, False, False, 1)

ALL_DTYPES = (float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64, bool_)
BY_NAME = {d._name: d for d in ALL_DTYPES}
BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
                "short": int16, "float_": float32})


class Size(tuple):
    """torch.Size: a tuple of ints with ``numel()``."""

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(s) for s in self)}])"

    def __getitem__(self, item: Any) -> Any:
        result = tuple.__getitem__(self, item)
        return Size(result) if isinstance(item, slice) else result

    def __add__(self, other: Any) -> "Size":
        return Size(tuple(self) + tuple(other))


class device:
    """torch.device; only the CPU exists here."""

    __slots__ = ("type", "index")

    def __init__(self, type: Any = "cpu", index: Any = None) -> None:  # noqa: A002
        if isinstance(type, device):
            self.type, self.index = type.type, type.index
            return
        text = str(type)
        if ":" in text:
            text, _, number = text.partition(":")
            index = int(number)
        if text != "cpu":
            raise RuntimeError(f"turbo_torch runs on the CPU only; device '{type}' is not available")
        self.type = "cpu"
        self.index = index

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and other.type == self.type

    def __hash__(self) -> int:
        return hash(self.type)

    def __repr__(self) -> str:
        return f"device(type='{self.type}')"

    def __str__(self) -> str:
        return self.type
