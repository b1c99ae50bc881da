"""GPUArray: an n-dimensional array in device memory (host memory on the CPU backend).

Memory always comes from the Rust pool (``gp.memory``) and is returned to it
when the last array using it goes away. Strides are in bytes, as in NumPy.
Operations are queued on the current stream and never synchronize, except
those that return values to the host (``to_numpy``, ``item``, ``repr``,
``bool``), which wait for the current stream.
"""

from __future__ import annotations

import math
import operator
import sys
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from .streams import check_not_capturing, current_stream_handle, on_stream


class Device:
    """Where an array lives: ``Device("cuda", 0)`` or ``Device("cpu", 0)``."""

    __slots__ = ("index", "type")

    def __init__(self, type: str, index: int = 0) -> None:
        self.type = type
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return f"{self.type}:{self.index}" if self.type == "cuda" else "cpu"

    def __repr__(self) -> str:
        return f"Device({self.type!r}, {self.index})"


@lru_cache(maxsize=4096)
def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """C order without gaps; as NumPy, the stride of a dimension of size 1 does not matter."""
    acc = itemsize
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim != 1 and st != acc:
            return False
        acc *= dim
    return True


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    acc = itemsize
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(dim, 1)
    return tuple(reversed(strides))


def normalize_shape(shape: Any) -> tuple[int, ...]:
    if type(shape) is tuple:  # fast path: a tuple of non-negative Python ints
        for d in shape:
            if type(d) is not int or d < 0:
                break
        else:
            return shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimensions are not allowed, got shape {dims}")
    return dims


class GPUArray:
    """An array in pygpukit's memory. Create with ``gp.asarray``, ``gp.zeros``, ``gp.from_numpy``..."""

    # _strides is None for C-contiguous arrays (the strides property computes them).
    __slots__ = ("__weakref__", "_block", "_contig", "_dtype", "_ptr", "_shape", "_size", "_strides")
    __array_priority__ = 100  # NumPy defers binary operators to GPUArray

    _shape: tuple[int, ...]
    _dtype: np.dtype
    _strides: tuple[int, ...] | None
    _ptr: int
    _block: Any
    _size: int
    _contig: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("GPUArray cannot be constructed directly; use gp.empty, gp.zeros, gp.asarray or gp.from_numpy")

    @classmethod
    def _new(cls, shape: tuple[int, ...], dtype: np.dtype, block: Any, ptr: int, strides: tuple[int, ...] | None = None) -> GPUArray:
        self = object.__new__(cls)
        self._shape = shape
        self._dtype = dtype
        size = self._size = math.prod(shape)
        if strides is not None and (size <= 1 or _is_c_contiguous(shape, strides, dtype.itemsize)):
            strides = None
        self._strides = strides
        self._contig = strides is None
        self._block = block
        self._ptr = ptr
        return self

    @staticmethod
    def _empty(shape: tuple[int, ...], dtype: np.dtype, stream: int | None = None) -> GPUArray:
        """A new C-contiguous array from the pool, ordered on ``stream`` (a handle;
        default the current stream): the one way every op allocates its output.
        ``shape`` is a tuple of ints and ``dtype`` a NumPy dtype (no conversion:
        the hot path of every op, hence the direct slot writes)."""
        size = math.prod(shape)
        block = (_runtime._runtime or _runtime.get()).pool.alloc(
            size * dtype.itemsize, current_stream_handle() if stream is None else stream
        )
        self = object.__new__(GPUArray)
        self._shape = shape
        self._dtype = dtype
        self._size = size
        self._strides = None
        self._contig = True
        self._block = block
        self._ptr = block.ptr
        return self

    # -- properties -----------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return self._size

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self._size * self._dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in bytes, as in NumPy."""
        st = self._strides
        return _contiguous_strides(self._shape, self._dtype.itemsize) if st is None else st

    @property
    def data_ptr(self) -> int:
        """Address of the first element (device pointer on CUDA, host pointer on CPU)."""
        return self._ptr

    @property
    def is_contiguous(self) -> bool:
        return self._contig

    @property
    def device(self) -> Device:
        rt = _runtime.get()
        return Device("cuda", rt.device) if rt.backend == "cuda" else Device("cpu", 0)

    def record_stream(self, stream: Any) -> None:
        """Tell the pool that work queued on ``stream`` (a ``gp.Stream``) uses this
        array. Without this, memory freed on the array's own stream may be handed
        out again while that other stream still reads or writes it; with it, the
        pool holds the memory until the other stream's work is done (checked
        with events, no synchronization)."""
        handle = getattr(stream, "handle", None)
        if not isinstance(handle, int):
            raise TypeError(f"record_stream expects a gp.Stream, got {type(stream).__name__}")
        _runtime.get().pool.record_stream(self._block, handle)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of unsized object")
        return self._shape[0]

    # -- host transfer ----------------------------------------------------
    @on_stream
    def to_numpy(self) -> np.ndarray:
        """Copy to a new NumPy array. Waits for the current stream."""
        check_not_capturing("to_numpy()/item()/repr()/bool()")
        src = self if self._contig else self.copy()
        out = np.empty(self._shape, dtype=self._dtype)
        _runtime.get().ops.to_host(out, src, current_stream_handle())
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a GPUArray cannot be viewed by NumPy without a copy; use copy=None or True")
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    @on_stream
    def item(self) -> Any:
        """The single element as a Python scalar. Waits for the current stream."""
        if self._size != 1:
            raise ValueError(f"can only convert an array of size 1 to a Python scalar, got size {self._size}")
        return self.to_numpy().reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self._size != 1:
            raise ValueError("The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()")
        return bool(self.item())

    # -- copies -----------------------------------------------------------
    @on_stream
    def copy(self) -> GPUArray:
        """A contiguous copy (queued on the current stream)."""
        stream = current_stream_handle()
        out = GPUArray._empty(self._shape, self._dtype, stream)
        _runtime.get().ops.cast(self, out, stream)
        return out

    @on_stream
    def astype(self, dtype: Any, copy: bool = True) -> GPUArray:
        """Convert to ``dtype`` with NumPy's casting (values are converted, not reinterpreted)."""
        dt = _dtypes.as_dtype(dtype)
        if dt == self._dtype and not copy:
            return self
        if self._dtype.kind == "c" and dt.kind not in "cb":
            warnings.warn("Casting complex values to real discards the imaginary part", np.exceptions.ComplexWarning, stacklevel=2)
        stream = current_stream_handle()
        out = GPUArray._empty(self._shape, dt, stream)
        _runtime.get().ops.cast(self, out, stream)
        return out

    # -- methods of the front-end modules ---------------------------------
    # Each module that implements a family of operations installs its methods
    # here (it imports this module, never the reverse): pygpukit.ufuncs the
    # operators + - * / // % ** & | ^ << >> == != < <= > >=, their reflected
    # and in-place forms, - + abs ~ and conj; pygpukit.reductions sum ... argmin;
    # pygpukit.linalg @; pygpukit.interop DLPack and __cuda_array_interface__;
    # pygpukit.selection advanced indexing and item assignment. Their
    # signatures for type checkers:
    if TYPE_CHECKING:

        def __add__(self, other: Any) -> GPUArray: ...
        def __radd__(self, other: Any) -> GPUArray: ...
        def __iadd__(self, other: Any) -> GPUArray: ...
        def __sub__(self, other: Any) -> GPUArray: ...
        def __rsub__(self, other: Any) -> GPUArray: ...
        def __isub__(self, other: Any) -> GPUArray: ...
        def __mul__(self, other: Any) -> GPUArray: ...
        def __rmul__(self, other: Any) -> GPUArray: ...
        def __imul__(self, other: Any) -> GPUArray: ...
        def __truediv__(self, other: Any) -> GPUArray: ...
        def __rtruediv__(self, other: Any) -> GPUArray: ...
        def __itruediv__(self, other: Any) -> GPUArray: ...
        def __floordiv__(self, other: Any) -> GPUArray: ...
        def __rfloordiv__(self, other: Any) -> GPUArray: ...
        def __ifloordiv__(self, other: Any) -> GPUArray: ...
        def __mod__(self, other: Any) -> GPUArray: ...
        def __rmod__(self, other: Any) -> GPUArray: ...
        def __imod__(self, other: Any) -> GPUArray: ...
        def __pow__(self, other: Any) -> GPUArray: ...
        def __rpow__(self, other: Any) -> GPUArray: ...
        def __ipow__(self, other: Any) -> GPUArray: ...
        def __and__(self, other: Any) -> GPUArray: ...
        def __rand__(self, other: Any) -> GPUArray: ...
        def __iand__(self, other: Any) -> GPUArray: ...
        def __or__(self, other: Any) -> GPUArray: ...
        def __ror__(self, other: Any) -> GPUArray: ...
        def __ior__(self, other: Any) -> GPUArray: ...
        def __xor__(self, other: Any) -> GPUArray: ...
        def __rxor__(self, other: Any) -> GPUArray: ...
        def __ixor__(self, other: Any) -> GPUArray: ...
        def __lshift__(self, other: Any) -> GPUArray: ...
        def __rlshift__(self, other: Any) -> GPUArray: ...
        def __ilshift__(self, other: Any) -> GPUArray: ...
        def __rshift__(self, other: Any) -> GPUArray: ...
        def __rrshift__(self, other: Any) -> GPUArray: ...
        def __irshift__(self, other: Any) -> GPUArray: ...
        def __eq__(self, other: Any) -> GPUArray: ...  # type: ignore[override]
        def __ne__(self, other: Any) -> GPUArray: ...  # type: ignore[override]
        def __lt__(self, other: Any) -> GPUArray: ...
        def __le__(self, other: Any) -> GPUArray: ...
        def __gt__(self, other: Any) -> GPUArray: ...
        def __ge__(self, other: Any) -> GPUArray: ...
        def __neg__(self) -> GPUArray: ...
        def __pos__(self) -> GPUArray: ...
        def __abs__(self) -> GPUArray: ...
        def __invert__(self) -> GPUArray: ...
        def __divmod__(self, other: Any) -> tuple[GPUArray, GPUArray]: ...
        def __rdivmod__(self, other: Any) -> tuple[GPUArray, GPUArray]: ...
        def conj(self) -> GPUArray: ...
        def __matmul__(self, other: Any) -> GPUArray: ...
        def __rmatmul__(self, other: Any) -> GPUArray: ...
        def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def prod(self, axis: Any = None, dtype: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def max(self, axis: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def min(self, axis: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def all(self, axis: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def any(self, axis: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def var(self, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def std(self, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def argmax(self, axis: int | None = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def argmin(self, axis: int | None = None, keepdims: bool = False, *, stream: Any = None) -> GPUArray: ...
        def __dlpack__(
            self, *, stream: Any = None, max_version: tuple[int, int] | None = None, dl_device: Any = None, copy: bool | None = None
        ) -> Any: ...
        def __dlpack_device__(self) -> tuple[int, int]: ...
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]: ...
        def _get_advanced(self, key: Any) -> GPUArray: ...
        def __setitem__(self, key: Any, value: Any) -> None: ...

    # -- views ------------------------------------------------------------------
    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> GPUArray:
        """A view of the same memory (it keeps the pool block alive)."""
        return GPUArray._new(shape, self._dtype, self._block, self._ptr + offset, strides)

    def __getitem__(self, key: Any) -> GPUArray:
        """Basic indexing (ints, slices with steps, None, ...) returns a view, as in NumPy;
        integer and boolean arrays (advanced indexing) gather a copy."""
        if _indexing.is_advanced(key):
            return self._get_advanced(key)
        shape, strides, offset = _indexing.basic_index(self._shape, self.strides, key)
        return self._view(shape, strides, offset)

    def __array_namespace__(self, /, *, api_version: str | None = None) -> Any:
        """The module of array API functions for GPUArrays: ``pygpukit`` (standard 2023.12)."""
        if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12"):
            raise ValueError(f"pygpukit implements the array API standard 2023.12, not {api_version!r}")
        return sys.modules[__package__]  # the package: imported before any of its modules

    @property
    def real(self) -> GPUArray:
        """The real part: for complex arrays a strided view (writable), else the array itself."""
        if self._dtype.kind != "c":
            return self
        return GPUArray._new(self._shape, _dtypes.complex_part(self._dtype), self._block, self._ptr, self.strides)

    @property
    def imag(self) -> GPUArray:
        """The imaginary part: for complex arrays a strided view (writable), else new zeros."""
        if self._dtype.kind != "c":
            stream = current_stream_handle()
            out = GPUArray._empty(self._shape, self._dtype, stream)
            _runtime.get().ops.fill(out, 0, stream)
            return out
        part = _dtypes.complex_part(self._dtype)
        return GPUArray._new(self._shape, part, self._block, self._ptr + part.itemsize, self.strides)

    @property
    def T(self) -> GPUArray:
        """The transpose (axes reversed), a view."""
        return self.transpose()

    def transpose(self, *axes: Any) -> GPUArray:
        """Permute the axes (default: reverse them); a view."""
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        nd = self.ndim
        perm = tuple(range(nd))[::-1] if not axes else tuple(_normalize_axis(a, nd) for a in axes)
        if sorted(perm) != list(range(nd)):
            raise ValueError(f"axes don't match array: {axes} for an array of {nd} dimensions")
        st = self.strides
        return self._view(tuple(self._shape[i] for i in perm), tuple(st[i] for i in perm))

    def swapaxes(self, axis1: int, axis2: int) -> GPUArray:
        nd = self.ndim
        perm = list(range(nd))
        i, j = _normalize_axis(axis1, nd), _normalize_axis(axis2, nd)
        perm[i], perm[j] = perm[j], perm[i]
        return self.transpose(perm)

    def reshape(self, *shape: Any) -> GPUArray:
        """A view with a new shape when the strides allow it (as NumPy), else a copy.
        One dimension may be -1 (inferred)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        dims = [operator.index(d) for d in shape]
        if dims.count(-1) > 1:
            raise ValueError("can only specify one unknown dimension")
        if any(d < -1 for d in dims):
            raise ValueError(f"negative dimensions not allowed, got {tuple(dims)}")
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or self._size % known:
                raise ValueError(f"cannot reshape array of size {self._size} into shape {tuple(dims)}")
            dims[dims.index(-1)] = self._size // known
        new_shape = tuple(dims)
        if math.prod(new_shape) != self._size:
            raise ValueError(f"cannot reshape array of size {self._size} into shape {new_shape}")
        strides = _indexing.reshape_strides(self._shape, self.strides, new_shape, self.itemsize)
        if strides is None:
            return self.copy().reshape(new_shape)
        return self._view(new_shape, strides)

    def ravel(self) -> GPUArray:
        """A 1-D view when possible, else a 1-D copy."""
        return self.reshape(-1)

    @on_stream
    def flatten(self) -> GPUArray:
        """A 1-D copy, always."""
        return self.copy().reshape(-1)

    def squeeze(self, axis: int | tuple[int, ...] | None = None) -> GPUArray:
        nd = self.ndim
        if axis is None:
            drop = {i for i, d in enumerate(self._shape) if d == 1}
        else:
            drop = {_normalize_axis(a, nd) for a in (axis if isinstance(axis, tuple) else (axis,))}
            for i in drop:
                if self._shape[i] != 1:
                    raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
        st = self.strides
        keep = [i for i in range(nd) if i not in drop]
        return self._view(tuple(self._shape[i] for i in keep), tuple(st[i] for i in keep))

    def __repr__(self) -> str:
        body = np.array2string(self.to_numpy(), separator=", ", prefix="GPUArray(")
        return f"GPUArray({body}, dtype={self._dtype.name}, device={self.device})"

    __str__ = __repr__


def _normalize_axis(axis: Any, ndim: int) -> int:
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"an axis must be an integer, got {type(axis).__name__}") from None
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension {ndim}")
    return a + ndim if a < 0 else a


def from_parts(re: GPUArray, im: GPUArray, dtype: np.dtype) -> GPUArray:
    """A new complex array of ``dtype`` with real part ``re`` and imaginary part ``im``."""
    out = GPUArray._empty(re.shape, dtype)
    out.real[...] = re
    out.imag[...] = im
    return out


def expand_dims(a: GPUArray, axis: int | tuple[int, ...]) -> GPUArray:
    """A view with new axes of length 1 inserted at ``axis``."""
    axes = axis if isinstance(axis, tuple) else (axis,)
    nd = a.ndim + len(axes)
    pos = sorted(_normalize_axis(x, nd) for x in axes)
    if len(set(pos)) != len(pos):
        raise ValueError("repeated axis")
    shape, strides = list(a.shape), list(a.strides)
    for p in pos:
        shape.insert(p, 1)
        strides.insert(p, 0)
    return a._view(tuple(shape), tuple(strides))


def broadcast_to(a: GPUArray, shape: Any) -> GPUArray:
    """A read-only-by-convention view of ``a`` broadcast to ``shape`` (stride 0 along repeated axes)."""
    shape = normalize_shape(shape)
    if len(shape) < a.ndim or np.broadcast_shapes(a.shape, shape) != shape:
        raise ValueError(
            f"operands could not be broadcast together with remapped shapes [original->remapped]: {a.shape} and requested shape {shape}"
        )
    pad = len(shape) - a.ndim
    strides = [0] * pad + [0 if d == 1 and shape[pad + i] != 1 else s for i, (d, s) in enumerate(zip(a.shape, a.strides))]
    return a._view(shape, tuple(strides))


class EvictableArray(GPUArray):
    """A GPUArray whose memory the scheduler may spill to pinned host memory
    while its task is idle, and restores (byte-identical, perhaps at another
    address) on the next use. Made by ``gp.empty/zeros/full/from_numpy/asarray(...,
    evictable=True)`` inside a task. Views of it pin it on the device while they live."""

    __slots__ = ()

    @classmethod
    def _wrap(cls, shape: tuple[int, ...], dtype: np.dtype, buffer: Any) -> EvictableArray:
        self = object.__new__(cls)
        self._shape = shape
        self._dtype = dtype
        self._size = math.prod(shape)
        self._strides = None
        self._contig = True
        self._block = buffer
        return self

    @property
    def _ptr(self) -> int:  # type: ignore[override]
        # Every use of the address goes through the buffer: it restores a spilled buffer.
        return self._block.ptr

    @property
    def resident(self) -> bool:
        """True while the data is in device memory."""
        return bool(self._block.resident)

    def evict(self) -> bool:
        """Spill to pinned host memory now (the task must not be running); False if spilled already."""
        return bool(self._block.evict())

    def record_stream(self, stream: Any) -> None:
        raise TypeError(
            "record_stream does not apply to evictable arrays: spilling synchronizes only their own "
            "stream, so use them on the stream of their task"
        )
