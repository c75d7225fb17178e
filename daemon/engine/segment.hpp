// SPDX-License-Identifier: MIT
// A client's staging segment: a memfd the daemon creates, maps and hands to
// exactly one client. New memfds are zero-filled, so no client ever sees
// bytes another one staged.
#pragma once

#include <cstdint>

#include "ferry/util/mapping.hpp"
#include "ferry/proto.hpp"

namespace ferry::ferryd {

class StagingSegment {
 public:
  StagingSegment() = default;
  StagingSegment(const StagingSegment&) = delete;
  StagingSegment& operator=(const StagingSegment&) = delete;
  StagingSegment(StagingSegment&& o) noexcept { swap(o); }
  StagingSegment& operator=(StagingSegment&& o) noexcept {
    swap(o);
    return *this;
  }
  ~StagingSegment();
  void swap(StagingSegment& o) noexcept;

  // Creates and maps slot_count slots of slot_bytes. Returns 0 or -errno.
  int create(uint32_t slot_count, uint64_t slot_bytes);

  int fd() const { return fd_; }
  uint32_t slot_count() const { return slot_count_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t bytes() const { return bytes_; }
  proto::Segment* header() const { return static_cast<proto::Segment*>(map_.data()); }
  char* slot(uint32_t i) const;
  // The staging area (slot_count * slot_bytes), where clients place transfers by offset.
  char* slots_begin() const;
  uint64_t staging_bytes() const { return uint64_t{slot_count_} * slot_bytes_; }
  uint32_t ring_entries() const { return proto::ring_entries(slot_count_); }
  uint64_t slots_offset() const { return slots_offset_; }
  uint64_t slots_bytes() const { return bytes_ - slots_offset_; }
  // The submission ring: ring_entries() entries (proto::SubmitEntry).
  proto::SubmitEntry* ring() const;
  // The outcomes of failed tickets: ring_entries() records (proto::Result).
  proto::Result* results() const;
  uint64_t results_offset() const { return proto::results_offset(slot_count_); }
  // Fence i (0 <= i < proto::kFences), in the client's own memory.
  proto::Fence* fence(uint32_t i) const;
  uint64_t fences_offset() const { return proto::fences_offset(slot_count_); }
  // Where the device sees the segment (Backend::register_host; 0: it does
  // not, or not in an address of its own), and a word of it there: 0 for a
  // word outside the segment or a segment the device does not map.
  void set_device_base(uint64_t base) { device_base_ = base; }
  uint64_t device_address(const void* word) const {
    const auto at = reinterpret_cast<uintptr_t>(word), start = reinterpret_cast<uintptr_t>(map_.data());
    if (device_base_ == 0 || at < start || at - start + sizeof(uint64_t) > bytes_) return 0;
    return device_base_ + (at - start);
  }

 private:
  int fd_ = -1;
  util::SegmentMapping map_;
  uint64_t bytes_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t slots_offset_ = 0;
  uint32_t slot_count_ = 0;
  uint64_t device_base_ = 0;
};

}  // namespace ferry::ferryd
