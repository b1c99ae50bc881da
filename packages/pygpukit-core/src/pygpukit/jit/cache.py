"""On-disk cache of compiled kernels.

One file per compilation, named by the SHA-256 of everything that decides the
output (source, options, name expressions, NVRTC version, target, and the
built-in headers a source may include: an upgrade that changes one of them
must not find the old binaries). A file is
written to a temporary name in the same directory and renamed into place, so
readers see either nothing or a whole file; a file that does not parse is
ignored and rewritten. Location: ``PYGPUKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/pygpukit/kernels``, else ``~/.cache/pygpukit/kernels``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from dataclasses import dataclass
from functools import cache

FORMAT_VERSION = 1
_MAGIC = b"PGKK"


@dataclass(frozen=True)
class Binary:
    """A compiled program: CUBIN or PTX bytes and the mangled names of its kernels."""

    image: bytes
    kind: str  # "cubin" or "ptx"
    lowered: dict[str, str]
    key: str


def cache_dir() -> str:
    env = os.environ.get("PYGPUKIT_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pygpukit", "kernels")


@cache
def headers_digest(include_dir: str) -> str:
    """SHA-256 over the names and contents of the headers under ``include_dir``."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(include_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, include_dir).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def make_key(
    source: str, options: list[str], name_expressions: list[str], nvrtc_version: tuple[int, int], target: str, headers: str
) -> str:
    """The cache key; ``headers``: the ``headers_digest`` of the include directory."""
    h = hashlib.sha256()
    for part in (str(FORMAT_VERSION), source, "\0".join(options), "\0".join(name_expressions), "%d.%d" % nvrtc_version, target, headers):
        h.update(part.encode())
        h.update(b"\x01")
    return h.hexdigest()


def _path(key: str) -> str:
    return os.path.join(cache_dir(), key[:2], key + ".bin")


def read(key: str) -> Binary | None:
    try:
        with open(_path(key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 8 or data[:4] != _MAGIC:
        return None
    (hlen,) = struct.unpack_from("<I", data, 4)
    try:
        header = json.loads(data[8 : 8 + hlen])
        image = data[8 + hlen :]
        if len(image) != header["size"]:
            return None
        return Binary(image=image, kind=header["kind"], lowered=header["lowered"], key=key)
    except (ValueError, KeyError):
        return None


_warned_unwritable = False


def write(binary: Binary) -> bool:
    """Store a binary; on an unwritable cache dir warn once and carry on without it."""
    global _warned_unwritable
    import tempfile

    path = _path(binary.key)
    header = json.dumps({"kind": binary.kind, "lowered": binary.lowered, "size": len(binary.image)}).encode()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + struct.pack("<I", len(header)) + header + binary.image)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        if not _warned_unwritable:
            _warned_unwritable = True
            warnings.warn(
                f"pygpukit kernel cache {cache_dir()!r} is not writable ({exc}); kernels will be "
                "recompiled in every process. Set PYGPUKIT_CACHE_DIR to a writable directory.",
                RuntimeWarning,
                stacklevel=3,
            )
        return False
    return True


def is_writable(path: str | None = None) -> tuple[bool, str]:
    """Whether the cache directory can be created and written (for doctor)."""
    import tempfile

    path = path or cache_dir()
    try:
        os.makedirs(path, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return False, str(exc)
    return True, ""
