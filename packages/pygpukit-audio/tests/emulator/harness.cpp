// The audio kernels on the CPU, for CI: every CUDA thread of a block is a
// std::thread, __syncthreads() a std::barrier, __shared__ memory a static of
// the kernel (one block runs at a time). test_kernel_emulation.py compiles
// this with the package's .cu files (the dynamic shared memory declaration
// rewritten to g_dyn_smem) and calls the launchers below through ctypes.
#include <barrier>
#include <thread>
#include <vector>
#include <cmath>
#include <cstring>
#include <algorithm>
using std::min; using std::max; using std::fma; using std::fmax; using std::log10; using std::fabs; using std::sqrt; using std::pow;
struct D3 { unsigned x = 0, y = 0, z = 0; };
thread_local D3 threadIdx;
D3 blockIdx, gridDim;
std::barrier<>* g_bar;
alignas(16) unsigned char g_dyn_smem[1 << 16];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
#define __syncthreads() g_bar->arrive_and_wait()
static double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
#include "filters.cu"
#include "resample.cu"
#include "mel.cu"
#include "spectrum.cu"
template <class F> void launch(unsigned gx, unsigned gy, unsigned threads, F f) {
  gridDim.x = gx; gridDim.y = gy;
  for (unsigned by = 0; by < gy; ++by) for (unsigned bx = 0; bx < gx; ++bx) {
    blockIdx.x = bx; blockIdx.y = by;
    std::barrier<> bar(threads); g_bar = &bar;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t) ts.emplace_back([&, t] { threadIdx.x = t; f(); });
    for (auto& th : ts) th.join();
  }
}
using namespace pgk_audio;
#define CH(T, S, A) if (s == S && apply == A) launch(gx, R, kChunks, [&] { sos_chunks<T, S, A>((const T*)x, xr, n, L, C, coef, starts, zi, ends, (T*)y, zf); });
#define CHS(T, A) CH(T, 1, A) CH(T, 2, A) CH(T, 3, A) CH(T, 4, A) CH(T, 5, A) CH(T, 6, A) CH(T, 7, A) CH(T, 8, A)
extern "C" void chunks(int dbl, int s, int apply, const void* x, long long xr, int n, int L, int C, const double* coef, const double* starts,
                       const double* zi, double* ends, void* y, double* zf, int R) {
  unsigned gx = (C + kChunks - 1) / kChunks;
  if (dbl) { CHS(double, true) CHS(double, false) } else { CHS(float, true) CHS(float, false) }
}
#define SC(DD) if (d == DD) launch(R, 1, kScanThreads, [&] { sos_scan<DD>(ends, starts, zi, P, Q, C, g); });
extern "C" void scan(int d, const double* ends, double* starts, const double* zi, const double* P, const double* Q, int C, int g, int R) {
  SC(2) SC(4) SC(6) SC(8) SC(10) SC(12) SC(14) SC(16)
}
extern "C" void fir(int dbl, const void* x, long long xr, int n, const void* b, int K, void* y, int R) {
  unsigned gx = (n + kFirOut - 1) / kFirOut;
  if (dbl) launch(gx, R, kFirThreads, [&] { fir_direct<double>((const double*)x, xr, n, (const double*)b, K, (double*)y); });
  else launch(gx, R, kFirThreads, [&] { fir_direct<float>((const float*)x, xr, n, (const float*)b, K, (float*)y); });
}
extern "C" void rs(int dbl, const void* x, long long xr, int n, const void* table, int ntaps, int up, int down, int half, double cval, int nout, void* y, int R) {
  unsigned gx = (nout + kResampleThreads - 1) / kResampleThreads;
  if (dbl) launch(gx, R, kResampleThreads, [&] { resample_polyphase<double>((const double*)x, xr, n, (const double*)table, ntaps, up, down, half, cval, nout, (double*)y); });
  else launch(gx, R, kResampleThreads, [&] { resample_polyphase<float>((const float*)x, xr, n, (const float*)table, ntaps, up, down, half, (float)cval, nout, (float*)y); });
}
extern "C" void db(int dbl, const void* s, long long n, const void* smax, const void* ref, double ref_db_host, double amin, double top_db, int has_top, void* out, int blocks) {
  if (dbl) launch(blocks, 1, kDbThreads, [&] { power_to_db<double>((const double*)s, n, (const double*)smax, (const double*)ref, ref_db_host, amin, top_db, has_top, (double*)out); });
  else launch(blocks, 1, kDbThreads, [&] { power_to_db<float>((const float*)s, n, (const float*)smax, (const float*)ref, ref_db_host, amin, top_db, has_top, (float*)out); });
}
extern "C" void magpow(int dbl, const void* z, long long n, double power, int mode, void* out, int blocks) {
  if (dbl) launch(blocks, 1, kPowThreads, [&] { magnitude_power<double>((const double*)z, n, power, mode, (double*)out); });
  else launch(blocks, 1, kPowThreads, [&] { magnitude_power<float>((const float*)z, n, power, mode, (float*)out); });
}
