/* The C ABI between pygpukit._native (C++, owns the CUDA driver) and
 * pygpukit._rt (Rust, owns pool and scheduling policy).
 *
 * _native exports one table for the CUDA device as a PyCapsule named
 * "pygpukit.driver_table"; _rt has a host-memory table of the same shape for
 * CPU mode. Rust mirrors this struct with #[repr(C)] in
 * rust-crates/pygpukit-runtime/src/driver.rs: change both together and bump
 * PGK_DRIVER_TABLE_ABI.
 *
 * Conventions: every function returns an int status; 0 is success and other
 * values are CUresult codes (PGK_ERR_OOM == CUDA_ERROR_OUT_OF_MEMORY,
 * PGK_NOT_READY == CUDA_ERROR_NOT_READY, PGK_ERR_NOT_SUPPORTED ==
 * CUDA_ERROR_NOT_SUPPORTED). Device pointers, streams and events
 * travel as uint64_t handles; stream 0 is the legacy default stream and is
 * never used by pygpukit for its own work. error_string never fails.
 */
#ifndef PYGPUKIT_DRIVER_TABLE_H
#define PYGPUKIT_DRIVER_TABLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGK_DRIVER_TABLE_ABI 3u
#define PGK_DRIVER_TABLE_CAPSULE "pygpukit.driver_table"

#define PGK_OK 0
#define PGK_ERR_OOM 2
#define PGK_NOT_READY 600
#define PGK_ERR_NOT_SUPPORTED 801

typedef struct pgk_driver_table {
  uint32_t abi_version;  /* PGK_DRIVER_TABLE_ABI */
  uint32_t struct_size;  /* sizeof(pgk_driver_table) */
  void *ctx;             /* passed back as the first argument of each call */
  int32_t is_host;       /* 1 for the host-memory table, 0 for a CUDA device */
  int32_t device;        /* device ordinal (0 for the host table) */

  int (*mem_alloc)(void *ctx, uint64_t size, uint64_t *out_ptr);
  int (*mem_free)(void *ctx, uint64_t ptr);
  int (*mem_get_info)(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes);
  int (*memcpy_async)(void *ctx, uint64_t dst, uint64_t src, uint64_t size, uint64_t stream);
  int (*memset_d8_async)(void *ctx, uint64_t dst, uint8_t value, uint64_t size, uint64_t stream);

  int (*stream_synchronize)(void *ctx, uint64_t stream);
  int (*device_synchronize)(void *ctx);

  int (*event_create)(void *ctx, uint64_t *out_event); /* no timing, cheap */
  int (*event_destroy)(void *ctx, uint64_t event);
  int (*event_record)(void *ctx, uint64_t event, uint64_t stream);
  int (*event_query)(void *ctx, uint64_t event);       /* PGK_OK or PGK_NOT_READY */
  int (*event_synchronize)(void *ctx, uint64_t event);

  const char *(*error_string)(void *ctx, int status);

  /* ABI 2: pinned host memory (eviction, transfer staging) and stream queries (pacing). */
  int (*host_alloc)(void *ctx, uint64_t size, uint64_t *out_ptr); /* page-locked, portable */
  int (*host_free)(void *ctx, uint64_t ptr);
  int (*stream_query)(void *ctx, uint64_t stream);  /* PGK_OK when idle, PGK_NOT_READY while busy */

  /* ABI 3: virtual memory management, for expandable pool segments. A range of
   * addresses is reserved once and physical chunks are mapped into it (and
   * unmapped again) as the pool grows and shrinks. vmm_granularity returns
   * PGK_ERR_NOT_SUPPORTED when the device or driver cannot do this; the pool
   * then uses mem_alloc segments. Sizes and addresses given to vmm_map and
   * vmm_unmap are multiples of the granularity (relative to the reserved base). */
  int (*vmm_granularity)(void *ctx, uint64_t *out_bytes);
  int (*vmm_reserve)(void *ctx, uint64_t size, uint64_t *out_va);   /* no memory behind it */
  int (*vmm_free_range)(void *ctx, uint64_t va, uint64_t size);     /* a whole vmm_reserve range, unmapped */
  /* Create `size` bytes of device memory, map them at va and allow the device
   * to read and write them; *out_handle names the chunk for vmm_unmap. */
  int (*vmm_map)(void *ctx, uint64_t va, uint64_t size, uint64_t *out_handle);
  int (*vmm_unmap)(void *ctx, uint64_t va, uint64_t size, uint64_t handle); /* unmap and release */
} pgk_driver_table;

#ifdef __cplusplus
}
#endif

#endif /* PYGPUKIT_DRIVER_TABLE_H */
