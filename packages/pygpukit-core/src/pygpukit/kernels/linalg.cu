// Reference matrix product for the core array API: C[b] = A[b] @ B[b] for
// contiguous row-major A (batch, M, K), B (batch, K, N), C (batch, M, N).
//
// A plain shared-memory tiled kernel: 16x16 output tiles, one output per
// thread, accumulated in TAcc with ordinary multiply-add (FP32 stays FP32:
// no tensor cores, no TF32). It is the correct, portable fallback; the gemm
// plugin registers the fast paths.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kTile = 16;

template <class TA, class TB, class TO, class TAcc>
__global__ void __launch_bounds__(kTile * kTile)
matmul_tiled(const TA* __restrict__ A, const TB* __restrict__ B, TO* __restrict__ C, long long M, long long N, long long K) {
  __shared__ TAcc sa[kTile][kTile];
  __shared__ TAcc sb[kTile][kTile + 1];
  const long long batch = blockIdx.z;
  A += batch * M * K;
  B += batch * K * N;
  C += batch * M * N;
  const long long row = (long long)blockIdx.y * kTile + threadIdx.y;
  const long long col = (long long)blockIdx.x * kTile + threadIdx.x;
  TAcc acc = TAcc(0);
  for (long long k0 = 0; k0 < K; k0 += kTile) {
    const long long ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    sa[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? cast<TAcc>(A[row * K + ka]) : TAcc(0);
    sb[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? cast<TAcc>(B[kb * N + col]) : TAcc(0);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = cast<TO>(acc);
}

}  // namespace pgk
