// SPDX-License-Identifier: MIT
// Placement in the staging area (timeline.hpp: "Staging"): where each
// transfer's bytes go, and the wait until they may be written.
#include <algorithm>
#include <cerrno>

#include "timeline.hpp"
#include "tsan.hpp"

namespace ferry::client {

uint64_t Timeline::start_at(uint64_t head, uint64_t length, bool may_restart) const {
  const uint64_t S = staging_bytes_;
  uint64_t p = (head + proto::kStagingAlign - 1) / proto::kStagingAlign * proto::kStagingAlign;
  if (p % S + length > S) p += S - p % S;  // never across the end
  // With nothing in flight, back to the area's start: an upload now and
  // then stages into the same bytes each time, still in the CPU's cache
  // (as a driver's bounce buffer is), not into the next cold ones.
  // (placed_idle reads words the device and ferryd write: only when it may matter.)
  if (p % S != 0 && may_restart && placed_idle()) p += S - p % S;
  return p;
}

bool Timeline::placed_idle() const {
  return completed() >= last_.ring && direct_completed() >= last_.direct &&
         oldest_hold_.load(std::memory_order_acquire) == UINT64_MAX;
}

uint64_t Timeline::overwritten(uint64_t from, uint64_t q, uint64_t end) const {
  const uint64_t S = staging_bytes_;
  uint64_t r = from;
  while (r < q && end > S && placed_at_[(r - 1) % placements_].start < end - S) ++r;
  return r > from ? r - 1 : 0;
}

bool Timeline::room_now(const StagingPlan& plan, uint64_t bytes) {
  std::lock_guard lock(place_mu_);
  {
    std::lock_guard numbers(mu_);
    if (next_place_ != placed_ + 1 || dead_ != 0) return false;  // a placement is under way
  }
  // The pieces as place() would lay them out, one after the other; the
  // newest placement any of them overwrites must be done.
  const uint64_t S = staging_bytes_, last = placed_;
  uint64_t head = head_, q = last + 1, from = reuse_, need = 0, first = 0;
  for (uint64_t i = 0; i < plan.pieces; ++i) {
    const uint64_t length = plan.length(i, bytes);
    const uint64_t p = start_at(head, length, i == 0);
    if (q == last + 1) first = p;
    const uint64_t end = p + length;
    if (end - first > S) return false;  // its own pieces would have to be done first
    need = std::max(need, q > placements_ ? q - placements_ : 0);
    if (from <= need) from = need + 1;
    // Only placements made so far have records; this upload's own pieces do not overlap.
    if (const uint64_t r = overwritten(from, last + 1, end); r != 0) from = r + 1;
    need = std::max(need, from - 1);
    head = end;
    ++q;
  }
  if (need > placed_) return false;
  if (need == 0) return true;
  const Placed want = placed_at_[(need - 1) % placements_];
  return completed() >= want.ring && direct_completed() >= want.direct &&
         oldest_hold_.load(std::memory_order_acquire) > need;
}

void Timeline::hold(uint64_t p) {
  std::lock_guard lock(place_mu_);
  holds_.insert(p);
  oldest_hold_.store(*holds_.begin(), std::memory_order_release);
}

void Timeline::release(uint64_t p) {
  FERRY_SLOT_HANDED_ON(staging_);
  {
    std::lock_guard lock(place_mu_);
    if (auto it = holds_.find(p); it != holds_.end()) holds_.erase(it);
    oldest_hold_.store(holds_.empty() ? UINT64_MAX : *holds_.begin(), std::memory_order_release);
  }
  wake_sleepers();  // an upload may wait for these bytes
}

}  // namespace ferry::client
