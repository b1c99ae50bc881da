"""Kernel parameter lists: parsed from CUDA source, and packed for a launch.

Arguments are packed with the struct module in native alignment, which is
the layout cuLaunchKernel expects in its parameter buffer. Pointer
parameters take a GPUArray (its data pointer), a raw int address or None;
scalar parameters take Python or NumPy numbers converted by the C type.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np

from .. import _dtypes
from ..array import GPUArray

# C type -> (struct code, dtype used for conversion)
_SCALARS: dict[str, tuple[str, np.dtype]] = {}
for _names, _code, _dt in [
    (("bool",), "?", _dtypes.bool_),
    (("char", "signed char", "int8_t"), "b", _dtypes.int8),
    (("unsigned char", "uint8_t"), "B", _dtypes.uint8),
    (("short", "short int", "signed short", "int16_t"), "h", _dtypes.int16),
    (("unsigned short", "unsigned short int", "uint16_t"), "H", _dtypes.uint16),
    (("int", "signed", "signed int", "int32_t"), "i", _dtypes.int32),
    (("unsigned", "unsigned int", "uint32_t"), "I", _dtypes.uint32),
    (("long", "long int", "long long", "long long int", "int64_t", "ptrdiff_t", "ssize_t"), "q", _dtypes.int64),
    (("unsigned long", "unsigned long long", "unsigned long long int", "uint64_t", "size_t"), "Q", _dtypes.uint64),
    (("float",), "f", _dtypes.float32),
    (("double",), "d", _dtypes.float64),
    (("half", "__half", "pgk::half"), "H", _dtypes.float16),
    (("__nv_bfloat16", "bfloat16", "pgk::bfloat16"), "H", _dtypes.bfloat16),
]:
    for _n in _names:
        _SCALARS[_n] = (_code, _dt)

# pointee C type -> dtype, for checking a GPUArray passed to a typed pointer
_POINTEES = {name: dt for name, (_, dt) in _SCALARS.items()}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct)\b")


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str  # normalized, e.g. "float*" or "int"
    code: str  # struct code: "P" for pointers
    dtype: np.dtype | None  # scalar dtype, or pointee dtype for typed pointers (None: void*/unknown)
    pointer: bool


def parse_params(text: str) -> list[Param]:
    """Parse a C parameter list such as ``"const float* __restrict__ x, int n"``."""
    params: list[Param] = []
    text = text.strip()
    if text in ("", "void"):
        return params
    for i, raw in enumerate(_split_top_level(text)):
        raw = raw.strip()
        if "=" in raw:
            raise ValueError(f"kernel parameter {raw!r}: default arguments are not supported")
        m = re.match(r"^(.*?)([A-Za-z_]\w*)?\s*$", raw)
        assert m is not None
        ctype, name = (m.group(1), m.group(2)) if m.group(1).strip() else (raw, None)
        ctype = _QUALIFIERS.sub(" ", ctype)
        pointer = "*" in ctype
        base = " ".join(ctype.replace("*", " ").replace("&", " ").split())
        name = name or f"arg{i}"
        if pointer:
            params.append(Param(name, base + "*", "P", _POINTEES.get(base), True))
        elif "&" in ctype:
            raise ValueError(f"kernel parameter {raw!r}: references cannot be kernel parameters")
        elif base in _SCALARS:
            code, dt = _SCALARS[base]
            params.append(Param(name, base, code, dt, False))
        else:
            raise TypeError(
                f"kernel parameter {raw!r}: cannot pass type {base!r} from Python; "
                f"supported: pointers and {', '.join(sorted(set(_SCALARS)))}"
            )
    return params


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def find_signature(source: str, func: str) -> list[Param]:
    """Find ``__global__ void func(...)`` in ``source`` and parse its parameters."""
    no_comments = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    pattern = re.compile(
        r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?" + re.escape(func) + r"\s*\("
    )
    m = pattern.search(no_comments)
    if m is None:
        raise ValueError(f"no kernel '__global__ void {func}(...)' found in the source")
    depth, i = 1, m.end()
    while depth and i < len(no_comments):
        depth += {"(": 1, ")": -1}.get(no_comments[i], 0)
        i += 1
    return parse_params(no_comments[m.end() : i - 1])


class Packer:
    """Packs Python arguments for one kernel signature into a parameter buffer.

    The packing function is generated once per signature (one expression per
    parameter, the common argument types tested first), so a launch costs
    about what a hand-written ``struct.pack`` does; anything unusual falls
    back to the checked conversions below.
    """

    def __init__(self, params: list[Param], func: str) -> None:
        self.params = params
        self.func = func
        self._struct = struct.Struct("@" + "".join(p.code for p in params))
        names = [f"a{i}" for i in range(len(params))]
        env: dict[str, object] = {"GA": GPUArray, "S": self._struct.pack, "P": self._pointer, "C": self._scalar, "PS": params}
        exprs = []
        for i, (p, a) in enumerate(zip(params, names)):
            if p.pointer:
                same = "" if p.dtype is None else f" and {a}._dtype is D{i}"
                env[f"D{i}"] = p.dtype
                exprs.append(f"({a}._ptr if {a}.__class__ is GA{same} else 0 if {a} is None else P(PS[{i}], {a}))")
            elif p.dtype is not None and p.dtype.kind == "f" and p.code in "fd":
                exprs.append(f"{a} if {a}.__class__ is float else C(PS[{i}], {a})")
            elif p.dtype is not None and p.dtype.kind in "iu":
                exprs.append(f"{a} if {a}.__class__ is int else C(PS[{i}], {a})")
            else:
                exprs.append(f"C(PS[{i}], {a})")
        code = f"def pack({', '.join(names)}):\n    return S({', '.join(exprs)})\n"
        exec(code, env)  # generated from the parsed signature only: names and indices, no source text
        self.pack_args = env["pack"]

    def pack(self, args: tuple) -> bytes:
        if len(args) != len(self.params):
            sig = ", ".join(f"{p.ctype} {p.name}" for p in self.params)
            raise TypeError(f"kernel {self.func}({sig}) takes {len(self.params)} arguments, got {len(args)}")
        try:
            return self.pack_args(*args)  # type: ignore[operator]
        except struct.error as exc:  # an int out of the C type's range
            raise OverflowError(f"kernel {self.func}: an argument does not fit its C type ({exc})") from None

    def _pointer(self, p: Param, a: object) -> int:
        ptr = getattr(a, "_ptr", None)
        if ptr is not None:
            dt = a.dtype  # type: ignore[attr-defined]
            if p.dtype is not None and (dt.itemsize != p.dtype.itemsize or dt.kind != p.dtype.kind) and dt != p.dtype:
                raise TypeError(f"kernel {self.func}: parameter {p.name} is {p.ctype} but the array has dtype {dt}")
            return ptr
        if a is None:
            return 0
        if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            return int(a)
        raise TypeError(
            f"kernel {self.func}: parameter {p.name} ({p.ctype}) needs a GPUArray, an int address or None, got {type(a).__name__}"
        )

    def _scalar(self, p: Param, a: object) -> object:
        if not isinstance(a, (bool, int, float, np.generic)):
            raise TypeError(f"kernel {self.func}: parameter {p.name} ({p.ctype}) needs a number, got {type(a).__name__}")
        assert p.dtype is not None
        if p.dtype.kind in "iu" and isinstance(a, (float, np.floating)):
            raise TypeError(f"kernel {self.func}: parameter {p.name} ({p.ctype}) needs an integer, got {a!r}")
        if p.dtype.kind in "iu":
            info = np.iinfo(p.dtype)
            if not info.min <= int(a) <= info.max:  # type: ignore[call-overload]
                raise OverflowError(f"kernel {self.func}: {a} does not fit parameter {p.name} ({p.ctype})")
            return int(a)  # type: ignore[call-overload]
        if p.code == "H":  # half / bfloat16: raw bits
            return int(np.asarray(a).astype(p.dtype).view(np.uint16))
        if p.code == "?":
            return bool(a)
        return float(a)  # type: ignore[arg-type]
