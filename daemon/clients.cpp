// SPDX-License-Identifier: MIT
// The daemon's clients and their segments (clients.hpp).
#include <algorithm>
#include <cerrno>

#include <boost/asio/post.hpp>

#include "clients.hpp"

namespace ferry::ferryd {

ClientRef Clients::adopt(StagingSegment seg, bool registered) {
  auto* raw = new ClientState(++next_client_);
  // The deleter gives everything back: the last reference may be the
  // session's, or a copy that finishes after the client left.
  ClientRef c(raw, [this](ClientState* p) {
    release(p);
    delete p;
  });
  clients_[raw->id()] = raw;
  resources_.client_came();
  c->adopt_segment(std::move(seg), registered);
  return c;
}

int Clients::add_client(uint32_t slots, uint64_t slot_bytes, ClientRef* out) {
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
    registered = backend_.register_host(seg.header(), seg.bytes()) == 0;
  }
  *out = adopt(std::move(seg), registered);
  return 0;
}

void Clients::add_client(uint32_t slots, uint64_t slot_bytes, std::shared_ptr<std::atomic<bool>> cancelled,
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
    return done(0, adopt(std::move(seg), registered));
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
                                 (*shared)(0, adopt(std::move(*made), reg));
                               });
                             });
  if (r == 0) return;
  // Orders are bounded: past that the Hello is served as before the pool
  // made segments on order, on this thread (slow, but never refused).
  ClientRef c;
  const int made = add_client(slots, slot_bytes, &c);
  (*shared)(made, std::move(c));
}

void Clients::release(ClientState* c) {
  c->add_slot_waits(departed_slot_waits_);
  resources_.client_gone(*c);
  // Its buffers go with the object itself, right after this: each one's
  // memory returns once no copy in flight holds it.
  if (pool_ != nullptr) {
    pool_->discard(c->take_segment(), c->registered());
  } else if (c->registered()) {
    backend_.unregister_host(c->segment().header());
  }
  clients_.erase(c->id());
}

size_t Clients::connected() const {
  size_t n = 0;
  for (const auto& [id, c] : clients_)
    if (c->connected() && c->slot_count() != 0) ++n;
  return n;
}

void Clients::publish() {
  uint32_t active = 0;
  for (const auto& [id, c] : clients_) active += c->connected() && c->slot_count() != 0 && c->active();
  // At least 1: an idle reader reads the word only as it starts to transfer.
  const uint32_t n = std::max<uint32_t>(active, 1);
  for (const auto& [id, c] : clients_)
    if (c->connected() && c->slot_count() != 0) c->segment().header()->clients.store(n, std::memory_order_relaxed);
  if (active != 0 && !idle_timer_armed_) arm_idle_check();
}

void Clients::arm_idle_check() {
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
    if (changed) publish();
    if (any && !idle_timer_armed_) arm_idle_check();
  });
}

Histogram Clients::slot_waits() const {
  Histogram h = departed_slot_waits_;
  for (const auto& [id, c] : clients_)
    if (c->connected()) c->add_slot_waits(h);
  return h;
}

}  // namespace ferry::ferryd
