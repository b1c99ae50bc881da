// Decode GEMV, y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]), for M <= 8
// rows of activations, with the weight in one of four formats (FMT):
//   Plain<TX>: w in x's dtype (bf16 / fp16 / f32), [N, K];
//   Int8:  q int8 [N, K], w = q * s[n, k / G];
//   Int4:  q uint8 [N, K / 2], k even in the low nibble, k odd in the high one,
//          each nibble the value + 8 (values -8..7), w = q * s[n, k / G];
//   Fp8:   q float8_e4m3fn [N, K], w = q * s[n, k / G] (s float32).
// Integer scales are half, symmetric (no zero point). Row n of the weight is
// contiguous, as in a Linear layer. With half / bfloat16 activations, int8,
// int4 and fp8 weights in groups of 128k and plain weights with K a multiple
// of 128 run on tensor cores (gemv_mma, below).
//
// A warp computes COLS output columns for all M rows; a block has WARPS warps.
// Per step each lane reads 16 bytes of every column's weights (one group, as
// G is a multiple of 32 values), and the next step's are already requested:
// 2 * COLS independent 16-byte loads in flight.
// Weights become floats without I2F (a quarter-rate instruction): a byte b
// placed under the exponent of 2^23 by one PRMT is the float 2^23 + b, and
// one FADD takes the offset (2^23 + 128 for int8 read as b ^ 0x80, 2^23 + 8
// for int4). e4m3 pairs become half pairs by the hardware conversion on
// SM 89+; before that, an e4m3 byte moved into the top of a half (sign kept,
// the rest shifted down one) is the same value times 2^-8, which the scale
// puts back.
// Each column's chunk is converted once, each row's activations once per
// step (L1-cached: every warp reads the same x) and used for every column;
// the group scale is applied once per chunk; the warp's partial sums meet by
// shuffles.
// Both kernels are dependent launches (pgk/pdl.cuh): they request their first
// weights (registers) before waiting for the previous kernel, so a short
// GEMV's DRAM latency and ramp overlap the end of the kernel before it. (An
// L2 prefetch of more of the weight there, tried on an H100, was no faster for
// bf16 and slower for int4.)
#include "pgk/mma.cuh"
#include "pgk/pdl.cuh"

namespace pgk {


template <class T>
__device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }

// 8 activations from k (16 bytes of a 2-byte type; two loads for float).
template <class TX>
__device__ __forceinline__ void load8(const TX* __restrict__ p, float (&out)[8]) {
  if constexpr (sizeof(TX) == 2) {
    const Vec<TX, 8> v = *reinterpret_cast<const Vec<TX, 8>*>(p);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = to_f(v.v[j]);
  } else {
    const Vec<TX, 4> a = *reinterpret_cast<const Vec<TX, 4>*>(p);
    const Vec<TX, 4> b = *reinterpret_cast<const Vec<TX, 4>*>(p + 4);
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = to_f(a.v[j]), out[4 + j] = to_f(b.v[j]);
  }
}

// Byte j of w as the float 2^23 + byte.
__device__ __forceinline__ float byte_as_float(unsigned int w, int j) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u + j));
}

__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// e4m3 bytes 2p, 2p + 1 of w -> a half pair by the hardware conversion (SM 89+;
// exact). The upper pair is read in place (no shift).
__device__ __forceinline__ unsigned e4m3x2_to_half2(unsigned w, int p) {
  unsigned h;
  if (p) asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.rn.f16x2.e4m3x2 %0, hi; }" : "=r"(h) : "r"(w));
  else asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.rn.f16x2.e4m3x2 %0, lo; }" : "=r"(h) : "r"(w));
  return h;
}

// Two e4m3 bytes in the high bytes of t's 16-bit lanes, moved into a 16-bit
// float with SHIFT + 4 exponent bits (half: 1, bfloat16: 4), sign kept: the
// same values times 2^-(bias - 7) (half 2^-8, bfloat16 2^-120), an e4m3
// subnormal becoming a subnormal of the wider format. NaN never occurs in
// quantized weights (it would read as a finite value).
template <int SHIFT>
__device__ __forceinline__ unsigned e4m3x2_scaled(unsigned t) {
  return ((t & 0x7F007F00u) >> SHIFT) | (t & 0x80008000u);
}

// Formats: PER weights per 16-byte chunk, the chunk's values as floats (before
// the scale), the scale type S and the factor the conversion left out.
template <class TX>
struct Plain {
  static constexpr int PER = 16 / sizeof(TX);
  static constexpr bool SCALED = false;
  using S = float;
  static constexpr float kFactor = 1.0f;
  __device__ __forceinline__ static void unpack(const uint4& c, float (&out)[PER]) {
    const Vec<TX, PER> v = *reinterpret_cast<const Vec<TX, PER>*>(&c);
#pragma unroll
    for (int j = 0; j < PER; ++j) out[j] = to_f(v.v[j]);
  }
};

struct Int8 {
  static constexpr int PER = 16;
  static constexpr bool SCALED = true;
  using S = half;
  static constexpr float kFactor = 1.0f;
  __device__ __forceinline__ static void unpack(const uint4& c, float (&out)[16]) {
    const unsigned int words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned int u = words[i] ^ 0x80808080u;  // signed byte b as b + 128
#pragma unroll
      for (int j = 0; j < 4; ++j) out[i * 4 + j] = byte_as_float(u, j) - 8388736.0f;  // 2^23 + 128
    }
  }
};

struct Int4 {
  static constexpr int PER = 32;
  static constexpr bool SCALED = true;
  using S = half;
  static constexpr float kFactor = 1.0f;
  __device__ __forceinline__ static void unpack(const uint4& c, float (&out)[32]) {
    const unsigned int words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned int lo = words[i] & 0x0F0F0F0Fu, hi = (words[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[i * 8 + 2 * j] = byte_as_float(lo, j) - 8388616.0f;  // 2^23 + 8
        out[i * 8 + 2 * j + 1] = byte_as_float(hi, j) - 8388616.0f;
      }
    }
  }
};

struct Fp8 {  // e4m3fn; NaN never occurs in quantized weights
  static constexpr int PER = 16;
  static constexpr bool SCALED = true;
  using S = float;
#if __CUDA_ARCH__ >= 890
  static constexpr float kFactor = 1.0f;
  __device__ __forceinline__ static void unpack(const uint4& c, float (&out)[16]) {
    const unsigned int words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int p = 0; p < 2; ++p) {  // two e4m3 values at a time, by the hardware conversion
        const unsigned int h = e4m3x2_to_half2(words[i], p);
        out[i * 4 + 2 * p] = half_bits_to_float(static_cast<unsigned short>(h & 0xFFFFu));
        out[i * 4 + 2 * p + 1] = half_bits_to_float(static_cast<unsigned short>(h >> 16));
      }
  }
#else
  static constexpr float kFactor = 256.0f;  // 2^(15 - 7): half's exponent bias over e4m3's
  __device__ __forceinline__ static void unpack(const uint4& c, float (&out)[16]) {
    const unsigned int words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        // bytes 2p, 2p+1 into the high bytes of two 16-bit lanes, then as halves
        const unsigned int h = e4m3x2_scaled<1>(__byte_perm(words[i], 0, p ? 0x3727u : 0x1707u));
        out[i * 4 + 2 * p] = half_bits_to_float(static_cast<unsigned short>(h & 0xFFFFu));
        out[i * 4 + 2 * p + 1] = half_bits_to_float(static_cast<unsigned short>(h >> 16));
      }
  }
#endif
};

// The weight a quantized format stands for, in TO (quant.py's
// dequantize_weight on the GPU, for a product of more rows than the GEMV
// takes): one pass over q, each thread a 16-byte chunk (PER values of one
// row, inside one group) at a time, value * scale rounded to float32 and then
// to TO, as the reference's ops round it.
template <class FMT, class TO>
__global__ void __launch_bounds__(256)
dequantize(const unsigned char* __restrict__ q, const typename FMT::S* __restrict__ scales, TO* __restrict__ out, long long chunks,
           int K, int G) {
  constexpr int PER = FMT::PER;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += (long long)gridDim.x * blockDim.x) {
    const long long e0 = i * PER, n = e0 / K;
    const int k0 = (int)(e0 - n * K);
    float v[PER];
    FMT::unpack(reinterpret_cast<const uint4*>(q)[i], v);
    const float s = static_cast<float>(scales[n * (K / G) + k0 / G]) * FMT::kFactor;
#pragma unroll
    for (int h = 0; h < PER / 4; ++h) {
      Vec<TO, 4> o;
#pragma unroll
      for (int j = 0; j < 4; ++j) o.v[j] = TO(v[4 * h + j] * s);
      reinterpret_cast<Vec<TO, 4>*>(out + e0)[h] = o;
    }
  }
}

template <int M, class FMT, int WARPS, int COLS, class TX>
__global__ void __launch_bounds__(WARPS * 32)
gemv(const TX* __restrict__ x, const unsigned char* __restrict__ q, const void* __restrict__ scales_,
     const TX* __restrict__ bias, TX* __restrict__ y, int N, int K, int G) {
  constexpr int PER = FMT::PER;
  using S = typename FMT::S;
  const S* __restrict__ scales = static_cast<const S*>(scales_);
  const int lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * COLS;
  const long long row_bytes = (long long)K * 16 / PER;
  const int groups = FMT::SCALED ? K / G : 0;
  float acc[M][COLS];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < COLS; ++c) acc[m][c] = 0.0f;
  const int steps = K / PER;  // K is a multiple of G, G of PER (of 8 for plain weights)
  // Loads one step ahead: the next chunks are in flight while these are used.
  uint4 w[COLS], next[COLS];
  auto load = [&](uint4 (&dst)[COLS], int s) {
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      const int n = min(n0 + c, N - 1);  // columns past N repeat the last one, never stored
      dst[c] = reinterpret_cast<const uint4*>(q + (long long)n * row_bytes)[s];
    }
  };
  if (n0 < N && lane < steps) load(w, lane);
  wait_prior_grids();
  allow_next_grids();
  if (n0 >= N) return;
  for (int s = lane; s < steps; s += 32) {
    if (s + 32 < steps) load(next, s + 32);
    const long long k0 = (long long)s * PER;
    float scale[COLS];
    if constexpr (FMT::SCALED) {
#pragma unroll
      for (int c = 0; c < COLS; ++c)
        scale[c] = static_cast<float>(scales[(long long)min(n0 + c, N - 1) * groups + k0 / G]) * FMT::kFactor;
    }
    float wv[COLS][PER];
#pragma unroll
    for (int c = 0; c < COLS; ++c) FMT::unpack(w[c], wv[c]);
    // each row's activations are read and converted once, for every column
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float part[COLS];
#pragma unroll
      for (int c = 0; c < COLS; ++c) part[c] = 0.0f;
#pragma unroll
      for (int h = 0; h < PER / 8; ++h) {
        float xv[8];
        load8(x + (long long)m * K + k0 + h * 8, xv);
#pragma unroll
        for (int c = 0; c < COLS; ++c)
#pragma unroll
          for (int j = 0; j < 8; ++j) part[c] = fmaf(wv[c][h * 8 + j], xv[j], part[c]);
      }
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        if constexpr (FMT::SCALED) acc[m][c] = fmaf(part[c], scale[c], acc[m][c]);
        else acc[m][c] += part[c];
      }
    }
#pragma unroll
    for (int c = 0; c < COLS; ++c) w[c] = next[c];
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      float v = acc[m][c];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0 && n0 + c < N) y[(long long)m * N + n0 + c] = TX(bias ? v + to_f(bias[n0 + c]) : v);
    }
}

// Half / bfloat16 activations on tensor cores: int8, int4 and fp8 weights
// with groups of a multiple of 128 values, and plain weights of the
// activations' dtype (K a multiple of 128). Per weight the FFMA kernel above
// spends a PRMT, an FADD and an FFMA for each row (about 6 instructions a
// weight at M = 1 as measured for int4, and M = 8 took 2.1-2.8x as long as
// M = 1). Here mma.sync m16n8k16 does 256 products per instruction: a 16-row
// tile of the weight is the mma's A (16 x 16 per k16), the activation rows
// its B columns (M <= 8 of 8), so the cost does not grow with M. The k order
// inside a step is free as long as A and B agree.
// Lane (r, q) = (lane / 4, lane % 4) reads weight rows r and r + 8 (of each
// of the warp's T tiles of 16 rows) at k = 128 s + 32 q .. + 31 (step s: 128
// values) and activation row min(r, M - 1) there (4 x 16 bytes); a block's
// WARPS warps take every WARPS-th step of the same 16 T rows (more loads in
// flight over short K loops) and meet in shared memory; each warp keeps
// DEPTH steps of weights in flight.
// The weight formats (W): LOADS 16-byte loads a row a step, the group scale
// (of type S, applied once a step) or none, and operands(): the A registers
// and B registers of the step's j-th pair of mma (j < 4) from the lane's
// weights w[row r / r + 8][LOADS] and its activations xj (k = 128 s + 32 q + 8 j ..).
//   Int4Operands: one load (32 nibbles). Two nibbles become two exact 16-bit
//   values with one LOP3 (and a shift): (w >> 4i) & 0x000F000F under the
//   exponent of 128 (bf16) or 1024 (half) is 128 + n, and one packed FMA takes
//   136 (1032) off. A register's two values are the nibbles (k, k + 4) of one
//   32-bit word, and the activations are paired the same way by one PRMT.
//   Int8Operands, Fp8Operands: two loads (32 bytes). A register's two values
//   are the bytes (k, k + 1), paired as the activations already are; each
//   byte becomes its exact value in TX (every int8, every finite e4m3 code)
//   by Int8Mma / Fp8Mma below, 0.5 to 2.5 instructions a weight.
//   PlainOperands: four loads (8 values each), already in the mma's pairs.

// a * b + c on pairs of TX, one rounding (exact where the result is a TX value).
template <class TX>
__device__ __forceinline__ unsigned fma2(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  if constexpr (is_same<TX, bfloat16>::value) asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// (a & B) | C in one LOP3. Written in C++, ptxas kept neither constant in a
// register and built one (IMAD.MOV) before every LOP3: 28 more instructions
// in an int4 step that takes about 150 without them.
template <unsigned B, unsigned C>
__device__ __forceinline__ unsigned and_or(unsigned a) {
  unsigned d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(B), "n"(C));
  return d;
}

template <class TX> struct Int4Mma;
template <> struct Int4Mma<bfloat16> {
  static constexpr unsigned kMagic = 0x43004300u;  // 128, 128
  __device__ __forceinline__ static unsigned unbias(unsigned v) {  // 128 + n -> n - 8, exactly
    return fma2<bfloat16>(v, 0x3F803F80u, 0xC308C308u);  // * 1 - 136
  }
};
template <> struct Int4Mma<half> {
  static constexpr unsigned kMagic = 0x64006400u;  // 1024, 1024
  __device__ __forceinline__ static unsigned unbias(unsigned v) {
    return fma2<half>(v, 0x3C003C00u, 0xE408E408u);  // * 1 - 1032
  }
};

template <class TX>
struct Int4Operands : Int4Mma<TX> {
  static constexpr int LOADS = 1;
  static constexpr bool SCALED = true;
  static constexpr int DEEP_MIN_BLOCKS = 0;
  using S = half;
  __device__ __forceinline__ static void operands(const uint4 (&w)[2][LOADS], const uint4& xj, int j, unsigned (&a)[2][4],
                                                  unsigned (&b)[4]) {
    const unsigned xw[4] = {xj.x, xj.y, xj.z, xj.w};
    const unsigned ww[2] = {(&w[0][0].x)[j], (&w[1][0].x)[j]};  // word j: k = 8j .. 8j + 7 of the lane's 32
    unsigned t[2][4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {  // pair p: k = 8j + p and 8j + 4 + p
      b[p] = __byte_perm(xw[p >> 1], xw[2 + (p >> 1)], (p & 1) ? 0x7632u : 0x5410u);
#pragma unroll
      for (int h = 0; h < 2; ++h) t[h][p] = Int4Mma<TX>::unbias(and_or<0x000F000Fu, Int4Mma<TX>::kMagic>(ww[h] >> (4 * p)));
    }
    a[0][0] = t[0][0], a[0][1] = t[1][0], a[0][2] = t[0][1], a[0][3] = t[1][1];
    a[1][0] = t[0][2], a[1][1] = t[1][2], a[1][2] = t[0][3], a[1][3] = t[1][3];
  }
};

// 8-bit weights: pair(w, p) is the TX pair of bytes 2p, 2p + 1 of the word w.
// int8 -> half: one LOP3 a word adds 128 (the sign bits flipped), one PRMT
// puts two bytes under 0x64 (the half 1024 + 128 + b) and one packed FMA
// takes 1152 off: 1.25 instructions a weight, exact.
// int8 -> bfloat16: 8 significant bits hold every int8 but not 128 + (0..255),
// so the sign bit goes apart: one PRMT puts two bytes under 0x43, one LOP3
// keeps their low 7 bits (the bf16 128 + (b & 127)), one their sign bit (the
// exponent's lowest bit: 128 or 256), and one packed FMA subtracts the second
// from the first: b = (b & 127) - (b & 128), exact; 2 instructions a weight
// (through float32, a PRMT and an FADD a weight and a pack: 2.75).
template <class TX> struct Int8Mma;
template <> struct Int8Mma<half> {
  __device__ __forceinline__ static unsigned pair(unsigned w, int p) {
    return fma2<half>(__byte_perm(w ^ 0x80808080u, 0x64646464u, p ? 0x4342u : 0x4140u), 0x3C003C00u, 0xE480E480u);  // * 1 - 1152
  }
};
template <> struct Int8Mma<bfloat16> {
  __device__ __forceinline__ static unsigned pair(unsigned w, int p) {
    const unsigned t = __byte_perm(w, 0x43434343u, p ? 0x4342u : 0x4140u);
    return fma2<bfloat16>(t & 0xFF80FF80u, 0xBF80BF80u, t & 0xFF7FFF7Fu);  // (128 + (b & 127)) - (128 + (b & 128))
  }
};

// e4m3 -> half on SM 89+: the hardware conversion, 0.5 instructions a weight.
// Otherwise, and for bfloat16 (no such conversion): one PRMT puts two bytes in
// the high bytes of the lanes, e4m3x2_scaled (a shift, two LOP3) makes them
// the values times 2^-8 (half) or 2^-120 (bf16), and one packed FMA by 2^8 or
// 2^120 gives them back exactly, the subnormals too (an FMA without .ftz
// keeps subnormal inputs); 2.5 instructions a weight.
template <class TX> struct Fp8Mma {
  __device__ __forceinline__ static unsigned pair(unsigned w, int p) {
#if __CUDA_ARCH__ >= 890
    if constexpr (is_same<TX, half>::value) return e4m3x2_to_half2(w, p);
#endif
    constexpr bool kHalf = is_same<TX, half>::value;
    const unsigned t = e4m3x2_scaled<kHalf ? 1 : 4>(__byte_perm(w, 0, p ? 0x3727u : 0x1707u));
    return fma2<TX>(t, kHalf ? 0x5C005C00u : 0x7B807B80u, 0x80008000u);  // * 2^8 or 2^120 + (-0)
  }
};

template <class C>
struct ByteOperands {
  static constexpr int LOADS = 2;
  static constexpr bool SCALED = true;
  static constexpr int DEEP_MIN_BLOCKS = 1;
  __device__ __forceinline__ static void operands(const uint4 (&w)[2][LOADS], const uint4& xj, int j, unsigned (&a)[2][4],
                                                  unsigned (&b)[4]) {
    unsigned t[2][4];  // rows r / r + 8: pairs (k, k + 1), k = 8j, 8j + 2, 8j + 4, 8j + 6 of the lane's 32
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned* ww = &w[h][j >> 1].x + 2 * (j & 1);  // k = 8j .. 8j + 3, 8j + 4 .. 8j + 7
#pragma unroll
      for (int p = 0; p < 4; ++p) t[h][p] = C::pair(ww[p >> 1], p & 1);
    }
    a[0][0] = t[0][0], a[0][1] = t[1][0], a[0][2] = t[0][1], a[0][3] = t[1][1];
    a[1][0] = t[0][2], a[1][1] = t[1][2], a[1][2] = t[0][3], a[1][3] = t[1][3];
    b[0] = xj.x, b[1] = xj.y, b[2] = xj.z, b[3] = xj.w;
  }
};
template <class TX>
struct Int8Operands : ByteOperands<Int8Mma<TX>> {
  using S = half;
};
template <class TX>
struct Fp8Operands : ByteOperands<Fp8Mma<TX>> {
  using S = float;
};

struct PlainOperands {
  static constexpr int LOADS = 4;
  static constexpr bool SCALED = false;
  static constexpr int DEEP_MIN_BLOCKS = 0;
  using S = half;  // no scales
  __device__ __forceinline__ static void operands(const uint4 (&w)[2][LOADS], const uint4& xj, int j, unsigned (&a)[2][4],
                                                  unsigned (&b)[4]) {
    const uint4 r0 = w[0][j], r8 = w[1][j];  // k = 8j .. 8j + 7 of the lane's 32, in pairs
    a[0][0] = r0.x, a[0][1] = r8.x, a[0][2] = r0.y, a[0][3] = r8.y;
    a[1][0] = r0.z, a[1][1] = r8.z, a[1][2] = r0.w, a[1][3] = r8.w;
    b[0] = xj.x, b[1] = xj.y, b[2] = xj.z, b[3] = xj.w;
  }
};

// The kernel's body; x_rows(), called after the wait, gives the M activation
// rows (row stride K) that the steps read: the input itself, or rows a fused
// prologue built in shared memory (below). A warp takes T tiles of 16 rows
// (16 T columns a block), whose mma share the step's activations: at T = 2
// a warp reads its activations (M rows of 256 bytes a step, from L1) once
// for 2 KB of int4 weights instead of 1 KB.
template <int M, int WARPS, int DEPTH, class TX, class W, int T, class XRows>
__device__ __forceinline__ void gemv_mma_body(XRows x_rows, const unsigned char* __restrict__ q,
                                              const typename W::S* __restrict__ scales, const TX* __restrict__ bias,
                                              TX* __restrict__ y, int N, int K, int G) {
  constexpr int L = W::LOADS;
  using S = typename W::S;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = lane >> 2, quad = lane & 3;
  const int n0 = blockIdx.x * 16 * T;
  const long long row_bytes = (long long)K * L / 2;  // 16 L bytes per 32 values
  const int groups = W::SCALED ? K / G : 0, steps = K / 128;
  int rows[T][2];  // rows past N repeat the last one, never stored
#pragma unroll
  for (int u = 0; u < T; ++u) rows[u][0] = min(n0 + 16 * u + r, N - 1), rows[u][1] = min(n0 + 16 * u + r + 8, N - 1);
  float acc[T][4] = {};
  // A step's group s / (G / 128) as a shift where G / 128 is a power of two
  // (every usual group size): a 64-bit division there cost more instructions
  // a step than the step's mma.
  const S* srow[T][2];
#pragma unroll
  for (int u = 0; u < T; ++u)
#pragma unroll
    for (int h = 0; h < 2; ++h) srow[u][h] = W::SCALED ? scales + (long long)rows[u][h] * groups : nullptr;
  const unsigned per_group = W::SCALED ? G / 128 : 1;
  const bool pow2 = (per_group & (per_group - 1)) == 0;
  const int shift = __ffs(per_group) - 1;
  // A ring of DEPTH steps of weights and scales in registers: the warp's
  // next DEPTH - 1 steps are in flight while one is used (a warp's steps are
  // few, so each one waited for would cost a whole DRAM latency).
  uint4 w[DEPTH][T][2][L];
  S sc[DEPTH][T][2];
  auto load = [&](uint4 (&dw)[T][2][L], S (&ds)[T][2], int s) {
    const int g = pow2 ? s >> shift : (int)((unsigned)s / per_group);
#pragma unroll
    for (int u = 0; u < T; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int v = 0; v < L; ++v) dw[u][h][v] = reinterpret_cast<const uint4*>(q + rows[u][h] * row_bytes)[(s * 4 + quad) * L + v];
        if constexpr (W::SCALED) ds[u][h] = srow[u][h][g];
      }
  };
#pragma unroll
  for (int i = 0; i < DEPTH; ++i)
    if (warp + i * WARPS < steps) load(w[i], sc[i], warp + i * WARPS);
  wait_prior_grids();
  allow_next_grids();
  const TX* xr = x_rows() + (long long)min(r, M - 1) * K + quad * 32;
  for (int s0 = warp; s0 < steps; s0 += DEPTH * WARPS) {
#pragma unroll
    for (int i = 0; i < DEPTH; ++i) {  // slot i holds step s0 + i * WARPS (unrolled: the ring stays in registers)
      const int s = s0 + i * WARPS;
      if (s >= steps) break;
      uint4 xa[4];  // this lane's 32 activations (row min(r, M - 1): columns past M are never stored)
#pragma unroll
      for (int v = 0; v < 4; ++v) xa[v] = reinterpret_cast<const uint4*>(xr + (long long)s * 128)[v];
      float d[T][4] = {};
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int u = 0; u < T; ++u) {
          unsigned a[2][4], b[4];
          W::operands(w[i][u], xa[j], j, a, b);
          mma16816<TX>(d[u], a[0], b[0], b[1]);
          mma16816<TX>(d[u], a[1], b[2], b[3]);
        }
      // d[u]: rows r (d[u][0], d[u][1]) and r + 8 (d[u][2], d[u][3]) of tile u, activation rows 2q and 2q + 1
#pragma unroll
      for (int u = 0; u < T; ++u) {
        if constexpr (W::SCALED) {
          const float s0f = static_cast<float>(sc[i][u][0]), s1f = static_cast<float>(sc[i][u][1]);
          acc[u][0] = fmaf(d[u][0], s0f, acc[u][0]);
          acc[u][1] = fmaf(d[u][1], s0f, acc[u][1]);
          acc[u][2] = fmaf(d[u][2], s1f, acc[u][2]);
          acc[u][3] = fmaf(d[u][3], s1f, acc[u][3]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[u][e] += d[u][e];
        }
      }
      if (s + DEPTH * WARPS < steps) load(w[i], sc[i], s + DEPTH * WARPS);
    }
  }
  if constexpr (WARPS > 1) {
    __shared__ float4 part[WARPS][T][32];
#pragma unroll
    for (int u = 0; u < T; ++u) part[warp][u][lane] = make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int v = 1; v < WARPS; ++v)
#pragma unroll
      for (int u = 0; u < T; ++u) {
        const float4 p = part[v][u][lane];
        acc[u][0] += p.x, acc[u][1] += p.y, acc[u][2] += p.z, acc[u][3] += p.w;
      }
  }
#pragma unroll
  for (int u = 0; u < T; ++u)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = 2 * quad + (e & 1), n = n0 + 16 * u + r + 8 * (e >> 1);
      if (m < M && n < N) y[(long long)m * N + n] = TX(bias ? acc[u][e] + to_f(bias[n]) : acc[u][e]);
    }
}

// DEEP_MIN_BLOCKS: the blocks an SM that ptxas is told to fit for DEPTH > 1
// (0: its own choice). Such tiles run where the grid has fewer blocks than
// SMs; left to itself ptxas fit 8-bit weights' 16 x 2 tiles into 64
// registers, spilling, for two blocks an SM that never come (88 without).
template <int M, int WARPS, int DEPTH, class TX, class W, int T = 1>
__global__ void __launch_bounds__(WARPS * 32, DEPTH > 1 ? W::DEEP_MIN_BLOCKS : 0)
gemv_mma(const TX* __restrict__ x, const unsigned char* __restrict__ q, const typename W::S* __restrict__ scales,
         const TX* __restrict__ bias, TX* __restrict__ y, int N, int K, int G) {
  gemv_mma_body<M, WARPS, DEPTH, TX, W, T>([&] { return x; }, q, scales, bias, y, N, K, G);
}

// Fused prologues for plain weights (the ops add_rms_norm_linear and
// swiglu_linear of prologue.py): every block builds the M rows of K
// activations in shared memory (dynamic, M * K values) from the previous op's
// output, instead of that op running as a kernel of its own. A decode step
// then saves the kernel, its wait and its round trip through memory; the
// rows are a few KB, read from L2 by each block.

// 8 values rounded to TX into dst (16 bytes).
template <class TX>
__device__ __forceinline__ void store8(TX* dst, const float (&v)[8]) {
  Vec<TX, 8> o;
#pragma unroll
  for (int j = 0; j < 8; ++j) o.v[j] = TX(v[j]);
  *reinterpret_cast<Vec<TX, 8>*>(dst) = o;
}

// y = rms_norm(h) @ w.T (+ bias) with h = a + r rounded to TX (a when r is
// null), rms_norm(h) = h * rsqrt(mean(h^2) + eps) * g (no g: no scale) in
// float32, rounded to TX; block 0 writes h (when r is given).
template <int M, int WARPS, int DEPTH, class TX>
__global__ void __launch_bounds__(WARPS * 32)
gemv_mma_add_rms(const TX* __restrict__ a, const TX* __restrict__ r, const TX* __restrict__ g, TX* __restrict__ h, float eps,
                 const unsigned char* __restrict__ q, const TX* __restrict__ bias, TX* __restrict__ y, int N, int K) {
  extern __shared__ uint4 fused_rows[];
  __shared__ float part[WARPS][M];
  auto build = [&] {
    TX* rows = reinterpret_cast<TX*>(fused_rows);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float ss[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      ss[m] = 0.0f;
      for (int i = threadIdx.x * 8; i < K; i += WARPS * 32 * 8) {
        float v[8];
        load8(a + (long long)m * K + i, v);
        if (r != nullptr) {
          float b[8];
          load8(r + (long long)m * K + i, b);
#pragma unroll
          for (int j = 0; j < 8; ++j) v[j] = to_f(TX(v[j] + b[j]));
          if (blockIdx.x == 0) store8(h + (long long)m * K + i, v);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) ss[m] = fmaf(v[j], v[j], ss[m]);
        store8(rows + m * K + i, v);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) ss[m] += __shfl_xor_sync(0xffffffffu, ss[m], off);
      if (lane == 0) part[warp][m] = ss[m];
    }
    __syncthreads();
    float scale[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float t = 0.0f;
#pragma unroll
      for (int v = 0; v < WARPS; ++v) t += part[v][m];
      scale[m] = rsqrtf(t / (float)K + eps);
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
      for (int i = threadIdx.x * 8; i < K; i += WARPS * 32 * 8) {  // each thread rescales what it wrote
        float v[8], w8[8];
        load8(rows + m * K + i, v);
        if (g != nullptr) load8(g + i, w8);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = g != nullptr ? v[j] * scale[m] * w8[j] : v[j] * scale[m];
        store8(rows + m * K + i, v);
      }
    __syncthreads();
    return static_cast<const TX*>(rows);
  };
  gemv_mma_body<M, WARPS, DEPTH, TX, PlainOperands, 1>(build, q, nullptr, bias, y, N, K, 0);
}

// y = (silu(gate) * up) @ w.T (+ bias), the activation in float32 rounded to
// TX, for rows gu = [gate (K), up (K)] at row stride ld.
template <int M, int WARPS, int DEPTH, class TX>
__global__ void __launch_bounds__(WARPS * 32)
gemv_mma_swiglu(const TX* __restrict__ gu, long long ld, const unsigned char* __restrict__ q, const TX* __restrict__ bias,
                TX* __restrict__ y, int N, int K) {
  extern __shared__ uint4 fused_rows[];
  auto build = [&] {
    TX* rows = reinterpret_cast<TX*>(fused_rows);
#pragma unroll
    for (int m = 0; m < M; ++m)
      for (int i = threadIdx.x * 8; i < K; i += WARPS * 32 * 8) {
        float gv[8], uv[8];
        load8(gu + m * ld + i, gv);
        load8(gu + m * ld + K + i, uv);
#pragma unroll
        for (int j = 0; j < 8; ++j) gv[j] = gv[j] / (1.0f + expf(-gv[j])) * uv[j];
        store8(rows + m * K + i, gv);
      }
    __syncthreads();
    return static_cast<const TX*>(rows);
  };
  gemv_mma_body<M, WARPS, DEPTH, TX, PlainOperands, 1>(build, q, nullptr, bias, y, N, K, 0);
}

}  // namespace pgk
