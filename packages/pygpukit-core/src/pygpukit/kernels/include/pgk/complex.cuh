// The complex forms of the m_* math functions, with NumPy's formulas
// (npymath's nc_* functions; the arithmetic operators are in types.cuh): exp/log by
// parts, sqrt without cancellation, pow by squaring for small integer powers.
// Included by math.cuh inside namespace pgk, after the real overloads.
#pragma once

template <class R> __device__ __forceinline__ bool is_nan(complex<R> z) { return z.re != z.re || z.im != z.im; }
template <class R> __device__ __forceinline__ bool is_inf(complex<R> z) { return is_inf(z.re) || is_inf(z.im); }

template <class R> __device__ __forceinline__ R m_cabs(complex<R> z) { return m_hypot(z.re, z.im); }

template <class R> __device__ __forceinline__ complex<R> m_exp(complex<R> z) {
  const R e = m_exp(z.re);
  if (z.im == 0) return {e, z.im};  // keeps a signed zero imaginary part
  return {e * m_cos(z.im), e * m_sin(z.im)};
}
template <class R> __device__ __forceinline__ complex<R> m_log(complex<R> z) { return {m_log(m_cabs(z)), m_atan2(z.im, z.re)}; }
template <class R> __device__ __forceinline__ complex<R> m_sqrt(complex<R> z) {
  if (z.re == 0 && z.im == 0) return {R(0), z.im};
  if (is_inf(z.im)) return {m_fabs(z.im), z.im};  // sqrt(x +- inf i) = inf +- inf i
  const R t = m_sqrt((m_fabs(z.re) + m_cabs(z)) * R(0.5));
  if (z.re >= 0) return {t, z.im / (2 * t)};
  return {m_fabs(z.im) / (2 * t), m_copysign(t, z.im)};
}
template <class R> __device__ __forceinline__ complex<R> m_exp2(complex<R> z) {
  return m_exp(complex<R>(z.re * R(0.69314718055994530942), z.im * R(0.69314718055994530942)));
}
template <class R> __device__ __forceinline__ complex<R> m_log2(complex<R> z) {
  const complex<R> l = m_log(z);
  return {l.re * R(1.44269504088896340736), l.im * R(1.44269504088896340736)};
}
template <class R> __device__ __forceinline__ complex<R> m_log10(complex<R> z) {
  const complex<R> l = m_log(z);
  return {l.re * R(0.43429448190325182765), l.im * R(0.43429448190325182765)};
}
template <class R> __device__ __forceinline__ complex<R> m_expm1(complex<R> z) {
  const R s = m_sin(z.im * R(0.5));
  return {m_expm1(z.re) * m_cos(z.im) - 2 * s * s, m_exp(z.re) * m_sin(z.im)};
}
template <class R> __device__ __forceinline__ complex<R> m_log1p(complex<R> z) {
  return {m_log(m_hypot(z.re + 1, z.im)), m_atan2(z.im, z.re + 1)};
}
template <class R> __device__ __forceinline__ complex<R> m_sin(complex<R> z) { return {m_sin(z.re) * m_cosh(z.im), m_cos(z.re) * m_sinh(z.im)}; }
template <class R> __device__ __forceinline__ complex<R> m_cos(complex<R> z) { return {m_cos(z.re) * m_cosh(z.im), -(m_sin(z.re) * m_sinh(z.im))}; }
template <class R> __device__ __forceinline__ complex<R> m_sinh(complex<R> z) { return {m_sinh(z.re) * m_cos(z.im), m_cosh(z.re) * m_sin(z.im)}; }
template <class R> __device__ __forceinline__ complex<R> m_cosh(complex<R> z) { return {m_cosh(z.re) * m_cos(z.im), m_sinh(z.re) * m_sin(z.im)}; }
// Kahan's formula; for large |Re z| tanh is +-1 and the imaginary part underflows.
template <class R> __device__ __forceinline__ complex<R> m_tanh(complex<R> z) {
  if (m_fabs(z.re) > R(sizeof(R) == 4 ? 9 : 22)) {
    return {m_copysign(R(1), z.re), 4 * m_sin(z.im) * m_cos(z.im) * m_exp(-2 * m_fabs(z.re))};
  }
  const R t = m_tan(z.im), beta = 1 + t * t, s = m_sinh(z.re), rho = m_sqrt(1 + s * s), den = 1 + beta * s * s;
  return {beta * rho * s / den, t / den};
}
template <class R> __device__ __forceinline__ complex<R> m_tan(complex<R> z) {  // -i tanh(iz)
  const complex<R> t = m_tanh(complex<R>(-z.im, z.re));
  return {t.im, -t.re};
}
template <class R> __device__ __forceinline__ complex<R> m_pow(complex<R> a, complex<R> b) {
  if (b.re == 0 && b.im == 0) return {R(1), R(0)};
  if (a.re == 0 && a.im == 0) {
    if (b.re > 0 && b.im == 0) return {R(0), R(0)};
    const R nan = m_sqrt(R(-1));
    return {nan, nan};
  }
  if (b.im == 0 && b.re == m_rint(b.re) && m_fabs(b.re) < 100) {  // small integer power: exact products
    long long n = (long long)b.re;
    const bool neg = n < 0;
    if (neg) n = -n;
    complex<R> r(R(1)), base = a;
    while (n) {
      if (n & 1) r = r * base;
      base = base * base;
      n >>= 1;
    }
    return neg ? complex<R>(R(1)) / r : r;
  }
  const complex<R> l = m_log(a);
  return m_exp(complex<R>(b.re * l.re - b.im * l.im, b.re * l.im + b.im * l.re));
}


// Inverse functions, principal values (C99's branch cuts, as NumPy).
// asinh is computed for Re z >= 0, where z + sqrt(z^2 + 1) does not cancel.
template <class R> __device__ __forceinline__ complex<R> m_asinh(complex<R> z) {
  if (z.re < 0) return -m_asinh(-z);
  return m_log(z + m_sqrt(z * z + complex<R>(R(1))));
}
template <class R> __device__ __forceinline__ complex<R> m_asin(complex<R> z) {  // -i asinh(iz)
  const complex<R> w = m_asinh(complex<R>(-z.im, z.re));
  return {w.im, -w.re};
}
template <class R> __device__ __forceinline__ complex<R> m_acos(complex<R> z) {  // pi/2 - asin(z)
  const complex<R> s = m_asin(z);
  return {R(1.57079632679489661923) - s.re, -s.im};
}
template <class R> __device__ __forceinline__ complex<R> m_acosh(complex<R> z) {  // Kahan: log(z + sqrt(z+1) sqrt(z-1))
  return m_log(z + m_sqrt(z + complex<R>(R(1))) * m_sqrt(z - complex<R>(R(1))));
}
template <class R> __device__ __forceinline__ complex<R> m_atanh(complex<R> z) {  // (log(1+z) - log(1-z)) / 2
  const complex<R> d = m_log(complex<R>(R(1)) + z) - m_log(complex<R>(R(1)) - z);
  return {d.re * R(0.5), d.im * R(0.5)};
}
template <class R> __device__ __forceinline__ complex<R> m_atan(complex<R> z) {  // -i atanh(iz)
  const complex<R> w = m_atanh(complex<R>(-z.im, z.re));
  return {w.im, -w.re};
}
