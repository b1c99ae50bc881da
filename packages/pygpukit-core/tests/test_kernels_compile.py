"""Every built-in kernel template, with every dtype, compiles with NVRTC for
sm_80 and sm_90 (no GPU needed), through the same path as gp.jit."""

import pytest

from pygpukit import kernels
from pygpukit._backend.cuda import instantiations
from pygpukit.jit import compiler


@pytest.mark.parametrize("sm", [80, 90])
@pytest.mark.parametrize("name", kernels.SOURCES)
def test_builtin_kernels_compile(need_nvrtc, tmp_path, monkeypatch, name, sm):
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    exprs = instantiations()[name]
    binary = compiler.compile_source(kernels.source(name), exprs, sm, program_name=f"{name}.cu")
    assert binary.kind == "cubin" and binary.image[:4] == b"\x7fELF"
    assert set(binary.lowered) == set(exprs)
    assert all(v.startswith("_Z") for v in binary.lowered.values())
