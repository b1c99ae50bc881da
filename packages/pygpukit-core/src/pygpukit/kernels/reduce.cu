// Reductions: over all elements (two launches: partials, then final) and
// along axes (rows: reduce the contiguous innermost run; cols: reduce an
// outer run with the inner run contiguous, coalesced across threads).
//
// Ops are functors over the accumulator type; the identity comes from the
// host (`init`), so one template serves sum, prod, max, min, all, any.
// Accumulators: float for 8/16/32-bit floats, double for double, 64-bit
// integers for integers and bool (NumPy's sum/prod dtypes), the complex type
// itself for complex, int for all/any.
// all_partial: a fixed grid (a few blocks per SM) walks the array with
// vector loads; each thread keeps kAcc independent accumulators (more loads
// in flight, and a shorter sequential chain: the float error grows with the
// chain length, not with n); warp shuffles and shared memory reduce a block.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kReduceThreads = 512;
constexpr int kAcc = 4;

template <class T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }

struct Sum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct Prod { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; } };
// max/min propagate NaN, as NumPy's maximum.reduce does.
struct Max {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    return is_nan(a) ? a : (is_nan(b) ? b : (a > b ? a : b));
  }
};
struct Min {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    return is_nan(a) ? a : (is_nan(b) ? b : (a < b ? a : b));
  }
};
struct All { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return (a != 0) & (b != 0); } };
struct Any { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return (a != 0) | (b != 0); } };

// Converting an element to the accumulator: all/any look at truth values
// (NaN is true, as bool(nan) in Python).
template <class Op, class TAcc, class TI>
__device__ __forceinline__ TAcc load_acc(TI v) {
  if constexpr (is_same<Op, All>::value || is_same<Op, Any>::value) {
    if constexpr (is_small_float<TI>::value) {
      return static_cast<TAcc>(static_cast<float>(v) != 0.0f);  // NaN != 0 is true
    } else {
      return static_cast<TAcc>(v != TI(0));
    }
  } else {
    return cast<TAcc>(v);
  }
}

template <class Op, class T>
__device__ __forceinline__ T warp_reduce(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = Op()(v, shfl_xor(v, off));
  return v;
}

// Reduce across the block; the result is valid in thread 0.
template <class Op, class T>
__device__ __forceinline__ T block_reduce(T v, T init) {
  __shared__ T warp_partials[kReduceThreads / 32];
  v = warp_reduce<Op>(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x / 32) ? warp_partials[lane] : init;
  if (warp == 0) v = warp_reduce<Op>(v);
  return v;
}

template <class Op, class TI, class TAcc, int VEC>
__global__ void __launch_bounds__(kReduceThreads)
all_partial(const TI* __restrict__ x, TAcc* __restrict__ partials, long long n, TAcc init) {
  TAcc acc[kAcc];
#pragma unroll
  for (int k = 0; k < kAcc; ++k) acc[k] = init;
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
      for (int j = 0; j < VEC; ++j) acc[k] = Op()(acc[k], load_acc<Op, TAcc>(v[k].v[j]));
  }
  for (; i < nvec; i += stride) {
    Vec<TI, VEC> v = reinterpret_cast<const Vec<TI, VEC>*>(x)[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[0] = Op()(acc[0], load_acc<Op, TAcc>(v.v[j]));
  }
  // The n % VEC tail, taken by the first threads of block 0.
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * VEC) acc[1] = Op()(acc[1], load_acc<Op, TAcc>(x[nvec * VEC + threadIdx.x]));
  TAcc total = Op()(Op()(acc[0], acc[1]), Op()(acc[2], acc[3]));
  total = block_reduce<Op>(total, init);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <class Op, class TAcc, class TO>
__global__ void __launch_bounds__(kReduceThreads)
all_final(const TAcc* __restrict__ partials, TO* __restrict__ out, long long count, TAcc init) {
  TAcc acc = init;
  for (long long i = threadIdx.x; i < count; i += kReduceThreads) acc = Op()(acc, partials[i]);
  acc = block_reduce<Op>(acc, init);
  if (threadIdx.x == 0) *out = cast<TO>(acc);
}

// out[r] = reduce(x[r*K : (r+1)*K]) for M contiguous rows: one block per row,
// VEC elements per load (the host picks VEC > 1 only when every row start is
// 16-byte aligned and K is a multiple of VEC).
template <class Op, class TI, class TAcc, class TO, int VEC>
__global__ void __launch_bounds__(kReduceThreads)
reduce_rows(const TI* __restrict__ x, TO* __restrict__ out, long long M, long long K, TAcc init) {
  for (long long r = blockIdx.x; r < M; r += gridDim.x) {
    const Vec<TI, VEC>* row = reinterpret_cast<const Vec<TI, VEC>*>(x + r * K);
    TAcc acc = init;
    for (long long k = threadIdx.x; k < K / VEC; k += blockDim.x) {
      Vec<TI, VEC> v = row[k];
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc = Op()(acc, load_acc<Op, TAcc>(v.v[j]));
    }
    acc = block_reduce<Op>(acc, init);
    if (threadIdx.x == 0) out[r] = cast<TO>(acc);
    __syncthreads();  // warp_partials is reused by the next row
  }
}

// out[o*N + j] = reduce_k x[(o*K + k)*N + j]: reduce the middle axis of an
// (outer, K, N) contiguous array. A block is 32 columns x kColRows slices of
// K: threadIdx.x walks consecutive j (coalesced), threadIdx.y strides over K,
// and the kColRows partials of a column meet in shared memory.
constexpr int kColRows = 16;

template <class Op, class TI, class TAcc, class TO>
__global__ void __launch_bounds__(32 * kColRows)
reduce_cols(const TI* __restrict__ x, TO* __restrict__ out, long long outer, long long K, long long N, TAcc init) {
  __shared__ TAcc part[kColRows][33];
  const long long total = outer * N;
  for (long long base = (long long)blockIdx.x * 32; base < total; base += (long long)gridDim.x * 32) {
    const long long t = base + threadIdx.x;
    TAcc acc = init;
    if (t < total) {
      const long long o = t / N, j = t - o * N;
      const TI* p = x + o * K * N + j;
      for (long long k = threadIdx.y; k < K; k += kColRows) acc = Op()(acc, load_acc<Op, TAcc>(p[k * N]));
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && t < total) {
      TAcc r = part[0][threadIdx.x];
#pragma unroll
      for (int y = 1; y < kColRows; ++y) r = Op()(r, part[y][threadIdx.x]);
      out[t] = cast<TO>(r);
    }
    __syncthreads();
  }
}

// argmax (MAX=true) / argmin over contiguous rows: the first index of the
// extreme value; a NaN counts as the extreme (NumPy returns the first NaN).
template <bool MAX, class TC>
__device__ __forceinline__ bool better(TC a, long long ia, TC b, long long ib) {
  const bool na = is_nan(a), nb = is_nan(b);
  if (na || nb) return na && (!nb || ia < ib);
  if (a == b) return ia < ib;
  return MAX ? a > b : a < b;
}

// VEC elements per load (the host passes VEC > 1 only when K is a multiple of
// VEC and the rows are 16-byte aligned); kArgUnroll loads in flight per thread
// before their compares, which form a dependency chain. The tie rule in
// better() makes the visiting order irrelevant.
constexpr int kArgUnroll = 4;

template <bool MAX, class TI, class TC, int VEC>
__global__ void __launch_bounds__(kReduceThreads)
arg_reduce_rows(const TI* __restrict__ x, long long* __restrict__ out, long long M, long long K) {
  __shared__ TC s_val[kReduceThreads / 32];
  __shared__ long long s_idx[kReduceThreads / 32];
  for (long long r = blockIdx.x; r < M; r += gridDim.x) {
    const TI* row = x + r * K;
    TC best = cast<TC>(row[0]);
    long long bi = 0;
    const Vec<TI, VEC>* rv = reinterpret_cast<const Vec<TI, VEC>*>(row);
    const long long kv_n = K / VEC;
    for (long long kv = threadIdx.x; kv < kv_n; kv += (long long)blockDim.x * kArgUnroll) {
      Vec<TI, VEC> buf[kArgUnroll];
#pragma unroll
      for (int u = 0; u < kArgUnroll; ++u) {
        const long long i = kv + (long long)u * blockDim.x;
        if (i < kv_n) buf[u] = rv[i];
      }
#pragma unroll
      for (int u = 0; u < kArgUnroll; ++u) {
        const long long i = kv + (long long)u * blockDim.x;
        if (i < kv_n) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const TC v = cast<TC>(buf[u].v[e]);
            if (better<MAX>(v, i * VEC + e, best, bi)) { best = v; bi = i * VEC + e; }
          }
        }
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      TC ov = __shfl_xor_sync(0xffffffffu, best, off);
      long long oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (better<MAX>(ov, oi, best, bi)) { best = ov; bi = oi; }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { s_val[warp] = best; s_idx[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
      const int nw = blockDim.x / 32;
      best = lane < nw ? s_val[lane] : s_val[0];
      bi = lane < nw ? s_idx[lane] : s_idx[0];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        TC ov = __shfl_xor_sync(0xffffffffu, best, off);
        long long oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (better<MAX>(ov, oi, best, bi)) { best = ov; bi = oi; }
      }
      if (lane == 0) out[r] = bi;
    }
    __syncthreads();
  }
}

}  // namespace pgk
