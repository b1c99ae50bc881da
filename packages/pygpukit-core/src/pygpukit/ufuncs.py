"""Elementwise functions with NumPy's semantics: ``gp.exp``, ``gp.add``, ``gp.where``...

Every function is a :class:`Ufunc`: a CUDA functor (kernels/include/pgk/math.cuh)
plus the NumPy ufunc whose type resolution it follows, so result dtypes are
NumPy's (bfloat16 and float8 follow ml_dtypes' promotion, then the same rule).
Inputs broadcast; Python scalars are weak (``int8_array + 1`` stays int8).
``out=`` writes into an existing array with the ``same_kind`` casting rule (that
is what ``a += b`` uses). A result takes the memory order of its inputs when
they share a dense layout (``gp.exp(a.T)`` is a transposed array, as in NumPy),
so that such inputs run at the contiguous speed.

Every call form (``a + b``, ``gp.add(a, b)``, ``out=``, ``a += b``, a Python
scalar operand, the unary operators) first tries one fast path: operands that
are C-contiguous, of one shape and 16-byte aligned (as pool blocks are) go
straight to the backend's contiguous kernels after two dict lookups (the
loop's dtypes, then the kernel); anything else takes ``apply``, the general path.

Differences from NumPy, because raising them would need the data on the host:
integer division and remainder by zero give 0, and an integer raised to a
negative integer power from an array gives 0 (1 or -1 for bases 1 and -1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from ._backend import cpu_functors as _cpu
from ._loops import COMPARISONS, SCALAR_TYPES, fits_out, overlaps, pairs, scalars, singles
from ._loops import loop as _loop
from .array import GPUArray
from .creation import asarray
from .streams import Stream, current_stream_handle, on_stream

_WEAK = (int, float, complex)


# The ufuncs with complex kernels (NumPy defines a few more: the ordering ones,
# which the array API leaves undefined for complex numbers).
_COMPLEX_UFUNCS = {
    "add", "subtract", "multiply", "divide", "power", "negative", "positive", "square", "reciprocal", "sqrt", "exp",
    "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "sinh", "cosh", "tanh", "abs", "sign",
    "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh",
    "conjugate", "equal", "not_equal", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_xor",
    "logical_not", "where",
}  # fmt: skip


class Ufunc:
    """An elementwise function: ``f(x1, ..., out=None)``. ``nin`` operands
    (GPUArrays, NumPy arrays or scalars) broadcast together."""

    def __init__(self, name: str, functor: str, nin: int, resolver: np.ufunc, cpu: Callable[..., Any] | None, doc: str) -> None:
        self.__name__ = self.name = name
        self.functor = functor
        self.nin = nin
        self.resolver = resolver
        self.cpu: Callable[..., Any] = cpu if cpu is not None else resolver
        self.__doc__ = doc
        self.complex = name in _COMPLEX_UFUNCS  # it has complex kernels
        # f(x, out=None) / f(x, y, out=None, method=True): the body of every call
        # form, and GPUArray's operator method itself (_unary_call, _binary_call)
        self._call: Callable[..., Any] | None = _unary_call(self) if nin == 1 else _binary_call(self) if nin == 2 else None

    def __repr__(self) -> str:
        return f"<pygpukit ufunc '{self.name}'>"

    def __call__(self, *args: Any, out: GPUArray | None = None, stream: Stream | None = None) -> GPUArray:
        if stream is not None:
            if not isinstance(stream, Stream):
                raise TypeError(f"{self.name}: stream must be a pygpukit.Stream or None, got {type(stream).__name__}")
            with stream:
                return self(*args, out=out)
        if len(args) != self.nin:
            raise TypeError(f"{self.name}() takes {self.nin} positional argument{'s' if self.nin > 1 else ''} but {len(args)} were given")
        if self.nin == 2:
            return self._call(args[0], args[1], out, False)  # type: ignore[misc, no-any-return]
        if self.nin == 1:
            return self._call(args[0], out)  # type: ignore[misc, no-any-return]
        return apply(self, args, out)

    def loop(self, *types: Any) -> tuple[np.dtype, np.dtype]:
        """(compute dtype, result dtype) for operands of these dtypes (Python
        ``int``/``float`` for weak scalars), as NumPy resolves them."""
        return _loop(self, types)


def _dense_order(a: GPUArray) -> list[int] | None:
    """The axes of ``a`` from the largest stride to the smallest when its
    elements fill its memory without gaps in a non-C order, else None."""
    if a._contig or a._size <= 1:
        return None
    order = sorted(range(len(a._shape)), key=lambda i: -a.strides[i])
    expect = a.itemsize
    for i in reversed(order):
        if a._shape[i] != 1 and a.strides[i] != expect:
            return None
        expect *= a._shape[i]
    return order


def _new_result(shape: tuple[int, ...], dt: np.dtype, like: GPUArray | None, stream: int) -> GPUArray:
    """A new array for a result; in ``like``'s memory order when that is dense."""
    order = _dense_order(like) if like is not None and like._shape == shape else None
    if order is None:
        return GPUArray._empty(shape, dt, stream)
    base = GPUArray._empty(tuple(shape[i] for i in order), dt, stream)
    return base.transpose(_indexing.inverse_permutation(order))


def _scalar_value(s: Any, compute: np.dtype) -> Any:
    """A scalar operand as the kernels see it: converted to the loop dtype
    (rounded once, as NumPy does), then to the kernel's compute dtype."""
    kd = _dtypes.compute_dtype(compute)
    with np.errstate(all="ignore"):
        return np.asarray(s).astype(compute).astype(kd).item()


def _fits(s: int, dt: np.dtype) -> bool:
    info = np.iinfo(dt)
    return info.min <= s <= info.max


def apply(uf: Ufunc, args: tuple[Any, ...], out: GPUArray | None = None, params: tuple[Any, ...] = ()) -> GPUArray:
    """Run ``uf`` on ``args`` (and the functor parameters ``params``) into ``out`` or a
    new array: any operands (arrays of any layout, NumPy arrays, scalars)."""
    ops: list[Any] = []
    types: list[Any] = []
    for x in args:
        if type(x) is GPUArray:
            ops.append(x)
            types.append(x._dtype)
        elif type(x) is bool:
            ops.append(x)
            types.append(_dtypes.bool_)
        elif type(x) in _WEAK:
            ops.append(x)
            types.append(type(x))
        elif isinstance(x, np.generic):  # a NumPy scalar has a strong dtype
            ops.append(x.item())
            types.append(_dtypes.as_dtype(x.dtype))
        else:
            try:
                arr = asarray(x)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{uf.name}: unsupported operand of type {type(x).__name__}: {e}") from None
            ops.append(arr)
            types.append(arr._dtype)
    if not any(type(o) is GPUArray for o in ops):
        ops[0] = asarray(np.asarray(ops[0], dtype=types[0] if isinstance(types[0], np.dtype) else None))
        types[0] = ops[0]._dtype
    if uf.name in COMPARISONS and set(types) == {_dtypes.int64, _dtypes.uint64}:
        return _compare_mixed_sign(uf, ops, types, out)
    compute, out_dt = _loop(uf, tuple(types))
    strong = [t for t in types if isinstance(t, np.dtype)]
    int_dt = _dtypes.result_type(*strong) if strong else compute  # what a Python int converts to
    for o in ops:
        if type(o) is int and int_dt.kind in "iu" and not uf.name.startswith("logical_") and not _fits(o, int_dt):  # logical_*: bool loops
            if uf.name not in COMPARISONS:
                raise OverflowError(f"Python integer {o} out of bounds for {int_dt}")
            compute = _dtypes.int64 if -(2**63) <= o < 2**63 and int_dt.kind == "i" else _dtypes.float64
    if uf is power and compute.kind in "iu" and type(ops[1]) is int and ops[1] < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    arrays = [o for o in ops if type(o) is GPUArray]
    shape = arrays[0]._shape
    for a in arrays[1:]:
        if a._shape != shape:
            try:
                shape = np.broadcast_shapes(shape, a._shape)
            except ValueError:
                shapes = " ".join(str(x._shape) for x in arrays)
                raise ValueError(f"operands could not be broadcast together with shapes {shapes}") from None
    stream = current_stream_handle()
    if out is None:
        out = _new_result(shape, out_dt, next((a for a in arrays if a._shape == shape), None), stream)
    else:
        _check_out(uf, out, shape, out_dt)
        # an input that overlaps the output in any other way is read from a copy
        ops = [o.copy() if type(o) is GPUArray and o._block is out._block and not _same_view(o, out) else o for o in ops]
    if out._size:
        ops = [_scalar_value(o, compute) if type(o) is not GPUArray else o for o in ops]
        (_runtime._runtime or _runtime.get()).ops.elementwise(uf, ops, compute, out, params, stream)
    return out


# what a comparison gives when its int64 operand is negative (so below any uint64)
_NEGATIVE_LEFT = {"equal": False, "not_equal": True, "less": True, "less_equal": True, "greater": False, "greater_equal": False}


def _compare_mixed_sign(uf: Ufunc, ops: list[Any], types: list[Any], out: GPUArray | None) -> GPUArray:
    """int64 against uint64, exactly (NumPy 2's rule; a common dtype would be
    float64, which rounds above 2**53): where the int64 side is negative the
    answer is known, elsewhere both sides compare as uint64."""
    i = types.index(_dtypes.int64)
    signed = ops[i] if type(ops[i]) is GPUArray else asarray(np.int64(ops[i]))
    unsigned = list(ops)
    unsigned[i] = signed.astype(_dtypes.uint64)
    known = _NEGATIVE_LEFT[uf.name if i == 0 else _MIRROR[uf.name]]
    return where(less(signed, 0), known, uf(*unsigned), out=out)


_MIRROR = {
    "equal": "equal",
    "not_equal": "not_equal",
    "less": "greater",
    "less_equal": "greater_equal",
    "greater": "less",
    "greater_equal": "less_equal",
}


def _same_view(a: GPUArray, b: GPUArray) -> bool:
    return a._ptr == b._ptr and a._shape == b._shape and a.strides == b.strides


def _check_out(uf: Ufunc, out: Any, shape: tuple[int, ...], out_dt: np.dtype) -> None:
    if not isinstance(out, GPUArray):
        raise TypeError(f"{uf.name}: out must be a GPUArray, got {type(out).__name__}")
    if out._shape != shape:
        raise ValueError(f"non-broadcastable output operand with shape {out._shape} doesn't match the broadcast shape {shape}")
    if out._dtype != out_dt and not np.can_cast(out_dt, out._dtype, "same_kind"):
        raise TypeError(f"Cannot cast ufunc '{uf.name}' output from {out_dt!r} to {out._dtype!r} with casting rule 'same_kind'")


def _binary_call(uf: Ufunc) -> Callable[..., Any]:
    """``uf(x, y, out=None)``; ``method``: as GPUArray's operator (NotImplemented for an
    operand it does not take). Arrays that are C-contiguous, of one shape and
    16-byte aligned take the contiguous kernel right here: this function is the
    operator method itself, so ``x + y`` costs no extra call; a Python scalar
    operand takes ``_scalar_fast``; anything else ``apply``."""

    def call(x: Any, y: Any, out: Any = None, method: bool = True) -> Any:
        if type(x) is GPUArray and type(y) is GPUArray:
            if x._contig and y._contig and x._shape == y._shape and not (x._ptr | y._ptr) & 15:
                pair = pairs[(uf, x._dtype, y._dtype)]
                if pair is not False:
                    compute, out_dt, kernel = pair  # type: ignore[misc]
                    stream = current_stream_handle()
                    if out is None:
                        out = GPUArray._empty(x._shape, out_dt, stream)
                        (_runtime._runtime or _runtime.get()).ops.binary_contig(kernel, x, y, out, stream)
                        return out
                    if fits_out(out, x._shape, out_dt) and not (overlaps(x, out) or overlaps(y, out)):
                        if out._dtype != out_dt:
                            kernel = (_runtime._runtime or _runtime.get()).ops.binary_kernel(uf, compute, x._dtype, y._dtype, out._dtype)
                        (_runtime._runtime or _runtime.get()).ops.binary_contig(kernel, x, y, out, stream)
                        return out
        else:
            r = _scalar_fast(uf, x, y, out)
            if r is not None:
                return r
        if method and not isinstance(y, _OPERAND_TYPES):
            return NotImplemented
        return apply(uf, (x, y), out)

    return call


def _scalar_fast(uf: Ufunc, x: Any, y: Any, out: Any) -> GPUArray | None:
    """``uf(x, y, out=out)`` for a C-contiguous 16-byte aligned array and a Python scalar
    (which rides in the kernel's parameters); None when they do not qualify."""
    if type(x) is GPUArray:
        arr, s, side = x, y, "Right"
    elif type(y) is GPUArray:
        arr, s, side = y, x, "Left"
    else:
        return None
    st = type(s)
    if st not in SCALAR_TYPES or not arr._contig or arr._ptr & 15:
        return None
    plan = scalars[(uf, arr._dtype, st, side)]
    if plan is False:
        return None
    compute, out_dt, convert, kernel = plan  # type: ignore[misc]
    value = convert(s)
    if value is None:
        return None
    stream = current_stream_handle()
    if out is None:
        out = GPUArray._empty(arr._shape, out_dt, stream)
    elif not fits_out(out, arr._shape, out_dt) or overlaps(arr, out):
        return None
    elif out._dtype != out_dt:
        kernel = (_runtime._runtime or _runtime.get()).ops.unary_kernel(uf, side, compute, arr._dtype, out._dtype)
    (_runtime._runtime or _runtime.get()).ops.unary_contig(kernel, arr, out, (value,), stream)
    return out


def _unary_call(uf: Ufunc) -> Callable[..., Any]:
    """``uf(x, out=None)``, and GPUArray's unary operator method itself (- + abs ~):
    a C-contiguous 16-byte aligned array takes the contiguous kernel, anything
    else ``apply``."""

    def call(x: Any, out: Any = None) -> Any:
        if type(x) is GPUArray and x._contig and not x._ptr & 15:
            compute, out_dt, kernel = singles[(uf, x._dtype)]
            stream = current_stream_handle()
            if out is None:
                out = GPUArray._empty(x._shape, out_dt, stream)
                (_runtime._runtime or _runtime.get()).ops.unary_contig(kernel, x, out, (), stream)
                return out
            if fits_out(out, x._shape, out_dt) and not overlaps(x, out):
                if out._dtype != out_dt:
                    kernel = (_runtime._runtime or _runtime.get()).ops.unary_kernel(uf, None, compute, x._dtype, out._dtype)
                (_runtime._runtime or _runtime.get()).ops.unary_contig(kernel, x, out, (), stream)
                return out
        return apply(uf, (x,), out)

    return call


def _u(name: str, functor: str, resolver: np.ufunc, doc: str, cpu: Callable[..., Any] | None = None) -> Ufunc:
    return Ufunc(name, f"pgk::{functor}", 1, resolver, cpu, doc)


def _b(name: str, functor: str, resolver: np.ufunc, doc: str, cpu: Callable[..., Any] | None = None) -> Ufunc:
    return Ufunc(name, f"pgk::{functor}", 2, resolver, cpu, doc)


# -- unary -----------------------------------------------------------------
negative = _u("negative", "Negative", np.negative, "-x, elementwise (integers wrap).")
positive = _u("positive", "Positive", np.positive, "+x, elementwise (a copy).")
abs = _u("abs", "Absolute", np.absolute, "|x|, elementwise (the most negative integer stays negative, as in NumPy).")
absolute = abs
sign = _u("sign", "Sign", np.sign, "-1, 0 or 1 by the sign of x; NaN stays NaN.")
square = _u("square", "Square", np.square, "x * x, elementwise.")
reciprocal = _u("reciprocal", "Reciprocal", np.reciprocal, "1 / x, elementwise (integers: truncated, 0 for 0).", _cpu.int_reciprocal)
sqrt = _u("sqrt", "Sqrt", np.sqrt, "Square root, elementwise.")
rsqrt = _u("rsqrt", "Rsqrt", np.sqrt, "1 / sqrt(x), elementwise.", lambda x: 1 / np.sqrt(x))
cbrt = _u("cbrt", "Cbrt", np.cbrt, "Cube root, elementwise.")
exp = _u("exp", "Exp", np.exp, "e**x, elementwise.")
exp2 = _u("exp2", "Exp2", np.exp2, "2**x, elementwise.")
expm1 = _u("expm1", "Expm1", np.expm1, "exp(x) - 1, accurate near 0.")
log = _u("log", "Log", np.log, "Natural logarithm, elementwise.")
log2 = _u("log2", "Log2", np.log2, "Base-2 logarithm, elementwise.")
log10 = _u("log10", "Log10", np.log10, "Base-10 logarithm, elementwise.")
log1p = _u("log1p", "Log1p", np.log1p, "log(1 + x), accurate near 0.")
sin = _u("sin", "Sin", np.sin, "Sine, elementwise (radians).")
cos = _u("cos", "Cos", np.cos, "Cosine, elementwise (radians).")
tan = _u("tan", "Tan", np.tan, "Tangent, elementwise (radians).")
arcsin = _u("arcsin", "Arcsin", np.arcsin, "Inverse sine, elementwise.")
arccos = _u("arccos", "Arccos", np.arccos, "Inverse cosine, elementwise.")
arctan = _u("arctan", "Arctan", np.arctan, "Inverse tangent, elementwise.")
sinh = _u("sinh", "Sinh", np.sinh, "Hyperbolic sine, elementwise.")
cosh = _u("cosh", "Cosh", np.cosh, "Hyperbolic cosine, elementwise.")
tanh = _u("tanh", "Tanh", np.tanh, "Hyperbolic tangent, elementwise.")
arcsinh = _u("arcsinh", "Arcsinh", np.arcsinh, "Inverse hyperbolic sine, elementwise.")
arccosh = _u("arccosh", "Arccosh", np.arccosh, "Inverse hyperbolic cosine, elementwise.")
arctanh = _u("arctanh", "Arctanh", np.arctanh, "Inverse hyperbolic tangent, elementwise.")
erf = _u("erf", "Erf", np.exp, "The error function, elementwise.", _cpu.erf_np)
sigmoid = _u("sigmoid", "Sigmoid", np.exp, "1 / (1 + exp(-x)), elementwise.", lambda x: 1 / (1 + np.exp(-x)))
silu = _u("silu", "Silu", np.exp, "x * sigmoid(x) (swish), elementwise.", lambda x: x / (1 + np.exp(-x)))
gelu = _u("gelu", "Gelu", np.exp, "GELU, exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).", _cpu.gelu)
gelu_tanh = _u("gelu_tanh", "GeluTanh", np.exp, "GELU, tanh approximation (as PyTorch's approximate='tanh').", _cpu.gelu_tanh)
relu = _u("relu", "Relu", np.positive, "max(x, 0), elementwise; NaN passes through.", lambda x: np.where(x < 0, x.dtype.type(0), x))
floor = _u("floor", "Floor", np.floor, "Largest integer <= x, elementwise.")
ceil = _u("ceil", "Ceil", np.ceil, "Smallest integer >= x, elementwise.")
trunc = _u("trunc", "Trunc", np.trunc, "x rounded toward zero, elementwise.")
rint = _u("rint", "Rint", np.rint, "x rounded to the nearest integer, ties to even.")
isnan = _u("isnan", "IsNan", np.isnan, "True where x is NaN.")
isinf = _u("isinf", "IsInf", np.isinf, "True where x is +inf or -inf.")
isfinite = _u("isfinite", "IsFinite", np.isfinite, "True where x is neither inf nor NaN.")
signbit = _u("signbit", "Signbit", np.signbit, "True where the sign bit is set (also for -0.0 and negative NaN).")
logical_not = _u("logical_not", "LogicalNot", np.logical_not, "not x, elementwise, as bool.")
invert = _u("invert", "Invert", np.invert, "~x (bitwise not; logical not for bool).")
conjugate = _u("conjugate", "Conjugate", np.conjugate, "The complex conjugate (a copy for real dtypes).")
conj = conjugate
bitwise_not = invert

# -- binary ----------------------------------------------------------------
add = _b("add", "Add", np.add, "x1 + x2, elementwise.")
subtract = _b("subtract", "Sub", np.subtract, "x1 - x2, elementwise.")
multiply = _b("multiply", "Mul", np.multiply, "x1 * x2, elementwise.")
divide = _b("divide", "Div", np.true_divide, "x1 / x2 (true division; integers give float64).")
true_divide = divide
floor_divide = _b("floor_divide", "FloorDivide", np.floor_divide, "x1 // x2 (floor division; integer division by zero gives 0).")
remainder = _b("remainder", "Remainder", np.remainder, "x1 % x2 with the sign of x2 (Python's %); integer % 0 gives 0.")
mod = remainder
fmod = _b("fmod", "Fmod", np.fmod, "C's remainder: the sign of x1; integer fmod by 0 gives 0.")
power = _b("power", "Power", np.power, "x1 ** x2, elementwise.", _cpu.power)
maximum = _b("maximum", "Maximum", np.maximum, "Elementwise maximum; NaN propagates.")
minimum = _b("minimum", "Minimum", np.minimum, "Elementwise minimum; NaN propagates.")
fmax = _b("fmax", "Fmax", np.fmax, "Elementwise maximum ignoring NaN.")
fmin = _b("fmin", "Fmin", np.fmin, "Elementwise minimum ignoring NaN.")
arctan2 = _b("arctan2", "Arctan2", np.arctan2, "The angle of (x2, x1): arctan(x1 / x2) in the right quadrant.")
hypot = _b("hypot", "Hypot", np.hypot, "sqrt(x1**2 + x2**2) without undue overflow.")
copysign = _b("copysign", "Copysign", np.copysign, "The magnitude of x1 with the sign of x2.")
logaddexp = _b("logaddexp", "Logaddexp", np.logaddexp, "log(exp(x1) + exp(x2)) without overflow.")
equal = _b("equal", "Equal", np.equal, "x1 == x2, elementwise.")
not_equal = _b("not_equal", "NotEqual", np.not_equal, "x1 != x2, elementwise.")
less = _b("less", "Less", np.less, "x1 < x2, elementwise.")
less_equal = _b("less_equal", "LessEqual", np.less_equal, "x1 <= x2, elementwise.")
greater = _b("greater", "Greater", np.greater, "x1 > x2, elementwise.")
greater_equal = _b("greater_equal", "GreaterEqual", np.greater_equal, "x1 >= x2, elementwise.")
logical_and = _b("logical_and", "LogicalAnd", np.logical_and, "x1 and x2, elementwise, as bool.")
logical_or = _b("logical_or", "LogicalOr", np.logical_or, "x1 or x2, elementwise, as bool.")
logical_xor = _b("logical_xor", "LogicalXor", np.logical_xor, "x1 xor x2, elementwise, as bool.")
bitwise_and = _b("bitwise_and", "BitwiseAnd", np.bitwise_and, "x1 & x2 (integers and bool).")
bitwise_or = _b("bitwise_or", "BitwiseOr", np.bitwise_or, "x1 | x2 (integers and bool).")
bitwise_xor = _b("bitwise_xor", "BitwiseXor", np.bitwise_xor, "x1 ^ x2 (integers and bool).")
left_shift = _b("left_shift", "LeftShift", np.left_shift, "x1 << x2; shifts of the width or more give 0.")
right_shift = _b("right_shift", "RightShift", np.right_shift, "x1 >> x2 (arithmetic for signed integers).")

# -- with parameters, ternary ------------------------------------------------------
_nan_to_num = _u("nan_to_num", "NanToNum", np.positive, "", lambda x, a, b, c: np.nan_to_num(x, nan=a, posinf=b, neginf=c))
_clip_scalars = _u("clip", "ClipScalars", np.positive, "", _cpu.maximum_minimum)
_where = Ufunc("where", "pgk::Where", 3, np.positive, lambda c, x, y: np.where(c != 0, x, y), "")
_clip = Ufunc("clip", "pgk::Clip", 3, np.positive, _cpu.maximum_minimum, "")


def _ternary(uf: Ufunc, a: Any, b: Any, c: Any, dt: np.dtype, out: GPUArray | None) -> GPUArray:
    """Run a ternary functor with every operand converted to arrays (scalars
    become 0-d arrays of ``dt``), computing in ``dt``."""
    ops = [x if isinstance(x, GPUArray) else asarray(np.asarray(x).astype(dt)) for x in (a, b, c)]
    shape = np.broadcast_shapes(*(o.shape for o in ops))
    stream = current_stream_handle()
    if out is None:
        out = _new_result(shape, dt, next((o for o in ops if o.shape == shape), None), stream)
    else:
        _check_out(uf, out, shape, dt)
        ops = [o.copy() if o._block is out._block and not _same_view(o, out) else o for o in ops]
    if out._size:
        (_runtime._runtime or _runtime.get()).ops.elementwise(uf, ops, dt, out, (), stream)
    return out


@on_stream
def where(condition: Any, x: Any, y: Any, /, *, out: GPUArray | None = None) -> GPUArray:
    """``x`` where ``condition`` is true, else ``y``; all three broadcast. The
    result dtype is that of ``x`` and ``y`` together (NumPy promotion)."""
    cond = condition if isinstance(condition, GPUArray) else asarray(np.asarray(condition))
    if cond.dtype != _dtypes.bool_:
        cond = cond.astype(_dtypes.bool_)
    dt = _dtypes.result_type(*(v if isinstance(v, (GPUArray, bool, int, float)) else np.asarray(v) for v in (x, y)))
    return _ternary(_where, cond, x, y, dt, out)


@on_stream
def clip(x: Any, /, min: Any = None, max: Any = None, *, out: GPUArray | None = None) -> GPUArray:
    """``minimum(maximum(x, min), max)``; a bound of None is not applied. NaN in
    ``x`` propagates. The result dtype is NumPy's for x and the bounds."""
    xa = x if isinstance(x, GPUArray) else asarray(np.asarray(x))
    if min is None and max is None:
        raise ValueError("clip: at least one of min and max must be given")
    if _dtypes.is_complex(xa.dtype):
        raise TypeError("clip is not supported for complex input (complex numbers have no order)")
    bounds = [b for b in (min, max) if b is not None]
    dt = _dtypes.result_type(*(b if isinstance(b, (GPUArray, bool, int, float)) else np.asarray(b) for b in (xa, *bounds)))
    lo = _extreme(dt, low=True) if min is None else min
    hi = _extreme(dt, low=False) if max is None else max
    if dt.kind != "b" and all(isinstance(b, (bool, int, float)) for b in bounds):
        # Python scalar bounds: one unary kernel with the bounds as parameters
        xa = xa if xa.dtype == dt else xa.astype(dt)
        return apply(_clip_scalars, (xa,), out, (_scalar_value(lo, dt), _scalar_value(hi, dt)))
    return _ternary(_clip, xa, lo, hi, dt, out)


def _extreme(dt: np.dtype, low: bool) -> Any:
    if _dtypes.is_float(dt):
        return -math.inf if low else math.inf
    if dt == _dtypes.bool_:
        return not low
    info = np.iinfo(dt)
    return int(info.min if low else info.max)


@on_stream
def nan_to_num(x: GPUArray, /, copy: bool = True, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> GPUArray:
    """NaN -> ``nan``, +inf -> ``posinf`` (default: the largest finite value of
    the dtype), -inf -> ``neginf`` (default: the most negative). Integer and
    bool arrays are returned unchanged (copied unless ``copy=False``)."""
    if not isinstance(x, GPUArray):
        raise TypeError(f"nan_to_num expects a GPUArray, got {type(x).__name__}")
    if not _dtypes.is_float(x.dtype):
        return x.copy() if copy else x
    fi = _dtypes.finfo(x.dtype)
    big = float(fi.max)
    params = (nan, big if posinf is None else posinf, -big if neginf is None else neginf)
    params = tuple(_scalar_value(p, x.dtype) for p in params)
    return apply(_nan_to_num, (x,), None if copy else x, params)


@on_stream
def round(x: GPUArray, /, decimals: int = 0, out: GPUArray | None = None) -> GPUArray:
    """Round half to even to ``decimals`` places (negative: to tens, hundreds...),
    as NumPy: floats scale by 10**decimals, round, and scale back."""
    if not isinstance(x, GPUArray):
        raise TypeError(f"round expects a GPUArray, got {type(x).__name__}")
    if x.dtype.kind in "biu":
        if decimals >= 0:
            return positive(x, out=out)
        q = 10**-decimals
        r = remainder(x, q)
        base = subtract(x, r)
        up = logical_or(greater(r, q // 2), logical_and(equal(r, q // 2), equal(remainder(floor_divide(base, q), 2), 1)))
        return where(up, add(base, q), base, out=out)
    if decimals == 0:
        return rint(x, out=out)
    scale = 10.0**decimals if decimals > 0 else 10.0**-decimals
    if decimals > 0:
        return divide(rint(multiply(x, scale)), scale, out=out)
    return multiply(rint(divide(x, scale)), scale, out=out)


around = round


# -- GPUArray's operators ---------------------------------------------------------
_OPERAND_TYPES = (GPUArray, bool, int, float, complex, np.generic, np.ndarray, list, tuple)


def _reflected_operator(call: Callable[..., Any]) -> Callable[[GPUArray, Any], Any]:
    def method(self: GPUArray, other: Any) -> Any:
        return call(other, self, None, False) if isinstance(other, _OPERAND_TYPES) else NotImplemented

    return method


def _inplace_operator(call: Callable[..., Any]) -> Callable[[GPUArray, Any], Any]:
    def method(self: GPUArray, other: Any) -> Any:
        if not isinstance(other, _OPERAND_TYPES):
            return NotImplemented
        call(self, other, self, False)
        return self

    return method


def _conj(self: GPUArray) -> GPUArray:
    """The complex conjugate (a copy)."""
    return conjugate(self)


def _install_operators() -> None:
    binary = {
        "add": add, "sub": subtract, "mul": multiply, "truediv": divide, "floordiv": floor_divide, "mod": remainder,
        "pow": power, "and": bitwise_and, "or": bitwise_or, "xor": bitwise_xor, "lshift": left_shift, "rshift": right_shift,
    }  # fmt: skip
    for name, uf in binary.items():
        setattr(GPUArray, f"__{name}__", uf._call)
        setattr(GPUArray, f"__r{name}__", _reflected_operator(uf._call))  # type: ignore[arg-type]
        setattr(GPUArray, f"__i{name}__", _inplace_operator(uf._call))  # type: ignore[arg-type]
    comparisons = {"eq": equal, "ne": not_equal, "lt": less, "le": less_equal, "gt": greater, "ge": greater_equal}
    for name, uf in comparisons.items():
        setattr(GPUArray, f"__{name}__", uf._call)
    GPUArray.__hash__ = None  # type: ignore[assignment]  # == is elementwise, as in NumPy
    for name, uf in {"neg": negative, "pos": positive, "abs": abs, "invert": invert}.items():
        setattr(GPUArray, f"__{name}__", uf._call)
    GPUArray.__divmod__ = lambda self, other: (floor_divide(self, other), remainder(self, other))  # type: ignore[method-assign]
    GPUArray.__rdivmod__ = lambda self, other: (floor_divide(other, self), remainder(other, self))  # type: ignore[method-assign]
    GPUArray.conj = _conj  # type: ignore[method-assign]


_install_operators()


def real(x: Any, /) -> GPUArray:
    """The real part: a view for complex arrays, the array itself otherwise."""
    return _as_array(x, "real").real


def imag(x: Any, /) -> GPUArray:
    """The imaginary part: a view for complex arrays, zeros otherwise."""
    return _as_array(x, "imag").imag


def angle(x: Any, /, deg: bool = False) -> GPUArray:
    """The argument of each element, in radians (degrees with ``deg``): ``arctan2(imag, real)``."""
    a = _as_array(x, "angle")
    r = arctan2(a.imag, a.real) if _dtypes.is_complex(a.dtype) else arctan2(0.0, a)  # real: 0 or pi
    return multiply(r, 180 / math.pi) if deg else r


def _as_array(x: Any, name: str) -> GPUArray:
    if isinstance(x, GPUArray):
        return x
    try:
        return asarray(x)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: unsupported operand of type {type(x).__name__}: {e}") from None
