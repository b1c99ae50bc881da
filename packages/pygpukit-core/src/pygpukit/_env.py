"""The PYGPUKIT_* environment variables that core reads, parsed one way: a
value that does not parse is an EnvironmentVariableError naming the variable,
the value and what it accepts, never a silent default. Switches accept
1/0, true/false, yes/no and on/off (any case); unset or empty is the default."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ._errors import EnvironmentVariableError
from ._units import parse_bytes

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return None if value is None or not value.strip() else value.strip()


def _bad(name: str, value: str, accepts: str) -> EnvironmentVariableError:
    return EnvironmentVariableError(f"environment variable {name}={value!r}: expected {accepts}")


def flag(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _bad(name, value, "1/0, true/false, yes/no or on/off")


def choice(name: str, choices: Sequence[str], default: str) -> str:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() not in choices:
        raise _bad(name, value, "one of " + ", ".join(choices))
    return value.lower()


def integer(name: str, default: int, minimum: int = 0) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        raise _bad(name, value, f"an integer >= {minimum}")
    return n


def nbytes(name: str) -> int | None:
    value = _raw(name)
    if value is None:
        return None
    try:
        return parse_bytes(value)
    except ValueError:
        raise _bad(name, value, "a byte size such as 1048576, 512MiB or 40GB") from None
