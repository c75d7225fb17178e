// The copies a backend has queued, in submission order, for both backends:
// the engine's thread pushes, the retire thread waits on the oldest and
// takes every finished one after it in one batch.
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
  // Engine thread. Wakes the retire thread only when it may be asleep. A
  // null event: a copy with no report of its own (Backend::submit, event ==
  // false), done when the next entry with an event is, with its status.
  void push(Event e, uint64_t cookie) {
    bool wake;
    {
      std::lock_guard lock(mu_);
      wake = e != Event{} && evented_ == 0;
      evented_ += e != Event{};
      queue_.push_back({e, cookie});
    }
    if (wake) cv_.notify_one();
  }

  // Retire thread. wait(event) blocks until the oldest copy's event is done
  // (or timeout) and returns its status; query(event) returns the status of
  // a later one without blocking; done(status) tells whether a status means
  // finished (succeeded or failed); recycle(event) takes the event back.
  // Appends {cookie, errno} of the finished copies to `out`, in order.
  // timeout_ns == 0: never waits (the poller's call); it takes nothing while
  // another thread is inside reap.
  template <class Wait, class Query, class IsDone, class ToErrno, class Recycle>
  size_t reap(std::vector<Done>& out, int64_t timeout_ns, Wait wait, Query query, IsDone done, ToErrno to_errno,
              Recycle recycle) {
    std::unique_lock reaper(reap_mu_, std::defer_lock);
    if (timeout_ns == 0) {
      if (!reaper.try_lock()) return 0;
    } else {
      reaper.lock();
    }
    Event oldest{};
    {
      std::unique_lock lock(mu_);
      // Entries with no event of their own wait for one that has.
      if (!cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] { return evented_ != 0; })) return 0;
      for (const Entry& e : queue_) {
        if (e.event != Event{}) {
          oldest = e.event;
          break;
        }
      }
    }
    // Only the holder of reap_mu_ pops, so `oldest` stays where it is while we wait.
    auto status = timeout_ns == 0 ? query(oldest) : wait(oldest);
    if (!done(status)) return 0;
    size_t n = 0;
    bool known = true;  // `status` is the first event's
    std::lock_guard lock(mu_);
    while (!queue_.empty()) {
      // Entries with no event ahead of the next one that has: done with it.
      size_t k = 0;
      while (k < queue_.size() && queue_[k].event == Event{}) ++k;
      if (k == queue_.size()) break;  // no event after them yet
      auto s = known ? status : query(queue_[k].event);
      known = false;
      if (!done(s)) break;
      const int err = to_errno(s);
      for (size_t i = 0; i <= k; ++i) {
        out.push_back({queue_.front().cookie, err});
        if (i == k) recycle(queue_.front().event);
        queue_.pop_front();
      }
      --evented_;
      n += k + 1;
    }
    return n;
  }

 private:
  struct Entry {
    Event event;
    uint64_t cookie;
  };
  std::mutex reap_mu_;  // one reaper at a time: the retire thread or the poller
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  size_t evented_ = 0;  // entries of queue_ with an event
};

}  // namespace ferry::ferryd
