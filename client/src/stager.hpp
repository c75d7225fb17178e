// SPDX-License-Identifier: MIT
// The staging pool: runs the pieces of a large upload on several threads.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::client {

// Runs the pieces of a large upload on several threads at once: one
// thread's memcpy from pageable memory is slower than a PCIe link (9.5 GB/s
// against 55 on the H200 machine). Each thread stages whole pieces, so no
// piece waits on a barrier. Threads: $FERRY_STAGING_THREADS (at most the
// cores), else half the cores, at most kDefaultMax; started on the first
// large upload.
class Stager {
 public:
  static constexpr unsigned kDefaultMax = 8;

  ~Stager() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Calls fn(i) for every i < count, on this thread and `helpers` of the
  // pool's (at most all of them). Returns the first non-zero result (the
  // rest still run). If another upload holds the pool, this one runs alone.
  int run(uint64_t count, const std::function<int(uint64_t)>& fn, size_t helpers = SIZE_MAX) {
    std::unique_lock busy(use_, std::try_to_lock);
    if (!busy.owns_lock() || count < 2 || workers() == 0 || helpers == 0) {
      int first = 0;
      for (uint64_t i = 0; i < count; ++i)
        if (int r = fn(i); r != 0 && first == 0) first = r;
      return first;
    }
    {
      std::lock_guard lock(mu_);
      fn_ = &fn;
      count_ = count;
      next_ = 0;
      result_ = 0;
      helpers_ = std::min(helpers, threads_.size());
      active_ = helpers_;
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
    return result_;
  }

  size_t workers() {
    std::call_once(started_, [&] {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      unsigned n = std::min(kDefaultMax, cores / 2);
      if (const char* e = std::getenv("FERRY_STAGING_THREADS")) n = std::min(cores, static_cast<unsigned>(std::atoi(e)));
      n = std::max(1u, n);
      for (unsigned i = 1; i < n; ++i) threads_.emplace_back([this, i] { work(i - 1); });
    });
    return threads_.size();
  }

 private:
  // Takes pieces until none is left.
  void drain() {
    for (;;) {
      uint64_t i;
      const std::function<int(uint64_t)>* fn;
      {
        std::lock_guard lock(mu_);
        if (next_ >= count_) return;
        i = next_++;
        fn = fn_;
      }
      int r = (*fn)(i);
      if (r != 0) {
        std::lock_guard lock(mu_);
        if (result_ == 0) result_ = r;
      }
    }
  }

  void work(size_t index) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= helpers_) continue;  // not asked this time
      }
      drain();
      std::lock_guard lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex use_;  // one upload on the pool at a time
  std::once_flag started_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<int(uint64_t)>* fn_ = nullptr;
  uint64_t count_ = 0, next_ = 0, generation_ = 0;
  size_t helpers_ = 0;
  size_t active_ = 0;
  int result_ = 0;
  bool stop_ = false;
};

}  // namespace ferry::client
