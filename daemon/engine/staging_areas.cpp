// SPDX-License-Identifier: MIT
#include "engine/staging_areas.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace ferry::ferryd {

int StagingAreas::make(uint64_t bytes, int* own) {
  *own = memfd_create("ferry-staging-area", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*own < 0) return -errno;
  // The client may not resize what it was given; it may write it (staging).
  if (ftruncate(*own, static_cast<off_t>(bytes)) != 0 ||
      fcntl(*own, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = -errno;
    close(*own);
    *own = -1;
    return e;
  }
  return 0;
}

uint64_t StagingAreas::add(uint64_t bytes, uint64_t key) {
  areas_[++next_] = Area{bytes, key};
  bytes_ += bytes;
  return next_;
}

bool StagingAreas::take(uint64_t id, Area* out) {
  auto it = areas_.find(id);
  if (it == areas_.end()) return false;
  *out = it->second;
  bytes_ -= it->second.bytes;
  areas_.erase(it);
  return true;
}

std::vector<StagingAreas::Area> StagingAreas::take_all() {
  std::vector<Area> out;
  for (const auto& [id, a] : areas_) out.push_back(a);
  areas_.clear();
  bytes_ = 0;
  return out;
}

}  // namespace ferry::ferryd
