"""Helpers shared by the native-module tests (on pytest's pythonpath)."""

from __future__ import annotations

import os


def nvrtc_candidates() -> list[str]:
    """NVRTC from the nvidia-cuda-nvrtc wheel first, then the system sonames."""
    cands: list[str] = []
    try:
        import nvidia  # namespace package of the nvidia-* wheels

        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        for rel in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12"):
            path = os.path.join(root, rel)
            if os.path.exists(path):
                cands.append(path)
    return cands + ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
