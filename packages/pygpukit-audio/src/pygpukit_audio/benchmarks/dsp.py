"""pygpukit-audio's DSP on the issue's shape, 16 signals of 60 s at 16 kHz
(44.1 kHz for resampling), float32: sosfilt of a 6th-order Butterworth
low-pass (3 sections) and resample 44.1k -> 16k (up 160, down 441); ms per
call against scipy.signal on one CPU core (its sosfilt and upfirdn loops are
single-threaded) and, on the GPU, torchaudio (lfilter over the three biquads;
its resample with its own sinc filter, for scale only) when installed. The
issue's targets on an H100: sosfilt >= 100x scipy and faster than
torchaudio's lfilter; resample >= 50x scipy. On the CPU backend the sizes
shrink to 2 signals of 1 s (the NumPy references)."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.benchmark import peers
from pygpukit.benchmark.harness import Recorder, median_time_ms

from .. import filters
from .. import resampling as resample

# scipy.signal.butter(6, 0.1, output="sos"), fixed here so that scipy is optional
SOS = np.array(
    [
        [8.5765570732594045e-06, 1.7153114146518809e-05, 8.5765570732594045e-06, 1.0, -1.4648681939512453, 0.54025356942786973],
        [1.0, 2.0, 1.0, 1.0, -1.5610180758007182, 0.64135153805756306],
        [1.0, 2.0, 1.0, 1.0, -1.7612492291001696, 0.85188703186759773],
    ]
)


def _scipy_signal() -> Any | None:
    try:
        import scipy.signal
    except ImportError:
        return None
    return scipy.signal


def _torchaudio(torch: Any) -> Any | None:
    try:
        import torchaudio.functional
    except Exception:  # not installed, or built against another torch
        return None
    return torchaudio.functional


def _time_on_device(fn: Any, host: np.ndarray, timer: Any, warm: int, reps: int) -> float:
    """ms per fn(a) of ``host`` uploaded; the memory is given back afterwards."""
    box = [gp.from_numpy(host)]
    ms = median_time_ms(lambda: fn(box[0]), timer, warm, reps)
    box.clear()
    gp.memory.empty_cache()
    return ms


def bench_audio_dsp(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    batch, seconds = (16, 10 if quick else 60) if gpu else (2, 1)
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    rng = np.random.default_rng(11)
    x16 = rng.standard_normal((batch, 16000 * seconds), dtype=np.float32)
    x44 = rng.standard_normal((batch, 44100 * seconds), dtype=np.float32)
    tag = f"f32_{batch}x{seconds}s"
    timer = peers.gp_timer() if gpu else peers.host_timer()
    rec.add(f"sosfilt6_{tag}", "pygpukit", "ms", _time_on_device(lambda a: filters.sosfilt(SOS, a), x16, timer, warm, reps), False)
    ms = _time_on_device(lambda a: resample.resample(a, 44100, 16000), x44, timer, warm, reps)
    rec.add(f"resample_44k1_16k_{tag}", "pygpukit", "ms", ms, False)
    sig = _scipy_signal()
    if sig is not None:
        host = peers.host_timer()
        note = "scipy.signal on one CPU core"
        rec.add(f"sosfilt6_{tag}", "scipy", "ms", median_time_ms(lambda: sig.sosfilt(SOS, x16, axis=-1), host, 1, 3), False, note=note)
        ms = median_time_ms(lambda: sig.resample_poly(x44, 160, 441, axis=-1), host, 1, 3)
        rec.add(f"resample_44k1_16k_{tag}", "scipy", "ms", ms, False, note=note)
    torch: Any = peers.torch_cuda() if gpu else None
    taf = _torchaudio(torch) if torch is not None else None
    if taf is not None:
        t16, t44 = torch.from_numpy(x16).cuda(), torch.from_numpy(x44).cuda()
        coef = [(torch.tensor(s[3:], dtype=torch.float32).cuda(), torch.tensor(s[:3], dtype=torch.float32).cuda()) for s in SOS]

        def lfilter() -> Any:
            y = t16
            for a, b in coef:
                y = taf.lfilter(y, a, b, clamp=False)
            return y

        ttimer = peers.torch_timer(torch)
        rec.add(f"sosfilt6_{tag}", "torchaudio", "ms", median_time_ms(lfilter, ttimer, warm, reps), False, note="lfilter per biquad")
        ms = median_time_ms(lambda: taf.resample(t44, 44100, 16000), ttimer, warm, reps)
        rec.add(f"resample_44k1_16k_{tag}", "torchaudio", "ms", ms, False, note="its own sinc filter (not scipy's)")
        del t16, t44
        torch.cuda.empty_cache()
