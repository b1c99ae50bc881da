// Median filtering of pygpukit-audio (decompose.py) with the numbers of
// scipy.ndimage.median_filter(mode="reflect") along one axis: x is contiguous
// (outer, n, inner) and filtered along n; output (o, i, c) is the value of
// rank k / 2 among x[o, reflect(i - k / 2 + w), c] for w < k, where
// reflect(p) folds p into [0, n) as d c b a | a b c d | d c b a (period 2 n).
// The rank is found by counting (O(k^2) comparisons, no sort and no local
// array): the value v is the answer when #{< v} <= rank < #{<= v}. Inputs are
// finite (checked by the host). Threads run along inner (coalesced reads of
// the frequency filter), then along n, then outer: one flat index per output.

namespace pgk_audio {

constexpr int kMedianThreads = 256;

__device__ __forceinline__ long long reflect_index(long long p, long long n) {
  if (p >= 0 && p < n) return p;  // all but the edges' windows: no division
  const long long period = 2 * n;
  p %= period;
  if (p < 0) p += period;
  return p < n ? p : period - 1 - p;
}

template <class T>
__global__ void __launch_bounds__(kMedianThreads)
median_filter_axis(const T* __restrict__ x, long long total, long long n, long long inner, int k, T* __restrict__ y) {
  const long long t = (long long)blockIdx.x * kMedianThreads + threadIdx.x;
  if (t >= total) return;
  const long long o = t / (n * inner), rem = t % (n * inner);
  const long long i = rem / inner, c = rem % inner;
  const long long base = o * n * inner + c;
  const long long start = i - k / 2;
  const int rank = k / 2;
  T result = x[base + reflect_index(start, n) * inner];
  for (int a = 0; a < k; ++a) {
    const T v = x[base + reflect_index(start + a, n) * inner];
    int less = 0, less_eq = 0;
    for (int b = 0; b < k; ++b) {
      const T w = x[base + reflect_index(start + b, n) * inner];
      less += w < v;
      less_eq += w <= v;
    }
    if (less <= rank && rank < less_eq) {
      result = v;
      break;
    }
  }
  y[t] = result;
}

}  // namespace pgk_audio
