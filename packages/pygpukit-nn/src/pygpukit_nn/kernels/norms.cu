// Row normalizations of pygpukit-nn (norms.py): RMSNorm, LayerNorm, each
// optionally fused with the residual add before it, and GroupNorm.
//
// A row (a token's hidden vector, or one (sample, group) of GroupNorm) is
// normalized by TPR = blockDim.x threads (a power of two, 1..1024);
// blockDim.y rows share a block. With NV > 0 the row lives in registers
// between the read and the write (NV vectors of VEC elements per thread): x
// (and the residual) are read once and the outputs written once, which is
// the floor for a memory-bound op. NV == 0 is the fallback for rows too long
// for registers (big GroupNorm groups): the row is read again per pass,
// mostly from L2.
//
// Statistics in float32: RMSNorm y = x * rsqrt(mean(x^2) + eps) * w;
// LayerNorm y = (x - mean) * rsqrt(mean((x - mean)^2) + eps) * w + b, the
// variance from the mean-subtracted values (two reductions, no cancellation).
// The fused residual add rounds h = x + residual to T first (h is the new
// residual stream, as Hugging Face models keep it) and normalizes h; each
// output is rounded once.
//
// GroupNorm (GROUP): a row is sample n's group g, (C / G) channels of L
// contiguous values each; the affine weight of element i is channel
// g * C / G + i / L. The host picks VEC dividing L so a vector stays in one
// channel.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kRms = 0, kLayer = 1;

// Sum of v over the threads of this row, in every thread. SLOT gives each
// call of a kernel its own shared scratch, so two reductions need no barrier
// between them.
template <int SLOT>
__device__ __forceinline__ float row_sum(float v) {
  const int tpr = blockDim.x;
  for (int off = (tpr < 32 ? tpr : 32) >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (tpr > 32) {  // blockDim.y == 1 then
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < (tpr >> 5) ? part[lane] : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  }
  return v;
}

// The affine weight (and bias) index of element i of row r.
template <bool GROUP>
__device__ __forceinline__ int channel(long long r, int i, int groups, int per_group, int chan_len) {
  if constexpr (GROUP) return (int)(r % groups) * per_group + i / chan_len;
  return i;
}

template <class T, class W, int VEC, int NV, int MODE, bool RESID, bool HAS_W, bool HAS_B, bool GROUP>
__global__ void __launch_bounds__(1024) norm_rows(const T* __restrict__ x, long long xs, const T* __restrict__ res, long long rs,
                                                  T* __restrict__ h_out, const W* __restrict__ w, const W* __restrict__ b,
                                                  T* __restrict__ y, long long rows, int n, int groups, int chan_len, float eps) {
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

  // One vector of the row as floats; with RESID, h = T(x + res) is also stored.
  auto load = [&](int k, float (&f)[VEC]) {
    const V a = xr[k];
    if constexpr (RESID) {
      const V c = resr[k];
      V hv;
#pragma unroll
      for (int j = 0; j < VEC; ++j) hv.v[j] = T((float)a.v[j] + (float)c.v[j]);
      hr[k] = hv;
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = (float)hv.v[j];
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = (float)a.v[j];
    }
  };
  auto store = [&](int k, const float (&f)[VEC], float mean, float rstd) {
    V o;
    const int c0 = channel<GROUP>(rr, k * VEC, groups, per_group, chan_len);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int c = GROUP ? c0 : c0 + j;
      float v = (f[j] - mean) * rstd;
      if constexpr (HAS_W) v *= (float)w[c];
      if constexpr (HAS_B) v += (float)b[c];
      o.v[j] = T(v);
    }
    yr[k] = o;
  };

  if constexpr (NV > 0) {
    float v[NV][VEC];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int k = threadIdx.x + i * tpr;
      if (live && k < nvec) {
        load(k, v[i]);
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += MODE == kRms ? v[i][j] * v[i][j] : v[i][j];
      }
    }
    s = row_sum<0>(s);
    float mean = 0.0f, rstd;
    if constexpr (MODE == kLayer) {
      mean = s * inv_n;
      float q = 0.0f;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (live && threadIdx.x + i * tpr < nvec) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) q += (v[i][j] - mean) * (v[i][j] - mean);
        }
      }
      rstd = rsqrtf(row_sum<1>(q) * inv_n + eps);
    } else {
      rstd = rsqrtf(s * inv_n + eps);
    }
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int k = threadIdx.x + i * tpr;
      if (live && k < nvec) store(k, v[i], mean, rstd);
    }
  } else {
    // Long rows: pass 1 reads x (and writes h), later passes read h (or x) again.
    const V* src = reinterpret_cast<const V*>(RESID ? h_out + rr * n : x + rr * xs);
    float f[VEC];
    float s = 0.0f;
    for (int k = threadIdx.x; live && k < nvec; k += tpr) {
      load(k, f);
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += MODE == kRms ? f[j] * f[j] : f[j];
    }
    s = row_sum<0>(s);
    float mean = 0.0f, rstd;
    auto read = [&](int k) {
      const V a = src[k];
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = (float)a.v[j];
    };
    if constexpr (MODE == kLayer) {
      mean = s * inv_n;
      float q = 0.0f;
      for (int k = threadIdx.x; live && k < nvec; k += tpr) {
        read(k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) q += (f[j] - mean) * (f[j] - mean);
      }
      rstd = rsqrtf(row_sum<1>(q) * inv_n + eps);
    } else {
      rstd = rsqrtf(s * inv_n + eps);
    }
    for (int k = threadIdx.x; live && k < nvec; k += tpr) {
      read(k);
      store(k, f, mean, rstd);
    }
  }
}

}  // namespace pgk
