// SPDX-License-Identifier: MIT
#include "engine/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

namespace ferry::ferryd {

StagingSegment::~StagingSegment() {
  map_.reset();  // unmapped before the memfd closes
  if (fd_ >= 0) close(fd_);
}

void StagingSegment::swap(StagingSegment& o) noexcept {
  std::swap(fd_, o.fd_);
  map_.swap(o.map_);
  std::swap(bytes_, o.bytes_);
  std::swap(slot_bytes_, o.slot_bytes_);
  std::swap(slots_offset_, o.slots_offset_);
  std::swap(slot_count_, o.slot_count_);
  std::swap(device_base_, o.device_base_);
}

int StagingSegment::create(uint32_t slot_count, uint64_t slot_bytes) {
  const uint64_t bytes = proto::slots_offset(slot_count) + uint64_t{slot_count} * slot_bytes;
  fd_ = memfd_create("ferry-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) return -errno;
  if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return -errno;
  // The client may not grow or shrink what the daemon maps.
  fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  if (int r = map_.map(fd_, bytes); r != 0) return r;
  void* p = map_.data();
  bytes_ = bytes;
  slot_bytes_ = slot_bytes;
  slots_offset_ = proto::slots_offset(slot_count);
  slot_count_ = slot_count;
  auto* h = new (p) proto::Segment{};
  h->magic = proto::kMagic;
  h->version = proto::kVersion;
  h->slot_count = slot_count;
  h->ring_entries = proto::ring_entries(slot_count);
  h->slot_bytes = slot_bytes;
  h->slots_offset = slots_offset_;
  h->segment_bytes = bytes;
  h->completed.store(0, std::memory_order_relaxed);
  h->failures.store(0, std::memory_order_relaxed);
  h->wake_at.store(UINT64_MAX, std::memory_order_relaxed);
  h->daemon_state.store(1, std::memory_order_release);
  return 0;
}

char* StagingSegment::slot(uint32_t i) const { return slots_begin() + uint64_t{i} * slot_bytes_; }

char* StagingSegment::slots_begin() const { return static_cast<char*>(map_.data()) + slots_offset_; }

proto::SubmitEntry* StagingSegment::ring() const {
  return reinterpret_cast<proto::SubmitEntry*>(static_cast<char*>(map_.data()) + proto::ring_offset());
}

proto::Result* StagingSegment::results() const {
  return reinterpret_cast<proto::Result*>(static_cast<char*>(map_.data()) + results_offset());
}

proto::Fence* StagingSegment::fence(uint32_t i) const {
  return reinterpret_cast<proto::Fence*>(static_cast<char*>(map_.data()) + fences_offset()) + i;
}

}  // namespace ferry::ferryd
