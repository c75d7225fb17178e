// The client's ticket timeline: tickets handed out in order, the daemon's
// `completed` counter read from the segment, failures and upload groups
// from the receiver, and every wait a caller can make on them.
//
// Slots: ticket t uses slot (t - 1) % slot_count, and is written only once
// every ticket up to t - slot_count is done (and no download still reads
// the slot), so a slot is never rewritten before the device has read it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ferry/proto.hpp"

namespace ferry::client {

using Clock = std::chrono::steady_clock;

class Timeline {
 public:
  // The segment's header and slots, once connected.
  void attach(proto::Segment* seg, char* slots, uint32_t slot_count, uint64_t slot_bytes);
  // Where ticket t stages its bytes.
  char* slot_of(uint64_t t) const { return slots_ + ((t - 1) % slot_count_) * slot_bytes_; }

  // ---- tickets
  // Reserves `count` consecutive tickets (the first in *first). With
  // count > 1 they form one upload: its last ticket reports the first error
  // of any of them. 0, or why the connection ended.
  int take(uint64_t count, uint64_t* first);
  // The newest ticket handed out (0 before the first).
  uint64_t issued();
  // Every ticket <= this is done: the daemon's word, or the device's, which
  // the device writes right after the copies and so often runs ahead.
  uint64_t completed() const {
    return std::max(seg_->completed.load(std::memory_order_acquire),
                    seg_->device_completed.load(std::memory_order_acquire));
  }

  // ---- from the receiver thread
  void failed(uint64_t ticket, int error);
  void completion(uint64_t completed);
  void ended(int why);  // the connection is gone: every wait returns `why`

  // ---- waits
  // Until ticket t's slot may be written; publishes the wait for metrics.
  // When the daemon makes no progress for stall_ms, -ETIMEDOUT, and the
  // connection is done for (the ticket can no longer be sent in order).
  int wait_slot(uint64_t t, int stall_ms);
  // Until ticket t is done (timeout_ns < 0: no limit), then its outcome.
  int wait(uint64_t t, int64_t timeout_ns);
  // Until every ticket handed out is done; the oldest failure among them, if any.
  int flush(int64_t timeout_ns);
  // The outcome of a done ticket: its error (reported once) or 0.
  int outcome(uint64_t t);

  // A download reads ticket t's slot after t completes: no upload may reuse
  // the slot until release_slot(t). Call hold_slot before t can complete.
  void hold_slot(uint64_t t) { hold_[(t - 1) % slot_count_].fetch_add(1); }
  void release_slot(uint64_t t);

  uint32_t slot_count() const { return slot_count_; }

 private:
  // Waits until ready(); spins for `spin`, then sleeps until ferryd's
  // `completed` reaches `target` (it wakes us no sooner) or a thread of ours
  // wakes us.
  template <class Ready>
  int wait_for(Clock::time_point deadline, bool forever, Ready ready, Clock::duration spin, uint64_t target);
  void settle_groups(uint64_t completed);  // mu_ held
  // Wakes this client's threads asleep on the segment's futex word.
  void wake_sleepers();
  // Brings failures and groups up to what the segment shows done.
  void catch_up(std::unique_lock<std::mutex>& lock);

  proto::Segment* seg_ = nullptr;
  char* slots_ = nullptr;
  uint32_t slot_count_ = 0;
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<std::atomic<uint32_t>[]> hold_;  // downloads still reading a slot

  std::mutex mu_;  // everything below
  std::condition_variable cv_;
  uint64_t next_ticket_ = 1;
  uint64_t failures_seen_ = 0;                        // TicketFailed messages received
  std::map<uint64_t, int> failed_;                    // ticket -> error, until reported
  std::map<uint64_t, std::vector<uint64_t>> groups_;  // last ticket of an upload -> its other tickets
  std::atomic<int> dead_{0};                          // why the connection ended
};

}  // namespace ferry::client
