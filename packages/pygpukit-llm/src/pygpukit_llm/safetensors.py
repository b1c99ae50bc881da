"""SafeTensors checkpoints, read-only: one file or a sharded index.

The format is an 8-byte little-endian header length, a JSON header (name ->
dtype, shape, [begin, end) offsets into the data section, plus an optional
"__metadata__" of strings), then the data. Files are memory-mapped read-only,
so a tensor is a NumPy view of the page cache until it is copied to the device
(``to_device``: one pass through the transfer engine's pinned staging); nothing
ever writes to a checkpoint. Every header is validated before any tensor is
read: a corrupt or truncated file raises ``SafetensorsError`` naming the file
and what is wrong. bfloat16 and fp8 come through ml_dtypes (``gp.bfloat16``,
``gp.float8_e4m3fn``, ``gp.float8_e5m2``); the ``safetensors`` package's NumPy
reader cannot represent them.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import pygpukit as gp

__all__ = ["DTYPES", "Checkpoint", "SafeTensorsFile", "SafetensorsError", "TensorInfo", "save_file"]

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(gp.bfloat16),
    "F8_E4M3": np.dtype(gp.float8_e4m3fn),
    "F8_E5M2": np.dtype(gp.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
MAX_HEADER = 100 << 20  # the reference implementation's limit


class SafetensorsError(gp.PyGPUkitError, ValueError):
    """A checkpoint file that is missing, corrupt or truncated, or a tensor
    that is not in it; the message names the file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    file: Path
    offset: int  # of the first byte, from the start of the file
    nbytes: int


class SafeTensorsFile:
    """One ``.safetensors`` file: its header, validated, and read-only views of its tensors."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise SafetensorsError(f"{self.path}: {size} bytes is too short for a safetensors file")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER or 8 + n > size:
                    raise SafetensorsError(
                        f"{self.path}: header length {n} does not fit in a file of {size} bytes (truncated or not safetensors)"
                    )
                raw = f.read(n)
        except OSError as exc:
            raise SafetensorsError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SafetensorsError(f"{self.path}: the header is not valid JSON ({exc})") from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{self.path}: the header is not a JSON object")
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise SafetensorsError(f"{self.path}: __metadata__ must map strings to strings")
        self.metadata: dict[str, str] = meta
        data_start, data_len = 8 + n, size - 8 - n
        self._tensors: dict[str, TensorInfo] = {}
        spans = []
        for name, entry in header.items():
            info = self._entry(name, entry, data_start, data_len)
            self._tensors[name] = info
            spans.append((info.offset, info.offset + info.nbytes, name))
        spans.sort()
        for (_, end, a), (begin, _, b) in itertools.pairwise(spans):
            if begin < end:
                raise SafetensorsError(f"{self.path}: tensors {a!r} and {b!r} overlap")
        self._map: np.memmap | None = None

    def _entry(self, name: str, entry: Any, data_start: int, data_len: int) -> TensorInfo:
        where = f"{self.path}: tensor {name!r}"
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise SafetensorsError(f"{where} needs dtype, shape and data_offsets")
        dt = DTYPES.get(entry["dtype"])
        if dt is None:
            raise SafetensorsError(f"{where} has dtype {entry['dtype']!r}; supported: {', '.join(DTYPES)}")
        shape = entry["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise SafetensorsError(f"{where} has shape {shape!r}; expected a list of non-negative ints")
        offs = entry["data_offsets"]
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) and o >= 0 for o in offs) and offs[0] <= offs[1]):
            raise SafetensorsError(f"{where} has data_offsets {offs!r}; expected [begin, end] with begin <= end")
        nbytes = math.prod(shape) * dt.itemsize
        if offs[1] - offs[0] != nbytes:
            raise SafetensorsError(f"{where}: {offs[1] - offs[0]} bytes for shape {tuple(shape)} of {entry['dtype']} ({nbytes} bytes)")
        if offs[1] > data_len:
            raise SafetensorsError(f"{where} ends at byte {offs[1]} of a data section of {data_len} bytes (the file is truncated)")
        return TensorInfo(name, dt, tuple(shape), self.path, data_start + offs[0], nbytes)

    def keys(self) -> list[str]:
        return list(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __len__(self) -> int:
        return len(self._tensors)

    def info(self, name: str) -> TensorInfo:
        try:
            return self._tensors[name]
        except KeyError:
            raise SafetensorsError(f"{self.path} has no tensor {name!r}") from None

    def numpy(self, name: str) -> np.ndarray:
        """A read-only view of the tensor in the memory-mapped file (no copy)."""
        info = self.info(name)
        if info.nbytes == 0:
            return np.empty(info.shape, info.dtype)
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        view = self._map[info.offset : info.offset + info.nbytes].view(info.dtype).reshape(info.shape)
        return view


class Checkpoint:
    """A model's tensors from ``model.safetensors`` or a sharded
    ``model.safetensors.index.json`` (its ``weight_map`` names each tensor's
    shard) in ``directory``; or from a single file path."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        self._files: dict[Path, SafeTensorsFile] = {}
        self._where: dict[str, SafeTensorsFile] = {}
        if p.is_file():
            self._add(p)
            return
        if not p.is_dir():
            raise SafetensorsError(f"{p} is neither a safetensors file nor a directory")
        index = p / "model.safetensors.index.json"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise SafetensorsError(f"{index}: not a valid index ({exc})") from None
            if not isinstance(weight_map, dict):
                raise SafetensorsError(f"{index}: weight_map must map tensor names to shard files")
            for shard in sorted(set(weight_map.values())):
                if not (p / shard).is_file():
                    raise SafetensorsError(f"{index} names the shard {shard!r}, which is missing from {p}")
                self._add(p / shard)
            missing = [n for n in weight_map if n not in self._where]
            if missing:
                raise SafetensorsError(f"{index} lists {len(missing)} tensors its shards do not hold, e.g. {missing[0]!r}")
            return
        files = sorted(p.glob("*.safetensors"))
        if not files:
            raise SafetensorsError(f"{p} holds no model.safetensors.index.json and no *.safetensors file")
        for f in files:
            self._add(f)

    def _add(self, path: Path) -> None:
        f = self._files[path] = SafeTensorsFile(path)
        for name in f.keys():
            if name in self._where:
                raise SafetensorsError(f"tensor {name!r} is in both {self._where[name].path.name} and {path.name}")
            self._where[name] = f

    def keys(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __len__(self) -> int:
        return len(self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    @property
    def files(self) -> list[Path]:
        return list(self._files)

    def info(self, name: str) -> TensorInfo:
        f = self._where.get(name)
        if f is None:
            raise SafetensorsError(f"the checkpoint has no tensor {name!r}")
        return f.info(name)

    def nbytes(self) -> int:
        """Bytes of all tensors as stored."""
        return sum(self.info(n).nbytes for n in self._where)

    def numpy(self, name: str) -> np.ndarray:
        """A read-only, zero-copy view of a tensor (see ``SafeTensorsFile.numpy``)."""
        self.info(name)  # a clear error for a missing name
        return self._where[name].numpy(name)

    def to_device(self, name: str, dtype: Any = None) -> gp.GPUArray:
        """The tensor in pygpukit memory, converted to ``dtype`` on the device
        when given (the file's bytes cross to the device once, as stored)."""
        host = self.numpy(name)
        out = gp.from_numpy(np.ascontiguousarray(host)) if host.size else gp.empty(host.shape, host.dtype)
        return out if dtype is None or np.dtype(dtype) == out.dtype else out.astype(dtype)


_NAMES = {dt: name for name, dt in DTYPES.items()}


def save_file(tensors: dict[str, Any], path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> NumPy array or GPUArray) as one safetensors
    file, in name order, the header padded to 8 bytes as the reference writer
    does. The file appears whole or not at all (written beside it, then renamed)."""
    out = Path(path)
    arrays: dict[str, np.ndarray] = {}
    for name, t in sorted(tensors.items()):
        a = t.to_numpy() if isinstance(t, gp.GPUArray) else np.asarray(t)
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise SafetensorsError(f"{out}: tensor names must be non-empty strings other than __metadata__, got {name!r}")
        if a.dtype not in _NAMES:
            raise SafetensorsError(f"{out}: tensor {name!r} has dtype {a.dtype}, which safetensors cannot hold")
        arrays[name] = np.ascontiguousarray(a)
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise SafetensorsError(f"{out}: metadata must map strings to strings")
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, a in arrays.items():
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = out.with_name(out.name + ".partial")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for a in arrays.values():
                f.write(memoryview(a.reshape(-1).view(np.uint8)))
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SafetensorsError(f"cannot write {out}: {exc.strerror or exc}") from None
