// SPDX-License-Identifier: MIT
// An upload's source as libferry stages it: the caller's ranges
// (ferry_iovec), read back to back as one run of bytes.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "client.hpp"
#include "stage_copy.hpp"

namespace ferry::client {

class Gather {
 public:
  // 0, -EFAULT for a NULL range of non-zero length, -EOVERFLOW for a total
  // past 64 bits (ferry_last_error says which).
  int init(const ferry_iovec* iov, size_t count) {
    iov_ = iov;
    count_ = count;
    if (count == 1) {  // the common case: no table
      bytes_ = iov[0].bytes;
      return iov[0].base == nullptr ? misuse(-EFAULT, "ferry_upload", "the source is NULL") : 0;
    }
    ends_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      if (iov[i].base == nullptr && iov[i].bytes != 0)
        return misuse(-EFAULT, "ferry_upload_gather",
                      "source range " + std::to_string(i) + " is NULL with " + std::to_string(iov[i].bytes) + " bytes");
      if (bytes_ + iov[i].bytes < bytes_)
        return misuse(-EOVERFLOW, "ferry_upload_gather", "the source ranges total more than 2^64 bytes");
      bytes_ += iov[i].bytes;
      ends_[i] = bytes_;
    }
    return 0;
  }
  uint64_t bytes() const { return bytes_; }
  // Stages bytes [at, at + n) of the run into dst.
  void copy(char* dst, uint64_t at, uint64_t n, bool stream) const {
    if (count_ == 1) return stage_copy(dst, static_cast<const char*>(iov_[0].base) + at, n, stream);
    size_t i = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), at) - ends_.begin());
    while (n != 0) {
      const uint64_t begin = ends_[i] - iov_[i].bytes;
      const uint64_t take = std::min(n, ends_[i] - at);
      if (take == 0) {  // an empty range (its base may be NULL)
        ++i;
        continue;
      }
      stage_copy(dst, static_cast<const char*>(iov_[i].base) + (at - begin), take, stream);
      dst += take;
      at += take;
      n -= take;
      ++i;
    }
  }

 private:
  const ferry_iovec* iov_ = nullptr;
  size_t count_ = 0;
  uint64_t bytes_ = 0;
  std::vector<uint64_t> ends_;  // where each range ends in the run
};

}  // namespace ferry::client
