// SPDX-License-Identifier: MIT
// A client's ticket window (proto.hpp, "Tickets"): the next ticket its ring
// must show, each ticket's state while in the window (held on the host, on
// the device, done), the `completed` counter, the device's frontier, and the
// large transfers in flight (proto::is_large, proto::large_bound). The one
// home of that state: the engine changes it (io thread only); everyone else
// reads it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/proto.hpp"

namespace ferry::ferryd {

// Failed tickets, in ticket order: {ticket, negative errno}.
using Failed = std::vector<std::pair<uint64_t, int>>;

class Window {
 public:
  // A new ring of `slots` slots of `slot_bytes`: every ticket free, none done.
  void reset(uint32_t slots, uint64_t slot_bytes);
  uint32_t entries() const { return entries_; }

  // ---- the ring's side
  // The ticket the ring must show next; the ring's entry for it was taken.
  uint64_t next() const { return next_; }
  void took(uint64_t ticket) { next_ = ticket + 1; }
  // Whether a transfer of `length` may go to the device now: not a large one
  // while large_bound of them are in flight. waiting(): the ring's next entry
  // is such a one, left in the ring (the engine drains it again once a large
  // transfer retires: Retired::room).
  bool room_for(uint64_t length) const {
    return !proto::is_large(length, slot_bytes_) || length > slot_bytes_ || large_in_flight_ < large_bound_;
  }
  bool waiting() const { return waiting_; }
  void set_waiting(bool w) { waiting_ = w; }
  // The last ticket the ring may still bring: none past `ticket` once its
  // client left (what it published before it went is still sent).
  uint64_t last() const { return last_; }
  void close_at(uint64_t ticket) { last_ = ticket; }

  // ---- tickets
  // nullptr, or why ticket (of `length` bytes) may not enter the window.
  const char* check(uint64_t ticket, uint64_t length) const;
  void hold(uint64_t ticket) { state_[slot(ticket)] = kHeld; }
  // On the device (bytes 0: a ticket done without a copy, about to finish).
  void start(uint64_t ticket, uint64_t bytes);
  // The device refused it after all: free again.
  void unstart(uint64_t ticket, uint64_t bytes);
  // A ticket's outcome. moved: `completed` moved (failed tickets that became
  // contiguous were appended to `failed`); room: a large transfer left while
  // the ring waits for one.
  struct Retired {
    bool moved = false;
    bool room = false;
  };
  Retired finish(uint64_t ticket, uint64_t bytes, int status, Failed& failed);

  uint64_t completed() const { return completed_; }
  uint32_t in_flight() const { return in_flight_; }
  uint64_t in_flight_bytes() const { return in_flight_bytes_; }

  // The highest ticket T such that every ticket <= T was queued on the device
  // (or refused): returns true and T when it moved. The engine then has the
  // device write T into `device_completed` after those copies.
  bool advance_frontier(uint64_t* value);
  uint64_t frontier() const { return frontier_; }
  void reset_frontier(uint64_t v) { frontier_ = v; }

 private:
  enum State : uint8_t { kFree, kHeld, kBusy, kDone };
  uint32_t slot(uint64_t ticket) const { return static_cast<uint32_t>((ticket - 1) % entries_); }
  // Ends a ticket's time on the device: its large mark and byte count go.
  bool leave(uint32_t s, uint64_t bytes);

  uint32_t entries_ = 0;
  uint32_t large_bound_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t next_ = 1;
  uint64_t last_ = UINT64_MAX;
  bool waiting_ = false;
  std::vector<uint8_t> state_;   // per ticket in the window, at (ticket - 1) % entries_
  std::vector<int> status_;      // a done ticket's outcome
  std::vector<uint8_t> large_;   // counted in large_in_flight_
  uint32_t large_in_flight_ = 0;
  uint32_t in_flight_ = 0;
  uint64_t in_flight_bytes_ = 0;
  uint64_t completed_ = 0;
  uint64_t frontier_ = 0;
};

}  // namespace ferry::ferryd
