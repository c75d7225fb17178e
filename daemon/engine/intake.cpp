// SPDX-License-Identifier: MIT
// The engine's polling side: clients' submission rings, finished copies
// reaped without a wait, and the descriptors that wake the data thread while
// the poller sleeps (each client's doorbell, the device's eventfd). Data
// thread only.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "engine/engine.hpp"
#include "engine/idle.hpp"

namespace ferry::ferryd {

using boost::asio::posix::stream_descriptor;

int TransferEngine::use_ring(const ClientRef& c) {
  // A socket pair, not an eventfd: the two ends are two open files, so
  // nothing the client does to its end (clear O_NONBLOCK, read the count
  // back) reaches ferryd's, and a peer that went is seen (end of file).
  // Both ends' buffers are the smallest the kernel gives: a byte rings.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return -errno;
  const int small = 1;
  ::setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  ::setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  c->window().took(0);  // the ring starts at ticket 1
  // A client that joins while the poller sleeps must ring its first entry in.
  c->segment().header()->doorbell.store(asleep_ ? 1 : 0, std::memory_order_seq_cst);
  rings_.push_back({c, std::make_shared<Bell>(io_, sv[0])});
  listen(rings_.back().bell, c);
  return sv[1];
}

void TransferEngine::client_gone(const ClientRef& c) {
  // What it published before it went is still its to send (a producer's
  // last upload, which a consumer's queue may wait for): now, or, for an
  // entry that waits for room, once a large transfer of its retires. Not
  // what its process publishes later.
  drain_ring(c);
  c->window().close_at(last_published(c));
  c->disconnect();
  // Its staging areas served its own queue only; ferryd lets them go, but
  // they count against its user while any process holds a file of them.
  resources_.areas_gone(*c);
  auto it = std::find_if(rings_.begin(), rings_.end(), [&](const Ring& r) { return r.c == c; });
  if (it == rings_.end()) return;
  boost::system::error_code ec;
  it->bell->d.close(ec);
  it->bell->pause.cancel();
  *it = std::move(rings_.back());
  rings_.pop_back();
}

void TransferEngine::listen(std::shared_ptr<Bell> bell, std::weak_ptr<ClientState> client) {
  Bell& b = *bell;
  b.d.async_wait(stream_descriptor::wait_read, [this, bell = std::move(bell), client = std::move(client)](
                                                   const boost::system::error_code& ec) mutable {
    if (ec) return;  // closed: the client went
    // All it queued, whatever the descriptor's flags (a client may raise its
    // send buffer to megabytes): one wake-up per burst, not one per few
    // hundred bytes. 0: the client closed its end and rings no more
    // (listening on would spin on end of file).
    static char rung[64 * 1024];
    for (int i = 0; i < 16; ++i) {
      const ssize_t n = ::recv(bell->d.native_handle(), rung, sizeof rung, MSG_DONTWAIT);
      if (n == 0) return;
      if (n < static_cast<ssize_t>(sizeof rung)) break;
    }
    ++stats_.doorbells;
    ClientRef c = client.lock();
    if (!c || !c->connected()) return;
    // A ring with nothing published since the last one (the ring's own
    // progress counts, whether this ring or the poller took the entries: a
    // client rings only when the poller said it sleeps, and the poller may
    // wake for another's socket and take the entry first): the next few
    // are heard at once, then the listening pauses, longer each time, until
    // one comes with an entry.
    drain_ring(c);
    const uint64_t next = c->window().next();
    bell->idle_rings = next != bell->seen ? 0 : bell->idle_rings + 1;
    bell->seen = next;
    const auto pause = IdlePolicy::doorbell_pause(bell->idle_rings);
    if (pause.count() == 0) return listen(std::move(bell), std::move(client));
    Bell& again = *bell;
    again.pause.expires_after(pause);
    again.pause.async_wait([this, bell = std::move(bell), client = std::move(client)](
                               const boost::system::error_code& e) mutable {
      if (!e) listen(std::move(bell), std::move(client));
    });
  });
}

void TransferEngine::listen_device() {
  device_bell_.async_wait(stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;
    uint64_t done = 0;
    [[maybe_unused]] ssize_t r = ::read(device_bell_.native_handle(), &done, sizeof done);
    ++stats_.device_wakes;
    reap_now();
    rest();
    listen_device();
  });
}

namespace {
// Copies ring entry e out of shared memory, every word once, before any is
// looked at: the client may be rewriting it right now, and only this copy
// counts. Returns nullptr, or why the entry is no transfer.
const char* take_entry(const proto::SubmitEntry& e, uint64_t ticket, Entry* out) {
  static_cast<proto::Transfer&>(*out) = proto::read_entry(e);
  out->ticket = ticket;
  if ((out->flags & ~proto::kTransferLastPiece) != 0) return "ring entry with unknown flags";
  // Only the kinds that have them keep their values (a plain upload is
  // never held by a stray `after`).
  if (out->kind != proto::Type::upload_after && out->kind != proto::Type::upload_fenced) out->after = 0;
  if (out->kind != proto::Type::upload_signal && out->kind != proto::Type::upload_fenced) out->pool = out->event = 0;
  switch (out->kind) {
    case proto::Type::upload: case proto::Type::download: case proto::Type::upload_fenced: return nullptr;
    case proto::Type::upload_after:
      return out->after == 0 ? "ring entry upload_after with no value to wait for" : nullptr;
    case proto::Type::upload_signal:
      return out->event > UINT32_MAX ? "ring entry with an event index past 32 bits" : nullptr;
    default: return "ring entry of a kind that is no transfer";
  }
}
}  // namespace

uint64_t TransferEngine::last_published(const ClientRef& c) {
  Window& w = c->window();
  if (c->ring_broken() || c->segment().header() == nullptr) return w.next() - 1;
  const proto::SubmitEntry* ring = c->segment().ring();
  const uint32_t count = c->ring_entries();
  uint64_t t = w.next();
  for (uint32_t i = 0; i < count && ring[(t - 1) % count].ticket.load(std::memory_order_acquire) == t; ++i) ++t;
  return t - 1;
}

size_t TransferEngine::drain_ring(const ClientRef& c) {
  if (c->ring_broken() || c->segment().header() == nullptr) return 0;
  Window& w = c->window();
  w.set_waiting(false);
  proto::SubmitEntry* ring = c->segment().ring();
  const uint32_t count = c->ring_entries();
  size_t n = 0;
  // At most one round of the ring per call: past it the window check refuses anyway.
  for (uint32_t i = 0; i < count && w.next() <= w.last(); ++i) {
    const uint64_t t = w.next();
    proto::SubmitEntry& slot = ring[(t - 1) % count];
    if (slot.ticket.load(std::memory_order_acquire) != t) break;  // not published yet
    Entry e;
    const char* why = take_entry(slot, t, &e);
    // Past the large transfers' bound the entry waits in the ring (untaken,
    // read again once one retires: retire()).
    if (why == nullptr && !w.room_for(e.length)) {
      w.set_waiting(true);
      break;
    }
    w.took(t);
    ++stats_.ring_entries;
    if (why == nullptr) why = transfer(c, e);
    if (why != nullptr) {
      // The ring is the client's to break, and only its own session ends.
      c->break_ring();
      if (auto sink = c->sink.lock()) sink->broken(why);
      return n;
    }
    ++n;
  }
  return n;
}

size_t TransferEngine::poll() {
  size_t n = 0;
  for (Ring& r : rings_) n += drain_ring(r.c);
  if (!holds_.empty()) n += holds_.poll();
  return n + reap_now();
}

void TransferEngine::rest() {
  if (asleep_ && !polled_) backend_->arm(device_bell_.native_handle());
}

size_t TransferEngine::reap_now() {
  std::vector<Done>& batch = reaped_;
  batch.clear();
  if (records_.empty()) return 0;
  // No wait: the backend only asks the device which of its oldest copies ended.
  backend_->reap(batch);
  if (batch.empty()) return 0;
  retire(batch);
  return batch.size();
}

bool TransferEngine::sleep_begin() {
  // A hold that came or moved lately is likely answered soon (the
  // application's queue is running the kernels it waits for): the poller
  // stays awake for it rather than leaving it to a timer and a wake-up.
  if (holds_.near()) return false;
  asleep_ = true;
  for (const Ring& r : rings_) r.c->segment().header()->doorbell.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // An entry published before a client could see the flag is found here.
  if (poll() != 0) {
    sleep_end();
    return false;
  }
  backend_->arm(device_bell_.native_handle());
  // Held transfers are looked at by a timer while the poller sleeps.
  holds_.clear_idle_wake();
  holds_.arm();
  backend_->trim();  // what a burst made and nothing used for a while
  ++stats_.poller_sleeps;
  return true;
}

void TransferEngine::sleep_end() {
  asleep_ = false;
  for (const Ring& r : rings_) r.c->segment().header()->doorbell.store(0, std::memory_order_relaxed);
}

}  // namespace ferry::ferryd
