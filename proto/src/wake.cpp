// SPDX-License-Identifier: MIT
// The segment's futex wake (proto.hpp, wake_sleepers).
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include "ferry/proto.hpp"

namespace ferry::proto {

void wake_sleepers(Segment& seg) {
  // A sleeper raises `sleepers` before it looks at the words: it sees them,
  // or this sees it and wakes it (the fence orders our stores before the load).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (seg.sleepers.load(std::memory_order_relaxed) == 0) return;
  seg.wake.fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seg.wake), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace ferry::proto
