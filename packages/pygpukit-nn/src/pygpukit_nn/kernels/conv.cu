// Conv1d and pooling of pygpukit-nn (conv.py). Inputs are (rows, L) with
// the last axis contiguous: x[n, c, p] at x + n * xn + c * xc + p. Math in
// float, one rounding of each output.
//
// im2col writes the columns of the GEMM that computes a convolution:
// cols[n, c * K + j, l] = x[n, c, l * stride - pad + j * dil] (0 outside
// [0, L)), so out[n] = W (C_out, C_in * K) @ cols[n] comes out in (C_out,
// L_out) order; the rows of a group are consecutive, so grouped convolutions
// are a batch of those products. Depthwise convolutions (one input channel
// per group) take the direct kernel instead.
//
// Grids: x = rows (up to 2^31 - 1), y = blocks of kConvThreads outputs along L.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kConvThreads = 256;

template <class T>
__global__ void __launch_bounds__(kConvThreads)
im2col(const T* __restrict__ x, long long xn, long long xc, int C, int L, int K, int stride, int pad, int dil, int Lout,
       T* __restrict__ cols) {
  const int l = blockIdx.y * kConvThreads + threadIdx.x;
  if (l >= Lout) return;
  const long long row = blockIdx.x;  // (n * C + c) * K + j
  const int j = (int)(row % K);
  const long long nc = row / K;
  const int c = (int)(nc % C);
  const long long n = nc / C;
  const int p = l * stride - pad + j * dil;
  cols[row * Lout + l] = (p >= 0 && p < L) ? x[n * xn + c * xc + p] : T(0.0f);
}

// out[n, co, l] = bias[co] + sum_j w[co, j] * x[n, co / mult, l * stride - pad + j * dil];
// weight (C_out, 1, K) contiguous, out contiguous (N, C_out, Lout).
template <class T, bool BIAS>
__global__ void __launch_bounds__(kConvThreads)
conv1d_depthwise(const T* __restrict__ x, long long xn, long long xc, const T* __restrict__ w, const T* __restrict__ bias, int Cout,
                 int mult, int L, int K, int stride, int pad, int dil, int Lout, T* __restrict__ out) {
  const int l = blockIdx.y * kConvThreads + threadIdx.x;
  if (l >= Lout) return;
  const long long row = blockIdx.x;  // n * Cout + co
  const int co = (int)(row % Cout);
  const long long n = row / Cout;
  const T* src = x + n * xn + (long long)(co / mult) * xc;
  const T* wr = w + (long long)co * K;
  const int p0 = l * stride - pad;
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const int p = p0 + j * dil;
    if (p >= 0 && p < L) acc = fmaf((float)wr[j], (float)src[p], acc);
  }
  if constexpr (BIAS) acc += (float)bias[co];
  out[row * Lout + l] = T(acc);
}

// Pooling over rows of L: MODE 0 average (torch's avg_pool1d divisor),
// 1 max (NaN propagates; the first maximum's position, the first NaN's if
// any; idx may be null), 2 adaptive average (windows [floor(l L / Lout),
// ceil((l + 1) L / Lout))).
template <class T, int MODE>
__global__ void __launch_bounds__(kConvThreads)
pool1d(const T* __restrict__ x, long long xr, int L, int Lout, int K, int stride, int pad, int dil, int include_pad,
       T* __restrict__ out, long long* __restrict__ idx) {
  const int l = blockIdx.y * kConvThreads + threadIdx.x;
  if (l >= Lout) return;
  const long long row = blockIdx.x;
  const T* src = x + row * xr;
  float r;
  if constexpr (MODE == 1) {
    const int p0 = l * stride - pad;
    int j0 = 0;
    while (p0 + j0 * dil < 0) ++j0;  // the first position inside the row
    float m = -__int_as_float(0x7f800000);
    long long at = p0 + j0 * dil;
    for (int j = j0; j < K; ++j) {
      const int p = p0 + j * dil;
      if (p >= L) break;
      const float v = (float)src[p];
      if (v > m || (v != v && m == m)) {
        m = v;
        at = p;
      }
    }
    r = m;
    if (idx != nullptr) idx[row * Lout + l] = at;
  } else {
    int s, e, div;
    if constexpr (MODE == 0) {
      s = l * stride - pad;
      e = min(s + K, L + pad);
      const int size = e - s;
      s = max(s, 0);
      e = min(e, L);
      div = include_pad ? size : e - s;
    } else {
      s = (int)(((long long)l * L) / Lout);
      e = (int)(((long long)(l + 1) * L + Lout - 1) / Lout);
      div = e - s;
    }
    float acc = 0.0f;
    for (int p = s; p < e; ++p) acc += (float)src[p];
    r = acc / (float)div;
  }
  out[row * Lout + l] = T(r);
}

}  // namespace pgk
