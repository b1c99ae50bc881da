// Decode attention of pygpukit-nn (decode.py): 1..8 new query tokens per
// sequence against a KV cache, contiguous (B, Hkv, cap, D) per layer or paged
// (a pool of (num_blocks, Hkv, BS, D) blocks and a (B, table_width) block
// table), bf16 / fp16 or fp8 e4m3 (dequantized here with a float32 scale per
// KV head).
//
// Time floor: the K and V bytes of the sequences, 2 * B * Hkv * L * D * size,
// read once from HBM (33.5 MB at B=1, Hkv=8, L=8192, D=128 bf16: ~11.5 us at
// the H100's ~2.9 TB/s copy rate), plus the launch and the first DRAM
// latency (a few us: short contexts are latency bound). The shared-memory
// ring below keeps bytes in flight per SM steady (decode.py's defaults: 2
// blocks x 128 lanes x 3 steps x 64 bytes = 48 KB; Little's law wants ~20 KB
// at ~700 ns), where a loop that issued a step's loads and then waited paid a
// full latency every step. On an H100 that made paged caches 25-35% faster
// but contiguous ones hardly (8192 keys: 21.5 us, 1.56 TB/s; 32768: 59 us,
// 2.26 TB/s): 1 to 8 ring steps and 2 to 4 blocks per SM all time within ~5%,
// so what limits them is not bytes in flight but the instruction issue of
// the CUDA cores (~70-80 warp instructions per key at 4 rows; the fp8 cache
// reads half the bytes per key and leans on it harder). decode_attn_tc (at
// the end) takes head_dim up to 128 to tensor cores: 32k keys 60 -> 55 us,
// 144 keys 4.9 -> 3.2 us (fp8 caches too, through an fp16 staging tile: 32k
// keys 40 -> 33 us); head_dim 256 stays on decode_attn.
// Left for short and middle contexts: the chain of latencies of one call
// (the wait for the kernel before, a first DRAM read, and split, the last
// block's merge through L2), 3-4 us on an H100 (docs/nn.md has the phases).
//
// Grid: x = chunk * splits + split, y = KV head h, z = sequence b. A block
// owns ROWS "rows" of one KV head: row r = t * G + g is query token t of
// query head h * G + g (G = Hq / Hkv, GQA), so every K/V byte it reads serves
// all of them (more than 4 rows go to `chunks` blocks, which read the same
// keys at the same time, the second time mostly from L2). Split s takes the
// s-th slice of the sequence's visible keys [lo, L), sliced on the device
// from lengths[b] (a captured graph stays right as the sequence grows).
//
// Inside a block each key is read by a group of LPK lanes, 8 elements each
// (16 bytes of bf16 / fp16, 8 of fp8); a warp holds 32 / LPK groups and a
// group takes KPL keys per step. A lane copies its K and V chunks with
// cp.async into its own slots of a ring of STAGES steps in shared memory,
// STAGES - 1 steps ahead of the one it computes (no registers held, no
// barrier: a lane reads back only what it copied). Each group runs its own
// online softmax (running max m, sum l, and the output accumulator, float32,
// in the log2 domain) over its keys; only the dot products meet by shuffles
// across the group's lanes. At the end the groups merge by shuffles, the warps
// through shared memory (the ring's). With one split the block normalizes and
// writes the output; otherwise it writes its (m, l, acc) and the last block of
// the (b, h, chunk) to arrive (an atomic counter, reset by that block) merges
// the splits in a fixed order (deterministic) and writes the output. Queries
// with no visible key get zeros.
//
// Query t of a sequence of L tokens sits at position L - Tq + t (the new
// tokens are the last Tq ones, aligned bottom-right) and sees keys j <= its
// position, and with a window w > 0 only j > position - w.
#include "pgk/types.cuh"
#include "pgk/pdl.cuh"
#include "pgk/mma.cuh"

namespace pgk {

__device__ __forceinline__ float decode_neg_inf() { return -__int_as_float(0x7f800000); }

// Lanes that read one key of D elements, 8 each: D / 8 rounded up to a power of two.
__host__ __device__ constexpr int decode_lanes_per_key(int d) {
  return d / 8 <= 8 ? 8 : (d / 8 <= 16 ? 16 : 32);
}

// 8 consecutive cache elements: the load and the conversion to float. kFactor:
// the factor the conversion leaves out (folded into the scales).
template <class KT> struct Chunk8;

template <> struct Chunk8<bfloat16> {
  using Raw = uint4;
  static constexpr float kFactor = 1.0f;
  __device__ __forceinline__ static void unpack(const Raw& c, float (&f)[8]) {
    const unsigned int w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
};

template <> struct Chunk8<half> {
  using Raw = uint4;
  static constexpr float kFactor = 1.0f;
  __device__ __forceinline__ static void unpack(const Raw& c, float (&f)[8]) {
    const Vec<half, 8> v = *reinterpret_cast<const Vec<half, 8>*>(&c);
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = static_cast<float>(v.v[j]);
  }
};

__device__ __forceinline__ float half_bits(unsigned int bits) {
  half h;
  h.bits = static_cast<unsigned short>(bits);
  return static_cast<float>(h);
}

// Two e4m3fn bytes (the low 16 bits of `pair`) as the bits of a half2, times
// 2^-8 before SM 89 (kE4m3Factor: the factor left out, folded into the
// scales). The cache never holds NaN (append saturates to +-448).
#if __CUDA_ARCH__ >= 890
constexpr float kE4m3Factor = 1.0f;
__device__ __forceinline__ unsigned e4m3x2_half2(unsigned pair) {  // the hardware conversion (exact)
  unsigned h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(static_cast<unsigned short>(pair)));
  return h;
}
#else
// An e4m3 byte moved into the top of a half (sign kept, the rest shifted
// down one) is the same value times 2^-8 (15 - 7, the exponent biases).
constexpr float kE4m3Factor = 256.0f;
__device__ __forceinline__ unsigned e4m3x2_half2(unsigned pair) {
  const unsigned x = __byte_perm(pair, 0, 0x1707u);  // bytes 0, 1 to the high byte of each half
  return ((x & 0x7F007F00u) >> 1) | (x & 0x80008000u);
}
#endif

template <> struct Chunk8<float8_e4m3> {
  using Raw = uint2;
  static constexpr float kFactor = kE4m3Factor;
  __device__ __forceinline__ static void unpack(const Raw& c, float (&f)[8]) {
    const unsigned int w[2] = {c.x, c.y};
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const unsigned h = e4m3x2_half2(w[i] >> (16 * p));
        f[4 * i + 2 * p] = half_bits(h & 0xFFFFu);
        f[4 * i + 2 * p + 1] = half_bits(h >> 16);
      }
  }
};

// One cache chunk (8 or 16 bytes) copied to shared memory without passing
// through registers; ok false: zeros (no global read).
template <int N>
__device__ __forceinline__ void decode_cp_async(void* dst, const void* src, bool ok) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 8 : 0) : "memory");
}
__device__ __forceinline__ void decode_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void decode_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Where a block's keys are: the visible keys [lo, L) of sequence b
// (capacity-clamped, so a bad length cannot read out of bounds), this split's
// slice [k0, k1) of them in whole STEPs, and the element offset of key j's row
// of KV head h given its page (paged: tab[j >> block_shift]).
template <int D, bool PAGED>
struct DecodeSlice {
  int L, k0, k1;
  long long head_off, page_elems;
  const int* tab;
  int block_shift;
  __device__ __forceinline__ DecodeSlice(const int* lengths, const int* table, int b, int h, int Hkv, int Tq, int splits, int split,
                                         int step, int cap, int block_shift_, int table_width, int window)
      : block_shift(block_shift_) {
    L = min(lengths[b], PAGED ? table_width << block_shift : cap);
    const int lo = window > 0 ? max(0, L - Tq - window + 1) : 0;
    const int n = max(L - lo, 0);
    const int per = ((n + splits - 1) / splits + step - 1) / step * step;
    k0 = lo + min(split * per, n);
    k1 = min(k0 + per, L);
    head_off = PAGED ? ((long long)h << block_shift) * D : ((long long)b * Hkv + h) * cap * D;
    page_elems = ((long long)Hkv << block_shift) * D;
    tab = PAGED ? table + (long long)b * table_width : nullptr;
  }
  __device__ __forceinline__ long long row(int j, int page) const {
    if constexpr (PAGED) return page * page_elems + head_off + (long long)(j & ((1 << block_shift) - 1)) * D;
    else return head_off + (long long)j * D;
  }
};

// Running merge of split partials (m, l, acc[4]) in split order: fold in N
// more (rescaling what is folded so far to the larger max).
struct DecodeMerge {
  float m = decode_neg_inf(), l = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  template <int N>
  __device__ __forceinline__ void fold(const float2 (&ml)[N], const float4 (&a)[N]) {
    float mx = m;
#pragma unroll
    for (int j = 0; j < N; ++j) mx = fmaxf(mx, ml[j].x);
    const float base = mx == decode_neg_inf() ? 0.0f : mx;
    const float c = exp2f(m - base);
    l *= c, o[0] *= c, o[1] *= c, o[2] *= c, o[3] *= c;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float w = exp2f(ml[j].x - base);
      l += ml[j].y * w;
      o[0] += a[j].x * w, o[1] += a[j].y * w, o[2] += a[j].z * w, o[3] += a[j].w * w;
    }
    m = mx;
  }
};

// Where the warps of a block leave their (m, l, acc) for decode_finish, over
// the ring (once every warp is done with it): [WARPS][ROWS][D + 4]
// accumulators (rows padded: a warp's stores of its rows spread over the
// banks, where rows D floats apart all start on bank 0), then [WARPS][ROWS]
// m and l (decode.py's _smem counts D + 6 floats a warp's row).
template <int D, int ROWS, int WARPS>
struct DecodeWarpParts {
  static constexpr int SD = D + 4;
  float *acc, *m, *l;
  __device__ __forceinline__ explicit DecodeWarpParts(unsigned char* smem)
      : acc(reinterpret_cast<float*>(smem)), m(acc + WARPS * ROWS * SD), l(m + WARPS * ROWS) {}
  __device__ __forceinline__ float* row(int w, int r) const { return acc + (w * ROWS + r) * SD; }
};

// The end of both kernels: every warp's (m, l, acc) of the block's first nr
// rows (the chunk's real ones) are in shared memory (DecodeWarpParts); they
// merge, and with one split the rows are written. Split, each block writes
// its partials to `part` (L2) and the last block of the (b, h, chunk) to
// arrive (an atomic counter per group, which that block resets) reads them
// all back in one round trip, merges them in split order (deterministic) and
// writes the rows. vs: the V scale (fp8) times the conversion's left-out
// factor.
template <class T, int D, int ROWS, int WARPS>
__device__ __forceinline__ void decode_finish(T* __restrict__ out, float* __restrict__ part, int* __restrict__ counters, float vs,
                                              int Hq, int Hkv, int Tq, int chunks, int splits, int chunk, int split, int h, int b) {
  constexpr int THREADS = WARPS * 32;
  const float NEG_INF = decode_neg_inf();
  const int G = Hq / Hkv, R = G * Tq;
  const int nr = min(ROWS, R - chunk * ROWS);  // the chunk's real rows
  extern __shared__ __align__(16) unsigned char decode_smem[];
  const DecodeWarpParts<D, ROWS, WARPS> wp(decode_smem);
  const long long rows_total = (long long)gridDim.z * Tq * Hq;
  float* part_ml = part + rows_total * splits * D;  // (rows_total, splits) pairs (m, l) after the accumulators
  auto out_row = [&](int r) { const int rr = chunk * ROWS + r; return (long long)(b * Tq + rr / G) * Hq + h * G + rr % G; };
  auto store = [&](long long row, int d, const float (&o)[4], float lsum) {
    const float f = lsum > 0.0f ? vs / lsum : 0.0f;
    Vec<T, 4> y;
#pragma unroll
    for (int e = 0; e < 4; ++e) y.v[e] = T(o[e] * f);
    *reinterpret_cast<Vec<T, 4>*>(out + row * D + d) = y;
  };
  // Item i: row i / (D / 4), elements 4 * (i % (D / 4)) .. + 3.
  for (int i = threadIdx.x; i < nr * (D / 4); i += THREADS) {
    const int r = i / (D / 4), d = 4 * (i % (D / 4));
    float mx = NEG_INF;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) mx = fmaxf(mx, wp.m[w * ROWS + r]);
    const float base = mx == NEG_INF ? 0.0f : mx;
    float lsum = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float c = exp2f(wp.m[w * ROWS + r] - base);
      lsum += wp.l[w * ROWS + r] * c;
      const float4 a = *reinterpret_cast<const float4*>(wp.row(w, r) + d);
      o[0] += a.x * c, o[1] += a.y * c, o[2] += a.z * c, o[3] += a.w * c;
    }
    if (splits == 1) {
      store(out_row(r), d, o, lsum);
    } else {
      const long long row = out_row(r);
      *reinterpret_cast<float4*>(part + (row * splits + split) * D + d) = make_float4(o[0], o[1], o[2], o[3]);
      if (d == 0) *reinterpret_cast<float2*>(part_ml + (row * splits + split) * 2) = make_float2(mx, lsum);
    }
  }
  if (splits == 1) return;

  // The last block of this (b, h, chunk) to finish merges the splits: the
  // block's stores, then one release-acquire count by thread 0 (cumulative
  // over the barrier, as CUTLASS's semaphore does).
  __shared__ int s_last;
  __syncthreads();
  int* counter = counters + ((long long)b * Hkv + h) * chunks + chunk;
  if (threadIdx.x == 0) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(1) : "memory");
    s_last = old == splits - 1;
    if (s_last) *counter = 0;  // ready for the next launch on this stream
  }
  __syncthreads();
  if (!s_last) return;
  constexpr int BATCH = 16;  // splits whose partials a thread has in flight at once (__ldcg: from L2)
  for (int i = threadIdx.x; i < nr * (D / 4); i += THREADS) {
    const int r = i / (D / 4), d = 4 * (i % (D / 4));
    const long long row = out_row(r);
    const float4* pa = reinterpret_cast<const float4*>(part + row * splits * D + d);
    const float2* pm = reinterpret_cast<const float2*>(part_ml) + row * splits;
    DecodeMerge mg;
    for (int s0 = 0; s0 < splits; s0 += BATCH) {
      float2 ml[BATCH];
      float4 a[BATCH];
#pragma unroll
      for (int k = 0; k < BATCH; ++k) {
        const bool ok = s0 + k < splits;
        ml[k] = ok ? __ldcg(pm + s0 + k) : make_float2(NEG_INF, 0.0f);
        a[k] = ok ? __ldcg(pa + (long long)(s0 + k) * (D / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      mg.fold(ml, a);
    }
    store(row, d, mg.o, mg.l);
  }
}

// WARPS warps; KPL keys per group per step; STAGES steps of K / V in flight
// (or landed) in a shared-memory ring; MINB blocks per SM (the launch bounds).
// q (B, Tq, Hq, D): element strides qb, qt, qh (D contiguous), so that a view
// of a fused qkv projection is read as it is.
template <class T, class KT, int D, int ROWS, bool PAGED, int WARPS, int KPL, int STAGES, int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB)
decode_attn(const T* __restrict__ q, long long qb, long long qt, long long qh, T* __restrict__ out, const KT* __restrict__ kc, const KT* __restrict__ vc,
            const int* __restrict__ lengths, const int* __restrict__ table, const float* __restrict__ k_scale,
            const float* __restrict__ v_scale, float* __restrict__ part, int* __restrict__ counters, int Hq, int Hkv,
            int Tq, int chunks, int splits, int cap, int block_shift, int table_width, int window, float qk_scale) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  using C = Chunk8<KT>;
  using Raw = typename C::Raw;
  constexpr int THREADS = WARPS * 32;
  constexpr int LPK = decode_lanes_per_key(D), GPW = 32 / LPK, NG = WARPS * GPW, STEP = NG * KPL;
  const float NEG_INF = decode_neg_inf();
  // The ring [STAGES][KPL][K, V][THREADS] of Raw (each lane reads back only its own copies: no barrier),
  // reused by the merges at the end (the host sizes it for both).
  extern __shared__ __align__(16) unsigned char decode_smem[];
  Raw* const ring = reinterpret_cast<Raw*>(decode_smem) + threadIdx.x;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int li = lane & (LPK - 1);          // elements li * 8 .. li * 8 + 7 of a key
  const int grp = warp * GPW + lane / LPK;  // this lane's key group
  const bool lane_on = li < D / 8;
  const int chunk = blockIdx.x / splits, split = blockIdx.x % splits;
  const int h = blockIdx.y, b = blockIdx.z;
  const int G = Hq / Hkv, R = G * Tq;

  const DecodeSlice<D, PAGED> sl(lengths, table, b, h, Hkv, Tq, splits, split, STEP, cap, block_shift, table_width, window);
  const int L = sl.L, k0 = sl.k0, k1 = sl.k1;
  const int* tab = sl.tab;
  auto row_of = [&](int j, int page) { return sl.row(j, page); };

  float m[ROWS], l[ROWS], acc[ROWS][8];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    m[r] = NEG_INF;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.0f;
  }
  // Step s: keys k0 + s * STEP + i * NG + grp, i < KPL. Its K and V are
  // requested STAGES - 1 steps before it is used, so a lane keeps up to
  // (STAGES - 1) * KPL keys' bytes in flight; paged, its pages are looked up
  // a step before that (the first STAGES steps' all at once).
  const int steps = (max(k1 - k0, 0) + STEP - 1) / STEP;
  auto lookup = [&](int s, int (&page)[KPL]) {
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int j = k0 + s * STEP + i * NG + grp;
      page[i] = j < k1 ? tab[j >> block_shift] : 0;
    }
  };
  auto issue = [&](int s, const int (&page)[KPL]) {  // a commit group per step (empty past the end: the wait counts steps)
    if (s < steps) {
      Raw* st = ring + (s % STAGES) * (KPL * 2 * THREADS);
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        const int j = k0 + s * STEP + i * NG + grp;
        const bool ok = j < k1 && lane_on;  // otherwise zeros: a zero dot (masked) and a zero value
        const long long a = ok ? row_of(j, page[i]) + li * 8 : 0;
        decode_cp_async<sizeof(Raw)>(st + 2 * i * THREADS, kc + a, ok);
        decode_cp_async<sizeof(Raw)>(st + (2 * i + 1) * THREADS, vc + a, ok);
      }
    }
    decode_cp_commit();
  };
  int pages[STAGES][KPL] = {};
  if constexpr (PAGED)
#pragma unroll
    for (int s = 0; s < STAGES; ++s) lookup(s, pages[s]);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue(s, pages[s]);
  int (&next)[KPL] = pages[STAGES - 1];  // the pages of the next step to issue

  // This block's rows: query positions, and the query slices scaled by
  // softmax scale * log2(e) * the K scale (so exp2 of a dot is the weight);
  // loaded after the ring's first steps are requested, which start sooner.
  const float ks = (k_scale != nullptr ? k_scale[h] : 1.0f) * C::kFactor * qk_scale;
  int pos[ROWS];
  float qf[ROWS][8];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int rr = chunk * ROWS + r, t = rr / G;
    pos[r] = rr < R ? L - Tq + t : -1;  // -1: a padding row, no key is visible
#pragma unroll
    for (int e = 0; e < 8; ++e) qf[r][e] = 0.0f;
    if (rr < R && lane_on) {
      const Vec<T, 8> v = *reinterpret_cast<const Vec<T, 8>*>(q + b * qb + t * qt + (h * G + rr % G) * qh + li * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[r][e] = static_cast<float>(v.v[e]) * ks;
    }
  }

  for (int s = 0; s < steps; ++s) {  // uniform over the block: the shuffles below need every lane
    issue(s + STAGES - 1, next);  // into the stage step s - 1 used (this lane's reads of it are done)
    if constexpr (PAGED) lookup(s + STAGES, next);
    decode_cp_wait<STAGES - 1>();  // step s has landed
    const Raw* st = ring + (s % STAGES) * (KPL * 2 * THREADS);
    const int it = k0 + s * STEP;

    // Scores (log2 domain): the lane's 8-element dot products, summed over the group.
    float sc[ROWS][KPL];
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      float kf[8];
      C::unpack(st[2 * i * THREADS], kf);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[r][e], kf[e], d);
        sc[r][i] = d;
      }
    }
#pragma unroll
    for (int off = LPK / 2; off > 0; off >>= 1)
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int i = 0; i < KPL; ++i) sc[r][i] += __shfl_xor_sync(0xffffffffu, sc[r][i], off);

    // Masks, then the online softmax update; sc becomes the weights.
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float mx = m[r];
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        const int j = it + i * NG + grp;
        if (!(j < k1 && j <= pos[r] && (window <= 0 || j > pos[r] - window))) sc[r][i] = NEG_INF;
        mx = fmaxf(mx, sc[r][i]);
      }
      const float base = mx == NEG_INF ? 0.0f : mx;  // no visible key yet: every weight is exp2(-inf) = 0
      const float alpha = exp2f(m[r] - base);
      m[r] = mx;
      l[r] *= alpha;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= alpha;
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        sc[r][i] = exp2f(sc[r][i] - base);
        l[r] += sc[r][i];
      }
    }
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      float vf[8];
      C::unpack(st[(2 * i + 1) * THREADS], vf);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(sc[r][i], vf[e], acc[r][e]);
    }
  }

  // The groups of a warp merge (lanes with the same li hold the same elements).
#pragma unroll
  for (int off = LPK; off < 32; off <<= 1)
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[r], off);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[r], off);
      const float mx = fmaxf(m[r], mo);
      const float base = mx == NEG_INF ? 0.0f : mx;
      const float a = exp2f(m[r] - base), c = exp2f(mo - base);
      l[r] = l[r] * a + lo2 * c;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = acc[r][e] * a + __shfl_xor_sync(0xffffffffu, acc[r][e], off) * c;
      m[r] = mx;
    }

  // ... and the warps through shared memory.
  const DecodeWarpParts<D, ROWS, WARPS> wp(decode_smem);
  __syncthreads();
  if (lane < LPK) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (lane == 0) {
        wp.m[warp * ROWS + r] = m[r];
        wp.l[warp * ROWS + r] = l[r];
      }
      if (lane_on)
#pragma unroll
        for (int e = 0; e < 8; ++e) wp.row(warp, r)[li * 8 + e] = acc[r][e];
    }
  }
  __syncthreads();
  decode_finish<T, D, ROWS, WARPS>(out, part, counters, (v_scale != nullptr ? v_scale[h] : 1.0f) * C::kFactor, Hq, Hkv, Tq,
                                   chunks, splits, chunk, split, h, b);
}

// The tensor-core kernel (bf16 / fp16 / fp8 caches, D a multiple of 16 up to
// 128): the same grid, slices, merge and results as decode_attn, with the
// scores and the weighted values on mma.sync m16n8k16 (FP32 accumulation): a
// block owns 16 rows (the padding rows of a chunk are masked out), so a key
// costs a few warp instructions where decode_attn's CUDA-core dot products
// and shuffles cost 70-80, which kept it from the copy rate.
//
// Warp w takes the 16-key tiles w, w + WARPS, ... of the block's slice; a
// tile's K and V are copied with cp.async into the warp's ring of STAGES
// tiles, STAGES - 1 ahead. bf16 / fp16 tiles are read where they land (16
// rows of D, padded to D + 8 elements so that ldmatrix is free of bank
// conflicts, as in flash_attn.cu); an fp8 tile lands as it is stored (16
// rows of D bytes) and each lane turns the chunks it copied into fp16 in the
// warp's staging tile (the padded layout) before the mma reads it: the
// products run in fp16 (MT), q rounded to fp16 (bf16 to fp16 is exact within
// fp16's normal range, 2^-14 to 65504) and the K / V scales folded into the
// softmax scale and the output. Fragment layouts as in flash_attn.cu's
// header: Q (rows x D) is the A operand, kept in registers (unscaled, as
// stored); S = Q K^T takes K by ldmatrix, P (rounded to MT, as the prefill
// kernel rounds it) is the A operand of P V straight from S's accumulators, V
// comes by ldmatrix.trans. A row's scores live in the 4 lanes of a quad: its
// max and sum reduce with two xor shuffles. The warps' (m, l, O) go to
// decode_finish.
//
// PREFETCH keys (contiguous caches, SM 90; 0: none): before waiting for the
// kernel before it (a dependent launch starts early, while that kernel's
// last blocks finish), the block asks L2 for the first PREFETCH keys' K and V
// rows of its slice (one bulk prefetch each), sliced from the length as it
// reads then: a hint only, since the kernel before may still be appending (L2
// is where writes land, so a prefetched line is never stale; the loads after
// the wait use the real length). Those bytes then come from L2 instead of
// DRAM. Bounded, because whole slices of a long context (a 32k-key cache's
// 2 x 128 KB a block) outgrow L2 and evict what the kernel before is reading.
template <class T, class CT> struct DecodeMma { using type = T; };  // the mma's operand type for a cache of CT
template <class T> struct DecodeMma<T, float8_e4m3> { using type = half; };
// Two T of a q row as two MT: as they are, or bf16 to fp16 through float.
template <class MT, class T>
__device__ __forceinline__ unsigned decode_as(unsigned w) {
  if constexpr (is_same<MT, T>::value) {
    return w;
  } else {
    static_assert(is_same<T, bfloat16>::value && is_same<MT, half>::value, "q converts from bf16 to fp16 only");
    return pack2<MT>(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
  }
}

template <class T, class CT, int D, bool PAGED, int WARPS, int STAGES, int MINB, int PREFETCH>
__global__ void __launch_bounds__(WARPS * 32, MINB)
decode_attn_tc(const T* __restrict__ q, long long qb, long long qt, long long qh, T* __restrict__ out, const CT* __restrict__ kc,
               const CT* __restrict__ vc, const int* __restrict__ lengths, const int* __restrict__ table, const float* __restrict__ k_scale,
               const float* __restrict__ v_scale, float* __restrict__ part, int* __restrict__ counters, int Hq, int Hkv, int Tq, int chunks,
               int splits, int cap, int block_shift, int table_width, int window, float qk_scale) {
  static_assert(D % 16 == 0 && D <= 128, "head_dim: a multiple of 16 up to 128");
  using MT = typename DecodeMma<T, CT>::type;
  constexpr bool F8 = sizeof(CT) == 1;
  constexpr int ROWS = 16, KT = 16, STEP = WARPS * KT;  // rows a block, keys a tile, keys a block step
#if __CUDA_ARCH__ >= 900
  if constexpr (PREFETCH > 0 && !PAGED) {
    if (threadIdx.x == 0 || threadIdx.x == 32) {
      const int hint = *reinterpret_cast<const volatile int*>(lengths + blockIdx.z);  // maybe before its append
      const DecodeSlice<D, false> sl(&hint, table, 0, blockIdx.y, Hkv, Tq, splits, blockIdx.x % splits, STEP, cap, block_shift,
                                     table_width, window);
      if (sl.k1 > sl.k0) {
        const CT* src = (threadIdx.x == 0 ? kc : vc) + ((long long)blockIdx.z * Hkv * cap * D) + sl.row(sl.k0, 0);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(min(sl.k1 - sl.k0, PREFETCH) * D * (int)sizeof(CT))
                     : "memory");
      }
    }
  }
#endif
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  constexpr int SROW = D + 8, TILE = KT * SROW;  // MT elements of a padded row, of a K (or V) tile as the mma reads it
  constexpr int KD = D / 16, ND = D / 8;         // k16 slices, n8 output tiles
  constexpr int CPR = D * (int)sizeof(CT) / 16, CHUNKS = KT * CPR, CH = (CHUNKS + 31) / 32;  // 16-byte chunks a row, a tile, a lane's
  constexpr int LANDED = F8 ? KT * D : TILE * 2;  // bytes of a landed K (or V) tile: fp8 rows as stored, else the padded layout
  const float NEG_INF = decode_neg_inf();
  extern __shared__ __align__(16) unsigned char decode_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  // this warp's ring [STAGES][K, V][LANDED bytes], then (fp8) its staging [K, V][TILE] of MT
  unsigned char* const ring = decode_smem + warp * (STAGES * 2 * LANDED + (F8 ? 2 * TILE * 2 : 0));
  MT* const staging = reinterpret_cast<MT*>(ring + STAGES * 2 * LANDED);
  const int chunk = blockIdx.x / splits, split = blockIdx.x % splits;
  const int h = blockIdx.y, b = blockIdx.z;
  const int G = Hq / Hkv, R = G * Tq;
  const DecodeSlice<D, PAGED> sl(lengths, table, b, h, Hkv, Tq, splits, split, STEP, cap, block_shift, table_width, window);
  const int tiles = (max(sl.k1 - sl.k0, 0) + KT - 1) / KT;
  const int mine = tiles > warp ? (tiles - warp + WARPS - 1) / WARPS : 0;  // this warp's tiles

  // Lane chunk c = i * 32 + lane of a tile (i < CH, c < CHUNKS): key c / CPR, bytes 16 (c % CPR) ..
  // Its page (paged caches) is looked up one tile before the tile is requested.
  auto key_of = [&](int s, int i) { return sl.k0 + (s * WARPS + warp) * KT + (i * 32 + lane) / CPR; };
  auto lookup = [&](int s, int (&page)[CH]) {
#pragma unroll
    for (int i = 0; i < CH; ++i) {
      const int j = key_of(s, i);
      page[i] = PAGED && s < mine && i * 32 + lane < CHUNKS && j < sl.k1 ? sl.tab[j >> sl.block_shift] : 0;
    }
  };
  auto landed = [&](int c) { return F8 ? (c / CPR) * D + (c % CPR) * 16 : ((c / CPR) * SROW + (c % CPR) * 8) * 2; };  // its bytes' offset
  auto issue = [&](int s, const int (&page)[CH]) {  // a commit group per tile (empty past the end: the wait counts tiles)
    if (s < mine) {
      const unsigned st = smem_addr(ring + (s % STAGES) * 2 * LANDED);
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        const int c = i * 32 + lane, j = key_of(s, i);
        if (CHUNKS % 32 != 0 && c >= CHUNKS) continue;
        const bool ok = j < sl.k1;  // otherwise zeros: a masked score and a zero value
        const long long a = ok ? sl.row(j, page[i]) + (c % CPR) * (16 / (int)sizeof(CT)) : 0;
        cp_async16(st + landed(c), kc + a, ok);
        cp_async16(st + LANDED + landed(c), vc + a, ok);
      }
    }
    cp_async_commit();
  };
  int pages[STAGES][CH] = {};
  if constexpr (PAGED)
#pragma unroll
    for (int s = 0; s < STAGES; ++s) lookup(s, pages[s]);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) issue(s, pages[s]);
  int (&next)[CH] = pages[STAGES - 1];

  // Q's A fragments (rows g, g + 8 of the chunk; zeros for padding rows),
  // loaded after the ring's first tiles are requested; the rows' positions.
  unsigned qa[KD][4];
  int pos[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int rr = chunk * ROWS + g + 8 * hf, tok = rr / G;
    pos[hf] = rr < R ? sl.L - Tq + tok : -1;  // -1: no key is visible
    const T* qr = q + b * qb + tok * qt + (h * G + rr % G) * qh + 2 * t4;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      qa[kk][hf] = rr < R ? decode_as<MT, T>(*reinterpret_cast<const unsigned*>(qr + kk * 16)) : 0u;
      qa[kk][2 + hf] = rr < R ? decode_as<MT, T>(*reinterpret_cast<const unsigned*>(qr + kk * 16 + 8)) : 0u;
    }
  }
  float ks = qk_scale;  // softmax scale * log2(e), times an fp8 cache's K scale
  if constexpr (F8) ks *= k_scale[h] * kE4m3Factor;

  float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f}, o[ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nd][e] = 0.0f;
  // ldmatrix row addresses of this lane in a K tile and a V tile (flash_attn.cu's header)
  const unsigned k_lane = (((lane & 7) + 8 * (lane >> 4)) * SROW + 8 * ((lane >> 3) & 1)) * 2;
  const unsigned v_lane = (((lane & 7) + 8 * ((lane >> 3) & 1)) * SROW + 8 * (lane >> 4)) * 2;

  for (int s = 0; s < mine; ++s) {
    __syncwarp();  // every lane's ldmatrix of the stage refilled below (tile s - 1's) is done
    issue(s + STAGES - 1, next);
    if constexpr (PAGED) lookup(s + STAGES, next);
    cp_async_wait<STAGES - 1>();  // this lane's copies of tile s have landed ...
    __syncwarp();                 // ... and every lane's
    unsigned st = smem_addr(ring + (s % STAGES) * 2 * LANDED);  // the tile's K, its V at + TILE * 2, as the mma reads them
    if constexpr (F8) {  // this lane's chunks of the landed fp8 tile into the staging tile, as fp16
      const unsigned char* landed_tile = ring + (s % STAGES) * 2 * LANDED;
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        const int c = i * 32 + lane;
        if (CHUNKS % 32 != 0 && c >= CHUNKS) continue;
#pragma unroll
        for (int op = 0; op < 2; ++op) {  // K, V
          const uint4 raw = *reinterpret_cast<const uint4*>(landed_tile + op * LANDED + landed(c));
          const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
          unsigned hv[8];
#pragma unroll
          for (int k = 0; k < 4; ++k) hv[2 * k] = e4m3x2_half2(w[k]), hv[2 * k + 1] = e4m3x2_half2(w[k] >> 16);
          uint4* dst = reinterpret_cast<uint4*>(staging + op * TILE + (c / CPR) * SROW + (c % CPR) * 16);
          dst[0] = make_uint4(hv[0], hv[1], hv[2], hv[3]);
          dst[1] = make_uint4(hv[4], hv[5], hv[6], hv[7]);
        }
      }
      __syncwarp();  // every lane's chunks are staged
      st = smem_addr(staging);
    }
    const int kb = sl.k0 + (s * WARPS + warp) * KT;

    float sc[2][4] = {};  // S of keys kb + 8 nt + (2 t4, 2 t4 + 1), rows g (0, 1) and g + 8 (2, 3)
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      unsigned kf[4];
      ldmatrix_x4(kf, st + k_lane + kk * 32);
      mma16816<MT>(sc[0], qa[kk], kf[0], kf[1]);
      mma16816<MT>(sc[1], qa[kk], kf[2], kf[3]);
    }
    // Masks and the online softmax of rows g (hf 0) and g + 8 (hf 1); sc becomes P.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = m[hf];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = kb + 8 * nt + 2 * t4 + e;
          float& x = sc[nt][2 * hf + e];
          x = j < sl.k1 && j <= pos[hf] && (window <= 0 || j > pos[hf] - window) ? x * ks : NEG_INF;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base = mx == NEG_INF ? 0.0f : mx;  // no visible key yet: every weight is exp2(-inf) = 0
      const float alpha = exp2_approx(m[hf] - base);
      m[hf] = mx;
      l[hf] *= alpha;
#pragma unroll
      for (int nd = 0; nd < ND; ++nd) o[nd][2 * hf] *= alpha, o[nd][2 * hf + 1] *= alpha;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = sc[nt][2 * hf + e];
          x = exp2_approx(x - base);
          l[hf] += x;
        }
    }
    const unsigned pa[4] = {pack2<MT>(sc[0][0], sc[0][1]), pack2<MT>(sc[0][2], sc[0][3]), pack2<MT>(sc[1][0], sc[1][1]),
                            pack2<MT>(sc[1][2], sc[1][3])};
#pragma unroll
    for (int dp = 0; dp < KD; ++dp) {
      unsigned vf[4];
      ldmatrix_x4_trans(vf, st + TILE * 2 + v_lane + dp * 32);
      mma16816<MT>(o[2 * dp], pa, vf[0], vf[1]);
      mma16816<MT>(o[2 * dp + 1], pa, vf[2], vf[3]);
    }
  }
  cp_async_wait<0>();

  // The quad's partial row sums, then this warp's real rows into shared memory for decode_finish.
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
    l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
  }
  const DecodeWarpParts<D, ROWS, WARPS> wp(decode_smem);
  __syncthreads();
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = g + 8 * hf;
    if (chunk * ROWS + r >= R) continue;  // a padding row: decode_finish reads only the real ones
    if (t4 == 0) {
      wp.m[warp * ROWS + r] = m[hf];
      wp.l[warp * ROWS + r] = l[hf];
    }
#pragma unroll
    for (int nd = 0; nd < ND; ++nd)
      *reinterpret_cast<float2*>(wp.row(warp, r) + nd * 8 + 2 * t4) = make_float2(o[nd][2 * hf], o[nd][2 * hf + 1]);
  }
  __syncthreads();
  const float vs = F8 ? v_scale[h] * kE4m3Factor : 1.0f;  // an fp8 cache's V scale
  decode_finish<T, D, ROWS, WARPS>(out, part, counters, vs, Hq, Hkv, Tq, chunks, splits, chunk, split, h, b);
}

}  // namespace pgk
