"""Every Triton kernel of the package compiles to a cubin for SM 90 (and SM 80)
with Triton's own compiler and ptxas, no GPU needed; matmul and attention use
the H100's warpgroup MMA and keep their loads software-pipelined (shared
memory for several stages). In a subprocess: the compiler needs the kernels
as @triton.jit functions, not the interpreter's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("need_triton")

SCRIPT = r"""
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from pygpukit_triton.kernels import attention, matmul, rope, rows

P = lambda t: "*" + t
C = "constexpr"

def build(fn, types, constexprs, arch, aligned=(), **options):
    sig = dict(zip(fn.arg_names, types))
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    return triton.compile(ASTSource(fn, sig, constexprs, attrs), target=GPUTarget("cuda", arch, 32), options=options)

for arch in (80, 90):
    for layer, res, w, b in ((False, False, True, False), (True, True, True, True), (False, True, False, False)):
        types = [P("bf16"), "i32", P("bf16") if res else C, "i32", P("bf16") if res else C, P("fp32") if w else C,
                 P("bf16") if b else C, P("bf16"), "i32", "i32", "fp32", C, C, C, C, C, C]
        ce = {(11,): layer, (12,): res, (13,): w, (14,): b, (15,): 1, (16,): 8192}
        ce.update({(i,): None for i, on in ((2, res), (4, res), (5, w), (6, b)) if not on})
        build(rows.norm_rows, types, ce, arch, num_warps=8)
    build(rows.softmax_rows, [P("fp16"), "i32", P("fp16"), "i32", "i32", C, C], {(5,): 4, (6,): 1024}, arch, num_warps=4)
    for act in (0, 1, 2):
        build(rows.act_rows, [P("fp32"), "i32", P("fp32"), "i32", P("fp32"), "i32", C, C, C], {(6,): act, (7,): True, (8,): 1024}, arch)
    for neox in (True, False):
        build(rope.rope_inplace, [P("bf16"), "i64", "i64", "i64", P("fp32"), P("i64"), "i32", "i32", "i32", "i32", "i32", "i32", C, C, C],
              {(12,): neox, (13,): 32, (14,): 64}, arch)
    mm_types = [P("bf16")] * 3 + ["i32"] * 3 + ["i32", "i32", C, "i32", "i32", C, "i32", "i32", C, C, C, C, C]
    for cfg in matmul.CONFIGS:
        k = build(matmul.matmul, mm_types, {(8,): 1, (11,): 1, (14,): 1, **{(15 + i,): v for i, v in enumerate(cfg.kwargs.values())}},
                  arch, aligned=(0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        if arch == 90 and cfg.kwargs["BLOCK_M"] == 128 and cfg.kwargs["BLOCK_N"] == 256 and cfg.num_stages == 3:
            assert "wgmma" in k.asm["ptx"], "matmul: no warpgroup MMA"
            assert k.metadata.shared >= 3 * (128 + 256) * 64 * 2, f"matmul: loads not pipelined ({k.metadata.shared} B shared)"
    for causal in (True, False):
        for d in (16, 32, 64, 128):
            k = build(attention.flash_fwd, [P("fp16")] * 4 + ["i32"] * 12 + ["i32"] * 4 + ["fp32", C, C, C, C],
                      {(21,): causal, (22,): d, (23,): 128, (24,): 64}, arch, aligned=tuple(range(20)),
                      num_warps=4 if d <= 64 else 8, num_stages=3)
            if arch == 90 and d == 128:
                assert "wgmma" in k.asm["ptx"], "attention: no warpgroup MMA"
print("OK")
"""


def test_every_kernel_compiles_for_sm80_and_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]
