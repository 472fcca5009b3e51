"""The packed GEMM weights and their layout text, below both the op module
(gemm.py) and the torch operators (_torch.py): the operators rebuild a
`PackedWeights` from their arguments and size the fake pack_b from the layout
without reaching back into gemm.py."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from ._arrays import TORCH, kind_of

_LAYOUT_KIND = {"bf16": "bfloat16", "int8": "int8"}  # first field of a layout text -> element dtype
_PACKERS = {"bfloat16": "pack_b", "int8": "pack_b_int8"}
_LAYOUT_NUMBER = re.compile(r"([a-z]+)([0-9]+)")
OUT_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True, kw_only=True, eq=False)
class PackedWeights:
    """A [K, N] weight matrix packed for one variant's GEMM micro-kernel."""

    dtype: str  # "bfloat16" or "int8"
    k: int
    n: int
    variant: str  # the variant that packed it ("" when unknown: built from torch.ops arguments)
    layout: str  # e.g. "bf16:nr16:kg2:kpad2:le"; any variant reporting it can use the data
    data: Any  # the bytes: a numpy uint8 array or a torch uint8 tensor, packed_nbytes(layout, k, n) long
    _numpy_address: int = field(default=0, init=False, repr=False)  # cached: ndarray.ctypes.data is slow

    @functools.cached_property
    def memo_key(self) -> tuple[str, int, int, str]:
        """What a remembered product keys these weights by, beside the bytes (`data`): one attribute read."""
        return (self.dtype, self.k, self.n, self.layout)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    @property
    def ptr(self) -> int:
        """Address of the bytes, read when asked: torch.compile may build a
        PackedWeights whose tensor only exists when the graph runs."""
        if kind_of(self.data) == TORCH:
            return int(self.data.data_ptr())
        if not self._numpy_address:
            object.__setattr__(self, "_numpy_address", int(self.data.ctypes.data))
        return self._numpy_address

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) if hasattr(self.data, "nbytes") else int(self.data.numel())

    def __repr__(self) -> str:
        return f"PackedWeights(dtype={self.dtype}, shape=({self.k}, {self.n}), variant={self.variant}, layout={self.layout})"


@functools.lru_cache(maxsize=32)
def layout_fields(layout: str) -> tuple[str, int, int, int, bool]:
    """(dtype, nr, kpad, element bytes, column sums) of a layout text like
    "int8:nr16:kg4:kpad4:colsum:le" (cpukern_gemm_layout, csrc gemm.h)."""
    kind, *rest = layout.split(":")
    numbers = {m[1]: int(m[2]) for m in map(_LAYOUT_NUMBER.fullmatch, rest) if m}
    dtype = _LAYOUT_KIND.get(kind)
    if dtype is None or "nr" not in numbers or "kpad" not in numbers:
        raise ValueError(f"layout: {layout!r} is not a cpukern packed layout (like 'bf16:nr16:kg2:kpad2:le')")
    return dtype, numbers["nr"], numbers["kpad"], 2 if dtype == "bfloat16" else 1, "colsum" in rest


def packed_nbytes(layout: str, k: Any, n: Any) -> Any:
    """Bytes of [k, n] weights packed in `layout`: N in panels of nr columns, K
    padded to kpad, int32 column sums after the panels when the layout says so
    (csrc gemm.h Layout::bytes). k and n may be torch SymInts (fake tensors)."""
    _, nr, kpad, elem, colsum = layout_fields(layout)
    padded_n = (n + nr - 1) // nr * nr
    padded_k = (k + kpad - 1) // kpad * kpad
    return padded_n * padded_k * elem + (padded_n * 4 if colsum else 0)


def dtype_name(dtype: Any) -> str:
    """`out_dtype` (a name, torch or numpy dtype) as "float32" / "bfloat16"."""
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.startswith("torch"):
        name = str(dtype).removeprefix("torch.")
    else:
        import numpy as np

        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"out_dtype: expected float32 or bfloat16, got {dtype!r}") from None
    if name not in OUT_DTYPES:
        raise TypeError(f"out_dtype: expected float32 or bfloat16, got {dtype!r}")
    return name


def b_type_error(b: Any, dtype: str) -> TypeError:
    """The error for a `b` that is neither packed weights nor (bf16) a plain matrix."""
    what = "a [K, N] bfloat16 matrix or " if dtype == "bfloat16" else ""
    return TypeError(f"b: expected {what}the weights packed by cpukern.{_PACKERS[dtype]}(), got {type(b).__name__}")
