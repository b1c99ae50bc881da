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

// wgmma with FP32 accumulators d[0 .. n) (n = N / 2 of an m64nNk16 tile: 32,
// 64 or 128), as asm statements over the names in scope: d, and da / db
// (shared-memory operand descriptors) with scale_d (0: d = A B, else d += A B)
// for A and B both from shared memory (SS), or a[0..3] (A's fragment from
// registers, the mma.m16n8k16 A layout) with db (RS). INSTR: the shape and
// types ("m64n128k16.f32.bf16.bf16"); TAIL: the immediates after the scale-d
// predicate (SS) or after the B descriptor (RS), leading comma included.
#define PGK_WGMMA_R32 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define PGK_WGMMA_R64 PGK_WGMMA_R32 ",%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define PGK_WGMMA_R128 PGK_WGMMA_R64 ",%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define PGK_WGMMA_D32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PGK_WGMMA_D64 PGK_WGMMA_D32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define PGK_WGMMA_D128 PGK_WGMMA_D64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define PGK_WGMMA_SS(N, INSTR, TAIL, P, DA, DB)                                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\nwgmma.mma_async.sync.aligned." INSTR " {" PGK_WGMMA_R##N "}, %" #DA \
               ", %" #DB ", p" TAIL ";\n}\n"                                                                                     \
               : PGK_WGMMA_D##N                                                                                                  \
               : "l"(da), "l"(db), "r"(scale_d))
#define PGK_WGMMA_SS32(INSTR, TAIL) PGK_WGMMA_SS(32, INSTR, TAIL, 34, 32, 33)
#define PGK_WGMMA_SS64(INSTR, TAIL) PGK_WGMMA_SS(64, INSTR, TAIL, 66, 64, 65)
#define PGK_WGMMA_SS128(INSTR, TAIL) PGK_WGMMA_SS(128, INSTR, TAIL, 130, 128, 129)
#define PGK_WGMMA_RS(N, INSTR, TAIL, A0, A1, A2, A3, DB)                                                                          \
  asm volatile("wgmma.mma_async.sync.aligned." INSTR " {" PGK_WGMMA_R##N "}, {%" #A0 ",%" #A1 ",%" #A2 ",%" #A3 "}, %" #DB TAIL ";\n" \
               : PGK_WGMMA_D##N                                                                                                  \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
#define PGK_WGMMA_RS32(INSTR, TAIL) PGK_WGMMA_RS(32, INSTR, TAIL, 32, 33, 34, 35, 36)
#define PGK_WGMMA_RS64(INSTR, TAIL) PGK_WGMMA_RS(64, INSTR, TAIL, 64, 65, 66, 67, 68)

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
