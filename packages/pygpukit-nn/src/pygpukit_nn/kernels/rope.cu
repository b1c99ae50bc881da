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
// A thread takes an item: PAIRS pairs of one head of one token (VEC
// consecutive elements per access, 16 bytes when alignment allows);
// blockDim.x threads share a token's (Hq + Hk) * half / PAIRS items,
// blockDim.y tokens share a block. A token's position is read once; its cos
// and sin are re-read by every head, from L1. A position outside
// [0, max_pos) leaves the token's q and k as they are (never read out of
// bounds).
#include "pgk/types.cuh"

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

template <class T, int VEC, bool GPTJ>
__global__ void __launch_bounds__(512) rope_inplace(T* __restrict__ q, T* __restrict__ k, const float* __restrict__ cs,
                                                    const void* __restrict__ pos, long long qb, long long qs, long long qh,
                                                    long long kb, long long ks, long long kh, long long pb, long long ps,
                                                    int pos64, int seq, int tokens, int hq, int hk, int half, int max_pos) {
  static_assert(!GPTJ || VEC % 2 == 0, "an interleaved pair must lie in one access");
  using V = Vec<T, VEC>;
  constexpr int PAIRS = GPTJ ? VEC / 2 : VEC;
  const int t = blockIdx.x * blockDim.y + threadIdx.y;
  if (t >= tokens) return;  // no barrier below: whole rows of threads may leave
  const int b = t / seq, s = t - b * seq;
  const long long pi = b * pb + s * ps;
  const long long p = pos64 ? static_cast<const long long*>(pos)[pi] : static_cast<long long>(static_cast<const int*>(pos)[pi]);
  if (p < 0 || p >= max_pos) return;
  const float* crow = cs + p * 2 * half;
  const int chunks = half / PAIRS;
  const int items = (hq + hk) * chunks;
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int h = i / chunks, c = i - h * chunks;
    T* row = h < hq ? q + b * qb + s * qs + h * qh : k + b * kb + s * ks + (h - hq) * kh;
    const int j0 = c * PAIRS;
    float cv[PAIRS], sv[PAIRS];
    load_floats<PAIRS>(crow + j0, cv);
    load_floats<PAIRS>(crow + half + j0, sv);
    if constexpr (GPTJ) {
      V* at = reinterpret_cast<V*>(row + 2 * j0);
      V a = *at;
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        const float x1 = (float)a.v[2 * j], x2 = (float)a.v[2 * j + 1];
        a.v[2 * j] = T(x1 * cv[j] - x2 * sv[j]);
        a.v[2 * j + 1] = T(x2 * cv[j] + x1 * sv[j]);
      }
      *at = a;
    } else {
      V* lo = reinterpret_cast<V*>(row + j0);
      V* hi = reinterpret_cast<V*>(row + half + j0);
      V a = *lo, e = *hi;
#pragma unroll
      for (int j = 0; j < PAIRS; ++j) {
        const float x1 = (float)a.v[j], x2 = (float)e.v[j];
        a.v[j] = T(x1 * cv[j] - x2 * sv[j]);
        e.v[j] = T(x2 * cv[j] + x1 * sv[j]);
      }
      *lo = a;
      *hi = e;
    }
  }
}

}  // namespace pgk
