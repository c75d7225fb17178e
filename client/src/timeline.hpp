// SPDX-License-Identifier: MIT
// The client's ticket timeline: tickets handed out in order, the daemon's
// `completed` counter and the failed tickets' Result records read from the
// segment, upload groups, and every wait a caller can make on them. No
// message and no thread of libferry's stands between the daemon and a wait.
//
// Two kinds of transfer share the staging area. Ring tickets (1, 2, ...) are
// copied by ferryd; direct ones (numbered 1, 2, ... apart, ferry_upload_direct)
// by the application's own queue, which writes each one's number into the
// segment's DirectWords::completed after its copy. Both kinds take staging
// bytes in one order, their placements (1, 2, ...): a placement is done once
// the word of its kind passed its ticket.
//
// Staging: the segment's staging area is a FIFO of byte ranges. Each
// placement takes the next `length` bytes (never wrapping inside one
// transfer), in placement order, and writes them only once every placement
// that used those bytes before is done, placement p - 8 * entries is done,
// ring ticket t - entries is done (the daemon's window), and no download
// still reads them: bytes are never rewritten before the device read them,
// and small transfers share what one slot would hold.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <vector>

#include "ferry/proto.hpp"
#include "staging_plan.hpp"

namespace ferry::client {

using Clock = std::chrono::steady_clock;

// One transfer: its ticket (of the ring, or a direct number) and its
// placement in the staging area.
struct Turn {
  uint64_t ticket = 0;
  uint64_t place = 0;
  bool direct = false;
  Turn next(uint64_t i) const { return Turn{ticket + i, place + i, direct}; }
};

class Timeline {
 public:
  // The segment's header and staging area, once connected.
  void attach(proto::Segment* seg, const proto::Result* results, char* staging, uint32_t slots, uint64_t slot_bytes,
              uint32_t entries);
  char* staging() const { return staging_; }
  uint64_t staging_bytes() const { return staging_bytes_; }
  proto::DirectWords& direct_words() const { return *direct_; }

  // ---- tickets
  // Reserves `count` consecutive tickets of one kind and their placements
  // (the first in *first). With count > 1 they form one upload: its last
  // ticket reports the first error of any of them. 0, or why the connection
  // ended.
  int take(uint64_t count, bool direct, Turn* first);
  // Reserves `count` direct numbers with no placement (an upload staged in
  // an area of its own, not in the staging area); the first in *first.
  int take_direct(uint64_t count, uint64_t* first);
  // The newest ring ticket handed out (0 before the first); no lock: every
  // upload asks it (whether it is made alone).
  uint64_t issued() const { return issued_.load(std::memory_order_acquire); }
  // Every ring ticket <= this is done: the daemon's word, or the device's,
  // which the device writes right after the copies and so often runs ahead.
  uint64_t completed() const {
    return std::max(seg_->completed.load(std::memory_order_acquire),
                    seg_->device_completed.load(std::memory_order_acquire));
  }
  // The same two for direct transfers: the last number handed out, and the
  // last the application's queue wrote (clamped: the word is the queue's).
  uint64_t direct_issued() const { return direct_issued_.load(std::memory_order_acquire); }
  // Clamped to the last number appended to a queue: a queue that writes a
  // number ahead of its work frees no bytes of copies not yet appended.
  uint64_t direct_completed() const {
    return std::min(direct_->completed.load(std::memory_order_acquire),
                    direct_appended_.load(std::memory_order_acquire));
  }
  // The queue was asked to write number n (after its copy).
  void direct_appended(uint64_t n) { direct_appended_.store(n, std::memory_order_release); }
  // Nothing of either kind in flight.
  bool idle() const { return completed() >= issued() && direct_completed() >= direct_issued(); }
  // A direct transfer whose copy the application's queue refused: its
  // ticket reports err (its number was still written, after no copy).
  void fail_direct(uint64_t ticket, int err);

  // The connection is gone (the receiver thread saw it end): every wait returns `why`.
  void ended(int why);

  // ---- waits
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
  // Until ticket t is done (timeout_ns < 0: no limit), then its outcome.
  int wait(uint64_t t, int64_t timeout_ns);
  int wait_direct(uint64_t t, int64_t timeout_ns);
  // The same without taking its outcome (a failure stays for its own wait).
  int wait_direct_done(uint64_t t, int64_t timeout_ns);
  // Until every ticket of both kinds handed out is done; the oldest failure
  // among them, if any (the ring's first).
  int flush(int64_t timeout_ns);
  // Until word >= value: a word of this client's segment that the device or
  // ferryd writes (a fence's ready word); ferryd wakes sleepers after it.
  int wait_word(const std::atomic<uint64_t>& word, uint64_t value, int64_t timeout_ns);
  // The outcome of a done ticket: its error (reported once) or 0.
  int outcome(uint64_t t);

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
  // Waits until ready(); spins for `spin`, then sleeps until ferryd's
  // `completed` reaches `target` (it wakes us no sooner) or a thread of ours
  // wakes us. With `poll`, the wait depends on the application's queue,
  // which wakes nobody: it sleeps 20 us at first, doubling up to 1 ms.
  template <class Ready>
  int wait_for(Clock::time_point deadline, bool forever, Ready ready, Clock::duration spin, uint64_t target,
               bool poll = false);
  void settle_groups(uint64_t completed);  // mu_ held
  // ---- place(), one job each
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
  // (placed_idle). place_mu_ held.
  uint64_t start_at(uint64_t head, uint64_t length, bool may_restart) const;
  // Nothing placed is in flight, and no download reads its bytes. place_mu_ held.
  bool placed_idle() const;
  // The newest placement before q whose bytes [.., end) overwrites (they
  // started before end - S), scanning on from `from`: 0 when none. place_mu_ held.
  uint64_t overwritten(uint64_t from, uint64_t q, uint64_t end) const;
  // Wakes this client's threads asleep on the segment's futex word.
  void wake_sleepers();
  // Reads the Result records of the tickets the segment shows done since
  // the last look, if `failures` moved (mu_ held); returns that limit.
  uint64_t harvest();
  // Brings failures and groups up to what the segment shows done (mu_ held).
  void catch_up();

  proto::Segment* seg_ = nullptr;
  proto::DirectWords* direct_ = nullptr;
  const proto::Result* results_ = nullptr;
  char* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint32_t slots_ = 0;
  uint32_t entries_ = 0;
  uint64_t placements_ = 0;  // placements in flight at most: 8 * entries_

  // Placement, in placement order (place()).
  std::mutex place_mu_;  // the members below
  std::condition_variable place_cv_;
  uint64_t placed_ = 0;                 // the last placement made
  uint64_t head_ = 0;                   // where the next transfer's bytes start, counted without wrapping
  uint64_t reuse_ = 1;                  // the oldest placement whose bytes a later one may still overlap
  Placed last_{};                       // placement placed_'s record
  std::unique_ptr<Placed[]> placed_at_;  // placement p's, at (p - 1) % placements_
  std::multiset<uint64_t> holds_;       // placements of downloads still reading their bytes
  std::atomic<uint64_t> oldest_hold_{UINT64_MAX};

  std::mutex mu_;  // everything below
  uint64_t next_ticket_ = 1;
  uint64_t next_direct_ = 1;
  uint64_t next_place_ = 1;
  std::atomic<uint64_t> issued_{0};                   // next_ticket_ - 1, for issued()
  std::atomic<uint64_t> direct_issued_{0};            // next_direct_ - 1
  std::atomic<uint64_t> direct_appended_{0};          // the last direct number a queue was asked to write
  std::map<uint64_t, int> direct_failed_;             // direct ticket -> error, until reported
  std::atomic<uint64_t> failures_seen_{0};            // Result records read (the segment's `failures` then)
  uint64_t scanned_ = 0;                              // every ticket <= it was looked at
  std::map<uint64_t, int> failed_;                    // ticket -> error, until reported
  std::map<uint64_t, std::vector<uint64_t>> groups_;  // last ticket of an upload -> its other tickets
  std::atomic<int> dead_{0};                          // why the connection ended
};

}  // namespace ferry::client
