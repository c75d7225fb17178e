#include "segment_pool.hpp"

#include <pthread.h>

#include <chrono>

namespace ferry::ferryd {

SegmentPool::SegmentPool(uint32_t slots, uint64_t slot_bytes, size_t ready)
    : slots_(slots), slot_bytes_(slot_bytes), target_(ready), thread_([this] { run(); }) {}

SegmentPool::~SegmentPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool SegmentPool::take(uint32_t slots, uint64_t slot_bytes, StagingSegment* out) {
  if (slots != slots_ || slot_bytes != slot_bytes_) return false;
  {
    std::lock_guard lock(mu_);
    if (ready_.empty()) return false;
    *out = std::move(ready_.front());
    ready_.pop_front();
  }
  cv_.notify_one();  // make the next one
  return true;
}

void SegmentPool::discard(StagingSegment seg) {
  {
    std::lock_guard lock(mu_);
    dead_.push_back(std::move(seg));
  }
  cv_.notify_one();
}

void SegmentPool::run() {
  pthread_setname_np(pthread_self(), "ferry-segments");
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (!dead_.empty()) {
      std::deque<StagingSegment> dead;
      dead.swap(dead_);
      lock.unlock();
      dead.clear();  // munmap and close, off the io thread
      lock.lock();
      continue;
    }
    if (ready_.size() >= target_) {
      cv_.wait(lock);
      continue;
    }
    lock.unlock();
    StagingSegment seg;
    const int r = seg.create(slots_, slot_bytes_);
    lock.lock();
    if (r == 0) {
      ready_.push_back(std::move(seg));
    } else {
      // Out of memory or descriptors now: Hellos make their own (and fail
      // with the reason) until a later try here succeeds.
      cv_.wait_for(lock, std::chrono::seconds(1));
    }
  }
}

}  // namespace ferry::ferryd
