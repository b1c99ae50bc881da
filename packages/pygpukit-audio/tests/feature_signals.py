"""The synthetic signals the feature tests run on (importable: tests/ is on pytest's path):
white noise, a chirp, a detuned two-tone chord, uniform noise under an envelope, and
silence with a DC offset, each drawn fresh from the test's generator."""

from __future__ import annotations

import numpy as np


def signals(rng: np.random.Generator, n: int, sr: float) -> dict[str, np.ndarray]:
    t = np.arange(n) / sr
    f0 = rng.uniform(60.0, 200.0)
    f1 = rng.uniform(0.2, 0.4) * sr
    chirp_phase = 2 * np.pi * (f0 * t + (f1 - f0) / (2 * max(t[-1], 1 / sr)) * t * t)
    a = rng.uniform(220.0, 880.0)
    return {
        "random": rng.standard_normal(n),
        "chirp": np.sin(chirp_phase + rng.uniform(0, 2 * np.pi)),
        "tone": np.sin(2 * np.pi * a * t) + 0.5 * np.sin(2 * np.pi * 1.5 * a * t + 1.0),
        "noise": rng.uniform(-1.0, 1.0, n) * (1.0 + np.sin(2 * np.pi * rng.uniform(1.0, 4.0) * t)),
        "silence_dc": np.full(n, rng.uniform(0.1, 0.5)),
    }
