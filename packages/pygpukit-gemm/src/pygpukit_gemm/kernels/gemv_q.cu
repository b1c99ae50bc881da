// Decode GEMV with quantized weights (W8A16 / W4A16): y[m, n] =
// sum_k x[m, k] * q[n, k] * s[n, k / G] for M <= 8 rows of activations.
//
// Weights are in the layout of a Linear weight, row n of W contiguous:
//   int8: q int8 [N, K];
//   int4: q uint8 [N, K / 2], k even in the low nibble, k odd in the high one,
//         each nibble the value + 8 (values -8..7);
//   scales: half [N, K / G], symmetric (no zero point).
//
// A warp computes NC output columns for all M rows. Per step each lane reads
// 16 bytes of every column's weights (16 int8 or 32 int4 values, inside one
// group since G is a multiple of 32): NC independent 16-byte loads in flight.
// Integers become floats without I2F (a quarter-rate instruction): a byte b
// placed under the exponent of 2^23 by one PRMT is the float 2^23 + b, and one
// FADD takes the offset (2^23 + 128 for int8 read as b ^ 0x80, 2^23 + 8 for
// int4). Each column's chunk is converted once and multiplied with every
// row's activations (L1-cached: every warp reads the same x), the group
// scale applied once per chunk; the warp's partial sums meet by shuffles.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kWarps = 4;  // warps per block
constexpr int kCols = 4;   // output columns per warp

template <class T>
__device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }

// 8 activations (16 bytes of TX = 2-byte floats; two loads for float) from k.
template <class TX>
__device__ __forceinline__ void load_x8(const TX* __restrict__ x, long long k, float (&out)[8]) {
  if constexpr (sizeof(TX) == 2) {
    const Vec<TX, 8> v = *reinterpret_cast<const Vec<TX, 8>*>(x + k);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = to_f(v.v[j]);
  } else {
    const Vec<TX, 4> a = *reinterpret_cast<const Vec<TX, 4>*>(x + k);
    const Vec<TX, 4> b = *reinterpret_cast<const Vec<TX, 4>*>(x + k + 4);
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = to_f(a.v[j]), out[4 + j] = to_f(b.v[j]);
  }
}

// Byte j of w as the float 2^23 + byte.
__device__ __forceinline__ float byte_as_float(unsigned int w, int j) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u + j));
}

// The 16-byte chunk's PER values as floats, minus the storage offset.
template <bool INT4>
__device__ __forceinline__ void unpack(const uint4& c, float (&out)[INT4 ? 32 : 16]) {
  const unsigned int words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (INT4) {
      const unsigned int lo = words[i] & 0x0F0F0F0Fu, hi = (words[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[i * 8 + 2 * j] = byte_as_float(lo, j) - 8388616.0f;  // 2^23 + 8
        out[i * 8 + 2 * j + 1] = byte_as_float(hi, j) - 8388616.0f;
      }
    } else {
      const unsigned int u = words[i] ^ 0x80808080u;  // signed byte b as b + 128
#pragma unroll
      for (int j = 0; j < 4; ++j) out[i * 4 + j] = byte_as_float(u, j) - 8388736.0f;  // 2^23 + 128
    }
  }
}

template <int M, bool INT4, class TX>
__global__ void __launch_bounds__(kWarps * 32)
gemv_q(const TX* __restrict__ x, const unsigned char* __restrict__ q, const half* __restrict__ scales,
       TX* __restrict__ y, int N, int K, int G) {
  constexpr int PER = INT4 ? 32 : 16;  // weights per 16-byte load
  const int lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * kCols;
  if (n0 >= N) return;
  const long long row_bytes = INT4 ? K / 2 : K;
  const int groups = K / G;
  float acc[M][kCols];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[m][c] = 0.0f;
  const int steps = K / PER;  // K is a multiple of G, G of PER
  for (int s = lane; s < steps; s += 32) {
    const long long k0 = (long long)s * PER;
    uint4 w[kCols];
    float scale[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int n = min(n0 + c, N - 1);  // columns past N repeat the last one, never stored
      w[c] = reinterpret_cast<const uint4*>(q + (long long)n * row_bytes)[s];
      scale[c] = static_cast<float>(scales[(long long)n * groups + k0 / G]);
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float wv[PER];
      unpack<INT4>(w[c], wv);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float part = 0.0f;
#pragma unroll
        for (int h = 0; h < PER / 8; ++h) {
          float xv[8];
          load_x8(x + (long long)m * K, k0 + h * 8, xv);
#pragma unroll
          for (int j = 0; j < 8; ++j) part = fmaf(wv[h * 8 + j], xv[j], part);
        }
        acc[m][c] = fmaf(part, scale[c], acc[m][c]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float v = acc[m][c];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0 && n0 + c < N) y[(long long)m * N + n0 + c] = TX(v);
    }
}

}  // namespace pgk
