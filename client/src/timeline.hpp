// SPDX-License-Identifier: MIT
// The client's ticket timeline: tickets handed out in order, the daemon's
// `completed` counter and the failed tickets' Result records read from the
// segment, upload groups, and every wait a caller can make on them. No
// message and no thread of libferry's stands between the daemon and a wait.
//
// Staging: the segment's staging area is a FIFO of byte ranges. Each ticket
// takes the next `length` bytes (never wrapping inside one transfer), in
// ticket order, and writes them only once every ticket that used those bytes
// before is done, ticket t - entries is done (the daemon's window), and no
// download still reads them: bytes are never rewritten before the device
// read them, and small transfers share what one slot would hold.
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

namespace ferry::client {

using Clock = std::chrono::steady_clock;

class Timeline {
 public:
  // The segment's header and staging area, once connected.
  void attach(proto::Segment* seg, const proto::Result* results, char* staging, uint32_t slots, uint64_t slot_bytes,
              uint32_t entries);
  char* staging() const { return staging_; }
  uint64_t staging_bytes() const { return staging_bytes_; }

  // ---- tickets
  // Reserves `count` consecutive tickets (the first in *first). With
  // count > 1 they form one upload: its last ticket reports the first error
  // of any of them. 0, or why the connection ended.
  int take(uint64_t count, uint64_t* first);
  // The newest ticket handed out (0 before the first); no lock: every upload
  // asks it (whether it is made alone).
  uint64_t issued() const { return issued_.load(std::memory_order_acquire); }
  // Every ticket <= this is done: the daemon's word, or the device's, which
  // the device writes right after the copies and so often runs ahead.
  uint64_t completed() const {
    return std::max(seg_->completed.load(std::memory_order_acquire),
                    seg_->device_completed.load(std::memory_order_acquire));
  }

  // The connection is gone (the receiver thread saw it end): every wait returns `why`.
  void ended(int why);

  // ---- waits
  // Places ticket t's `length` bytes in the staging area (after ticket
  // t - 1's: a caller waits for the thread that places t - 1), then waits
  // until they may be written; *offset: where, from staging(). Publishes the
  // wait for metrics. When the daemon makes no progress for stall_ms,
  // -ETIMEDOUT, and the connection is done for (the ticket can no longer be
  // sent in order).
  int place(uint64_t t, uint64_t length, int stall_ms, uint64_t* offset);
  // Until ticket t is done (timeout_ns < 0: no limit), then its outcome.
  int wait(uint64_t t, int64_t timeout_ns);
  // Until every ticket handed out is done; the oldest failure among them, if any.
  int flush(int64_t timeout_ns);
  // Until word >= value: a word of this client's segment that the device or
  // ferryd writes (a fence's ready word); ferryd wakes sleepers after it.
  int wait_word(const std::atomic<uint64_t>& word, uint64_t value, int64_t timeout_ns);
  // The outcome of a done ticket: its error (reported once) or 0.
  int outcome(uint64_t t);

  // A download reads ticket t's bytes after t completes: no later transfer
  // may reuse them until release(t). Call hold before t can complete.
  void hold(uint64_t t);
  void release(uint64_t t);

 private:
  // Waits until ready(); spins for `spin`, then sleeps until ferryd's
  // `completed` reaches `target` (it wakes us no sooner) or a thread of ours
  // wakes us.
  template <class Ready>
  int wait_for(Clock::time_point deadline, bool forever, Ready ready, Clock::duration spin, uint64_t target);
  void settle_groups(uint64_t completed);  // mu_ held
  // Wakes this client's threads asleep on the segment's futex word.
  void wake_sleepers();
  // Reads the Result records of the tickets the segment shows done since
  // the last look, if `failures` moved (mu_ held); returns that limit.
  uint64_t harvest();
  // Brings failures and groups up to what the segment shows done (mu_ held).
  void catch_up();

  proto::Segment* seg_ = nullptr;
  const proto::Result* results_ = nullptr;
  char* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint32_t slots_ = 0;
  uint32_t entries_ = 0;

  // Placement, in ticket order (place()).
  std::mutex place_mu_;  // the members below
  std::condition_variable place_cv_;
  uint64_t placed_ = 0;                 // the last ticket placed
  uint64_t head_ = 0;                   // where the next transfer's bytes start, counted without wrapping
  uint64_t reuse_ = 1;                  // the oldest ticket whose bytes a later one may still overlap
  std::unique_ptr<uint64_t[]> start_;   // ticket t's first byte (unwrapped), at (t - 1) % entries
  std::multiset<uint64_t> holds_;       // downloads still reading their bytes
  std::atomic<uint64_t> oldest_hold_{UINT64_MAX};

  std::mutex mu_;  // everything below
  uint64_t next_ticket_ = 1;
  std::atomic<uint64_t> issued_{0};                   // next_ticket_ - 1, for issued()
  std::atomic<uint64_t> failures_seen_{0};            // Result records read (the segment's `failures` then)
  uint64_t scanned_ = 0;                              // every ticket <= it was looked at
  std::map<uint64_t, int> failed_;                    // ticket -> error, until reported
  std::map<uint64_t, std::vector<uint64_t>> groups_;  // last ticket of an upload -> its other tickets
  std::atomic<int> dead_{0};                          // why the connection ended
};

}  // namespace ferry::client
