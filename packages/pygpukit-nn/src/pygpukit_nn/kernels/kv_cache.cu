// KV cache kernels of pygpukit-nn (kv_cache.py): append new tokens at each
// sequence's length, advance the lengths, and gather a cache into contiguous
// (B, Hkv, S, D) arrays.
//
// Layouts (one layer): contiguous K and V (B, Hkv, cap, D); paged, a pool of
// blocks (num_blocks, Hkv, BS, D) with BS = 1 << block_shift and a block table
// (B, table_width) of int32 block ids, token j of sequence b at block
// table[b][j >> block_shift], row j & (BS - 1). lengths (B,) int32 live on the
// device; the host keeps a mirror and checks capacity before launching, and
// the kernels still drop any position past the capacity, so a bad length
// cannot write out of bounds.
//
// Work items are 8 consecutive elements of one (token, head) row: 16-byte
// loads of bf16 / fp16 new tokens (two of float32), 16-byte stores of
// bf16 / fp16 rows and 8-byte ones of fp8. An fp8 cache stores
// e4m3(clamp(x / scale[h], -448, 448)): saturating, so no NaN is ever stored,
// with the rounding of pgk::float8_e4m3 (ml_dtypes'), as astype on the host.
#include "pgk/types.cuh"
#include "pgk/pdl.cuh"

namespace pgk {

// Element offset of token j's row of head hh in sequence b, or -1 past the capacity.
template <bool PAGED>
__device__ __forceinline__ long long kv_row(const int* __restrict__ table, int b, int hh, int j, int Hkv, int D, int cap,
                                            int block_shift, int table_width) {
  if (j < 0) return -1;
  if constexpr (PAGED) {
    if ((j >> block_shift) >= table_width) return -1;
    const long long page = table[(long long)b * table_width + (j >> block_shift)];
    return (((page * Hkv + hh) << block_shift) + (j & ((1 << block_shift) - 1))) * D;
  } else {
    if (j >= cap) return -1;
    return (((long long)b * Hkv + hh) * cap + j) * D;
  }
}

template <class TI>
__device__ __forceinline__ void load8(const TI* __restrict__ p, float (&f)[8]) {
  if constexpr (sizeof(TI) == 4) {
    const Vec<TI, 4> a = reinterpret_cast<const Vec<TI, 4>*>(p)[0], c = reinterpret_cast<const Vec<TI, 4>*>(p)[1];
#pragma unroll
    for (int e = 0; e < 4; ++e) f[e] = static_cast<float>(a.v[e]), f[4 + e] = static_cast<float>(c.v[e]);
  } else {
    const Vec<TI, 8> a = *reinterpret_cast<const Vec<TI, 8>*>(p);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = static_cast<float>(a.v[e]);
  }
}

template <class KT>
__device__ __forceinline__ void store8(KT* __restrict__ p, const float (&f)[8], float scale) {
  Vec<KT, 8> o;
  if constexpr (is_same<KT, float8_e4m3>::value) {
#pragma unroll
    for (int e = 0; e < 8; ++e) o.v[e] = KT(fminf(fmaxf(f[e] / scale, -448.0f), 448.0f));
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) o.v[e] = KT(f[e]);
  }
  if constexpr (sizeof(KT) == 4) {  // 32 bytes: two 16-byte stores
    reinterpret_cast<Vec<KT, 4>*>(p)[0] = *reinterpret_cast<const Vec<KT, 4>*>(&o.v[0]);
    reinterpret_cast<Vec<KT, 4>*>(p)[1] = *reinterpret_cast<const Vec<KT, 4>*>(&o.v[4]);
  } else {
    *reinterpret_cast<Vec<KT, 8>*>(p) = o;
  }
}

// Grid (tiles, B). Sequence b's first counts[b] (or T) tokens of k, v
// (B, T, Hkv, D; element strides kb, kt, kh and vb, vt, vh, D contiguous) go
// to positions lengths[b] + t. With ADVANCE (one tile per sequence) the block
// then sets lengths[b] += count itself: it alone reads that length.
template <class TI, class KT, bool PAGED, bool ADVANCE>
__global__ void __launch_bounds__(256)
kv_append(const TI* __restrict__ k, const TI* __restrict__ v, long long kb, long long kt, long long kh, long long vb, long long vt,
          long long vh, KT* __restrict__ kc, KT* __restrict__ vc, int* lengths, const int* __restrict__ counts,
          const int* __restrict__ table, const float* __restrict__ k_scale, const float* __restrict__ v_scale, int T, int Hkv, int D,
          int cap, int block_shift, int table_width) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  const int b = blockIdx.y;
  const int start = lengths[b];
  const int count = counts != nullptr ? max(0, min(counts[b], T)) : T;
  const int nvec = D / 8;
  const long long items = (long long)count * Hkv * nvec;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += (long long)gridDim.x * blockDim.x) {
    const int e = (int)(i % nvec) * 8, hh = (int)(i / nvec % Hkv), t = (int)(i / ((long long)nvec * Hkv));
    const long long dst = kv_row<PAGED>(table, b, hh, start + t, Hkv, D, cap, block_shift, table_width);
    if (dst < 0) continue;
    float f[8];
    load8(k + b * kb + t * kt + hh * kh + e, f);
    store8(kc + dst + e, f, k_scale != nullptr ? k_scale[hh] : 1.0f);
    load8(v + b * vb + t * vt + hh * vh + e, f);
    store8(vc + dst + e, f, v_scale != nullptr ? v_scale[hh] : 1.0f);
  }
  if constexpr (ADVANCE) {
    __syncthreads();  // every thread has read lengths[b]
    if (threadIdx.x == 0) lengths[b] = start + count;
  }
}

// kv_append with RoPE for decode, one block per sequence (grid (1, B)): q
// (B, T, Hq, D) is rotated in place, and k rotated on its way into the cache
// (k itself is left as it is), v copied; then lengths[b] += count. The rotary
// dims are the first 2 * half of a head (half a multiple of 8); cs holds row p
// = cos(p * inv_freq) then sin(...), float32 (rope.cu's cache). NeoX pairs
// (x[j], x[j + half]), GPT-J (x[2j], x[2j + 1]); (a, b) -> (a cos - b sin,
// b cos + a sin) in float32, rounded once. A position outside [0, max_pos)
// leaves q as it is and appends k unrotated (as rope.cu then append would).
// Items: a q item is 8 pairs of one head (both halves for NeoX: the thread
// that reads a pair writes it); a k or v item is 8 elements of one head.
template <class TI, bool PAGED, bool GPTJ>
__global__ void __launch_bounds__(256)
kv_append_rope(TI* __restrict__ q, const TI* __restrict__ k, const TI* __restrict__ v, long long qb, long long qt, long long qh,
               long long kb, long long kt, long long kh, long long vb, long long vt, long long vh, const float* __restrict__ cs,
               const void* __restrict__ pos, long long pb, long long ps, int pos64, int half, int max_pos, TI* __restrict__ kc,
               TI* __restrict__ vc, int* lengths, const int* __restrict__ counts, const int* __restrict__ table, int T, int Hq,
               int Hkv, int D, int cap, int block_shift, int table_width) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  const int b = blockIdx.y;
  const int start = lengths[b];
  const int count = counts != nullptr ? max(0, min(counts[b], T)) : T;
  const int nvec = D / 8, qchunks = (GPTJ ? 2 * half : half) / 8;
  const int q_items = T * Hq * qchunks, kv_items = count * Hkv * nvec;
  for (int i = threadIdx.x; i < q_items + 2 * kv_items; i += blockDim.x) {
    const bool is_q = i < q_items, is_v = i >= q_items + kv_items;
    const int r = is_q ? i : (i - q_items) % kv_items;
    const int chunks = is_q ? qchunks : nvec;
    const int c = r % chunks, hh = r / chunks % (is_q ? Hq : Hkv), t = r / (chunks * (is_q ? Hq : Hkv));
    const long long pi = b * pb + t * ps;
    const long long p = pos64 ? static_cast<const long long*>(pos)[pi] : static_cast<long long>(static_cast<const int*>(pos)[pi]);
    const bool rot = p >= 0 && p < max_pos && !is_v && (is_q || c * 8 < 2 * half);
    const float* crow = cs + p * 2 * half;
    if (is_q) {
      if (!rot) continue;
      TI* row = q + b * qb + t * qt + hh * qh;
      const int j0 = GPTJ ? c * 4 : c * 8;  // the chunk's first pair
      float a[8], e[8], cv[8], sv[8];
      load8(row + (GPTJ ? 2 * j0 : j0), a);
      if constexpr (!GPTJ) load8(row + j0 + half, e);
#pragma unroll
      for (int j = 0; j < (GPTJ ? 4 : 8); ++j) cv[j] = crow[j0 + j], sv[j] = crow[half + j0 + j];
#pragma unroll
      for (int j = 0; j < (GPTJ ? 4 : 8); ++j) {
        const float x1 = GPTJ ? a[2 * j] : a[j], x2 = GPTJ ? a[2 * j + 1] : e[j];
        const float r1 = x1 * cv[j] - x2 * sv[j], r2 = x2 * cv[j] + x1 * sv[j];
        if constexpr (GPTJ) {
          a[2 * j] = r1, a[2 * j + 1] = r2;
        } else {
          a[j] = r1, e[j] = r2;
        }
      }
      store8(row + (GPTJ ? 2 * j0 : j0), a, 1.0f);
      if constexpr (!GPTJ) store8(row + j0 + half, e, 1.0f);
      continue;
    }
    const long long dst = kv_row<PAGED>(table, b, hh, start + t, Hkv, D, cap, block_shift, table_width);
    if (dst < 0) continue;
    const TI* row = is_v ? v + b * vb + t * vt + hh * vh : k + b * kb + t * kt + hh * kh;
    float f[8];
    load8(row + c * 8, f);
    if (rot) {  // a k chunk of the rotary dims
      float o[8];
      if constexpr (GPTJ) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float cj = crow[c * 4 + j], sj = crow[half + c * 4 + j];
          o[2 * j] = f[2 * j] * cj - f[2 * j + 1] * sj, o[2 * j + 1] = f[2 * j + 1] * cj + f[2 * j] * sj;
        }
      } else {
        const bool lo = c * 8 < half;
        const int j0 = lo ? c * 8 : c * 8 - half;
        float g[8];
        load8(row + (lo ? c * 8 + half : j0), g);  // the partners
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float cj = crow[j0 + j], sj = crow[half + j0 + j];
          o[j] = lo ? f[j] * cj - g[j] * sj : f[j] * cj + g[j] * sj;
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = static_cast<float>(TI(o[j]));  // rounded once, as rope then append
    }
    store8((is_v ? vc : kc) + dst + c * 8, f, 1.0f);
  }
  __syncthreads();  // every thread has read lengths[b]
  if (threadIdx.x == 0) lengths[b] = start + count;
}

// lengths[b] += counts[b] (or T), after a kv_append of several tiles per sequence.
__global__ void kv_advance(int* lengths, const int* __restrict__ counts, int T, int B) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < B) lengths[b] += counts != nullptr ? max(0, min(counts[b], T)) : T;
}

// Grid-stride over the (B, Hkv, S, D / 8) items of the outputs ko, vo
// (B, Hkv, S, D): the cache's rows below each length (dequantized: times
// scale[h] for fp8), zeros past it.
template <class KT, class TO, bool PAGED>
__global__ void __launch_bounds__(256)
kv_gather(const KT* __restrict__ kc, const KT* __restrict__ vc, TO* __restrict__ ko, TO* __restrict__ vo,
          const int* __restrict__ lengths, const int* __restrict__ table, const float* __restrict__ k_scale,
          const float* __restrict__ v_scale, int B, int Hkv, int D, int S, int cap, int block_shift, int table_width) {
  const int nvec = D / 8;
  const long long items = (long long)B * Hkv * S * nvec;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += (long long)gridDim.x * blockDim.x) {
    const int e = (int)(i % nvec) * 8;
    const long long row = i / nvec;  // (b, hh, j)
    const int j = (int)(row % S), hh = (int)(row / S % Hkv), b = (int)(row / ((long long)S * Hkv));
    const long long src = j < lengths[b] ? kv_row<PAGED>(table, b, hh, j, Hkv, D, cap, block_shift, table_width) : -1;
    float fk[8], fv[8];
    if (src >= 0) {
      const Vec<KT, 8> a = *reinterpret_cast<const Vec<KT, 8>*>(kc + src + e);
      const Vec<KT, 8> c = *reinterpret_cast<const Vec<KT, 8>*>(vc + src + e);
      const float sk = k_scale != nullptr ? k_scale[hh] : 1.0f, sv = v_scale != nullptr ? v_scale[hh] : 1.0f;
#pragma unroll
      for (int x = 0; x < 8; ++x) fk[x] = static_cast<float>(a.v[x]) * sk, fv[x] = static_cast<float>(c.v[x]) * sv;
    } else {
#pragma unroll
      for (int x = 0; x < 8; ++x) fk[x] = fv[x] = 0.0f;
    }
    Vec<TO, 8> ok, ov;
#pragma unroll
    for (int x = 0; x < 8; ++x) ok.v[x] = TO(fk[x]), ov.v[x] = TO(fv[x]);
    *reinterpret_cast<Vec<TO, 8>*>(ko + row * D + e) = ok;
    *reinterpret_cast<Vec<TO, 8>*>(vo + row * D + e) = ov;
  }
}

}  // namespace pgk
