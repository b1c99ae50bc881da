"""Tiled matmul C = A @ B (bfloat16 / float16 in, float32 accumulation, rounded
once), batched over the grid's second axis with any strides (0 broadcasts).
Tiles are visited in groups of GROUP_M rows of tiles so that neighbouring
programs share A and B tiles in L2. ``matmul_tuned`` autotunes the tile
shape per (M, N, K) with pygpukit events (see driver.do_bench)."""

import triton
import triton.language as tl


@triton.jit
def matmul(A, B, C, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pm = first_m + (pid % per_group) % group_m
    pn = (pid % per_group) // group_m
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # rows and columns past the edge read row / column (index mod M or N): never stored. The
    # modulo keeps the offsets' contiguity visible to the compiler (vector loads, pipelining).
    am = rm % M
    bn = rn % N
    A += batch * sab  # the batch's matrices: a scalar step, so the tile offsets stay 32-bit
    B += batch * sbb
    a_ptrs = A + am[:, None] * sam + rk[None, :] * sak
    b_ptrs = B + rk[:, None] * sbk + bn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    c_ptrs = C + batch * scb + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _config(bm: int, bn: int, bk: int, stages: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=stages, num_warps=warps)


# Tile shapes for SM 80 / 90 tensor cores (Triton's matmul tutorial's set, plus two large ones for H100).
CONFIGS = [
    _config(128, 256, 64, 3, 8),
    _config(256, 128, 64, 3, 8),
    _config(128, 256, 64, 4, 8),
    _config(64, 256, 32, 4, 4),
    _config(128, 128, 64, 4, 8),
    _config(128, 128, 32, 4, 4),
    _config(128, 64, 32, 4, 4),
    _config(64, 128, 32, 4, 4),
    _config(64, 64, 32, 5, 2),
]

matmul_tuned = triton.autotune(configs=CONFIGS, key=["M", "N", "K"])(matmul)
