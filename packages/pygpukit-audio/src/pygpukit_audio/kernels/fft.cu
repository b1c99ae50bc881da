// FFT kernels of pygpukit-audio (no cuFFT).
//
// fft_block: TPB transforms per block, each of M points held in shared memory,
// done by Stockham autosort stages of radix 16/8/4/2/3/5/7 (the radices are a
// template pack, planned on the host, so every stage is unrolled with constant
// strides). Each stage reads its butterflies into registers, syncs, and writes
// them back in place: one shared buffer of M values per transform. The first
// stage reads global memory directly (coalesced: thread t of a row reads the
// points t + c * T), so a power-of-two transform of 2^e points costs ceil(e / 4)
// shared-memory round trips: the data are read once and written once.
//
// Rows are addressed as base(b) + j * es with base(b) = (b / inner) * bs +
// (b % inner) * is, so one kernel serves contiguous rows, any axis, the
// columns of a four-step pass and the frames of an STFT (a frame is a row of
// the padded signal starting at t * hop). Real inputs and outputs are
// addressed in real elements, complex ones in complex elements. A thread
// computes its row bases once, in 64 bits; the offsets j * es inside a row
// are ints unless WIDE (the host's choice, for rows that span 2^31 elements
// or more): 64-bit index math per point cost more instructions than the
// butterflies in the four-step passes. Real loads
// may shift each row's start left and read zeros outside the row (clip > 0):
// a centred STFT's constant padding without a padded copy of the signal.
//
// Load modes (what becomes the M-point complex input):
//   LD_C2C    complex rows
//   LD_REAL   real rows (imaginary part 0), times an optional window
//   LD_PAIRS  real rows of 2L as L complex (x[2j], x[2j+1]), times an optional
//             window: the half-length transform of an even rfft
//   LD_HERM   n/2+1 Hermitian bins expanded to n (odd irfft)
//   LD_IRPRE  n/2+1 bins folded into the n/2-point input of an even irfft
// Store modes:
//   ST_C2C    complex rows (column stores: times an optional four-step twiddle)
//   ST_RPOST  the n/2+1 bins of an even rfft from its half-length transform
//   ST_REAL   the real part (odd irfft)
//   ST_IRPOST z_j as (x[2j], x[2j+1]) (even irfft)
//   ST_HALF   the first L/2+1 bins (odd rfft)
//   ST_HMIRROR (column stores) the bins <= n/2 of the last pass of a real
//             four-step transform (see store_cols)
// With BLUE the M-point transform runs Bluestein's algorithm for a length
// L < M: input times the chirp, forward FFT, times bhat (the FFT of the
// conjugate chirp, 1/M folded in), inverse FFT, times the chirp.
// Twiddle tables are computed in double precision on the host; with TWC the
// float kernels compute the stage and four-step twiddles (unit_root) instead.

#include "pgk/types.cuh"

namespace pgk_fft {

using pgk::complex;

enum { LD_C2C = 0, LD_REAL = 1, LD_PAIRS = 2, LD_HERM = 3, LD_IRPRE = 4 };
enum { ST_C2C = 0, ST_RPOST = 1, ST_REAL = 2, ST_IRPOST = 3, ST_HALF = 4, ST_HMIRROR = 5 };

template <class R> __device__ __forceinline__ complex<R> conj(complex<R> a) { return {a.re, -a.im}; }
template <class R> __device__ __forceinline__ complex<R> scale(complex<R> a, R s) { return {a.re * s, a.im * s}; }
// a * i^DIR: times -i for the forward (DIR = -1) and +i for the inverse transform.
template <int DIR, class R> __device__ __forceinline__ complex<R> rot(complex<R> a) {
  return DIR < 0 ? complex<R>(a.im, -a.re) : complex<R>(-a.im, a.re);
}
// A twiddle w (forward sign) for direction DIR.
template <int DIR, class R> __device__ __forceinline__ complex<R> dir(complex<R> w) { return DIR < 0 ? w : conj(w); }

// cos and sin of 2 pi m / r for the odd radices, from a half table by symmetry.
__device__ __forceinline__ double root_cos(int r, int m) {
  if (m > r / 2) m = r - m;
  if (r == 3) return m == 0 ? 1.0 : -0.5;
  if (r == 5) return m == 0 ? 1.0 : m == 1 ? 0.30901699437494745 : -0.8090169943749475;
  return m == 0 ? 1.0 : m == 1 ? 0.6234898018587336 : m == 2 ? -0.22252093395631434 : -0.9009688679024191;
}
__device__ __forceinline__ double root_sin(int r, int m) {
  const double sign = m > r / 2 ? -1.0 : 1.0;
  if (m > r / 2) m = r - m;
  if (r == 3) return m == 0 ? 0.0 : sign * 0.8660254037844386;
  if (r == 5) return m == 0 ? 0.0 : sign * (m == 1 ? 0.9510565162951535 : 0.5877852522924732);
  return m == 0 ? 0.0 : sign * (m == 1 ? 0.7818314824680298 : m == 2 ? 0.9749279121818236 : 0.43388373911755823);
}

template <int DIR, class R> __device__ __forceinline__ void dft4(complex<R>& a, complex<R>& b, complex<R>& c, complex<R>& d) {
  const complex<R> t0 = a + c, t1 = a - c, t2 = b + d, t3 = rot<DIR>(b - d);
  a = t0 + t2;
  b = t1 + t3;
  c = t0 - t2;
  d = t1 - t3;
}

// cos(pi m / 8) for any integer m >= 0, from cos(pi j / 8), j <= 4.
__device__ __forceinline__ double cos16(int m) {
  constexpr double C[5] = {1.0, 0.92387953251128675613, 0.70710678118654752440, 0.38268343236508977173, 0.0};
  m &= 15;
  return m <= 4 ? C[m] : m <= 8 ? -C[8 - m] : m <= 12 ? -C[m - 8] : C[16 - m];
}
// a * exp(DIR 2 pi i m / 16) for a constant m (m = 4: a quarter turn, exact).
template <int DIR, class R> __device__ __forceinline__ complex<R> root16(complex<R> a, int m) {
  if (m == 4) return rot<DIR>(a);
  const R c = R(cos16(m)), s = R(DIR * cos16(m + 12));  // sin(x) = cos(x - pi / 2)
  return complex<R>(a.re * c - a.im * s, a.re * s + a.im * c);
}

// In-register DFT of RADIX points with the sign of DIR.
template <int RADIX, int DIR, class R> __device__ __forceinline__ void dft(complex<R> (&u)[RADIX]) {
  if constexpr (RADIX == 2) {
    const complex<R> t = u[0] - u[1];
    u[0] = u[0] + u[1];
    u[1] = t;
  } else if constexpr (RADIX == 4) {
    dft4<DIR>(u[0], u[1], u[2], u[3]);
  } else if constexpr (RADIX == 8) {
    // Two 4-point DFTs (even and odd points) joined by the 8th roots of unity.
    complex<R> e0 = u[0], e1 = u[2], e2 = u[4], e3 = u[6], o0 = u[1], o1 = u[3], o2 = u[5], o3 = u[7];
    dft4<DIR>(e0, e1, e2, e3);
    dft4<DIR>(o0, o1, o2, o3);
    const R h = R(0.70710678118654752440);
    const R s = R(DIR);
    o1 = complex<R>(h * (o1.re - s * o1.im), h * (o1.im + s * o1.re));
    o2 = rot<DIR>(o2);
    o3 = complex<R>(h * (-o3.re - s * o3.im), h * (-o3.im + s * o3.re));
    u[0] = e0 + o0; u[4] = e0 - o0;
    u[1] = e1 + o1; u[5] = e1 - o1;
    u[2] = e2 + o2; u[6] = e2 - o2;
    u[3] = e3 + o3; u[7] = e3 - o3;
  } else if constexpr (RADIX == 16) {
    // Four 4-point DFTs over the points n2 + 4 n1, times w16^(n2 k1), then four
    // over n2: X[k1 + 4 k2] (one pass of the 4 x 4 Cooley-Tukey split).
    complex<R> a[4][4];
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2) {
      a[n2][0] = u[n2]; a[n2][1] = u[n2 + 4]; a[n2][2] = u[n2 + 8]; a[n2][3] = u[n2 + 12];
      dft4<DIR>(a[n2][0], a[n2][1], a[n2][2], a[n2][3]);
    }
#pragma unroll
    for (int n2 = 1; n2 < 4; ++n2) {
#pragma unroll
      for (int k1 = 1; k1 < 4; ++k1) a[n2][k1] = root16<DIR>(a[n2][k1], n2 * k1);
    }
#pragma unroll
    for (int k1 = 0; k1 < 4; ++k1) {
      dft4<DIR>(a[0][k1], a[1][k1], a[2][k1], a[3][k1]);
#pragma unroll
      for (int k2 = 0; k2 < 4; ++k2) u[k1 + 4 * k2] = a[k2][k1];
    }
  } else {
    complex<R> y[RADIX];
#pragma unroll
    for (int k = 0; k < RADIX; ++k) {
      complex<R> acc = u[0];
#pragma unroll
      for (int q = 1; q < RADIX; ++q) {
        const int m = (q * k) % RADIX;
        const R c = R(root_cos(RADIX, m)), s = R(DIR * root_sin(RADIX, m));
        acc = acc + complex<R>(u[q].re * c - u[q].im * s, u[q].re * s + u[q].im * c);
      }
      y[k] = acc;
    }
#pragma unroll
    for (int k = 0; k < RADIX; ++k) u[k] = y[k];
  }
}

// Shared index of point i of a row: one value of padding per 16 spreads the
// strided accesses of the stages over the banks (host: _fft_launch.padded).
__device__ __forceinline__ int sx(int i) { return i + (i >> 4); }
__host__ __device__ constexpr int padded(int m) { return m + (m >> 4); }
// sx(j + d) for j >= 0 and a constant d >= 0: sx(j) + sx(d) when 16 divides
// d, sx(j) + d when NOCARRY (j % 16 + d < 16). The compiler did not see
// either and spent three integer instructions on each shared access.
template <bool NOCARRY = false> __device__ __forceinline__ int sx_at(int j, int d) {
  return d % 16 == 0 ? sx(j) + padded(d) : NOCARRY ? sx(j) + d : sx(j + d);
}

// exp(-2 pi i t / n) for 0 <= t < n <= 2^24 (float(t) is exact), two_over_n =
// 2 / n: the table entry tw[t], or for float with TWC sincospif's (about an
// ulp, as the table's rounding): the table's gathers (strided in the stages,
// scattered over an n-point table in the four-step stores) took the L1 pipe
// that the shared-memory stages need, and missed L1 for long tables.
template <bool TWC>
__device__ __forceinline__ complex<float> unit_root(const complex<float>* __restrict__ tw, int t, float two_over_n) {
  if constexpr (TWC) {
    float s, c;
    sincospif(float(t) * two_over_n, &s, &c);
    return complex<float>(c, -s);
  } else {
    return tw[t];
  }
}
template <bool TWC>
__device__ __forceinline__ complex<double> unit_root(const complex<double>* __restrict__ tw, int t, double) {
  return tw[t];
}

// u[q] *= w^q for w = exp(-2 pi i t / M) (the sign of DIR): unit_root at the
// powers of two q, products of at most log2(RADIX) of them elsewhere (a few
// ulps, and log2(RADIX) roots per butterfly instead of RADIX - 1).
template <int DIR, int RADIX, int M, bool TWC, class R>
__device__ __forceinline__ void twiddle(complex<R> (&u)[RADIX], const complex<R>* __restrict__ tw, int t) {
  complex<R> w[RADIX];
#pragma unroll
  for (int q = 1; q < RADIX; ++q) {
    const int lo = q & -q;
    w[q] = q == lo ? dir<DIR>(unit_root<TWC>(tw, q * t, R(2.0 / M))) : w[q - lo] * w[lo];
    u[q] = u[q] * w[q];
  }
}

// Point j + d (d a constant) of the row in shared memory: the source of every
// stage but a first one that reads global memory directly.
template <class R> struct SharedRow {
  const complex<R>* s;
  __device__ __forceinline__ complex<R> operator()(int j, int d) const { return s[sx_at(j, d)]; }
};

// One Stockham stage (P: points of the sub-transforms done so far) of the
// M-point row s; tw[t] = exp(-2 pi i t / M). The stage reads its inputs from
// src into registers and writes its outputs to s: after a barrier when src
// is s itself (IN_PLACE), at once when src is global memory.
template <class R, int M, int T, int DIR, bool TWC, int P, int RADIX, bool IN_PLACE, class Src>
__device__ __forceinline__ void stage(complex<R>* s, const complex<R>* __restrict__ tw, int tid, Src src) {
  constexpr int NB = M / RADIX;
  constexpr int IT = (NB + T - 1) / T;
  constexpr int STRIDE = M / (P * RADIX);
  complex<R> u[IT][RADIX];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int i = tid + it * T;
    if (NB % T == 0 || i < NB) {
#pragma unroll
      for (int q = 0; q < RADIX; ++q) u[it][q] = src(i, q * NB);
    }
  }
  if (IN_PLACE) __syncthreads();
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int i = tid + it * T;
    if (NB % T == 0 || i < NB) {
      const int k = i % P;
      if (P > 1) twiddle<DIR, RADIX, M, TWC>(u[it], tw, k * STRIDE);
      dft<RADIX, DIR>(u[it]);
      // j % 16 + q P < 16 when P RADIX divides 16 (j % (P RADIX) = k < P)
      const int j = (i - k) * RADIX + k;
#pragma unroll
      for (int q = 0; q < RADIX; ++q) s[sx_at<16 % (P * RADIX) == 0>(j, q * P)] = u[it][q];
    }
  }
  __syncthreads();
}

template <class R, int M, int T, int DIR, bool TWC, int P, bool IN_PLACE, class Src>
__device__ __forceinline__ void stages(complex<R>*, const complex<R>* __restrict__, int, Src) {}

template <class R, int M, int T, int DIR, bool TWC, int P, bool IN_PLACE, int RADIX, int... REST, class Src>
__device__ __forceinline__ void stages(complex<R>* s, const complex<R>* __restrict__ tw, int tid, Src src) {
  stage<R, M, T, DIR, TWC, P, RADIX, IN_PLACE>(s, tw, tid, src);
  stages<R, M, T, DIR, TWC, P * RADIX, true, REST...>(s, tw, tid, SharedRow<R>{s});
}

// The type of the offsets inside a row (see the top).
template <bool WIDE> struct Index { using type = int; };
template <> struct Index<true> { using type = long long; };

// The element at offset base of p, of type R when REAL, else complex<R>.
template <bool REAL, class R> struct Elem { using type = complex<R>; };
template <class R> struct Elem<true, R> { using type = R; };
template <bool REAL, class R> __device__ __forceinline__ const typename Elem<REAL, R>::type* row_at(const void* p, long long base) {
  return static_cast<const typename Elem<REAL, R>::type*>(p) + base;
}
template <bool REAL, class R> __device__ __forceinline__ typename Elem<REAL, R>::type* row_at(void* p, long long base) {
  return static_cast<typename Elem<REAL, R>::type*>(p) + base;
}

// A real sample at x[off], or 0 where the in-row index r0 + off falls outside
// [0, clip) (clip > 0: the zero padding of a centred STFT, read virtually
// instead of padding the signal).
template <class R, class I> __device__ __forceinline__ R real_at(const R* x, long long r0, I off, long long clip) {
  return clip > 0 && (r0 + off < 0 || r0 + off >= clip) ? R(0) : x[off];
}

// Element j (< L) of the complex input of a transform whose row starts at
// row (real elements for LD_REAL and LD_PAIRS, complex ones otherwise), by load mode.
template <int LOAD, class R, class I>
__device__ __forceinline__ complex<R> load(const void* row, const R* __restrict__ win, const complex<R>* __restrict__ rtw, I es, int j,
                                           int L, long long r0 = 0, long long clip = 0) {
  if constexpr (LOAD == LD_C2C) {
    return static_cast<const complex<R>*>(row)[I(j) * es];
  } else if constexpr (LOAD == LD_REAL) {
    const R v = real_at(static_cast<const R*>(row), r0, I(j) * es, clip);
    return complex<R>(win ? v * win[j] : v, R(0));
  } else if constexpr (LOAD == LD_PAIRS) {
    const R* x = static_cast<const R*>(row);
    const I off = 2 * I(j) * es;
    R a, b;
    const R* p = x + off;  // not read unless inside the row
    if (es == 1 && (reinterpret_cast<size_t>(p) & (2 * sizeof(R) - 1)) == 0 && (clip <= 0 || (r0 + off >= 0 && r0 + off + 1 < clip))) {
      const complex<R> v = *reinterpret_cast<const complex<R>*>(p);  // one aligned 2-wide load
      a = v.re;
      b = v.im;
    } else {
      a = real_at(x, r0, off, clip);
      b = real_at(x, r0, off + es, clip);
    }
    if (win) {
      a *= win[2 * j];
      b *= win[2 * j + 1];
    }
    return complex<R>(a, b);
  } else {
    const complex<R>* X = static_cast<const complex<R>*>(row);
    if constexpr (LOAD == LD_HERM) {  // L odd; X_0's imaginary part is ignored, as NumPy does
      if (j == 0) return complex<R>(X[0].re, R(0));
      return j <= L / 2 ? X[I(j) * es] : conj(X[I(L - j) * es]);
    } else {  // LD_IRPRE: L = n/2; Z_k = (a + b) + i (a - b) conj(w_k), a = X_k, b = conj(X_{L-k})
      complex<R> a = X[I(j) * es], b = conj(X[I(L - j) * es]);
      if (j == 0) {  // the imaginary parts of the DC and Nyquist bins are ignored
        a.im = R(0);
        b.im = R(0);
      }
      const complex<R> d = a - b, w = conj(rtw[j]);
      return (a + b) + complex<R>(-(d.re * w.im + d.im * w.re), d.re * w.re - d.im * w.im);
    }
  }
}

// Writes the finished transform z (L points in shared memory) to the row
// starting at row (real elements for ST_REAL and ST_IRPOST, complex ones otherwise).
template <int STORE, class R, class I>
__device__ __forceinline__ void store(void* row, const complex<R>* z, const complex<R>* __restrict__ rtw, I es, int L, R sc, int tid, int T) {
  if constexpr (STORE == ST_C2C) {
    complex<R>* o = static_cast<complex<R>*>(row);
    for (int k = tid; k < L; k += T) o[I(k) * es] = scale(z[sx(k)], sc);
  } else if constexpr (STORE == ST_RPOST) {
    complex<R>* o = static_cast<complex<R>*>(row);
    for (int k = tid; k <= L; k += T) {
      const complex<R> a = z[sx(k == L ? 0 : k)], b = conj(z[sx(k == 0 ? 0 : L - k)]);
      const complex<R> e = a + b, od = rot<-1>(a - b);  // 2E_k and 2O_k
      o[I(k) * es] = scale(e + od * rtw[k], R(0.5) * sc);
    }
  } else if constexpr (STORE == ST_REAL) {
    R* o = static_cast<R*>(row);
    for (int k = tid; k < L; k += T) o[I(k) * es] = z[sx(k)].re * sc;
  } else if constexpr (STORE == ST_IRPOST) {
    R* o = static_cast<R*>(row);
    for (int k = tid; k < L; k += T) {
      const complex<R> v = z[sx(k)];
      o[2 * I(k) * es] = v.re * sc;
      o[(2 * I(k) + 1) * es] = v.im * sc;
    }
  } else {  // ST_HALF
    complex<R>* o = static_cast<complex<R>*>(row);
    for (int k = tid; k <= L / 2; k += T) o[I(k) * es] = scale(z[sx(k)], sc);
  }
}

// The points k = k0 + c T < L of column col of a four-step pass (z: the
// column in shared memory), times sc, to the row starting at rb of out.
// ST_C2C: at rb + col * ois + k * oes, times w^(col * k), w = exp(-2 pi i / n)
// (ptw: the n = ptw_n point twiddle table; none: no twiddle); col < n2 and
// k < n1 make col * k < n. The twiddles are w^(col k0) times powers of
// w^(col T): unit roots at k0 and at the powers of two c, products of at most
// log2(c) + 2 of them elsewhere (one sincospif or gather per point was a
// third of the instructions of the pass).
// ST_HMIRROR: the last pass of a real n-point transform over n = n1 * n2 (col
// = k1 <= n1 / 2, oes = n1, ois = 1): v = X[k1 + n1 k], stored where that is
// a bin <= n / 2, else as its mirror conj(v) = X[n - k1 - n1 k], a bin no
// other point stores unless k1 is 0 or n1 / 2 (whose mirrors are in their own rows).
template <int STORE, int DIR, bool TWC, int M, int T, class R, class I>
__device__ __forceinline__ void store_cols(void* out, const complex<R>* z, const void* ptw_, long long ptw_n, long long rb, long long col,
                                           long long ois, I oes, int k0, int L, R sc) {
  constexpr int CIT = (M + T - 1) / T;
  complex<R>* o = static_cast<complex<R>*>(out) + rb;
  if constexpr (STORE == ST_C2C) {
    o += col * ois;
    const complex<R>* ptw = static_cast<const complex<R>*>(ptw_);
    const R two_over_n = R(2.0 / double(ptw_n));
    const int c1 = int(col);
    complex<R> w[CIT], p[CIT];  // w[c] = w^(col (k0 + c T)) sc; p[c] = w^(col c T) for the powers of two c
    if (ptw) w[0] = scale(dir<DIR>(unit_root<TWC>(ptw, c1 * k0, two_over_n)), sc);
#pragma unroll
    for (int c = 0; c < CIT; ++c) {
      const int k = k0 + c * T;
      if (k < L) {
        complex<R> v = z[sx_at(k0, c * T)];
        if (ptw) {
          if (c > 0) {
            const int lo = c & -c;
            if (c == lo) p[c] = dir<DIR>(unit_root<TWC>(ptw, c1 * c * T, two_over_n));
            w[c] = w[c - lo] * p[lo];
          }
          v = v * w[c];
        } else {
          v = scale(v, sc);
        }
        o[I(k) * oes] = v;
      }
    }
  } else {
    const I n = I(ptw_n), c1 = I(col);
    const bool mirror = c1 != 0 && 2 * c1 != oes;
#pragma unroll
    for (int c = 0; c < CIT; ++c) {
      const int k = k0 + c * T;
      if (k < L) {
        const complex<R> v = scale(z[sx_at(k0, c * T)], sc);
        const I x = c1 + oes * I(k);
        const bool low = 2 * x <= n;
        if (low || mirror) o[low ? x : n - x] = low ? v : conj(v);
      }
    }
  }
}

template <class R, int M, int T, int DIR, bool TWC, int... RADICES>
__device__ __forceinline__ void transform(complex<R>* s, const complex<R>* __restrict__ tw, int tid) {
  stages<R, M, T, DIR, TWC, 1, true, RADICES...>(s, tw, tid, SharedRow<R>{s});
}

// One block: blockDim = (T, TPB); row b = blockIdx.x * TPB + threadIdx.y.
// L: the logical length (M unless BLUE); rtw: exp(-2 pi i k / 2L), k <= L (the
// even real transforms); chirp/bhat: Bluestein's tables for direction DIR.
// LCOLS / SCOLS (rows of M points only): the block loads / stores its TPB rows
// together with the row index fastest across the lanes, so that rows which
// are adjacent columns of a four-step pass move in whole sectors; shared rows
// are then one value longer against bank conflicts. Column loads take complex
// or real (LD_REAL) points; column stores write the first L points, times the
// four-step twiddle (ST_C2C), or the bins k <= n / 2 of a real transform of
// n = ptw_n points (ST_HMIRROR, see store_cols). TWC: float twiddles from
// sincospif instead of the tables (unit_root). WIDE: 64-bit offsets inside
// rows (Index). MINB: the resident blocks per SM to compile for (launch
// bounds): the 512-thread block of an 8192-point row took 80 registers a
// thread, which left room for one block per SM.
template <class R, int M, int T, int TPB, int DIR, int LOAD, int STORE, bool BLUE, bool LCOLS, bool SCOLS, bool TWC, bool WIDE, int MINB,
          int... RADICES>
__global__ void __launch_bounds__(T * TPB, MINB) fft_block(
    const void* in, void* out, const void* tw_, const void* rtw_, const void* chirp_, const void* bhat_, const void* ptw_,
    const void* win_, long long batch, long long inner, long long ibs, long long iis, long long ies, long long obs, long long ois,
    long long oes, int L, long long ptw_n, double scale_, long long shift, long long clip) {
  static_assert(!LCOLS || ((LOAD == LD_C2C || LOAD == LD_REAL) && !BLUE), "column loads take rows of M points");
  static_assert(!SCOLS || ((STORE == ST_C2C || STORE == ST_HMIRROR) && !BLUE), "column stores write rows of M points");
  using I = typename Index<WIDE>::type;
  constexpr bool RIN = LOAD == LD_REAL || LOAD == LD_PAIRS, ROUT = STORE == ST_REAL || STORE == ST_IRPOST;
  // The first stage reads its points straight from global memory (no staging
  // copy in shared memory) unless the rows come in as columns or by Bluestein.
  constexpr bool DIRECT = !LCOLS && !BLUE && sizeof...(RADICES) > 0;
  constexpr int MS = padded(M) + (LCOLS || SCOLS ? 1 : 0);  // shared row stride
  extern __shared__ __align__(16) unsigned char smem_raw[];
  complex<R>* s0 = reinterpret_cast<complex<R>*>(smem_raw);
  complex<R>* s = s0 + threadIdx.y * MS;
  const complex<R>* tw = static_cast<const complex<R>*>(tw_);
  const complex<R>* rtw = static_cast<const complex<R>*>(rtw_);
  const complex<R>* chirp = static_cast<const complex<R>*>(chirp_);
  const complex<R>* bhat = static_cast<const complex<R>*>(bhat_);
  const R* win = static_cast<const R*>(win_);
  const int tid = threadIdx.x;
  const I es_in = I(ies), es_out = I(oes);
  const R sc = R(scale_);
  const long long b = (long long)blockIdx.x * TPB + threadIdx.y;
  const bool valid = b < batch;  // invalid rows still take part in every barrier
  // rows start at (b / inner) * ibs + r0 with in-row index r0 = (b % inner) * iis - shift
  const long long bq = valid ? b / inner : 0, br = valid ? b - bq * inner : 0;
  const long long r0 = br * iis - shift;
  const void* irow = row_at<RIN, R>(in, bq * ibs + r0);
  // In the column mappings thread l handles row l % TPB (fixed, as T * TPB is a
  // multiple of TPB) and the points l / TPB + i * T.
  const int lin = threadIdx.y * T + threadIdx.x;
  const int crow = lin % TPB, k0 = lin / TPB;
  const long long cb = (long long)blockIdx.x * TPB + crow;
  const long long cq = cb < batch ? cb / inner : 0, col = cb < batch ? cb - cq * inner : 0;
  // The column loops are unrolled so that a thread has several loads in
  // flight (8: all 16 of a 256-point column spilled at 64 registers).
  constexpr int CIT = (M + T - 1) / T;
  if constexpr (LCOLS) {
    const void* crow_in = row_at<RIN, R>(in, cq * ibs + col * iis);
#pragma unroll 8
    for (int c = 0; c < CIT; ++c) {
      const int j = k0 + c * T;
      if (M % T == 0 || j < M) s0[crow * MS + sx_at(k0, c * T)] = cb < batch ? load<LOAD, R>(crow_in, nullptr, rtw, es_in, j, M) : complex<R>(R(0), R(0));
    }
    __syncthreads();
  } else if constexpr (!DIRECT) {
    for (int j = tid; j < M; j += T) {
      complex<R> v(R(0), R(0));
      if (valid && j < L) v = load<LOAD, R>(irow, win, rtw, es_in, j, L, r0, clip);
      if (BLUE && j < L) v = v * dir<DIR>(chirp[j]);
      s[sx(j)] = v;
    }
    __syncthreads();
  }
  if constexpr (BLUE) {
    transform<R, M, T, -1, TWC, RADICES...>(s, tw, tid);
    for (int j = tid; j < M; j += T) s[sx(j)] = s[sx(j)] * dir<DIR>(bhat[j]);
    __syncthreads();
    transform<R, M, T, 1, TWC, RADICES...>(s, tw, tid);
    for (int j = tid; j < L; j += T) s[sx(j)] = s[sx(j)] * dir<DIR>(chirp[j]);
    __syncthreads();
  } else if constexpr (DIRECT) {  // L == M
    const auto src = [&](int j, int d) { return valid ? load<LOAD, R>(irow, win, rtw, es_in, j + d, L, r0, clip) : complex<R>(R(0), R(0)); };
    stages<R, M, T, DIR, TWC, 1, false, RADICES...>(s, tw, tid, src);
  } else {
    transform<R, M, T, DIR, TWC, RADICES...>(s, tw, tid);
  }
  if constexpr (SCOLS) {
    if (cb < batch) store_cols<STORE, DIR, TWC, M, T, R, I>(out, s0 + crow * MS, ptw_, ptw_n, cq * obs, col, ois, es_out, k0, L, sc);
  } else if (valid) {
    store<STORE, R, I>(row_at<ROUT, R>(out, bq * obs + br * ois), s, rtw, es_out, L, sc, tid, T);
  }
}

// -- elementwise steps of the transforms too long for one block -------------------

// w[b, j] = x[b, j] * chirp_j for j < L, 0 up to M (rows of x are contiguous).
template <class R, int DIR>
__global__ void chirp_in(const complex<R>* __restrict__ x, const complex<R>* __restrict__ chirp, complex<R>* __restrict__ w,
                         long long batch, int L, int M) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * M) return;
  const long long b = i / M;
  const int j = int(i % M);
  w[i] = j < L ? x[b * L + j] * dir<DIR>(chirp[j]) : complex<R>(R(0), R(0));
}

// y[b, k] *= v_k over rows of M.
template <class R, int DIR>
__global__ void mul_rows(complex<R>* __restrict__ y, const complex<R>* __restrict__ v, long long batch, int M) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < batch * M) y[i] = y[i] * dir<DIR>(v[i % M]);
}

// out[b, k] = scale * y[b, k] * chirp_k for k < L.
template <class R, int DIR>
__global__ void chirp_out(const complex<R>* __restrict__ y, const complex<R>* __restrict__ chirp, complex<R>* __restrict__ out,
                          long long batch, int L, int M, double scale_) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * L) return;
  const long long b = i / L;
  const int k = int(i % L);
  out[i] = scale(y[b * M + k] * dir<DIR>(chirp[k]), R(scale_));
}

// Even rfft of 2L points from the L-point transform z: out[b, k], k <= L.
template <class R>
__global__ void rfft_post(const complex<R>* __restrict__ z, const complex<R>* __restrict__ rtw, complex<R>* __restrict__ out,
                          long long batch, int L, double scale_) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * (L + 1)) return;
  const long long b = i / (L + 1);
  const int k = int(i % (L + 1));
  const complex<R>* zr = z + b * L;
  const complex<R> a = zr[k == L ? 0 : k], c = conj(zr[k == 0 ? 0 : L - k]);
  out[i] = scale((a + c) + rot<-1>(a - c) * rtw[k], R(0.5 * scale_));
}

// The L-point input of an even irfft of 2L points from X[b, 0..L].
template <class R>
__global__ void irfft_pre(const complex<R>* __restrict__ X, const complex<R>* __restrict__ rtw, complex<R>* __restrict__ z,
                          long long batch, int L) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * L) return;
  const long long b = i / L;
  z[i] = load<LD_IRPRE, R, int>(X + b * (L + 1), nullptr, rtw, 1, int(i % L), L);
}

// The n Hermitian-symmetric points of an odd irfft from X[b, 0..n/2].
template <class R>
__global__ void herm_expand(const complex<R>* __restrict__ X, complex<R>* __restrict__ z, long long batch, int n) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * n) return;
  const long long b = i / n;
  z[i] = load<LD_HERM, R, int>(X + b * (n / 2 + 1), nullptr, nullptr, 1, int(i % n), n);
}

}  // namespace pgk_fft
