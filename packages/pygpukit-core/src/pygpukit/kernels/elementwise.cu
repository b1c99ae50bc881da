// Elementwise kernels: unary, binary and ternary maps with broadcasting and
// any strides, casts/copies, fill and arange. Instantiated by name expression
// from pygpukit/_backend/cuda.py, e.g.
// "pgk::binary_contig<pgk::Add, float, float, float, float, 4>": functor,
// operand types, the type NumPy's loop computes in (TC), destination type.
#include "pgk/math.cuh"

namespace pgk {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // vectors per thread: independent loads in flight
constexpr int kMaxDims = 8;

// The shape and the element strides of K operands (output last), passed by
// value. Stride 0 repeats an operand along a dimension. The host merges
// dimensions that are contiguous for every operand first, so most calls
// arrive with one or two dimensions.
template <int K>
struct Layout {
  long long ndim;
  long long shape[kMaxDims];
  long long st[K][kMaxDims];
};

template <int K>
__device__ __forceinline__ void offsets(const Layout<K>& L, long long i, long long (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = (int)L.ndim - 1; d > 0; --d) {
    long long idx = i % L.shape[d];
    i /= L.shape[d];
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += idx * L.st[k][d];
  }
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] += i * L.st[k][0];
}

#define PGK_GRID_STRIDE(i, n) \
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < (n); i += (long long)gridDim.x * kThreads)

// out[i] = op(a[i], p) for contiguous operands of n elements (also the scalar
// forms of binary ops, through ScalarRight/ScalarLeft). VEC elements per
// access when every pointer is aligned to VEC elements (the host checks).
template <class Op, class TA, class TC, class TO, int VEC>
__global__ void __launch_bounds__(kThreads)
unary_contig(const TA* __restrict__ a, TO* __restrict__ out, long long n, Params<compute_t<TC>> p) {
  using C = compute_t<TC>;
  const long long base = (long long)blockIdx.x * kThreads * kUnroll;
  Vec<TA, VEC> va[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) va[u] = reinterpret_cast<const Vec<TA, VEC>*>(a)[i / VEC];
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) {
      Vec<TO, VEC> vo;
#pragma unroll
      for (int k = 0; k < VEC; ++k) vo.v[k] = cast<TO>(Op()(cast<C>(va[u].v[k]), p));
      reinterpret_cast<Vec<TO, VEC>*>(out)[i / VEC] = vo;
    } else {
      for (long long j = i; j < n; ++j) out[j] = cast<TO>(Op()(cast<C>(a[j]), p));
    }
  }
}

template <class Op, class TA, class TC, class TO>
__global__ void __launch_bounds__(kThreads)
unary_strided(const TA* __restrict__ a, TO* __restrict__ out, long long n, Params<compute_t<TC>> p, Layout<2> L) {
  using C = compute_t<TC>;
  PGK_GRID_STRIDE(i, n) {
    long long off[2];
    offsets(L, i, off);
    out[off[1]] = cast<TO>(Op()(cast<C>(a[off[0]]), p));
  }
}

// out[i] = op(a[i], b[i]), contiguous operands of one shape.
template <class Op, class TA, class TB, class TC, class TO, int VEC>
__global__ void __launch_bounds__(kThreads)
binary_contig(const TA* __restrict__ a, const TB* __restrict__ b, TO* __restrict__ out, long long n) {
  using C = compute_t<TC>;
  const long long base = (long long)blockIdx.x * kThreads * kUnroll;
  Vec<TA, VEC> va[kUnroll];
  Vec<TB, VEC> vb[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) {
      va[u] = reinterpret_cast<const Vec<TA, VEC>*>(a)[i / VEC];
      vb[u] = reinterpret_cast<const Vec<TB, VEC>*>(b)[i / VEC];
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) {
      Vec<TO, VEC> vo;
#pragma unroll
      for (int k = 0; k < VEC; ++k) vo.v[k] = cast<TO>(Op()(cast<C>(va[u].v[k]), cast<C>(vb[u].v[k])));
      reinterpret_cast<Vec<TO, VEC>*>(out)[i / VEC] = vo;
    } else {
      for (long long j = i; j < n; ++j) out[j] = cast<TO>(Op()(cast<C>(a[j]), cast<C>(b[j])));
    }
  }
}

// General case: any shapes that broadcast, any strides (in elements).
template <class Op, class TA, class TB, class TC, class TO>
__global__ void __launch_bounds__(kThreads)
binary_strided(const TA* __restrict__ a, const TB* __restrict__ b, TO* __restrict__ out, long long n, Layout<3> L) {
  using C = compute_t<TC>;
  PGK_GRID_STRIDE(i, n) {
    long long off[3];
    offsets(L, i, off);
    out[off[2]] = cast<TO>(Op()(cast<C>(a[off[0]]), cast<C>(b[off[1]])));
  }
}

// out = op(a, b, c) (where, clip), any strides.
template <class Op, class TA, class TB, class TD, class TC, class TO>
__global__ void __launch_bounds__(kThreads)
ternary_strided(const TA* __restrict__ a, const TB* __restrict__ b, const TD* __restrict__ c, TO* __restrict__ out, long long n,
                Layout<4> L) {
  using C = compute_t<TC>;
  PGK_GRID_STRIDE(i, n) {
    long long off[4];
    offsets(L, i, off);
    out[off[3]] = cast<TO>(Op()(cast<C>(a[off[0]]), cast<C>(b[off[1]]), cast<C>(c[off[2]])));
  }
}

// out = a converted to TO, both contiguous.
template <class TI, class TO, int VEC>
__global__ void __launch_bounds__(kThreads)
cast_contig(const TI* __restrict__ a, TO* __restrict__ out, long long n) {
  const long long base = (long long)blockIdx.x * kThreads * kUnroll;
  Vec<TI, VEC> va[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) va[u] = reinterpret_cast<const Vec<TI, VEC>*>(a)[i / VEC];
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) {
      Vec<TO, VEC> vo;
#pragma unroll
      for (int k = 0; k < VEC; ++k) vo.v[k] = cast<TO>(va[u].v[k]);
      reinterpret_cast<Vec<TO, VEC>*>(out)[i / VEC] = vo;
    } else {
      for (long long j = i; j < n; ++j) out[j] = cast<TO>(a[j]);
    }
  }
}

// out (any strides) = a (any strides) converted to TO; makes strided arrays contiguous.
template <class TI, class TO>
__global__ void __launch_bounds__(kThreads)
cast_strided(const TI* __restrict__ a, TO* __restrict__ out, long long n, Layout<2> L) {
  PGK_GRID_STRIDE(i, n) {
    long long off[2];
    offsets(L, i, off);
    out[off[1]] = cast<TO>(a[off[0]]);
  }
}

// out[i] = value, contiguous.
template <class T, int VEC>
__global__ void __launch_bounds__(kThreads)
fill(T* __restrict__ out, T value, long long n) {
  const long long base = (long long)blockIdx.x * kThreads * kUnroll;
  Vec<T, VEC> vo;
#pragma unroll
  for (int k = 0; k < VEC; ++k) vo.v[k] = value;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    long long i = (base + u * kThreads + threadIdx.x) * VEC;
    if (i + VEC <= n) {
      reinterpret_cast<Vec<T, VEC>*>(out)[i / VEC] = vo;
    } else {
      for (long long j = i; j < n; ++j) out[j] = value;
    }
  }
}

// NumPy's arange: out[0] and out[1] are the first two values converted to T,
// then out[i] = start + i * delta with delta = out[1] - out[0], all in C
// (float for the small floats and float32, double for double, long long for
// integers), each operation rounded separately (no FMA contraction).
__device__ __forceinline__ float mul_add_rn(float i, float d, float s) { return __fadd_rn(s, __fmul_rn(i, d)); }
__device__ __forceinline__ double mul_add_rn(double i, double d, double s) { return __dadd_rn(s, __dmul_rn(i, d)); }
__device__ __forceinline__ long long mul_add_rn(long long i, long long d, long long s) { return s + i * d; }

template <class T, class C>
__global__ void __launch_bounds__(kThreads)
arange(T* __restrict__ out, C start, C delta, C second, long long n) {
  PGK_GRID_STRIDE(i, n) {
    C v = i == 1 ? second : mul_add_rn((C)i, delta, start);
    out[i] = cast<T>(v);
  }
}

}  // namespace pgk
