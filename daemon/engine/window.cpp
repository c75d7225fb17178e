// SPDX-License-Identifier: MIT
// A client's ticket window (window.hpp).
#include "engine/window.hpp"

#include <algorithm>

namespace ferry::ferryd {

void Window::reset(uint32_t slots, uint64_t slot_bytes) {
  entries_ = proto::ring_entries(slots);
  large_bound_ = proto::large_bound(slots);
  slot_bytes_ = slot_bytes;
  next_ = 1;
  waiting_ = false;
  state_.assign(entries_, kFree);
  status_.assign(entries_, 0);
  large_.assign(entries_, 0);
  large_in_flight_ = in_flight_ = 0;
  in_flight_bytes_ = completed_ = frontier_ = 0;
}

const char* Window::check(uint64_t ticket, uint64_t length) const {
  if (entries_ == 0) return "no staging segment: send Hello first";
  if (ticket <= completed_ || ticket - completed_ > entries_) return "ticket outside the client's window";
  if (state_[slot(ticket)] != kFree) return "ticket already in flight";
  if (length == 0 || length > slot_bytes_) return "transfer length outside one slot";
  return nullptr;
}

void Window::start(uint64_t ticket, uint64_t bytes) {
  const uint32_t s = slot(ticket);
  state_[s] = kBusy;
  large_[s] = proto::is_large(bytes, slot_bytes_) ? 1 : 0;
  large_in_flight_ += large_[s];
  ++in_flight_;
  in_flight_bytes_ += bytes;
}

bool Window::leave(uint32_t s, uint64_t bytes) {
  const bool was_large = large_[s] != 0;
  large_in_flight_ -= large_[s];
  large_[s] = 0;
  --in_flight_;
  in_flight_bytes_ -= bytes;
  return was_large;
}

void Window::unstart(uint64_t ticket, uint64_t bytes) {
  const uint32_t s = slot(ticket);
  state_[s] = kFree;
  // A large one that never ran frees no room the ring could be waiting for
  // that it did not have a moment ago.
  leave(s, bytes);
}

Window::Retired Window::finish(uint64_t ticket, uint64_t bytes, int status, Failed& failed) {
  const uint32_t s = slot(ticket);
  state_[s] = kDone;
  status_[s] = status;
  Retired r;
  r.room = leave(s, bytes) && waiting_;
  // Tickets complete in order: `completed` moves only over a contiguous run.
  for (;;) {
    const uint32_t next = static_cast<uint32_t>(completed_ % entries_);
    if (state_[next] != kDone) break;
    if (status_[next] != 0) failed.emplace_back(completed_ + 1, status_[next]);
    state_[next] = kFree;
    status_[next] = 0;
    ++completed_;
    r.moved = true;
  }
  return r;
}

bool Window::advance_frontier(uint64_t* value) {
  if (entries_ == 0) return false;
  uint64_t f = std::max(frontier_, completed_);
  // Ticket f + 1 sits at f % entries; the window ends `entries` past completed.
  while (f - completed_ < entries_) {
    const uint8_t st = state_[f % entries_];
    if (st != kBusy && st != kDone) break;
    ++f;
  }
  if (f <= frontier_) return false;
  frontier_ = f;
  *value = f;
  return true;
}

}  // namespace ferry::ferryd
