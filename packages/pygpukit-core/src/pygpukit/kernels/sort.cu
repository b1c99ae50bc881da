// Sorting: LSD radix sort on order-preserving unsigned keys, searchsorted,
// the flags of unique, and the selection of top-k candidates.
//
// Keys. Every dtype is sorted as the unsigned integer U of its width (bool
// and the integers as themselves: signed ones get their sign bit flipped by
// `flip`; descending flips every bit). Floats go through KeyFloat:
//  - enc<true> (argsort, searchsorted, unique, topk): the "order" key, NumPy's
//    order: every NaN maps to the top key, -0.0 and +0.0 to the same key;
//  - enc<false> (sort): a bijection, so sorted keys decode back to the very
//    input bits: the usual sign-flip transform, then rotated down by the
//    number of negative NaN codes, which moves those NaNs from the bottom to
//    the top. Equal values keep their order, except that -0.0 sorts just
//    before +0.0 and NaNs are ordered by their bit patterns (only visible
//    in the bits of zeros and NaNs).
// pygpukit/sorting.py holds the same transforms in NumPy for the CPU backend.
//
// Ranking. A tile of THREADS * ITEMS keys is held warp-striped (warp w, item
// i, lane l holds position w*32*ITEMS + i*32 + l). Per 8-bit digit each warp
// ranks its items with ballots (the lanes holding the same digit) and a
// per-warp digit histogram; a scan over (digit, warp) turns the histograms
// into the stable rank of every key in the tile.
//
// Rows of up to 4096 keys (2048 for 8-byte keys) are sorted in shared memory,
// all digit passes in one kernel, one block per row or per group of short
// rows (sort_block). Longer rows
// take one pass per key byte over all rows at once, reduce-then-scan:
// radix_upsweep counts the digits of a contiguous chunk of a row per block,
// radix_scan turns the counts into each block's first output position per
// digit, radix_downsweep ranks each tile in shared memory and scatters it
// (staged through shared memory, so runs of one digit are written together).
// Keys move between passes as raw bits (encoded on every load), indices as
// int32, the last pass writes the int64 result. Floor for 2^24 float32 keys:
// 4 passes x 12 bytes per key (read for the counts, read and write for the
// scatter) = 805 MB, 0.27 ms at 3 TB/s.
namespace pgk {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kUnroll = 4;  // loads in flight per thread in the streaming (counting) kernels

// ---- keys -------------------------------------------------------------------

template <class U_>
struct KeyInt {
  using U = U_;
  template <bool ORDER>
  __device__ __forceinline__ static U enc(U b) { return b; }
  __device__ __forceinline__ static U dec(U k) { return k; }
};

template <class U_, unsigned long long ABS_MAX_>
struct KeyFloat {
  using U = U_;
  static constexpr U SIGN = (U)((U)1 << (8 * sizeof(U) - 1));
  static constexpr U ALL = (U)~(U)0;
  static constexpr U ABS_MAX = (U)ABS_MAX_;  // the largest magnitude that is not NaN (inf or the max finite)
  static constexpr U ROT = (U)(SIGN - 1 - ABS_MAX);  // the number of NaN codes of one sign
  __device__ __forceinline__ static U flip_sign(U b) { return (U)(b ^ ((b & SIGN) ? ALL : SIGN)); }
  template <bool ORDER>
  __device__ __forceinline__ static U enc(U b) {
    if (ORDER) {
      const U mag = (U)(b & (U)~SIGN);
      return mag > ABS_MAX ? ALL : (mag == 0 ? SIGN : flip_sign(b));
    }
    return (U)(flip_sign(b) - ROT);
  }
  __device__ __forceinline__ static U dec(U k) {
    k = (U)(k + ROT);
    return (k & SIGN) ? (U)(k ^ SIGN) : (U)~k;
  }
};

// bool and every integer dtype of a width (signedness rides in `flip`).
struct KeyU8 : KeyInt<unsigned char> {};
struct KeyU16 : KeyInt<unsigned short> {};
struct KeyU32 : KeyInt<unsigned int> {};
struct KeyU64 : KeyInt<unsigned long long> {};
struct KeyF16 : KeyFloat<unsigned short, 0x7c00ull> {};
struct KeyBF16 : KeyFloat<unsigned short, 0x7f80ull> {};
struct KeyF32 : KeyFloat<unsigned int, 0x7f800000ull> {};
struct KeyF64 : KeyFloat<unsigned long long, 0x7ff0000000000000ull> {};
struct KeyE4M3 : KeyFloat<unsigned char, 0x7eull> {};  // no inf: 0x7e is 448, 0x7f NaN
struct KeyE5M2 : KeyFloat<unsigned char, 0x7cull> {};

// ---- block building blocks ------------------------------------------------------

// Exclusive prefix sum of one value per thread over the block; *total gets the
// block's sum. Every thread must call it (it synchronizes).
template <int THREADS>
__device__ __forceinline__ int block_exclusive_sum(int v, int* warp_sums, int* total) {
  constexpr int WARPS = THREADS / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(kFull, x, off);
    if (lane >= off) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int t = lane < WARPS ? warp_sums[lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(kFull, t, off);
      if (lane >= off) t += y;
    }
    if (lane < WARPS) warp_sums[lane] = t;
  }
  __syncthreads();
  const int r = (warp ? warp_sums[warp - 1] : 0) + x - v;
  *total = warp_sums[WARPS - 1];
  __syncthreads();  // warp_sums may be reused at once
  return r;
}

template <int THREADS>
struct RankStorage {
  int hist[THREADS / 32][256];  // per-warp digit counts, then their exclusive scan over warps
  int start[256];  // first rank of each digit in the tile
  int total[256];  // keys of each digit in the tile
  int warp_sums[32];
};

// The lanes of this warp whose digit equals this lane's (8-bit digits).
__device__ __forceinline__ unsigned match_digit(unsigned d) {
  unsigned peers = kFull;
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const unsigned bit = (d >> b) & 1u;
    const unsigned bal = __ballot_sync(kFull, bit);
    peers &= bit ? bal : ~bal;
  }
  return peers;
}

// Stable rank in the tile of each of this thread's ITEMS warp-striped keys,
// given their digits. Leaves s.start / s.total for the caller. Synchronizes.
template <int THREADS, int ITEMS>
__device__ __forceinline__ void block_rank(const unsigned (&digit)[ITEMS], int (&rank)[ITEMS], RankStorage<THREADS>& s) {
  constexpr int WARPS = THREADS / 32;
  constexpr int DPT = (256 + THREADS - 1) / THREADS;  // digits per thread in the scans
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < WARPS * 256; i += THREADS) s.hist[i / 256][i % 256] = 0;
  __syncthreads();
  int* h = s.hist[warp];
  const unsigned lower = (1u << lane) - 1u;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const unsigned d = digit[i];
    const unsigned peers = match_digit(d);
    const int below = __popc(peers & lower);
    const int before = h[d];
    __syncwarp();
    if (below == 0) h[d] = before + __popc(peers);
    __syncwarp();
    rank[i] = before + below;
  }
  __syncthreads();
  int sum = 0;
#pragma unroll
  for (int j = 0; j < DPT; ++j) {
    const int d = threadIdx.x * DPT + j;
    if (d < 256) {
      int run = 0;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        const int c = s.hist[w][d];
        s.hist[w][d] = run;
        run += c;
      }
      s.total[d] = run;
      sum += run;
    }
  }
  int all;
  int excl = block_exclusive_sum<THREADS>(sum, s.warp_sums, &all);
#pragma unroll
  for (int j = 0; j < DPT; ++j) {
    const int d = threadIdx.x * DPT + j;
    if (d < 256) {
      s.start[d] = excl;
      excl += s.total[d];
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) rank[i] += s.start[digit[i]] + h[digit[i]];
}

// ---- rows that fit one block ------------------------------------------------------

// A block sorts `rpt` consecutive rows (rpt * n <= THREADS * ITEMS, rpt <= 256)
// held as one tile, every digit pass in shared memory; with rpt > 1 a last
// pass on the row within the tile (the most significant digit) puts each row
// back together, keeping its sorted order. Grid-stride over groups of rows.
// IDX: write the int64 permutation (order keys) instead of the sorted values.
template <class Tr, bool IDX, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS)
sort_block(const typename Tr::U* __restrict__ in, typename Tr::U* __restrict__ out, long long* __restrict__ out_idx, long long rows,
           long long n, typename Tr::U flip, int rpt) {
  using U = typename Tr::U;
  constexpr int TILE = THREADS * ITEMS;
  const int passes = (int)sizeof(U) + (rpt > 1);
  const bool carry = IDX || rpt > 1;  // positions are needed
  const int len = (int)n;  // n <= TILE here
  __shared__ U keys_s[TILE];
  __shared__ unsigned short idx_s[TILE];
  __shared__ RankStorage<THREADS> rs;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long r0 = (long long)blockIdx.x * rpt; r0 < rows; r0 += (long long)gridDim.x * rpt) {
    const int count = (int)(rows - r0 < rpt ? rows - r0 : rpt) * len;
    const U* src = in + r0 * n;
    U k[ITEMS];
    unsigned short id[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int p = warp * 32 * ITEMS + i * 32 + lane;
      k[i] = p < count ? (U)(Tr::template enc<IDX>(src[p]) ^ flip) : (U)~(U)0;  // padding sorts last
      id[i] = (unsigned short)p;
    }
#pragma unroll 1
    for (int pass = 0; pass < passes; ++pass) {
      unsigned dg[ITEMS];
      int rk[ITEMS];
      const bool row_pass = pass == (int)sizeof(U);
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        dg[i] = row_pass ? (id[i] < count ? (unsigned)(id[i] / len) : 255u) : (unsigned)(k[i] >> (8 * pass)) & 255u;
      }
      block_rank<THREADS, ITEMS>(dg, rk, rs);
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        keys_s[rk[i]] = k[i];
        if (carry) idx_s[rk[i]] = id[i];
      }
      __syncthreads();
      if (pass + 1 < passes) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
          const int p = warp * 32 * ITEMS + i * 32 + lane;
          k[i] = keys_s[p];
          if (carry) id[i] = idx_s[p];
        }
      }
      __syncthreads();
    }
    for (int p = threadIdx.x; p < count; p += THREADS) {
      if (IDX) {
        out_idx[r0 * n + p] = idx_s[p] - (p / len) * len;  // the position within its row
      } else {
        out[r0 * n + p] = Tr::dec((U)(keys_s[p] ^ flip));
      }
    }
    __syncthreads();
  }
}

// ---- longer rows: one pass per key byte ------------------------------------------
// A launch covers every row: block b works on row b / G, chunk b % G (tiles
// [g * tiles_per_block, (g + 1) * tiles_per_block) of the row). counts is
// [row][digit][G]; row_tot[row][digit] is filled by atomics (zeroed before).

constexpr int kRadixThreads = 256;

template <class U>
struct LargeItems {
  static constexpr int value = sizeof(U) == 8 ? 8 : 16;
};

template <class Tr, bool ORDER>
__global__ void __launch_bounds__(kRadixThreads)
radix_upsweep(const typename Tr::U* __restrict__ keys, int* __restrict__ counts, int* __restrict__ row_tot, long long n, int G,
              long long chunk, int shift, typename Tr::U flip) {
  using U = typename Tr::U;
  constexpr int WARPS = kRadixThreads / 32;
  constexpr int UNROLL = kUnroll;
  __shared__ int hist[WARPS][256];
  const int warp = threadIdx.x >> 5;
  const long long r = blockIdx.x / G;
  const int g = blockIdx.x % G;
  for (int i = threadIdx.x; i < WARPS * 256; i += kRadixThreads) hist[i / 256][i % 256] = 0;
  __syncthreads();
  const U* src = keys + r * n;
  const long long lo = g * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  for (long long base = lo; base < hi; base += kRadixThreads * UNROLL) {
    U v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long p = base + u * kRadixThreads + threadIdx.x;
      v[u] = p < hi ? src[p] : (U)0;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (base + u * kRadixThreads + threadIdx.x < hi) {
        const unsigned d = (unsigned)((U)(Tr::template enc<ORDER>(v[u]) ^ flip) >> shift) & 255u;
        atomicAdd(&hist[warp][d], 1);
      }
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += kRadixThreads) {
    int c = 0;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) c += hist[w][d];
    counts[(r * 256 + d) * G + g] = c;
    if (c) atomicAdd(&row_tot[r * 256 + d], c);
  }
}

// Exclusive prefix sums of seg[0, len), in place, plus base, by a block of
// 256 threads (each takes a contiguous run of len / 256 values).
__device__ __forceinline__ void block_scan_inplace(int* seg, long long len, int base, int* warp_sums) {
  const long long per = (len + 255) / 256;
  const long long lo = threadIdx.x * per;
  const long long hi = lo + per < len ? lo + per : len;
  int sum = 0;
  for (long long i = lo; i < hi; ++i) sum += seg[i];
  int total;
  int run = base + block_exclusive_sum<256>(sum, warp_sums, &total);
  for (long long i = lo; i < hi; ++i) {
    const int c = seg[i];
    seg[i] = run;
    run += c;
  }
}

// counts -> exclusive offsets within the row, in place. Block b scans digits
// [grp * dpb, (grp + 1) * dpb) of row b / (256 / dpb): one contiguous run of
// dpb * G counts, offset by the keys of all smaller digits of the row.
__global__ void __launch_bounds__(256)
radix_scan(int* __restrict__ counts, const int* __restrict__ row_tot, int G, int dpb) {
  __shared__ int warp_sums[32];
  const int groups = 256 / dpb;
  const long long r = blockIdx.x / groups;
  const int d0 = (blockIdx.x % groups) * dpb;
  int base;
  block_exclusive_sum<256>((int)threadIdx.x < d0 ? row_tot[r * 256 + threadIdx.x] : 0, warp_sums, &base);
  block_scan_inplace(counts + (r * 256 + d0) * G, (long long)dpb * G, base, warp_sums);
}

// One digit pass: rank each tile of the block's chunk in shared memory and
// scatter keys (unless IDX on the last pass: not needed) and indices.
// first: indices are the positions (no index input); last: indices go out as int64.
template <class Tr, bool IDX>
__global__ void __launch_bounds__(kRadixThreads)
radix_downsweep(const typename Tr::U* __restrict__ kin, typename Tr::U* __restrict__ kout, const int* __restrict__ iin,
                int* __restrict__ iout, long long* __restrict__ iout64, const int* __restrict__ offsets, long long n, int G,
                int tiles_per_block, int shift, typename Tr::U flip, int first, int last) {
  using U = typename Tr::U;
  constexpr int ITEMS = LargeItems<U>::value;
  constexpr int TILE = kRadixThreads * ITEMS;
  __shared__ U keys_s[TILE];
  __shared__ int idx_s[IDX ? TILE : 1];
  __shared__ int run[256];
  __shared__ RankStorage<kRadixThreads> rs;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long r = blockIdx.x / G;
  const int g = blockIdx.x % G;
  const long long row = r * n;
  for (int d = threadIdx.x; d < 256; d += kRadixThreads) run[d] = offsets[(r * 256 + d) * G + g];
  const long long tiles = (n + TILE - 1) / TILE;
  const long long t0 = (long long)g * tiles_per_block;
  const long long t1 = t0 + tiles_per_block < tiles ? t0 + tiles_per_block : tiles;
  const bool write_keys = !(IDX && last);
  for (long long t = t0; t < t1; ++t) {
    const long long base = t * TILE;
    U raw[ITEMS];
    int id[ITEMS];
    unsigned dg[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const long long p = base + warp * 32 * ITEMS + i * 32 + lane;
      U key = (U)~(U)0;  // padding: digit 255, after every key of the tile
      raw[i] = 0;
      id[i] = 0;
      if (p < n) {
        raw[i] = kin[row + p];
        key = (U)(Tr::template enc<IDX>(raw[i]) ^ flip);
        if (IDX) id[i] = first ? (int)p : iin[row + p];
      }
      dg[i] = (unsigned)(key >> shift) & 255u;
    }
    int rk[ITEMS];
    block_rank<kRadixThreads, ITEMS>(dg, rk, rs);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      keys_s[rk[i]] = raw[i];
      if (IDX) idx_s[rk[i]] = id[i];
    }
    __syncthreads();
    const int valid = n - base < TILE ? (int)(n - base) : TILE;
    for (int j = threadIdx.x; j < valid; j += kRadixThreads) {
      const U v = keys_s[j];
      const unsigned d = (unsigned)((U)(Tr::template enc<IDX>(v) ^ flip) >> shift) & 255u;
      const long long dst = row + run[d] + (j - rs.start[d]);
      if (write_keys) kout[dst] = v;
      if (IDX) {
        if (last) {
          iout64[dst] = idx_s[j];
        } else {
          iout[dst] = idx_s[j];
        }
      }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += kRadixThreads) run[d] += rs.total[d];
    __syncthreads();
  }
}

// ---- searchsorted and unique ------------------------------------------------

// out[i] = the first position in sorted a where v[i] could be inserted (after
// equal keys when right != 0), comparing order keys (NaN last, -0.0 == 0.0).
template <class Tr>
__global__ void __launch_bounds__(256)
searchsorted(const typename Tr::U* __restrict__ a, long long n, const typename Tr::U* __restrict__ v, long long nv,
             long long* __restrict__ out, int right, typename Tr::U flip) {
  using U = typename Tr::U;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < nv; i += (long long)gridDim.x * 256) {
    const U key = (U)(Tr::template enc<true>(v[i]) ^ flip);
    long long lo = 0, hi = n;
    while (lo < hi) {
      const long long mid = lo + ((hi - lo) >> 1);
      const U km = (U)(Tr::template enc<true>(a[mid]) ^ flip);
      if (km < key || (right && km == key)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    out[i] = lo;
  }
}

// out[i]: s[i] starts a new run of equal order keys in the sorted array s.
template <class Tr>
__global__ void __launch_bounds__(256)
unique_flags(const typename Tr::U* __restrict__ s, bool* __restrict__ out, long long n) {
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256) {
    out[i] = i == 0 || Tr::template enc<true>(s[i]) != Tr::template enc<true>(s[i - 1]);
  }
}

// ---- top-k: radix select ------------------------------------------------------------
// The k smallest order keys (flip inverts them for the largest) of each row,
// ties to the lower position: find the k-th key T digit by digit from the
// top (select_hist + select_pick per byte), then count per block the keys
// below T and equal to T (select_count), scan those counts (select_offsets)
// and write the positions of every key below T and of the first `remain`
// keys equal to T, in position order (select_write).

struct SelectState {
  unsigned long long prefix;  // the digits of T found so far
  int remain;  // keys equal to the prefix still to take
  int less;  // keys below the prefix
};

template <class Tr>
__global__ void __launch_bounds__(256)
select_hist(const typename Tr::U* __restrict__ x, int* __restrict__ hist, const SelectState* __restrict__ st, long long n, int G,
            long long chunk, int shift, typename Tr::U flip, int first) {
  using U = typename Tr::U;
  __shared__ int h[8][256];
  const int warp = threadIdx.x >> 5;
  const long long r = blockIdx.x / G;
  const int g = blockIdx.x % G;
  for (int i = threadIdx.x; i < 8 * 256; i += 256) h[i / 256][i % 256] = 0;
  __syncthreads();
  const unsigned long long want = first ? 0ull : st[r].prefix >> (shift + 8);
  const U* src = x + r * n;
  const long long lo = g * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  for (long long base = lo; base < hi; base += 256 * kUnroll) {
    U v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long p = base + u * 256 + threadIdx.x;
      v[u] = p < hi ? src[p] : (U)0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const U key = (U)(Tr::template enc<true>(v[u]) ^ flip);
      if (base + u * 256 + threadIdx.x < hi && (first || (unsigned long long)(key >> (shift + 8)) == want)) {
        atomicAdd(&h[warp][(key >> shift) & 255], 1);
      }
    }
  }
  __syncthreads();
  const int d = threadIdx.x;
  int c = 0;
#pragma unroll
  for (int w = 0; w < 8; ++w) c += h[w][d];
  if (c) atomicAdd(&hist[r * 256 + d], c);
}

// One block of 256 per row: the digit of T at `shift`; clears hist for the next pass.
__global__ void __launch_bounds__(256)
select_pick(int* __restrict__ hist, SelectState* __restrict__ st, int shift, int k, int first) {
  __shared__ int warp_sums[32];
  const long long r = blockIdx.x;
  const int d = threadIdx.x;
  const int c = hist[r * 256 + d];
  hist[r * 256 + d] = 0;
  const SelectState s = first ? SelectState{0ull, k, 0} : st[r];
  int total;
  const int below = block_exclusive_sum<256>(c, warp_sums, &total);
  if (below < s.remain && s.remain <= below + c) {
    st[r] = SelectState{s.prefix | ((unsigned long long)d << shift), s.remain - below, s.less + below};
  }
}

// cnt[row][0][g], cnt[row][1][g]: keys below / equal to T in block g's chunk.
template <class Tr>
__global__ void __launch_bounds__(256)
select_count(const typename Tr::U* __restrict__ x, const SelectState* __restrict__ st, int* __restrict__ cnt, long long n, int G,
             long long chunk, typename Tr::U flip) {
  using U = typename Tr::U;
  __shared__ int warp_sums[32];
  const long long r = blockIdx.x / G;
  const int g = blockIdx.x % G;
  const U t = (U)st[r].prefix;
  const U* src = x + r * n;
  const long long lo = g * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  int lt = 0, eq = 0;
  for (long long base = lo; base < hi; base += 256 * kUnroll) {
    U v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long p = base + u * 256 + threadIdx.x;
      v[u] = p < hi ? src[p] : (U)0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const U key = (U)(Tr::template enc<true>(v[u]) ^ flip);
      const bool in = base + u * 256 + threadIdx.x < hi;
      lt += in && key < t;
      eq += in && key == t;
    }
  }
  int lt_all, eq_all;
  block_exclusive_sum<256>(lt, warp_sums, &lt_all);
  block_exclusive_sum<256>(eq, warp_sums, &eq_all);
  if (threadIdx.x == 0) {
    cnt[(r * 2) * G + g] = lt_all;
    cnt[(r * 2 + 1) * G + g] = eq_all;
  }
}

// One block of 256 per row: both count arrays of the row to exclusive offsets.
__global__ void __launch_bounds__(256)
select_offsets(int* __restrict__ cnt, int G) {
  __shared__ int warp_sums[32];
  const long long r = blockIdx.x;
  block_scan_inplace(cnt + r * 2 * G, G, 0, warp_sums);
  block_scan_inplace(cnt + (r * 2 + 1) * G, G, 0, warp_sums);
}

constexpr int kSelectItems = 8;  // tile of select_write: 256 * 8 keys, warp-striped

// out[row][j]: the positions taken, in increasing order. A position p with lt
// keys below T and eq keys equal to T before it goes to lt + min(eq, remain).
template <class Tr>
__global__ void __launch_bounds__(256)
select_write(const typename Tr::U* __restrict__ x, const SelectState* __restrict__ st, const int* __restrict__ off,
             long long* __restrict__ out, long long n, int G, long long chunk, int k, typename Tr::U flip) {
  using U = typename Tr::U;
  constexpr int ITEMS = kSelectItems;
  constexpr int TILE = 256 * ITEMS;
  __shared__ int warp_lt[8], warp_eq[8];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long r = blockIdx.x / G;
  const int g = blockIdx.x % G;
  const SelectState s = st[r];
  const U t = (U)s.prefix;
  const U* src = x + r * n;
  long long* dst = out + r * k;
  const long long lo = g * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  int lt_run = off[(r * 2) * G + g], eq_run = off[(r * 2 + 1) * G + g];
  const unsigned lower = (1u << lane) - 1u;
  for (long long base = lo; base < hi; base += TILE) {
    bool lt[ITEMS], eq[ITEMS];
    int lt_before[ITEMS], eq_before[ITEMS];
    int wl = 0, we = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const long long p = base + warp * 32 * ITEMS + i * 32 + lane;
      lt[i] = eq[i] = false;
      if (p < hi) {
        const U key = (U)(Tr::template enc<true>(src[p]) ^ flip);
        lt[i] = key < t;
        eq[i] = key == t;
      }
      const unsigned bl = __ballot_sync(kFull, lt[i]);
      const unsigned be = __ballot_sync(kFull, eq[i]);
      lt_before[i] = wl + __popc(bl & lower);
      eq_before[i] = we + __popc(be & lower);
      wl += __popc(bl);
      we += __popc(be);
    }
    if (lane == 0) {
      warp_lt[warp] = wl;
      warp_eq[warp] = we;
    }
    __syncthreads();
    int lt_base = lt_run, eq_base = eq_run, lt_tile = 0, eq_tile = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      if (w < warp) {
        lt_base += warp_lt[w];
        eq_base += warp_eq[w];
      }
      lt_tile += warp_lt[w];
      eq_tile += warp_eq[w];
    }
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int e = eq_base + eq_before[i];
      if (lt[i] || (eq[i] && e < s.remain)) {
        dst[lt_base + lt_before[i] + (e < s.remain ? e : s.remain)] = base + warp * 32 * ITEMS + i * 32 + lane;
      }
    }
    lt_run += lt_tile;
    eq_run += eq_tile;
    __syncthreads();
  }
}

}  // namespace pgk
