"""``python -m pygpukit.benchmark``: measured side by side with PyTorch and CuPy when installed."""

from .harness import Record, Recorder, compare, ratios, table, write_json

__all__ = ["Record", "Recorder", "compare", "ratios", "table", "write_json"]
