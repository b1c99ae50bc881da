// Programmatic dependent launch (SM 90+). A kernel made with
// gp.jit(..., dependent_launch=True) is launched so that its blocks may start
// while the previous kernel on the stream is still running. Before
// wait_prior_grids() returns it may only read what no earlier work writes
// (weights, constants), or what earlier work may be writing as a hint
// (a volatile read that only picks what to prefetch into L2, where writes
// land), and must write nothing: every thread calls it, before
// any early return, so that the grid's end implies its predecessor's (the
// next dependent kernel waits for this one only). allow_next_grids() lets the
// next dependent kernel be scheduled now, for its own prologue; it changes
// nothing of what wait_prior_grids() waits for. Both are no-ops before SM 90
// and in a normal launch.
#pragma once

namespace pgk {

__device__ __forceinline__ void wait_prior_grids() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grids() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace pgk
