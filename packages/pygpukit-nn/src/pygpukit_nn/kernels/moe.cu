// Mixture-of-experts routing of pygpukit-nn (moe.py): router top-k, the
// permutation of tokens into expert order and its inverse with the weighted
// combine. Every result is deterministic: no floating-point atomics, and the
// integer atomics only count (their order does not change a count).
//
// Routing: a warp per token; expert e of a row sits in lane e % 32, slot
// e / 32. The top k are chosen on the logits (softmax and sigmoid are
// monotonic, so this is the choice on the probabilities without their
// rounding), by a 64-bit key (order key of the value, ~expert id): the
// larger value wins, on a tie the lower expert id; NaN counts as the largest
// value and -0.0 as +0.0 (gp.topk's order).
//
// Permute: a counting sort of the T*k assignments by expert. An assignment
// whose id is outside [0, E) goes to bucket E, after every expert's rows.
// moe_count takes each tile's histogram, moe_scan turns the histograms into
// each (tile, bucket)'s first destination row and the cumulative ends
// (offs), moe_rank gives each assignment its rank among the earlier ones of
// its bucket (match_any within a warp, per-warp counts across the block,
// tile by tile), so rows of one expert keep the assignments' order.
// moe_gather copies the token rows into that order.
//
// Unpermute: moe_invert turns the index map into each assignment's row,
// moe_combine sums each token's k rows in slot order, in float.
#include "pgk/types.cuh"

namespace pgk {

// -- router top-k ------------------------------------------------------------------

constexpr int kRouterWarps = 8;

__device__ __forceinline__ unsigned int router_key(float v) {
  if (v != v) return 0xffffffffu;  // every NaN on top
  unsigned int u = __float_as_uint(v);
  if (u == 0x80000000u) u = 0u;  // -0.0 as +0.0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float router_value(unsigned int key) {
  if (key == 0xffffffffu) return __int_as_float(0x7fc00000);
  return __uint_as_float((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}

// SCORING 0: softmax over the E logits; 1: sigmoid of each. Weights and ids
// are (T, k) with row stride k; k <= 32 (lane j keeps choice j).
template <class T, int EPL, int SCORING, bool RENORM>
__global__ void __launch_bounds__(kRouterWarps * 32)
router_topk(const T* __restrict__ logits, long long ls, long long tokens, int E, int k, float* __restrict__ w, int* __restrict__ ids) {
  const int lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * kRouterWarps + (threadIdx.x >> 5);
  if (t >= tokens) return;  // whole warps leave: no block-wide synchronization follows
  const T* row = logits + t * ls;
  float v[EPL];
  unsigned long long key[EPL];  // 0 for a slot past E: below every real key
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < E ? (float)row[e] : 0.0f;
    key[i] = e < E ? ((unsigned long long)router_key(v[i]) << 32) | (unsigned int)~e : 0ull;
  }
  float mine_v = 0.0f, top = 0.0f;
  int mine_e = 0;
  for (int j = 0; j < k; ++j) {
    unsigned long long best = 0ull;
#pragma unroll
    for (int i = 0; i < EPL; ++i) best = key[i] > best ? key[i] : best;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const unsigned long long o = __shfl_xor_sync(0xffffffffu, best, off);
      best = o > best ? o : best;
    }
#pragma unroll
    for (int i = 0; i < EPL; ++i)
      if (key[i] == best) key[i] = 0ull;  // taken (ids are unique, so one slot of one lane)
    const float bv = router_value((unsigned int)(best >> 32));
    if (j == 0) top = bv;
    if (lane == j) {
      mine_v = bv;
      mine_e = (int)~(unsigned int)best;
    }
  }
  float s;  // this lane's unnormalized score
  if constexpr (SCORING == 0) s = lane < k ? expf(mine_v - top) : 0.0f;
  else s = lane < k ? 1.0f / (1.0f + expf(-mine_v)) : 0.0f;
  float denom = 1.0f;
  if constexpr (RENORM) {
    denom = s;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) denom += __shfl_xor_sync(0xffffffffu, denom, off);
  } else if constexpr (SCORING == 0) {
    denom = 0.0f;
#pragma unroll
    for (int i = 0; i < EPL; ++i)
      if (lane + 32 * i < E) denom += expf(v[i] - top);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) denom += __shfl_xor_sync(0xffffffffu, denom, off);
  }
  if (lane < k) {
    w[t * k + lane] = s / denom;
    ids[t * k + lane] = mine_e;
  }
}

// -- permute -----------------------------------------------------------------------

constexpr int kPermThreads = 256;
constexpr int kPermWarps = kPermThreads / 32;
constexpr int kScanThreads = 1024;

template <class I>
__device__ __forceinline__ int moe_bucket(I id, int E) {
  return (id >= 0 && id < (I)E) ? (int)id : E;
}

// counts[tile * (E + 1) + b]: assignments of bucket b in tile (tile_len each).
// Dynamic shared memory: (E + 1) ints.
template <class I>
__global__ void __launch_bounds__(kPermThreads)
moe_count(const I* __restrict__ ids, long long n, int E, long long tile_len, int* __restrict__ counts) {
  extern __shared__ int hist[];
  const int nb = E + 1;
  for (int b = threadIdx.x; b < nb; b += kPermThreads) hist[b] = 0;
  __syncthreads();
  const long long start = (long long)blockIdx.x * tile_len;
  const long long end = min(start + tile_len, n);
  for (long long i = start + threadIdx.x; i < end; i += kPermThreads) atomicAdd(&hist[moe_bucket(ids[i], E)], 1);
  __syncthreads();
  for (int b = threadIdx.x; b < nb; b += kPermThreads) counts[(long long)blockIdx.x * nb + b] = hist[b];
}

// One block: an exclusive scan of the counts read bucket-major (q = b * tiles
// + t), in chunks of kScanThreads * kScanItems, turns counts[t, b] into the
// first destination row of bucket b's assignments in tile t (the rows of the
// buckets before b, then those of b in the tiles before t); offs[e] is the
// start of bucket e + 1, the end of expert e.
constexpr int kScanItems = 8;

__global__ void __launch_bounds__(kScanThreads) moe_scan(int* __restrict__ counts, int tiles, int E, int* __restrict__ offs) {
  __shared__ int warp_sums[kScanThreads / 32];
  __shared__ int carry_s;
  const int nb = E + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long m = (long long)nb * tiles;
  if (threadIdx.x == 0) carry_s = 0;
  __syncthreads();
  for (long long base = 0; base < m; base += kScanThreads * kScanItems) {
    const long long q0 = base + (long long)threadIdx.x * kScanItems;
    int c[kScanItems];
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) {
      const long long q = q0 + u;
      c[u] = q < m ? counts[(q % tiles) * nb + q / tiles] : 0;
    }
    int sum = 0;  // the thread's items, exclusive
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) {
      const int x = c[u];
      c[u] = sum;
      sum += x;
    }
    int incl = sum;  // inclusive scan of the threads' sums
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int s = warp_sums[lane];
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, s, off);
        if (lane >= off) s += v;
      }
      warp_sums[lane] = s;
    }
    __syncthreads();
    const int before = carry_s + (warp > 0 ? warp_sums[warp - 1] : 0) + incl - sum;
#pragma unroll
    for (int u = 0; u < kScanItems; ++u) {
      const long long q = q0 + u;
      if (q < m) {
        const long long t = q % tiles, b = q / tiles;
        counts[t * nb + b] = before + c[u];
        if (t == 0 && b > 0) offs[b - 1] = before + c[u];
      }
    }
    __syncthreads();  // everyone has read carry_s and warp_sums
    if (threadIdx.x == kScanThreads - 1) carry_s = before + sum;
    __syncthreads();
  }
}

// index_map[dest] = i for each assignment i of the tile. Dynamic shared memory:
// (kPermWarps + 1) * (E + 1) ints: per-warp counts of the current round, and
// the running count of each bucket over the tile's earlier rounds.
template <class I>
__global__ void __launch_bounds__(kPermThreads)
moe_rank(const I* __restrict__ ids, long long n, int E, long long tile_len, const int* __restrict__ first, int* __restrict__ index_map) {
  extern __shared__ int smem[];
  const int nb = E + 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int* wcount = smem;                     // [kPermWarps][nb]
  int* running = smem + kPermWarps * nb;  // [nb]
  for (int b = threadIdx.x; b < (kPermWarps + 1) * nb; b += kPermThreads) smem[b] = 0;
  __syncthreads();
  const long long start = (long long)blockIdx.x * tile_len;
  const long long end = min(start + tile_len, n);
  const int* tile_first = first + (long long)blockIdx.x * nb;
  for (long long r = start; r < end; r += kPermThreads) {  // the same number of rounds in every thread
    const long long i = r + threadIdx.x;
    const bool valid = i < end;
    const int b = valid ? moe_bucket(ids[i], E) : -1;
    const unsigned int peers = __match_any_sync(0xffffffffu, b);
    const bool leader = lane == __ffs(peers) - 1;
    if (valid && leader) wcount[warp * nb + b] = __popc(peers);
    __syncthreads();
    if (valid) {
      int rank = running[b] + __popc(peers & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) rank += wcount[w * nb + b];
      index_map[tile_first[b] + rank] = (int)i;
    }
    __syncthreads();  // every rank of this round is taken before the counts move on
    if (valid && leader) {
      atomicAdd(&running[b], __popc(peers));
      wcount[warp * nb + b] = 0;
    }
    __syncthreads();
  }
}

// out[r] = x[index_map[r] / k]: rows of D elements, VEC per access; grid
// (rows, column blocks).
constexpr int kCopyThreads = 128;
constexpr int kCopyUnroll = 4;

template <class T, int VEC>
__global__ void __launch_bounds__(kCopyThreads)
moe_gather(const T* __restrict__ x, long long xs, const int* __restrict__ index_map, int k, int D, T* __restrict__ out) {
  using V = Vec<T, VEC>;
  const long long r = blockIdx.x;
  const V* src = reinterpret_cast<const V*>(x + (long long)(index_map[r] / k) * xs);
  V* dst = reinterpret_cast<V*>(out + r * D);
  const int nvec = D / VEC;
  const int c0 = blockIdx.y * kCopyThreads * kCopyUnroll + threadIdx.x;
  V buf[kCopyUnroll];
#pragma unroll
  for (int u = 0; u < kCopyUnroll; ++u)
    if (c0 + u * kCopyThreads < nvec) buf[u] = src[c0 + u * kCopyThreads];
#pragma unroll
  for (int u = 0; u < kCopyUnroll; ++u)
    if (c0 + u * kCopyThreads < nvec) dst[c0 + u * kCopyThreads] = buf[u];
}

// -- unpermute ---------------------------------------------------------------------

// pos[index_map[r]] = r; entries outside [0, n) are skipped (never written out of bounds).
__global__ void __launch_bounds__(256) moe_invert(const int* __restrict__ index_map, long long n, int* __restrict__ pos) {
  const long long r = (long long)blockIdx.x * 256 + threadIdx.x;
  if (r < n) {
    const int j = index_map[r];
    if (j >= 0 && j < n) pos[j] = (int)r;
  }
}

// out[t] = sum over slots s (in order) of w[t, s] * y[pos[t * k + s]], in float;
// positions are clamped into [0, n), so a bad index map cannot read out of bounds.
template <class T, int VEC>
__global__ void __launch_bounds__(kCopyThreads)
moe_combine(const T* __restrict__ y, long long ys, const int* __restrict__ pos, const float* __restrict__ w, int k, long long n, int D,
            T* __restrict__ out) {
  using V = Vec<T, VEC>;
  const long long t = blockIdx.x;
  const int nvec = D / VEC;
  const int c0 = blockIdx.y * kCopyThreads * kCopyUnroll + threadIdx.x;
  float acc[kCopyUnroll][VEC];
#pragma unroll
  for (int u = 0; u < kCopyUnroll; ++u)
#pragma unroll
    for (int q = 0; q < VEC; ++q) acc[u][q] = 0.0f;
  for (int s = 0; s < k; ++s) {
    long long p = pos[t * k + s];
    p = p < 0 ? 0 : (p >= n ? n - 1 : p);
    const float ws = w[t * k + s];
    const V* src = reinterpret_cast<const V*>(y + p * ys);
    V buf[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      if (c0 + u * kCopyThreads < nvec) buf[u] = src[c0 + u * kCopyThreads];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
#pragma unroll
      for (int q = 0; q < VEC; ++q) acc[u][q] = fmaf(ws, (float)buf[u].v[q], acc[u][q]);
  }
  V* dst = reinterpret_cast<V*>(out + t * D);
#pragma unroll
  for (int u = 0; u < kCopyUnroll; ++u) {
    if (c0 + u * kCopyThreads < nvec) {
      V o;
#pragma unroll
      for (int q = 0; q < VEC; ++q) o.v[q] = T(acc[u][q]);
      dst[c0 + u * kCopyThreads] = o;
    }
  }
}

}  // namespace pgk
