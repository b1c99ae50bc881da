"""pygpukit-serve's suite of ``python -m pygpukit.benchmark`` (registered in
plugin.py, imported when it runs): serve (serve.py), a load generator
against the in-process Engine, beside pygpukit-llm's static-batch generate."""
