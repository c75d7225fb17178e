// SPDX-License-Identifier: MIT
// A staging segment's mapping, on both sides, through Boost.Interprocess:
// `mapped_region` owns the mapping (unmapped when it goes), `file_mapping`
// opens the segment's memfd through /proc/self/fd/N for it. The memfd's
// seals (no shrinking, no growing) belong to the file and stay in force.
//
// Deliberately not used from Boost.Interprocess: named shared-memory objects
// (any local user could open one by name) and process-shared mutexes or
// conditions (a client can write every byte of its segment, so it could hang
// a daemon that waited on one). docs/DESIGN.md says why.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstdint>
#include <string>

namespace ferry::util {

// Whether `fd` may be mapped for `bytes` without ever faulting past its end:
// a regular file (a memfd) of at least `bytes` that nobody can shrink
// (F_SEAL_SHRINK, and the seals themselves sealed, so none is removed). A
// descriptor a server hands a client is the server's word only: one that
// can shrink later would kill the client with SIGBUS at its next write.
// 0, or -EPROTO.
inline int sealed_for(int fd, uint64_t bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || bytes == 0 || static_cast<uint64_t>(st.st_size) < bytes)
    return -EPROTO;
  const int seals = ::fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & F_SEAL_SHRINK) != 0 && (seals & F_SEAL_SEAL) != 0 ? 0 : -EPROTO;
}

class SegmentMapping {
 public:
  SegmentMapping() = default;
  SegmentMapping(SegmentMapping&&) noexcept = default;
  SegmentMapping& operator=(SegmentMapping&&) noexcept = default;

  // Maps the first `bytes` of memfd `fd` read-write and shared, populated
  // now (so the first uploads pay no page fault per 4 KiB). 0, or -EPROTO
  // when the file is smaller than `bytes` (it would fault past its end),
  // or the errno of the failed open or mmap.
  int map(int fd, uint64_t bytes) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return -errno;
    if (bytes == 0 || static_cast<uint64_t>(st.st_size) < bytes) return -EPROTO;
    namespace bip = boost::interprocess;
    try {
      bip::file_mapping file(("/proc/self/fd/" + std::to_string(fd)).c_str(), bip::read_write);
      bip::mapped_region region(file, bip::read_write, 0, bytes, nullptr, MAP_POPULATE);
      region_.swap(region);
    } catch (const bip::interprocess_exception& e) {
      const int native = e.get_native_error();
      return native != 0 ? -native : -ENOMEM;
    }
    return 0;  // the file's own descriptor closed here; the mapping stays
  }

  void* data() const { return region_.get_address(); }
  uint64_t size() const { return region_.get_size(); }
  bool mapped() const { return region_.get_address() != nullptr; }
  void swap(SegmentMapping& o) noexcept { region_.swap(o.region_); }
  void reset() {
    boost::interprocess::mapped_region none;
    region_.swap(none);
  }

 private:
  boost::interprocess::mapped_region region_;
};

}  // namespace ferry::util
