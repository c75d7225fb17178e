// SPDX-License-Identifier: MIT
// The copies a backend has queued, in submission order, for both backends.
// The data thread alone pushes, asks and pops: no lock. While it sleeps, a
// waiter thread that owns nothing of the data plane waits on the event of
// the oldest copy, lent to it by arm(), and then writes the device eventfd
// the data thread sleeps on. A lent event is not recycled before the waiter
// is done with it: the two share only the atomics below.
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "device/backend.hpp"

namespace ferry::ferryd {

template <class Event>
class InFlight {
 public:
  // wait(e): blocks until e is done, or for a bounded time (false: not yet);
  // called on the waiter thread only. recycle(e): takes an event back.
  InFlight(std::function<bool(Event)> wait, std::function<void(Event)> recycle)
      : wait_(std::move(wait)), recycle_(std::move(recycle)), waiter_([this] { wait_loop(); }) {}
  ~InFlight() { stop(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  void push(Event e, uint64_t cookie) { queue_.push_back({e, cookie}); }
  bool empty() const { return queue_.empty(); }

  // Never waits: appends {cookie, errno} of the finished copies at the front
  // to `out`, in order. query(e) returns a status, done(status) says whether
  // it means finished (succeeded or failed).
  template <class Query, class IsDone, class ToErrno>
  size_t reap(std::vector<Done>& out, Query query, IsDone done, ToErrno to_errno) {
    take_back();
    size_t n = 0;
    while (!queue_.empty()) {
      const Entry e = queue_.front();
      const auto s = query(e.event);
      if (!done(s)) break;
      queue_.pop_front();
      out.push_back({e.cookie, to_errno(s)});
      give(e.event);
      ++n;
    }
    return n;
  }

  // The data thread goes to sleep: `efd` is written once the oldest copy
  // ends. False when nothing is in flight. A waiter still busy with an
  // earlier loan writes `efd` when that ends (the data thread then arms
  // again): a loan is never lost, and never two at a time.
  bool arm(int efd) {
    if (queue_.empty()) return false;
    if (state_.load(std::memory_order_acquire) != kIdle) return true;
    take_back();  // after the waiter is seen idle: a parked event is never overwritten
    lent_ = queue_.front().event;
    efd_ = efd;
    state_.store(kLent, std::memory_order_release);
    state_.notify_one();
    return true;
  }

  // Stops the waiter: a loan in progress ends first (Level Zero's wait is
  // bounded; CUDA's ends with the copy, which a stuck device may never end).
  void stop() {
    if (!waiter_.joinable()) return;
    state_.store(kStop, std::memory_order_release);
    state_.notify_one();
    waiter_.join();
  }

 private:
  struct Entry {
    Event event;
    uint64_t cookie;
  };
  enum : uint32_t { kIdle, kLent, kStop };

  void give(Event e) {
    if (state_.load(std::memory_order_acquire) == kLent && e == lent_) {
      parked_ = e;  // the waiter still looks at it
      has_parked_ = true;
      return;
    }
    recycle_(e);
  }
  // The lent event, once the waiter is done with it.
  void take_back() {
    if (has_parked_ && state_.load(std::memory_order_acquire) != kLent) {
      has_parked_ = false;
      recycle_(parked_);
    }
  }

  void wait_loop() {
    pthread_setname_np(pthread_self(), "ferry-waiter");
    for (;;) {
      state_.wait(kIdle, std::memory_order_acquire);
      if (state_.load(std::memory_order_acquire) == kStop) return;
      const Event e = lent_;
      const int efd = efd_;
      while (!wait_(e))
        if (state_.load(std::memory_order_acquire) == kStop) return;
      // Idle before the write: the data thread woken by it may arm again.
      uint32_t lent = kLent;
      if (!state_.compare_exchange_strong(lent, kIdle, std::memory_order_acq_rel)) return;  // stopping
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t w = ::write(efd, &one, sizeof one);
    }
  }

  std::function<bool(Event)> wait_;
  std::function<void(Event)> recycle_;
  std::deque<Entry> queue_;  // data thread only
  // Shared with the waiter: lent_ and efd_ are written before state_ turns
  // kLent and read after; the waiter's kIdle gives the event back.
  std::atomic<uint32_t> state_{kIdle};
  Event lent_{};
  int efd_ = -1;
  Event parked_{};  // data thread only: reaped while lent
  bool has_parked_ = false;
  std::thread waiter_;  // last: it starts with everything above made
};

}  // namespace ferry::ferryd
