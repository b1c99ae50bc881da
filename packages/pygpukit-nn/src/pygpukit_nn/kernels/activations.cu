// Activations of pygpukit-nn (activations.py) that core's elementwise
// functions do not cover in one pass: the gated forms act(gate) * up
// (SwiGLU with SiLU, GeGLU with GELU) and squared ReLU.
//
// Rows of n outputs; the gate and up rows have their own row strides, so the
// usual fused projection output (..., 2n) with the gate in the first half
// and up in the second is read in place (u = g + n). Math in float (the
// functors of pgk/math.cuh), one rounding.
//
// A block is blockDim.y rows of blockDim.x threads; a thread moves UNROLL
// vectors of VEC elements of its row, blockDim.x apart, all loads issued
// before the first store. A row longer than blockDim.x * UNROLL vectors is
// split over `tiles` blocks (blockIdx.x = row block * tiles + tile), so the
// row and column come from one division per block, not one per vector (per
// vector, the division was most of the address arithmetic and took the
// registers that held a 256-thread block to three per SM).
#include "pgk/math.cuh"
#include "pgk/pdl.cuh"

namespace pgk {

struct ReluSquared {  // NaN passes through, as in relu
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>& p) const {
    const C r = Relu()(x, p);
    return r * r;
  }
};

// SiLU for 16-bit outputs: ex2.approx and rcp.approx (about 2^-22 relative,
// plus the rounding of -x * log2(e): under 1e-5 relative for |x| < 88) stay
// far below the output's half ulp (2^-9 bf16, 2^-12 f16), in a quarter of
// the instructions of the accurate expf and division. Same limits: 0 for
// x -> -inf (NaN at -inf, as x / (1 + exp(-x))), x for x -> +inf.
struct SiluFast {
  __device__ __forceinline__ float operator()(float x, const Params<float>&) const {
    float r;
    asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(1.0f + __expf(-x)));
    return x * r;
  }
};

template <class T, class ACT, bool GATED, int VEC, int UNROLL, int THREADS>
__global__ void __launch_bounds__(THREADS) act_rows(const T* __restrict__ g, long long gs, const T* __restrict__ u, long long us,
                                                    T* __restrict__ y, long long rows, int n, int tiles) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  using V = Vec<T, VEC>;
  const int nvec = n / VEC;
  const unsigned rb = blockIdx.x / (unsigned)tiles, tile = blockIdx.x - rb * (unsigned)tiles;
  const long long r = (long long)rb * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const int k0 = tile * blockDim.x * UNROLL + threadIdx.x;
  const V* gr = reinterpret_cast<const V*>(g + r * gs);
  const V* ur = reinterpret_cast<const V*>(u + r * us);
  V* yr = reinterpret_cast<V*>(y + r * n);
  V a[UNROLL], b[UNROLL];
#pragma unroll
  for (int i = 0; i < UNROLL; ++i) {
    const int k = k0 + i * blockDim.x;
    if (k < nvec) {
      a[i] = gr[k];
      if constexpr (GATED) b[i] = ur[k];
    }
  }
  const Params<float> p{};
#pragma unroll
  for (int i = 0; i < UNROLL; ++i) {
    const int k = k0 + i * blockDim.x;
    if (k < nvec) {
      V o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float v = ACT()((float)a[i].v[j], p);
        if constexpr (GATED) v *= (float)b[i].v[j];
        o.v[j] = T(v);
      }
      yr[k] = o;
    }
  }
}

}  // namespace pgk
