// Process-wide call counters reported by _native.stats().
#ifndef PYGPUKIT_STATS_H
#define PYGPUKIT_STATS_H

#include <atomic>
#include <cstdint>

namespace pgk {

struct Stats {
  std::atomic<uint64_t> mem_alloc_calls{0};
  std::atomic<uint64_t> mem_free_calls{0};
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> module_loads{0};
};

inline Stats g_stats;

inline void bump(std::atomic<uint64_t> &counter) { counter.fetch_add(1, std::memory_order_relaxed); }

}  // namespace pgk

#endif
