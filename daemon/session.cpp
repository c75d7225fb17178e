#include "session.hpp"

#include <sys/socket.h>

#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>

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
  socket_.async_read_some(
      boost::asio::buffer(in_.data() + in_used_, in_.size() - in_used_),
      [this, self](const boost::system::error_code& ec, size_t n) {
        if (closed_) return;
        if (ec) {
          close();  // the client went away (or its socket failed): it frees what it held
          return;
        }
        in_used_ += n;
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
        read();
      });
}

void Session::handle(proto::Type type, const uint8_t* msg) {
  // Messages are copied out: the read buffer has no alignment promise.
  auto as = [msg]<class T>(T* out) { std::memcpy(out, msg, sizeof(T)); };
  switch (type) {
    case proto::Type::hello: {
      proto::Hello m;
      as(&m);
      on_hello(m);
      return;
    }
    case proto::Type::alloc: {
      proto::Alloc m;
      as(&m);
      on_alloc(m);
      return;
    }
    case proto::Type::free: {
      proto::Free m;
      as(&m);
      on_free(m);
      return;
    }
    case proto::Type::upload:
    case proto::Type::download: {
      proto::Transfer m;
      as(&m);
      on_transfer(m, type == proto::Type::download);
      return;
    }
    case proto::Type::status_request: {
      proto::StatusRequest m;
      as(&m);
      on_status(m);
      return;
    }
    default:
      fatal(-EPROTO, "message type a client may not send");
  }
}

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
  iovec iov{&w, sizeof w};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctrl;
  mh.msg_controllen = sizeof ctrl;
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  const int fd = c->segment().fd();
  std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  if (sendmsg(socket_.native_handle(), &mh, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof w)) {
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

void Session::on_transfer(const proto::Transfer& m, bool download) {
  if (!client_) return fatal(-EPROTO, "transfer before Hello");
  // Breaking the slot protocol is a broken client: close it.
  if (const char* why = client_->check_ticket(m.ticket, m.slot)) return fatal(-EPROTO, why);
  if (m.length == 0 || m.length > client_->slot_bytes()) return fatal(-EPROTO, "transfer length outside one slot");
  TransferEngine& eng = server_.engine();
  // A wrong buffer or range is the caller's mistake: fail that ticket only.
  std::shared_ptr<Buffer> buf = client_->find(m.buffer);
  if (!buf) return eng.fail(client_, m.ticket, -ENOENT);
  if (m.offset > buf->bytes || m.length > buf->bytes - m.offset) return eng.fail(client_, m.ticket, -EINVAL);
  char* slot = client_->segment().slot(m.slot);
  char* dev = static_cast<char*>(buf->ptr) + m.offset;
  int r = download ? eng.submit(client_, m.ticket, true, slot, dev, m.length, buf)
                   : eng.submit(client_, m.ticket, false, dev, slot, m.length, buf);
  if (r != 0) eng.fail(client_, m.ticket, r);
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

void Session::queue(const void* data, size_t bytes) {
  if (closed_) return;
  if (pending_.size() + bytes > kMaxPending) {
    FERRY_LOG(warn, "closing session of pid %d: it does not read its socket", pid_);
    close();
    return;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  pending_.insert(pending_.end(), p, p + bytes);
}

void Session::flush() {
  if (closed_ || !writing_.empty()) return;
  if (pending_.empty()) {
    if (closing_after_write_) close();
    return;
  }
  writing_.swap(pending_);
  completion_at_ = SIZE_MAX;
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

}  // namespace ferry
