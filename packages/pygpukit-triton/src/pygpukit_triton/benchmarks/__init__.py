"""pygpukit-triton's suite of ``python -m pygpukit.benchmark``: ``triton_ops``
(triton_ops.py; registered in plugin.py, imported when it runs). tiny.py
holds the launch-overhead benchmark's kernel (it imports triton)."""
