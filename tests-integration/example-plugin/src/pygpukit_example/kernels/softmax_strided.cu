// softmax and log_softmax along the last axis of a row-strided array
// (pygpukit_example.softmax): row r starts at x + r * ld and its k elements
// are adjacent, as in a slice a[:, :k] of a wider array, every other row
// a[::2], or rows broadcast from one (ld = 0). pygpukit's own softmax copies
// such an array to a contiguous one before its row kernel; here one warp
// reads its row once where it lies, keeps it in registers (NV vectors of VEC
// elements per lane: k <= 32 * NV * VEC <= 1024) and writes the C-contiguous
// result: one launch instead of two, half the memory traffic.
//
// Special values as pygpukit's softmax (scipy.special): a NaN in a row gives
// NaN; a row of -inf gives NaN; a +inf gives softmax NaN and log_softmax -inf
// (NaN at the +inf itself).
#include "pgk/types.cuh"

using pgk::cast;
using pgk::Vec;

constexpr int kRowsPerBlock = 8;  // warps per block, a row each

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }
// Comparisons only: false for NaN and +-inf.
__device__ __forceinline__ bool is_finite(float v) { return v > -pos_inf() && v < pos_inf(); }
// A max that keeps NaN (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

template <class T, int LOG, int VEC, int NV>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
softmax_strided(const T* __restrict__ x, T* __restrict__ y, long long rows, int k, long long ld) {
  const long long r = (long long)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps leave: the shuffles below run on full warps
  const int lane = threadIdx.x & 31;
  const int nvec = k / VEC;
  const Vec<T, VEC>* src = reinterpret_cast<const Vec<T, VEC>*>(x + r * ld);
  float v[NV * VEC];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = lane + 32 * i;
    if (c < nvec) {
      const Vec<T, VEC> t = src[c];
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[i * VEC + j] = cast<float>(t.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[i * VEC + j] = -pos_inf();  // padding: adds nothing
    }
  }
  float m = -pos_inf();
#pragma unroll
  for (int e = 0; e < NV * VEC; ++e) m = nan_max(m, v[e]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, off));
  const bool fin = is_finite(m);
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < NV * VEC; ++e) {
    const float ev = fin ? expf(v[e] - m) : 0.f;
    s += ev;
    if (!LOG) v[e] = ev;  // softmax writes ev / s: keep it rather than the input
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  const float aux = LOG ? logf(s) : 1.f / s;
  Vec<T, VEC>* dst = reinterpret_cast<Vec<T, VEC>*>(y + r * k);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = lane + 32 * i;
    if (c < nvec) {
      Vec<T, VEC> t;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float val = v[i * VEC + j];
        float o;
        if (!LOG) o = fin ? val * aux : quiet_nan();
        else if (fin) o = (val - m) - aux;
        else o = (m == pos_inf() && val != m) ? -pos_inf() : quiet_nan();
        t.v[j] = cast<T>(o);
      }
      dst[c] = t;
    }
  }
}
