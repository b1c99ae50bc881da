// |X|^power of a complex spectrogram in one pass (mel_features.py): z holds n
// interleaved (re, im) pairs, out n values, both contiguous. mode 2: power 2
// as re^2 + im^2 (no root); mode 1: the magnitude; mode 0: magnitude^power
// in double. One thread per element, grid-stride.

namespace pgk_audio {

constexpr int kPowThreads = 256;

template <class T>
__global__ void __launch_bounds__(kPowThreads)
magnitude_power(const T* __restrict__ z, long long n, double power, int mode, T* __restrict__ out) {
  const long long stride = (long long)gridDim.x * kPowThreads;
  for (long long i = (long long)blockIdx.x * kPowThreads + threadIdx.x; i < n; i += stride) {
    const T re = z[2 * i], im = z[2 * i + 1];
    const T sq = re * re + im * im;
    if (mode == 2) {
      out[i] = sq;
    } else if (mode == 1) {
      out[i] = sqrt(sq);
    } else {
      out[i] = T(pow(sqrt((double)sq), power));
    }
  }
}

}  // namespace pgk_audio
