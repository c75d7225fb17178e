// Staging segments made ahead of time, on a thread of their own: creating one
// (a memfd, its zero-filled pages mapped and populated) takes milliseconds,
// and the io thread is the poller every client's uploads go through. A Hello
// takes a ready segment; the pool's thread makes the next, and unmaps the
// segments of clients that left.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "segment.hpp"

namespace ferry::ferryd {

class SegmentPool {
 public:
  // Keeps `ready` segments of slots × slot_bytes (the daemon's default geometry).
  SegmentPool(uint32_t slots, uint64_t slot_bytes, size_t ready);
  ~SegmentPool();
  SegmentPool(const SegmentPool&) = delete;
  SegmentPool& operator=(const SegmentPool&) = delete;

  // A ready segment of this geometry (true), or false: none ready, or a
  // client that asked for fewer slots; the caller then makes one itself.
  bool take(uint32_t slots, uint64_t slot_bytes, StagingSegment* out);
  // A segment no one uses any more: unmapped and closed on the pool's thread
  // (giving back its pages takes milliseconds too).
  void discard(StagingSegment seg);

 private:
  void run();

  const uint32_t slots_;
  const uint64_t slot_bytes_;
  const size_t target_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StagingSegment> ready_;
  std::deque<StagingSegment> dead_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ferry::ferryd
