// Overlap-add of the inverse STFT, gathered per output sample (no atomics):
// out[r, s] = sum_t frames[r, t, P - t hop] * win[P - t hop] / wss(P) with
// P = s + offset and wss(P) = sum_t win[P - t hop]^2 over the same frames
// t < n_frames; where wss(P) <= tiny the sum is left undivided (librosa).

namespace pgk_stft {

template <class R>
__global__ void overlap_add(const R* __restrict__ frames, const R* __restrict__ win, R* __restrict__ out, long long rows, int n_frames,
                            int n_fft, int hop, long long out_len, long long offset, double tiny) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * out_len) return;
  const long long r = i / out_len;
  const long long p = i % out_len + offset;
  long long hi = p / hop;
  if (hi > n_frames - 1) hi = n_frames - 1;
  const long long lo = p >= n_fft ? (p - n_fft) / hop + 1 : 0;
  const R* f = frames + r * (long long)n_frames * n_fft;
  R acc = R(0), wss = R(0);
  for (long long t = lo; t <= hi; ++t) {
    const int j = int(p - t * hop);
    const R w = win[j];
    acc += f[t * n_fft + j] * w;
    wss += w * w;
  }
  out[i] = wss > R(tiny) ? acc / wss : acc;
}

}  // namespace pgk_stft
