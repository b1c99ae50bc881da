// Hopper (SM 90, sm_90a) primitives shared by the plugins' warpgroup kernels:
// the wgmma issue fences, shared-memory operand descriptors, the proxy fence
// between cp.async writes and wgmma reads, mbarriers (the stage handshakes
// of warp-specialized kernels, with TMA's transaction counts), TMA tile loads
// and named barriers.
#pragma once

namespace pgk {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// cp.async writes are generic-proxy writes; wgmma reads shared memory through
// the async proxy. The fence must lie on the path write -> (barrier) -> wgmma.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A 128-byte-swizzled shared operand at shared address `addr` (bytes; LBO and
// SBO in bytes). Fields: start >> 4 (bits 0-13), LBO >> 4 (16-29), SBO >> 4
// (32-45), swizzle mode 1 = 128B (62-63).
__device__ __forceinline__ unsigned long long sw128_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(lbo >> 4) << 16) |
         (static_cast<unsigned long long>(sbo >> 4) << 32) | (1ull << 62);
}

// mbarriers at shared addresses: init by one thread, then fence_mbarrier_init
// and a block barrier before anyone uses them.
__device__ __forceinline__ void mbar_init(unsigned a, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// `count` arrivals by this thread.
__device__ __forceinline__ void mbar_arrive(unsigned a, unsigned count = 1) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(a), "r"(count) : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity) {
  unsigned ok = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(a), "r"(parity)
                 : "memory");
  } while (!ok);
}
// An arrive on `a` once this thread's earlier cp.asyncs have landed; noinc:
// the arrival is one of the barrier's init count.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(unsigned a) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(a) : "memory");
}

// Transactions: an arrive that also expects `bytes` of asynchronous copies
// (TMA) to complete on the barrier in this phase.
__device__ __forceinline__ void mbar_expect_tx(unsigned a, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes) : "memory");
}

// TMA: the box at (c0 inner, c1 outer) of the 2-D tensor map at generic
// address `map` (global memory, 64-byte aligned) into shared address `dst`,
// completing its bytes on the mbarrier at `bar`. Out-of-range elements land
// as zeros.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, int c0, int c1, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

}  // namespace pgk
