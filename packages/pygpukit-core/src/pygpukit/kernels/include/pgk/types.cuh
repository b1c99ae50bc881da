// Storage types for kernels compiled by NVRTC without any CUDA header.
//
// half and bfloat16 convert through PTX cvt instructions (sm_80+ for bf16);
// the float8 formats convert in software with round-to-nearest-even and the
// overflow rules of ml_dtypes (e4m3fn: overflow and inf become NaN; e5m2:
// overflow becomes inf), so GPU and CPU backends give the same bits.
// Arithmetic on these types happens in float (see compute_t).
#pragma once

namespace pgk {

struct half {
  unsigned short bits;
  half() = default;
  __device__ __forceinline__ explicit half(float f) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  }
  __device__ __forceinline__ static half from_double(double d) {
    half h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h.bits) : "d"(d));
    return h;
  }
  __device__ __forceinline__ operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
};

struct bfloat16 {
  unsigned short bits;
  bfloat16() = default;
  __device__ __forceinline__ explicit bfloat16(float f) {
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  }
  __device__ __forceinline__ operator float() const {
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);
  }
};

namespace detail {

// Encode |x| (float) into a float8 with EB exponent and MB mantissa bits.
template <int EB, int MB, bool HAS_INF>
__device__ __forceinline__ unsigned char f8_encode(float x) {
  constexpr int BIAS = (1 << (EB - 1)) - 1;
  constexpr int MIN_NORMAL_EXP = 1 - BIAS;
  // Largest finite value: e4m3fn keeps the top exponent (only mantissa 111 is
  // NaN), formats with inf lose the whole top exponent.
  constexpr float MAX_FINITE = HAS_INF
      ? (2.0f - 1.0f / (1 << MB)) * (float)(1u << ((1 << EB) - 2 - BIAS))
      : (2.0f - 2.0f / (1 << MB)) * (float)(1u << ((1 << EB) - 1 - BIAS));
  constexpr unsigned char NAN_CODE = HAS_INF ? (unsigned char)(((1 << EB) - 1) << MB | (1 << (MB - 1)))
                                             : (unsigned char)0x7f;
  constexpr unsigned char INF_CODE = (unsigned char)(((1 << EB) - 1) << MB);
  unsigned int u = __float_as_uint(x);
  unsigned char sign = (unsigned char)((u >> 24) & 0x80);
  float a = fabsf(x);
  if (a != a) return (unsigned char)(sign | NAN_CODE);
  if (a == 0.0f) return sign;
  int e = (int)((__float_as_uint(a) >> 23) & 0xff) - 127;
  if (e < MIN_NORMAL_EXP) e = MIN_NORMAL_EXP;
  float quantum = ldexpf(1.0f, e - MB);
  float q = rintf(a / quantum);  // exact scaling by a power of two; RNE
  float v = q * quantum;
  if (v > MAX_FINITE || isinf(a)) return (unsigned char)(sign | (HAS_INF ? INF_CODE : NAN_CODE));
  if (v < ldexpf(1.0f, MIN_NORMAL_EXP)) return (unsigned char)(sign | (unsigned char)q);  // subnormal
  int e2 = (int)((__float_as_uint(v) >> 23) & 0xff) - 127;
  int m = (int)(ldexpf(v, -e2) * (float)(1 << MB)) - (1 << MB);
  return (unsigned char)(sign | ((e2 + BIAS) << MB) | m);
}

template <int EB, int MB, bool HAS_INF>
__device__ __forceinline__ float f8_decode(unsigned char b) {
  constexpr int BIAS = (1 << (EB - 1)) - 1;
  float s = (b & 0x80) ? -1.0f : 1.0f;
  int e = (b >> MB) & ((1 << EB) - 1);
  int m = b & ((1 << MB) - 1);
  if (HAS_INF && e == (1 << EB) - 1) return m ? __int_as_float(0x7fc00000) : s * __int_as_float(0x7f800000);
  if (!HAS_INF && e == (1 << EB) - 1 && m == (1 << MB) - 1) return __int_as_float(0x7fc00000);
  if (e == 0) return s * ldexpf((float)m, 1 - BIAS - MB);
  return s * ldexpf((float)(m + (1 << MB)), e - BIAS - MB);
}

}  // namespace detail

struct float8_e4m3 {
  unsigned char bits;
  float8_e4m3() = default;
  __device__ __forceinline__ explicit float8_e4m3(float f) : bits(detail::f8_encode<4, 3, false>(f)) {}
  __device__ __forceinline__ operator float() const { return detail::f8_decode<4, 3, false>(bits); }
};

struct float8_e5m2 {
  unsigned char bits;
  float8_e5m2() = default;
  __device__ __forceinline__ explicit float8_e5m2(float f) : bits(detail::f8_encode<5, 2, true>(f)) {}
  __device__ __forceinline__ operator float() const { return detail::f8_decode<5, 2, true>(bits); }
};

// complex64 / complex128: NumPy's layout (real, imaginary), aligned to its
// size as NumPy's and DLPack's complex types are. Math functions are in
// pgk/complex.cuh.
template <class R>
struct alignas(2 * sizeof(R)) complex {
  using value_type = R;
  R re, im;
  complex() = default;
  __device__ __forceinline__ constexpr complex(R r, R i = R(0)) : re(r), im(i) {}
};
using complex64 = complex<float>;
using complex128 = complex<double>;
template <class T> struct is_complex { static constexpr bool value = false; };
template <class R> struct is_complex<complex<R>> { static constexpr bool value = true; };

// Complex arithmetic (Smith's division, as NumPy), here rather than in
// complex.cuh so that reductions and scans accumulate complex values too.
template <class R> __device__ __forceinline__ complex<R> operator+(complex<R> a, complex<R> b) { return {a.re + b.re, a.im + b.im}; }
template <class R> __device__ __forceinline__ complex<R> operator-(complex<R> a, complex<R> b) { return {a.re - b.re, a.im - b.im}; }
template <class R> __device__ __forceinline__ complex<R> operator-(complex<R> a) { return {-a.re, -a.im}; }
template <class R> __device__ __forceinline__ complex<R> operator*(complex<R> a, complex<R> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <class R> __device__ __forceinline__ complex<R> operator/(complex<R> n, complex<R> d) {
  const R ar = d.re < 0 ? -d.re : d.re, ai = d.im < 0 ? -d.im : d.im;
  if (ar >= ai) {
    if (ar == 0 && ai == 0) return {n.re / ar, n.im / ar};  // division by zero: inf/nan as NumPy
    const R r = d.im / d.re, den = d.re + d.im * r;
    return {(n.re + n.im * r) / den, (n.im - n.re * r) / den};
  }
  const R r = d.re / d.im, den = d.im + d.re * r;
  return {(n.re * r + n.im) / den, (n.im * r - n.re) / den};
}
template <class R> __device__ __forceinline__ bool operator==(complex<R> a, complex<R> b) { return a.re == b.re && a.im == b.im; }
template <class R> __device__ __forceinline__ bool operator!=(complex<R> a, complex<R> b) { return !(a == b); }

// Warp shuffles of any value type: a complex value moves as its two parts.
template <class T> __device__ __forceinline__ T shfl_xor(T v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
template <class R> __device__ __forceinline__ complex<R> shfl_xor(complex<R> v, int mask) {
  return {shfl_xor(v.re, mask), shfl_xor(v.im, mask)};
}
template <class T> __device__ __forceinline__ T shfl_up(T v, int delta) { return __shfl_up_sync(0xffffffffu, v, delta); }
template <class R> __device__ __forceinline__ complex<R> shfl_up(complex<R> v, int delta) {
  return {shfl_up(v.re, delta), shfl_up(v.im, delta)};
}

// The type arithmetic is done in: float for the 8- and 16-bit floats, the
// type itself otherwise.
template <class T> struct compute { using type = T; };
template <> struct compute<half> { using type = float; };
template <> struct compute<bfloat16> { using type = float; };
template <> struct compute<float8_e4m3> { using type = float; };
template <> struct compute<float8_e5m2> { using type = float; };
template <class T> using compute_t = typename compute<T>::type;

template <class T> struct is_small_float { static constexpr bool value = false; };
template <> struct is_small_float<half> { static constexpr bool value = true; };
template <> struct is_small_float<bfloat16> { static constexpr bool value = true; };
template <> struct is_small_float<float8_e4m3> { static constexpr bool value = true; };
template <> struct is_small_float<float8_e5m2> { static constexpr bool value = true; };

// Hides v's bits from the optimizer (an empty asm that "changes" them): the
// loads of v are issued here rather than sunk into a later branch, and values
// derived from v are recomputed where used rather than kept live across a
// barrier (pygpukit-nn's norms and rope).
template <class V>
__device__ __forceinline__ void opaque(V& v) {
  if constexpr (sizeof(V) % 4 == 0) {
    unsigned* w = reinterpret_cast<unsigned*>(&v);
#pragma unroll
    for (int i = 0; i < (int)(sizeof(V) / 4); ++i) asm volatile("" : "+r"(w[i]));
  } else {  // one 16-bit value
    asm volatile("" : "+h"(*reinterpret_cast<unsigned short*>(&v)));
  }
}

// Value conversion with NumPy's meaning. The small floats go through float;
// double -> bf16/fp8 therefore rounds twice, which can differ from a single
// rounding only on a tie created by the first one (far below their resolution).
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };

template <class To, class From>
__device__ __forceinline__ To cast(From v) {
  if constexpr (is_same<To, From>::value) {
    return v;  // bit-exact: a copy keeps NaN payloads and -0.0
  } else if constexpr (is_complex<To>::value) {
    using R = typename To::value_type;
    if constexpr (is_complex<From>::value) return To(static_cast<R>(v.re), static_cast<R>(v.im));
    else return To(static_cast<R>(v), R(0));
  } else if constexpr (is_complex<From>::value) {
    // NumPy: to bool, "is not zero"; to a real type, the real part
    if constexpr (is_same<To, bool>::value) return v.re != 0 || v.im != 0;
    else return cast<To>(v.re);
  } else if constexpr (is_same<To, half>::value && is_same<From, double>::value) {
    return half::from_double(v);
  } else if constexpr (is_small_float<To>::value) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// N elements of T, loaded or stored as one aligned vector access.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

}  // namespace pgk
