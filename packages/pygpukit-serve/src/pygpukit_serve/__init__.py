"""An OpenAI-compatible server for PyGPUkit's LLMs.

A separately installed plugin package (it pulls in FastAPI and uvicorn, which
core and pygpukit-llm do not need). ``Engine`` (engine.py) serves one model
in-process: continuous batching over a paged KV cache whose blocks are shared
between requests with the same prompt prefix (blocks.py); ``create_app``
(api.py) puts engines behind ``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``, ``/health`` and ``/metrics``; ``pygpukit serve`` runs it.
"""

__version__ = "0.1.0"
