// SPDX-License-Identifier: MIT
// The engine's resources: clients, the device memory lent to them, their
// event pools and grants. Every call into the backend for them is here.
#include <cerrno>
#include <cstring>

#include <algorithm>

#include <boost/asio/post.hpp>

#include "engine.hpp"

namespace ferry::ferryd {

ClientRef TransferEngine::new_client(StagingSegment seg, bool registered) {
  auto* raw = new ClientState(++next_client_);
  // The deleter gives everything back: the last reference may be the
  // session's, or a copy that finishes after the client left.
  ClientRef c(raw, [this](ClientState* p) {
    release(p);
    delete p;
  });
  clients_[raw->id()] = raw;
  ++holdings_.clients;
  c->adopt_segment(std::move(seg), registered);
  return c;
}

int TransferEngine::add_client(uint32_t slots, uint64_t slot_bytes, ClientRef* out) {
  // Made ahead by the pool's thread where it can: a segment costs milliseconds.
  // Registered once, for the client's whole life: copies from it then skip
  // the per-call import a pageable source costs. The pool's segments come
  // registered (that takes milliseconds on CUDA too).
  StagingSegment seg;
  bool registered = false;
  if (pool_ != nullptr && pool_->take(slots, slot_bytes, &seg, &registered)) {
    ++stats_.segments_pooled;
  } else if (int r = seg.create(slots, slot_bytes); r != 0) {
    return r;
  } else {
    ++stats_.segments_made;
    // The whole segment, header included: the device writes the timeline there.
    registered = backend_->register_host(seg.header(), seg.bytes()) == 0;
  }
  *out = new_client(std::move(seg), registered);
  return 0;
}

void TransferEngine::add_client(uint32_t slots, uint64_t slot_bytes, std::shared_ptr<std::atomic<bool>> cancelled,
                                ClientDone done) {
  StagingSegment seg;
  bool registered = false;
  if (pool_ == nullptr || pool_->take(slots, slot_bytes, &seg, &registered)) {
    ClientRef c;
    if (pool_ == nullptr) {
      const int r = add_client(slots, slot_bytes, &c);
      return done(r, std::move(c));
    }
    ++stats_.segments_pooled;
    return done(0, new_client(std::move(seg), registered));
  }
  // None ready: the pool's thread makes this one, and the io thread goes on
  // serving everyone else meanwhile; the Hello is answered when it is made.
  // `done` holds the session: it must be run and destroyed on this thread,
  // so the order hands its only reference over to the posted handler (were
  // the pool's copy the last one, the session would end on the pool's
  // thread, inside the pool's lock).
  auto shared = std::make_shared<ClientDone>(std::move(done));
  const int r = pool_->order(slots, slot_bytes, cancelled,
                             [this, cancelled, shared](int r, StagingSegment s, bool reg) mutable {
                               auto made = std::make_shared<StagingSegment>(std::move(s));
                               boost::asio::post(io_, [this, cancelled, shared = std::move(shared), r, made, reg] {
                                 if (r == 0 && cancelled->load()) {
                                   pool_->discard(std::move(*made), reg);
                                   return (*shared)(-ECANCELED, nullptr);
                                 }
                                 if (r != 0) return (*shared)(r, nullptr);
                                 ++stats_.segments_ordered;
                                 (*shared)(0, new_client(std::move(*made), reg));
                               });
                             });
  if (r == 0) return;
  // Orders are bounded: past that the Hello is served as before the pool
  // made segments on order, on this thread (slow, but never refused).
  ClientRef c;
  const int made = add_client(slots, slot_bytes, &c);
  (*shared)(made, std::move(c));
}

void TransferEngine::release(ClientState* c) {
  c->add_slot_waits(departed_slot_waits_);
  grants_.revoke(c->id(), 0, nullptr, true);  // its grants end with it, and its buffers go
  for (const auto& [id, backend_id] : c->event_pools()) backend_->close_event_pool(backend_id);
  // Its buffers go with the object itself, right after this: each one's
  // memory returns once no copy in flight holds it.
  if (pool_ != nullptr) {
    pool_->discard(c->take_segment(), c->registered());
  } else if (c->registered()) {
    backend_->unregister_host(c->segment().header());
  }
  clients_.erase(c->id());
  --holdings_.clients;
}

size_t TransferEngine::connected_clients() const {
  size_t n = 0;
  for (const auto& [id, c] : clients_)
    if (c->connected() && c->slot_count() != 0) ++n;
  return n;
}

void TransferEngine::publish_clients() {
  uint32_t active = 0;
  for (const auto& [id, c] : clients_) active += c->connected() && c->slot_count() != 0 && c->active();
  // At least 1: an idle reader reads the word only as it starts to transfer.
  const uint32_t n = std::max<uint32_t>(active, 1);
  for (const auto& [id, c] : clients_)
    if (c->connected() && c->slot_count() != 0) c->segment().header()->clients.store(n, std::memory_order_relaxed);
  if (active != 0 && !idle_timer_armed_) arm_idle_check();
}

void TransferEngine::arm_idle_check() {
  idle_timer_armed_ = true;
  idle_timer_.expires_after(kIdleCheck);
  idle_timer_.async_wait([this](const boost::system::error_code& ec) {
    idle_timer_armed_ = false;
    if (ec) return;
    bool changed = false, any = false;
    for (const auto& [id, c] : clients_) {
      const bool was = c->active();
      const bool now = c->still_active();
      changed = changed || was != now;
      any = any || now;
    }
    if (changed) publish_clients();
    if (any && !idle_timer_armed_) arm_idle_check();
  });
}

Histogram TransferEngine::slot_waits() const {
  Histogram h = departed_slot_waits_;
  for (const auto& [id, c] : clients_)
    if (c->connected()) c->add_slot_waits(h);
  return h;
}

BufferRef TransferEngine::lend(void* ptr, uint64_t bytes, bool imported) {
  ++holdings_.buffers;
  holdings_.device_bytes += bytes;
  auto* raw = new Buffer;
  raw->ptr = ptr;
  raw->bytes = bytes;
  raw->imported = imported;
  return BufferRef(raw, [this](Buffer* b) {
    // Every copy into it retired: no device write to its fence is queued.
    if (b->fence != 0)
      if (auto owner = b->owner.lock()) owner->give_fence(b->fence);
    if (b->imported) {
      backend_->release_import(b->ptr);
    } else {
      backend_->free(b->ptr);
    }
    --holdings_.buffers;
    holdings_.device_bytes -= b->bytes;
    delete b;
  });
}

int TransferEngine::alloc(ClientState& c, uint64_t bytes, uint64_t* id, uint32_t* fence) {
  if (device_lost_) return -ENODEV;
  if (bytes == 0) return -EINVAL;
  if (int r = within(c, Quota::memory, bytes); r != 0) return r;
  if (int r = within(c, Quota::buffers); r != 0) return r;
  void* p = nullptr;
  if (int r = backend_->alloc(bytes, &p); r != 0) return r;
  BufferRef b = lend(p, bytes, false);
  b->charged = bytes;
  b->owner = c.weak_from_this();
  b->fence = c.take_fence();
  if (fence != nullptr) *fence = b->fence;
  *id = c.adopt(std::move(b));
  return 0;
}

int TransferEngine::free(ClientState& c, uint64_t id) {
  bool owned = false;
  if (int r = c.remove(id, &owned); r != 0) return r;
  if (owned) grants_.revoke(c.id(), id, nullptr, true);  // a freed buffer takes its grants with it
  return 0;
}

int TransferEngine::import_buffer(ClientState& c, const IpcHandle& h, uint64_t bytes, uint64_t* id) {
  if (bytes == 0) return -EINVAL;
  if (int r = within(c, Quota::imports); r != 0) return r;
  void* p = nullptr;
  uint64_t mapped = 0;
  if (int r = backend_->import_buffer(h, bytes, &p, &mapped); r != 0) return r;
  // The whole mapping counts against the user's memory, whatever it named.
  if (int r = within(c, Quota::memory, mapped); r != 0) {
    backend_->release_import(p);
    return r;
  }
  BufferRef b = lend(p, bytes, true);
  b->charged = mapped;
  *id = c.adopt(std::move(b));
  return 0;
}

int TransferEngine::export_buffer(ClientState& c, uint64_t id, IpcHandle* h, uint64_t* bytes) {
  auto b = c.owned(id);
  if (!b || b->imported) return -ENOENT;
  if (int r = backend_->export_buffer(b->ptr, h); r != 0) return r;
  b->exported = true;
  *bytes = b->bytes;
  return 0;
}

int TransferEngine::open_event_pool(ClientState& c, const IpcHandle& h, uint32_t count, uint64_t* id) {
  if (int r = within(c, Quota::event_pools); r != 0) return r;
  uint64_t backend_id = 0;
  if (int r = backend_->open_event_pool(h, count, &backend_id); r != 0) return r;
  *id = c.add_event_pool(backend_id);
  return 0;
}

int TransferEngine::grant(ClientState& c, uint64_t buffer, uint32_t rights, Token* token) {
  auto b = c.owned(buffer);
  const uint32_t all = proto::kRightUpload | proto::kRightDownload;
  if (!b || b->imported) return -ENOENT;  // only the owner of an allocation grants it
  if (rights == 0 || (rights & ~all) != 0) return -EINVAL;
  if (int r = within(c, Quota::grants); r != 0) return r;
  *token = grants_.add(b, c.id(), buffer, rights)->token;
  return 0;
}

int TransferEngine::revoke(ClientState& c, uint64_t buffer, const uint8_t* token, size_t* n) {
  *n = 0;
  if (!c.owned(buffer)) return -ENOENT;
  *n = grants_.revoke(c.id(), buffer, token);
  return *n == 0 && token != nullptr ? -ENOENT : 0;
}

int TransferEngine::open(ClientState& c, const uint8_t* token, uint64_t* id, uint64_t* bytes, uint32_t* rights) {
  auto g = grants_.find(token);
  if (!g) return -EACCES;  // a forged or revoked token: nothing
  if (int r = within(c, Quota::opens); r != 0) return r;
  if (int r = c.open(g, id, bytes); r != 0) return r;
  *rights = g->rights;
  return 0;
}

Usage TransferEngine::usage(uid_t uid) const {
  Usage u;
  for (const auto& [id, c] : clients_) {
    if (c->uid != uid) continue;
    u.clients += c->connected();
    u.buffers += c->allocated();
    u.device_bytes += c->device_bytes();
    u.grants += grants_.count(id);
    u.opens += c->opened();
    u.imports += c->imported();
    u.event_pools += c->event_pools().size();
  }
  return u;
}

int TransferEngine::within(const ClientState& c, Quota q, uint64_t bytes) {
  auto refuse = [&](std::string why) {
    refusal_ = std::move(why);
    return -EDQUOT;
  };
  const Usage u = usage(c.uid);
  const std::string who = "uid " + std::to_string(c.uid);  // for a refusal's text
  if (q == Quota::memory) {
    const uint64_t bound = limits_.user_memory;
    if (bound == 0 || (bytes <= bound && u.device_bytes <= bound - bytes)) return 0;
    return refuse(who + " holds " + std::to_string(u.device_bytes) + " B of device memory; " +
                  std::to_string(bytes) + " B more would pass --user-memory " + std::to_string(bound));
  }
  if (q == Quota::buffers && limits_.max_buffers_total != 0) {
    const uint64_t total = limits_.max_buffers_total;
    if (holdings_.buffers >= total) {
      refused_total_.note("allocation refused: all users together hold --max-buffers-total allocations");
      return refuse("all users together hold " + std::to_string(holdings_.buffers) +
                    " allocations (--max-buffers-total " + std::to_string(total) + ")");
    }
    if (!c.admin && u.buffers >= limits_.share_of(total))
      return refuse(who + " holds " + std::to_string(u.buffers) + " allocations, its most of --max-buffers-total " +
                    std::to_string(total) + " (--user-share " + std::to_string(limits_.user_share) + "%)");
  }
  struct Bound {
    uint64_t have, most;
    const char* what;
    const char* flag;
  };
  const Bound b = q == Quota::buffers  ? Bound{u.buffers, limits_.max_buffers, "allocations", "--max-buffers"}
                : q == Quota::grants   ? Bound{u.grants, limits_.max_grants, "grants", "--max-grants"}
                : q == Quota::opens    ? Bound{u.opens, limits_.max_opens, "buffers opened through grants", "--max-opens"}
                : q == Quota::imports  ? Bound{u.imports, limits_.max_imports, "imported allocations", "--max-imports"}
                                       : Bound{u.event_pools, limits_.max_event_pools, "IPC event pools", "--max-event-pools"};
  if (b.have < b.most) return 0;
  return refuse(who + " holds " + std::to_string(b.have) + " " + b.what + ", the most one user may (" + b.flag + " " +
                std::to_string(b.most) + ")");
}

}  // namespace ferry::ferryd
