// Activations of pygpukit-nn (activations.py) that core's elementwise
// functions do not cover in one pass: the gated forms act(gate) * up
// (SwiGLU with SiLU, GeGLU with GELU) and squared ReLU.
//
// Rows of n outputs; the gate and up rows have their own row strides, so the
// usual fused projection output (..., 2n) with the gate in the first half
// and up in the second is read in place (u = g + n). Math in float (the
// functors of pgk/math.cuh), one rounding. Each thread moves UNROLL vectors
// of VEC elements, all loads issued before the first store.
#include "pgk/math.cuh"

namespace pgk {

struct ReluSquared {  // NaN passes through, as in relu
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>& p) const {
    const C r = Relu()(x, p);
    return r * r;
  }
};

constexpr int kActUnroll = 4;

template <class T, class ACT, bool GATED, int VEC>
__global__ void act_rows(const T* __restrict__ g, long long gs, const T* __restrict__ u, long long us, T* __restrict__ y,
                         long long rows, int n) {
  using V = Vec<T, VEC>;
  const long long nvec = n / VEC, total = rows * nvec;
  const long long base = (long long)blockIdx.x * blockDim.x * kActUnroll + threadIdx.x;
  V a[kActUnroll], b[kActUnroll];
#pragma unroll
  for (int i = 0; i < kActUnroll; ++i) {
    const long long e = base + (long long)i * blockDim.x;
    if (e < total) {
      // 32-bit division where it fits: a 64-bit one is a long software sequence
      const long long r = total < (1ll << 31) ? (long long)((unsigned)e / (unsigned)nvec) : e / nvec;
      const long long k = e - r * nvec;
      a[i] = reinterpret_cast<const V*>(g + r * gs)[k];
      if constexpr (GATED) b[i] = reinterpret_cast<const V*>(u + r * us)[k];
    }
  }
  const Params<float> p{};
#pragma unroll
  for (int i = 0; i < kActUnroll; ++i) {
    const long long e = base + (long long)i * blockDim.x;
    if (e < total) {
      V o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float v = ACT()((float)a[i].v[j], p);
        if constexpr (GATED) v *= (float)b[i].v[j];
        o.v[j] = T(v);
      }
      reinterpret_cast<V*>(y)[e] = o;
    }
  }
}

}  // namespace pgk
