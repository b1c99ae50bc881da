// Inclusive scans (cumsum, cumprod) along contiguous rows: out[r, k] =
// op(x[r, 0..k]). One block per row walks it in chunks of blockDim.x
// elements; each chunk is scanned with warp shuffles and a scan of the warp
// totals in shared memory, then offset by the carry of the chunks before.
// Accumulation in TAcc (float32 for 8/16/32-bit floats, as the reductions;
// complex in its own type).
#include "pgk/types.cuh"

namespace pgk {

constexpr int kScanThreads = 256;

struct ScanSum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct ScanProd { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; } };

template <class Op, class TI, class TAcc, class TO>
__global__ void __launch_bounds__(kScanThreads)
scan_rows(const TI* __restrict__ x, TO* __restrict__ out, long long M, long long K, TAcc identity) {
  __shared__ TAcc warp_totals[kScanThreads / 32];
  __shared__ TAcc carry_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long r = blockIdx.x; r < M; r += gridDim.x) {
    const TI* row = x + r * K;
    TO* orow = out + r * K;
    if (threadIdx.x == 0) carry_s = identity;
    __syncthreads();
    for (long long base = 0; base < K; base += kScanThreads) {
      const long long k = base + threadIdx.x;
      TAcc v = k < K ? cast<TAcc>(row[k]) : identity;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        TAcc u = shfl_up(v, off);
        if (lane >= off) v = Op()(u, v);
      }
      if (lane == 31) warp_totals[warp] = v;
      __syncthreads();
      if (warp == 0) {
        TAcc t = lane < kScanThreads / 32 ? warp_totals[lane] : identity;
#pragma unroll
        for (int off = 1; off < kScanThreads / 32; off <<= 1) {
          TAcc u = shfl_up(t, off);
          if (lane >= off) t = Op()(u, t);
        }
        if (lane < kScanThreads / 32) warp_totals[lane] = t;  // inclusive scan of the warp totals
      }
      __syncthreads();
      const TAcc before = warp > 0 ? warp_totals[warp - 1] : identity;
      const TAcc carry = carry_s;
      v = Op()(carry, Op()(before, v));
      if (k < K) orow[k] = cast<TO>(v);
      __syncthreads();  // everyone has read carry_s and warp_totals
      if (threadIdx.x == kScanThreads - 1) carry_s = v;
      __syncthreads();
    }
  }
}

}  // namespace pgk
