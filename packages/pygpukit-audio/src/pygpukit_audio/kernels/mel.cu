// Decibels of pygpukit-audio (mel.py), librosa's power_to_db in one pass:
//   out = max(10 log10(max(amin, s)) - ref_db, 10 log10(max(amin, smax)) - ref_db - top_db)
// (the second term only with has_top: log10 is monotonic, so the maximum of
// the decibels is the decibels of the maximum, smax, reduced beforehand).
// ref_db is 10 log10(max(amin, |ref[0]|)) when ref is given (a value on the
// device, such as the maximum for ref=np.max), else ref_db_host. Math in
// double, one rounding of each output. S and out contiguous, n elements.

namespace pgk_audio {

constexpr int kDbThreads = 256;

template <class T>
__global__ void __launch_bounds__(kDbThreads)
power_to_db(const T* __restrict__ s, long long n, const T* __restrict__ smax, const T* __restrict__ ref, double ref_db_host,
            double amin, double top_db, int has_top, T* __restrict__ out) {
  const double ref_db = ref != nullptr ? 10.0 * log10(fmax(amin, fabs((double)ref[0]))) : ref_db_host;
  const double floor_db = has_top ? 10.0 * log10(fmax(amin, (double)smax[0])) - ref_db - top_db
                                  : __longlong_as_double((long long)0xfff0000000000000ULL);  // -inf
  const long long stride = (long long)gridDim.x * kDbThreads;
  for (long long i = (long long)blockIdx.x * kDbThreads + threadIdx.x; i < n; i += stride) {
    const double db = 10.0 * log10(fmax(amin, (double)s[i])) - ref_db;
    out[i] = T(fmax(db, floor_db));
  }
}

}  // namespace pgk_audio
