// SPDX-License-Identifier: MIT
// The staging FIFO: where each transfer's bytes go in the segment's staging
// area, and the wait until they may be written.
//
// The staging area is a FIFO of byte ranges. Each placement (numbered with
// its ticket by Tickets::take) takes the next `length` bytes (never wrapping
// inside one transfer), in placement order, and writes them only once every
// placement that used those bytes before is done, placement p - 8 * entries
// is done, ring ticket t - entries is done (the daemon's window), and no
// download still reads them: bytes are never rewritten before the device
// read them, and small transfers share what one slot would hold. A
// placement is done once the word of its kind (Tickets::completed,
// Tickets::direct_completed) passed its ticket.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

#include "staging_plan.hpp"
#include "tickets.hpp"

namespace ferry::client {

class StagingFifo {
 public:
  explicit StagingFifo(Tickets& tickets) : tickets_(tickets) {}
  // The staging area (`slots` of `slot_bytes`) and the ring's size, once connected.
  void attach(char* staging, uint32_t slots, uint64_t slot_bytes, uint32_t entries);
  char* staging() const { return staging_; }
  uint64_t staging_bytes() const { return staging_bytes_; }

  // Places t's `length` bytes in the staging area (after placement
  // t.place - 1's: a caller waits for the thread that places it), then
  // waits until they may be written; *offset: where, from staging().
  // Publishes the wait for metrics. When neither ferryd nor the
  // application's queue makes progress for stall_ms, -ETIMEDOUT, and the
  // connection is done for (the ticket can no longer be sent in order).
  int place(const Turn& t, uint64_t length, int stall_ms, uint64_t* offset);
  // Whether the pieces of an upload of `bytes` cut as `plan`, placed next
  // and in order, could all be written now: nothing that used their bytes
  // is still in flight. False when another placement is under way (a thread
  // between take and place), or the pieces outgrow the staging area.
  bool room_now(const StagingPlan& plan, uint64_t bytes);
  // room_now, and where there is room, the upload's direct numbers and
  // placements taken (Tickets::take_direct_after) and every piece placed,
  // all under one lock: true, with *turn, and piece i's bytes at offsets[i]
  // from staging() (plan.pieces of them), free to write now. Direct uploads
  // only, one at a time (ferry_client::direct_mu).
  bool claim_now(const StagingPlan& plan, uint64_t bytes, Turn* turn, uint64_t* offsets);

  // A download reads placement p's bytes after its ticket completes: no
  // later transfer may reuse them until release(p). Call hold before the
  // ticket can complete.
  void hold(uint64_t p);
  void release(uint64_t p);

 private:
  // Where a placement's bytes start (counted without wrapping), and the
  // newest ticket of each kind placed up to it: it is done once both words
  // reached those.
  struct Placed {
    uint64_t start = 0;
    uint64_t ring = 0;
    uint64_t direct = 0;
  };
  // What one placement must wait for: the placement that last used its
  // bytes (need) and that one's record (want), the newest ring ticket placed
  // before it (ring_before), and ferryd's bound on its ticket (daemon).
  struct Room {
    uint64_t need = 0;
    Placed want{};
    uint64_t ring_before = 0;
    uint64_t daemon = 0;
  };
  // ferryd's bound on a ring ticket: its window and the large transfers'
  // (proto::large_bound): the ring ticket that must be done first (0: none).
  uint64_t daemon_bound_of(const Turn& turn, uint64_t length) const;
  // Takes the next `length` bytes in placement order (after placement
  // turn.place - 1's); *offset: where, from staging(). 0, or why the
  // connection ended.
  int claim(const Turn& turn, uint64_t length, uint64_t* offset, Room* room);
  // claim's placement itself, its turn come (placed_ + 1 == turn.place). mu_ held.
  void claim_locked(const Turn& turn, uint64_t length, uint64_t* offset, Room* room);
  // room_now's look. mu_ held.
  bool room_locked(const StagingPlan& plan, uint64_t bytes) const;
  // The `completed` a sleeping waiter is woken at (three quarters of the
  // ring's transfers before it: place's measurement).
  static uint64_t sleep_target(const Room& room);
  // Until the bytes are free; -ETIMEDOUT (and the connection ended) when
  // neither ferryd nor the application's queue moved for stall_ms.
  int await(const Room& room, int stall_ms);
  // The slot wait, published in the segment for ferryd's metrics.
  void note_slot_wait(Clock::duration waited);
  // Where a transfer of `length` that would start at `head` (counted
  // without wrapping) starts: aligned, never across the area's end, and,
  // with may_restart, back at the start when nothing is in flight
  // (placed_idle). mu_ held.
  uint64_t start_at(uint64_t head, uint64_t length, bool may_restart) const;
  // Nothing placed is in flight, and no download reads its bytes. mu_ held.
  bool placed_idle() const;
  // The newest placement before q whose bytes [.., end) overwrites (they
  // started before end - S), scanning on from `from`: 0 when none. mu_ held.
  uint64_t overwritten(uint64_t from, uint64_t q, uint64_t end) const;
  // The connection ended: placers waiting for their turn give up.
  void wake_placers();

  Tickets& tickets_;
  char* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint32_t slots_ = 0;
  uint32_t entries_ = 0;
  uint64_t placements_ = 0;  // placements in flight at most: 8 * entries_

  // Placement, in placement order (place()).
  std::mutex mu_;                        // the members below
  std::condition_variable turn_cv_;      // placed_ moved, or the connection ended
  uint64_t placed_ = 0;                  // the last placement made
  uint64_t head_ = 0;                    // where the next transfer's bytes start, counted without wrapping
  uint64_t reuse_ = 1;                   // the oldest placement whose bytes a later one may still overlap
  Placed last_{};                        // placement placed_'s record
  std::unique_ptr<Placed[]> placed_at_;  // placement p's, at (p - 1) % placements_
  std::multiset<uint64_t> holds_;        // placements of downloads still reading their bytes
  std::atomic<uint64_t> oldest_hold_{UINT64_MAX};
};

}  // namespace ferry::client
