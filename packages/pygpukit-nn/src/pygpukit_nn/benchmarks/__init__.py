"""pygpukit-nn's suites of ``python -m pygpukit.benchmark`` (registered in
plugin.py, imported when they run): nn_norms (norms.py), nn_rope (rope.py),
nn_sampling (sampling.py), nn_attention (attention.py), nn_decode
(decode.py) and nn_moe (moe.py); pygpukit.benchmark.peers gives the implementations to compare."""
