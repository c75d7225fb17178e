// SPDX-License-Identifier: MIT
// The C ABI's buffers (ferry/ferry.h): allocations, sharing them with other
// processes and contexts, and their fences. Each is a request to the daemon
// (one round trip) or a look at what this client remembers of its buffers.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "client.hpp"

namespace proto = ferry::proto;
namespace fc = ferry::client;

namespace {

// The daemon refused `fn` with `status` (a negative errno): said in
// ferry_last_error, as a misuse is.
int refused(int status, const char* fn, uint64_t buf) {
  const std::string b = "buffer " + std::to_string(buf);
  switch (status) {
    case -ENOENT: return fc::misuse(status, fn, b + " is not one of this client's (freed, or never allocated or opened)");
    case -EACCES:
    case -EPERM:
      return fc::misuse(status, fn,
                        "the daemon refused: the token is not valid (revoked, its buffer freed, or never granted), or the "
                        "rights asked are not the grant's");
    case -EINVAL:
      return fc::misuse(status, fn, "the daemon refused the arguments (rights 0 or unknown, or an unknown handle kind)");
    default: {
      // The daemon's own reason where it gave one (which bound, whose, its flag).
      const std::string& why = fc::Connection::refusal_text();
      return fc::misuse(status, fn, "the daemon refused: " + (why.empty() ? std::string(ferry_strerror(status)) : why));
    }
  }
}

// A request answered with another type than its reply's: a refusal the
// daemon explained (a bound, say) is said in ferry_last_error; a lost
// connection is returned as it is.
int explained(int status, const char* fn, uint64_t buf) {
  return fc::Connection::refusal_text().empty() ? status : refused(status, fn, buf);
}

// An fd the caller passes must be open: sending a closed one would end the
// connection (sendmsg fails), not just this call.
bool fd_open(int fd) { return fd >= 0 && ::fcntl(fd, F_GETFD) >= 0; }

}  // namespace

extern "C" {

int ferry_buffer_alloc(ferry_client* c, uint64_t bytes, ferry_buffer* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_alloc", "out is NULL");
  if (bytes == 0) return fc::misuse(-EINVAL, "ferry_buffer_alloc", "0 bytes");
  auto m = proto::make<proto::Alloc>(proto::Type::alloc);
  m.bytes = bytes;
  proto::Reply r{};
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r); e != 0) return e;
  if (r.status != 0) return refused(r.status, "ferry_buffer_alloc", 0);
  fc::remember_buffer(c, r.value, bytes, c->fence_words != nullptr && r.fence <= proto::kFences ? r.fence : 0);
  out->id = r.value;
  return 0;
}

int ferry_buffer_free(ferry_client* c, ferry_buffer buffer) {
  const uint64_t buf = buffer.id;
  if (int e = fc::owner_check(c); e != 0) return e;
  auto m = proto::make<proto::Free>(proto::Type::free);
  m.buffer = buf;
  proto::Reply r{};
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r); e != 0) return e;
  if (r.status != 0) return refused(r.status, "ferry_buffer_free", buf);
  fc::forget_buffer(c, buf);
  return 0;
}

int ferry_buffer_size(ferry_client* c, ferry_buffer buffer, uint64_t* bytes) {
  const uint64_t buf = buffer.id;
  if (int e = fc::owner_check(c); e != 0) return e;
  if (bytes == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_size", "bytes is NULL");
  std::lock_guard lock(c->buffers_mu);
  auto it = c->buffer_sizes.find(buf);
  if (it == c->buffer_sizes.end())
    return fc::misuse(-ENOENT, "ferry_buffer_size", "buffer " + std::to_string(buf) + " is not one of this client's");
  *bytes = it->second;
  return 0;
}

int ferry_buffer_fence(ferry_client* c, ferry_buffer buffer, ferry_fence* out) {
  const uint64_t buf = buffer.id;
  if (int e = fc::owner_check(c); e != 0) return e;
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_fence", "out is NULL");
  if (c->fence_words == nullptr) return fc::misuse(-ENOTSUP, "ferry_buffer_fence", "this daemon has no fences (an older ferryd)");
  const uint32_t f = fc::fence_of(c, buf);
  if (f == 0) {
    std::lock_guard lock(c->buffers_mu);
    // One opened through a grant, one of ours without a fence, or none of ours.
    if (c->opened.count(buf) != 0)
      return fc::misuse(-ENOENT, "ferry_buffer_fence",
                        "buffer " + std::to_string(buf) +
                            " was opened through a grant: its fence is its owner's (this gives the fences of this "
                            "client's own allocations)");
    return c->buffer_sizes.count(buf) != 0
               ? fc::misuse(-ENOTSUP, "ferry_buffer_fence",
                            "buffer " + std::to_string(buf) + " has no fence (all " + std::to_string(proto::kFences) +
                                " of this client's fences were in use when it was made)")
               : fc::misuse(-ENOENT, "ferry_buffer_fence", "buffer " + std::to_string(buf) + " is not one of this client's");
  }
  proto::Fence* w = c->fence_words + (f - 1);
  out->ready = reinterpret_cast<volatile uint64_t*>(&w->ready);
  out->released = reinterpret_cast<volatile uint64_t*>(&w->released);
  out->failed = reinterpret_cast<volatile uint64_t*>(&w->failed);
  return 0;
}

int ferry_fence_wait(ferry_client* c, ferry_buffer buffer, uint64_t value, int64_t timeout_ns) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (value == 0) return fc::misuse(-EINVAL, "ferry_fence_wait", "value 0 (publish values start at 1)");
  ferry_fence f{};
  if (int e = ferry_buffer_fence(c, buffer, &f); e != 0) return e;
  const auto& w = *reinterpret_cast<const proto::Fence*>(const_cast<const uint64_t*>(f.ready));  // ready leads
  if (int e = c->tickets.wait_word(w.ready, value, timeout_ns); e != 0) return e;
  // That upload, or a later one into the buffer, failed (its producer's
  // ticket says how).
  return w.failed.load(std::memory_order_acquire) >= value ? -EIO : 0;
}

int ferry_buffer_grant(ferry_client* c, ferry_buffer buffer, uint32_t rights, ferry_token* out) {
  const uint64_t buf = buffer.id;
  if (int e = fc::owner_check(c); e != 0) return e;
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_grant", "out is NULL");
  auto m = proto::make<proto::Grant>(proto::Type::grant);
  m.buffer = buf;
  m.rights = rights;
  proto::TokenReply r{};
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r); e != 0) return explained(e, "ferry_buffer_grant", buf);
  if (r.status != 0) return refused(r.status, "ferry_buffer_grant", buf);
  std::memcpy(out->bytes, r.token, sizeof out->bytes);
  return 0;
}

int ferry_buffer_revoke(ferry_client* c, ferry_buffer buffer, const ferry_token* token) {
  const uint64_t buf = buffer.id;
  if (int e = fc::owner_check(c); e != 0) return e;
  auto m = proto::make<proto::Revoke>(proto::Type::revoke);
  m.buffer = buf;
  if (token != nullptr) std::memcpy(m.token, token->bytes, sizeof m.token);
  proto::Reply r{};
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r); e != 0) return e;
  return r.status != 0 ? refused(r.status, "ferry_buffer_revoke", buf) : 0;
}

int ferry_buffer_open(ferry_client* c, const ferry_token* token, ferry_buffer* out, uint64_t* bytes) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (token == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_open", "the token is NULL");
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_open", "out is NULL");
  auto m = proto::make<proto::Open>(proto::Type::open);
  std::memcpy(m.token, token->bytes, sizeof m.token);
  proto::BufferReply r{};
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r); e != 0) return explained(e, "ferry_buffer_open", 0);
  if (r.status != 0) return refused(r.status, "ferry_buffer_open", 0);
  fc::remember_buffer(c, r.buffer, r.bytes);
  {
    std::lock_guard lock(c->buffers_mu);
    c->opened.insert(r.buffer);
  }
  out->id = r.buffer;
  if (bytes != nullptr) *bytes = r.bytes;
  return 0;
}

int ferry_buffer_export(ferry_client* c, ferry_buffer buffer, ferry_ipc_handle* out) {
  const uint64_t buf = buffer.id;
  if (int e = fc::owner_check(c); e != 0) return e;
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_export", "out is NULL");
  auto m = proto::make<proto::Export>(proto::Type::export_buffer);
  m.buffer = buf;
  proto::ExportReply r{};
  int fd = -1;
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r, -1, &fd); e != 0)
    return explained(e, "ferry_buffer_export", buf);
  if (r.status != 0) {
    if (fd >= 0) ::close(fd);
    return refused(r.status, "ferry_buffer_export", buf);
  }
  std::memset(out, 0, sizeof *out);
  out->kind = r.kind;
  out->bytes = r.bytes;
  std::memcpy(out->data, r.handle, sizeof out->data);
  out->fd = -1;
  if (r.kind == proto::kIpcLevelZero) {
    if (fd < 0) return -EPROTO;
    out->fd = fd;
    std::memcpy(out->data, &fd, sizeof fd);  // the handle names this process's descriptor
  } else if (fd >= 0) {
    ::close(fd);
  }
  return 0;
}

int ferry_buffer_import(ferry_client* c, const ferry_ipc_handle* h, ferry_buffer* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (h == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_import", "the handle is NULL");
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_buffer_import", "out is NULL");
  if (h->bytes == 0) return fc::misuse(-EINVAL, "ferry_buffer_import", "the handle's bytes is 0");
  if (h->kind == proto::kIpcLevelZero && !fd_open(h->fd))
    return fc::misuse(-EBADF, "ferry_buffer_import", "the Level Zero handle's fd " + std::to_string(h->fd) + " is not open");
  auto m = proto::make<proto::Import>(proto::Type::import_buffer);
  m.bytes = h->bytes;
  m.kind = h->kind;
  std::memcpy(m.handle, h->data, sizeof m.handle);
  proto::BufferReply r{};
  const int fd = h->kind == proto::kIpcLevelZero ? h->fd : -1;
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r, fd); e != 0) return explained(e, "ferry_buffer_import", 0);
  if (r.status != 0) return refused(r.status, "ferry_buffer_import", 0);
  fc::remember_buffer(c, r.buffer, r.bytes, c->fence_words != nullptr && r.fence <= proto::kFences ? r.fence : 0);
  out->id = r.buffer;
  return 0;
}

int ferry_event_pool_register(ferry_client* c, const ferry_ipc_handle* h, uint32_t count, uint64_t* pool) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (h == nullptr) return fc::misuse(-EFAULT, "ferry_event_pool_register", "the handle is NULL");
  if (pool == nullptr) return fc::misuse(-EFAULT, "ferry_event_pool_register", "pool is NULL");
  if (count == 0) return fc::misuse(-EINVAL, "ferry_event_pool_register", "count is 0");
  if (h->kind != proto::kIpcLevelZero)
    return fc::misuse(-EINVAL, "ferry_event_pool_register", "the handle is not a Level Zero event pool's");
  if (!fd_open(h->fd))
    return fc::misuse(-EBADF, "ferry_event_pool_register", "the handle's fd " + std::to_string(h->fd) + " is not open");
  auto m = proto::make<proto::EventPool>(proto::Type::event_pool);
  m.count = count;
  m.kind = h->kind;
  std::memcpy(m.handle, h->data, sizeof m.handle);
  proto::Reply r{};
  if (int e = c->conn.request(&m, sizeof m, &m.request, &r, h->fd); e != 0) return explained(e, "ferry_event_pool_register", 0);
  if (r.status != 0) return refused(r.status, "ferry_event_pool_register", 0);
  *pool = r.value;
  return 0;
}

}  // extern "C"
