#include "session.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

#include "ferry/fdpass.hpp"
#include "log.hpp"
#include "server.hpp"

namespace ferry {

namespace {
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxPending = 1 << 20;  // bytes queued for a client before it is dropped
}  // namespace

Session::Session(socket_type socket, Server& server) : socket_(std::move(socket)), server_(server) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    pid_ = cred.pid;
    uid_ = cred.uid;
    gid_ = cred.gid;
  }
  in_.resize(kReadChunk);
}

void Session::start() { read(); }

void Session::close() {
  if (closed_) return;
  closed_ = true;
  close_fds();
  for (auto& [off, fd] : fd_marks_) ::close(fd);
  fd_marks_.clear();
  boost::system::error_code ec;
  socket_.close(ec);
  server_.closed(shared_from_this());
}

void Session::shut_down() {
  if (closed_) return;
  auto m = proto::make<proto::Shutdown>(proto::Type::shutdown);
  m.reason = -ESHUTDOWN;
  queue(&m, sizeof m);
  closing_after_write_ = true;
  flush();
}

void Session::read() {
  if (in_.size() - in_used_ < kReadChunk / 2) in_.resize(in_used_ + kReadChunk);
  auto self = shared_from_this();
  // recvmsg rather than read_some: Import and EventPool come with a file descriptor.
  socket_.async_wait(socket_type::wait_read, [this, self](const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec) {
      close();
      return;
    }
    ssize_t n = proto::recv_fds(socket_.native_handle(), in_.data() + in_used_, in_.size() - in_used_, MSG_DONTWAIT,
                                [&](int fd) { fds_in_.push_back(fd); });
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      read();
      return;
    }
    if (n <= 0) {
      close();  // the client went away (or its socket failed): it frees what it held
      return;
    }
    in_used_ += static_cast<size_t>(n);
    size_t off = 0;
    while (!closed_) {
      proto::Decoded d = proto::decode(in_.data() + off, in_used_ - off);
      if (d.result == proto::Decode::need_more) break;
      if (d.result == proto::Decode::bad) {
        fatal(-EPROTO, d.why);
        return;
      }
      handle(d.type, in_.data() + off);
      off += d.consumed;
    }
    if (closed_ || closing_after_write_) return;
    std::memmove(in_.data(), in_.data() + off, in_used_ - off);
    in_used_ -= off;
    // Descriptors no message claimed were not expected: they are not kept.
    // (One that came with a message still arriving waits for it.)
    if (in_used_ == 0 || fds_in_.size() > 2) close_fds();
    read();
  });
}

int Session::take_fd() {
  if (fds_in_.empty()) return -1;
  int fd = fds_in_.front();
  fds_in_.pop_front();
  return fd;
}

void Session::close_fds() {
  for (int fd : fds_in_) ::close(fd);
  fds_in_.clear();
}

namespace {
// Copies a message out of the read buffer (which has no alignment promise)
// and hands it to its handler.
template <class Msg>
void call(Session* s, const uint8_t* bytes, void (Session::*handler)(const Msg&)) {
  Msg m;
  std::memcpy(&m, bytes, sizeof m);
  (s->*handler)(m);
}
}  // namespace

void Session::handle(proto::Type type, const uint8_t* msg) {
  using T = proto::Type;
  switch (type) {
    case T::hello: return call(this, msg, &Session::on_hello);
    case T::alloc: return call(this, msg, &Session::on_alloc);
    case T::free: return call(this, msg, &Session::on_free);
    case T::status_request: return call(this, msg, &Session::on_status);
    case T::grant: return call(this, msg, &Session::on_grant);
    case T::revoke: return call(this, msg, &Session::on_revoke);
    case T::open: return call(this, msg, &Session::on_open);
    case T::export_buffer: return call(this, msg, &Session::on_export);
    case T::import_buffer: return call(this, msg, &Session::on_import);
    case T::event_pool: return call(this, msg, &Session::on_event_pool);
    case T::upload: return call(this, msg, &Session::on_upload);
    case T::download: return call(this, msg, &Session::on_download);
    case T::upload_signal: return call(this, msg, &Session::on_upload_signal);
    default: fatal(-EPROTO, "message type a client may not send");
  }
}

void Session::on_upload(const proto::Transfer& m) { on_transfer(m, false); }
void Session::on_download(const proto::Transfer& m) { on_transfer(m, true); }
void Session::on_upload_signal(const proto::UploadSignal& m) { on_transfer(m.t, false, &m); }

void Session::on_hello(const proto::Hello& m) {
  if (client_) return fatal(-EPROTO, "second Hello");
  if (server_.stopping()) return fatal(-ESHUTDOWN, "the daemon is stopping");
  const Options& o = server_.options();
  if (server_.client_count() >= o.max_clients) return fatal(-EUSERS, "too many clients (--max-clients)");
  uint32_t slots = m.slots_wanted == 0 ? o.slots : std::min(m.slots_wanted, o.slots);
  auto c = std::make_shared<ClientState>(&server_.engine().backend(), server_.next_client_id());
  if (int r = c->create_segment(slots, o.slot_bytes); r != 0) return fatal(r, "cannot create the staging segment");
  c->pid = pid_;
  c->uid = uid_;
  c->name = proto::get_text(m.name);
  c->session = weak_from_this();

  auto w = proto::make<proto::Welcome>(proto::Type::welcome);
  w.magic = proto::kMagic;
  w.version = proto::kVersion;
  w.features = m.features & proto::kFeaturesV1;
  w.client_id = c->id();
  w.segment_bytes = c->segment().bytes();
  w.slot_bytes = c->slot_bytes();
  w.slot_count = c->slot_count();
  w.slots_offset = proto::kSegmentHeaderBytes;
  w.max_buffer_bytes = o.client_memory != 0 ? o.client_memory : server_.engine().backend().info().memory_bytes;
  const DeviceInfo& info = server_.engine().backend().info();
  proto::set_text(w.device, info.name);
  proto::set_text(w.backend, info.backend);

  // The Welcome is the first thing this session sends, so nothing is queued
  // ahead of it; it carries the segment's fd.
  if (!pending_.empty() || !writing_.empty()) return fatal(-EPROTO, "Hello after other requests");
  if (proto::send_fd(socket_.native_handle(), &w, sizeof w, c->segment().fd(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
      static_cast<ssize_t>(sizeof w)) {
    close();
    return;
  }
  client_ = std::move(c);
  FERRY_LOG(info, "client %llu connected: pid %d uid %u \"%s\", %u slots of %llu bytes",
            static_cast<unsigned long long>(client_->id()), pid_, uid_, client_->name.c_str(), slots,
            static_cast<unsigned long long>(o.slot_bytes));
}

void Session::on_alloc(const proto::Alloc& m) {
  if (!client_) return fatal(-EPROTO, "Alloc before Hello");
  if (server_.engine().device_lost()) return reply(m.request, -ENODEV, 0);
  uint64_t id = 0;
  int r = client_->alloc(m.bytes, server_.options().client_memory, &id);
  reply(m.request, r, id);
}

void Session::on_free(const proto::Free& m) {
  if (!client_) return fatal(-EPROTO, "Free before Hello");
  reply(m.request, client_->free(m.buffer), 0);
}

void Session::on_transfer(const proto::Transfer& m, bool download, const proto::UploadSignal* sig) {
  if (!client_) return fatal(-EPROTO, "transfer before Hello");
  // Breaking the slot protocol is a broken client: close it.
  if (const char* why = client_->check_ticket(m.ticket, m.slot)) return fatal(-EPROTO, why);
  if (m.length == 0 || m.length > client_->slot_bytes()) return fatal(-EPROTO, "transfer length outside one slot");
  TransferEngine& eng = server_.engine();
  // A wrong buffer or range is the caller's mistake: fail that ticket only.
  int err = 0;
  std::shared_ptr<Buffer> buf = client_->find(m.buffer, download ? proto::kRightDownload : proto::kRightUpload, &err);
  if (!buf) return eng.fail(client_, m.ticket, err);
  if (m.offset > buf->bytes || m.length > buf->bytes - m.offset) return eng.fail(client_, m.ticket, -EINVAL);
  Signal signal;
  if (sig != nullptr) {
    if (!client_->event_pool(sig->pool, &signal.pool)) return eng.fail(client_, m.ticket, -ENOENT);
    signal.index = sig->event;
  }
  char* slot = client_->segment().slot(m.slot);
  // CUDA device addresses are not host pointers: plain integer arithmetic.
  auto* dev = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(buf->ptr) + m.offset);
  int r = download ? eng.submit(client_, m.ticket, true, slot, dev, m.length, buf)
                   : eng.submit(client_, m.ticket, false, dev, slot, m.length, buf, sig != nullptr ? &signal : nullptr);
  if (r != 0) eng.fail(client_, m.ticket, r);
}

void Session::buffer_reply(uint64_t request, int status, uint32_t rights, uint64_t buffer, uint64_t bytes) {
  auto r = proto::make<proto::BufferReply>(proto::Type::buffer_reply);
  r.request = request;
  r.status = status;
  r.rights = rights;
  r.buffer = buffer;
  r.bytes = bytes;
  queue(&r, sizeof r);
  flush();
}

void Session::on_grant(const proto::Grant& m) {
  if (!client_) return fatal(-EPROTO, "Grant before Hello");
  auto r = proto::make<proto::TokenReply>(proto::Type::token_reply);
  r.request = m.request;
  auto b = client_->owned(m.buffer);
  const uint32_t all = proto::kRightUpload | proto::kRightDownload;
  if (!b || b->imported) {
    r.status = -ENOENT;  // only the owner of an allocation grants it
  } else if (m.rights == 0 || (m.rights & ~all) != 0) {
    r.status = -EINVAL;
  } else {
    auto g = grants().add(b, client_->id(), m.buffer, m.rights);
    std::memcpy(r.token, g->token.data(), sizeof r.token);
  }
  queue(&r, sizeof r);
  flush();
}

void Session::on_revoke(const proto::Revoke& m) {
  if (!client_) return fatal(-EPROTO, "Revoke before Hello");
  if (!client_->owned(m.buffer)) return reply(m.request, -ENOENT, 0);
  static const uint8_t kZero[proto::kTokenBytes] = {};
  const bool all = std::memcmp(m.token, kZero, sizeof kZero) == 0;
  size_t n = grants().revoke(client_->id(), m.buffer, all ? nullptr : m.token);
  reply(m.request, n == 0 && !all ? -ENOENT : 0, n);
}

void Session::on_open(const proto::Open& m) {
  if (!client_) return fatal(-EPROTO, "Open before Hello");
  auto g = grants().find(m.token);
  if (!g) return buffer_reply(m.request, -EACCES, 0, 0, 0);  // a forged or revoked token: nothing
  uint64_t id = 0, bytes = 0;
  int r = client_->open(g, &id, &bytes);
  buffer_reply(m.request, r, r == 0 ? g->rights : 0, id, bytes);
}

void Session::on_export(const proto::Export& m) {
  if (!client_) return fatal(-EPROTO, "Export before Hello");
  auto r = proto::make<proto::ExportReply>(proto::Type::export_reply);
  r.request = m.request;
  auto b = client_->owned(m.buffer);
  IpcHandle h;
  if (!b || b->imported) {
    r.status = -ENOENT;
  } else if (int e = server_.engine().backend().export_buffer(b->ptr, &h); e != 0) {
    r.status = e;
  } else {
    r.kind = h.kind;
    r.bytes = b->bytes;
    std::memcpy(r.handle, h.data, sizeof r.handle);
  }
  // The fd travels with the reply; the client puts its own number in the handle.
  int fd = r.status == 0 && h.fd >= 0 ? ::fcntl(h.fd, F_DUPFD_CLOEXEC, 3) : -1;
  queue(&r, sizeof r, fd);
  flush();
}

void Session::on_import(const proto::Import& m) {
  if (!client_) return fatal(-EPROTO, "Import before Hello");
  IpcHandle h;
  h.kind = m.kind;
  std::memcpy(h.data, m.handle, sizeof h.data);
  h.fd = m.kind == proto::kIpcLevelZero ? take_fd() : -1;
  void* p = nullptr;
  int r = m.bytes == 0 ? -EINVAL : server_.engine().backend().import_buffer(h, m.bytes, &p);
  if (h.fd >= 0) ::close(h.fd);  // the driver keeps its own mapping
  uint64_t id = 0;
  if (r == 0) client_->adopt(std::make_shared<Buffer>(&server_.engine().backend(), p, m.bytes, true), &id);
  buffer_reply(m.request, r, r == 0 ? (proto::kRightUpload | proto::kRightDownload) : 0, id, r == 0 ? m.bytes : 0);
}

void Session::on_event_pool(const proto::EventPool& m) {
  if (!client_) return fatal(-EPROTO, "EventPool before Hello");
  IpcHandle h;
  h.kind = m.kind;
  std::memcpy(h.data, m.handle, sizeof h.data);
  h.fd = m.kind == proto::kIpcLevelZero ? take_fd() : -1;
  uint64_t backend_id = 0, id = 0;
  int r = server_.engine().backend().open_event_pool(h, m.count, &backend_id);
  if (h.fd >= 0) ::close(h.fd);
  if (r == 0) client_->add_event_pool(backend_id, &id);
  reply(m.request, r, id);
}

void Session::on_status(const proto::StatusRequest& m) {
  std::string json = server_.status_json(uid_, gid_);
  if (json.size() > proto::kMaxStatusJson) json = "{\"error\":\"status too large\"}";
  auto h = proto::make<proto::StatusReply>(proto::Type::status_reply);
  h.request = m.request;
  h.json_bytes = static_cast<uint32_t>(json.size());
  h.h.size = static_cast<uint32_t>(sizeof h + json.size());
  queue(&h, sizeof h);
  queue(json.data(), json.size());
  flush();
}

void Session::progress(const std::vector<std::pair<uint64_t, int>>& failed) {
  proto::Segment* seg = client_->segment().header();
  // Failures are counted before `completed` passes them (see proto.hpp).
  if (!failed.empty()) seg->failures.fetch_add(failed.size(), std::memory_order_release);
  seg->completed.store(client_->completed(), std::memory_order_release);
  if (closed_) return;
  for (const auto& [ticket, error] : failed) {
    auto f = proto::make<proto::TicketFailed>(proto::Type::ticket_failed);
    f.ticket = ticket;
    f.error = error;
    queue(&f, sizeof f);
    completion_at_ = SIZE_MAX;  // a later Completion must follow this failure
  }
  if (completion_at_ != SIZE_MAX) {
    // Coalesce: the client needs only the newest value.
    uint64_t v = client_->completed();
    std::memcpy(pending_.data() + completion_at_ + offsetof(proto::Completion, completed), &v, sizeof v);
  } else {
    auto c = proto::make<proto::Completion>(proto::Type::completion);
    c.completed = client_->completed();
    completion_at_ = pending_.size();
    queue(&c, sizeof c);
  }
  flush();
}

void Session::fatal(int code, const char* why) {
  FERRY_LOG(warn, "closing session of pid %d: %s", pid_, why);
  auto e = proto::make<proto::Error>(proto::Type::error);
  e.h.flags = proto::kErrorFatal;
  e.code = code;
  proto::set_text(e.text, why);
  queue(&e, sizeof e);
  closing_after_write_ = true;
  flush();
}

void Session::reply(uint64_t request, int status, uint64_t value) {
  auto r = proto::make<proto::Reply>(proto::Type::reply);
  r.request = request;
  r.status = status;
  r.value = value;
  queue(&r, sizeof r);
  flush();
}

void Session::queue(const void* data, size_t bytes, int fd) {
  if (closed_) {
    if (fd >= 0) ::close(fd);
    return;
  }
  if (pending_.size() + bytes > kMaxPending) {
    if (fd >= 0) ::close(fd);
    FERRY_LOG(warn, "closing session of pid %d: it does not read its socket", pid_);
    close();
    return;
  }
  if (fd >= 0) {
    fd_marks_.emplace_back(pending_.size(), fd);
    completion_at_ = SIZE_MAX;  // nothing after this message may be coalesced into an earlier one
  }
  const auto* p = static_cast<const uint8_t*>(data);
  pending_.insert(pending_.end(), p, p + bytes);
}

namespace {
// Drops the first n bytes of `v`, moving the offsets that point into it.
void drop_front(std::vector<uint8_t>& v, size_t n, std::deque<std::pair<size_t, int>>& marks, size_t& completion_at) {
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  for (auto& m : marks) m.first -= n;
  completion_at = completion_at == SIZE_MAX || completion_at < n ? SIZE_MAX : completion_at - n;
}
}  // namespace

void Session::flush() {
  if (closed_ || !writing_.empty() || sending_fd_) return;
  if (pending_.empty()) {
    if (closing_after_write_) close();
    return;
  }
  if (!fd_marks_.empty() && fd_marks_.front().first == 0) {
    send_with_fd();
    return;
  }
  // Everything up to the next message that carries an fd.
  const size_t upto = fd_marks_.empty() ? pending_.size() : fd_marks_.front().first;
  writing_.assign(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(upto));
  drop_front(pending_, upto, fd_marks_, completion_at_);
  auto self = shared_from_this();
  boost::asio::async_write(socket_, boost::asio::buffer(writing_),
                           [this, self](const boost::system::error_code& ec, size_t) {
                             writing_.clear();
                             if (closed_) return;
                             if (ec) {
                               close();
                               return;
                             }
                             flush();
                           });
}

// Sends the message at the front of pending_ with its fd, in one sendmsg.
void Session::send_with_fd() {
  sending_fd_ = true;
  auto self = shared_from_this();
  socket_.async_wait(socket_type::wait_write, [this, self](const boost::system::error_code& ec) {
    sending_fd_ = false;
    if (closed_) return;
    if (ec) {
      close();
      return;
    }
    proto::Header h;
    std::memcpy(&h, pending_.data(), sizeof h);
    const int fd = fd_marks_.front().second;
    ssize_t n = proto::send_fd(socket_.native_handle(), pending_.data(), h.size, fd, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      flush();  // waits for room again
      return;
    }
    if (n != static_cast<ssize_t>(h.size)) {
      close();  // a small message only partly sent: the stream is broken
      return;
    }
    ::close(fd);
    fd_marks_.pop_front();
    drop_front(pending_, h.size, fd_marks_, completion_at_);
    flush();
  });
}

}  // namespace ferry
