// Prefill attention on SM 90 (sm_90a) with warpgroup MMA (wgmma.mma_async),
// FlashAttention-3 style, for bfloat16 / float16 and head_dim D = 64 or 128.
// Same contract, parameters and masks as flash_fwd in flash_attn.cu (read its
// header for the mask interval, kv_lens, zero-filled rows, the base-2 online
// softmax and the longest-first grid order); only the tensor-core path differs.
//
// Work split. A block of NWG consumer warpgroups (128 threads each) owns
// BM = 64 * NWG query rows of one (batch, q head); warpgroup w owns rows
// [64 w, 64 w + 64). Every thread also loads (no producer warp: cp.async
// needs no separate issuer, and the GEMM kernel of gemm_tc.cu reaches ~500
// TFLOP/s this way). K and V tiles of BN keys are double-buffered; per key
// tile, after one barrier:
//   1. cp.async K and V of tile nb + 1 into the other buffer (free: every
//      warpgroup finished tile nb - 1, whose wgmmas it waited for);
//   2. S = Q K^T: D / 16 wgmma m64nBNk16, A = Q and B = K from shared memory;
//   3. masks, online softmax in registers, O rescaled;
//   4. O += P V: BN / 16 wgmma m64nDk16, A = P from registers, B = V from
//      shared memory read N-major (the transpose bit), so V is used as stored.
// Each warpgroup waits for its own wgmmas (wait_group 0) before touching
// their accumulators; the other warpgroup runs meanwhile, which is where the
// tensor cores overlap the softmax.
//
// Shared tiles. A (rows, D) tile is stored as D / 64 panels of (rows, 64):
// 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r & 7) (the XOR
// swizzle of gemm_tc.cu). With a 1024-byte aligned panel that is wgmma's
// 128-byte swizzle layout, in both readings:
//   K-major (Q as A, K as B of S = Q K^T; the reduction is over D): 8-row
//     groups 1024 bytes apart (SBO), one k16 step = 32 bytes along the row,
//     k16 steps 4..7 (D = 128) in the second panel; LBO unused.
//   N-major (V as B of P V; the reduction is over keys, N = D is the
//     contiguous axis): an atom is 64 elements of N (one 128-byte row) x 8
//     keys; SBO = 1024 bytes between 8-key groups, LBO = BN * 128 bytes
//     between 64-column atoms (the next panel, D = 128), one k16 step =
//     16 keys = 2048 bytes. (CUTLASS's canonical MN-major SW128 layout
//     ((8, n), (8, k)) : ((1, LBO), (8, SBO)) in 16-byte units.)
// Every panel starts at a multiple of 1024 bytes (the tile sizes are), so
// the row index's low 3 bits are the address bits 7-9 the hardware XORs.
//
// Register layouts (PTX ISA, wgmma m64nNk16; lane = 4 g + t, warp q = warp
// index within the warpgroup, rows relative to the warpgroup's 64):
//   D (FP32 accumulators, N / 2 per thread): d[4 j + 2 h + e] = (row 16 q + g + 8 h,
//     column 8 j + 2 t + e), j < N / 8, h, e in {0, 1}.
//   A from registers (16-bit, 4 x b32 per thread for one k16 slice):
//     a0 = (row 16 q + g, k 2t, 2t+1), a1 = (row 16 q + g + 8, k 2t, 2t+1),
//     a2 = (row 16 q + g, k 2t+8, 2t+9), a3 = (row 16 q + g + 8, k 2t+8, 2t+9),
//   lower k in the low half: the mma.m16n8k16 A fragment per warp.
// So the S accumulators of keys [16 kk, 16 kk + 16) are d[8 kk .. 8 kk + 7],
// and P's A fragment for that slice is a_i = pack(d[8 kk + 2 i], d[8 kk + 2 i + 1]):
//   i = 0: j = 2kk, h = 0 (row g, keys 2t..);  i = 1: j = 2kk, h = 1 (row g + 8);
//   i = 2: j = 2kk + 1, h = 0 (keys 8 + 2t..); i = 3: j = 2kk + 1, h = 1.
// A row's values live in the 4 lanes t of one g: reductions are two xor
// shuffles (1, 2), as in flash_attn.cu.
#include "pgk/mma.cuh"
#include "pgk/sm90.cuh"

namespace pgk {
namespace attn {

__device__ __forceinline__ void wg_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }


// d (64 x N, FP32) = (scale_d ? d : 0) + A B, A (64 x 16) and B (16 x N) from
// shared memory, both K-major (pgk/sm90.cuh's wgmma statements).
template <int N, class T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int scale_d) {
  static_assert(N == 64 || N == 128, "S tiles of 64 or 128 keys");
  if constexpr (N == 64 && is_same<T, bfloat16>::value) PGK_WGMMA_SS32("m64n64k16.f32.bf16.bf16", ", 1, 1, 0, 0");
  else if constexpr (N == 64) PGK_WGMMA_SS32("m64n64k16.f32.f16.f16", ", 1, 1, 0, 0");
  else if constexpr (is_same<T, bfloat16>::value) PGK_WGMMA_SS64("m64n128k16.f32.bf16.bf16", ", 1, 1, 0, 0");
  else PGK_WGMMA_SS64("m64n128k16.f32.f16.f16", ", 1, 1, 0, 0");
}

// d (64 x N, FP32) += A B, A (64 x 16) from registers (a[0..3], see the
// header), B (16 x N) from shared memory, N-major (imm-trans-b = 1).
template <int N, class T>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db) {
  static_assert(N == 64 || N == 128, "head_dim 64 or 128");
  if constexpr (N == 64 && is_same<T, bfloat16>::value) PGK_WGMMA_RS32("m64n64k16.f32.bf16.bf16", ", 1, 1, 1, 1");
  else if constexpr (N == 64) PGK_WGMMA_RS32("m64n64k16.f32.f16.f16", ", 1, 1, 1, 1");
  else if constexpr (is_same<T, bfloat16>::value) PGK_WGMMA_RS64("m64n128k16.f32.bf16.bf16", ", 1, 1, 1, 1");
  else PGK_WGMMA_RS64("m64n128k16.f32.f16.f16", ", 1, 1, 1, 1");
}

__device__ __forceinline__ float wg_neg_inf() { return __int_as_float(0xff800000); }

// Masks of key tile n0 (unless every row of the block sees all of its keys),
// then the online softmax (as flash_attn.cu): s becomes P = exp2(s c - m c),
// the running max and sums move, alpha[hh] is the factor O's rows must be
// scaled by (1 where the max did not move). Both kernels' warpgroups.
template <int BN, int BM>
__device__ __forceinline__ void wg_softmax(float (&s)[BN / 2], float (&mrow)[2], float (&lrow)[2], float (&alpha)[2],
                                           int n0, int m0, int row0, int t4, int off, int left, int right, int Lk,
                                           float scale_log2) {
  const bool full = n0 + BN <= Lk && n0 + BN - 1 <= m0 + off + right && n0 >= m0 + BM - 1 + off - left;
  if (!full) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = m0 + row0 + 8 * hh + off;
      const int jlo = i - left, jhi = min(i + right, Lk - 1);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = n0 + 8 * j + 2 * t4 + e;
          if (key < jlo || key > jhi) s[4 * j + 2 * hh + e] = wg_neg_inf();
        }
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = mrow[hh];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float msc = mx == wg_neg_inf() ? 0.0f : mx * scale_log2;  // nothing visible yet: p = 0
    alpha[hh] = mx != mrow[hh] ? exp2_approx(mrow[hh] * scale_log2 - msc) : 1.0f;
    mrow[hh] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = exp2_approx(s[4 * j + 2 * hh + e] * scale_log2 - msc);
        s[4 * j + 2 * hh + e] = p;
        sum += p;
      }
    lrow[hh] = lrow[hh] * alpha[hh] + sum;
  }
}

// O / l of this thread's rows `row` and row + 8 (those < Sq) into Op (row
// stride os); zeros where no key was visible. Both kernels' warpgroups.
template <int D, class T>
__device__ __forceinline__ void wg_store_rows(T* Op, const float (&o)[D / 2], const float (&lrow)[2], int row, int Sq, int os, int t4) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = lrow[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (row + 8 * hh >= Sq) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* out = Op + static_cast<long long>(row + 8 * hh) * os + 2 * t4;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      Vec<T, 2> pair;
      pair.v[0] = T(l > 0.0f ? o[4 * j + 2 * hh] * inv : 0.0f);
      pair.v[1] = T(l > 0.0f ? o[4 * j + 2 * hh + 1] * inv : 0.0f);
      *reinterpret_cast<Vec<T, 2>*>(out + 8 * j) = pair;
    }
  }
}

// Rows [0, ROWS) of the swizzled (ROWS, D) tile at shared address s <- rows
// of g (stride `ld` elements); rows >= valid are zero-filled (valid >= 1, so
// g is a readable address). Thread x copies chunk x % CH of rows x / CH +
// RSTEP i; RSTEP is a multiple of 8, so r & 7 and the swizzled column are
// the same for all of a thread's rows.
// `tid` in [0, THREADS) is the thread's index among the loading threads.
template <int ROWS, int D, int THREADS, class T>
__device__ __forceinline__ void wg_load_tile(unsigned s, const T* g, int ld, int valid, int tid) {
  constexpr int CH = D / 8, RSTEP = THREADS / CH, N = ROWS / RSTEP;
  static_assert(THREADS % CH == 0 && ROWS % RSTEP == 0 && RSTEP % 8 == 0, "whole 8-row swizzle groups per pass");
  const int r0 = tid / CH, c = tid % CH;
  const T* p = g + (r0 * ld + c * 8);
  const unsigned d = s + (c >> 3) * (ROWS * 128) + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const bool ok = r0 + i * RSTEP < valid;
    cp_async16(d + i * RSTEP * 128, ok ? p + i * RSTEP * ld : g, ok);
  }
}

template <int D, int NWG, int BN, class T>
__global__ void __launch_bounds__(NWG * 128, 1)
flash_fwd_wgmma(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
                const int* __restrict__ kv_lens, int Hq, int group, int Sq, int Sk, long long qb, long long qh, int qs,
                long long kb, long long kh, int ks, long long vb, long long vh, int vs, long long ob, long long oh,
                int os, float scale_log2, int left, int right) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BN == 64 || BN == 128, "64 or 128 keys per tile");
  constexpr int BM = 64 * NWG, THREADS = 128 * NWG, KD = D / 16;
  // Shared bytes: Q (BM rows), then two K and two V buffers of BN rows; every
  // offset and panel (rows x 128 bytes) is a multiple of 1024.
  constexpr unsigned kQ = 0, kK = BM * D * 2, kBuf = BN * D * 2, kV = kK + 2 * kBuf;
  constexpr unsigned kPanelQ = BM * 128, kPanelKV = BN * 128;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned smem = smem_addr(smem_raw);

  const int tiles = (Sq + BM - 1) / BM;
  const int m0 = (tiles - 1 - static_cast<int>(blockIdx.y)) * BM;  // longest first (see flash_attn.cu)
  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / group;
  const int Lk = kv_lens ? min(max(kv_lens[b], 0), Sk) : Sk;
  const int off = Sk - Sq;
  const int m_last = min(m0 + BM, Sq) - 1;
  const int lo = max(m0 + off - left, 0);  // the keys any row of the block sees: [lo, hi)
  const int hi = min(m_last + off + right + 1, Lk);
  const int n_begin = lo / BN, n_end = hi > lo ? (hi + BN - 1) / BN : n_begin;

  const T* Qp = Q + b * qb + h * qh + static_cast<long long>(m0) * qs;
  const T* Kp = K + b * kb + hk * kh;
  const T* Vp = V + b * vb + hk * vh;

  const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int row0 = wg * 64 + ((threadIdx.x >> 5) & 3) * 16 + g;  // this thread's rows: row0 and row0 + 8 of the block

  float o[D / 2];
  float mrow[2] = {wg_neg_inf(), wg_neg_inf()}, lrow[2] = {0.0f, 0.0f};  // running max (raw scores), this lane's row sums
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  if (n_begin < n_end) {  // uniform over the block
    wg_load_tile<BM, D, THREADS>(smem + kQ, Qp, qs, Sq - m0, threadIdx.x);
    wg_load_tile<BN, D, THREADS>(smem + kK, Kp + static_cast<long long>(n_begin * BN) * ks, ks, Lk - n_begin * BN, threadIdx.x);
    wg_load_tile<BN, D, THREADS>(smem + kV, Vp + static_cast<long long>(n_begin * BN) * vs, vs, Lk - n_begin * BN, threadIdx.x);
    cp_async_commit();

    for (int nb = n_begin; nb < n_end; ++nb) {
      const int n0 = nb * BN;
      const unsigned buf = ((nb - n_begin) & 1) * kBuf, next = kBuf - buf;
      wg_cp_async_wait_all();  // this thread's part of K[nb], V[nb] (and Q) landed
      fence_proxy_async();     // ... visible to the async proxy wgmma reads through
      __syncthreads();         // ... for every thread; every warpgroup is done with tile nb - 1
      if (nb + 1 < n_end) {
        wg_load_tile<BN, D, THREADS>(smem + kK + next, Kp + static_cast<long long>(n0 + BN) * ks, ks, Lk - n0 - BN, threadIdx.x);
        wg_load_tile<BN, D, THREADS>(smem + kV + next, Vp + static_cast<long long>(n0 + BN) * vs, vs, Lk - n0 - BN, threadIdx.x);
      }
      cp_async_commit();

      // S = Q K^T for the warpgroup's 64 rows: k16 step kk is 32 bytes into
      // panel kk / 4 of Q (from the warpgroup's row 64 wg: + 8192 wg bytes) and of K.
      float s[BN / 2];
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        const unsigned kof = (kk & 3) * 32;
        const unsigned long long da = sw128_desc(smem + kQ + (kk >> 2) * kPanelQ + wg * 64 * 128 + kof, 0, 1024);
        const unsigned long long db = sw128_desc(smem + kK + buf + (kk >> 2) * kPanelKV + kof, 0, 1024);
        wgmma_ss<BN, T>(s, da, db, kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();

      // Masks and the online softmax; O's rows rescaled where their max moved.
      float alpha[2];
      wg_softmax<BN, BM>(s, mrow, lrow, alpha, n0, m0, row0, t4, off, left, right, Lk, scale_log2);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        if (__any_sync(0xffffffffu, alpha[hh] != 1.0f)) {
#pragma unroll
          for (int j = 0; j < D / 8; ++j) o[4 * j + 2 * hh] *= alpha[hh], o[4 * j + 2 * hh + 1] *= alpha[hh];
        }

      // O += P V: P's A fragments straight from the S accumulators (see the
      // header); V's k16 step kk starts 16 keys (2048 bytes) further.
      unsigned pa[BN / 16][4];
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[kk][i] = pack2<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs<D, T>(o, pa[kk], sw128_desc(smem + kV + buf + kk * 2048, kPanelKV, 1024));
      wgmma_commit();
      wgmma_wait<0>();
    }
    wg_cp_async_wait_all();
  }

  wg_store_rows<D>(O + b * ob + h * oh, o, lrow, m0 + row0, Sq, os, t4);
}

// ---------------------------------------------------------------------------
// flash_fwd_ws: the same contract, warp-specialized (FlashAttention-3's
// schedule with cp.async in place of TMA). A block of 3 warpgroups (384
// threads) owns BM = 128 query rows: warpgroup 0 is the producer, 1 and 2
// are consumers of 64 rows each (consumer c = warpgroup - 1, rows 64 c..).
//   Producer: setmaxnreg.dec to 40 registers; its 128 threads cp.async the K
//     and V tiles of every key tile of the block into a ring of STAGES
//     stages and signal each stage through an mbarrier.
//   Consumers: setmaxnreg.inc to 232 registers (128 * 40 + 256 * 232 =
//     64512 <= 65536 = 384 * 168, the launch allocation). Each loads its own
//     64 rows of Q, then per key tile j (intra-warpgroup overlap):
//       issue S_j = Q K_j^T and O += P_{j-1} V_{j-1} (two commit groups);
//       wait_group 1 (S_j done), masks and softmax of S_j while the P V
//       wgmmas run; wait_group 0; release stage j - 1; O *= alpha_j;
//       P_j = pack(S_j).
//     The two consumers take turns issuing (ping-pong), so one's softmax
//     runs under the other's GEMMs.
//
// Synchronization protocol (tile i = key tile n_begin + i, i < nt; stage
// s = i % STAGES, its use k = i / STAGES):
//   full[s]  (mbarrier, count 128): each producer thread issues its cp.asyncs
//     of tile i into stage s, then cp.async.mbarrier.arrive.noinc on full[s]
//     (the arrive fires when those copies have landed; noinc: the 128 are
//     the init count). Phase k of full[s] completes when tile i landed.
//     Consumers wait try_wait.parity(full[s], k & 1), then
//     fence.proxy.async (the cp.async writes are generic-proxy writes that
//     wgmma reads through the async proxy; the fence lies on the causality
//     path write -> mbarrier -> wait -> fence -> wgmma).
//   empty[s] (mbarrier, count 8 = consumer warps): after its wait_group 0
//     that retires the P V wgmmas of tile i (the last reader of stage s),
//     lane 0 of every consumer warp arrives on empty[s]. Phase k of empty[s]
//     completes when both consumers released tile i. Before loading tile
//     i >= STAGES the producer waits try_wait.parity(empty[s], (k - 1) & 1)
//     (the release of tile i - STAGES). The last tile is never released
//     (nothing waits for it).
//   Q: each consumer cp.asyncs its own rows, cp.async.wait_all,
//     fence.proxy.async, bar.sync (1 + c, 128) within its warpgroup.
//   Ping-pong (named barriers 3 and 4, 256 threads): consumer c has nt + 1
//     issue points (S_0; S_i + P_{i-1} V_{i-1} for 0 < i < nt; P_{nt-1}
//     V_{nt-1}); before each it bar.syncs on 3 + c, after it bar.arrives on
//     4 - c. Consumer 1 arrives once on 3 at the start and skips its last
//     arrive, so both barriers see as many arrives as syncs (nt is the same
//     for both consumers: the key range is the block's).
//   Deadlock freedom: waiting full(i) needs the release of tile i - STAGES,
//     which either consumer does right after issue point i - STAGES + 1 <
//     i - 1 and waits on nothing after issuing; turns alternate, so with
//     STAGES >= 2 nothing waits in a cycle.
// mbarrier.init by thread 0, then fence.mbarrier_init and __syncthreads
// (the only block-wide barrier: the producer exits the main path early);
// the mbarrier and named-barrier helpers are pgk/sm90.cuh's.
// Pins registers in program order relative to the volatile wgmma asm: keeps
// the compiler from moving their reads or writes across an issue or a wait.
template <int N>
__device__ __forceinline__ void reg_fence(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(x[i])::"memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(unsigned (&x)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(x[i][j])::"memory");
}

// wg_load_tile for the producer's 128 threads in few registers (it runs
// under setmaxnreg 40): one pointer and one shared address stepped per row
// pass instead of a precomputed address per pass.
template <int ROWS, int D, class T>
__device__ __forceinline__ void ws_load_tile(unsigned s, const T* g, int ld, int valid, int tid) {
  constexpr int CH = D / 8, RSTEP = 128 / CH, N = ROWS / RSTEP;
  static_assert(ROWS % RSTEP == 0 && RSTEP % 8 == 0, "whole 8-row swizzle groups per pass");
  const int r0 = tid / CH, c = tid % CH;
  const T* p = g + (r0 * ld + c * 8);
  unsigned d = s + (c >> 3) * (ROWS * 128) + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4);
  int rows_left = valid - r0;
#pragma unroll 4
  for (int i = 0; i < N; ++i) {
    cp_async16(d, rows_left > 0 ? p : g, rows_left > 0);
    p += RSTEP * ld, d += RSTEP * 128, rows_left -= RSTEP;
  }
}

template <int D, int BN, int STAGES, class T>
__global__ void __launch_bounds__(384, 1)
flash_fwd_ws(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
             const int* __restrict__ kv_lens, int Hq, int group, int Sq, int Sk, long long qb, long long qh, int qs,
             long long kb, long long kh, int ks, long long vb, long long vh, int vs, long long ob, long long oh, int os,
             float scale_log2, int left, int right) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BN == 64 || BN == 128, "64 or 128 keys per tile");
  static_assert(STAGES >= 2, "a ring of at least 2 stages");
  constexpr int BM = 128, KD = D / 16;
  // Shared bytes: two Q tiles of 64 rows (one per consumer), then STAGES x
  // (K tile, V tile) of BN rows, then full[STAGES] and empty[STAGES]
  // mbarriers; every tile and panel offset is a multiple of 1024.
  constexpr unsigned kQTile = 64 * D * 2, kKV = 2 * kQTile, kBuf = BN * D * 2, kStage = 2 * kBuf;
  constexpr unsigned kFull = kKV + STAGES * kStage, kEmpty = kFull + 8 * STAGES;
  constexpr unsigned kPanelQ = 64 * 128, kPanelKV = BN * 128;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned smem = smem_addr(smem_raw);

  const int tiles = (Sq + BM - 1) / BM;
  const int m0 = (tiles - 1 - static_cast<int>(blockIdx.y)) * BM;  // longest first
  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / group;
  const int Lk = kv_lens ? min(max(kv_lens[b], 0), Sk) : Sk;
  const int off = Sk - Sq;
  const int m_last = min(m0 + BM, Sq) - 1;
  const int lo = max(m0 + off - left, 0);
  const int hi = min(m_last + off + right + 1, Lk);
  const int n_begin = lo / BN, nt = hi > lo ? (hi + BN - 1) / BN - n_begin : 0;
  const int wg = threadIdx.x >> 7;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(smem + kFull + 8 * i, 128);
      mbar_init(smem + kEmpty + 8 * i, 8);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    const T* Kp = K + b * kb + hk * kh;
    const T* Vp = V + b * vb + hk * vh;
    for (int i = 0; i < nt; ++i) {
      const int s = i % STAGES, n0 = (n_begin + i) * BN;
      if (i >= STAGES) mbar_wait(smem + kEmpty + 8 * s, ((i / STAGES) - 1) & 1);
      ws_load_tile<BN, D>(smem + kKV + s * kStage, Kp + static_cast<long long>(n0) * ks, ks, Lk - n0, threadIdx.x);
      ws_load_tile<BN, D>(smem + kKV + s * kStage + kBuf, Vp + static_cast<long long>(n0) * vs, vs, Lk - n0, threadIdx.x);
      cp_async_mbar_arrive_noinc(smem + kFull + 8 * s);
    }
    wg_cp_async_wait_all();  // exit with no copy in flight
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int c = wg - 1, ctid = threadIdx.x & 127, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int row0 = c * 64 + (ctid >> 5) * 16 + g;  // this thread's rows: row0 and row0 + 8 of the block
  const unsigned sq = smem + c * kQTile;

  float o[D / 2];
  float mrow[2] = {wg_neg_inf(), wg_neg_inf()}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  if (nt > 0) {  // uniform over the block
    {
      const int valid = Sq - m0 - 64 * c;  // <= 0: every row zero-filled from a readable row
      const T* Qp = Q + b * qb + h * qh + static_cast<long long>(m0 + (valid > 0 ? 64 * c : 0)) * qs;
      wg_load_tile<64, D, 128>(sq, Qp, qs, valid, ctid);
      cp_async_commit();
      wg_cp_async_wait_all();
      fence_proxy_async();
      named_sync(1 + c, 128);
    }
    if (c == 1) named_arrive(3, 256);  // consumer 0 issues first

    float s[BN / 2], alpha[2];
    unsigned pa[BN / 16][4];
    // S_i = Q K_i^T into s (issue only): k16 step kk is 32 bytes into panel kk / 4.
    auto issue_s = [&](int i) {
      const unsigned kbase = smem + kKV + (i % STAGES) * kStage;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        const unsigned kof = (kk & 3) * 32;
        wgmma_ss<BN, T>(s, sw128_desc(sq + (kk >> 2) * kPanelQ + kof, 0, 1024),
                        sw128_desc(kbase + (kk >> 2) * kPanelKV + kof, 0, 1024), kk > 0);
      }
      wgmma_commit();
    };
    // O += P_i V_i (issue only): V's k16 step kk is 16 keys (2048 bytes) further.
    auto issue_pv = [&](int i) {
      const unsigned vbase = smem + kKV + (i % STAGES) * kStage + kBuf;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs<D, T>(o, pa[kk], sw128_desc(vbase + kk * 2048, kPanelKV, 1024));
      wgmma_commit();
    };
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[kk][i] = pack2<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
    };
    auto wait_full = [&](int i) {
      mbar_wait(smem + kFull + 8 * (i % STAGES), (i / STAGES) & 1);
      fence_proxy_async();
    };

    // Issue point 0: S_0.
    wait_full(0);
    named_sync(3 + c, 256);
    wgmma_fence();
    issue_s(0);
    named_arrive(4 - c, 256);
    wgmma_wait<0>();
    reg_fence(s);
    wg_softmax<BN, BM>(s, mrow, lrow, alpha, n_begin * BN, m0, row0, t4, off, left, right, Lk, scale_log2);
    pack_p();  // O is 0: no rescale

    for (int i = 1; i < nt; ++i) {  // issue point i: S_i and P_{i-1} V_{i-1}
      wait_full(i);
      named_sync(3 + c, 256);
      reg_fence(o);
      reg_fence(pa);
      wgmma_fence();
      issue_s(i);
      issue_pv(i - 1);
      named_arrive(4 - c, 256);  // consumer 1's last point is nt, after the loop
      wgmma_wait<1>();           // S_i done; the P V wgmmas may still run
      reg_fence(s);
      wg_softmax<BN, BM>(s, mrow, lrow, alpha, (n_begin + i) * BN, m0, row0, t4, off, left, right, Lk, scale_log2);
      wgmma_wait<0>();  // P_{i-1} V_{i-1} done: stage (i - 1) % STAGES is free, o and pa may be touched
      reg_fence(o);
      reg_fence(pa);
      reg_fence(s);
      if (lane == 0) mbar_arrive(smem + kEmpty + 8 * ((i - 1) % STAGES));
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        if (__any_sync(0xffffffffu, alpha[hh] != 1.0f)) {
#pragma unroll
          for (int j = 0; j < D / 8; ++j) o[4 * j + 2 * hh] *= alpha[hh], o[4 * j + 2 * hh + 1] *= alpha[hh];
        }
      pack_p();
    }

    // Issue point nt: P_{nt-1} V_{nt-1}.
    named_sync(3 + c, 256);
    reg_fence(o);
    reg_fence(pa);
    wgmma_fence();
    issue_pv(nt - 1);
    if (c == 0) named_arrive(4, 256);
    wgmma_wait<0>();
    reg_fence(o);
  }

  wg_store_rows<D>(O + b * ob + h * oh, o, lrow, m0 + row0, Sq, os, t4);
}

}  // namespace attn
}  // namespace pgk
