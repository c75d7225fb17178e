// SPDX-License-Identifier: MIT
#include "engine/staging_areas.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace ferry::ferryd {

int StagingAreas::create(uint64_t bytes, uint64_t* id, int* fd) {
  *fd = -1;
  const int own = memfd_create("ferry-staging-area", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (own < 0) return -errno;
  // The client may not resize what it was given; it may write it (staging).
  if (ftruncate(own, static_cast<off_t>(bytes)) != 0 ||
      fcntl(own, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = -errno;
    close(own);
    return e;
  }
  const int theirs = fcntl(own, F_DUPFD_CLOEXEC, 3);
  if (theirs < 0) {
    const int e = -errno;
    close(own);
    return e;
  }
  *id = ++next_;
  areas_[*id] = Area{own, bytes};
  bytes_ += bytes;
  *fd = theirs;
  return 0;
}

void StagingAreas::drop(const Area& a, bool punch) {
  // Released: whatever the client still maps becomes holes, the memory is
  // freed now, not when the client's last mapping goes.
  if (punch) fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(a.bytes));
  close(a.fd);
}

bool StagingAreas::release(uint64_t id) {
  auto it = areas_.find(id);
  if (it == areas_.end()) return false;
  drop(it->second, true);
  bytes_ -= it->second.bytes;
  areas_.erase(it);
  return true;
}

std::pair<uint64_t, size_t> StagingAreas::clear() {
  const std::pair<uint64_t, size_t> held{bytes_, areas_.size()};
  for (const auto& [id, a] : areas_) drop(a, false);
  areas_.clear();
  bytes_ = 0;
  return held;
}

}  // namespace ferry::ferryd
