"""The typed errors of pygpukit-audio: bad input is a ValueError or TypeError
that is also a pygpukit.PyGPUkitError."""

from __future__ import annotations

from pygpukit import PyGPUkitError


class AudioValueError(PyGPUkitError, ValueError):
    """An argument of an audio function has a bad value (length, size, mode)."""


class AudioTypeError(PyGPUkitError, TypeError):
    """An argument of an audio function has a bad type or dtype."""
