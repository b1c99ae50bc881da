// Embedding lookup (embedding.py): out[r, :] = w[ids[r], :].
//
// A gather only moves bytes, so the kernel is written over the type V moved
// per access (Vec<unsigned int, 4>: 16 bytes, down to unsigned short), which
// the host picks from the row width in bytes and the alignment of w and its
// row stride; one instantiation serves every element type. ws and nvec are
// in units of V. blockDim.x threads copy a row (four accesses in flight per
// thread), blockDim.y rows share a block. An id outside [0, vocab) gives a
// row of zeros: w is never read out of bounds.
#include "pgk/types.cuh"
#include "pgk/pdl.cuh"

namespace pgk {

template <class V>
__global__ void __launch_bounds__(256) embedding_gather(const V* __restrict__ w, long long ws, const void* __restrict__ ids, int ids64,
                                                        V* __restrict__ out, long long rows, int nvec, long long vocab) {
  wait_prior_grids();  // a dependent launch (pgk/pdl.cuh)
  allow_next_grids();
  const long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const long long id = ids64 ? static_cast<const long long*>(ids)[r] : static_cast<long long>(static_cast<const int*>(ids)[r]);
  V* o = out + r * nvec;
  if (id < 0 || id >= vocab) {
    const V zero{};
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) o[i] = zero;
    return;
  }
  const V* src = w + id * ws;
  const int bx = blockDim.x;
  int i = threadIdx.x;
  for (; i + 3 * bx < nvec; i += 4 * bx) {  // four loads in flight before the stores
    const V a = src[i], b = src[i + bx], c = src[i + 2 * bx], d = src[i + 3 * bx];
    o[i] = a;
    o[i + bx] = b;
    o[i + 2 * bx] = c;
    o[i + 3 * bx] = d;
  }
  for (; i < nvec; i += bx) o[i] = src[i];
}

}  // namespace pgk
