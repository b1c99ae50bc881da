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
// Three entry points share the tile loop: gemm_tc (a strided batch on
// blockIdx.z), grouped_tc (mixture-of-experts, contiguous layout: rows
// sorted by expert, expert e owns rows [offs[e-1], offs[e]) and weight
// B + e * strideB) and masked_tc (expert e = blockIdx.z owns rows
// [0, masked_m[e]) of its own A and D; rows past it are written as zeros).
#include "pgk/math.cuh"

namespace pgk {

constexpr int kGroupM = 8;  // tile rows per L2 group

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (is_same<T, bfloat16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

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
  __device__ __forceinline__ void load(T* sA, T* sB, const T* A, const T* B, int m0, int rows, int n0, int N, int K,
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
    const bool pairs = ldd % 2 == 0 && (reinterpret_cast<unsigned long long>(D) & 3) == 0;  // 4-byte stores line up
    const Params<float> p{};
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * TM + mt * 16 + (lane >> 2) + h * 8;
          const int c = n0 + wn * TN + nt * 8 + (lane & 3) * 2;
          if (r >= rows || c >= N) continue;
          float v[2];
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float x = acc[mt][nt][h * 2 + j];
            if (c + j < N) {
              if constexpr (BIAS) x += static_cast<float>(bias[c + j]);
              x = Act()(x, p);
              if constexpr (RES) x += static_cast<float>(R[(long long)(m0 + r) * ldr + c + j]);
            }
            v[j] = x;
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
template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_NK, class T, class Act, bool BIAS, bool RES>
__global__ void __launch_bounds__(WM* WN * 32, 1)
grouped_tc(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
           const T* __restrict__ R, const int* __restrict__ offs, int E, int M, int N, int K, long long lda, long long ldb,
           long long ldd, long long ldr, long long strideB, long long strideBias) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  using Cfg = Tile<BM, BN, BK, WM, WN, STAGES, B_NK, T>;
  const int tiles_n = (N + BN - 1) / BN;
  const int pair = blockIdx.x / tiles_n, n0 = (blockIdx.x % tiles_n) * BN;
  int e = 0, start = 0, end = 0, seen = 0, tm = -1;
  for (; e < E; ++e) {  // offs is tiny and the same for every block: cache hits
    end = min(max(offs[e], start), M);
    const int tiles = (end - start + BM - 1) / BM;
    if (pair < seen + tiles) {
      tm = pair - seen;
      break;
    }
    seen += tiles;
    start = end;
  }
  if (tm < 0) {  // a spare block: zeros over its share of the unowned rows
    const int m0 = start + (pair - seen) * BM;
    for (int i = threadIdx.x; i < BM * BN; i += Cfg::kThreads) {
      const int r = m0 + i / BN, c = n0 + i % BN;
      if (r < M && c < N) D[r * ldd + c] = T(0.0f);
    }
    return;
  }
  const int m0 = start + tm * BM, rows = min(BM, end - m0);
  Cfg tile;
  tile.run(reinterpret_cast<T*>(smem_raw), A, B + e * strideB, m0, rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(D, BIAS ? bias + e * strideBias : bias, R, m0, rows, n0, N, ldd, ldr);
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
  if (m0 >= valid) {  // nothing to compute: the tile's rows are defined as zeros
    for (int i = threadIdx.x; i < BM * BN; i += Cfg::kThreads) {
      const int r = m0 + i / BN, c = n0 + i % BN;
      if (r < max_m && c < N) De[r * ldd + c] = T(0.0f);
    }
    return;
  }
  const int rows = min(BM, valid - m0);
  Cfg tile;
  tile.run(reinterpret_cast<T*>(smem_raw), A + e * strideA, B + e * strideB, m0, rows, n0, N, K, lda, ldb);
  tile.template store<Act, BIAS, RES>(De, BIAS ? bias + e * strideBias : bias, R + (RES ? e * strideR : 0), m0, rows, n0, N,
                                      ldd, ldr);
  for (int i = threadIdx.x; i < (min(BM, max_m - m0) - rows) * BN; i += Cfg::kThreads) {  // the tile's masked rows
    const int r = m0 + rows + i / BN, c = n0 + i % BN;
    if (c < N) De[r * ldd + c] = T(0.0f);
  }
}

}  // namespace pgk
