// Gather along one axis: the kernel behind take(), take_along_axis() and
// integer-array indexing.
//
// The source is contiguous and viewed as (outer, axis_len, inner); out is
// (outer, n_idx, inner) with out[o, j, i] = a[o, idx[j], i] (take), or, when
// ALONG is true, idx has out's shape and out[o, j, i] = a[o, idx[o, j, i], i]
// (take_along_axis). Negative indices wrap once, as in NumPy; the host has
// checked the bounds. Each thread copies one element.
#include "pgk/types.cuh"

namespace pgk {

template <class T, class TIdx, bool ALONG>
__global__ void __launch_bounds__(256)
gather(const T* __restrict__ a, const TIdx* __restrict__ idx, T* __restrict__ out, long long n_out, long long n_idx,
       long long axis_len, long long inner) {
  for (long long t = (long long)blockIdx.x * 256 + threadIdx.x; t < n_out; t += (long long)gridDim.x * 256) {
    const long long i = t % inner;
    const long long rest = t / inner;
    const long long j = rest % n_idx;
    const long long o = rest / n_idx;
    long long k = (long long)idx[ALONG ? t : j];
    if (k < 0) k += axis_len;
    out[t] = a[(o * axis_len + k) * inner + i];
  }
}

// out[o, idx[j], i] = src[o, j, i]: the inverse of gather, for a[..., idx, ...] = v.
// With a repeated index one of its writes lands; which one is unspecified.
template <class T, class TIdx>
__global__ void __launch_bounds__(256)
scatter(const T* __restrict__ src, const TIdx* __restrict__ idx, T* __restrict__ out, long long n_src, long long n_idx,
        long long axis_len, long long inner) {
  for (long long t = (long long)blockIdx.x * 256 + threadIdx.x; t < n_src; t += (long long)gridDim.x * 256) {
    const long long i = t % inner;
    const long long rest = t / inner;
    const long long j = rest % n_idx;
    const long long o = rest / n_idx;
    long long k = (long long)idx[j];
    if (k < 0) k += axis_len;
    out[(o * axis_len + k) * inner + i] = src[t];
  }
}

}  // namespace pgk

namespace pgk {

// nonzero: for every i with csum[i] != csum[i-1] (csum is the inclusive
// cumulative count of true elements of a flattened C-order mask), write the
// multi-index of i into column csum[i]-1 of out (ndim rows of `count`).
struct Shape8 {
  long long ndim;
  long long dims[8];
};

__global__ void __launch_bounds__(256)
compact_nonzero(const long long* __restrict__ csum, long long* __restrict__ out, long long n, long long count, Shape8 shape) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
    const long long c = csum[i];
    if (c == (i ? csum[i - 1] : 0)) continue;
    long long rem = i;
    for (int d = (int)shape.ndim - 1; d >= 0; --d) {
      out[d * count + c - 1] = rem % shape.dims[d];
      rem /= shape.dims[d];
    }
  }
}

}  // namespace pgk
