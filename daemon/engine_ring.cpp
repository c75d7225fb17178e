// SPDX-License-Identifier: MIT
// The engine's polling side: clients' submission rings, finished copies
// reaped without a wait, and the hand-over to the retire thread and to
// Doorbell messages while the poller sleeps. io thread only, except where
// said.
#include <cerrno>

#include "engine.hpp"

namespace ferry::ferryd {

void TransferEngine::use_ring(const ClientRef& c) {
  c->ring = true;
  c->ring_next = 1;
  // A client that joins while the poller sleeps must ring its first entry in.
  c->segment().header()->doorbell.store(asleep_ ? 1 : 0, std::memory_order_seq_cst);
  rings_.push_back(c);
}

size_t TransferEngine::drain_ring(const ClientRef& c) {
  if (!c->ring || c->ring_broken || !c->connected) return 0;
  proto::SubmitEntry* ring = c->segment().ring();
  const uint32_t count = c->ring_entries();
  size_t n = 0;
  // At most one round of the ring per call: past it the window check refuses anyway.
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t t = c->ring_next;
    proto::SubmitEntry& e = ring[(t - 1) % count];
    if (e.ticket.load(std::memory_order_acquire) != t) break;  // not published yet
    // Every word copied once, before any is looked at: the client may be
    // rewriting the entry right now, and only this copy counts.
    proto::UploadSignal sig{};
    proto::Transfer& m = sig.t;
    const uint64_t word = e.type.load(std::memory_order_relaxed);
    const uint64_t type = word & 0xffffu;
    m.length = e.length.load(std::memory_order_relaxed);
    m.buffer = e.buffer.load(std::memory_order_relaxed);
    m.offset = e.offset.load(std::memory_order_relaxed);
    const uint64_t after = e.after.load(std::memory_order_relaxed);
    sig.pool = e.pool.load(std::memory_order_relaxed);
    const uint64_t event = e.event.load(std::memory_order_relaxed);
    m.ticket = t;
    m.staging = static_cast<uint32_t>(word >> 32);
    m.h.type = static_cast<uint16_t>(type);
    m.flags = static_cast<uint32_t>((word >> 16) & 0xffffu);
    c->ring_next = t + 1;
    ++stats_.ring_entries;
    const char* why = nullptr;
    if ((m.flags & ~proto::kTransferLastPiece) != 0) why = "ring entry with unknown flags";
    else switch (static_cast<proto::Type>(type)) {
      case proto::Type::upload: why = transfer(c, m, false); break;
      case proto::Type::download: why = transfer(c, m, true); break;
      case proto::Type::upload_after:
        why = after == 0 ? "ring entry UploadAfter with no value to wait for" : transfer(c, m, false, TransferExtra{nullptr, after});
        break;
      case proto::Type::upload_fenced: {
        TransferExtra x;
        x.fenced = true;
        x.after = after;
        x.release = sig.pool;
        x.publish = event;
        why = transfer(c, m, false, x);
        break;
      }
      case proto::Type::upload_signal:
        if (event > UINT32_MAX) {
          why = "ring entry with an event index past 32 bits";
          break;
        }
        sig.event = static_cast<uint32_t>(event);
        why = transfer(c, m, false, TransferExtra{&sig});
        break;
      default: why = "ring entry of a type that is no transfer"; break;
    }
    if (why != nullptr) {
      // The ring is the client's to break, and only its own session ends.
      c->ring_broken = true;
      if (auto sink = c->sink.lock()) sink->broken(why);
      return n;
    }
    ++n;
  }
  return n;
}

size_t TransferEngine::poll() {
  size_t n = 0;
  for (size_t i = 0; i < rings_.size();) {
    ClientState& c = *rings_[i];
    if (!c.connected || c.ring_broken) {
      rings_[i] = std::move(rings_.back());
      rings_.pop_back();
      continue;
    }
    n += drain_ring(rings_[i]);
    ++i;
  }
  return n + reap_now();
}

size_t TransferEngine::reap_now() {
  std::vector<Done>& batch = reaped_;
  batch.clear();
  if (records_.empty()) return 0;
  // The retire thread may be inside a wait on the device: what it takes, it posts.
  std::unique_lock reaper(reap_mu_, std::try_to_lock);
  if (!reaper.owns_lock()) return 0;
  // What the retire thread took earlier comes first: it is older.
  if (done_pending_.load(std::memory_order_acquire)) {
    std::lock_guard lock(done_mu_);
    batch.swap(done_);
    done_pending_.store(false, std::memory_order_relaxed);
  }
  // No wait: the backend only asks the device which of its oldest copies ended.
  backend_->reap(batch, 0);
  reaper.unlock();
  if (batch.empty()) return 0;
  retire(batch);
  return batch.size();
}

bool TransferEngine::sleep_begin() {
  asleep_ = true;
  for (const ClientRef& c : rings_) c->segment().header()->doorbell.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // An entry published before a client could see the flag is found here.
  if (poll() != 0) {
    sleep_end();
    return false;
  }
  {
    std::lock_guard lock(retire_mu_);
    retire_wanted_ = true;
  }
  retire_cv_.notify_one();
  ++stats_.poller_sleeps;
  return true;
}

void TransferEngine::sleep_end() {
  asleep_ = false;
  {
    std::lock_guard lock(retire_mu_);
    retire_wanted_ = false;  // the retire thread finishes the wait it is in, then parks
  }
  for (const ClientRef& c : rings_) c->segment().header()->doorbell.store(0, std::memory_order_relaxed);
}

}  // namespace ferry::ferryd
