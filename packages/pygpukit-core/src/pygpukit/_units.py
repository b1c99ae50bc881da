"""Byte sizes written for people: "40GiB", "512MB", "1.5 GiB", 1048576."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3, "ti": 1024**4, "tib": 1024**4,
}  # fmt: skip
_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: str | int) -> int:
    """Parse a byte count; raise ValueError naming the bad text."""
    if isinstance(value, bool):
        raise TypeError("a byte size must be an int or a string like '40GiB', not bool")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a byte size cannot be negative, got {value}")
        return value
    m = _RE.match(str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot parse byte size {value!r}; expected e.g. 1048576, '512MiB', '40GB'")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: int | float) -> str:
    if abs(n) < 1024:
        return f"{int(n)} B"
    n = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024:
            return f"{n:.2f} {unit}"
    return f"{n / 1024:.2f} TiB"
