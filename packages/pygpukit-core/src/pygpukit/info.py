"""``gp.info()``: what pygpukit runs on, in one object that prints as a report."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import _runtime
from ._units import format_bytes
from ._version import __version__
from .jit import cache, nvrtc


@dataclass(frozen=True)
class Info:
    version: str
    backend: str
    fallback_reason: str | None
    device_name: str | None
    sm: str | None
    multiprocessors: int | None
    total_memory: int | None
    free_memory: int | None
    driver_version: str | None
    nvrtc_version: str | None
    nvrtc_path: str | None
    nvrtc_source: str | None
    cache_dir: str

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        rows = [("pygpukit", self.version), ("backend", self.backend)]
        if self.fallback_reason:
            rows.append(("fallback reason", self.fallback_reason))
        if self.backend == "cuda":
            rows += [
                ("device", f"{self.device_name} (sm_{self.sm}, {self.multiprocessors} SMs)"),
                ("memory", f"{format_bytes(self.free_memory or 0)} free of {format_bytes(self.total_memory or 0)}"),
                ("driver", f"CUDA {self.driver_version}"),
            ]
        rows += [
            (
                "nvrtc",
                f"{self.nvrtc_version} from {self.nvrtc_source}: {self.nvrtc_path}"
                if self.nvrtc_path
                else "not found (pip install nvidia-cuda-nvrtc)",
            ),
            ("kernel cache", self.cache_dir),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)} : {v}" for k, v in rows)


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def info() -> Info:
    rt = _runtime.get()
    try:
        nv = nvrtc.load()
        nv_version, nv_path, nv_source = "%d.%d" % nv.version, nv.path, nv.source
    except Exception:
        nv_version = nv_path = nv_source = None  # type: ignore[assignment]
    if rt.backend == "cuda":
        p = rt.props
        free, total = rt.native.mem_get_info()
        return Info(
            __version__, "cuda", None, p["name"], str(rt.sm), p["multiprocessor_count"], total, free,
            _cuda_version(rt.native.driver_version()), nv_version, nv_path, nv_source, cache.cache_dir(),
        )  # fmt: skip
    return Info(__version__, "cpu", rt.reason, None, None, None, None, None, None, nv_version, nv_path, nv_source, cache.cache_dir())
