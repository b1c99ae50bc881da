// Prefill attention for bfloat16 / float16 on SM 80+, FlashAttention-2 style:
// O = softmax(scale * Q K^T + mask) V without ever forming the (Sq, Sk)
// matrix. Tensor cores (mma.sync m16n8k16, FP32 accumulation), online
// softmax in FP32 registers.
//
// Work split. A block of WARPS warps owns BM = WARPS * MT * 16 query rows of
// one (batch, q head); warp w owns rows [w * MT * 16, (w + 1) * MT * 16) of
// the block, as MT row tiles of 16. K and V tiles of BN keys stream through
// shared memory, double-buffered by cp.async; per key tile each warp computes
// S = Q K^T for its rows (MT x BN/8 accumulators), folds S into the running
// row max m and row sum l (online softmax), rescales its O accumulators and
// adds P V. P never leaves registers (see "P as the A operand" below).
// blockIdx.x = batch * Hq + head, blockIdx.y counts query tiles from the
// last one down: with a causal mask the last tiles see the most keys, so
// they start first (longest first) and the short ones fill the tail.
//
// Masks, all folded into one key interval per query row i (0-based):
//   key j is visible iff  i + off - left <= j <= i + off + right  and  j < L,
// off = Sk - Sq (causal aligned to the bottom right: query i is at position
// i + off), right = 0 for causal, L = kv_lens[b] (clamped to [0, Sk]) or Sk.
// Unbounded sides come in as Sq + Sk, beyond any distance. Key tiles outside
// the block's overall interval are never loaded; tiles entirely inside it
// for every row of the block run unmasked; the rest (the diagonal, window
// edges, the last partial tile) set invisible scores to -inf. A row that
// sees no key has l = 0 and is written as zeros.
//
// Global -> shared: every read is one 16-byte cp.async (the host guarantees
// 16-byte aligned bases and strides that are multiples of 8 elements, unit
// stride along D, seq strides below 2^24 so a tile's offsets fit an int). Rows past the valid range (Q rows >= Sq, K/V rows >= L)
// are zero-filled, so padding keys whose memory holds NaN cannot leak in
// through 0 * NaN in P V.
//
// Shared tiles are (rows, D) row-major with rows padded to D + 8 elements:
// D / 8 + 1 sixteen-byte chunks, an odd number for every D % 16 == 0, so the
// 8 rows an ldmatrix 8x8 reads at one chunk fall in 8 different 16-byte bank
// groups, as do the 8 consecutive chunks of a row a cp.async phase writes
// (D = 80, 96: a phase that straddles two rows may pair two). The XOR
// swizzle of gemm_tc.cu does the same without the padding, but costs ~150
// more integer instructions per key tile here, where every shared address
// is otherwise one register plus an immediate; and it needs D % 64 == 0.
//
// Fragment layouts of mma.sync.m16n8k16.row.col (PTX ISA), lane = 4 g + t
// (g = lane / 4 the "group", t = lane % 4); every register holds two 16-bit
// values, the lower column (or k) index in the low half:
//   A (16 x 16, row-major): a0 = (row g,     cols 2t, 2t+1)
//                           a1 = (row g + 8, cols 2t, 2t+1)
//                           a2 = (row g,     cols 2t+8, 2t+9)
//                           a3 = (row g + 8, cols 2t+8, 2t+9)
//   B (16 x 8, k x n):      b0 = (k 2t, 2t+1;   col g)
//                           b1 = (k 2t+8, 2t+9; col g)
//   C (16 x 8, FP32):       c0, c1 = (row g, cols 2t, 2t+1); c2, c3 = (row g + 8, same cols)
// ldmatrix.x4 loads four 8x8 matrices; lanes 8m .. 8m+7 give the row
// addresses of matrix m, and register m of every lane receives (row g,
// elements 2t, 2t+1) of matrix m, or with .trans (rows 2t, 2t+1, element g).
//   Q (A operand of S = Q K^T): lane reads row (lane & 15), chunk 2kk + (lane >> 4):
//     matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
//   K (B operand, B[d][key] = K[key][d], K stored (key, d)): no transpose;
//     lane reads key (lane & 7) + 8 (lane >> 4), chunk 2kk + ((lane >> 3) & 1):
//     registers = b0, b1 of keys 0-7 and b0, b1 of keys 8-15 of the 16-key slice.
//   V (B operand, B[key][d] = V[key][d], V stored (key, d)): .trans;
//     lane reads key (lane & 7) + 8 ((lane >> 3) & 1), chunk 2dp + (lane >> 4):
//     registers = b0, b1 of d 0-7 and b0, b1 of d 8-15 of the 16-column slice.
// P as the A operand: the S accumulators of key tiles 2kk and 2kk + 1 (8 keys
// each) are exactly the A fragment of the 16-key slice kk of P V:
//   a0 = (c0, c1) of tile 2kk, a1 = (c2, c3) of tile 2kk, a2 = (c0, c1) of
//   tile 2kk + 1, a3 = (c2, c3) of tile 2kk + 1,
// so P is rounded to T and packed in registers, with no shared-memory trip.
// A row's values live in the 4 lanes of one group: row max and row sum
// reduce with two xor shuffles (1, 2).
//
// Softmax in base 2: with c = scale * log2(e), p = exp2(s * c - m * c) (one
// FFMA and one ex2.approx per score); scale > 0, so max(s) * c = max(s * c).
#include "pgk/mma.cuh"

namespace pgk {
namespace attn {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Elements per row of a shared tile (see the header).
template <int D>
constexpr int kRow = D + 8;

// Rows [0, ROWS) of the tile at shared address s (bytes) <- rows of g (stride
// `ld` elements); rows >= valid are zero-filled. valid >= 1, so g itself is a
// readable address. Thread x copies chunks x, x + THREADS, ...; when THREADS
// is a multiple of the chunks per row, those are one column of chunks, rows
// RSTEP apart.
template <int ROWS, int D, int THREADS, class T>
__device__ __forceinline__ void load_tile(unsigned s, const T* g, int ld, int valid) {
  constexpr int CH = D / 8, N = ROWS * CH / THREADS;
  static_assert((ROWS * CH) % THREADS == 0, "tile chunks must split evenly over the threads");
  if constexpr (THREADS % CH == 0) {
    constexpr int RSTEP = THREADS / CH;
    const int r0 = threadIdx.x / CH, c = threadIdx.x % CH;
    const T* p = g + (r0 * ld + c * 8);
    const unsigned d = s + (r0 * kRow<D> + c * 8) * 2;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const bool ok = r0 + i * RSTEP < valid;
      cp_async16(d + i * RSTEP * kRow<D> * 2, ok ? p + i * RSTEP * ld : g, ok);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int idx = threadIdx.x + i * THREADS, r = idx / CH, c = idx % CH;
      const bool ok = r < valid;
      cp_async16(s + (r * kRow<D> + c * 8) * 2, ok ? g + (r * ld + c * 8) : g, ok);
    }
  }
}

template <int D, int MT, int WARPS, int BN>
struct Config {
  static_assert(D % 16 == 0 && D <= 128, "head_dim: a multiple of 16 up to 128");
  static_assert(BN % 16 == 0, "BN: whole 16-key slices");
  static constexpr int BM = WARPS * MT * 16, THREADS = WARPS * 32;
  static constexpr int NT = BN / 8;   // S accumulator tiles per row tile (8 keys each)
  static constexpr int KD = D / 16;   // k16 slices of Q K^T
  static constexpr int ND = D / 8;    // O accumulator tiles per row tile (8 columns each)
  static constexpr int kStride = kRow<D>;
  // Q fragments stay in registers when the accumulators leave room for them
  // (about 192 of 255 registers); otherwise they are re-read (ldmatrix) per key tile.
  static constexpr bool QREG = MT * (KD + ND + NT) * 4 <= 192;
  static constexpr int kSmemBytes = (BM + 4 * BN) * kStride * 2;  // Q, K x 2, V x 2
};

template <int D, int MT, int WARPS, int BN, class T>
__global__ void __launch_bounds__(WARPS * 32)
flash_fwd(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V, T* __restrict__ O,
          const int* __restrict__ kv_lens, int Hq, int group, int Sq, int Sk, long long qb, long long qh, int qs,
          long long kb, long long kh, int ks, long long vb, long long vh, int vs, long long ob, long long oh, int os,
          float scale_log2, int left, int right) {
  using C = Config<D, MT, WARPS, BN>;
  constexpr int BM = C::BM, THREADS = C::THREADS, NT = C::NT, KD = C::KD, ND = C::ND, R = kRow<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Shared addresses (bytes): Q (BM rows), then two K and two V buffers of BN rows.
  constexpr unsigned kQ = 0, kK = BM * R * 2, kV = kK + 2 * BN * R * 2, kBuf = BN * R * 2;
  const unsigned smem = smem_addr(smem_raw);

  const int tiles = (Sq + BM - 1) / BM;
  const int m0 = (tiles - 1 - static_cast<int>(blockIdx.y)) * BM;
  const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, hk = h / group;
  const int Lk = kv_lens ? min(max(kv_lens[b], 0), Sk) : Sk;
  const int off = Sk - Sq;
  const int m_last = min(m0 + BM, Sq) - 1;
  // The keys any row of the block sees: [lo, hi).
  const int lo = max(m0 + off - left, 0);
  const int hi = min(m_last + off + right + 1, Lk);
  const int n_begin = lo / BN, n_end = hi > lo ? (hi + BN - 1) / BN : n_begin;

  const T* Qp = Q + b * qb + h * qh + static_cast<long long>(m0) * qs;
  const T* Kp = K + b * kb + hk * kh;
  const T* Vp = V + b * vb + hk * vh;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int wrow = warp * MT * 16;  // the warp's first row in the block
  // This lane's ldmatrix row address in each operand (see the header);
  // fragment (i, j) adds i * 16 rows and j * 16 columns (kF16 bytes, 32 bytes).
  constexpr unsigned kF16 = 16 * R * 2;
  const unsigned q_lane = smem + kQ + ((wrow + (lane & 15)) * R + (lane >> 4) * 8) * 2;
  const unsigned k_lane = smem + kK + (((lane & 7) + ((lane >> 4) << 3)) * R + ((lane >> 3) & 1) * 8) * 2;
  const unsigned v_lane = smem + kV + (((lane & 7) + (((lane >> 3) & 1) << 3)) * R + (lane >> 4) * 8) * 2;

  float o[MT][ND][4];
  float mrow[MT][2], lrow[MT][2];  // running max (raw scores) and this lane's part of the row sum
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.0f;
    mrow[mt][0] = mrow[mt][1] = neg_inf();
    lrow[mt][0] = lrow[mt][1] = 0.0f;
  }

  if (n_begin < n_end) {  // uniform over the block
    load_tile<BM, D, THREADS>(smem + kQ, Qp, qs, Sq - m0);
    load_tile<BN, D, THREADS>(smem + kK, Kp + static_cast<long long>(n_begin * BN) * ks, ks, Lk - n_begin * BN);
    cp_async_commit();
    load_tile<BN, D, THREADS>(smem + kV, Vp + static_cast<long long>(n_begin * BN) * vs, vs, Lk - n_begin * BN);
    cp_async_commit();

    unsigned qf[MT][C::QREG ? KD : 1][4];
    if constexpr (C::QREG) {
      cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) ldmatrix_x4(qf[mt][kk], q_lane + mt * kF16 + kk * 32);
    }

    for (int nb = n_begin; nb < n_end; ++nb) {
      const int n0 = nb * BN;
      const unsigned buf = ((nb - n_begin) & 1) * kBuf, next = kBuf - buf;
      // Groups in flight here: K[nb] (with Q on the first tile), then V[nb].
      cp_async_wait<1>();
      __syncthreads();  // K[nb] landed for every thread; every warp is done with tile nb - 1
      if (nb + 1 < n_end) load_tile<BN, D, THREADS>(smem + kK + next, Kp + static_cast<long long>(n0 + BN) * ks, ks, Lk - n0 - BN);
      cp_async_commit();

      // S = Q K^T for the warp's MT x 16 rows and the BN keys.
      float s[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (C::QREG) {
            a[mt][0] = qf[mt][kk][0], a[mt][1] = qf[mt][kk][1], a[mt][2] = qf[mt][kk][2], a[mt][3] = qf[mt][kk][3];
          } else {
            ldmatrix_x4(a[mt], q_lane + mt * kF16 + kk * 32);
          }
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          unsigned kf[4];  // b0, b1 of keys np * 16 + 0..7, then of keys np * 16 + 8..15
          ldmatrix_x4(kf, k_lane + buf + np * kF16 + kk * 32);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<T>(s[mt][2 * np], a[mt], kf[0], kf[1]);
            mma16816<T>(s[mt][2 * np + 1], a[mt], kf[2], kf[3]);
          }
        }
      }

      // Mask the tile unless every row of the block sees all of its keys.
      const bool full = n0 + BN <= Lk && n0 + BN - 1 <= m0 + off + right && n0 >= m0 + BM - 1 + off - left;
      if (!full) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + wrow + mt * 16 + g + 8 * hh + off;  // the query's position among the keys
            const int jlo = i - left, jhi = min(i + right, Lk - 1);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int j = n0 + nt * 8 + 2 * t4 + e;
                if (j < jlo || j > jhi) s[mt][nt][2 * hh + e] = neg_inf();
              }
          }
      }

      // Online softmax: the new row max, P = exp2(s c - m c), l and O rescaled
      // by alpha = exp2(m_old c - m c). alpha is exactly 1 where the max did
      // not move, and O is rescaled only when the row moved in some lane group.
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float mx = mrow[mt][hh];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float msc = mx == neg_inf() ? 0.0f : mx * scale_log2;  // nothing visible yet: p = 0
          const bool moved = mx != mrow[mt][hh];
          const float alpha = moved ? exp2_approx(mrow[mt][hh] * scale_log2 - msc) : 1.0f;
          mrow[mt][hh] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float p = exp2_approx(s[mt][nt][2 * hh + e] * scale_log2 - msc);
              s[mt][nt][2 * hh + e] = p;
              sum += p;
            }
          lrow[mt][hh] = lrow[mt][hh] * alpha + sum;
          if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
            for (int dn = 0; dn < ND; ++dn) o[mt][dn][2 * hh] *= alpha, o[mt][dn][2 * hh + 1] *= alpha;
          }
        }

      cp_async_wait<1>();
      __syncthreads();  // V[nb] landed for every thread; every warp is done with V[nb - 1]
      if (nb + 1 < n_end) load_tile<BN, D, THREADS>(smem + kV + next, Vp + static_cast<long long>(n0 + BN) * vs, vs, Lk - n0 - BN);
      cp_async_commit();

      // O += P V, P straight from the S accumulators (see the header).
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          unsigned vf[4];  // b0, b1 of columns dp * 16 + 0..7, then of columns dp * 16 + 8..15
          ldmatrix_x4_trans(vf, v_lane + buf + kk * kF16 + dp * 32);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<T>(o[mt][2 * dp], pa[mt], vf[0], vf[1]);
            mma16816<T>(o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
          }
        }
      }
    }
    cp_async_wait<0>();
  }

  // O / l for the block's rows < Sq; zeros where no key was visible.
  T* Op = O + b * ob + h * oh;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = lrow[mt][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = m0 + wrow + mt * 16 + g + 8 * hh;
      if (row >= Sq) continue;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      T* out = Op + static_cast<long long>(row) * os + 2 * t4;
#pragma unroll
      for (int dn = 0; dn < ND; ++dn) {
        Vec<T, 2> pair;
        pair.v[0] = T(l > 0.0f ? o[mt][dn][2 * hh] * inv : 0.0f);
        pair.v[1] = T(l > 0.0f ? o[mt][dn][2 * hh + 1] * inv : 0.0f);
        *reinterpret_cast<Vec<T, 2>*>(out + dn * 8) = pair;
      }
    }
}

}  // namespace attn
}  // namespace pgk
