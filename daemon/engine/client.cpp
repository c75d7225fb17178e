// SPDX-License-Identifier: MIT
#include "engine/client.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>

namespace ferry::ferryd {

int ClientState::create_segment(uint32_t slots, uint64_t slot_bytes) {
  StagingSegment seg;
  if (int r = seg.create(slots, slot_bytes); r != 0) return r;
  adopt_segment(std::move(seg), false);
  return 0;
}

void ClientState::adopt_segment(StagingSegment seg, bool registered) {
  registered_ = registered;
  const uint32_t slots = seg.slot_count();
  const uint64_t slot_bytes = seg.slot_bytes();
  segment_ = std::move(seg);
  slot_count_ = slots;
  slot_bytes_ = slot_bytes;
  window_.reset(slots, slot_bytes);
  free_fences_.clear();
  for (uint32_t f = proto::kFences; f >= 1; --f) free_fences_.push_back(f);
}

uint32_t ClientState::take_fence() {
  if (free_fences_.empty() || segment_.header() == nullptr) return 0;
  const uint32_t f = free_fences_.back();
  free_fences_.pop_back();
  proto::Fence* w = fence_words(f);
  w->ready.store(0, std::memory_order_relaxed);
  w->released.store(0, std::memory_order_relaxed);
  w->failed.store(0, std::memory_order_relaxed);
  return f;
}

void ClientState::give_fence(uint32_t fence) {
  if (fence != 0 && fence <= proto::kFences) free_fences_.push_back(fence);
}

void ClientState::wake(bool only_due) {
  proto::Segment* seg = segment_.header();
  if (seg == nullptr) return;
  if (only_due) {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // our stores before the loads (wake_sleepers)
    if (seg->sleepers.load(std::memory_order_relaxed) == 0 ||
        window_.completed() < seg->wake_at.load(std::memory_order_relaxed))
      return;
    seg->wake_at.store(UINT64_MAX, std::memory_order_relaxed);
  }
  proto::wake_sleepers(*seg);
}

uint64_t ClientState::adopt(BufferRef b) {
  const uint64_t id = ++next_buffer_;
  device_bytes_ += b->charged;
  if (b->imported) ++imported_;
  buffers_[id].owned = std::move(b);
  return id;
}

int ClientState::open(const std::shared_ptr<GrantInfo>& g, uint64_t* id, uint64_t* bytes) {
  auto b = g->buffer.lock();
  if (!b || g->revoked) return -EACCES;
  *id = ++next_buffer_;
  buffers_[*id].grant = g;
  ++opened_;
  *bytes = b->bytes;
  return 0;
}

int ClientState::remove(uint64_t id, bool* was_owned) {
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return -ENOENT;
  *was_owned = it->second.owned != nullptr;
  // An exported buffer's charge stays with its user's exports
  // (Resources::export_buffer), not with this client.
  const Buffer* b = it->second.owned.get();
  if (b != nullptr) device_bytes_ -= b->charged;
  if (b != nullptr && b->imported) --imported_;
  if (!*was_owned) --opened_;
  buffers_.erase(it);  // device memory goes once copies in flight to it end
  return 0;
}

BufferRef ClientState::owned(uint64_t id) const {
  auto it = buffers_.find(id);
  return it == buffers_.end() ? nullptr : it->second.owned;
}

BufferRef ClientState::find(uint64_t id, uint32_t rights, int* err) const {
  auto it = buffers_.find(id);
  if (it == buffers_.end()) {
    *err = -ENOENT;
    return nullptr;
  }
  if (it->second.owned) return it->second.owned;
  const GrantInfo& g = *it->second.grant;
  if (g.freed) {
    *err = -ENOENT;  // its owner freed it: the buffer is gone, as for one's own
    return nullptr;
  }
  if (g.revoked || (g.rights & rights) != rights) {
    *err = -EACCES;
    return nullptr;
  }
  auto b = g.buffer.lock();
  if (!b) *err = -ENOENT;
  return b;
}

uint64_t ClientState::add_event_pool(uint64_t backend_id) {
  const uint64_t id = ++next_pool_;
  event_pools_[id] = backend_id;
  return id;
}

bool ClientState::event_pool(uint64_t id, uint64_t* backend_id) const {
  auto it = event_pools_.find(id);
  if (it == event_pools_.end()) return false;
  *backend_id = it->second;
  return true;
}

const char* ClientState::check_transfer(uint64_t ticket, uint64_t at, uint64_t length) const {
  if (const char* why = window_.check(ticket, length)) return why;
  const uint64_t area = segment_.staging_bytes();
  if (at > area || length > area - at) return "transfer outside the staging area";
  return nullptr;
}

void ClientState::record_failure(uint64_t ticket, int error) {
  ++failures_;
  ++stats_.errors;
  proto::Segment* seg = segment_.header();
  if (seg == nullptr) return;
  // Stored, never read back: the client may scribble on these words, and
  // fools only itself if it does.
  proto::Result& r = segment_.results()[(ticket - 1) % window_.entries()];
  r.error.store(error, std::memory_order_relaxed);
  r.ticket.store(ticket, std::memory_order_release);
  seg->failures.store(failures_, std::memory_order_release);
}

void ClientState::publish(bool host_writes_device_word) {
  proto::Segment* seg = segment_.header();
  if (seg == nullptr) return;
  seg->completed.store(window_.completed(), std::memory_order_release);
  if (host_writes_device_word) seg->device_completed.store(window_.completed(), std::memory_order_release);
  wake(true);  // only once `completed` reached what a sleeper waits for (wake_at)
}

void ClientState::hold(const Held& h) {
  window_.hold(h.e.ticket);
  held_.push_back(h);
}

uint64_t ClientState::app_value() const {
  const proto::Segment* seg = segment_.header();
  return seg == nullptr ? 0 : seg->app_value.load(std::memory_order_acquire);
}

bool ClientState::hold_over(const Held& h) const {
  if (h.e.after != 0 && app_value() < h.e.after) return false;
  if (h.release() == 0) return true;
  auto owner = h.fence_owner.lock();
  // Its owner gone, the buffer is too: the transfer goes on, to fail.
  if (!owner || !owner->connected() || owner->segment().header() == nullptr) return true;
  return owner->fence_words(h.fence)->released.load(std::memory_order_acquire) >= h.release();
}

void ClientState::add_slot_waits(Histogram& h) const {
  if (segment_.header() == nullptr) return;
  const auto* m = reinterpret_cast<const proto::ClientMetrics*>(reinterpret_cast<const char*>(segment_.header()) +
                                                                proto::kClientMetricsOffset);
  // One copy of each word: the client may rewrite them while we look.
  Histogram mine;
  mine.count = m->slot_waits.load(std::memory_order_relaxed);
  mine.sum_ns = m->slot_wait_ns.load(std::memory_order_relaxed);
  uint64_t total = 0;
  for (size_t i = 0; i < proto::kLatencyBuckets; ++i) {
    mine.buckets[i] = m->buckets[i].load(std::memory_order_relaxed);
    if (mine.buckets[i] > mine.count) return;
    total += mine.buckets[i];
  }
  const auto age = std::chrono::steady_clock::now() - steady_since;
  const auto age_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(age).count());
  if (total != mine.count || mine.count > transfers_ + window_.entries()) return;
  if (mine.count != 0 && mine.sum_ns / mine.count > age_ns) return;
  h.count += mine.count;
  h.add_sum(mine.sum_ns);
  for (size_t i = 0; i < proto::kLatencyBuckets; ++i) h.buckets[i] += mine.buckets[i];
}

ClientState::Direct ClientState::direct() const {
  Direct d;
  if (segment_.header() == nullptr) return d;
  const auto* w = reinterpret_cast<const proto::DirectWords*>(reinterpret_cast<const char*>(segment_.header()) +
                                                              proto::kDirectOffset);
  // One copy of each word: the client may rewrite them while we look.
  d.uploads = w->uploads.load(std::memory_order_relaxed);
  d.bytes = w->bytes.load(std::memory_order_relaxed);
  const uint64_t issued = w->issued.load(std::memory_order_relaxed);
  const uint64_t done = w->completed.load(std::memory_order_relaxed);
  d.in_flight = std::min<uint64_t>(issued > done ? issued - done : 0, uint64_t{window_.entries()} * 8);
  return d;
}

ClientState::Run ClientState::run() const {
  Run r;
  if (segment_.header() == nullptr) return r;
  const auto* w = reinterpret_cast<const proto::RunWords*>(reinterpret_cast<const char*>(segment_.header()) +
                                                           proto::kRunOffset);
  const uint32_t role = w->role.load(std::memory_order_relaxed);
  if (role != proto::kRunLead && role != proto::kRunLane) return r;
  r.role = role;
  RunCounts now;
  now.staged = w->staged.load(std::memory_order_relaxed);
  now.staged_bytes = w->staged_bytes.load(std::memory_order_relaxed);
  now.passed_bytes = w->passed_bytes.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < proto::kPassReasons; ++i) now.passed[i] = w->passed[i].load(std::memory_order_relaxed);
  run_high_.keep_max(now);
  r.counts = run_high_;
  return r;
}

void ClientState::set_daemon_state(uint32_t s) {
  if (proto::Segment* seg = segment_.header()) seg->daemon_state.store(s, std::memory_order_release);
}

}  // namespace ferry::ferryd
