// Counter-based random numbers (pygpukit.random): Philox4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC11) written from the paper.
//
// A request of n values with key K (the 64-bit seed; the kernel gets its ten
// round keys) and 128-bit offset O reads Philox blocks O, O+1, ... (counter
// words little-endian: c[0] is the least significant); value i comes from
// block O + i / PER, so results do not depend on the launch geometry. A distribution (Dist) turns the four 32-bit
// words of a block into PER values of its compute type C, with two parameters
// a, b of type P. The host (pygpukit/random.py) advances O by the blocks used
// and holds the NumPy twin of every distribution: floats are converted with
// explicitly rounded operations (__fmul_rn / __fadd_rn, no FMA contraction)
// so that uniform values are bit-identical on both backends.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kRandThreads = 256;

// 32x32 -> 64-bit product as one instruction (mul.wide.u32); written out so
// that the compiler keeps the words in 32-bit registers.
__device__ __forceinline__ void mulhilo(unsigned int a, unsigned int b, unsigned int& hi, unsigned int& lo) {
  unsigned long long p;
  asm("mul.wide.u32 %0, %1, %2;" : "=l"(p) : "r"(a), "r"(b));
  hi = (unsigned int)(p >> 32);
  lo = (unsigned int)p;
}

// One Philox round: two 32x32->64 products, the high halves mixed with the
// other two words and the round key.
__device__ __forceinline__ void philox_round(unsigned int (&c)[4], unsigned int k0, unsigned int k1) {
  unsigned int hi0, lo0, hi1, lo1;
  mulhilo(0xD2511F53u, c[0], hi0, lo0);
  mulhilo(0xCD9E8D57u, c[2], hi1, lo1);
  c[0] = hi1 ^ c[1] ^ k0;
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k1;
  c[3] = lo0;
}

// The key of each of the ten rounds (the seed bumped by the Weyl constants
// 0x9E3779B9, 0xBB67AE85 per round), computed on the host: kernel parameters
// sit in the constant bank, so the rounds read them without instructions.
struct RoundKeys {
  unsigned int k[20];
};

__device__ __forceinline__ void philox4x32_10(unsigned int (&c)[4], const RoundKeys& keys) {
#pragma unroll
  for (int r = 0; r < 10; ++r) philox_round(c, keys.k[2 * r], keys.k[2 * r + 1]);
}

__device__ __forceinline__ unsigned long long word64(const unsigned int (&w)[4], int j) {
  return (unsigned long long)w[2 * j + 1] << 32 | w[2 * j];
}

// a + b * u in float32, in [0, 1) when (a, b) = (0, 1): u is the top BITS bits
// of a word times 2^-BITS. BITS is the precision of the output dtype (24 for
// float32, 11 for float16, 8 for bfloat16, ...), so that u rounds to no value
// of that dtype above the largest one below 1.
template <int BITS>
struct UniformF {
  static constexpr int kPer = 4;
  using P = float;
  using C = float;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], float a, float b, float (&o)[4]) const {
    constexpr float kScale = 1.0f / (float)(1u << BITS);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = __fadd_rn(a, __fmul_rn(b, (float)(w[i] >> (32 - BITS)) * kScale));
  }
};

// a + b * u in float64, u from 53 bits of a 64-bit pair of words.
struct UniformD {
  static constexpr int kPer = 2;
  using P = double;
  using C = double;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], double a, double b, double (&o)[2]) const {
#pragma unroll
    for (int j = 0; j < 2; ++j) o[j] = __dadd_rn(a, __dmul_rn(b, (double)(word64(w, j) >> 11) * 0x1p-53));
  }
};

// a + b * z, z standard normal by Box-Muller on pairs of words: radius from
// u1 = 1 - w/2^32 (in (0, 1], never log(0); 2^32 - w rounded once to float, so
// |z| <= 6.7), angle from the top 24 bits of the other word as a signed
// fraction of 2pi, in [-pi, pi) where the fast __sincosf is accurate to
// 2^-21.4 (absolute): the accurate sincospif would make this kernel
// compute-bound instead of a pure write.
struct NormalF {
  static constexpr int kPer = 4;
  using P = float;
  using C = float;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], float a, float b, float (&o)[4]) const {
    constexpr float kAngle = 6.28318530717958647692f * 0x1p-24f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const unsigned int w0 = w[2 * j], w1 = w[2 * j + 1];
      const float u1 = w0 ? (float)(0u - w0) * 0x1p-32f : 1.0f;
      const float t = (float)((int)w1 >> 8) * kAngle;
      const float r = sqrtf(-2.0f * logf(u1));
      float s, c;
      __sincosf(t, &s, &c);
      o[2 * j] = __fadd_rn(a, __fmul_rn(b, __fmul_rn(r, c)));
      o[2 * j + 1] = __fadd_rn(a, __fmul_rn(b, __fmul_rn(r, s)));
    }
  }
};

// The float64 Box-Muller: one block per pair, 53-bit u1 = 1 - x/2^53 and u2.
struct NormalD {
  static constexpr int kPer = 2;
  using P = double;
  using C = double;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], double a, double b, double (&o)[2]) const {
    const double u1 = (double)((1ull << 53) - (word64(w, 0) >> 11)) * 0x1p-53;
    const double u2 = (double)(word64(w, 1) >> 11) * 0x1p-53;
    const double r = sqrt(-2.0 * log(u1));
    double s, c;
    sincospi(2.0 * u2, &s, &c);
    o[0] = __dadd_rn(a, __dmul_rn(b, __dmul_rn(r, c)));
    o[1] = __dadd_rn(a, __dmul_rn(b, __dmul_rn(r, s)));
  }
};

// Integers a + floor(x * b / 2^64) for a range b <= 2^32, x a 64-bit draw:
// no modulo; each of the b results has probability within b / 2^64 <= 2^-32
// (relative) of 1/b. Arithmetic mod 2^64: a is low as two's complement.
struct IntSmall {
  static constexpr int kPer = 2;
  using P = unsigned long long;
  using C = unsigned long long;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], P a, P b, C (&o)[2]) const {
#pragma unroll
    for (int j = 0; j < 2; ++j) o[j] = a + __umul64hi(word64(w, j), b);
  }
};

// Ranges above 2^32 (64-bit dtypes): floor(U * b / 2^128) of the 128-bit
// block U (bias <= 2^-64 relative); b == 0 stands for a range of 2^64.
struct IntLarge {
  static constexpr int kPer = 1;
  using P = unsigned long long;
  using C = unsigned long long;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], P a, P b, C (&o)[1]) const {
    const unsigned long long lo = word64(w, 0), hi = word64(w, 1);
    if (b == 0) {
      o[0] = a + hi;
      return;
    }
    // U * b = (hi * b) * 2^64 + lo * b; keep the carry of the middle word.
    const unsigned long long mid = hi * b, sum = mid + __umul64hi(lo, b);
    o[0] = a + __umul64hi(hi, b) + (sum < mid ? 1ull : 0ull);
  }
};

// 1 with probability a / 2^32 (the host rounds p to that grid), else 0.
struct Bernoulli {
  static constexpr int kPer = 4;
  using P = unsigned long long;
  using C = unsigned long long;
  __device__ __forceinline__ void operator()(const unsigned int (&w)[4], P a, P, C (&o)[4]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = w[i] < a ? 1ull : 0ull;
  }
};

// out[0..n) of a contiguous, 16-byte aligned array (every pool block is):
// each thread makes whole blocks and stores their PER values as one vector;
// the last, partial block is stored element by element.
template <class Dist, class T>
__global__ void __launch_bounds__(kRandThreads)
random_fill(T* __restrict__ out, long long n, unsigned long long off_lo, unsigned long long off_hi, RoundKeys keys,
            typename Dist::P a, typename Dist::P b) {
  constexpr int K = Dist::kPer;
  const long long blocks = (n + K - 1) / K;
  for (long long i = (long long)blockIdx.x * kRandThreads + threadIdx.x; i < blocks; i += (long long)gridDim.x * kRandThreads) {
    const unsigned long long lo = off_lo + (unsigned long long)i;
    const unsigned long long hi = off_hi + (lo < off_lo ? 1ull : 0ull);
    unsigned int c[4] = {(unsigned int)lo, (unsigned int)(lo >> 32), (unsigned int)hi, (unsigned int)(hi >> 32)};
    philox4x32_10(c, keys);
    typename Dist::C v[K];
    Dist()(c, a, b, v);
    const long long e = i * K;
    if (e + K <= n) {
      Vec<T, K> vo;
#pragma unroll
      for (int k = 0; k < K; ++k) vo.v[k] = cast<T>(v[k]);
      reinterpret_cast<Vec<T, K>*>(out)[i] = vo;
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (e + k < n) out[e + k] = cast<T>(v[k]);
      }
    }
  }
}

}  // namespace pgk
