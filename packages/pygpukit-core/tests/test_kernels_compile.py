"""Every built-in kernel template, with every dtype, compiles with NVRTC for
sm_80 and sm_90 (no GPU needed), through the same path as gp.jit."""

import pytest

from pygpukit import kernels
from pygpukit.jit import compiler
from pygpukit.kernels.catalog import instantiations

CHUNK = 256


@pytest.mark.parametrize("sm", [80, 90])
@pytest.mark.parametrize("name", kernels.SOURCES)
def test_builtin_kernels_compile(need_nvrtc, tmp_path, monkeypatch, name, sm):
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    exprs = instantiations()[name]
    if name == "elementwise" and sm == 80:
        # 2208 instantiations take ~4 min per architecture on two cores, and
        # the functors have no architecture-specific code: sm_90 compiles them
        # all, sm_80 an evenly spread eighth.
        exprs = exprs[::8]
    # programs of at most CHUNK names: one of all 2208 elementwise names took
    # 3.2 GB of memory in NVRTC (600 MB in chunks, and 12% less time)
    for i in range(0, len(exprs), CHUNK):
        part = exprs[i : i + CHUNK]
        binary = compiler.compile_source(kernels.source(name), part, sm, program_name=f"{name}.cu")
        assert binary.kind == "cubin" and binary.image[:4] == b"\x7fELF"
        assert set(binary.lowered) == set(part)
        assert all(v.startswith("_Z") for v in binary.lowered.values())
