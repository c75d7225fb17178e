// SPDX-License-Identifier: MIT
// The engine, in the order of one copy: its intake (clients' submission
// rings, finished copies reaped without a wait, and the descriptors that wake
// the data thread while the poller sleeps: each client's doorbell, the
// device's eventfd), then the copy path (check a transfer, queue it on the
// backend, and retire it when the device reports it done). Data thread only,
// but where a function says otherwise.
#include "engine/engine.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>

#include "engine/idle.hpp"
#include "log.hpp"

namespace ferry::ferryd {

namespace {
int device_eventfd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd for the device's completions");
  return fd;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
}  // namespace


TransferEngine::TransferEngine(boost::asio::io_context& io, std::unique_ptr<Backend> backend)
    : io_(io),
      device_bell_(io, device_eventfd()),
      backend_(std::move(backend)),
      device_writes_(backend_->info().device_writes) {
  listen_device();
}

TransferEngine::~TransferEngine() { stop(); }

uint32_t TransferEngine::doorbell_idle_rings(const ClientState& c) const {
  for (const Ring& r : rings_)
    if (r.c.get() == &c) return r.bell->idle_rings;
  return 0;
}

TransferEngine::Kept TransferEngine::kept() const {
  Kept k;
  k.client_states = clients_.all().size();
  k.departed_clients = clients_.departed();
  k.holders = holds_.holders();
  k.held_transfers = holds_.held();
  k.rings = rings_.size();
  k.copies_in_flight = records_.size();
  k.grants = resources_.grants();
  k.export_rows = resources_.exporters().size();
  k.departed_area_charges = resources_.departed_area_charges();
  k.area_watches = resources_.area_watches();
  k.run_rows = clients_.run_totals().rows().size();
  k.run_exited = clients_.run_totals().recent().size();
  k.segments = clients_.pool_counts();
  return k;
}

void TransferEngine::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  device_bell_.cancel(ec);  // stays open until the backend's waiter is gone
  for (Ring& r : rings_) {
    r.bell->d.close(ec);
    r.bell->pause.cancel();
  }
  rings_.clear();
  holds_.drop_all();
  holds_.stop();
  clients_.stop();
  if (!records_.empty()) {
    // Copies still queued past --drain read their client's segment and write
    // its buffer: what they hold must outlive them. ferryd then ends without
    // tearing the device down (main), so their records are let go of without
    // releasing anything; the driver ends the copies with the process.
    FERRY_LOG(warn, "%zu copies still in flight at exit: left to the driver", records_.size());
    new std::deque<Record>(std::move(records_));  // NOLINT: deliberately never freed
  }
}

const char* TransferEngine::transfer(const ClientRef& c, const Entry& e) {
  // Breaking the slot protocol is a broken client: its session closes.
  if (const char* why = c->check_transfer(e.ticket, e.staging, e.length)) return why;
  ClientState::Held h;
  h.e = e;
  if (e.fenced() && e.pool != 0) {
    // The fence released is the destination's: found now, for the hold. A
    // buffer the client may not upload into holds nothing; issue() fails
    // its ticket.
    int err = 0;
    if (BufferRef b = c->find(e.buffer, proto::kRightUpload, &err); b && b->fence != 0) {
      h.fence_owner = b->owner;
      h.fence = b->fence;
    }
  }
  // Behind an earlier hold, or before its own values: kept here, on the
  // host, never as a wait in the device's queue that every client shares.
  if (!c->held().empty() || !c->hold_over(h)) {
    holds_.add(c, h);
    return nullptr;
  }
  issue(c, e);
  return nullptr;
}

void TransferEngine::issue(const ClientRef& c, const Entry& e) {
  if (e.buffer == proto::kNoBuffer && e.kind == proto::Type::upload) return fail(c, e.ticket, 0);  // nothing to copy
  // A wrong buffer or range is the caller's mistake: fail that ticket only.
  int err = 0;
  BufferRef buf = c->find(e.buffer, e.download() ? proto::kRightDownload : proto::kRightUpload, &err);
  if (!buf) return fail(c, e.ticket, err);
  // An upload_fenced's publish: into the fence the buffer has now.
  FenceWrite fence;
  if (e.fenced()) {
    ClientRef owner = buf->owner.lock();
    // An owner that left takes its buffers along, even while its state drains.
    if (owner && !owner->connected()) return fail(c, e.ticket, -ENOENT);
    if (buf->fence == 0 || !owner) return fail(c, e.ticket, -ENOTSUP);  // no fence (an import, say)
    if (e.event != 0) fence = FenceWrite{std::move(owner), buf->fence, e.event};
  }
  const FenceWrite* fp = fence.value != 0 ? &fence : nullptr;
  if (e.offset > buf->bytes || e.length > buf->bytes - e.offset) return fail(c, e.ticket, -EINVAL, fp);
  Signal signal;
  if (e.signal()) {
    if (!c->event_pool(e.pool, &signal.pool)) return fail(c, e.ticket, -ENOENT);
    signal.index = static_cast<uint32_t>(e.event);
  }
  // The cores are shared among clients that stage with threads: those whose
  // uploads are that large, into buffers they may write (not small or
  // buffer-less entries, nor ones that copy nothing).
  if (!e.download() && c->note_upload(e.length, e.last_piece())) clients_.publish();
  char* slot = c->segment().slots_begin() + e.staging;
  // CUDA device addresses are not host pointers: plain integer arithmetic.
  auto* dev = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(buf->ptr) + e.offset);
  int r = e.download() ? submit(c, e.ticket, true, slot, dev, e.length, buf)
                       : submit(c, e.ticket, false, dev, slot, e.length, buf, e.signal() ? &signal : nullptr,
                                e.last_piece(), fp);
  if (r != 0) fail(c, e.ticket, r, fp);
}

int TransferEngine::submit(const ClientRef& client, uint64_t ticket, bool download, void* dst, const void* src,
                           uint64_t bytes, BufferRef buffer, const Signal* signal, bool last_piece,
                           const FenceWrite* fence) {
  if (device_lost_) return -ENODEV;
  const uint64_t cookie = next_cookie_++;
  // Record first: the device may finish the copy before submit returns; its
  // completion is reaped on this thread, after we return.
  records_.push_back({cookie, client, std::move(buffer), ticket, bytes, download, last_piece, now_ns()});
  Record& rec = records_.back();
  if (fence != nullptr) rec.fence = *fence;
  Window& win = client->window();
  win.start(ticket, bytes);
  const uint64_t before = win.frontier();
  DeviceWrites w;
  const bool own = timeline_write(*client, &w);
  rec.fence_on_device = fence != nullptr && device_can_write(*fence->owner);
  if (rec.fence_on_device) add_fence_write(*fence, &w);
  int r = backend_->submit(dst, src, bytes, cookie, signal, w.n != 0 ? &w : nullptr);
  if (r == -ENOTSUP && w.n != 0) {
    // The device cannot write these words: the copy goes alone, and the
    // retire path keeps them (this client's timeline from now on).
    if (own) {
      client->keep_timeline_on_host();
      win.reset_frontier(before);
    }
    rec.fence_on_device = false;
    r = backend_->submit(dst, src, bytes, cookie, signal, nullptr);
  }
  if (r != 0) {
    records_.pop_back();
    win.unstart(ticket, bytes);
    win.reset_frontier(before);
    return r;
  }
  ++stats_.in_flight;
  stats_.in_flight_bytes += bytes;
  rest();
  return 0;
}

// A refused ticket is reported at once: its Result is written before the
// device (or the retire path) can pass it. status 0: a ticket with nothing
// to copy, done as it is.
void TransferEngine::fail(const ClientRef& client, uint64_t ticket, int status, const FenceWrite* fence) {
  client->window().start(ticket, 0);
  if (status != 0) {
    client->record_failure(ticket, status);
    ++stats_.failed;
  }
  settle(client, ticket, 0, 0);  // no copy left the device: no room for a waiting ring
  // The fence's owner reads of the failure first, then (like the frontier,
  // if it moved) the fence's value comes after the copies before it.
  if (fence != nullptr) mark_failed(*fence);
  const FenceWrite* on_device = fence != nullptr && device_can_write(*fence->owner) ? fence : nullptr;
  // The device's word passes this ticket after the copies before it: with
  // the next copy's write, or one write of its own. One such write per
  // client at a time (a stream of cancelled tickets queues one, not one
  // each); the retire path sends the next if the frontier moved meanwhile.
  if (on_device == nullptr && client->marks.lone_write) {
    if (fence != nullptr) write_fence(*fence, false);
    return;
  }
  if (!queue_lone_write(client, on_device) && fence != nullptr) write_fence(*fence, false);
}

bool TransferEngine::queue_lone_write(const ClientRef& c, const FenceWrite* fence) {
  DeviceWrites w;
  const bool own = timeline_write(*c, &w);
  if (fence != nullptr) add_fence_write(*fence, &w);
  if (w.n == 0) return false;
  const uint64_t cookie = next_cookie_++;
  records_.push_back({cookie, c, nullptr, 0, 0, false, false, now_ns()});  // ticket 0: the writes alone
  if (fence != nullptr) {
    records_.back().fence = *fence;
    records_.back().fence_on_device = true;
  }
  if (backend_->submit(nullptr, nullptr, 0, cookie, nullptr, &w) == 0) {
    ++stats_.in_flight;
    c->marks.lone_write = true;
    rest();
    return true;
  }
  records_.pop_back();
  if (own) {
    c->keep_timeline_on_host();  // the retire path keeps the word from now on
    c->publish(true);
  }
  return false;
}

void TransferEngine::write_fence(const FenceWrite& f, bool failed) {
  if (!f.owner || f.owner->segment().header() == nullptr) return;
  if (failed) mark_failed(f);
  f.owner->fence_words(f.fence)->ready.store(f.value, std::memory_order_release);
  f.owner->wake_sleepers();
}

void TransferEngine::mark_failed(const FenceWrite& f) {
  if (f.owner && f.owner->segment().header() != nullptr)
    f.owner->fence_words(f.fence)->failed.store(f.value, std::memory_order_release);
}

bool TransferEngine::timeline_write(ClientState& c, DeviceWrites* w) {
  uint64_t v = 0;
  if (!device_writes_ || !c.registered() || c.host_timeline() || !c.window().advance_frontier(&v)) return false;
  auto* word = reinterpret_cast<uint64_t*>(&c.segment().header()->device_completed);
  w->add(word, c.segment().device_address(word), v);
  return true;
}

void TransferEngine::add_fence_write(const FenceWrite& f, DeviceWrites* w) {
  auto* word = reinterpret_cast<uint64_t*>(&f.owner->fence_words(f.fence)->ready);
  w->add(word, f.owner->segment().device_address(word), f.value);
}

// The one place a ticket's outcome goes out: the client's window, the
// Result records of failed copies, then the segment's timeline words.
// Whether a large transfer left while the client's ring waits for one.
bool TransferEngine::settle(const ClientRef& client, uint64_t ticket, uint64_t bytes, int status) {
  Failed failed;
  const Window::Retired r = client->window().finish(ticket, bytes, status, failed);
  for (const auto& [t, error] : failed) client->record_failure(t, error);
  stats_.failed += failed.size();
  if (r.moved) client->publish(!device_writes_ || !client->registered() || client->host_timeline());
  return r.room;
}

// The fence's owner hears of the copy once it is done: from the device's
// own write (its sleepers are woken now), or from this one.
void TransferEngine::fence_done(const Record& r, int status) {
  if (!r.fence.owner) return;
  if (r.fence_on_device && status == 0) {
    r.fence.owner->wake_sleepers();
  } else {
    write_fence(r.fence, status != 0);
  }
}

// A transfer done well, counted for the daemon and its client.
void TransferEngine::count_done(const Record& r) {
  ClientStats& cs = r.client->stats();
  if (r.download) {
    ++stats_.downloads;
    ++cs.downloads;
    return;
  }
  // A call is counted when its last piece is done (a device queue runs a
  // client's pieces in order); pieces apart.
  stats_.uploads += r.last_piece;
  ++stats_.upload_pieces;
  stats_.upload_bytes += r.bytes;
  stats_.upload_latency.add(now_ns() - r.submitted_ns);
  cs.uploads += r.last_piece;
  ++cs.upload_pieces;
  cs.upload_bytes += r.bytes;
}

void TransferEngine::retire(const std::vector<Done>& batch) {
  std::vector<ClientRef> room;  // rings waiting for a large transfer to retire, now with room
  for (const Done& d : batch) {
    if (records_.empty() || records_.front().cookie != d.cookie) {
      FERRY_LOG(error, "retire: completion %llu out of order", static_cast<unsigned long long>(d.cookie));
      continue;
    }
    Record r = std::move(records_.front());
    records_.pop_front();
    --stats_.in_flight;
    stats_.in_flight_bytes -= r.bytes;
    fence_done(r, d.status);
    if (r.ticket == 0) {  // timeline writes alone
      if (d.status != 0) device_writes_ = false;
      r.client->marks.lone_write = false;
      // Tickets that completed without a copy while it was queued.
      if (d.status == 0) queue_lone_write(r.client, nullptr);
      continue;
    }
    if (d.status == 0) count_done(r);
    // A queue that failed a copy writes no more: the retire path keeps every
    // client's device word from now on, so waits on it still end.
    if (d.status != 0) device_writes_ = false;
    if (settle(r.client, r.ticket, r.bytes, d.status)) room.push_back(r.client);
    if (d.status != 0 && !device_lost_ && backend_->lost()) {
      device_lost_ = true;
      resources_.device_lost();
      FERRY_LOG(error, "the device is lost: every later transfer and allocation is refused (-ENODEV); "
                       "restart ferryd once the device is back");
    }
  }
  // Their next entries went untaken for want of room: taken now.
  for (const ClientRef& c : room) drain_ring(c);
}

// ---- intake: the rings, the doorbells, the device's eventfd

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
