// SPDX-License-Identifier: MIT
// Staging segments made ahead of time, on a thread of their own: creating one
// (a memfd, its zero-filled pages mapped and populated) takes milliseconds,
// and the io thread is the poller every client's uploads go through; so does
// registering one with the device (cuMemHostRegister pins and maps 64 MiB in
// milliseconds). A Hello takes a ready, registered segment; the pool's thread
// makes and registers the next, and unregisters and unmaps the segments of
// clients that left.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "device/backend.hpp"
#include "engine/segment.hpp"

namespace ferry::ferryd {

class SegmentPool {
 public:
  // Keeps `ready` segments of slots × slot_bytes (the daemon's default
  // geometry), each registered with `backend` where it takes host ranges.
  // The backend's register_host/unregister_host must be callable from
  // another thread than the io thread's (both backends' are).
  SegmentPool(uint32_t slots, uint64_t slot_bytes, size_t ready, Backend* backend);
  ~SegmentPool();
  SegmentPool(const SegmentPool&) = delete;
  SegmentPool& operator=(const SegmentPool&) = delete;

  // A ready segment of this geometry (true), or false: none ready, or a
  // client that asked for fewer slots; the caller then makes one itself.
  // *registered says whether the device took the segment.
  bool take(uint32_t slots, uint64_t slot_bytes, StagingSegment* out, bool* registered);
  // A segment made on the pool's thread, of any geometry, for a Hello that
  // found none ready: `done` is called there, with 0 or -errno (-ECANCELED,
  // and nothing made, when `cancelled` was set first: the connection went). Orders come
  // before refilling the pool; at most kMaxOrders wait, past that -EAGAIN at once
  // (the caller then makes the segment itself).
  using Done = std::function<void(int, StagingSegment, bool registered)>;
  static constexpr size_t kMaxOrders = 64;
  int order(uint32_t slots, uint64_t slot_bytes, std::shared_ptr<std::atomic<bool>> cancelled, Done done);
  // A segment no one uses any more: unregistered (if `registered`), unmapped
  // and closed on the pool's thread (giving back its pages takes milliseconds too).
  // Past kMaxDead waiting (the pool's thread stalled in the driver, say),
  // the caller does it itself: what waits stays bounded however many leave.
  void discard(StagingSegment seg, bool registered);
  static constexpr size_t kMaxDead = 64;
  struct Counts {
    size_t ready = 0, to_unmap = 0, orders = 0;
    size_t target = 0;  // how many it keeps ready (--segment-pool): at rest, ready == target
  };
  Counts counts() const;

 private:
  struct Entry {
    StagingSegment seg;
    bool registered = false;
  };
  struct Order {
    uint32_t slots;
    uint64_t slot_bytes;
    std::shared_ptr<std::atomic<bool>> cancelled;
    Done done;
  };
  // A segment of this geometry, registered where the device takes it.
  Entry make(uint32_t slots, uint64_t slot_bytes, int* r);
  void run();
  void drop(std::deque<Entry>& dead);
  void fill(Order& o);  // off the lock

  const uint32_t slots_;
  const uint64_t slot_bytes_;
  const size_t target_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Backend* const backend_;
  std::deque<Entry> ready_;
  std::deque<Entry> dead_;
  std::deque<Order> orders_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ferry::ferryd
