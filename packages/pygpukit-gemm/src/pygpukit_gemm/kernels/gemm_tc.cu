// Tensor-core GEMM for bfloat16 / float16 on SM 80+ (mma.sync m16n8k16, FP32
// accumulation): D = act(A @ B + bias) + residual, rounded once to T.
//
// A is row-major (M, K) with leading dimension lda. B is either (K, N)
// row-major (B_NK false: matmul's b) or stored as (N, K) row-major (B_NK true:
// a Linear weight, the product is A @ W^T). K, lda and ldb are multiples of 8
// and the pointers 16-byte aligned (the host pads or copies otherwise): every
// global read is one 16-byte cp.async, and an out-of-range chunk is zero-filled.
//
// A block computes a BM x BN tile with WM x WN warps (each a (BM/WM) x (BN/WN)
// warp tile); K advances BK (32 or 64) at a time through a STAGES-deep ring
// of shared-memory buffers filled by cp.async while earlier stages are
// consumed. Shared tiles are XOR-swizzled at 16-byte granularity so that both
// the cp.async writes and the ldmatrix reads (8 rows of one 16-byte column)
// hit 8 different bank groups:
//   (rows, BK) tiles (A, and B as (N, K)): chunk c of row r is stored at
//     c ^ ((r >> 1) & 3) for BK 32, c ^ (r & 7) for BK 64;
//   (BK, BN) tiles (B as (K, N)): chunk c of row k at c ^ (k & 7), read with ldmatrix.trans.
// Tiles are visited in groups of kGroupM tile rows so that consecutive blocks
// share A and B panels in L2.
//
// fp8 (e4m3, SM 89+) operands ride in the same tile as 16-bit carriers, two
// values each (e4m3x2): a row of K values is K / 2 carriers, so the cp.async
// chunks, the swizzle and ldmatrix move the bytes they move for bf16, and the
// fragments ldmatrix returns are those of mma.m16n8k32.e4m3 (a 32-bit register
// holds 4 consecutive K values where bf16's holds 2: a k16 slice of carriers
// is a k32 slice of e4m3). Their epilogue scales rows and columns (store_scaled).
//
// Three entry points share the tile loop: gemm_tc (a strided batch on
// blockIdx.z), grouped_tc (mixture-of-experts, contiguous layout: rows
// sorted by expert, expert e owns rows [offs[e-1], offs[e]) and weight
// B + e * strideB) and masked_tc (expert e = blockIdx.z owns rows
// [0, masked_m[e]) of its own A and D; rows past it are written as zeros);
// grouped_fp8_tc and masked_fp8_tc are the last two for fp8 operands.
#include "pgk/math.cuh"
#include "pgk/mma.cuh"

namespace pgk {

constexpr int kGroupM = 8;  // tile rows per L2 group


// Element offset of 16-byte chunk c of row r in a (rows, BK) swizzled tile:
// rows of 64 bytes (BK 32) pair up in one 128-byte line, rows of 128 (BK 64) fill one.
template <int BK>
__device__ __forceinline__ int swk(int r, int c) {
  if constexpr (BK == 32) return r * BK + ((c ^ ((r >> 1) & 3)) << 3);
  else return r * BK + ((c ^ (r & 7)) << 3);
}
// ... and of chunk c of row k in a (BK, BN) swizzled tile.
template <int BN>
__device__ __forceinline__ int swn(int k, int c) { return k * BN + ((c ^ (k & 7)) << 3); }

// The epilogue for one accumulator pair at tile-relative row r, absolute
// column c (and c + 1): D = act(v + bias) + R, rounded once to T.
template <class Act, bool BIAS, bool RES, class T>
__device__ __forceinline__ void store_pair(T* D, const T* bias, const T* R, int m0, int rows, int r, int c, int N,
                                           long long ldd, long long ldr, bool pairs, float v0, float v1) {
  if (r >= rows || c >= N) return;
  const Params<float> p{};
  float v[2] = {v0, v1};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (c + j < N) {
      if constexpr (BIAS) v[j] += static_cast<float>(bias[c + j]);
      v[j] = Act()(v[j], p);
      if constexpr (RES) v[j] += static_cast<float>(R[(long long)(m0 + r) * ldr + c + j]);
    }
  }
  T* out = D + (long long)(m0 + r) * ldd + c;
  if (pairs && c + 1 < N) {
    Vec<T, 2> o;
    o.v[0] = T(v[0]), o.v[1] = T(v[1]);
    *reinterpret_cast<Vec<T, 2>*>(out) = o;
  } else {
    out[0] = T(v[0]);
    if (c + 1 < N) out[1] = T(v[1]);
  }
}

// 4-byte stores of pairs line up when every row starts on an even element.
template <class T>
__device__ __forceinline__ bool pair_stores(const T* D, long long ldd) {
  return ldd % 2 == 0 && (reinterpret_cast<unsigned long long>(D) & 3) == 0;
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_NK, class T>
struct Tile {
  static_assert(BK == 32 || BK == 64, "BK is 32 or 64");
  static constexpr int CK = BK / 8;  // 16-byte chunks per row of K
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int TM = BM / WM, TN = BN / WN;  // warp tile
  static constexpr int MT = TM / 16, NT = TN / 8;   // mma tiles per warp
  static constexpr int kStageA = BM * BK, kStageB = BN * BK;  // elements
  static constexpr int kSmemBytes = STAGES * (kStageA + kStageB) * 2;
  static_assert(TM % 16 == 0 && TN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(B_NK || BN % 64 == 0, "a (K, N) B tile needs BN % 64 == 0 for its swizzle");
  static_assert((BM * CK) % kThreads == 0 && (BN * CK) % kThreads == 0, "tile chunks must split evenly over threads");

  float acc[MT][NT][4];

  // Stage s <- rows [m0, m0 + BM) of A and the matching B panel, K block kb.
  __device__ __forceinline__ static void load(T* sA, T* sB, const T* A, const T* B, int m0, int rows, int n0, int N, int K,
                                       long long lda, long long ldb, int kb) {
    const int k0 = kb * BK;
#pragma unroll
    for (int i = 0; i < BM * CK / kThreads; ++i) {
      const int idx = threadIdx.x + i * kThreads, r = idx / CK, c = idx % CK;
      const bool ok = r < rows && k0 + c * 8 < K;
      const T* src = ok ? A + (long long)(m0 + r) * lda + k0 + c * 8 : A;
      cp_async16(smem_addr(sA + swk<BK>(r, c)), src, ok);
    }
    if constexpr (B_NK) {
#pragma unroll
      for (int i = 0; i < BN * CK / kThreads; ++i) {
        const int idx = threadIdx.x + i * kThreads, r = idx / CK, c = idx % CK;
        const bool ok = n0 + r < N && k0 + c * 8 < K;
        const T* src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
        cp_async16(smem_addr(sB + swk<BK>(r, c)), src, ok);
      }
    } else {
      constexpr int CPR = BN / 8;  // chunks per row of the (BK, BN) tile
#pragma unroll
      for (int i = 0; i < BN * CK / kThreads; ++i) {
        const int idx = threadIdx.x + i * kThreads, k = idx / CPR, c = idx % CPR;
        const bool ok = k0 + k < K && n0 + c * 8 < N;
        const T* src = ok ? B + (long long)(k0 + k) * ldb + n0 + c * 8 : B;
        cp_async16(smem_addr(sB + swn<BN>(k, c)), src, ok);
      }
    }
  }

  // One k16 slice of the warp's operands, as mma fragments.
  struct Frags {
    unsigned a[MT][4], b[NT][2];
  };

  // Fragments of k16 slice kk of the stage at (sA, sB) for this warp.
  __device__ __forceinline__ void load_frags(Frags& f, const T* sA, const T* sB, int kk, int wm, int wn) const {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r = wm * TM + mt * 16 + (lane & 15);
      ldmatrix_x4(f.a[mt], smem_addr(sA + swk<BK>(r, kk * 2 + (lane >> 4))));
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      unsigned q[4];
      if constexpr (B_NK) {
        const int n = wn * TN + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(q, smem_addr(sB + swk<BK>(n, kk * 2 + ((lane >> 3) & 1))));
      } else {
        const int k = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        ldmatrix_x4_trans(q, smem_addr(sB + swn<BN>(k, (wn * TN + np * 16) / 8 + (lane >> 4))));
      }
      f.b[2 * np][0] = q[0], f.b[2 * np][1] = q[1], f.b[2 * np + 1][0] = q[2], f.b[2 * np + 1][1] = q[3];
    }
  }

  __device__ __forceinline__ void mma_frags(const Frags& f) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma16816<T>(acc[mt][nt], f.a[mt], f.b[nt][0], f.b[nt][1]);
  }

  // The whole K loop for the tile at (m0, n0); `rows` of A from m0 are valid.
  // Fragments are double-buffered: slice kk + 1 (or the next stage's first
  // slice) is read from shared memory while slice kk's MMAs run. The wait for
  // the next stage and the barrier come before the last slice of a stage, so
  // its fragments can be fetched early; stage kt + STAGES - 1 is issued at the
  // first slice, into the buffer every warp finished reading before that barrier.
  __device__ __forceinline__ void run(T* smem, const T* A, const T* B, int m0, int rows, int n0, int N, int K, long long lda,
                                      long long ldb) {
    const int warp = threadIdx.x >> 5, wm = warp / WN, wn = warp % WN;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
    T* sA = smem;
    T* sB = smem + STAGES * kStageA;
    const int KT = (K + BK - 1) / BK;
    constexpr int KK = BK / 16;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < KT) load(sA + s * kStageA, sB + s * kStageB, A, B, m0, rows, n0, N, K, lda, ldb, s);
      cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    Frags f[2];
    load_frags(f[0], sA, sB, 0, wm, wn);
    for (int kt = 0; kt < KT; ++kt) {
      const int s = kt % STAGES, s_next = (kt + 1) % STAGES;
#pragma unroll
      for (int kk = 0; kk < KK; ++kk) {
        if (kk == KK - 1) {
          cp_async_wait<STAGES - 2>();
          __syncthreads();  // stage kt + 1 landed, for every thread; nobody reads stage kt - 1 any more
          load_frags(f[(kk + 1) & 1], sA + s_next * kStageA, sB + s_next * kStageB, 0, wm, wn);
        } else {
          load_frags(f[(kk + 1) & 1], sA + s * kStageA, sB + s * kStageB, kk + 1, wm, wn);
        }
        if (kk == 0) {
          const int next = kt + STAGES - 1, w = next % STAGES;
          if (next < KT) load(sA + w * kStageA, sB + w * kStageB, A, B, m0, rows, n0, N, K, lda, ldb, next);
          cp_async_commit();
        }
        mma_frags(f[kk & 1]);
      }
    }
    cp_async_wait<0>();
  }

  // D[r, c] = act(acc + bias[c]) + R[r, c] for the tile's valid rows and columns.
  template <class Act, bool BIAS, bool RES>
  __device__ __forceinline__ void store(T* D, const T* bias, const T* R, int m0, int rows, int n0, int N, long long ldd,
                                        long long ldr) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / WN, wn = warp % WN;
    const bool pairs = pair_stores(D, ldd);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_pair<Act, BIAS, RES>(D, bias, R, m0, rows, wm * TM + mt * 16 + (lane >> 2) + h * 8,
                                     n0 + wn * TN + nt * 8 + (lane & 3) * 2, N, ldd, ldr, pairs, acc[mt][nt][h * 2],
                                     acc[mt][nt][h * 2 + 1]);
  }

  // D[r, c] = acc * sa[r] * sb[c] (+ bias[c]), rounded once to O: the fp8
  // products' epilogue (sa: the scales of A's rows from m0, sb: of B's rows, the output columns).
  template <bool BIAS, class O>
  __device__ __forceinline__ void store_scaled(O* D, const O* bias, const float* __restrict__ sa, const float* __restrict__ sb, int m0,
                                               int rows, int n0, int N, long long ldd) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / WN, wn = warp % WN;
    const bool pairs = pair_stores(D, ldd);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * TM + mt * 16 + (lane >> 2) + h * 8, c = n0 + wn * TN + nt * 8 + (lane & 3) * 2;
          if (r >= rows || c >= N) continue;
          const float s = sa[m0 + r];
          const float v0 = acc[mt][nt][h * 2] * s * sb[c], v1 = c + 1 < N ? acc[mt][nt][h * 2 + 1] * s * sb[c + 1] : 0.0f;
          store_pair<Positive, BIAS, false>(D, bias, static_cast<const O*>(nullptr), m0, rows, r, c, N, ldd, 0, pairs, v0, v1);
        }
  }
};

// The tile (tm, tn) of block b in an L2-friendly order over a tiles_m x tiles_n grid.
__device__ __forceinline__ void tile_of(int b, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kGroupM * tiles_n;
  const int first = (b / per_group) * kGroupM;
  const int size = min(tiles_m - first, kGroupM);
  tm = first + (b % per_group) % size;
  tn = (b % per_group) / size;
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_NK, class T, class Act, bool BIAS, bool RES>
__global__ void __launch_bounds__(WM* WN * 32, 1)
gemm_tc(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
        const T* __restrict__ R, int M, int N, int K, long long lda, long long ldb, long long ldd, long long ldr,
        long long strideA, long long strideB, long long strideD, long long strideR) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, B_NK, T>;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tm, tn;
  tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const long long z = blockIdx.z;
  const int m0 = tm * BM, n0 = tn * BN, rows = min(BM, M - m0);
  Cfg tile;
  tile.run(reinterpret_cast<T*>(smem_raw), A + z * strideA, B + z * strideB, m0, rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(D + z * strideD, bias, R + (RES ? z * strideR : 0), m0, rows, n0, N, ldd, ldr);
}

// Mixture-of-experts, contiguous layout. Blocks enumerate the (expert, row
// tile) pairs in order: blockIdx.x = pair * tiles_n + column tile. The grid
// covers the most pairs possible (ceil(M / BM) + E); the spare blocks write
// zeros over the rows no expert owns ([offs[E-1], M)), of which there are
// never more tiles than spare pairs. offs is read clamped to a non-decreasing
// sequence in [0, M], so no offsets can make a block read out of bounds.
struct GroupTile {
  int e, m0, rows;  // rows < 0: a spare block, whose zero rows start at m0
};

template <int BM>
__device__ __forceinline__ GroupTile group_tile(int pair, const int* __restrict__ offs, int E, int M) {
  int start = 0, seen = 0;
  for (int e = 0; e < E; ++e) {  // offs is tiny and the same for every block: cache hits
    const int end = min(max(offs[e], start), M);
    const int tiles = (end - start + BM - 1) / BM;
    if (pair < seen + tiles) {
      const int m0 = start + (pair - seen) * BM;
      return {e, m0, min(BM, end - m0)};
    }
    seen += tiles;
    start = end;
  }
  return {E, start + (pair - seen) * BM, -1};
}

// Zeros over rows [m0, min(m0 + BM, M)) and columns [n0, n0 + BN) of D.
template <int BM, int BN, class T>
__device__ __forceinline__ void zero_tile(T* D, int m0, int n0, int M, int N, long long ldd, int threads) {
  for (int i = threadIdx.x; i < BM * BN; i += threads) {
    const int r = m0 + i / BN, c = n0 + i % BN;
    if (r < M && c < N) D[r * ldd + c] = T(0.0f);
  }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_NK, class T, class Act, bool BIAS, bool RES>
__global__ void __launch_bounds__(WM* WN * 32, 1)
grouped_tc(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
           const T* __restrict__ R, const int* __restrict__ offs, int E, int M, int N, int K, long long lda, long long ldb,
           long long ldd, long long ldr, long long strideB, long long strideBias) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, B_NK, T>;
  const int tiles_n = (N + BN - 1) / BN;
  const int n0 = (blockIdx.x % tiles_n) * BN;
  const GroupTile g = group_tile<BM>(blockIdx.x / tiles_n, offs, E, M);
  if (g.rows < 0) return zero_tile<BM, BN>(D, g.m0, n0, M, N, ldd, Cfg::kThreads);
  Cfg tile;
  tile.run(reinterpret_cast<T*>(smem_raw), A, B + g.e * strideB, g.m0, g.rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(D, BIAS ? bias + g.e * strideBias : bias, R, g.m0, g.rows, n0, N, ldd, ldr);
}

// Mixture-of-experts, masked layout: A (E, max_m, K), D (E, max_m, N).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_NK, class T, class Act, bool BIAS, bool RES>
__global__ void __launch_bounds__(WM* WN * 32, 1)
masked_tc(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
          const T* __restrict__ R, const int* __restrict__ masked_m, int max_m, int N, int K, long long lda, long long ldb,
          long long ldd, long long ldr, long long strideA, long long strideB, long long strideD, long long strideR,
          long long strideBias) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, B_NK, T>;
  const int tiles_m = (max_m + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tm, tn;
  tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const long long e = blockIdx.z;
  const int valid = min(max(masked_m[e], 0), max_m);
  const int m0 = tm * BM, n0 = tn * BN;
  T* De = D + e * strideD;
  if (m0 >= valid) return zero_tile<BM, BN>(De, m0, n0, max_m, N, ldd, Cfg::kThreads);  // rows defined as zeros
  const int rows = min(BM, valid - m0);
  Cfg tile;
  tile.run(reinterpret_cast<T*>(smem_raw), A + e * strideA, B + e * strideB, m0, rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(De, BIAS ? bias + e * strideBias : bias, R + (RES ? e * strideR : 0), m0, rows, n0, N,
                                      ldd, ldr);
  zero_tile<BM, BN>(De, m0 + rows, n0, min(m0 + BM, max_m), N, ldd, Cfg::kThreads);  // the tile's masked rows
}

// The fp8 products: A and B float8_e4m3fn, read as e4m3x2 carriers (K, lda,
// ldb, strideA and strideB count carriers), B stored (N, K); row scales sa of
// A's rows, column scales sb, bias and D in O. gemm_fp8_tc is one product
// (scaled_mm: sa (M,), sb (N,), bias (N,)).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, class O, bool BIAS>
__global__ void __launch_bounds__(WM* WN * 32, 1)
gemm_fp8_tc(const e4m3x2* __restrict__ A, const e4m3x2* __restrict__ B, O* __restrict__ D, const O* __restrict__ bias,
            const float* __restrict__ sa, const float* __restrict__ sb, int M, int N, int K, long long lda, long long ldb, long long ldd) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, true, e4m3x2>;
  int tm, tn;
  tile_of(blockIdx.x, (M + BM - 1) / BM, (N + BN - 1) / BN, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN, rows = min(BM, M - m0);
  Cfg tile;
  tile.run(reinterpret_cast<e4m3x2*>(smem_raw), A, B, m0, rows, n0, N, K, lda, ldb);
  tile.template store_scaled<BIAS>(D, bias, sa, sb, m0, rows, n0, N, ldd);
}

// The grouped ones: B (E, N, K), sb and bias (E, N). grouped_fp8_tc is
// grouped_tc's contiguous layout (sa (M,)).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, class O, bool BIAS>
__global__ void __launch_bounds__(WM* WN * 32, 1)
grouped_fp8_tc(const e4m3x2* __restrict__ A, const e4m3x2* __restrict__ B, O* __restrict__ D, const O* __restrict__ bias,
               const float* __restrict__ sa, const float* __restrict__ sb, const int* __restrict__ offs, int E, int M, int N, int K,
               long long lda, long long ldb, long long ldd, long long strideB) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, true, e4m3x2>;
  const int tiles_n = (N + BN - 1) / BN;
  const int n0 = (blockIdx.x % tiles_n) * BN;
  const GroupTile g = group_tile<BM>(blockIdx.x / tiles_n, offs, E, M);
  if (g.rows < 0) return zero_tile<BM, BN>(D, g.m0, n0, M, N, ldd, Cfg::kThreads);
  Cfg tile;
  tile.run(reinterpret_cast<e4m3x2*>(smem_raw), A, B + g.e * strideB, g.m0, g.rows, n0, N, K, lda, ldb);
  const long long col = (long long)g.e * N;  // expert e's row of sb and bias
  tile.template store_scaled<BIAS>(D, BIAS ? bias + col : bias, sa, sb + col, g.m0, g.rows, n0, N, ldd);
}

// ... and masked_tc's masked layout: A (E, max_m, K), sa (E, max_m), D (E, max_m, N).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, class O, bool BIAS>
__global__ void __launch_bounds__(WM* WN * 32, 1)
masked_fp8_tc(const e4m3x2* __restrict__ A, const e4m3x2* __restrict__ B, O* __restrict__ D, const O* __restrict__ bias,
              const float* __restrict__ sa, const float* __restrict__ sb, const int* __restrict__ masked_m, int max_m, int N, int K,
              long long lda, long long ldb, long long ldd, long long strideA, long long strideB) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, true, e4m3x2>;
  const int tiles_m = (max_m + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tm, tn;
  tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const long long e = blockIdx.z;
  const int valid = min(max(masked_m[e], 0), max_m);
  const int m0 = tm * BM, n0 = tn * BN;
  O* De = D + e * max_m * N;
  if (m0 >= valid) return zero_tile<BM, BN>(De, m0, n0, max_m, N, ldd, Cfg::kThreads);
  const int rows = min(BM, valid - m0);
  Cfg tile;
  tile.run(reinterpret_cast<e4m3x2*>(smem_raw), A + e * strideA, B + e * strideB, m0, rows, n0, N, K, lda, ldb);
  tile.template store_scaled<BIAS>(De, BIAS ? bias + e * N : bias, sa + e * max_m, sb + e * N, m0, rows, n0, N, ldd);
  zero_tile<BM, BN>(De, m0 + rows, n0, min(m0 + BM, max_m), N, ldd, Cfg::kThreads);
}

// ---------------------------------------------------------------------------
// SM 90: warpgroup MMA (wgmma.mma_async, sm_90a). A block of two consumer
// warpgroups computes a 128 x BN tile (each warpgroup 64 x BN, BN/2 FP32
// accumulators per thread), K advancing 64 at a time. The shared tiles are
// the (rows, 64) tiles above, whose swizzle c ^ (r & 7) on 128-byte rows is
// exactly wgmma's 128-byte-swizzle K-major layout (8-row atoms of 1024
// bytes, so every stage buffer is 1024-byte aligned); B must be stored (N, K).
// cp.async fills the stages as before; the async proxy that wgmma reads
// through is fenced after each stage lands.

// A K-major, 128-byte-swizzled shared operand: start address, 1024 bytes
// between 8-row groups, swizzle mode 1 (128B).
__device__ __forceinline__ unsigned long long sw128_desc(const void* p) {
  return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

// d (64 x N, FP32) += A (64 x 16) B (16 x N), both from shared memory; TY is the
// PTX type of both operands (bf16 or f16).
#define PGK_WGMMA_M64N128K16(TY)                                                         \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {"                   \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63" \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                         \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "l"(da), "l"(db), "r"(1))
#define PGK_WGMMA_M64N256K16(TY)                                                         \
  asm volatile(                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {"                   \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" \
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"                                         \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "l"(da), "l"(db), "r"(1))

template <int N, class T>
__device__ __forceinline__ void wgmma_k16(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
  static_assert(N == 128 || N == 256, "wgmma tiles are 128 or 256 wide here");
  if constexpr (N == 128 && is_same<T, bfloat16>::value) PGK_WGMMA_M64N128K16("bf16");
  else if constexpr (N == 128) PGK_WGMMA_M64N128K16("f16");
  else if constexpr (is_same<T, bfloat16>::value) PGK_WGMMA_M64N256K16("bf16");
  else PGK_WGMMA_M64N256K16("f16");
}
#undef PGK_WGMMA_M64N128K16
#undef PGK_WGMMA_M64N256K16

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int BN, int STAGES, class T>
struct WgTile {
  static constexpr int BM = 128, BK = 64, kThreads = 256;
  static_assert(STAGES >= 3, "two stages in flight besides the one being read");
  using Cfg = Tile<BM, BN, BK, 2, 4, STAGES, true, T>;  // its loader: 256 threads, (rows, 64) swizzled tiles
  static constexpr int kSmemBytes = Cfg::kSmemBytes;

  float acc[BN / 2];

  // The whole K loop for the tile at (m0, n0); `rows` of A from m0 are valid.
  // One group of wgmmas stays in flight while the next is issued, so the
  // stage being refilled is the one two behind: STAGES - 2 stages are in
  // flight from global memory.
  __device__ __forceinline__ void run(unsigned char* smem, const T* A, const T* B, int m0, int rows, int n0, int N, int K,
                                      long long lda, long long ldb) {
    T* sA = reinterpret_cast<T*>(smem);
    T* sB = sA + STAGES * Cfg::kStageA;
    const int wg = threadIdx.x >> 7;  // this warpgroup's 64 rows of the tile
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    const int KT = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < KT) Cfg::load(sA + s * Cfg::kStageA, sB + s * Cfg::kStageB, A, B, m0, rows, n0, N, K, lda, ldb, s);
      cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
      cp_async_wait<STAGES - 3>();
      fence_proxy_async();  // this thread's cp.async writes, visible to wgmma's async proxy
      __syncthreads();      // ... and everyone's; the wgmmas of stage kt - 2 are complete (waited below)
      const int next = kt + STAGES - 2;
      if (next < KT) {
        const int w = next % STAGES;
        Cfg::load(sA + w * Cfg::kStageA, sB + w * Cfg::kStageB, A, B, m0, rows, n0, N, K, lda, ldb, next);
      }
      cp_async_commit();
      const int s = kt % STAGES;
      const unsigned long long da = sw128_desc(sA + s * Cfg::kStageA + wg * 64 * BK), db = sw128_desc(sB + s * Cfg::kStageB);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) wgmma_k16<BN, T>(acc, da + 2 * k, db + 2 * k);  // +32 bytes per k16
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    cp_async_wait<0>();
  }

  // acc[j * 4 + h * 2 + {0, 1}]: row (warp % 4) * 16 + lane / 4 + 8h of the
  // warpgroup's 64, columns 8j + 2 (lane % 4) + {0, 1}.
  template <class Act, bool BIAS, bool RES>
  __device__ __forceinline__ void store(T* D, const T* bias, const T* R, int m0, int rows, int n0, int N, long long ldd,
                                        long long ldr) const {
    const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 7) * 64 + ((threadIdx.x >> 5) & 3) * 16 + (lane >> 2);
    const bool pairs = pair_stores(D, ldd);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair<Act, BIAS, RES>(D, bias, R, m0, rows, r0 + h * 8, n0 + j * 8 + (lane & 3) * 2, N, ldd, ldr, pairs,
                                   acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1]);
  }
};

template <int BN, int STAGES, class T, class Act, bool BIAS, bool RES>
__global__ void __launch_bounds__(256, 1)
gemm_wgmma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
           const T* __restrict__ R, int M, int N, int K, long long lda, long long ldb, long long ldd, long long ldr,
           long long strideA, long long strideB, long long strideD, long long strideR) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using W = WgTile<BN, STAGES, T>;
  const int tiles_m = (M + W::BM - 1) / W::BM, tiles_n = (N + BN - 1) / BN;
  int tm, tn;
  tile_of(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const long long z = blockIdx.z;
  const int m0 = tm * W::BM, n0 = tn * BN, rows = min(W::BM, M - m0);
  W tile;
  tile.run(smem_raw, A + z * strideA, B + z * strideB, m0, rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(D + z * strideD, bias, R + (RES ? z * strideR : 0), m0, rows, n0, N, ldd, ldr);
}

// The contiguous mixture-of-experts layout (see grouped_tc) on warpgroups.
template <int BN, int STAGES, class T, class Act, bool BIAS, bool RES>
__global__ void __launch_bounds__(256, 1)
grouped_wgmma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
              const T* __restrict__ R, const int* __restrict__ offs, int E, int M, int N, int K, long long lda,
              long long ldb, long long ldd, long long ldr, long long strideB, long long strideBias) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  using W = WgTile<BN, STAGES, T>;
  const int tiles_n = (N + BN - 1) / BN;
  const int n0 = (blockIdx.x % tiles_n) * BN;
  const GroupTile g = group_tile<W::BM>(blockIdx.x / tiles_n, offs, E, M);
  if (g.rows < 0) return zero_tile<W::BM, BN>(D, g.m0, n0, M, N, ldd, W::kThreads);
  W tile;
  tile.run(smem_raw, A, B + g.e * strideB, g.m0, g.rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(D, BIAS ? bias + g.e * strideBias : bias, R, g.m0, g.rows, n0, N, ldd, ldr);
}

// dst[z][c][r] = src[z][r][c] for a (rows, cols) matrix with row stride lds
// (elements) per batch entry z (stride zs), into contiguous (cols, rows):
// B stored (K, N) becomes the (N, K) operand the warpgroup kernel reads. A
// 64 x 64 tile goes through shared memory; reads and writes are 16-byte
// vectors (8 elements) along the rows of src and of dst, which the host
// guarantees are aligned (lds and rows multiples of 8, 16-byte pointers).
template <class T>
__global__ void __launch_bounds__(256)
transpose_2d(const T* __restrict__ src, T* __restrict__ dst, int rows, int cols, long long lds, long long zs) {
  __shared__ T tile[64][64 + 2];  // 132-byte rows: a column's 8 elements fall in different banks
  const long long z = blockIdx.z;
  const int r0 = blockIdx.y * 64, c0 = blockIdx.x * 64;
  src += z * zs;
  dst += z * (long long)rows * cols;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int idx = threadIdx.x + i * 256, r = idx >> 3, c = (idx & 7) * 8;
    if (r0 + r >= rows) continue;
    const T* p = src + (long long)(r0 + r) * lds + c0 + c;
    if (c0 + c + 8 <= cols) {
      const Vec<T, 8> v = *reinterpret_cast<const Vec<T, 8>*>(p);
#pragma unroll
      for (int j = 0; j < 8; ++j) tile[r][c + j] = v.v[j];
    } else {
      for (int j = 0; c0 + c + j < cols; ++j) tile[r][c + j] = p[j];
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int idx = threadIdx.x + i * 256, c = idx >> 3, r = (idx & 7) * 8;
    if (c0 + c >= cols || r0 + r >= rows) continue;
    Vec<T, 8> v;
#pragma unroll
    for (int j = 0; j < 8; ++j) v.v[j] = tile[r + j][c];
    *reinterpret_cast<Vec<T, 8>*>(dst + (long long)(c0 + c) * rows + r0 + r) = v;  // rows % 8 == 0: whole vectors
  }
}

}  // namespace pgk
