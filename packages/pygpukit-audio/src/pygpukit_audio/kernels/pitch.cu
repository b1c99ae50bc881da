// Viterbi decoding of pygpukit-audio (pitch.py, pYIN's hidden Markov model),
// librosa.sequence.viterbi's recursion in double:
//   value[0, j] = log_prob[0, j] + log_init[j]
//   value[t, j] = log_prob[t, j] + max_i (value[t - 1, i] + log_trans[i, j])
// with the first maximizing i (ascending scan, strict >), then the first
// argmax of value[T - 1] and the back-pointers followed back to t = 0.
// One block per sequence (grid x); the previous and current value rows live in
// shared memory (2 S doubles, S <= kViterbiMaxStates); threads stride over the
// states j, so a warp reads one row of log_trans (S x S, row-major) coalesced.
// ptr is scratch (sequences, T, S); states receives (sequences, T).

namespace pgk_audio {

constexpr int kViterbiThreads = 512;
constexpr int kViterbiMaxStates = 3072;

__global__ void __launch_bounds__(kViterbiThreads)
viterbi_decode(const double* __restrict__ log_prob, const double* __restrict__ log_trans, const double* __restrict__ log_init,
               int n_steps, int n_states, int* __restrict__ ptr, int* __restrict__ states) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  double* prev = reinterpret_cast<double*>(smem_raw);
  double* cur = prev + n_states;
  const long long seq = blockIdx.x;
  const double* lp = log_prob + seq * (long long)n_steps * n_states;
  int* bp = ptr + seq * (long long)n_steps * n_states;
  for (int j = threadIdx.x; j < n_states; j += kViterbiThreads) prev[j] = lp[j] + log_init[j];
  __syncthreads();
  for (int t = 1; t < n_steps; ++t) {
    for (int j = threadIdx.x; j < n_states; j += kViterbiThreads) {
      double best = prev[0] + log_trans[j];
      int arg = 0;
      for (int i = 1; i < n_states; ++i) {
        const double v = prev[i] + log_trans[(long long)i * n_states + j];
        if (v > best) {
          best = v;
          arg = i;
        }
      }
      cur[j] = lp[(long long)t * n_states + j] + best;
      bp[(long long)t * n_states + j] = arg;
    }
    __syncthreads();
    double* swap = prev;
    prev = cur;
    cur = swap;
  }
  if (threadIdx.x == 0) {
    int s = 0;
    for (int j = 1; j < n_states; ++j)
      if (prev[j] > prev[s]) s = j;
    int* out = states + seq * (long long)n_steps;
    out[n_steps - 1] = s;
    for (int t = n_steps - 1; t > 0; --t) {
      s = bp[(long long)t * n_states + s];
      out[t - 1] = s;
    }
  }
}

}  // namespace pgk_audio
