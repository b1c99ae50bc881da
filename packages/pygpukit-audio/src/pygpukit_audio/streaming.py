"""Streaming STFT and ISTFT for real-time blocks: the outputs of the pushes
and of the final flush(), concatenated along the last axis, equal the
offline stft / istft of the concatenated input (same arguments).

StreamingSTFT.push(block) returns the frames whose samples have all arrived
(the centre padding at the start is applied as the offline transform does;
"reflect" waits for n_fft // 2 + 1 samples, "symmetric" for n_fft // 2).
flush() ends the stream: it pads the end as the offline transform does and
returns the remaining frames. "wrap" padding needs the end of the signal
before the first frame and cannot stream.

StreamingISTFT.push(frames) returns the samples that no later frame can
change; flush() returns the rest, up to the offline length
n_fft + hop * (frames - 1) - 2 * (n_fft // 2 if center else 0). Trim or pad
the total yourself for an exact ``length``.

Both keep only what the next frames need: the samples from the next frame's
start (at least n_fft // 2 + 1 for the end padding) and the spectra of the
last ceil(n_fft / hop) frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _fft_plan as plan
from ._errors import AudioValueError
from .stft import device_window, frame_params, pad_mode_of, pad_signal, signal, spectrogram


class StreamingSTFT:
    """Blocks of signal (..., samples) in, STFT frames (..., bins, frames) out; see the module docstring."""

    def __init__(
        self,
        n_fft: int = 2048,
        hop_length: int | None = None,
        win_length: int | None = None,
        window: Any = None,
        center: bool = True,
        pad_mode: str | None = None,
        *,
        torch_compat: bool = False,
        normalized: bool = False,
        onesided: bool = True,
    ) -> None:
        self.n_fft, self.hop, self._win = frame_params("StreamingSTFT", n_fft, hop_length, win_length, window, torch_compat)
        self.mode = pad_mode_of(pad_mode, torch_compat)
        if center and self.mode == "wrap":
            raise AudioValueError("StreamingSTFT: pad_mode 'wrap' needs the end of the signal before the first frame; it cannot stream")
        self.center = bool(center)
        self.onesided = bool(onesided)
        self._scale = self.n_fft**-0.5 if normalized else 1.0
        self._pad = self.n_fft // 2 if center else 0
        self._need_left = {"constant": 0, "edge": 1, "reflect": self._pad + 1, "symmetric": self._pad}[self.mode] if center else 0
        self._buf: gp.GPUArray | None = None  # samples [self._start, self._received)
        self._start = 0
        self._received = 0
        self._next = 0  # the next frame to emit
        self._done = False

    def push(self, block: Any) -> gp.GPUArray:
        """Append samples (..., k); returns the frames completed by them (possibly none)."""
        if self._done:
            raise AudioValueError("StreamingSTFT.push: the stream was flushed; make a new one")
        block = signal("StreamingSTFT.push", block, empty=True)
        if self._buf is None:
            self._buf = block
        else:
            if block.shape[:-1] != self._buf.shape[:-1] or block.dtype != self._buf.dtype:
                raise AudioValueError(
                    f"StreamingSTFT.push: blocks must keep the shape (..., k) {self._buf.shape[:-1]} and dtype {self._buf.dtype}, "
                    f"got {block.shape} {block.dtype}"
                )
            self._buf = gp.concatenate([self._buf, block], axis=-1)
        self._received += block.shape[-1]
        count = 0
        if self._received >= self._need_left and self._received + self._pad >= self.n_fft:
            count = (self._received + self._pad - self.n_fft) // self.hop + 1 - self._next
        return self._emit(count)

    def flush(self) -> gp.GPUArray:
        """End the stream: the remaining frames, with the end padding."""
        if self._done:
            raise AudioValueError("StreamingSTFT.flush: the stream was already flushed")
        if self._buf is None or self._received == 0:
            raise AudioValueError("StreamingSTFT.flush: no samples were pushed")
        if self._received + 2 * self._pad < self.n_fft:
            raise AudioValueError(
                f"StreamingSTFT.flush: n_fft={self.n_fft} is longer than the signal ({self._received} samples) with center=False"
            )
        total = 1 + (self._received + 2 * self._pad - self.n_fft) // self.hop
        out = self._emit(total - self._next)
        self._done = True
        self._buf = None
        return out

    def _emit(self, count: int) -> gp.GPUArray:
        buf = self._buf
        assert buf is not None
        if count <= 0:
            bins = self.n_fft // 2 + 1 if self.onesided else self.n_fft
            return gp.empty((*buf.shape[:-1], bins, 0), plan.complex_dtype(buf.dtype))
        a = self._next * self.hop - self._pad  # signal index of the first frame's first sample
        b = a + (count - 1) * self.hop + self.n_fft
        lw, rw = max(0, -a), max(0, b - self._received)
        if lw or rw:  # pad what is kept (from 0 when lw) as the offline signal is padded
            seg = pad_signal(buf, lw, rw, self.mode)[..., a - self._start + lw : b - self._start + lw]
        else:
            seg = buf[..., a - self._start : b - self._start]
        out = ext.op("stft")(seg, self.n_fft, self.hop, device_window(self._win, buf.dtype), self.onesided, self._scale, 0)
        self._next += count
        keep = max(0, min(self._next * self.hop - self._pad, self._received - (self._pad + 1)))
        if keep > self._start:
            self._buf = gp.ascontiguousarray(buf[..., keep - self._start :])
            self._start = keep
        return out


class StreamingISTFT:
    """STFT frames (..., bins, k) in, signal (..., samples) out; see the module docstring."""

    def __init__(
        self,
        n_fft: int = 2048,
        hop_length: int | None = None,
        win_length: int | None = None,
        window: Any = None,
        center: bool = True,
        *,
        torch_compat: bool = False,
        normalized: bool = False,
        onesided: bool = True,
    ) -> None:
        self.n_fft, self.hop, self._win = frame_params("StreamingISTFT", n_fft, hop_length, win_length, window, torch_compat)
        self.onesided = bool(onesided)
        self._scale = self.n_fft**-0.5 if normalized else 1.0 / self.n_fft
        self._pad = self.n_fft // 2 if center else 0
        self._spec: gp.GPUArray | None = None  # spectra of frames [self._first, self._count)
        self._first = 0
        self._count = 0
        self._emitted = self._pad  # the next padded position to emit
        self._done = False

    def push(self, frames: Any) -> gp.GPUArray:
        """Append STFT frames (..., bins, k); returns the samples no later frame changes."""
        if self._done:
            raise AudioValueError("StreamingISTFT.push: the stream was flushed; make a new one")
        s = spectrogram("StreamingISTFT.push", frames, empty=True)
        bins = self.n_fft // 2 + 1 if self.onesided else self.n_fft
        if s.shape[-2] != bins:
            raise AudioValueError(f"StreamingISTFT.push: frames must have {bins} bins for n_fft={self.n_fft}, got {s.shape[-2]}")
        s = s[..., : self.n_fft // 2 + 1, :]
        if self._spec is None:
            self._spec = gp.ascontiguousarray(s)
        else:
            if s.shape[:-1] != self._spec.shape[:-1] or s.dtype != self._spec.dtype:
                raise AudioValueError(
                    f"StreamingISTFT.push: frames must keep the shape {self._spec.shape[:-1]} + (k,) and dtype {self._spec.dtype}, "
                    f"got {s.shape} {s.dtype}"
                )
            self._spec = gp.concatenate([self._spec, s], axis=-1)
        self._count += s.shape[-1]
        # positions below count * hop are final; none beyond the shortest possible end
        end = min(self._count * self.hop, self.n_fft + self.hop * (self._count - 1) - self._pad)
        out = self._emit(end)
        first = max(0, (self._emitted - self.n_fft) // self.hop + 1)
        if first > self._first:
            self._spec = gp.ascontiguousarray(self._spec[..., first - self._first :])
            self._first = first
        return out

    def flush(self) -> gp.GPUArray:
        """End the stream: the remaining samples up to the offline length."""
        if self._done:
            raise AudioValueError("StreamingISTFT.flush: the stream was already flushed")
        if self._spec is None or self._count == 0:
            raise AudioValueError("StreamingISTFT.flush: no frames were pushed")
        out = self._emit(self.n_fft + self.hop * (self._count - 1) - self._pad)
        self._done = True
        self._spec = None
        return out

    def _emit(self, end: int) -> gp.GPUArray:
        spec = self._spec
        assert spec is not None
        n = max(0, end - self._emitted)
        rdt = np.dtype(spec.dtype.type(0).real.dtype)
        if n == 0:
            return gp.empty((*spec.shape[:-2], 0), rdt)
        win = device_window(self._win, rdt)
        out = ext.op("istft")(spec, self.n_fft, self.hop, win, self._emitted - self._first * self.hop, n, self._scale)
        self._emitted += n
        return out
