// Token sampling of pygpukit-nn (sampling.py): one kernel draws one token per
// row of logits (B, V) under temperature, top-k, top-p and min-p, without
// sorting the vocabulary; a second applies repetition / presence / frequency
// penalties; a third counts previous token ids per row (the penalties' input).
//
// sample_rows: bpr blocks share a row (chunks of chunk_q quads of 4 logits;
// the host keeps B * bpr <= the SM count when bpr > 1, so that the blocks of
// a row are resident together) and meet at a software barrier after each
// pass; each pass ends with every block merging the row's partial results in
// the same fixed order, so all of them take the same decisions. The passes:
//   A  row max m and its lowest index (greedy rows stop here);
//   K  top-k (0 < k < V): an exact radix select of the k-th largest logit on
//      monotone integer keys of the stored width (32 bits fp32, 16 bits
//      bf16 / fp16), 8 bits per pass; ties with it are kept;
//   R  rejection sampling for top-p (FlashInfer's idea): round 0 draws a
//      candidate from the filtered distribution (K, and min-p, which is a
//      per-token test w >= min_p once m is known, w = exp((x - m) / T)) and
//      sums Z, the mass of K; round r >= 1 sums S, the mass above the
//      candidate, and draws the next candidate speculatively from the tokens
//      above it. The candidate is in the nucleus iff S < top_p * Z; if it is
//      not, no token at or below it is, so the next draw (from above it) is
//      still from a superset of the nucleus: the accepted token follows the
//      filtered, renormalized distribution exactly. A rejection happens with
//      probability <= 1 - top_p and the mass left above the candidate shrinks
//      geometrically, so a few rounds are typical; after kSampleMaxRounds the
//      most likely token is returned.
// A draw is an exponential race: token i wins with key w_i / E_i, E_i =
// -log(1 - u_i), u_i from Philox4x32-10 keyed by the host's 64-bit key at
// counter (i / 4, row, offset, round), word i % 4. The winner is the argmax
// (lowest index on a tie), which no reduction order changes; the masses are
// summed in 2^-38 fixed point (integer sums are associative; a row of fewer
// than 2^26 logits cannot overflow 64 bits): tokens depend on the logits,
// parameters, key, offset and row only, not on the launch.
//
// Passes re-read the row: the first from HBM, the rest from L1 / L2 (a
// block's chunk is ~38 KB for V = 152064, B = 8 on 132 SMs). Logits that
// are NaN or +inf are treated as -inf; -0.0 as +0.0; a row with no finite
// logit gives -1.
#include "pgk/types.cuh"

namespace pgk {

constexpr int kSampleThreads = 512;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kSampleBatch = 4;       // quads a thread loads before using any (loads in flight)
constexpr int kSampleMaxRounds = 128; // fits the round's 8 bits of the Philox counter
constexpr int kNoIndex = 0x7fffffff;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float sample_inf() { return __int_as_float(0x7f800000); }

// NaN and +inf become -inf, -0.0 becomes +0.0: every value left has one key.
__device__ __forceinline__ float sample_clean(float x) {
  return x < sample_inf() ? (x == 0.0f ? 0.0f : x) : -sample_inf();
}

// Philox4x32-10 (Salmon et al., SC11), as pygpukit.random: the key's words are
// bumped by the Weyl constants after each round.
__device__ __forceinline__ void sample_philox(unsigned (&c)[4], unsigned k0, unsigned k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
    const unsigned hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
    c[0] = hi1 ^ c[1] ^ k0;
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k1;
    c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// Monotone unsigned keys of the stored values (cleaned): a < b iff key(a) < key(b).
__device__ __forceinline__ unsigned sample_flip32(unsigned u) { return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }

template <class T> struct SampleKey;
template <> struct SampleKey<float> {
  static constexpr int kBits = 32;
  __device__ __forceinline__ static unsigned of(float x) { return sample_flip32(__float_as_uint(x)); }
};
template <> struct SampleKey<bfloat16> {  // a bf16 value is the top half of its float
  static constexpr int kBits = 16;
  __device__ __forceinline__ static unsigned of(float x) { return sample_flip32(__float_as_uint(x)) >> 16; }
};
template <> struct SampleKey<half> {
  static constexpr int kBits = 16;
  __device__ __forceinline__ static unsigned of(float x) {
    const unsigned h = half(x).bits;  // exact: x came from a half
    return (h & 0x8000u) ? (~h & 0xffffu) : (h | 0x8000u);
  }
};

// Quad q (elements 4q .. 4q + nv - 1) of a row as cleaned floats; the rest -inf.
template <class T, bool ALIGNED>
__device__ __forceinline__ void sample_load(const T* row, int q, int nv, float (&x)[4]) {
  if (ALIGNED && nv == 4) {
    const Vec<T, 4> v = reinterpret_cast<const Vec<T, 4>*>(row)[q];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = (float)v.v[j];
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = j < nv ? (float)row[4 * q + j] : -sample_inf();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = sample_clean(x[j]);
}

// A candidate: key s (a logit in pass A, a race key in the rounds), index, logit.
struct SampleBest {
  float s;
  int i;
  float x;
};

// One block's result of one pass, read by the other blocks of its row.
struct SamplePart {
  float s;
  int i;
  float x;
  unsigned pad;
  unsigned long long sum;
};

__device__ __forceinline__ bool sample_better(float s, int i, float s2, int i2) { return s > s2 || (s == s2 && i < i2); }

// Butterflies: every lane ends with the same result, whatever the lanes' order.
__device__ __forceinline__ void sample_warp_best(SampleBest& b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float s = __shfl_xor_sync(kFullMask, b.s, o);
    const int i = __shfl_xor_sync(kFullMask, b.i, o);
    const float x = __shfl_xor_sync(kFullMask, b.x, o);
    if (sample_better(s, i, b.s, b.i)) b = SampleBest{s, i, x};
  }
}

__device__ __forceinline__ unsigned long long sample_warp_sum(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

struct SampleShared {
  unsigned hist[256];
  SampleBest wbest[kSampleWarps];
  unsigned long long wsum[kSampleWarps];
  SampleBest best;  // the row's merged results of the last pass
  unsigned long long sum;
  unsigned bin, above;
};

// body(q, nv, x) for each quad of a block's chunk [q0, q1): kSampleBatch quads
// per thread are loaded before any is used, and a thread meets its elements in
// increasing index order. (A function template, not a generic lambda: NVRTC
// 13.0 takes a generic lambda's call operator for a host function.)
template <class T, bool ALIGNED, class Body>
__device__ __forceinline__ void sample_sweep(const T* xrow, int q0, int q1, int V, int iters, int tid, const Body& body) {
  for (int it = 0; it < iters; it += kSampleBatch) {
    float xs[kSampleBatch][4];
    int nvs[kSampleBatch];
#pragma unroll
    for (int u = 0; u < kSampleBatch; ++u) {
      const int q = q0 + (it + u) * kSampleThreads + tid;
      nvs[u] = q < q1 ? min(4, V - 4 * q) : 0;
      sample_load<T, ALIGNED>(xrow, q, nvs[u], xs[u]);
    }
#pragma unroll
    for (int u = 0; u < kSampleBatch; ++u) body(q0 + (it + u) * kSampleThreads + tid, nvs[u], xs[u]);
  }
}

template <class T, bool ALIGNED>
__global__ void __launch_bounds__(kSampleThreads)
    sample_rows(const T* __restrict__ logits, long long stride, int V, int bpr, int chunk_q, const float* __restrict__ temps,
                float temp_s, const int* __restrict__ topks, int topk_s, const float* __restrict__ topps, float topp_s,
                const float* __restrict__ minps, float minp_s, unsigned key0, unsigned key1, unsigned off_lo, unsigned off_hi,
                unsigned* sync, unsigned* ghist, SamplePart* parts, int* out) {
  constexpr int KB = SampleKey<T>::kBits;
  constexpr int ND = KB / 8;
  __shared__ SampleShared sh;
  const int row = blockIdx.x / bpr, part = blockIdx.x - row * bpr;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* xrow = logits + (long long)row * stride;
  const int nq = (V + 3) >> 2;
  const int q0 = min(nq, part * chunk_q), q1 = min(nq, q0 + chunk_q);
  const int iters = (q1 - q0 + kSampleThreads - 1) / kSampleThreads;

  // Per-row parameters, clamped (the host checks scalars; arrays are used as given).
  const float temp = temps ? temps[row] : temp_s;
  const int k = topks ? topks[row] : topk_s;
  const float p_in = topps ? topps[row] : topp_s;
  const float mp_in = minps ? minps[row] : minp_s;
  const bool greedy = !(temp > 0.0f);  // 0, negative or NaN
  const bool topk_on = k > 0 && k < V;
  const bool topp_on = !(p_in >= 1.0f);
  const float p = p_in > 0.0f ? p_in : 0.0f;  // <= 0 or NaN: the top token(s) only
  const float mp = mp_in > 0.0f ? fminf(mp_in, 1.0f) : 0.0f;

  unsigned nsync = 0;
  int step = 0;
  // All blocks of the row: every thread's writes before it are visible to every
  // block of the row after it (the pattern of cooperative groups' grid sync).
  auto group_sync = [&]() {
    __syncthreads();
    if (bpr > 1) {
      ++nsync;
      if (tid == 0) {
        unsigned* counter = sync + row;
        __threadfence();
        atomicAdd(counter, 1u);
        const unsigned target = nsync * (unsigned)bpr;
        while (true) {
          unsigned seen;
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
          if (seen >= target) break;
          __nanosleep(64);
        }
        __threadfence();
      }
      __syncthreads();
    }
  };
  // Reduce (b, sum) over the block, then over the row's blocks: every block
  // gets the same sh.best and sh.sum. Parts are double-buffered by pass parity:
  // a block cannot write a slot again before all have read it (a barrier lies between).
  auto merge = [&](SampleBest b, unsigned long long sum) {
    sample_warp_best(b);
    sum = sample_warp_sum(sum);
    if (lane == 0) {
      sh.wbest[warp] = b;
      sh.wsum[warp] = sum;
    }
    __syncthreads();
    SamplePart* slots = parts + ((long long)row * 2 + (step & 1)) * bpr;
    if (warp == 0) {
      SampleBest c = lane < kSampleWarps ? sh.wbest[lane] : SampleBest{-sample_inf(), kNoIndex, -sample_inf()};
      unsigned long long t = lane < kSampleWarps ? sh.wsum[lane] : 0ull;
      sample_warp_best(c);
      t = sample_warp_sum(t);
      if (lane == 0) {
        SamplePart* sp = slots + part;
        sp->s = c.s;
        sp->i = c.i;
        sp->x = c.x;
        sp->sum = t;
      }
    }
    group_sync();
    if (warp == 0) {
      SampleBest c{-sample_inf(), kNoIndex, -sample_inf()};
      unsigned long long t = 0;
      for (int b = lane; b < bpr; b += 32) {  // volatile: the other blocks' values, from L2
        const volatile SamplePart* sp = slots + b;
        if (sample_better(sp->s, sp->i, c.s, c.i)) c = SampleBest{sp->s, sp->i, sp->x};
        t += sp->sum;
      }
      sample_warp_best(c);
      t = sample_warp_sum(t);
      if (lane == 0) {
        sh.best = c;
        sh.sum = t;
      }
    }
    __syncthreads();
    ++step;
  };
  auto finish = [&](int token) {
    if (part == 0 && tid == 0) out[row] = token;
  };

  // -- A: the row's max and its lowest index --------------------------------------
  SampleBest mx{-sample_inf(), kNoIndex, -sample_inf()};
  sample_sweep<T, ALIGNED>(xrow, q0, q1, V, iters, tid, [&](int q, int nv, const float (&x)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < nv && sample_better(x[j], 4 * q + j, mx.s, mx.i)) mx = SampleBest{x[j], 4 * q + j, x[j]};
  });
  merge(mx, 0ull);
  const float m = sh.best.x;
  const int amax = sh.best.i;
  if (!(m > -sample_inf())) return finish(-1);  // no finite logit
  if (greedy) return finish(amax);

  // -- K: the k-th largest key, 8 bits per pass ---------------------------------------
  unsigned tauk = 0;
  if (topk_on) {
    unsigned prefix = 0, above = 0;
    for (int d = 0; d < ND; ++d) {
      const int shift = KB - 8 * (d + 1);
      for (int t = tid; t < 256; t += kSampleThreads) sh.hist[t] = 0;
      __syncthreads();
      // A thread's run of equal bins is added once: the first digit puts most
      // logits in a few bins, where one atomic per element would serialize.
      unsigned run_bin = 0, run = 0;
      sample_sweep<T, ALIGNED>(xrow, q0, q1, V, iters, tid, [&](int, int nv, const float (&x)[4]) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (j >= nv) continue;
          const unsigned key = SampleKey<T>::of(x[j]);
          if (d > 0 && (key >> (shift + 8)) != prefix) continue;
          const unsigned b = (key >> shift) & 255u;
          if (b != run_bin) {
            if (run) atomicAdd(&sh.hist[run_bin], run);
            run_bin = b;
            run = 0;
          }
          ++run;
        }
      });
      if (run) atomicAdd(&sh.hist[run_bin], run);
      __syncthreads();
      unsigned* gh = ghist + ((long long)row * ND + d) * 256;
      for (int t = tid; t < 256; t += kSampleThreads)
        if (sh.hist[t]) atomicAdd(gh + t, sh.hist[t]);
      group_sync();
      if (warp == 0) {
        // Lane l holds bins 255 - 8l .. 248 - 8l (high first); the crossing is
        // the bin where the count from the top reaches k.
        const volatile unsigned* g = gh;
        unsigned c[8], tot = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          c[j] = g[255 - 8 * lane - j];
          tot += c[j];
        }
        unsigned incl = tot;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned v = __shfl_up_sync(kFullMask, incl, o);
          if (lane >= o) incl += v;
        }
        const unsigned need = (unsigned)k - above;  // >= 1: above < k <= above + (count in the prefix's range)
        const bool here = incl - tot < need && incl >= need;
        const unsigned who = __ballot_sync(kFullMask, here);
        if (who ? (here && lane == __ffs(who) - 1) : lane == 0) {
          unsigned cum = incl - tot;
          int j = 0;
          for (; j < 7; ++j) {
            if (cum + c[j] >= need) break;
            cum += c[j];
          }
          sh.bin = who ? 255u - 8u * lane - j : 0u;
          sh.above = who ? above + cum : above;
        }
      }
      __syncthreads();
      prefix = (prefix << 8) | sh.bin;
      above = sh.above;
    }
    tauk = prefix;
  }

  // -- R: rejection rounds ---------------------------------------------------------------
  const float inv_t = 1.0f / temp;
  const unsigned c3 = (off_hi & 0xffffffu) << 8;
  unsigned long long z = 0;  // mass of the top-k set, 2^-38 units
  float xc = -sample_inf();  // the candidate under test, and the floor of the next draw
  int ic = amax;
  for (int r = 0;; ++r) {
    unsigned long long acc = 0;
    SampleBest bb{-sample_inf(), kNoIndex, -sample_inf()};
    sample_sweep<T, ALIGNED>(xrow, q0, q1, V, iters, tid, [&](int q, int nv, const float (&x)[4]) {
      float w[4];
      unsigned want = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[j] = 0.0f;
        // above the candidate (round 0: finite), in the top-k set (implied above a candidate)
        if (j < nv && x[j] > xc && (r > 0 || !topk_on || SampleKey<T>::of(x[j]) >= tauk)) {
          w[j] = x[j] == m ? 1.0f : __expf((x[j] - m) * inv_t);
          acc += __float2ull_rn(w[j] * 274877906944.0f);  // 2^38
          if (w[j] > 0.0f && w[j] >= mp) want |= 1u << j;
        }
      }
      if (want) {
        unsigned c[4] = {(unsigned)q, (unsigned)row, off_lo, c3 | (unsigned)r};
        sample_philox(c, key0, key1);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (!(want >> j & 1u)) continue;
          // u in (0, 1), fine near 0 where E = -log(1 - u) ~ u decides rare winners
          const float u = fminf(((float)c[j] + 0.5f) * 2.3283064365386963e-10f, 0.99999994f);
          const float s = __fdividef(w[j], -log1pf(-u));
          if (sample_better(s, 4 * q + j, bb.s, bb.i)) bb = SampleBest{s, 4 * q + j, x[j]};
        }
      }
    });
    merge(bb, acc);
    const SampleBest nb = sh.best;
    const unsigned long long tot = sh.sum;
    if (r == 0) {
      if (!topp_on) return finish(nb.i);
      z = tot;
    } else {
      if (tot == 0 || (double)tot < (double)p * (double)z) return finish(ic);  // the candidate is in the nucleus
      if (nb.i == kNoIndex) return finish(ic);  // nothing above it passes min-p: cannot happen (w is monotone)
      if (r == kSampleMaxRounds) return finish(amax);
    }
    ic = nb.i;
    xc = nb.x;
  }
}

// Penalties in float32, each step rounded as NumPy's float32 operations round
// (no contraction), the result rounded once to T:
//   appeared (count > 0): x > 0 ? x / rep : x * rep
//   x = x - freq * count;  x = x - pres * (count > 0)
// Rows over blockIdx.y, columns over blockIdx.x; out may be logits (in place).
template <class T>
__global__ void __launch_bounds__(256)
    apply_penalties(const T* logits, long long ls, const int* __restrict__ counts, long long cs, T* out, long long os, int V,
                    long long rows, const float* __restrict__ reps, float rep_s, const float* __restrict__ pres, float pres_s,
                    const float* __restrict__ freqs, float freq_s) {
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const float rep = reps ? reps[r] : rep_s;
    const float pr = pres ? pres[r] : pres_s;
    const float fq = freqs ? freqs[r] : freq_s;
    for (int i = blockIdx.x * 256 + threadIdx.x; i < V; i += gridDim.x * 256) {
      const int c = counts[r * cs + i];
      float x = (float)logits[r * ls + i];
      if (c > 0) x = x > 0.0f ? __fdiv_rn(x, rep) : __fmul_rn(x, rep);
      x = __fsub_rn(x, __fmul_rn(fq, (float)c));
      x = __fsub_rn(x, __fmul_rn(pr, c > 0 ? 1.0f : 0.0f));
      out[r * os + i] = T(x);
    }
  }
}

// counts[r, id] += 1 for each ids[r, j] in [0, V) other than pad (counts zeroed by the host).
template <class I>
__global__ void __launch_bounds__(256)
    token_counts(const I* __restrict__ ids, long long is, int L, long long rows, int V, long long pad, int* counts) {
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int j = blockIdx.x * 256 + threadIdx.x; j < L; j += gridDim.x * 256) {
      const long long id = (long long)ids[r * is + j];
      if (id != pad && id >= 0 && id < V) atomicAdd(counts + r * V + id, 1);
    }
  }
}

}  // namespace pgk
