// SPDX-License-Identifier: MIT
// C++ wrapper of libferry: RAII types and exceptions over the C ABI in
// ferry.h. It adds no second implementation. Needs C++14 or later.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

#include "ferry/ferry.h"

namespace ferry {

// Thrown for any error a ferry_* call returns; code() holds the errno.
// what(): the call, then what libferry said of it (ferry_last_error: the
// path, the argument, the bound and its flag) or, where it said nothing
// more, ferry_strerror's text; and the errno's number.
class error : public std::system_error {
 public:
  error(int err, const char* what) : std::system_error(-err, std::generic_category(), describe(err, what)) {}

 private:
  static std::string describe(int err, const char* what) {
    const std::string call = std::string(what) + ": ";
    const char* detail = ferry_last_error();
    if (detail == nullptr || *detail == '\0') return call + ferry_strerror(err);
    // libferry's text names the call itself, mostly: said once.
    return std::string(detail).rfind(call, 0) == 0 ? std::string(detail) : call + detail;
  }
};

inline void check(int r, const char* what) {
  if (r != 0) throw error(r, what);
}

class Client {
 public:
  // Connects to ferryd; an empty path means $FERRY_SOCKET or the default. name:
  // what ferryctl shows for this client (empty: $FERRY_CLIENT_NAME, else the
  // program's name; see ferry_connect_named).
  explicit Client(const std::string& socket_path = {}, const std::string& name = {}) {
    check(ferry_connect_named(socket_path.empty() ? nullptr : socket_path.c_str(), name.empty() ? nullptr : name.c_str(),
                              &c_),
          "ferry_connect");
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
  // Many source ranges back to back (ferry_upload_gather); opts may be null.
  ferry_ticket upload_gather(ferry_buffer dst, uint64_t offset, const ferry_iovec* src, size_t count,
                             const ferry_upload_opts* opts = nullptr) {
    ferry_ticket t = 0;
    check(ferry_upload_gather(c_, dst, offset, src, count, opts, &t), "ferry_upload_gather");
    return t;
  }
  // The fence of a buffer of this client's (ferry_buffer_fence).
  ferry_fence fence(ferry_buffer buf) const {
    ferry_fence f{};
    check(ferry_buffer_fence(c_, buf, &f), "ferry_buffer_fence");
    return f;
  }
  // Staged here, copied by the caller's own queue (ferry_upload_direct;
  // ferry_cu_upload and ferry_ze_upload build the ops for CUDA and Level Zero).
  ferry_ticket upload_direct(const void* src, uint64_t bytes, const ferry_direct_ops& ops) {
    ferry_ticket t = 0;
    check(ferry_upload_direct(c_, src, bytes, &ops, &t), "ferry_upload_direct");
    return t;
  }
  // Staging memory to write one upload into (see ferry_upload_reserve), then commit().
  ferry_reservation reserve(uint64_t bytes) {
    ferry_reservation r{};
    check(ferry_upload_reserve(c_, bytes, &r), "ferry_upload_reserve");
    return r;
  }
  ferry_ticket commit(ferry_reservation& r, ferry_buffer dst, uint64_t offset) {
    ferry_ticket t = 0;
    check(ferry_upload_commit(c_, &r, dst, offset, &t), "ferry_upload_commit");
    return t;
  }
  void cancel(ferry_reservation& r) { check(ferry_upload_cancel(c_, &r), "ferry_upload_cancel"); }
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
  // Sharing (see ferry.h): grants, opened, exported and imported buffers.
  ferry_token grant(ferry_buffer buf, uint32_t rights) {
    ferry_token t{};
    check(ferry_buffer_grant(c_, buf, rights, &t), "ferry_buffer_grant");
    return t;
  }
  // Revokes one grant, or every grant of buf when token is null.
  void revoke(ferry_buffer buf, const ferry_token* token = nullptr) {
    check(ferry_buffer_revoke(c_, buf, token), "ferry_buffer_revoke");
  }
  // Opens a granted buffer: its id for this client, and its size.
  std::pair<ferry_buffer, uint64_t> open(const ferry_token& token) {
    ferry_buffer b{};
    uint64_t bytes = 0;
    check(ferry_buffer_open(c_, &token, &b, &bytes), "ferry_buffer_open");
    return {b, bytes};
  }
  // An IPC handle to open in this process's own context. Level Zero: close
  // its fd after opening.
  ferry_ipc_handle export_buffer(ferry_buffer buf) {
    ferry_ipc_handle h{};
    check(ferry_buffer_export(c_, buf, &h), "ferry_buffer_export");
    return h;
  }
  ferry_buffer import_buffer(const ferry_ipc_handle& h) {
    ferry_buffer b{};
    check(ferry_buffer_import(c_, &h, &b), "ferry_buffer_import");
    return b;
  }
  uint64_t register_event_pool(const ferry_ipc_handle& h, uint32_t count) {
    uint64_t pool = 0;
    check(ferry_event_pool_register(c_, &h, count, &pool), "ferry_event_pool_register");
    return pool;
  }
  ferry_ticket upload_signal(ferry_buffer dst, uint64_t offset, const void* src, uint64_t bytes, uint64_t pool,
                             uint32_t event) {
    ferry_ticket t = 0;
    check(ferry_upload_signal(c_, dst, offset, src, bytes, pool, event, &t), "ferry_upload_signal");
    return t;
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
  Buffer(Buffer&& o) noexcept : c_(o.c_), id_(std::exchange(o.id_, ferry_buffer{})), bytes_(o.bytes_) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() {
    if (id_.id != 0) ferry_buffer_free(c_, id_);
  }
  ferry_buffer id() const { return id_; }
  uint64_t size() const { return bytes_; }

 private:
  ferry_client* c_;
  ferry_buffer id_{};
  uint64_t bytes_;
};

}  // namespace ferry
