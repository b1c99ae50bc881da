// out = residual + alpha * x for float16, bfloat16 and float32, computed in
// float (one fused multiply-add) and rounded once to T at the store
// (pygpukit_example.residual).
//
// The operands are row-strided: row r of x starts at x + r * ldx and its
// cols elements are adjacent, so a C-contiguous array (one row of all its
// elements), a slice a[:, :n] and every other row a[::2] are read where they
// lie, without a copy. The output is C-contiguous. A thread moves VEC elements
// (16 bytes) per access; the host picks VEC > 1 only when cols (or, for
// several rows, cols, ldx and ldr) is a multiple of VEC and both addresses are
// 16-byte aligned. One row's last cols % VEC elements are done one by one.
#include "pgk/types.cuh"

using pgk::cast;
using pgk::Vec;

constexpr int kThreads = 256;

template <class T, int VEC>
__global__ void __launch_bounds__(kThreads)
scaled_residual_add(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ out, long long rows, long long cols,
                    long long ldx, long long ldr, float alpha) {
  using V = Vec<T, VEC>;
  const long long cv = cols / VEC;  // vectors per row
  const long long total = rows * cv;
  const long long first = (long long)blockIdx.x * kThreads + threadIdx.x;
  const long long step = (long long)gridDim.x * kThreads;
  for (long long i = first; i < total; i += step) {
    long long r = 0, c = i;
    if (rows > 1) {  // uniform over the grid: one row needs no division
      r = i / cv;
      c = i - r * cv;
    }
    const V a = reinterpret_cast<const V*>(x + r * ldx)[c];
    const V b = reinterpret_cast<const V*>(res + r * ldr)[c];
    V o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = cast<T>(fmaf(alpha, cast<float>(a.v[j]), cast<float>(b.v[j])));
    reinterpret_cast<V*>(out + r * cols)[c] = o;
  }
  if (rows == 1) {
    const long long k = cv * VEC + first;
    if (k < cols) out[k] = cast<T>(fmaf(alpha, cast<float>(x[k]), cast<float>(res[k])));
  }
}
