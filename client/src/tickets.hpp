// SPDX-License-Identifier: MIT
// The client's tickets: handed out in order, done by the daemon's (or the
// device's) `completed` word, failed by the Result records ferryd writes, and
// every wait a caller can make on them. No message and no thread of
// libferry's stands between the daemon and a wait.
//
// Two kinds of transfer. Ring tickets (1, 2, ...) are copied by ferryd;
// direct ones (numbered 1, 2, ... apart, ferry_upload_direct) by the
// application's own queue, which writes each one's number into the
// segment's DirectWords::completed after its copy. Both kinds take staging
// bytes in one order, their placements (1, 2, ...), numbered here with their
// tickets; where those bytes lie is the StagingFifo's (staging_fifo.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "ferry/proto.hpp"

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

class Tickets {
 public:
  // The segment's header and its Result records (`entries` of them), once connected.
  void attach(proto::Segment* seg, const proto::Result* results, uint32_t entries);
  proto::Segment& segment() const { return *seg_; }
  proto::DirectWords& direct_words() const { return *direct_; }

  // ---- numbers
  // Reserves `count` consecutive tickets of one kind and their placements
  // (the first in *first). With count > 1 they form one upload: its last
  // ticket reports the first error of any of them. 0, or why the connection
  // ended.
  int take(uint64_t count, bool direct, Turn* first);
  // Reserves `count` direct numbers with no placement (an upload staged in
  // an area of its own, not in the staging area); the first in *first.
  int take_direct(uint64_t count, uint64_t* first);
  // Reserves `count` direct numbers and the placements right after
  // `placed`, if no placement after it was handed out yet (one
  // compare-and-swap, no lock): true with *first. Direct numbers are taken
  // one upload at a time (ferry_client::direct_mu), so only a ring upload's
  // take can come between.
  bool take_direct_after(uint64_t count, uint64_t placed, Turn* first);
  // The last placement handed out (0 before the first); no lock.
  uint64_t placements_taken() const { return places_taken_.load(std::memory_order_acquire); }
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

  // ---- the connection's end
  // The connection is gone (the receiver thread saw it end, or a wait
  // stalled): every wait returns `why`, and then `on_end` runs.
  void ended(int why);
  // Why the connection ended (0: it has not).
  int dead() const { return dead_.load(); }
  // Runs once the connection ended (the staging FIFO wakes its placers);
  // set once, before any thread uses the client.
  void on_end(std::function<void()> f) { on_end_ = std::move(f); }

  // ---- waits
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
  // Reads the Result records of the tickets done since the last look, if
  // the segment's `failures` moved: before ticket t's entry overwrites
  // ticket t - entries', the outcomes of those done are kept.
  void note_failures();

  // The one wait of them all: until ready(), the deadline (unless forever),
  // or the connection's end. Spins for `spin`, then sleeps until ferryd's
  // `completed` reaches `target` (it wakes us no sooner) or a thread of ours
  // wakes us. With `poll`, the wait depends on the application's queue,
  // which wakes nobody: it sleeps 20 us at first, doubling up to 1 ms.
  template <class Ready>
  int wait_for(Clock::time_point deadline, bool forever, Ready ready, Clock::duration spin, uint64_t target,
               bool poll = false);
  // Wakes this client's threads asleep on the segment's futex word.
  void wake_sleepers();

 private:
  void settle_groups(uint64_t completed);  // mu_ held
  // Reads the Result records of the tickets the segment shows done since
  // the last look, if `failures` moved (mu_ held); returns that limit.
  uint64_t harvest();
  // Brings failures and groups up to what the segment shows done (mu_ held).
  void catch_up();
  // One sleep of wait_for: registered as a sleeper, wake_at lowered to
  // `target`, then on the futex word for `left` at most, unless `still`
  // (the wait's condition looked at once more) no longer holds.
  void sleep_once(std::chrono::microseconds left, uint64_t target, const std::function<bool()>& still);

  proto::Segment* seg_ = nullptr;
  proto::DirectWords* direct_ = nullptr;
  const proto::Result* results_ = nullptr;
  uint32_t entries_ = 0;
  std::function<void()> on_end_;

  // The numbers handed out: ring tickets under mu_ (with their groups);
  // placements and direct numbers also without it (take_direct_after).
  std::atomic<uint64_t> places_taken_{0};     // the last placement handed out
  std::atomic<uint64_t> issued_{0};           // the last ring ticket
  std::atomic<uint64_t> direct_issued_{0};    // the last direct number

  std::mutex mu_;  // everything below
  std::atomic<uint64_t> direct_appended_{0};          // the last direct number a queue was asked to write
  std::map<uint64_t, int> direct_failed_;             // direct ticket -> error, until reported
  std::atomic<uint64_t> failures_seen_{0};            // Result records read (the segment's `failures` then)
  uint64_t scanned_ = 0;                              // every ticket <= it was looked at
  std::map<uint64_t, int> failed_;                    // ticket -> error, until reported
  std::map<uint64_t, std::vector<uint64_t>> groups_;  // last ticket of an upload -> its other tickets
  std::atomic<int> dead_{0};                          // why the connection ended
};

// Spins a little first: the device writes the timeline microseconds after
// the copy. Then sleeps on the segment's futex word, which ferryd bumps and
// wakes after it moves `completed` (it looks at `sleepers` only then): no
// thread of ours, and no message, stands between the daemon and the waiter.
template <class Ready>
int Tickets::wait_for(Clock::time_point deadline, bool forever, Ready ready, Clock::duration spin, uint64_t target,
                      bool poll) {
  const auto spin_end = Clock::now() + spin;
  while (Clock::now() < spin_end) {
    if (ready()) return 0;
    if (!forever && Clock::now() >= deadline) break;
  }
  // The application's queue writes its word and wakes no one: look again
  // after a short sleep, longer each time (a queue that runs far behind is
  // looked at a thousand times a second).
  std::chrono::microseconds nap(20);
  for (;;) {
    if (ready()) return 0;
    if (int d = dead_.load(); d != 0) return d;
    std::chrono::microseconds left =
        std::chrono::milliseconds(100);  // a bound, against a wake-up lost to a dead daemon
    if (poll) {
      left = nap;
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
    }
    if (!forever) {
      const auto now = Clock::now();
      if (now >= deadline) return -ETIMEDOUT;
      left = std::min(left, std::chrono::ceil<std::chrono::microseconds>(deadline - now));
    }
    sleep_once(left, target, [&] { return !ready() && dead_.load() == 0; });
  }
}

}  // namespace ferry::client
