// Decode GEMV with quantized weights (W8A16 / W4A16): y[m, n] =
// sum_k x[m, k] * q[n, k] * s[n, k / G] for M <= 8 rows of activations.
//
// Weights are in the layout of a Linear weight, row n of W contiguous:
//   int8: q int8 [N, K];
//   int4: q uint8 [N, K / 2], k even in the low nibble, k odd in the high one,
//         each nibble the value + 8 (values -8..7);
//   scales: half [N, K / G], symmetric (no zero point).
// One warp computes one output column n for all M rows: each lane reads 16
// bytes of weights per step (16 int8 or 32 int4 values, inside one group since
// G is a multiple of 32), the matching activations (cached in L1/L2: every
// warp reads the same x), accumulates q * x in float, and applies the group's
// scale once per step. Two steps are loaded before either is used, for more
// bytes in flight. The warp's partial sums meet by shuffles; lane 0 writes.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kWarps = 8;  // warps (output columns) per block

template <class T>
__device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }

// 8 activations (16 bytes) of row m starting at k.
template <class TX>
__device__ __forceinline__ void load_x8(const TX* __restrict__ x, long long k, float (&out)[8]) {
  const Vec<TX, 8> v = *reinterpret_cast<const Vec<TX, 8>*>(x + k);
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = to_f(v.v[j]);
}

template <int M, bool INT4, class TX>
__global__ void __launch_bounds__(kWarps * 32)
gemv_q(const TX* __restrict__ x, const unsigned char* __restrict__ q, const half* __restrict__ scales,
       TX* __restrict__ y, int N, int K, int G) {
  constexpr int PER = INT4 ? 32 : 16;  // weights per 16-byte load
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= N) return;
  const long long row_bytes = INT4 ? K / 2 : K;
  const uint4* __restrict__ wrow = reinterpret_cast<const uint4*>(q + (long long)n * row_bytes);
  const half* __restrict__ srow = scales + (long long)n * (K / G);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  const int steps = K / PER;  // K is a multiple of G, G of PER
  for (int s0 = lane; s0 < steps; s0 += 64) {
    uint4 w[2];
    w[0] = wrow[s0];
    const bool second = s0 + 32 < steps;
    if (second) w[1] = wrow[s0 + 32];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (u == 1 && !second) break;
      const int s = s0 + u * 32;
      const long long k0 = (long long)s * PER;
      const float scale = static_cast<float>(srow[k0 / G]);
      const unsigned int words[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
      float wv[PER];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (INT4) {
#pragma unroll
          for (int j = 0; j < 8; ++j) wv[i * 8 + j] = (float)((int)((words[i] >> (4 * j)) & 0xF) - 8);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) wv[i * 4 + j] = (float)(signed char)((words[i] >> (8 * j)) & 0xFF);
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float part = 0.0f;
#pragma unroll
        for (int c = 0; c < PER / 8; ++c) {
          float xv[8];
          load_x8(x + (long long)m * K, k0 + c * 8, xv);
#pragma unroll
          for (int j = 0; j < 8; ++j) part = fmaf(wv[c * 8 + j], xv[j], part);
        }
        acc[m] = fmaf(part, scale, acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) y[(long long)m * N + n] = TX(v);
  }
}

}  // namespace pgk
