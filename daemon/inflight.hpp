// SPDX-License-Identifier: MIT
// The copies a backend has queued, in submission order, for both backends:
// the engine's thread pushes, the retire thread waits on the oldest and
// takes every finished one after it in one batch. One reaper at a time:
// the engine holds its reap lock around every reap (Backend::reap), so
// only one thread pops and the oldest copy stays at the front while it is
// waited on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "backend.hpp"

namespace ferry::ferryd {

template <class Event>
class InFlight {
 public:
  // Engine thread. Wakes the retire thread only when it may be asleep.
  void push(Event e, uint64_t cookie) {
    bool was_empty;
    {
      std::lock_guard lock(mu_);
      was_empty = queue_.empty();
      queue_.push_back({e, cookie});
    }
    if (was_empty) cv_.notify_one();
  }

  // Retire thread. wait(event) blocks until the oldest copy's event is done
  // (or timeout) and returns its status; query(event) returns the status of
  // a later one without blocking; done(status) tells whether a status means
  // finished (succeeded or failed); recycle(event) takes the event back.
  // Appends {cookie, errno} of the finished copies to `out`, in order.
  // timeout_ns == 0: never waits (the poller's call).
  template <class Wait, class Query, class IsDone, class ToErrno, class Recycle>
  size_t reap(std::vector<Done>& out, int64_t timeout_ns, Wait wait, Query query, IsDone done, ToErrno to_errno,
              Recycle recycle) {
    Event oldest;
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return !queue_.empty(); })) return 0;
      oldest = queue_.front().event;
    }
    // Only the one reaper pops, so `oldest` stays at the front while we wait.
    auto status = timeout_ns == 0 ? query(oldest) : wait(oldest);
    if (!done(status)) return 0;
    size_t n = 0;
    std::lock_guard lock(mu_);
    while (!queue_.empty()) {
      Entry e = queue_.front();
      auto s = n == 0 ? status : query(e.event);
      if (!done(s)) break;
      queue_.pop_front();
      out.push_back({e.cookie, to_errno(s)});
      recycle(e.event);
      ++n;
    }
    return n;
  }

 private:
  struct Entry {
    Event event;
    uint64_t cookie;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
};

}  // namespace ferry::ferryd
