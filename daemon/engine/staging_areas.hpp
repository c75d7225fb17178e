// SPDX-License-Identifier: MIT
// A client's staging areas beyond its segment (proto::StagingGrow): memfds
// for its direct uploads, each counted against the user's bounds while the
// session has it. The memory itself is watched by AreaWatch (ferryd keeps a
// file of it there, the client gets another): when the area leaves the
// session (released, or the session ended) its charge moves to the user's
// departed areas until no process holds a file of it. io thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ferry::ferryd {

class StagingAreas {
 public:
  struct Area {
    uint64_t bytes = 0;
    uint64_t key = 0;  // its AreaWatch key
  };
  StagingAreas() = default;
  StagingAreas(const StagingAreas&) = delete;
  StagingAreas& operator=(const StagingAreas&) = delete;

  // Makes a sealed memfd of `bytes` (whole pages), nobody may resize: its
  // id (*id) and ferryd's file of it (*own, the caller's), or -errno.
  static int make(uint64_t bytes, int* own);
  // Counts area `key` of `bytes` in this session: its id.
  uint64_t add(uint64_t bytes, uint64_t key);
  // Takes area `id` out of the session: false for an unknown id.
  bool take(uint64_t id, Area* out);
  // Takes every area out (the session ended).
  std::vector<Area> take_all();
  uint64_t bytes() const { return bytes_; }
  size_t count() const { return areas_.size(); }

 private:
  std::map<uint64_t, Area> areas_;
  uint64_t next_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace ferry::ferryd
