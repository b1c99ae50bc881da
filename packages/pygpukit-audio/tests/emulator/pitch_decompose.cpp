// The median-filter and Viterbi kernels (decompose.cu, pitch.cu) on the CPU,
// for CI, as harness.cpp runs the other audio kernels: every CUDA thread of a
// block is a std::thread, __syncthreads() a std::barrier, the dynamic shared
// memory a static buffer (one block runs at a time). Compiled by
// test_kernel_emulation_pitch_decompose.py with the .cu files copied next to
// it (the dynamic shared memory declaration rewritten to g_dyn_smem).
#include <barrier>
#include <thread>
#include <vector>
#include <cstring>
struct D3 { unsigned x = 0, y = 0, z = 0; };
thread_local D3 threadIdx;
D3 blockIdx, gridDim;
std::barrier<>* g_bar;
alignas(16) unsigned char g_dyn_smem[1 << 16];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __syncthreads() g_bar->arrive_and_wait()
#include "decompose.cu"
#include "pitch.cu"
template <class F> void launch(unsigned gx, unsigned threads, F f) {
  gridDim.x = gx;
  for (unsigned bx = 0; bx < gx; ++bx) {
    blockIdx.x = bx;
    std::barrier<> bar(threads); g_bar = &bar;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t) ts.emplace_back([&, t] { threadIdx.x = t; f(); });
    for (auto& th : ts) th.join();
  }
}
using namespace pgk_audio;
extern "C" void median(int dbl, const void* x, long long total, long long n, long long inner, int k, void* y) {
  unsigned gx = (unsigned)((total + kMedianThreads - 1) / kMedianThreads);
  if (dbl) launch(gx, kMedianThreads, [&] { median_filter_axis<double>((const double*)x, total, n, inner, k, (double*)y); });
  else launch(gx, kMedianThreads, [&] { median_filter_axis<float>((const float*)x, total, n, inner, k, (float*)y); });
}
extern "C" void viterbi(const double* lp, const double* lt, const double* li, int steps, int states, int* ptr, int* out, int seqs) {
  launch(seqs, kViterbiThreads, [&] { viterbi_decode(lp, lt, li, steps, states, ptr, out); });
}
