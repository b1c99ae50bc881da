// Elementwise functors with NumPy's semantics, applied by the kernels of
// elementwise.cu in the compute type C (float for the small floats, else the
// dtype of NumPy's loop). Unary functors take (x, Params) so that scalar
// operands and parameters (nan_to_num, clip bounds) ride along; binary ones
// take (a, b), ternary ones (a, b, c). pygpukit/ufuncs.py maps every public
// function to its functor and resolves dtypes as NumPy does.
#pragma once
#include "pgk/types.cuh"

namespace pgk {

template <class C> struct Params { C a, b, c; };

template <class T> struct is_fp { static constexpr bool value = is_same<T, float>::value || is_same<T, double>::value; };
template <class T> struct is_signed_int {
  static constexpr bool value = is_same<T, signed char>::value || is_same<T, short>::value || is_same<T, int>::value ||
                                is_same<T, long long>::value;
};

// Two's-complement negation without signed-overflow UB (NumPy wraps INT_MIN).
template <class C> __device__ __forceinline__ C wrap_neg(C x) {
  if constexpr (is_signed_int<C>::value) return (C)(0ull - (unsigned long long)x);
  else return (C)-x;
}
// inf and NaN tests that work for every C (always false for integers).
template <class C> __device__ __forceinline__ bool is_nan(C x) { return x != x; }
template <class C> __device__ __forceinline__ bool is_inf(C x) { return x == x && x - x != x - x; }

// -- math library overloads: one name for float and double ----------------
#define PGK_MATH1(NAME, FN)                                                            \
  __device__ __forceinline__ float NAME(float x) { return FN##f(x); }                \
  __device__ __forceinline__ double NAME(double x) { return FN(x); }
PGK_MATH1(m_sqrt, sqrt) PGK_MATH1(m_rsqrt, rsqrt) PGK_MATH1(m_cbrt, cbrt) PGK_MATH1(m_exp, exp) PGK_MATH1(m_exp2, exp2)
PGK_MATH1(m_expm1, expm1) PGK_MATH1(m_log, log) PGK_MATH1(m_log2, log2) PGK_MATH1(m_log10, log10) PGK_MATH1(m_log1p, log1p)
PGK_MATH1(m_sin, sin) PGK_MATH1(m_cos, cos) PGK_MATH1(m_tan, tan) PGK_MATH1(m_asin, asin) PGK_MATH1(m_acos, acos)
PGK_MATH1(m_atan, atan) PGK_MATH1(m_sinh, sinh) PGK_MATH1(m_cosh, cosh) PGK_MATH1(m_tanh, tanh) PGK_MATH1(m_asinh, asinh)
PGK_MATH1(m_acosh, acosh) PGK_MATH1(m_atanh, atanh) PGK_MATH1(m_erf, erf) PGK_MATH1(m_floor, floor) PGK_MATH1(m_ceil, ceil)
PGK_MATH1(m_trunc, trunc) PGK_MATH1(m_rint, rint) PGK_MATH1(m_fabs, fabs)
#undef PGK_MATH1
#define PGK_MATH2(NAME, FN)                                                            \
  __device__ __forceinline__ float NAME(float x, float y) { return FN##f(x, y); }    \
  __device__ __forceinline__ double NAME(double x, double y) { return FN(x, y); }
PGK_MATH2(m_pow, pow) PGK_MATH2(m_fmod, fmod) PGK_MATH2(m_atan2, atan2) PGK_MATH2(m_hypot, hypot)
PGK_MATH2(m_copysign, copysign) PGK_MATH2(m_fmax, fmax) PGK_MATH2(m_fmin, fmin)
#undef PGK_MATH2

#include "pgk/complex.cuh"

// A functor that applies a float-only math function (type resolution
// guarantees C is float, double or, for some, complex).
#define PGK_FLOAT_UNARY(NAME, EXPR)                                                    \
  struct NAME {                                                                        \
    template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const { return EXPR; } \
  };
PGK_FLOAT_UNARY(Sqrt, m_sqrt(x)) PGK_FLOAT_UNARY(Rsqrt, m_rsqrt(x)) PGK_FLOAT_UNARY(Cbrt, m_cbrt(x))
PGK_FLOAT_UNARY(Exp, m_exp(x)) PGK_FLOAT_UNARY(Exp2, m_exp2(x)) PGK_FLOAT_UNARY(Expm1, m_expm1(x))
PGK_FLOAT_UNARY(Log, m_log(x)) PGK_FLOAT_UNARY(Log2, m_log2(x)) PGK_FLOAT_UNARY(Log10, m_log10(x))
PGK_FLOAT_UNARY(Log1p, m_log1p(x)) PGK_FLOAT_UNARY(Sin, m_sin(x)) PGK_FLOAT_UNARY(Cos, m_cos(x))
PGK_FLOAT_UNARY(Tan, m_tan(x)) PGK_FLOAT_UNARY(Arcsin, m_asin(x)) PGK_FLOAT_UNARY(Arccos, m_acos(x))
PGK_FLOAT_UNARY(Arctan, m_atan(x)) PGK_FLOAT_UNARY(Sinh, m_sinh(x)) PGK_FLOAT_UNARY(Cosh, m_cosh(x))
PGK_FLOAT_UNARY(Tanh, m_tanh(x)) PGK_FLOAT_UNARY(Arcsinh, m_asinh(x)) PGK_FLOAT_UNARY(Arccosh, m_acosh(x))
PGK_FLOAT_UNARY(Arctanh, m_atanh(x)) PGK_FLOAT_UNARY(Erf, m_erf(x))
PGK_FLOAT_UNARY(Sigmoid, C(1) / (C(1) + m_exp(-x)))
PGK_FLOAT_UNARY(Silu, x / (C(1) + m_exp(-x)))
PGK_FLOAT_UNARY(Gelu, C(0.5) * x * (C(1) + m_erf(x * C(0.70710678118654752440))))
PGK_FLOAT_UNARY(GeluTanh, C(0.5) * x * (C(1) + m_tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x))))
#undef PGK_FLOAT_UNARY

// Unary functors defined for integers too.
struct Negative { template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const { return wrap_neg(x); } };
struct Positive { template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const { return x; } };
struct Square { template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const { return x * x; } };
struct Absolute {  // complex: |z| in the real part (the kernel's output type is real)
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const {
    if constexpr (is_complex<C>::value) return C(m_cabs(x));
    else if constexpr (is_fp<C>::value) return m_fabs(x);
    else if constexpr (is_signed_int<C>::value) return x < 0 ? wrap_neg(x) : x;
    else return x;
  }
};
struct Sign {
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const {
    if constexpr (is_complex<C>::value) {  // NumPy 2: z / |z|, and 0 for 0
      const auto r = m_cabs(x);
      return r == 0 ? C(0) : C(x.re / r, x.im / r);
    } else {
      return x > C(0) ? C(1) : x < C(0) ? C(-1) : x == C(0) ? C(0) : x;  // NaN stays NaN
    }
  }
};
struct Conjugate {
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const {
    if constexpr (is_complex<C>::value) return C(x.re, -x.im);
    else return x;
  }
};
struct Reciprocal {  // integers: 1 / x truncated, and 0 for x == 0 (NumPy leaves that undefined)
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const {
    if constexpr (is_fp<C>::value || is_complex<C>::value) return C(1) / x;
    else return x == C(0) ? C(0) : C(C(1) / x);
  }
};
struct Relu {  // NaN passes through, as in PyTorch
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const { return x < C(0) ? C(0) : x; }
};
#define PGK_ROUNDING(NAME, FN)                                                         \
  struct NAME {                                                                        \
    template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const { \
      if constexpr (is_fp<C>::value) return FN(x);                                     \
      else return x;                                                                   \
    }                                                                                  \
  };
PGK_ROUNDING(Floor, m_floor) PGK_ROUNDING(Ceil, m_ceil) PGK_ROUNDING(Trunc, m_trunc) PGK_ROUNDING(Rint, m_rint)
#undef PGK_ROUNDING
struct IsNan { template <class C> __device__ __forceinline__ bool operator()(C x, const Params<C>&) const { return is_nan(x); } };
struct IsInf { template <class C> __device__ __forceinline__ bool operator()(C x, const Params<C>&) const { return is_inf(x); } };
struct IsFinite {
  template <class C> __device__ __forceinline__ bool operator()(C x, const Params<C>&) const { return !is_nan(x) && !is_inf(x); }
};
struct Signbit {
  template <class C> __device__ __forceinline__ bool operator()(C x, const Params<C>&) const {
    if constexpr (is_same<C, float>::value) return __float_as_uint(x) >> 31;
    else if constexpr (is_same<C, double>::value) return (unsigned long long)__double_as_longlong(x) >> 63;
    else return x < C(0);
  }
};
struct LogicalNot { template <class C> __device__ __forceinline__ bool operator()(C x, const Params<C>&) const { return !(x != C(0)); } };
struct Invert {
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>&) const {
    if constexpr (is_same<C, bool>::value) return !x;
    else return (C)~x;
  }
};
// nan_to_num: NaN -> p.a, +inf -> p.b, -inf -> p.c.
struct NanToNum {
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>& p) const {
    return is_nan(x) ? p.a : is_inf(x) ? (x > C(0) ? p.b : p.c) : x;
  }
};

// -- binary ----------------------------------------------------------------
struct Add { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; } };
struct Sub { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return a - b; } };
struct Mul { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return a * b; } };
struct Div { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return a / b; } };

// NumPy's floor division and remainder (Python semantics): integer division
// by zero gives 0; floats follow the fmod-based algorithm of npy_divmod.
template <class C> __device__ __forceinline__ C float_mod(C a, C b) {
  C mod = m_fmod(a, b);
  if (b == C(0)) return mod;  // NaN
  if (mod != C(0)) {
    if ((b < C(0)) != (mod < C(0))) mod += b;
  } else {
    mod = m_copysign(C(0), b);
  }
  return mod;
}
struct FloorDivide {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (is_fp<C>::value) {
      if (b == C(0)) return a / b;
      C mod = m_fmod(a, b);
      C div = (a - mod) / b;
      if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
      if (div == C(0)) return m_copysign(C(0), a / b);
      C fl = m_floor(div);
      return div - fl > C(0.5) ? fl + C(1) : fl;
    } else if constexpr (is_signed_int<C>::value) {
      if (b == C(0)) return C(0);
      if (b == C(-1)) return wrap_neg(a);
      C q = a / b;
      return (a % b != C(0) && ((a < C(0)) != (b < C(0)))) ? C(q - 1) : q;
    } else {
      return b == C(0) ? C(0) : C(a / b);
    }
  }
};
struct Remainder {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (is_fp<C>::value) {
      return float_mod(a, b);
    } else if constexpr (is_signed_int<C>::value) {
      if (b == C(0) || b == C(-1)) return C(0);
      C r = a % b;
      return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? C(r + b) : r;
    } else {
      return b == C(0) ? C(0) : C(a % b);
    }
  }
};
struct Fmod {  // C's remainder: the sign of the dividend
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (is_fp<C>::value) return m_fmod(a, b);
    else if constexpr (is_signed_int<C>::value) return (b == C(0) || b == C(-1)) ? C(0) : C(a % b);
    else return b == C(0) ? C(0) : C(a % b);
  }
};
// Integer powers by squaring (wrapping); a negative exponent gives 0 except for
// bases 1 and -1 (NumPy raises instead, which needs the data on the host).
struct Power {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (is_fp<C>::value || is_complex<C>::value) {
      return m_pow(a, b);
    } else {
      if constexpr (is_signed_int<C>::value) {
        if (b < C(0)) return a == C(1) ? C(1) : a == C(-1) ? ((b & 1) ? C(-1) : C(1)) : C(0);
      }
      unsigned long long r = 1, base = (unsigned long long)a, e = (unsigned long long)b;
      while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
      }
      return (C)r;
    }
  }
};
struct Maximum {  // NaN propagates
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return is_nan(a) ? a : is_nan(b) ? b : (a > b ? a : b); }
};
struct Minimum {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return is_nan(a) ? a : is_nan(b) ? b : (a < b ? a : b); }
};
struct Fmax {  // NaN is ignored unless both are NaN
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (is_fp<C>::value) return m_fmax(a, b);
    else return a > b ? a : b;
  }
};
struct Fmin {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (is_fp<C>::value) return m_fmin(a, b);
    else return a < b ? a : b;
  }
};
struct Arctan2 { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return m_atan2(a, b); } };
struct Hypot { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return m_hypot(a, b); } };
struct Copysign { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return m_copysign(a, b); } };
struct Logaddexp {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if (a == b) return a + C(0.69314718055994530942);  // also -inf/-inf and inf/inf
    C d = a - b;
    if (d > C(0)) return a + m_log1p(m_exp(-d));
    if (d <= C(0)) return b + m_log1p(m_exp(d));
    return d;  // NaN
  }
};
struct Equal { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a == b; } };
struct NotEqual { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a != b; } };
struct Less { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a < b; } };
struct LessEqual { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a <= b; } };
struct Greater { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a > b; } };
struct GreaterEqual { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a >= b; } };
struct LogicalAnd { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a != C(0) && b != C(0); } };
struct LogicalOr { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return a != C(0) || b != C(0); } };
struct LogicalXor { template <class C> __device__ __forceinline__ bool operator()(C a, C b) const { return (a != C(0)) != (b != C(0)); } };
struct BitwiseAnd { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return (C)(a & b); } };
struct BitwiseOr { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return (C)(a | b); } };
struct BitwiseXor { template <class C> __device__ __forceinline__ C operator()(C a, C b) const { return (C)(a ^ b); } };
// Shifts by a negative amount or by the width or more: 0 (and -1 for a
// right shift of a negative value), as NumPy defines them.
struct LeftShift {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    return (unsigned long long)b < sizeof(C) * 8 ? (C)((unsigned long long)a << (unsigned long long)b) : C(0);
  }
};
struct RightShift {
  template <class C> __device__ __forceinline__ C operator()(C a, C b) const {
    if ((unsigned long long)b < sizeof(C) * 8) return (C)(a >> b);
    return a < C(0) ? C(-1) : C(0);
  }
};

// A binary functor with a scalar operand (in Params.a) on the right or left.
template <class Op> struct ScalarRight {
  template <class C> __device__ __forceinline__ auto operator()(C x, const Params<C>& p) const { return Op()(x, p.a); }
};
template <class Op> struct ScalarLeft {
  template <class C> __device__ __forceinline__ auto operator()(C x, const Params<C>& p) const { return Op()(p.a, x); }
};
// clip with scalar bounds p.a, p.b: minimum(maximum(x, lo), hi), as NumPy.
struct ClipScalars {
  template <class C> __device__ __forceinline__ C operator()(C x, const Params<C>& p) const { return Minimum()(Maximum()(x, p.a), p.b); }
};

// -- ternary ---------------------------------------------------------------
struct Where { template <class C> __device__ __forceinline__ C operator()(C c, C x, C y) const { return c != C(0) ? x : y; } };
struct Clip {
  template <class C> __device__ __forceinline__ C operator()(C x, C lo, C hi) const { return Minimum()(Maximum()(x, lo), hi); }
};

}  // namespace pgk
