// SPDX-License-Identifier: MIT
#include "engine/segment_pool.hpp"

#include <pthread.h>

#include <cerrno>
#include <chrono>

namespace ferry::ferryd {

SegmentPool::SegmentPool(uint32_t slots, uint64_t slot_bytes, size_t ready, Backend* backend)
    : slots_(slots), slot_bytes_(slot_bytes), target_(ready), backend_(backend), thread_([this] { run(); }) {}

SegmentPool::~SegmentPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // The backend outlives the pool: nothing stays registered after it.
  drop(ready_);
  drop(dead_);
}

bool SegmentPool::take(uint32_t slots, uint64_t slot_bytes, StagingSegment* out, bool* registered) {
  if (slots != slots_ || slot_bytes != slot_bytes_) return false;
  {
    std::lock_guard lock(mu_);
    if (ready_.empty()) return false;
    *out = std::move(ready_.front().seg);
    *registered = ready_.front().registered;
    ready_.pop_front();
  }
  cv_.notify_one();  // make the next one
  return true;
}

int SegmentPool::order(uint32_t slots, uint64_t slot_bytes, std::shared_ptr<std::atomic<bool>> cancelled, Done done) {
  {
    std::lock_guard lock(mu_);
    if (orders_.size() >= kMaxOrders) return -EAGAIN;
    orders_.push_back({slots, slot_bytes, std::move(cancelled), std::move(done)});
  }
  cv_.notify_one();
  return 0;
}

SegmentPool::Entry SegmentPool::make(uint32_t slots, uint64_t slot_bytes, int* r) {
  Entry e;
  *r = e.seg.create(slots, slot_bytes);
  // The whole segment, header included: the device writes the timeline there.
  uint64_t device = 0;
  if (*r == 0 && backend_ != nullptr) e.registered = backend_->register_host(e.seg.header(), e.seg.bytes(), &device) == 0;
  e.seg.set_device_base(e.registered ? device : 0);
  return e;
}

void SegmentPool::discard(StagingSegment seg, bool registered) {
  {
    std::lock_guard lock(mu_);
    if (dead_.size() < kMaxDead) {
      dead_.push_back({std::move(seg), registered});  // leaves `seg` empty
    }
  }
  cv_.notify_one();
  if (seg.header() != nullptr) {
    std::deque<Entry> mine;
    mine.push_back({std::move(seg), registered});
    drop(mine);
  }
}

SegmentPool::Counts SegmentPool::counts() const {
  std::lock_guard lock(mu_);
  return {ready_.size(), dead_.size(), orders_.size(), target_};
}

// Unregistered before unmapped: the address cannot be mapped again (and
// registered for someone else) while the device still knows it.
void SegmentPool::drop(std::deque<Entry>& dead) {
  for (Entry& e : dead)
    if (e.registered && backend_ != nullptr) backend_->unregister_host(e.seg.header());
  dead.clear();  // munmap and close
}

// An order filled (or its cancel answered), outside the lock: one of the
// pool's own segments, if it has one of this geometry by now, else a new one.
void SegmentPool::fill(Order& o) {
  if (o.cancelled->load()) {
    o.done(-ECANCELED, StagingSegment{}, false);
  } else {
    int r = 0;
    Entry e;
    bool pooled = false;
    if (o.slots == slots_ && o.slot_bytes == slot_bytes_) {
      std::lock_guard l(mu_);
      if (!ready_.empty()) {
        e = std::move(ready_.front());
        ready_.pop_front();
        pooled = true;
      }
    }
    if (!pooled) e = make(o.slots, o.slot_bytes, &r);
    o.done(r, std::move(e.seg), e.registered);
  }
  // Whatever the order's callback still holds goes outside the lock.
  o.done = nullptr;
}

void SegmentPool::run() {
  pthread_setname_np(pthread_self(), "ferry-segments");
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (!dead_.empty()) {
      std::deque<Entry> dead;
      dead.swap(dead_);
      lock.unlock();
      drop(dead);  // off the io thread
      lock.lock();
      continue;
    }
    if (!orders_.empty()) {
      Order o = std::move(orders_.front());
      orders_.pop_front();
      lock.unlock();
      fill(o);
      lock.lock();
      continue;
    }
    if (ready_.size() >= target_) {
      cv_.wait(lock);
      continue;
    }
    lock.unlock();
    int r = 0;
    Entry e = make(slots_, slot_bytes_, &r);
    lock.lock();
    if (r == 0) {
      ready_.push_back(std::move(e));
    } else {
      // Out of memory or descriptors now: Hellos make their own (and fail
      // with the reason) until a later try here succeeds.
      cv_.wait_for(lock, std::chrono::seconds(1));
    }
  }
}

}  // namespace ferry::ferryd
