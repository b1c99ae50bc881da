"""The ``signature=`` string each kernel is built with (and so the packing of
every launch of it) agrees with the kernel's parameter list in its .cu
source: the same C types in the same order. No GPU and no NVRTC needed."""

import pytest

from pygpukit.jit.signature import find_signature
from pygpukit_nn import activations, attention, conv, embedding, norms, positional, sampling

KERNELS = {
    "norm_rows": lambda: norms._kernel("pgk::bfloat16", "float", 8, 2, 0, True, True, False, False, 256),
    "act_rows": lambda: activations._kernel("pgk::half", "pgk::Silu", True, 8),
    "embedding_gather": lambda: embedding.gather_kernel(16),
    "rope_inplace": lambda: positional.rope_kernel("pgk::bfloat16", 8, "neox"),
    "flash_fwd": lambda: attention._kernel(128, attention.CONFIGS[0], "pgk::bfloat16"),
    "flash_fwd_wgmma": lambda: attention._kernel(128, attention.WGMMA_CONFIGS[1], "pgk::bfloat16"),
    "flash_fwd_ws": lambda: attention._kernel(128, attention.WGMMA_CONFIGS[0], "pgk::bfloat16"),
    "im2col": lambda: conv._im2col_kernel("float"),
    "conv1d_depthwise": lambda: conv._depthwise_kernel("float", True),
    "pool1d": lambda: conv._pool_kernel("float", 1),
    "sample_rows": lambda: sampling._sample_kernel("float", True),
    "apply_penalties": lambda: sampling._penalties_kernel("float"),
    "token_counts": lambda: sampling._counts_kernel("int"),
}


def _codes(params):
    """Struct codes, pointers as P: what a launch packs."""
    return "".join(p.code for p in params)


@pytest.mark.parametrize("name", list(KERNELS))
def test_signature_matches_the_kernel_source(name):
    kern = KERNELS[name]()
    assert kern.func.partition("<")[0].rpartition("::")[2] == name
    declared = find_signature(kern.source, name)  # template types (T*, V*) are pointers all the same
    assert _codes(kern.params) == _codes(declared), (name, [p.ctype for p in declared])
    # scalars agree in type (signedness too); pointers agree as pointers (the signature says void*)
    assert [p.dtype for p in kern.params if not p.pointer] == [p.dtype for p in declared if not p.pointer]
