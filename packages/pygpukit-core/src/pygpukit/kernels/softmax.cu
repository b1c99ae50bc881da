// softmax, log_softmax and logsumexp along one axis (pygpukit.softmax).
//
// Every kernel reduces a row (or column) to the pair (m, s): m the maximum,
// s = sum(exp(x - m)). Pairs merge exactly: (m1, s1) + (m2, s2) =
// (m, s1 * exp(m1 - m) + s2 * exp(m2 - m)), so a row can be cut anywhere,
// each piece reduced alone, and the pieces merged by warp shuffles, shared
// memory or a second kernel ("online" softmax). Special values follow
// scipy.special: a NaN anywhere gives NaN; a row of -inf has m = -inf
// (logsumexp -inf, softmax and log_softmax NaN); a +inf gives m = +inf
// (logsumexp +inf, softmax NaN, log_softmax -inf except NaN at the +inf).
// s is only meaningful when m is finite; merges keep s = 0 otherwise.
//
// Kernels (TC: float, or double for double):
//   softmax_rows      rows short enough for registers: one read, one write.
//                     blockDim.x threads per row (a power of two, 1..512),
//                     blockDim.y rows per block; NV vectors of VEC elements
//                     per thread.
//   softmax_partial   long rows, pass 1: a pair per chunk of a row,
//   softmax_combine   the pairs of a row merged (logsumexp: the result),
//   softmax_finish    long rows, pass 2: read the chunk again and write.
//   softmax_cols      the reduced axis has contiguous axes after it: (outer,
//                     K, N), threads along N (coalesced), slices of K in y.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kSoftmax = 0, kLogSoftmax = 1, kLogSumExp = 2;
constexpr int kSplitThreads = 256;
constexpr int kSplitUnroll = 4;
constexpr int kColSlices = 8;

template <class T> __device__ __forceinline__ T sm_inf();
template <> __device__ __forceinline__ float sm_inf<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double sm_inf<double>() { return __longlong_as_double(0x7ff0000000000000LL); }
template <class T> __device__ __forceinline__ T sm_nan();
template <> __device__ __forceinline__ float sm_nan<float>() { return __int_as_float(0x7fc00000); }
template <> __device__ __forceinline__ double sm_nan<double>() { return __longlong_as_double(0x7ff8000000000000LL); }
__device__ __forceinline__ float sm_exp(float v) { return expf(v); }
__device__ __forceinline__ double sm_exp(double v) { return exp(v); }
__device__ __forceinline__ float sm_log(float v) { return logf(v); }
__device__ __forceinline__ double sm_log(double v) { return log(v); }

// Comparisons only (no arithmetic a compiler could fold): false for NaN and +-inf.
template <class T> __device__ __forceinline__ bool sm_finite(T v) { return v > -sm_inf<T>() && v < sm_inf<T>(); }
// max that propagates NaN (fmax would drop it).
template <class T> __device__ __forceinline__ T nan_max(T a, T b) { return (a > b || a != a) ? a : b; }

template <class T>
__device__ __forceinline__ void merge(T& m, T& s, T m2, T s2) {
  const T mn = nan_max(m, m2);
  s = sm_finite(mn) ? s * sm_exp(m - mn) + s2 * sm_exp(m2 - mn) : T(0);
  m = mn;
}

// The pair of N values (padding is -inf, which adds nothing).
template <class T, int N>
__device__ __forceinline__ void tile_pair(const T (&v)[N], T& m, T& s) {
  m = -sm_inf<T>();
#pragma unroll
  for (int i = 0; i < N; ++i) m = nan_max(m, v[i]);
  s = T(0);
  if (sm_finite(m)) {
#pragma unroll
    for (int i = 0; i < N; ++i) s += sm_exp(v[i] - m);
  }
}

// Merge the pairs of the tpr threads of a row: threads tpr*y .. tpr*y + tpr - 1
// of the block (tpr a power of two; rows of fewer than 32 threads share a
// warp). Every thread of the row gets the result. Call once per kernel: the
// shared arrays are not guarded for reuse.
template <class T>
__device__ __forceinline__ void row_merge(T& m, T& s, int tpr) {
  for (int off = (tpr < 32 ? tpr : 32) >> 1; off > 0; off >>= 1) {
    const T m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const T s2 = __shfl_xor_sync(0xffffffffu, s, off);
    merge(m, s, m2, s2);
  }
  if (tpr > 32) {  // uniform over the block (blockDim.x == tpr)
    __shared__ T wm[32], ws[32];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5, wpr = tpr >> 5;
    if (lane == 0) { wm[warp] = m; ws[warp] = s; }
    __syncthreads();
    const int first = warp - warp % wpr;
    m = lane < wpr ? wm[first + lane] : -sm_inf<T>();
    s = lane < wpr ? ws[first + lane] : T(0);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const T m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const T s2 = __shfl_xor_sync(0xffffffffu, s, off);
      merge(m, s, m2, s2);
    }
  }
}

template <class T> __device__ __forceinline__ T lse_value(T m, T s) { return sm_finite(m) ? m + sm_log(s) : m; }

// One output element of softmax (aux = 1 / s) or log_softmax (aux = log s).
template <int MODE, class T>
__device__ __forceinline__ T out_value(T v, T m, T aux) {
  if (MODE == kSoftmax) return sm_finite(m) ? sm_exp(v - m) * aux : sm_nan<T>();
  if (sm_finite(m)) return (v - m) - aux;
  return (m == sm_inf<T>() && v != m) ? -sm_inf<T>() : sm_nan<T>();
}

template <int MODE, class T> __device__ __forceinline__ T out_aux(T s) { return MODE == kSoftmax ? T(1) / s : sm_log(s); }

// Rows of K <= blockDim.x * NV * VEC elements, held in registers between the
// read and the write. The host picks VEC > 1 only when K % VEC == 0 and the
// array is 16-byte aligned.
template <class T, class TC, int MODE, int VEC, int NV>
__global__ void __launch_bounds__(512)
softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long M, long long K) {
  const int tpr = blockDim.x;
  const long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = r < M;
  const long long nvec = K / VEC;
  const Vec<T, VEC>* src = reinterpret_cast<const Vec<T, VEC>*>(x + (live ? r : 0) * K);
  TC v[NV * VEC];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const long long k = threadIdx.x + (long long)i * tpr;
    if (live && k < nvec) {
      const Vec<T, VEC> t = src[k];
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[i * VEC + j] = cast<TC>(t.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[i * VEC + j] = -sm_inf<TC>();
    }
  }
  TC m = -sm_inf<TC>();
#pragma unroll
  for (int e = 0; e < NV * VEC; ++e) m = nan_max(m, v[e]);
  const TC mt = m;
  const bool fin = sm_finite(mt);
  TC s = TC(0);
#pragma unroll
  for (int e = 0; e < NV * VEC; ++e) {
    const TC ev = fin ? sm_exp(v[e] - mt) : TC(0);
    s += ev;
    if (MODE == kSoftmax) v[e] = ev;  // kept: the write needs exp(x - m) = ev * exp(mt - m)
  }
  row_merge(m, s, tpr);
  if (!live) return;  // after the block's only __syncthreads
  if (MODE == kLogSumExp) {
    if (threadIdx.x == 0) y[r] = cast<T>(lse_value(m, s));
    return;
  }
  const TC aux = MODE == kSoftmax ? (sm_finite(m) ? sm_exp(mt - m) / s : sm_nan<TC>()) : sm_log(s);
  Vec<T, VEC>* dst = reinterpret_cast<Vec<T, VEC>*>(y + r * K);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const long long k = threadIdx.x + (long long)i * tpr;
    if (k < nvec) {
      Vec<T, VEC> t;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const TC val = v[i * VEC + j];
        t.v[j] = cast<T>(MODE == kSoftmax ? val * aux : out_value<kLogSoftmax>(val, m, aux));
      }
      dst[k] = t;
    }
  }
}

// Long rows: block b takes the vectors [c * cv, min((c + 1) * cv, K / VEC))
// of row b / C (c = b % C).
__device__ __forceinline__ void chunk_of(long long K, int vec, long long C, long long cv, long long& r, long long& lo, long long& hi) {
  const long long b = blockIdx.x;
  r = b / C;
  lo = (b - r * C) * cv;
  const long long nvec = K / vec;
  hi = lo + cv < nvec ? lo + cv : nvec;
}

template <class T, class TC, int VEC>
__global__ void __launch_bounds__(kSplitThreads)
softmax_partial(const T* __restrict__ x, TC* __restrict__ part, long long K, long long C, long long cv) {
  long long r, lo, hi;
  chunk_of(K, VEC, C, cv, r, lo, hi);
  const Vec<T, VEC>* src = reinterpret_cast<const Vec<T, VEC>*>(x + r * K);
  TC m = -sm_inf<TC>(), s = TC(0);
  for (long long k = lo + threadIdx.x; k < hi; k += kSplitThreads * kSplitUnroll) {
    TC v[kSplitUnroll * VEC];
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const long long kk = k + (long long)u * kSplitThreads;
      if (kk < hi) {
        const Vec<T, VEC> t = src[kk];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[u * VEC + j] = cast<TC>(t.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[u * VEC + j] = -sm_inf<TC>();
      }
    }
    TC tm, ts;
    tile_pair(v, tm, ts);
    merge(m, s, tm, ts);
  }
  row_merge(m, s, kSplitThreads);
  if (threadIdx.x == 0) {
    part[2 * (long long)blockIdx.x] = m;
    part[2 * (long long)blockIdx.x + 1] = s;
  }
}

// One block per row merges its C pairs: logsumexp writes out[r], the others
// write the row's pair to stats[2r], stats[2r + 1].
template <class TC, class TO, int MODE>
__global__ void __launch_bounds__(kSplitThreads)
softmax_combine(const TC* __restrict__ part, TO* __restrict__ out, TC* __restrict__ stats, long long C) {
  const long long r = blockIdx.x;
  TC m = -sm_inf<TC>(), s = TC(0);
  for (long long j = threadIdx.x; j < C; j += kSplitThreads) merge(m, s, part[2 * (r * C + j)], part[2 * (r * C + j) + 1]);
  row_merge(m, s, kSplitThreads);
  if (threadIdx.x == 0) {
    if (MODE == kLogSumExp) {
      out[r] = cast<TO>(lse_value(m, s));
    } else {
      stats[2 * r] = m;
      stats[2 * r + 1] = s;
    }
  }
}

template <class T, class TC, int MODE, int VEC>
__global__ void __launch_bounds__(kSplitThreads)
softmax_finish(const T* __restrict__ x, T* __restrict__ y, const TC* __restrict__ stats, long long K, long long C, long long cv) {
  long long r, lo, hi;
  chunk_of(K, VEC, C, cv, r, lo, hi);
  const TC m = stats[2 * r];
  const TC aux = out_aux<MODE>(stats[2 * r + 1]);
  const Vec<T, VEC>* src = reinterpret_cast<const Vec<T, VEC>*>(x + r * K);
  Vec<T, VEC>* dst = reinterpret_cast<Vec<T, VEC>*>(y + r * K);
  for (long long k = lo + threadIdx.x; k < hi; k += kSplitThreads * kSplitUnroll) {
    Vec<T, VEC> t[kSplitUnroll];
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const long long kk = k + (long long)u * kSplitThreads;
      if (kk < hi) t[u] = src[kk];
    }
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const long long kk = k + (long long)u * kSplitThreads;
      if (kk < hi) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) t[u].v[j] = cast<T>(out_value<MODE>(cast<TC>(t[u].v[j]), m, aux));
        dst[kk] = t[u];
      }
    }
  }
}

// Reduce the middle axis of a contiguous (outer, K, N) array: a block is 32
// consecutive columns (o, j) x kColSlices slices of K; the slices' pairs meet
// in shared memory, then each thread writes its slice (a second read).
template <class T, class TC, int MODE>
__global__ void __launch_bounds__(32 * kColSlices)
softmax_cols(const T* __restrict__ x, T* __restrict__ y, long long outer, long long K, long long N) {
  __shared__ TC sm[kColSlices][33], ss[kColSlices][33];
  const long long total = outer * N;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (long long base = (long long)blockIdx.x * 32; base < total; base += (long long)gridDim.x * 32) {
    const long long t = base + tx;
    const bool live = t < total;
    const long long o = live ? t / N : 0, j = live ? t - o * N : 0;
    const T* p = x + o * K * N + j;
    TC m = -sm_inf<TC>(), s = TC(0);
    if (live) {
      for (long long k = ty; k < K; k += kColSlices * 4) {
        TC v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const long long kk = k + (long long)u * kColSlices;
          v[u] = kk < K ? cast<TC>(p[kk * N]) : -sm_inf<TC>();
        }
        TC tm, ts;
        tile_pair(v, tm, ts);
        merge(m, s, tm, ts);
      }
    }
    sm[ty][tx] = m;
    ss[ty][tx] = s;
    __syncthreads();
    if (ty == 0) {
#pragma unroll
      for (int q = 1; q < kColSlices; ++q) merge(m, s, sm[q][tx], ss[q][tx]);
      sm[0][tx] = m;
      ss[0][tx] = s;
    }
    __syncthreads();
    m = sm[0][tx];
    s = ss[0][tx];
    if (live) {
      if (MODE == kLogSumExp) {
        if (ty == 0) y[t] = cast<T>(lse_value(m, s));
      } else {
        const TC aux = out_aux<MODE>(s);
        T* q = y + o * K * N + j;
        for (long long k = ty; k < K; k += kColSlices) q[k * N] = cast<T>(out_value<MODE>(cast<TC>(p[k * N]), m, aux));
      }
    }
    __syncthreads();  // sm/ss are reused by the next group of columns
  }
}

}  // namespace pgk
