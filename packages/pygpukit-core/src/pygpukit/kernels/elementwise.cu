// Elementwise kernels: binary arithmetic with broadcasting, casts/copies,
// fill and arange. Instantiated by name expression from pygpukit/_backend/cuda.py,
// e.g. "pgk::binary_contig<pgk::Add, float, float, float, 4>".
#include "pgk/types.cuh"

namespace pgk {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // vectors per thread: independent loads in flight
constexpr int kMaxDims = 8;

struct Add { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a / b; } };

// Shapes and element strides of a broadcast operation, passed by value.
// Stride 0 repeats an operand along a dimension.
struct Strides3 {
  long long ndim;
  long long shape[kMaxDims];
  long long a[kMaxDims];
  long long b[kMaxDims];
  long long out[kMaxDims];
};

// out[i] = op(a[i], b[i]) for contiguous operands of n elements. VEC elements
// per access when every pointer is aligned to VEC elements (host checks).
template <class Op, class TA, class TB, class TO, int VEC>
__global__ void __launch_bounds__(kThreads)
binary_contig(const TA* __restrict__ a, const TB* __restrict__ b, TO* __restrict__ out, long long n) {
  using C = compute_t<TO>;
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

// out[i] = op(a[i], s) (or op(s, a[i]) when SCALAR_LEFT) with s already in the compute type.
template <class Op, class TA, class TO, int VEC, bool SCALAR_LEFT>
__global__ void __launch_bounds__(kThreads)
binary_scalar(const TA* __restrict__ a, compute_t<TO> s, TO* __restrict__ out, long long n) {
  using C = compute_t<TO>;
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
      for (int k = 0; k < VEC; ++k) {
        C x = cast<C>(va[u].v[k]);
        vo.v[k] = cast<TO>(SCALAR_LEFT ? Op()(s, x) : Op()(x, s));
      }
      reinterpret_cast<Vec<TO, VEC>*>(out)[i / VEC] = vo;
    } else {
      for (long long j = i; j < n; ++j) {
        C x = cast<C>(a[j]);
        out[j] = cast<TO>(SCALAR_LEFT ? Op()(s, x) : Op()(x, s));
      }
    }
  }
}

// General case: any shapes that broadcast, any strides (in elements), one
// thread per output element in a grid-stride loop.
template <class Op, class TA, class TB, class TO>
__global__ void __launch_bounds__(kThreads)
binary_strided(const TA* __restrict__ a, const TB* __restrict__ b, TO* __restrict__ out, long long n, Strides3 st) {
  using C = compute_t<TO>;
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < n; i += (long long)gridDim.x * kThreads) {
    long long rem = i, oa = 0, ob = 0, oo = 0;
    for (int d = (int)st.ndim - 1; d >= 0; --d) {
      long long idx = rem % st.shape[d];
      rem /= st.shape[d];
      oa += idx * st.a[d];
      ob += idx * st.b[d];
      oo += idx * st.out[d];
    }
    out[oo] = cast<TO>(Op()(cast<C>(a[oa]), cast<C>(b[ob])));
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
// Strides3.b is unused here.
template <class TI, class TO>
__global__ void __launch_bounds__(kThreads)
cast_strided(const TI* __restrict__ a, TO* __restrict__ out, long long n, Strides3 st) {
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < n; i += (long long)gridDim.x * kThreads) {
    long long rem = i, oa = 0, oo = 0;
    for (int d = (int)st.ndim - 1; d >= 0; --d) {
      long long idx = rem % st.shape[d];
      rem /= st.shape[d];
      oa += idx * st.a[d];
      oo += idx * st.out[d];
    }
    out[oo] = cast<TO>(a[oa]);
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
  for (long long i = (long long)blockIdx.x * kThreads + threadIdx.x; i < n; i += (long long)gridDim.x * kThreads) {
    C v = i == 1 ? second : mul_add_rn((C)i, delta, start);
    out[i] = cast<T>(v);
  }
}

}  // namespace pgk
