// SPDX-License-Identifier: MIT
// A client's staging areas beyond its segment (proto::StagingGrow): memfds
// only the client maps, for its direct uploads. ferryd keeps its own
// descriptor of each, to count it against the user's bounds, and to take
// its memory back when the client releases it: the pages are punched out,
// so a client that kept its mapping reads zeros. At the session's end
// ferryd only closes its descriptors: the client's queue may still have
// copies to run from an area (ferryd restarted, an admin's disconnect), and
// the pages live on in the client's mapping as the segment's do. io thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace ferry::ferryd {

class StagingAreas {
 public:
  StagingAreas() = default;
  StagingAreas(const StagingAreas&) = delete;
  StagingAreas& operator=(const StagingAreas&) = delete;
  ~StagingAreas() { clear(); }

  // Creates a sealed memfd of `bytes` (whole pages): 0 and its id and a
  // descriptor for the client (*fd, the caller's to send), or -errno.
  int create(uint64_t bytes, uint64_t* id, int* fd);
  // Punches area `id`'s pages out and closes it: false for an unknown id.
  bool release(uint64_t id);
  // Closes every area (the client's session ended): its pages stay the
  // client's while it maps them. Returns the bytes and areas it held.
  std::pair<uint64_t, size_t> clear();
  uint64_t bytes() const { return bytes_; }
  size_t count() const { return areas_.size(); }

 private:
  struct Area {
    int fd = -1;
    uint64_t bytes = 0;
  };
  static void drop(const Area& a, bool punch);
  std::map<uint64_t, Area> areas_;
  uint64_t next_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace ferry::ferryd
