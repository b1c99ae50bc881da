// Row normalizations of pygpukit-nn (norms.py): RMSNorm, LayerNorm, each
// optionally fused with the residual add before it, and GroupNorm.
//
// A row (a token's hidden vector, or one (sample, group) of GroupNorm) is
// normalized by TPR = blockDim.x threads (a power of two, 1..1024);
// blockDim.y rows share a block. With NV > 0 the row lives in registers
// between the read and the write (NV vectors of VEC elements per thread): x
// (and the residual) are read once and the outputs written once, which is
// the floor for a memory-bound op. The row is kept as loaded (T, exact: x,
// or h already rounded to T), not widened to float: half the registers for
// 16-bit types, so LayerNorm's 512-thread blocks fit four to an SM (at 40
// float registers, three) and long rows do not spill. NV == 0 is the
// fallback for rows too long for registers (big GroupNorm groups): the row
// is read again per pass, mostly from L2.
//
// Statistics in float32: RMSNorm y = x * rsqrt(mean(x^2) + eps) * w;
// LayerNorm y = (x - mean) * rsqrt(var + eps) * w + b with mean and var from
// one reduction of the sums of d = x - K and d^2, K the row's first value:
// the shift keeps the sums near the spread of the row, not its offset (a row
// of 1000 + N(0, 1) loses nothing to cancellation), and one reduction is one
// barrier per row, which the memory-bound loop cannot hide twice.
// The fused residual add rounds h = x + residual to T first (h is the new
// residual stream, as Hugging Face models keep it) and normalizes h; each
// output is rounded once.
//
// GroupNorm (GROUP): a row is sample n's group g, (C / G) channels of L
// contiguous values each; the affine weight of element i is channel
// g * C / G + i / L. The host picks VEC dividing L so a vector stays in one
// channel.
#include "pgk/types.cuh"
#include "pgk/pdl.cuh"

namespace pgk {

constexpr int kRms = 0, kLayer = 1;

// Sums of a and b over the threads of this row, in every thread.
__device__ __forceinline__ void row_sum(float& a, float& b) {
  const int tpr = blockDim.x;
  for (int off = (tpr < 32 ? tpr : 32) >> 1; off > 0; off >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
  if (tpr > 32) {  // blockDim.y == 1 then
    __shared__ float pa[32], pb[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { pa[warp] = a; pb[warp] = b; }
    __syncthreads();
    a = lane < (tpr >> 5) ? pa[lane] : 0.0f;
    b = lane < (tpr >> 5) ? pb[lane] : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, off);
      b += __shfl_xor_sync(0xffffffffu, b, off);
    }
  }
}

// THREADS: the block size the host launches with; bounding the kernel by it
// (not by 1024) leaves the registers a short block may use unspilled.
template <class T, class W, int VEC, int NV, int MODE, bool RESID, bool HAS_W, bool HAS_B, bool GROUP, int THREADS>
__global__ void __launch_bounds__(THREADS) norm_rows(const T* __restrict__ x, long long xs, const T* __restrict__ res, long long rs,
                                                  T* __restrict__ h_out, const W* __restrict__ w, const W* __restrict__ b,
                                                  T* __restrict__ y, long long rows, int n, int groups, int chan_len, float eps) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  using V = Vec<T, VEC>;
  const int tpr = blockDim.x;
  const long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = r < rows;  // dead threads still join the reductions
  const long long rr = live ? r : 0;
  const V* xr = reinterpret_cast<const V*>(x + rr * xs);
  const V* resr = reinterpret_cast<const V*>(RESID ? res + rr * rs : x);
  V* hr = reinterpret_cast<V*>(RESID ? h_out + rr * n : y);
  V* yr = reinterpret_cast<V*>(y + rr * n);
  const int nvec = n / VEC;
  const int per_group = GROUP ? n / chan_len : 0;
  const float inv_n = 1.0f / (float)n;
  // The shift K: the row's first value (h's, with RESID), the same in every thread.
  float shift = 0.0f;
  if constexpr (MODE == kLayer) {
    shift = (float)x[rr * xs];
    if constexpr (RESID) shift = (float)T(shift + (float)res[rr * rs]);
  }

  // One vector of the row: x, or with RESID h = T(x + res), also stored.
  // Returned opaque (below): converted to float where used, never kept so.
  auto load = [&](int k) -> V {
    V a = xr[k];
    if constexpr (RESID) {
      const V c = resr[k];
#pragma unroll
      for (int j = 0; j < VEC; ++j) a.v[j] = T((float)a.v[j] + (float)c.v[j]);
      hr[k] = a;
    }
    opaque(a);
    return a;
  };
  // The sums of d = v - shift and d^2 over one vector.
  auto accumulate = [&](const V& a, float& s1, float& s2) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float d = (float)a.v[j] - shift;
      s1 += d;
      s2 += d * d;
    }
  };
  // Weights and biases: one vector per output vector (the host aligns them to
  // VEC elements of W), or one value per vector in GroupNorm (a vector is in one channel).
  auto store = [&](int k, const V& a, float mean, float rstd) {  // mean: of a - shift
    float wv[VEC], bv[VEC];
    if constexpr (GROUP) {
      const int c = (int)(rr % groups) * per_group + k * VEC / chan_len;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        wv[j] = HAS_W ? (float)w[c] : 1.0f;
        bv[j] = HAS_B ? (float)b[c] : 0.0f;
      }
    } else {
      if constexpr (HAS_W) {
        const Vec<W, VEC> t = reinterpret_cast<const Vec<W, VEC>*>(w)[k];
#pragma unroll
        for (int j = 0; j < VEC; ++j) wv[j] = (float)t.v[j];
      }
      if constexpr (HAS_B) {
        const Vec<W, VEC> t = reinterpret_cast<const Vec<W, VEC>*>(b)[k];
#pragma unroll
        for (int j = 0; j < VEC; ++j) bv[j] = (float)t.v[j];
      }
    }
    V o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float v = (((float)a.v[j] - shift) - mean) * rstd;  // a - shift is exact near the row's offset
      if constexpr (HAS_W) v *= wv[j];
      if constexpr (HAS_B) v += bv[j];
      o.v[j] = T(v);
    }
    yr[k] = o;
  };

  // The mean of d = v - shift and rstd, from the sums of d and d^2.
  auto stats = [&](float s1, float s2, float& mean, float& rstd) {
    row_sum(s1, s2);
    if constexpr (MODE == kLayer) {
      mean = s1 * inv_n;
      rstd = rsqrtf(fmaxf(s2 * inv_n - mean * mean, 0.0f) + eps);
    } else {
      mean = 0.0f;
      rstd = rsqrtf(s2 * inv_n + eps);
    }
  };

  if constexpr (NV > 0) {
    V v[NV];
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int k = threadIdx.x + i * tpr;
      if (live && k < nvec) {
        v[i] = load(k);
        accumulate(v[i], s1, s2);
      }
    }
    float mean, rstd;
    stats(s1, s2, mean, rstd);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int k = threadIdx.x + i * tpr;
      opaque(v[i]);
      if (live && k < nvec) store(k, v[i], mean, rstd);
    }
  } else {
    // Long rows: pass 1 reads x (and writes h), pass 2 reads h (or x) again.
    const V* src = reinterpret_cast<const V*>(RESID ? h_out + rr * n : x + rr * xs);
    float s1 = 0.0f, s2 = 0.0f;
    for (int k = threadIdx.x; live && k < nvec; k += tpr) accumulate(load(k), s1, s2);
    float mean, rstd;
    stats(s1, s2, mean, rstd);
    for (int k = threadIdx.x; live && k < nvec; k += tpr) store(k, src[k], mean, rstd);
  }
}

}  // namespace pgk
