/* The launch gate: pacing policy of pygpukit._rt (Rust) consulted by
 * pygpukit._native (C++) around every kernel and graph launch.
 *
 * _rt exports one as a PyCapsule named "pygpukit.launch_gate"
 * (Scheduler.launch_gate()); _native.set_launch_gate(capsule) installs it.
 * Mirrored in rust-crates/pygpukit-python/src/scheduler.rs (LaunchGate).
 *
 * before(ctx, stream) is cheap and callable with the GIL held: 0 = the
 * stream is not paced (launch, nothing else), 1 = paced with room (launch,
 * then after), 2 = paced without room (wait, launch, after). wait() blocks
 * and is called without the GIL. after() records the launch's event.
 */
#ifndef PYGPUKIT_LAUNCH_GATE_H
#define PYGPUKIT_LAUNCH_GATE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGK_LAUNCH_GATE_ABI 1u
#define PGK_LAUNCH_GATE_CAPSULE "pygpukit.launch_gate"

#define PGK_GATE_FREE 0
#define PGK_GATE_GO 1
#define PGK_GATE_WAIT 2

typedef struct pgk_launch_gate {
  uint32_t abi_version; /* PGK_LAUNCH_GATE_ABI */
  uint32_t struct_size; /* sizeof(pgk_launch_gate) */
  const void *ctx;
  int (*before)(const void *ctx, uint64_t stream);
  void (*wait)(const void *ctx, uint64_t stream);
  void (*after)(const void *ctx, uint64_t stream);
} pgk_launch_gate;

#ifdef __cplusplus
}
#endif

#endif /* PYGPUKIT_LAUNCH_GATE_H */
