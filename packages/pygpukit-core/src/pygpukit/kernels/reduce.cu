// Reductions over all elements of a contiguous array.
//
// sum_partial: a fixed grid (a few blocks per SM) walks the array with
// vector loads; each thread keeps kAcc independent accumulators (more loads
// in flight, and a shorter sequential chain: the float error grows with the
// chain length, not with n), then warp shuffles and shared memory reduce the
// block to one partial. sum_final reduces the partials in one block the
// same way. Accumulators: float for 8/16/32-bit floats, double for double,
// 64-bit integers for integers and bool (NumPy's sum dtypes).
#include "pgk/types.cuh"

namespace pgk {

constexpr int kReduceThreads = 512;
constexpr int kAcc = 4;

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <class T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T warp_partials[kReduceThreads / 32];
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? warp_partials[lane] : T(0);
  if (warp == 0) v = warp_sum(v);
  return v;
}

template <class TI, class TAcc, int VEC>
__global__ void __launch_bounds__(kReduceThreads)
sum_partial(const TI* __restrict__ x, TAcc* __restrict__ partials, long long n) {
  TAcc acc[kAcc];
#pragma unroll
  for (int k = 0; k < kAcc; ++k) acc[k] = TAcc(0);
  const long long nvec = n / VEC;
  const long long stride = (long long)gridDim.x * kReduceThreads;
  long long i = (long long)blockIdx.x * kReduceThreads + threadIdx.x;
  for (; i + (kAcc - 1) * stride < nvec; i += kAcc * stride) {
    Vec<TI, VEC> v[kAcc];
#pragma unroll
    for (int k = 0; k < kAcc; ++k) v[k] = reinterpret_cast<const Vec<TI, VEC>*>(x)[i + k * stride];
#pragma unroll
    for (int k = 0; k < kAcc; ++k)
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[k] += cast<TAcc>(v[k].v[j]);
  }
  for (; i < nvec; i += stride) {
    Vec<TI, VEC> v = reinterpret_cast<const Vec<TI, VEC>*>(x)[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[0] += cast<TAcc>(v.v[j]);
  }
  // The n % VEC tail, taken by the first threads of block 0.
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * VEC) acc[1] += cast<TAcc>(x[nvec * VEC + threadIdx.x]);
  TAcc total = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  total = block_sum(total);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <class TAcc, class TO>
__global__ void __launch_bounds__(kReduceThreads)
sum_final(const TAcc* __restrict__ partials, TO* __restrict__ out, int count) {
  TAcc acc = TAcc(0);
  for (int i = threadIdx.x; i < count; i += kReduceThreads) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = cast<TO>(acc);
}

}  // namespace pgk
