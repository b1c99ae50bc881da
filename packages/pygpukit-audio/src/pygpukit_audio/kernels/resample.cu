// Polyphase resampling of pygpukit-audio (resample.py): only the kept
// outputs of scipy's upfirdn are computed. Output o of a row reads
//   y[o] = sum_i table[i, ph] * x[jhi - i],  t = o * down + half,
//   ph = t mod up, jhi = t / up,
// table[i, ph] = h[ph + i * up] (the up-scaled filter of 2 half + 1 taps,
// zero past its end), x = cval outside [0, n). The table is stored (ntaps,
// up) so that the threads of a warp, at one tap, read one row of it.
// Grid: x = blocks of kResampleThreads outputs, y = rows.

namespace pgk_audio {

constexpr int kResampleThreads = 256;

template <class T>
__global__ void __launch_bounds__(kResampleThreads)
resample_polyphase(const T* __restrict__ x, long long xr, int n, const T* __restrict__ table, int ntaps, int up, int down,
                   int half, T cval, int nout, T* __restrict__ y) {
  const long long o = (long long)blockIdx.x * kResampleThreads + threadIdx.x;
  if (o >= nout) return;
  const long long row = blockIdx.y;
  const T* xs = x + row * xr;
  const long long t = o * down + half;
  const T* h = table + (int)(t % up);
  const long long jhi = t / up;
  T acc = T(0);
  if (jhi - (ntaps - 1) >= 0 && jhi < n) {  // inside the row: no bounds checks
    const T* xp = xs + jhi;
    for (int i = 0; i < ntaps; ++i) acc = fma(h[(long long)i * up], xp[-i], acc);
  } else {
    for (int i = 0; i < ntaps; ++i) {
      const long long j = jhi - i;
      acc = fma(h[(long long)i * up], (j >= 0 && j < n) ? xs[j] : cval, acc);
    }
  }
  y[row * nout + o] = acc;
}

}  // namespace pgk_audio
