// Rotary position embedding applied in place to q and k (positional.py), one
// launch for both.
//
// Layouts: q is (B, S, Hq, D) and k (B, S, Hk, D) (B = 1 for (T, H, D)), each
// with its own element strides per batch, token and head and unit stride
// along D; so q and k may be views of a fused qkv projection. Only the first
// rotary dims (2 * half) of a head are read and written. cs is the float32
// cache (max_pos, 2, half): row p holds cos(p * inv_freq) then sin(...).
// Pair j (j < half) rotates by angle j:
//   NeoX (half-split):    (x[j], x[j + half])
//   GPT-J (interleaved):  (x[2j], x[2j + 1])
// as (a, b) -> (a cos - b sin, b cos + a sin), in float32, rounded once.
//
// A thread takes ITEMS items, blockDim.x apart; an item is PAIRS pairs of
// one head of one token (VEC consecutive elements per access, 16 bytes when
// alignment allows). blockDim.x threads share a token's (Hq + Hk) * half /
// PAIRS items, blockDim.y tokens share a block. The q/k loads do not wait
// for the token's position (they were issued after it: an L2 round trip
// added to every item's DRAM latency); the position picks the cos/sin row
// (re-read by every head, from L1) and gates the stores: a position outside
// [0, max_pos) leaves the token's q and k as they are (never read out of
// bounds).
#include "pgk/types.cuh"
#include "pgk/pdl.cuh"

namespace pgk {

// N floats from p (16-byte pieces where N allows; p is aligned to the piece).
template <int N>
__device__ __forceinline__ void load_floats(const float* __restrict__ p, float (&out)[N]) {
  constexpr int P = N % 4 == 0 ? 4 : N;
#pragma unroll
  for (int i = 0; i < N; i += P) {
    const Vec<float, P> v = *reinterpret_cast<const Vec<float, P>*>(p + i);
#pragma unroll
    for (int j = 0; j < P; ++j) out[i + j] = v.v[j];
  }
}

template <class T, int VEC, bool GPTJ, int ITEMS>
__global__ void __launch_bounds__(512) rope_inplace(T* __restrict__ q, T* __restrict__ k, const float* __restrict__ cs,
                                                    const void* __restrict__ pos, long long qb, long long qs, long long qh,
                                                    long long kb, long long ks, long long kh, long long pb, long long ps,
                                                    int pos64, int seq, int tokens, int hq, int hk, int half, int max_pos) {
  static_assert(!GPTJ || VEC % 2 == 0, "an interleaved pair must lie in one access");
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  using V = Vec<T, VEC>;
  constexpr int PAIRS = GPTJ ? VEC / 2 : VEC;
  const int t = blockIdx.x * blockDim.y + threadIdx.y;
  if (t >= tokens) return;  // no barrier below: whole rows of threads may leave
  const int b = t / seq, s = t - b * seq;
  const long long pi = b * pb + s * ps;
  const long long p = pos64 ? static_cast<const long long*>(pos)[pi] : static_cast<long long>(static_cast<const int*>(pos)[pi]);
  const int chunks = half / PAIRS;
  const int items = (hq + hk) * chunks;
  T* const qt = q + b * qb + s * qs;
  T* const kt = k + b * kb + s * ks;
  for (int i0 = threadIdx.x; i0 < items; i0 += ITEMS * blockDim.x) {
    // lo: the item's first VEC elements (GPT-J: its pairs), hi: the NeoX partners half further on
    V* lo[ITEMS];
    V a[ITEMS], e[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int i = i0 + it * blockDim.x;
      if (i < items) {
        const int h = i / chunks, j0 = (i - h * chunks) * PAIRS;
        T* row = h < hq ? qt + h * qh : kt + (h - hq) * kh;
        lo[it] = reinterpret_cast<V*>(row + (GPTJ ? 2 * j0 : j0));
        a[it] = *lo[it];
        opaque(a[it]);
        if constexpr (!GPTJ) {
          e[it] = lo[it][half / VEC];
          opaque(e[it]);
        }
      }
    }
    if (p < 0 || p >= max_pos) return;
    const float* crow = cs + p * 2 * half;
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
      const int i = i0 + it * blockDim.x;
      if (i >= items) continue;
      const int j0 = (i % chunks) * PAIRS;
      float cv[PAIRS], sv[PAIRS];
      load_floats<PAIRS>(crow + j0, cv);
      load_floats<PAIRS>(crow + half + j0, sv);
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        const float x1 = GPTJ ? (float)a[it].v[2 * j] : (float)a[it].v[j];
        const float x2 = GPTJ ? (float)a[it].v[2 * j + 1] : (float)e[it].v[j];
        const T r1 = T(x1 * cv[j] - x2 * sv[j]), r2 = T(x2 * cv[j] + x1 * sv[j]);
        if constexpr (GPTJ) {
          a[it].v[2 * j] = r1;
          a[it].v[2 * j + 1] = r2;
        } else {
          a[it].v[j] = r1;
          e[it].v[j] = r2;
        }
      }
      *lo[it] = a[it];
      if constexpr (!GPTJ) lo[it][half / VEC] = e[it];
    }
  }
}

}  // namespace pgk
