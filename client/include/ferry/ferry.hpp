// C++ wrapper of libferry: RAII types and exceptions over the C ABI in
// ferry.h. It adds no second implementation.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

#include "ferry/ferry.h"

namespace ferry {

// Thrown for any error a ferry_* call returns; code() holds the errno.
class error : public std::system_error {
 public:
  error(int err, const char* what)
      : std::system_error(-err, std::generic_category(), std::string(what) + ": " + ferry_strerror(err)) {}
};

inline void check(int r, const char* what) {
  if (r != 0) throw error(r, what);
}

class Client {
 public:
  // Connects to ferryd; an empty path means $FERRY_SOCKET or the default.
  explicit Client(const std::string& socket_path = {}) {
    check(ferry_connect(socket_path.empty() ? nullptr : socket_path.c_str(), &c_), "ferry_connect");
  }
  Client(Client&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Client& operator=(Client&& o) noexcept {
    if (this != &o) {
      ferry_disconnect(c_);
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { ferry_disconnect(c_); }

  ferry_client* get() const { return c_; }

  // Returns once src may be reused; the ticket completes when the bytes are on the device.
  ferry_ticket upload(ferry_buffer dst, uint64_t offset, const void* src, uint64_t bytes) {
    ferry_ticket t = 0;
    check(ferry_upload(c_, dst, offset, src, bytes, &t), "ferry_upload");
    return t;
  }
  // false on timeout; throws on the ticket's error.
  bool wait(ferry_ticket t, int64_t timeout_ns = -1) {
    int r = ferry_wait(c_, t, timeout_ns);
    if (r == -ETIMEDOUT) return false;
    check(r, "ferry_wait");
    return true;
  }
  bool flush(int64_t timeout_ns = -1) {
    int r = ferry_flush(c_, timeout_ns);
    if (r == -ETIMEDOUT) return false;
    check(r, "ferry_flush");
    return true;
  }
  void download(ferry_buffer src, uint64_t offset, void* dst, uint64_t bytes) {
    check(ferry_download(c_, src, offset, dst, bytes), "ferry_download");
  }
  ferry_info info() const {
    ferry_info i{};
    check(ferry_get_info(c_, &i), "ferry_get_info");
    return i;
  }

 private:
  ferry_client* c_ = nullptr;
};

// A device buffer owned by a Client; freed when it goes out of scope.
class Buffer {
 public:
  Buffer(Client& c, uint64_t bytes) : c_(c.get()), bytes_(bytes) {
    check(ferry_buffer_alloc(c_, bytes, &id_), "ferry_buffer_alloc");
  }
  Buffer(Buffer&& o) noexcept : c_(o.c_), id_(std::exchange(o.id_, 0)), bytes_(o.bytes_) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() {
    if (id_ != 0) ferry_buffer_free(c_, id_);
  }
  ferry_buffer id() const { return id_; }
  uint64_t size() const { return bytes_; }

 private:
  ferry_client* c_;
  ferry_buffer id_ = 0;
  uint64_t bytes_;
};

}  // namespace ferry
