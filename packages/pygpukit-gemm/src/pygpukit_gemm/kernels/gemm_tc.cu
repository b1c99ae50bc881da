// Tensor-core GEMM for bfloat16 / float16 (and e4m3 with scales): D =
// act(A @ B + bias) + residual, FP32 accumulation, rounded once to the output.
//
// A is row-major (M, K) with leading dimension lda. B is either (K, N)
// row-major (B_NK false: matmul's b) or stored as (N, K) row-major (B_NK true:
// a Linear weight, the product is A @ W^T). K, lda and ldb are multiples of 8
// and the pointers 16-byte aligned (the host pads or copies otherwise): every
// global read is one 16-byte cp.async, and an out-of-range chunk is zero-filled.
//
// Two main loops compute a BM x BN tile of the accumulators; the entry points
// below take either as their template argument Tl:
//   Tile (SM 80+, mma.sync m16n8k16): WM x WN warps, each a (BM/WM) x (BN/WN)
//     warp tile; K advances BK (32 or 64) at a time through a STAGES-deep ring
//     of shared-memory buffers filled by cp.async while earlier stages are
//     consumed.
//   WsTile (SM 90, wgmma.mma_async, sm_90a): a producer warpgroup and two
//     consumer warpgroups of 64 rows over a 128 x BN tile, K 64 at a time, B
//     stored (N, K), persistent; see below.
// Shared tiles are XOR-swizzled at 16-byte granularity so that both the
// cp.async writes and the ldmatrix reads (8 rows of one 16-byte column) hit 8
// different bank groups:
//   (rows, BK) tiles (A, and B as (N, K)): chunk c of row r is stored at
//     c ^ ((r >> 1) & 3) for BK 32, c ^ (r & 7) for BK 64;
//   (BK, BN) tiles (B as (K, N)): chunk c of row k at c ^ (k & 7), read with ldmatrix.trans.
// Tiles are visited in groups of kGroupM tile rows so that consecutive blocks
// share A and B panels in L2.
//
// fp8 (e4m3, SM 89+) operands ride in the same tiles as 16-bit carriers, two
// values each (e4m3x2): a row of K values is K / 2 carriers, so the cp.async
// chunks and the swizzle move the bytes they move for bf16. mma.sync: the
// fragments ldmatrix returns are those of mma.m16n8k32.e4m3 (a 32-bit register
// holds 4 consecutive K values where bf16's holds 2: a k16 slice of carriers
// is a k32 slice of e4m3). wgmma: a k32 e4m3 step reads the 32 bytes of a
// row a k16 bf16 step reads. Their epilogue scales rows and columns (store_scaled).
//
// Entry points (each on either main loop, the tiles of a launch numbered
// along one grid axis): gemm (a strided batch), grouped (mixture-of-experts,
// contiguous layout: rows sorted by expert, expert e owns rows
// [offs[e-1], offs[e]) and weight B + e * strideB) and masked (expert e owns
// rows [0, masked_m[e]) of its own A and D; rows past it are written as
// zeros); gemm_fp8, grouped_fp8 and masked_fp8 are the same for fp8 operands.
#include "pgk/math.cuh"
#include "pgk/mma.cuh"
#include "pgk/sm90.cuh"

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
// Two 128-byte CUtensorMaps (cuTensorMapEncodeTiled's) in global memory: A
// (K inner, rows, box 64 x 128) and B ((E * N) rows, box 64 x BN).
struct alignas(64) TmaMap {
  unsigned long long v[16];
};
struct TmaMaps {
  TmaMap a, b;
};

// A unit of work of a launch: the (m0, n0) tile of one product whose A and
// B start at a and b (batch entry or expert z); rows < 1: nothing to multiply
// (a spare or fully masked tile, which the epilogue zeroes).
template <class T>
struct Job {
  const T* a;
  const T* b;
  int m0, rows, n0, z;
  int ra, rb;  // the tile's first rows of A and of B in the TMA maps' (stacked) operands
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool B_NK, class T>
struct Tile {
  using Elem = T;
  static constexpr int kBM = BM, kBN = BN;
  static_assert(BK == 32 || BK == 64, "BK is 32 or 64");
  static constexpr int CK = BK / 8;  // 16-byte chunks per row of K
  static constexpr int kThreads = WM * WN * 32, kWorkers = kThreads;
  static constexpr int TM = BM / WM, TN = BN / WN;  // warp tile
  static constexpr int MT = TM / 16, NT = TN / 8;   // mma tiles per warp
  static constexpr int kStageA = BM * BK, kStageB = BN * BK;  // elements
  static constexpr int kSmemBytes = STAGES * (kStageA + kStageB) * 2;
  static_assert(TM % 16 == 0 && TN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(B_NK || BN % 64 == 0, "a (K, N) B tile needs BN % 64 == 0 for its swizzle");
  static_assert((BM * CK) % kThreads == 0 && (BN * CK) % kThreads == 0, "tile chunks must split evenly over threads");

  float acc[MT][NT][4];

  // Stage s <- rows [m0, m0 + BM) of A and the matching B panel, K block kb.
  // t: this thread's index among the kThreads loading threads.
  __device__ __forceinline__ static void load(T* sA, T* sB, const T* A, const T* B, int m0, int rows, int n0, int N, int K,
                                       long long lda, long long ldb, int kb, int t) {
    const int k0 = kb * BK;
#pragma unroll
    for (int i = 0; i < BM * CK / kThreads; ++i) {
      const int idx = t + i * kThreads, r = idx / CK, c = idx % CK;
      const bool ok = r < rows && k0 + c * 8 < K;
      const T* src = ok ? A + (long long)(m0 + r) * lda + k0 + c * 8 : A;
      cp_async16(smem_addr(sA + swk<BK>(r, c)), src, ok);
    }
    if constexpr (B_NK) {
#pragma unroll
      for (int i = 0; i < BN * CK / kThreads; ++i) {
        const int idx = t + i * kThreads, r = idx / CK, c = idx % CK;
        const bool ok = n0 + r < N && k0 + c * 8 < K;
        const T* src = ok ? B + (long long)(n0 + r) * ldb + k0 + c * 8 : B;
        cp_async16(smem_addr(sB + swk<BK>(r, c)), src, ok);
      }
    } else {
      constexpr int CPR = BN / 8;  // chunks per row of the (BK, BN) tile
#pragma unroll
      for (int i = 0; i < BN * CK / kThreads; ++i) {
        const int idx = t + i * kThreads, k = idx / CPR, c = idx % CPR;
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
  __device__ __forceinline__ void run(unsigned char* smem_raw, const T* A, const T* B, int m0, int rows, int n0, int N, int K, long long lda,
                                      long long ldb) {
    const int warp = threadIdx.x >> 5, wm = warp / WN, wn = warp % WN;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
    T* sA = reinterpret_cast<T*>(smem_raw);
    T* sB = sA + STAGES * kStageA;
    const int KT = (K + BK - 1) / BK;
    constexpr int KK = BK / 16;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < KT) load(sA + s * kStageA, sB + s * kStageB, A, B, m0, rows, n0, N, K, lda, ldb, s, threadIdx.x);
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
          if (next < KT) load(sA + w * kStageA, sB + w * kStageB, A, B, m0, rows, n0, N, K, lda, ldb, next, threadIdx.x);
          cp_async_commit();
        }
        mma_frags(f[kk & 1]);
      }
    }
    cp_async_wait<0>();
  }

  // The block's one tile, blockIdx.x: job(t) -> Job<T>, epi(job, *this) once
  // the accumulators are final (left unset when rows < 1). No TMA: maps unread.
  template <class JobF, class EpiF>
  __device__ __forceinline__ void for_tiles(unsigned char* smem, int, int N, int K, long long lda, long long ldb, const TmaMaps*,
                                            JobF&& job, EpiF&& epi) {
    const Job<T> j = job(blockIdx.x);
    if (j.rows > 0) run(smem, j.a, j.b, j.m0, j.rows, j.n0, N, K, lda, ldb);
    epi(j, *this);
  }

  // f(r, c, v0, v1) for every accumulator pair: tile-relative row r, columns c and c + 1.
  template <class F>
  __device__ __forceinline__ void each_pair(F&& f) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = warp / WN, wn = warp % WN;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          f(wm * TM + mt * 16 + (lane >> 2) + h * 8, wn * TN + nt * 8 + (lane & 3) * 2, acc[mt][nt][h * 2], acc[mt][nt][h * 2 + 1]);
  }
};

// The epilogue of a main loop's tile at (m0, n0): D = act(acc + bias) + R for
// the `rows` valid rows and the columns below N.
template <class Act, bool BIAS, bool RES, class Tl, class T>
__device__ __forceinline__ void store(const Tl& tile, T* D, const T* bias, const T* R, int m0, int rows, int n0, int N,
                                      long long ldd, long long ldr) {
  const bool pairs = pair_stores(D, ldd);
  tile.each_pair([&](int r, int c, float v0, float v1) {
    store_pair<Act, BIAS, RES>(D, bias, R, m0, rows, r, n0 + c, N, ldd, ldr, pairs, v0, v1);
  });
}

// D[r, c] = acc * sa[r] * sb[c] (+ bias[c]), rounded once to O: the fp8
// products' epilogue (sa: the scales of A's rows from m0, sb: of B's rows, the output columns).
template <bool BIAS, class Tl, class O>
__device__ __forceinline__ void store_scaled(const Tl& tile, O* D, const O* bias, const float* __restrict__ sa,
                                             const float* __restrict__ sb, int m0, int rows, int n0, int N, long long ldd) {
  const bool pairs = pair_stores(D, ldd);
  tile.each_pair([&](int r, int c, float v0, float v1) {
    c += n0;
    if (r >= rows || c >= N) return;
    const float s = sa[m0 + r];
    v0 *= s * sb[c], v1 = c + 1 < N ? v1 * s * sb[c + 1] : 0.0f;
    store_pair<Positive, BIAS, false>(D, bias, static_cast<const O*>(nullptr), m0, rows, r, c, N, ldd, 0, pairs, v0, v1);
  });
}

// ---------------------------------------------------------------------------
// SM 90: warpgroup MMA (wgmma.mma_async, sm_90a), warp-specialized and
// persistent. A block of 384 threads owns one SM and walks the tiles
// blockIdx.x, blockIdx.x + gridDim.x, ...:
//   a producer warpgroup (threads 256-383, setmaxnreg.dec to 40 registers)
//     fills a STAGES-deep ring of shared-memory stages with cp.async, running
//     up to STAGES - 1 stages ahead, into the next tile while the consumers
//     still store the last one;
//   two consumer warpgroups (threads 0-255, setmaxnreg.inc to 232: 128 * 40
//     + 256 * 232 <= 65536) each compute 64 rows x BN of a 128 x BN tile
//     (BN/2 FP32 accumulators a thread), K 64 a stage (64 carriers for e4m3,
//     128 values), then run the epilogue.
// ptxas (NVRTC 12/13) fits the producer's code into its 40 registers but
// compiles the consumers' within the launch bound's 168 all the same: a
// variant with three consumer warpgroups (512 threads, 160 after the
// increase) failed with "Insufficient registers (128)". The accumulators of
// a 64 x 256 warpgroup tile fit in 168 without spills.
// A stage holds Tile's (rows, 64) tiles of A and B (stored (N, K)); their
// swizzle c ^ (r & 7) on 128-byte rows is exactly wgmma's 128-byte-swizzle
// K-major layout (8-row atoms of 1024 bytes, so every stage is 1024-byte
// aligned).
//
// Handshakes, per stage s; `it` counts the K blocks of all of this block's
// tiles, use k = it / STAGES:
//   full[s] (count 128): every producer thread cp.asyncs its chunks of K
//     block it, then cp.async.mbarrier.arrive.noinc (fires once they have
//     landed). Consumers try_wait.parity(full[s], k & 1), then
//     fence.proxy.async (generic-proxy writes -> mbarrier -> wait -> fence ->
//     wgmma reads).
//   empty[s] (count 256): once wait_group retired the wgmmas that read K
//     block it (wait_group 1 after issuing it + 1, or 0 at a tile's end),
//     every consumer thread arrives on its stage; when a tile's rows end
//     within the first 64, the second warpgroup has nothing to compute and
//     the first arrives twice as much. The producer waits
//     try_wait.parity(empty[s], (k - 1) & 1) before reusing s.
// The barriers sit after the stages; mbarrier.init by thread 0, fence, then
// the one block-wide barrier. The producer exits when its loads have landed,
// so the epilogues run on the consumers only (kWorkers threads).

// Rows [0, ROWS) of a (rows, 64) swizzled stage tile at shared address s
// from g (row stride ld), by the producer's 128 threads in few registers:
// thread t moves chunk t % 8 of rows t / 8 + 16 i, one pointer and one shared
// address stepped per pass. Rows from `valid` on, and the chunk when !kok
// (past K), are zero-filled.
template <int ROWS, class T>
__device__ __forceinline__ void ws_load(unsigned s, const T* g, long long ld, int valid, bool kok, int t) {
  const int r0 = t >> 3, c = t & 7;
  const T* p = g + r0 * ld + c * 8;
  unsigned d = s + r0 * 128 + ((c ^ (r0 & 7)) << 4);  // r0 + 16 i keeps r & 7
  int left = valid - r0;
#pragma unroll 4
  for (int i = 0; i < ROWS / 16; ++i) {
    const bool ok = kok && left > 0;
    cp_async16(d, ok ? p : g, ok);
    p += 16 * ld, d += 16 * 128, left -= 16;
  }
}

// One k step of wgmma, d (64 x N, FP32) += A (64 x k) B (k x N), both from shared memory (pgk/sm90.cuh's
// wgmma statements): k16 for bf16 / f16, k32 for e4m3 (32 bytes of each row either way); the immediates after
// scale-d are scale-a, scale-b and, for 16-bit types, the two transposes (none here).
template <int N, class T>
__device__ __forceinline__ void wgmma_step(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
  static_assert(N == 128 || N == 256, "wgmma tiles are 128 or 256 wide here");
  constexpr int scale_d = 1;
  constexpr bool kN128 = N == 128;
  if constexpr (is_same<T, e4m3x2>::value) {
    if constexpr (kN128) PGK_WGMMA_SS64("m64n128k32.f32.e4m3.e4m3", ", 1, 1");
    else PGK_WGMMA_SS128("m64n256k32.f32.e4m3.e4m3", ", 1, 1");
  } else if constexpr (is_same<T, bfloat16>::value) {
    if constexpr (kN128) PGK_WGMMA_SS64("m64n128k16.f32.bf16.bf16", ", 1, 1, 0, 0");
    else PGK_WGMMA_SS128("m64n256k16.f32.bf16.bf16", ", 1, 1, 0, 0");
  } else {
    if constexpr (kN128) PGK_WGMMA_SS64("m64n128k16.f32.f16.f16", ", 1, 1, 0, 0");
    else PGK_WGMMA_SS128("m64n256k16.f32.f16.f16", ", 1, 1, 0, 0");
  }
}

// TMA: the producer is one thread that loads each stage's A and B tiles
// through the tensor maps, at the job's rows ra and rb of the operands seen
// as stacked 2-D arrays (a batch's or an expert's rows one after another);
// TMA writes through the async proxy, so the consumers need no proxy fence.
// full[s] then counts one arrival, the producer's arrive.expect_tx of the
// stage's bytes, which both loads complete. Out-of-range rows and K load as
// zeros; rows of the next expert or batch entry land in rows or columns of
// the tile that are not stored.
template <int BN, int STAGES, class T, bool TMA = false>
struct WsTile {
  using Elem = T;
  static constexpr int kBM = 128, kBN = BN, BK = 64, kWorkers = 256, kThreads = kWorkers + 128;
  static_assert(STAGES >= 2, "a stage being read and one being filled");
  static constexpr int kStageA = kBM * BK * 2, kStage = (kBM + BN) * BK * 2;  // bytes
  static constexpr int kSmemBytes = STAGES * kStage + 16 * STAGES;

  float acc[BN / 2];

  // job(t) -> Job<T> for every tile t of this block; epi(job, *this) on the
  // consumers once the tile's accumulators are final (zeros when rows < 1);
  // maps: the TMA producer's tensor maps (read when TMA).
  template <class JobF, class EpiF>
  __device__ __forceinline__ void for_tiles(unsigned char* smem, int tiles, int N, int K, long long lda, long long ldb,
                                            const TmaMaps* maps, JobF&& job, EpiF&& epi) {
    const unsigned base = smem_addr(smem), full = base + STAGES * kStage, empty = full + 8 * STAGES;
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) mbar_init(full + 8 * s, TMA ? 1 : kThreads - kWorkers), mbar_init(empty + 8 * s, kWorkers);
      fence_mbarrier_init();
    }
    __syncthreads();
    const int KT = (K + BK - 1) / BK;
    if (threadIdx.x >= kWorkers) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
      const int t = threadIdx.x - kWorkers;
      if (!TMA || t == 0) {  // TMA: one thread issues every load
        int it = 0;
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
          const Job<T> j = job(tile);
          if (j.rows < 1) continue;
          for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % STAGES, k0 = kt * BK;
            if (it >= STAGES) mbar_wait(empty + 8 * s, (it / STAGES - 1) & 1);
            const unsigned st = base + s * kStage, bar = full + 8 * s;
            if constexpr (TMA) {
              mbar_expect_tx(bar, kStage);
              tma_load_2d(st, &maps->a, k0, j.ra, bar);
              tma_load_2d(st + kStageA, &maps->b, k0, j.rb, bar);
            } else {
              const bool kok = k0 + (t & 7) * 8 < K;
              ws_load<kBM>(st, j.a + (long long)j.m0 * lda + k0, lda, j.rows, kok, t);
              ws_load<BN>(st + kStageA, j.b + (long long)j.n0 * ldb + k0, ldb, N - j.n0, kok, t);
              cp_async_mbar_arrive_noinc(bar);
            }
          }
        }
      }
      cp_async_wait<0>();
      __syncwarp();
      asm volatile("exit;\n");  // no copy in flight; the epilogues are the consumers' (under their register budget)
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int wg = threadIdx.x >> 7;  // this warpgroup's 64 rows of the tile
    int it = 0;
    // Issue K block it once it landed; on return only its wgmmas may still run.
    auto mma = [&](int it) {
      const int s = it % STAGES;
      mbar_wait(full + 8 * s, (it / STAGES) & 1);
      if constexpr (!TMA) fence_proxy_async();
      const unsigned st = base + s * kStage;
      const unsigned long long da = sw128_desc(st + wg * 64 * 128, 0, 1024), db = sw128_desc(st + kStageA, 0, 1024);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) wgmma_step<BN, T>(acc, da + 2 * k, db + 2 * k);  // +32 bytes a step
      wgmma_commit();
      wgmma_wait<1>();
    };
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const Job<T> j = job(tile);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      if (j.rows > 0) {
        const unsigned n = j.rows > 64 ? 1 : 2;  // arrivals a thread: for both warpgroups when the second has no rows
        // No branch may sit between a wgmma's issue and its wait (ptxas would
        // serialize the wgmmas, C7515): the arrivals are unconditional, the
        // first K block peeled.
        if (wg * 64 < j.rows && KT > 0) {
          mma(it);
          for (int kt = 1; kt < KT; ++kt) {
            mma(it + kt);
            mbar_arrive(empty + 8 * ((it + kt - 1) % STAGES), n);
          }
          wgmma_wait<0>();
          mbar_arrive(empty + 8 * ((it + KT - 1) % STAGES), n);
        }
        // An idle warpgroup waits here for the tile's end: running ahead to
        // the next tile's K blocks, it could wait on full[s] two uses early,
        // whose parity a phase behind already shows as complete.
        named_sync(1, kWorkers);
        it += KT;
      }
      epi(j, *this);
    }
  }

  // acc[j * 4 + h * 2 + {0, 1}]: row (warp % 4) * 16 + lane / 4 + 8h of the
  // warpgroup's 64, columns 8j + 2 (lane % 4) + {0, 1}.
  template <class F>
  __device__ __forceinline__ void each_pair(F&& f) const {
    const int lane = threadIdx.x & 31, r0 = (threadIdx.x >> 7) * 64 + ((threadIdx.x >> 5) & 3) * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) f(r0 + h * 8, j * 8 + (lane & 3) * 2, acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1]);
  }
};

// ---------------------------------------------------------------------------
// Block scheduling.

// The tile (tm, tn) of block b in an L2-friendly order over a tiles_m x tiles_n grid.
__device__ __forceinline__ void tile_of(int b, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kGroupM * tiles_n;
  const int first = (b / per_group) * kGroupM;
  const int size = min(tiles_m - first, kGroupM);
  tm = first + (b % per_group) % size;
  tn = (b % per_group) / size;
}

// Mixture-of-experts, contiguous layout. Expert e's row tiles times the
// column tiles are a run of tiles, visited in tile_of's order within the run,
// so the row tiles of an expert that share a column panel of its weight run
// side by side and the weight is read from DRAM once. There are as many row
// tiles as possible (ceil(M / BM) + E); the spare ones write zeros over the
// rows no expert owns ([offs[E-1], M)), of which there are never more tiles
// than spare row tiles. offs is read clamped to a non-decreasing sequence in
// [0, M], so no offsets can make a block read out of bounds.
struct GroupTile {
  int e, m0, rows, n0;  // rows < 0: a spare tile, whose zero rows start at m0
};

template <int BM, int BN>
__device__ __forceinline__ GroupTile group_tile(int b, const int* __restrict__ offs, int E, int M, int N) {
  const int tiles_n = (N + BN - 1) / BN;
  int start = 0, seen = 0;  // seen: the tiles of the experts before e
  for (int e = 0; e < E; ++e) {  // offs is tiny and the same for every block: cache hits
    const int end = min(max(offs[e], start), M);
    const int tiles = (end - start + BM - 1) / BM;
    if (b < seen + tiles * tiles_n) {
      int tm, tn;
      tile_of(b - seen, tiles, tiles_n, tm, tn);
      const int m0 = start + tm * BM;
      return {e, m0, min(BM, end - m0), tn * BN};
    }
    seen += tiles * tiles_n;
    start = end;
  }
  const int spare = b - seen;
  return {0, start + spare / tiles_n * BM, -1, spare % tiles_n * BN};
}

// Zeros over rows [m0, min(m0 + BM, M)) and columns [n0, n0 + BN) of D, by `threads` threads.
template <int BM, int BN, class T>
__device__ __forceinline__ void zero_tile(T* D, int m0, int n0, int M, int N, long long ldd, int threads) {
  for (int i = threadIdx.x; i < BM * BN; i += threads) {
    const int r = m0 + i / BN, c = n0 + i % BN;
    if (r < M && c < N) D[r * ldd + c] = T(0.0f);
  }
}

// The tiles of a launch, numbered along one grid axis. A strided batch of
// dense products (M, N) (one product: strides 0): tile t of entry z = t / per.
template <int BM, int BN, class T>
__device__ __forceinline__ Job<T> dense_job(int t, int M, int N, const T* A, const T* B, long long strideA, long long strideB) {
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, per = tiles_m * tiles_n;
  int tm, tn;
  tile_of(t % per, tiles_m, tiles_n, tm, tn);
  const int z = t / per;
  return Job<T>{A + z * strideA, B + z * strideB, tm * BM, min(BM, M - tm * BM), tn * BN, z, z * M + tm * BM, z * N + tn * BN};
}

// The contiguous layout: group_tile's tile t (spare tiles: rows < 0, z = 0).
template <int BM, int BN, class T>
__device__ __forceinline__ Job<T> grouped_job(int t, const int* __restrict__ offs, int E, int M, int N, const T* A, const T* B,
                                              long long strideB) {
  const GroupTile g = group_tile<BM, BN>(t, offs, E, M, N);
  return Job<T>{A, B + g.e * strideB, g.m0, g.rows, g.n0, g.e, g.m0, g.e * N + g.n0};
}

// The masked layout: tile t of expert z = t / per, with its own A and B; rows
// past masked_m[z] (clamped to [0, max_m]) are left out (rows < 1: none left).
template <int BM, int BN, class T>
__device__ __forceinline__ Job<T> masked_job(int t, const int* __restrict__ masked_m, int max_m, int N, const T* A, const T* B,
                                             long long strideA, long long strideB) {
  const int tiles_m = (max_m + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, per = tiles_m * tiles_n;
  int tm, tn;
  tile_of(t % per, tiles_m, tiles_n, tm, tn);
  const int z = t / per, valid = min(max(masked_m[z], 0), max_m);
  return Job<T>{A + z * strideA, B + z * strideB, tm * BM, min(BM, valid - tm * BM), tn * BN, z, z * max_m + tm * BM, z * N + tn * BN};
}

template <int BM, int BN>
__host__ __device__ constexpr int tiles_of(int rows, int N) {
  return ((rows + BM - 1) / BM) * ((N + BN - 1) / BN);
}

// ---------------------------------------------------------------------------
// Entry points; Tl is Tile<...> (one tile a block, the grid has one block a
// tile) or WsTile<...> (persistent: the grid has at most one block an SM), T
// its element type. The first argument of for_tiles counts the launch's tiles.

template <class Tl, class Act, bool BIAS, bool RES, class T = typename Tl::Elem>
__global__ void __launch_bounds__(Tl::kThreads, 1)
gemm(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias, const T* __restrict__ R,
     int batch, int M, int N, int K, long long lda, long long ldb, long long ldd, long long ldr, long long strideA,
     long long strideB, long long strideD, long long strideR, const TmaMaps* maps) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int BM = Tl::kBM, BN = Tl::kBN;
  Tl tile;
  tile.for_tiles(
      smem_raw, tiles_of<BM, BN>(M, N) * batch, N, K, lda, ldb, maps,
      [&](int t) { return dense_job<BM, BN>(t, M, N, A, B, strideA, strideB); },
      [&](const Job<T>& j, const Tl& tl) {
        const long long z = j.z;
        store<Act, BIAS, RES>(tl, D + z * strideD, bias, R + (RES ? z * strideR : 0), j.m0, j.rows, j.n0, N, ldd, ldr);
      });
}

// Mixture-of-experts, contiguous layout: the spare tiles write zeros.
template <class Tl, class Act, bool BIAS, bool RES, class T = typename Tl::Elem>
__global__ void __launch_bounds__(Tl::kThreads, 1)
grouped(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
        const T* __restrict__ R, const int* __restrict__ offs, int E, int M, int N, int K, long long lda, long long ldb,
        long long ldd, long long ldr, long long strideB, long long strideBias, const TmaMaps* maps) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int BM = Tl::kBM, BN = Tl::kBN;
  Tl tile;
  tile.for_tiles(
      smem_raw, tiles_of<BM, BN>(M + E * BM, N), N, K, lda, ldb, maps,
      [&](int t) { return grouped_job<BM, BN>(t, offs, E, M, N, A, B, strideB); },
      [&](const Job<T>& j, const Tl& tl) {
        if (j.rows < 0) return zero_tile<BM, BN>(D, j.m0, j.n0, M, N, ldd, Tl::kWorkers);
        store<Act, BIAS, RES>(tl, D, BIAS ? bias + j.z * strideBias : bias, R, j.m0, j.rows, j.n0, N, ldd, ldr);
      });
}

// Mixture-of-experts, masked layout: A (E, max_m, K), D (E, max_m, N); rows
// past masked_m are defined as zeros.
template <class Tl, class Act, bool BIAS, bool RES, class T = typename Tl::Elem>
__global__ void __launch_bounds__(Tl::kThreads, 1)
masked(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ D, const T* __restrict__ bias,
       const T* __restrict__ R, const int* __restrict__ masked_m, int E, int max_m, int N, int K, long long lda,
       long long ldb, long long ldd, long long ldr, long long strideA, long long strideB, long long strideD,
       long long strideR, long long strideBias) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int BM = Tl::kBM, BN = Tl::kBN;
  Tl tile;
  tile.for_tiles(
      smem_raw, tiles_of<BM, BN>(max_m, N) * E, N, K, lda, ldb, nullptr,
      [&](int t) { return masked_job<BM, BN>(t, masked_m, max_m, N, A, B, strideA, strideB); },
      [&](const Job<T>& j, const Tl& tl) {
        const long long z = j.z;
        T* De = D + z * strideD;
        const int rows = max(j.rows, 0);
        if (rows) store<Act, BIAS, RES>(tl, De, BIAS ? bias + z * strideBias : bias, R + (RES ? z * strideR : 0), j.m0, rows, j.n0, N, ldd, ldr);
        zero_tile<BM, BN>(De, j.m0 + rows, j.n0, min(j.m0 + BM, max_m), N, ldd, Tl::kWorkers);
      });
}

// The fp8 products: A and B float8_e4m3fn, read as e4m3x2 carriers (K, lda,
// ldb, strideA and strideB count carriers), B stored (N, K); row scales sa of
// A's rows, column scales sb, bias and D in O. gemm_fp8 is one product
// (scaled_mm: sa (M,), sb (N,), bias (N,)); grouped_fp8 the contiguous layout
// (B (E, N, K), sa (M,), sb and bias (E, N)), masked_fp8 the masked one (sa
// (E, max_m), D (E, max_m, N)).
template <class Tl, class O, bool BIAS>
__global__ void __launch_bounds__(Tl::kThreads, 1)
gemm_fp8(const e4m3x2* __restrict__ A, const e4m3x2* __restrict__ B, O* __restrict__ D, const O* __restrict__ bias,
         const float* __restrict__ sa, const float* __restrict__ sb, int M, int N, int K, long long lda, long long ldb, long long ldd,
         const TmaMaps* maps) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Tl tile;
  tile.for_tiles(
      smem_raw, tiles_of<Tl::kBM, Tl::kBN>(M, N), N, K, lda, ldb, maps,
      [&](int t) { return dense_job<Tl::kBM, Tl::kBN>(t, M, N, A, B, 0, 0); },
      [&](const Job<e4m3x2>& j, const Tl& tl) { store_scaled<BIAS>(tl, D, bias, sa, sb, j.m0, j.rows, j.n0, N, ldd); });
}

template <class Tl, class O, bool BIAS>
__global__ void __launch_bounds__(Tl::kThreads, 1)
grouped_fp8(const e4m3x2* __restrict__ A, const e4m3x2* __restrict__ B, O* __restrict__ D, const O* __restrict__ bias,
            const float* __restrict__ sa, const float* __restrict__ sb, const int* __restrict__ offs, int E, int M, int N, int K,
            long long lda, long long ldb, long long ldd, long long strideB, const TmaMaps* maps) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int BM = Tl::kBM, BN = Tl::kBN;
  Tl tile;
  tile.for_tiles(smem_raw, tiles_of<BM, BN>(M + E * BM, N), N, K, lda, ldb, maps,
                 [&](int t) { return grouped_job<BM, BN>(t, offs, E, M, N, A, B, strideB); },
                 [&](const Job<e4m3x2>& j, const Tl& tl) {
                   if (j.rows < 0) return zero_tile<BM, BN>(D, j.m0, j.n0, M, N, ldd, Tl::kWorkers);
                   const long long col = (long long)j.z * N;  // expert e's row of sb and bias
                   store_scaled<BIAS>(tl, D, BIAS ? bias + col : bias, sa, sb + col, j.m0, j.rows, j.n0, N, ldd);
                 });
}

template <class Tl, class O, bool BIAS>
__global__ void __launch_bounds__(Tl::kThreads, 1)
masked_fp8(const e4m3x2* __restrict__ A, const e4m3x2* __restrict__ B, O* __restrict__ D, const O* __restrict__ bias,
           const float* __restrict__ sa, const float* __restrict__ sb, const int* __restrict__ masked_m, int E, int max_m, int N,
           int K, long long lda, long long ldb, long long ldd, long long strideA, long long strideB) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int BM = Tl::kBM, BN = Tl::kBN;
  Tl tile;
  tile.for_tiles(smem_raw, tiles_of<BM, BN>(max_m, N) * E, N, K, lda, ldb, nullptr,
                 [&](int t) { return masked_job<BM, BN>(t, masked_m, max_m, N, A, B, strideA, strideB); },
                 [&](const Job<e4m3x2>& j, const Tl& tl) {
                   const long long z = j.z;
                   O* De = D + z * max_m * N;
                   const int rows = max(j.rows, 0);
                   if (rows) store_scaled<BIAS>(tl, De, BIAS ? bias + z * N : bias, sa + z * max_m, sb + z * N, j.m0, rows, j.n0, N, ldd);
                   zero_tile<BM, BN>(De, j.m0 + rows, j.n0, min(j.m0 + BM, max_m), N, ldd, Tl::kWorkers);
                 });
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

