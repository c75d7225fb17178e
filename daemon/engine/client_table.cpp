// SPDX-License-Identifier: MIT
// The daemon's clients and their segments (client_table.hpp).
#include <algorithm>
#include <cerrno>
#include <map>
#include <thread>

#include <boost/asio/post.hpp>

#include "engine/client_table.hpp"

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
    uint64_t device = 0;
    registered = backend_.register_host(seg.header(), seg.bytes(), &device) == 0;
    seg.set_device_base(registered ? device : 0);
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
  // A process under ferry-run: its counts stay in its user's totals.
  if (const ClientState::Run run = c->run(); run.role == proto::kRunLead)
    run_totals_.fold(c->uid, c->pid, c->name, run.counts);
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

size_t Clients::departed() const {
  size_t n = 0;
  for (const auto& [id, c] : clients_) n += c->connected() ? 0 : 1;
  return n;
}

size_t Clients::connected() const {
  size_t n = 0;
  for (const auto& [id, c] : clients_)
    if (c->connected() && c->slot_count() != 0) ++n;
  return n;
}

uint32_t Clients::staging_share(uint64_t cores, uint32_t active, uint32_t users, uint32_t of_user) {
  if (active <= 1) return 0;
  const uint64_t share = cores / (4 * uint64_t{std::max(users, 1u)} * std::max(of_user, 1u));
  return static_cast<uint32_t>(std::clamp<uint64_t>(share, 1, UINT32_MAX));
}

void Clients::publish() {
  static const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::map<uid_t, uint32_t> of_user;  // clients transferring now, by user
  uint32_t active = 0;
  for (const auto& [id, c] : clients_)
    if (c->connected() && c->slot_count() != 0 && c->active()) ++of_user[c->uid], ++active;
  for (const auto& [id, c] : clients_) {
    if (!c->connected() || c->slot_count() == 0) continue;
    // An idle client reads the word as it starts to transfer: its share as one more.
    const auto mine = of_user.find(c->uid);
    const bool counted = c->active();
    const uint32_t users = static_cast<uint32_t>(of_user.size()) + (mine == of_user.end());
    const uint32_t of = (mine == of_user.end() ? 0 : mine->second) + !counted;
    auto& word = c->segment().header()->staging_threads;  // its line holds the doorbell too: stored only if new
    if (const uint32_t v = staging_share(cores, active + !counted, users, of); word.load(std::memory_order_relaxed) != v)
      word.store(v, std::memory_order_relaxed);
  }
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
