// SPDX-License-Identifier: MIT
#include "net/requests.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "log.hpp"
#include "admin/status.hpp"
#include "net/admission.hpp"

namespace ferry::ferryd {

namespace {
unsigned long long ull(uint64_t v) { return v; }  // for %llu

// Replies with a descriptor a client may leave queued in ferryd at once, and
// bytes it may leave unread in its socket (descriptors written wait there,
// charged to ferryd's user): past either, Exports are answered -EAGAIN.
constexpr size_t kMaxQueuedFds = 16;
constexpr size_t kMaxUnreadBytes = 16 * 1024;

// The client chooses its name: only printable ASCII reaches logs, the status
// document, ferryctl's terminal and metric labels; anything else becomes '?'.
std::string printable(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7e) ch = '?';
  return s;
}

// Copies a message out of the read buffer (which has no alignment promise)
// and hands it to its handler.
template <class Msg>
Answer call(Requests* r, const uint8_t* bytes, Answer (Requests::*handler)(const Msg&)) {
  Msg m;
  std::memcpy(&m, bytes, sizeof m);
  return (r->*handler)(m);
}
}  // namespace

bool Requests::client_may_send(proto::Type type) {
  using T = proto::Type;
  switch (type) {
    case T::hello: case T::status_request: case T::alloc: case T::free: case T::grant: case T::revoke:
    case T::open: case T::export_buffer: case T::import_buffer: case T::event_pool: case T::admin_request:
    case T::staging_grow: case T::staging_release:
      return true;
    default:
      return false;
  }
}

Answer Requests::handle(proto::Type type, const uint8_t* msg) {
  using T = proto::Type;
  if (!client_may_send(type)) return Answer::error(0, -EPROTO, "message type a client may not send", true);
  if (type == T::hello) return call(this, msg, &Requests::on_hello);
  if (type == T::status_request) return call(this, msg, &Requests::on_status);
  if (type == T::admin_request) return call(this, msg, &Requests::on_admin);
  // Everything else works on the client's own resources.
  if (!client_) return Answer::error(0, -EPROTO, "request before Hello", true);
  // Entries published before this message come first (a Free after an
  // upload, say): the engine takes them.
  ctx_.engine.before_request(client_);
  switch (type) {
    case T::alloc: return call(this, msg, &Requests::on_alloc);
    case T::free: return call(this, msg, &Requests::on_free);
    case T::grant: return call(this, msg, &Requests::on_grant);
    case T::revoke: return call(this, msg, &Requests::on_revoke);
    case T::open: return call(this, msg, &Requests::on_open);
    case T::export_buffer: return call(this, msg, &Requests::on_export);
    case T::import_buffer: return call(this, msg, &Requests::on_import);
    case T::event_pool: return call(this, msg, &Requests::on_event_pool);
    case T::staging_grow: return call(this, msg, &Requests::on_staging_grow);
    case T::staging_release: return call(this, msg, &Requests::on_staging_release);
    default: return {};
  }
}

Answer Requests::on_hello(const proto::Hello& m) {
  if (client_) return Answer::error(0, -EPROTO, "second Hello", true);
  if (m.version != proto::kVersion) {
    // The rule (proto.hpp): exactly this version, and a refusal that says so.
    const std::string why = "libferry speaks protocol " + std::to_string(m.version) + ", this ferryd " +
                            std::to_string(proto::kVersion) + ": use the libferry of this ferryd's release";
    return Answer::error(0, -EPROTONOSUPPORT, why, true);
  }
  if (ctx_.stopping) return Answer::error(0, -ESHUTDOWN, "the daemon is stopping", true);
  // Gone already: a segment made for it would cost milliseconds of a core for
  // nothing (made, then unmapped), at whatever rate a flood connects.
  const Peer::Flow flow = peer_.flow();
  if (flow.hung_up) {
    ++ctx_.stats.hellos_gone;
    return Answer::close();
  }
  // No user but an admin takes more than its share: the rest stays for the others.
  admin_ = is_admin(ctx_.options, peer_.cred);
  if (std::optional<Answer> refused = refuse_admission(ctx_, peer_.uid, admin_)) return std::move(*refused);
  const Options& o = ctx_.options;
  TransferEngine& engine = ctx_.engine;
  // The Welcome is the first thing this session sends: it carries the segment.
  if (!flow.untouched) return Answer::error(0, -EPROTO, "Hello after other requests", true);
  const uint32_t slots = m.slots_wanted == 0 ? o.slots : std::min(m.slots_wanted, o.slots);
  // Nothing else of this session is handled until the Welcome is out; a
  // segment that is not ready is made off the io thread meanwhile.
  Peer::Later later = peer_.defer();
  ctx_.users.hello_started(peer_.uid);
  engine.clients().add_client(slots, o.slot_bytes, later.cancelled,
                              [this, answer = std::move(later.answer), m](int r, ClientRef c) {
                                answer(welcome(m, r, std::move(c)));
                              });
  return {};
}

// What a Welcome tells the client: its segment's layout, the device.
proto::Welcome Requests::welcome_message(const ClientState& c) const {
  const TransferEngine& engine = ctx_.engine;
  const DeviceInfo& info = engine.device();
  auto w = proto::make<proto::Welcome>(proto::Type::welcome);
  w.magic = proto::kMagic;
  w.version = proto::kVersion;
  w.flags = engine.device_timeline() && c.registered() ? proto::kDeviceTimeline : 0;
  w.client_id = c.id();
  w.segment_bytes = c.segment().bytes();
  w.slot_bytes = c.slot_bytes();
  w.slot_count = c.slot_count();
  w.ring_entries = c.ring_entries();
  w.slots_offset = c.segment().slots_offset();
  w.ring_offset = proto::ring_offset();
  w.fences_offset = c.segment().fences_offset();
  w.results_offset = c.segment().results_offset();
  const Limits& l = ctx_.options.limits;
  w.max_buffer_bytes = l.user_memory != 0 ? l.user_memory : info.memory_bytes;
  proto::set_text(w.device, info.name);
  proto::set_text(w.backend, info.backend);
  return w;
}

Answer Requests::welcome(const proto::Hello& m, int r, ClientRef c) {
  ctx_.users.hello_ended(peer_.uid);
  if (r == -ECANCELED) return {};  // the connection went meanwhile
  if (r != 0) return Answer::error(0, r, "cannot create the staging segment", true);
  if (ctx_.stopping) return Answer::error(0, -ESHUTDOWN, "the daemon is stopping", true);
  const Options& o = ctx_.options;
  TransferEngine& engine = ctx_.engine;
  c->pid = peer_.pid;
  c->uid = peer_.uid;
  c->admin = admin_;
  c->name = printable(proto::get_text(m.name));
  c->sink = peer_.sink();

  const proto::Welcome w = welcome_message(*c);
  const int fd = ::fcntl(c->segment().fd(), F_DUPFD_CLOEXEC, 3);
  if (fd < 0) return Answer::error(0, -errno, "cannot pass the staging segment", true);
  const int bell = engine.use_ring(c);
  if (bell < 0) {
    ::close(fd);
    c->disconnect();
    return Answer::error(0, bell, "cannot make the client's doorbell", true);
  }
  client_ = std::move(c);
  ++ctx_.stats.clients;
  engine.clients().publish();
  FERRY_LOG(info, "client %llu connected: pid %d uid %u \"%s\", %u slots of %llu bytes",
            static_cast<unsigned long long>(client_->id()), peer_.pid, peer_.uid, client_->name.c_str(),
            client_->slot_count(), static_cast<unsigned long long>(o.slot_bytes));
  return Answer::message(w, fd, bell);
}

Answer Requests::on_alloc(const proto::Alloc& m) {
  uint64_t id = 0;
  uint32_t fence = 0;
  int r = ctx_.engine.resources().alloc(*client_, m.bytes, &id, &fence);
  FERRY_LOG(debug, "client %llu: alloc %llu bytes -> %s (buffer %llu)", ull(client_->id()), ull(m.bytes),
            r == 0 ? "ok" : std::strerror(-r), ull(id));
  if (auto refused = past_bound(m.request, r)) return std::move(*refused);
  return reply(m.request, r, id, fence);
}

Answer Requests::on_free(const proto::Free& m) {
  // An import that copies in flight still hold (more than the table's and
  // `b`'s references) stays mapped until they end: answered then, for its
  // owner frees its memory once answered. The session waits meanwhile.
  auto b = client_->owned(m.buffer);
  const bool later = b && b->imported && b.use_count() > 2;
  b.reset();
  if (!later) {
    const int r = ctx_.engine.resources().free(*client_, m.buffer);
    FERRY_LOG(debug, "client %llu: free buffer %llu -> %s", ull(client_->id()), ull(m.buffer), r == 0 ? "ok" : std::strerror(-r));
    return reply(m.request, r, 0);
  }
  auto answer = std::make_shared<Peer::Later>(peer_.defer());
  auto unmapped = [answer, &io = ctx_.engine.io(), request = m.request] {  // posted: it runs inside a retire
    boost::asio::post(io, [answer, request] { answer->answer(reply(request, 0, 0)); });
  };
  if (int r = ctx_.engine.resources().free(*client_, m.buffer, unmapped); r != -EINPROGRESS)
    answer->answer(reply(m.request, r, 0));
  return {};
}

Answer Requests::on_grant(const proto::Grant& m) {
  auto r = proto::make<proto::TokenReply>(proto::Type::token_reply);
  r.request = m.request;
  Token token{};
  r.status = ctx_.engine.resources().grant(*client_, m.buffer, m.rights, &token);
  FERRY_LOG(debug, "client %llu: grant of buffer %llu (rights %u) -> %s", ull(client_->id()), ull(m.buffer), m.rights,
            r.status == 0 ? "ok" : std::strerror(-r.status));
  if (auto refused = past_bound(m.request, r.status)) return std::move(*refused);
  std::memcpy(r.token, token.data(), sizeof r.token);
  return Answer::message(r);
}

Answer Requests::on_revoke(const proto::Revoke& m) {
  static const uint8_t kZero[proto::kTokenBytes] = {};
  const bool all = std::memcmp(m.token, kZero, sizeof kZero) == 0;
  size_t n = 0;
  int r = ctx_.engine.resources().revoke(*client_, m.buffer, all ? nullptr : m.token, &n);
  FERRY_LOG(debug, "client %llu: revoke %s of buffer %llu -> %zu revoked", ull(client_->id()), all ? "all grants" : "a grant",
            ull(m.buffer), n);
  return reply(m.request, r, n);
}

Answer Requests::on_open(const proto::Open& m) {
  uint64_t id = 0, bytes = 0;
  uint32_t rights = 0;
  int r = ctx_.engine.resources().open(*client_, m.token, &id, &bytes, &rights);
  FERRY_LOG(debug, "client %llu: open through a token -> %s (buffer %llu, %llu bytes)", ull(client_->id()),
            r == 0 ? "ok" : std::strerror(-r), ull(id), ull(bytes));
  if (auto refused = past_bound(m.request, r)) return std::move(*refused);
  return buffer_reply(m.request, r, rights, id, bytes);
}

bool Requests::too_much_unread() const {
  const Peer::Flow f = peer_.flow();
  return f.queued_fds >= kMaxQueuedFds || f.unread_bytes > kMaxUnreadBytes;
}

Answer Requests::on_export(const proto::Export& m) {
  auto r = proto::make<proto::ExportReply>(proto::Type::export_reply);
  r.request = m.request;
  if (too_much_unread()) {
    r.status = -EAGAIN;
    return Answer::message(r);
  }
  IpcHandle h;
  uint64_t bytes = 0;
  bool first = false;
  Resources::ExportCharge charge;
  r.status = ctx_.engine.resources().export_buffer(*client_, m.buffer, &h, &bytes, &first, &charge);
  FERRY_LOG(debug, "client %llu: export buffer %llu -> %s", ull(client_->id()), ull(m.buffer),
            r.status == 0 ? "ok" : std::strerror(-r.status));
  if (auto refused = past_bound(m.request, r.status)) return std::move(*refused);
  // The fd travels with the reply; the client puts its own number in the handle.
  int fd = -1;
  if (r.status == 0 && h.fd >= 0) {
    fd = ::fcntl(h.fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) {
      r.status = -errno;  // out of descriptors: no success without the handle's fd
      if (first) ctx_.engine.resources().export_unsent(charge);  // nor a charge
    }
  }
  if (r.status == 0) {
    r.kind = h.kind;
    r.bytes = bytes;
    std::memcpy(r.handle, h.data, sizeof r.handle);
  }
  Answer a = Answer::message(r, fd);
  // A reply that never leaves (its session failed for it, or closed first,
  // or sendmsg refused its descriptor) charges nothing: the outbox says so.
  if (first && r.status == 0)
    a.unsent = [&resources = ctx_.engine.resources(), charge] { resources.export_unsent(charge); };
  return a;
}

IpcHandle Requests::ipc_handle(uint32_t kind, const uint8_t (&data)[proto::kIpcBytes]) {
  IpcHandle h;
  h.kind = kind;
  std::memcpy(h.data, data, sizeof h.data);
  h.fd = kind == proto::kIpcLevelZero ? peer_.take_fd() : -1;
  return h;
}

Answer Requests::on_import(const proto::Import& m) {
  IpcHandle h = ipc_handle(m.kind, m.handle);
  uint64_t id = 0;
  uint32_t fence = 0;
  int r = ctx_.engine.resources().import_buffer(*client_, h, m.bytes, &id, &fence);
  FERRY_LOG(debug, "client %llu: import of %llu bytes -> %s", ull(client_->id()), ull(m.bytes), r == 0 ? "ok" : std::strerror(-r));
  if (h.fd >= 0) ::close(h.fd);  // the driver keeps its own mapping
  if (auto refused = past_bound(m.request, r)) return std::move(*refused);
  const uint32_t rights = r == 0 ? proto::kRightUpload | proto::kRightDownload : 0;
  return buffer_reply(m.request, r, rights, id, r == 0 ? m.bytes : 0, fence);
}

Answer Requests::on_event_pool(const proto::EventPool& m) {
  IpcHandle h = ipc_handle(m.kind, m.handle);
  uint64_t id = 0;
  int r = ctx_.engine.resources().open_event_pool(*client_, h, m.count, &id);
  FERRY_LOG(debug, "client %llu: event pool of %u events -> %s", ull(client_->id()), m.count, r == 0 ? "ok" : std::strerror(-r));
  if (h.fd >= 0) ::close(h.fd);
  if (auto refused = past_bound(m.request, r)) return std::move(*refused);
  return reply(m.request, r, id);
}

Answer Requests::on_staging_grow(const proto::StagingGrow& m) {
  auto r = proto::make<proto::StagingReply>(proto::Type::staging_reply);
  r.request = m.request;
  // Its descriptor waits in ferryd until the client reads it, as an Export's.
  if (too_much_unread()) {
    r.status = -EAGAIN;
    return Answer::message(r);
  }
  int fd = -1;
  r.status = ctx_.engine.resources().grow_staging(*client_, m.bytes, &r.area, &r.bytes, &fd);
  FERRY_LOG(debug, "client %llu: staging area of %llu bytes -> %s (area %llu)", ull(client_->id()), ull(m.bytes),
            r.status == 0 ? "ok" : std::strerror(-r.status), ull(r.area));
  if (auto refused = past_bound(m.request, r.status)) return std::move(*refused);
  return Answer::message(r, fd);
}

Answer Requests::on_staging_release(const proto::StagingRelease& m) {
  return reply(m.request, ctx_.engine.resources().release_staging(*client_, m.area), 0);
}

Answer Requests::on_admin(const proto::AdminRequest& m) {
  // The same model as status: root, the daemon's user and --admin-group.
  if (!is_admin(ctx_.options, peer_.cred)) return reply(m.request, -EPERM, 0);
  if (m.action == proto::kAdminDrain) {
    FERRY_LOG(info, "drain asked by uid %u (ferryctl drain): stopping", peer_.uid);
    if (ctx_.request_stop) ctx_.request_stop();  // posted: the reply goes out first
    return reply(m.request, 0, 0);
  }
  if (m.action != proto::kAdminDisconnect) return reply(m.request, -EINVAL, 0);
  const auto& all = ctx_.engine.clients().all();
  auto it = all.find(m.client);
  if (it == all.end() || !it->second->connected()) return reply(m.request, -ENOENT, 0);
  auto sink = it->second->sink.lock();
  if (!sink) return reply(m.request, -ENOENT, 0);
  FERRY_LOG(info, "client %llu (pid %d) disconnected by uid %u (ferryctl disconnect)", ull(m.client),
            it->second->pid, peer_.uid);
  sink->end(-ECONNABORTED, "disconnected by an administrator (ferryctl disconnect)");
  return reply(m.request, 0, m.client);
}

Answer Requests::on_status(const proto::StatusRequest& m) {
  std::map<uid_t, size_t> connections;
  size_t sessions = 0;
  for (const auto& [uid, row] : ctx_.users.rows()) {
    if (row.sessions != 0) connections[uid] = row.sessions;
    sessions += row.sessions;
  }
  const size_t rows = ctx_.users.rows().size();
  std::string json =
      status_json({ctx_.engine, ctx_.options, ctx_.stats, std::move(connections), sessions, rows}, peer_.cred);
  if (json.size() > proto::kMaxStatusJson) json = "{\"error\":\"status too large\"}";
  auto h = proto::make<proto::StatusReply>(proto::Type::status_reply);
  h.request = m.request;
  h.json_bytes = static_cast<uint32_t>(json.size());
  h.h.size = static_cast<uint32_t>(sizeof h + json.size());
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  msg += json;
  return Answer::message(std::move(msg));
}

Answer Requests::reply(uint64_t request, int status, uint64_t value, uint32_t fence) {
  auto r = proto::make<proto::Reply>(proto::Type::reply);
  std::tie(r.request, r.status, r.value, r.fence) = std::tie(request, status, value, fence);
  return Answer::message(r);
}

std::optional<Answer> Requests::past_bound(uint64_t request, int status) {
  const std::string why = ctx_.engine.resources().take_refusal();
  if (status == 0 || why.empty()) return std::nullopt;
  return Answer::error(request, status, why, false);
}

Answer Requests::buffer_reply(uint64_t request, int status, uint32_t rights, uint64_t buffer, uint64_t bytes,
                              uint32_t fence) {
  auto r = proto::make<proto::BufferReply>(proto::Type::buffer_reply);
  std::tie(r.request, r.status, r.rights, r.buffer, r.bytes, r.fence) = std::tie(request, status, rights, buffer, bytes, fence);
  return Answer::message(r);
}

}  // namespace ferry::ferryd
