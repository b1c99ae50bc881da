"""The median-filter and Viterbi CUDA kernels run on the CPU
(emulator/pitch_decompose.cpp: a std::thread per CUDA thread, std::barrier for
__syncthreads) against scipy.ndimage.median_filter and the NumPy Viterbi
(itself held to librosa in test_pitch.py): the kernels' index math, the
reflect boundary, ties, the shared-memory value rows and the backtracking,
without a GPU. Skips where g++ with C++20 is missing."""

import ctypes

import numpy as np
import pytest
from emulation import build

import pygpukit as gp
from pygpukit_audio import pitch

ndimage = pytest.importorskip("scipy.ndimage", reason="the reference is scipy.ndimage.median_filter (pip install scipy)")
LL, INT = ctypes.c_longlong, ctypes.c_int


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return build(tmp_path_factory.mktemp("emu_pd"), "pitch_decompose.cpp", ("decompose", "pitch"))


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def test_median_kernel(emu, rng):
    for shape, k, dtype in [((3, 50, 1), 31, np.float64), ((2, 9, 70), 4, np.float32), ((1, 5, 3), 31, np.float64),
                            ((4, 1, 6), 3, np.float32), ((1, 300, 1), 1, np.float64)]:  # fmt: skip
        x = rng.standard_normal(shape).astype(dtype)
        x[0, : shape[1] // 2, 0] = 0.5  # ties
        y = np.full_like(x, np.nan)
        emu.median(int(dtype == np.float64), ptr(x), LL(x.size), LL(shape[1]), LL(shape[2]), INT(k), ptr(y))
        assert np.array_equal(y, ndimage.median_filter(x, size=(1, k, 1), mode="reflect")), (shape, k)


def test_viterbi_kernel(emu, rng):
    for seqs, steps, states in [(2, 30, 40), (1, 1, 5), (3, 12, 600), (1, 9, 1202)]:
        lp = np.log(rng.uniform(0, 1, (seqs, steps, states)) ** 3 + np.finfo(np.float64).tiny)
        lp[:, :, states // 2 :] = np.log(0.5 / states)  # equal observations: ties decided by the transitions
        trans = rng.uniform(0, 1, (states, states)) ** 6
        lt = np.log(trans / trans.sum(axis=1, keepdims=True))
        li = np.log(np.full(states, 1.0 / states))
        out = np.full((seqs, steps), -1, np.int32)
        scratch = np.zeros((seqs, steps, states), np.int32)
        emu.viterbi(ptr(lp), ptr(lt), ptr(li), INT(steps), INT(states), ptr(scratch), ptr(out), INT(seqs))
        ref = pitch.reference_viterbi(gp.asarray(lp), gp.asarray(lt), gp.asarray(li)).to_numpy()
        assert np.array_equal(out, ref), (seqs, steps, states)
