// IIR (sosfilt) and direct FIR filtering of pygpukit-audio (filters.py).
// Signals are rows of n samples: x[r, p] at x + r * xr + p; outputs are
// contiguous (rows, n).
//
// sosfilt runs a cascade of S biquads in transposed direct form II (scipy's
// order of operations) with the math in double. The cascade is a linear
// recurrence on its D = 2 S delays, z' = M z + B x, so time is cut into C
// chunks of L samples that run in parallel:
//   1. sos_chunks<.., false>: every full chunk from zero delays; its end
//      delays e[c] are the chunk's own contribution.
//   2. sos_scan: the true start delays s[c + 1] = P s[c] + e[c], P = M^L,
//      s[0] = zi: each of kScanThreads threads folds g consecutive chunks,
//      a Hillis-Steele scan over the threads with Q_k = (P^g)^(2^k) joins
//      them, and each thread replays its chunks from its true start.
//   3. sos_chunks<.., true>: every chunk again from its true start, writing
//      the outputs (and the final delays zf of the last chunk).
// A block of sos_chunks runs kChunks consecutive chunks of one row, staging
// kSteps samples of each through shared memory so that loads and stores are
// coalesced while each thread walks its own chunk.

namespace pgk_audio {

constexpr int kChunks = 128;       // chunks (threads) per block of sos_chunks
constexpr int kSteps = 32;         // samples of each chunk per shared tile
constexpr int kScanThreads = 256;  // threads of sos_scan (one block per row)
constexpr int kScanLog = 8;        // log2(kScanThreads)

template <class T, int S, bool APPLY>
__global__ void __launch_bounds__(kChunks)
sos_chunks(const T* __restrict__ x, long long xr, int n, int L, int C, const double* __restrict__ coef,
           const double* __restrict__ starts, const double* __restrict__ zi, double* __restrict__ ends,
           T* __restrict__ y, double* __restrict__ zf) {
  constexpr int D = 2 * S;
  __shared__ T tile[kChunks][kSteps + 1];  // +1: the threads of a warp read distinct banks
  const int t = threadIdx.x;
  const long long row = blockIdx.y;
  const int c = blockIdx.x * kChunks + t;
  double cf[5 * S];  // b0 b1 b2 a1 a2 of each section
#pragma unroll
  for (int i = 0; i < 5 * S; ++i) cf[i] = coef[i];
  double z[D];
#pragma unroll
  for (int i = 0; i < D; ++i) {
    double v = 0.0;
    if (APPLY && c < C) {
      if (c > 0) v = starts[(row * C + c) * D + i];
      else if (zi != nullptr) v = zi[row * D + i];
    }
    z[i] = v;
  }
  const T* xs = x + row * xr;
  T* ys = y + row * (long long)n;
  const long long first = (long long)blockIdx.x * kChunks * L;
  const long long mine = (long long)c * L;
  const bool active = APPLY ? c < C : c < C - 1;  // pass 1 needs the full chunks only
  for (int k0 = 0; k0 < L; k0 += kSteps) {
    for (int i = 0; i < kSteps; ++i) {
      const int q = i * kChunks + t;
      const int j = q / kSteps, kk = q % kSteps;
      const long long p = first + (long long)j * L + k0 + kk;
      tile[j][kk] = p < n ? xs[p] : T(0);
    }
    __syncthreads();
    if (active) {
      const long long left = n - (mine + k0);
      const int steps = left < kSteps ? (int)left : kSteps;
      for (int kk = 0; kk < steps; ++kk) {
        double u = (double)tile[t][kk];
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const double* f = cf + 5 * s;
          const double out = fma(f[0], u, z[2 * s]);
          z[2 * s] = fma(f[1], u, fma(-f[3], out, z[2 * s + 1]));
          z[2 * s + 1] = fma(f[2], u, -f[4] * out);
          u = out;
        }
        if (APPLY) tile[t][kk] = T(u);
      }
    }
    __syncthreads();
    if (APPLY) {
      for (int i = 0; i < kSteps; ++i) {
        const int q = i * kChunks + t;
        const int j = q / kSteps, kk = q % kSteps;
        const long long p = first + (long long)j * L + k0 + kk;
        if (p < n) ys[p] = tile[j][kk];
      }
      __syncthreads();
    }
  }
  if (!APPLY && active) {
#pragma unroll
    for (int i = 0; i < D; ++i) ends[(row * C + c) * D + i] = z[i];
  }
  if (APPLY && c == C - 1 && zf != nullptr) {
#pragma unroll
    for (int i = 0; i < D; ++i) zf[row * D + i] = z[i];
  }
}

// v = A v + b for a D x D row-major A.
template <int D>
__device__ __forceinline__ void affine(const double* __restrict__ A, double* v, const double* __restrict__ b) {
  double r[D];
#pragma unroll
  for (int i = 0; i < D; ++i) {
    double acc = b[i];
#pragma unroll
    for (int l = 0; l < D; ++l) acc = fma(A[i * D + l], v[l], acc);
    r[i] = acc;
  }
#pragma unroll
  for (int i = 0; i < D; ++i) v[i] = r[i];
}

// One block per row: starts[r, c] for c in [1, C) from ends[r, c - 1].
// P: M^L; Q: kScanLog matrices (P^g)^(2^k); zi may be null (zero start).
template <int D>
__global__ void __launch_bounds__(kScanThreads)
sos_scan(const double* __restrict__ ends, double* __restrict__ starts, const double* __restrict__ zi,
         const double* __restrict__ P, const double* __restrict__ Q, int C, int g) {
  __shared__ double acc[kScanThreads][D];
  __shared__ double p[D * D];
  const int t = threadIdx.x;
  const long long row = blockIdx.x;
  for (int i = t; i < D * D; i += kScanThreads) p[i] = P[i];
  __syncthreads();
  const double* e = ends + row * C * D;
  double* s = starts + row * C * D;
  const int m = C - 1;  // transitions: s[j + 1] = P s[j] + e[j], j < m
  const int j0 = min(t * g, m), j1 = min(j0 + g, m);
  double u[D], z0[D];
#pragma unroll
  for (int i = 0; i < D; ++i) {
    u[i] = 0.0;
    z0[i] = zi != nullptr ? zi[row * D + i] : 0.0;
  }
  for (int j = j0; j < j1; ++j) affine<D>(p, u, e + (long long)j * D);
  if (t == 0) {  // thread 0's end is s[g] = P^g zi + u_0: fold zi into u_0
    double q[D];
#pragma unroll
    for (int i = 0; i < D; ++i) q[i] = z0[i];
    affine<D>(Q, q, u);
#pragma unroll
    for (int i = 0; i < D; ++i) u[i] = q[i];
  }
#pragma unroll
  for (int i = 0; i < D; ++i) acc[t][i] = u[i];
  __syncthreads();
  for (int k = 0; k < kScanLog; ++k) {
    const int d = 1 << k;
    double w[D];
    if (t >= d) {
#pragma unroll
      for (int i = 0; i < D; ++i) w[i] = acc[t - d][i];
    }
    __syncthreads();
    if (t >= d) {
      double v[D];
#pragma unroll
      for (int i = 0; i < D; ++i) v[i] = acc[t][i];
      affine<D>(Q + (long long)k * D * D, w, v);
#pragma unroll
      for (int i = 0; i < D; ++i) acc[t][i] = w[i];
    }
    __syncthreads();
  }
  double cur[D];
#pragma unroll
  for (int i = 0; i < D; ++i) cur[i] = t == 0 ? z0[i] : acc[t - 1][i];
  for (int j = j0; j < j1; ++j) {
    affine<D>(p, cur, e + (long long)j * D);
#pragma unroll
    for (int i = 0; i < D; ++i) s[(long long)(j + 1) * D + i] = cur[i];
  }
}

// y[r, p] = sum_k b[k] x[r, p - k] (zero before the row's start); K taps.
// A block writes kFirOut consecutive outputs of one row from a shared copy of
// the taps and of the kFirOut + K - 1 samples they read.
constexpr int kFirThreads = 256;
constexpr int kFirPer = 4;  // outputs per thread, kFirThreads apart
constexpr int kFirOut = kFirThreads * kFirPer;

template <class T>
__global__ void __launch_bounds__(kFirThreads)
fir_direct(const T* __restrict__ x, long long xr, int n, const T* __restrict__ b, int K, T* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* taps = reinterpret_cast<T*>(smem_raw);
  T* seg = taps + K;  // seg[i] = x[p0 - (K - 1) + i]
  const int t = threadIdx.x;
  const long long row = blockIdx.y;
  const long long p0 = (long long)blockIdx.x * kFirOut;
  const T* xs = x + row * xr;
  for (int i = t; i < K; i += kFirThreads) taps[i] = b[i];
  for (int i = t; i < kFirOut + K - 1; i += kFirThreads) {
    const long long p = p0 - (K - 1) + i;
    seg[i] = (p >= 0 && p < n) ? xs[p] : T(0);
  }
  __syncthreads();
  T acc[kFirPer];
#pragma unroll
  for (int r = 0; r < kFirPer; ++r) acc[r] = T(0);
  for (int k = 0; k < K; ++k) {
    const T bk = taps[k];
#pragma unroll
    for (int r = 0; r < kFirPer; ++r) acc[r] = fma(bk, seg[t + r * kFirThreads + K - 1 - k], acc[r]);
  }
  T* ys = y + row * (long long)n;
#pragma unroll
  for (int r = 0; r < kFirPer; ++r) {
    const long long p = p0 + t + r * kFirThreads;
    if (p < n) ys[p] = acc[r];
  }
}

}  // namespace pgk_audio
