// SPDX-License-Identifier: MIT
// Uploads and downloads through the client's slots.
#include <algorithm>
#include <thread>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "client.hpp"
#include "gather.hpp"
#include "stage_copy.hpp"
#include "tsan.hpp"

namespace ferry::client {

namespace {

// How much of an upload goes in one slot. An upload of a few slots or less is
// cut into at least min_pieces() pieces (of at least min_piece() bytes) so that
// staging the next piece overlaps with the device copying this one. Every
// piece costs the daemon a submission (on CUDA a copy, a timeline write and
// an event, a few µs), so pieces are at least 256 KiB: an upload up to that
// is one piece. Four pieces, not two: with four, uploads from 1 MiB stage on
// the thread pool, which measured 1 MiB at 7.3-8.1 GB/s against 4.7 with two
// (H200 machine). $FERRY_MIN_PIECES changes the count.
uint64_t min_piece() {
  static const uint64_t v = [] {
    const char* e = std::getenv("FERRY_MIN_PIECE");  // bytes, for measuring
    const unsigned long long n = e != nullptr ? std::strtoull(e, nullptr, 10) : 0;
    return n >= 4096 ? static_cast<uint64_t>(n) : uint64_t{256 * 1024};
  }();
  return v;
}
uint64_t min_pieces() {
  static const uint64_t v = [] {
    const char* e = std::getenv("FERRY_MIN_PIECES");
    const unsigned long long n = e != nullptr ? std::strtoull(e, nullptr, 10) : 0;
    return n != 0 && n <= 64 ? static_cast<uint64_t>(n) : uint64_t{4};
  }();
  return v;
}
uint64_t piece_bytes(uint64_t slot_bytes, uint64_t bytes) {
  const uint64_t k = min_pieces();
  if (bytes >= k * slot_bytes) return slot_bytes;
  uint64_t p = (bytes + k - 1) / k;
  p = (p + 4095) / 4096 * 4096;
  return std::min(slot_bytes, std::max(p, min_piece()));
}

// An upload the staging threads share is cut into at least two pieces per
// thread (of at least min_piece()): with 4 MiB slots, 16 MiB in 4 slot-sized
// pieces kept 4 of 8 threads busy (11 GB/s on the H200 machine), in 1 MiB
// pieces all 8 (30 GB/s). Larger uploads keep whole
// slots, where more pieces cost more than they win.
// Threads that stage one large upload, this one included: the pool's, unless
// several clients of ferryd transfer at once (proto::Segment::clients; idle
// ones do not count): then a share of the host's cores each (a quarter of the
// cores per client), as 4 producers of 8 threads each on 32 cores reached
// 18 GB/s together, of 2 threads each 35 GB/s (H200 machine).
uint64_t staging_threads(ferry_client* c) {
  const uint64_t pool = c->stager.workers() + 1;
  const uint32_t clients = c->seg->clients.load(std::memory_order_relaxed);
  if (clients <= 1) return pool;
  static const uint64_t cores = std::thread::hardware_concurrency();  // a system call: once
  const uint64_t share = cores / (4 * uint64_t{clients});
  return std::clamp<uint64_t>(share, 1, pool);
}

uint64_t parallel_piece(uint64_t slot_bytes, uint64_t bytes, uint64_t threads) {
  uint64_t p = (bytes + 2 * threads - 1) / (2 * threads);
  p = (p + 4095) / 4096 * 4096;
  return std::min(slot_bytes, std::max(p, min_piece()));
}

// The first piece of an upload made alone: a quarter of a piece, at least
// this ($FERRY_FIRST_PIECE bytes; 0: the first piece is as the rest).
uint64_t first_piece_from() {
  static const uint64_t v = [] {
    const char* e = std::getenv("FERRY_FIRST_PIECE");
    return e != nullptr ? static_cast<uint64_t>(std::strtoull(e, nullptr, 10)) : uint64_t{64 * 1024};
  }();
  return v;
}

// An upload up to this size, made while nothing else of the client's is in
// flight, stages with plain stores: it lands at the staging area's start
// (Timeline::place), in bytes the last such upload left in the CPU's cache,
// where streaming stores would push them out to memory first.
constexpr uint64_t kHotBelow = 2ull << 20;

// Streaming stores (stage_copy) pay below this upload size; above it, with
// eight staging threads, plain stores measured faster on the H200 machine
// (1 GiB: 49 against 37 GB/s; 64 MiB: 30 against 34).
constexpr uint64_t kStreamBelow = 128ull << 20;

// Uploads at least this large stage several pieces at once (see Stager).
// Measured on the H200 machine: from 1 MiB the pool
// wins (4 MiB: 4.7 -> 7.9 GB/s); at 256 KiB its wake-ups cost more than
// the copy (4.3 -> 1.7 GB/s). $FERRY_PARALLEL_FROM (bytes) moves it.
uint64_t parallel_from() {
  static const uint64_t v = [] {
    const char* e = std::getenv("FERRY_PARALLEL_FROM");
    const unsigned long long n = e != nullptr ? std::strtoull(e, nullptr, 10) : 0;
    return n != 0 ? static_cast<uint64_t>(n) : uint64_t{1} << 20;
  }();
  return v;
}

// One transfer of ticket t, as the daemon takes it: an entry in the
// submission ring (and a Doorbell only if ferryd's poller sleeps).
struct Submit {
  proto::Type type;
  uint64_t staging;  // byte offset in the staging area (Timeline::place)
  uint64_t ticket, length, buffer, offset;
  uint64_t after = 0;         // upload_after, upload_fenced
  uint64_t pool = 0;          // upload_signal; upload_fenced: release
  uint64_t event = 0;         // upload_signal; upload_fenced: publish
  uint32_t flags = 0;         // proto::kTransferLastPiece
};

int submit(ferry_client* c, const Submit& s) {
  const auto staging = static_cast<uint32_t>(s.staging / proto::kStagingAlign);
  proto::SubmitEntry& e = c->ring[(s.ticket - 1) % c->ring_entries];
  e.type.store(static_cast<uint64_t>(s.type) | uint64_t{s.flags} << 16 | uint64_t{staging} << 32,
               std::memory_order_relaxed);
  e.length.store(s.length, std::memory_order_relaxed);
  e.buffer.store(s.buffer, std::memory_order_relaxed);
  e.offset.store(s.offset, std::memory_order_relaxed);
  e.after.store(s.after, std::memory_order_relaxed);
  e.pool.store(s.pool, std::memory_order_relaxed);
  e.event.store(s.event, std::memory_order_relaxed);
  e.ticket.store(s.ticket, std::memory_order_release);
  // The daemon sets `doorbell` before its last look at the ring: either it
  // sees this entry, or this sees the flag (proto::Segment::doorbell).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (c->seg->doorbell.load(std::memory_order_relaxed) == 0) return 0;
  auto m = proto::make<proto::Doorbell>(proto::Type::doorbell);
  return c->conn.send(&m, sizeof m);
}

}  // namespace

int check_range(ferry_client* c, ferry_buffer buf, uint64_t offset, uint64_t bytes, const char* fn) {
  if (bytes == 0) return misuse(-EINVAL, fn, "0 bytes (nothing to copy)");
  std::lock_guard lock(c->buffers_mu);
  auto it = c->buffer_sizes.find(buf);
  if (it == c->buffer_sizes.end())
    return misuse(-ENOENT, fn,
                  "buffer " + std::to_string(buf) + " is not one of this client's (freed, or never allocated or opened)");
  if (offset > it->second || bytes > it->second - offset)  // no wrap: offset <= size first
    return misuse(-ERANGE, fn,
                  "offset " + std::to_string(offset) + " + " + std::to_string(bytes) + " bytes is past the end of buffer " +
                      std::to_string(buf) + " (" + std::to_string(it->second) + " bytes)");
  return 0;
}

void remember_buffer(ferry_client* c, ferry_buffer buf, uint64_t bytes, uint32_t fence) {
  std::lock_guard lock(c->buffers_mu);
  c->buffer_sizes[buf] = bytes;
  if (fence != 0) c->fences[buf] = fence;
}

void forget_buffer(ferry_client* c, ferry_buffer buf) {
  std::lock_guard lock(c->buffers_mu);
  c->buffer_sizes.erase(buf);
  c->fences.erase(buf);
}

uint32_t fence_of(ferry_client* c, ferry_buffer buf) {
  std::lock_guard lock(c->buffers_mu);
  auto it = c->fences.find(buf);
  return it == c->fences.end() ? 0 : it->second;
}

int upload(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const ferry_iovec* src, size_t count,
           const UploadOptions& o, ferry_ticket* out) {
  const bool signal = o.signal;
  const uint64_t after = o.after;
  const char* fn = signal ? "ferry_upload_signal" : count == 1 ? "ferry_upload" : "ferry_upload_gather";
  if (src == nullptr) return misuse(-EFAULT, fn, "the source ranges are NULL");
  if (count == 0) return misuse(-EINVAL, fn, "no source ranges (count is 0)");
  if (signal && (after != 0 || o.fenced))
    return misuse(-EINVAL, fn, "an event signal cannot be combined with after or fences");
  Gather from;
  if (int r = from.init(src, count); r != 0) return r;
  const uint64_t bytes = from.bytes();
  if (int r = check_range(c, dst, dst_offset, bytes, fn); r != 0) return r;
  Timeline& tl = c->timeline;
  // Alone (nothing else in flight) and small enough for the cache: one
  // thread, plain stores into the bytes the last such upload used. On the
  // H200 machine 1 MiB so took 54-56 µs to stage against 66-78 on the pool.
  const bool hot = bytes <= kHotBelow && tl.completed() >= tl.issued();
  const bool stream = bytes < kStreamBelow && !hot;
  uint64_t piece = piece_bytes(c->slot_bytes, bytes);
  const uint64_t threads = bytes >= parallel_from() && !hot ? staging_threads(c) : 1;
  if (threads > 1) piece = std::min(piece, parallel_piece(c->slot_bytes, bytes, threads));
  // An upload alone (hot) starts with a small piece (a quarter of a piece):
  // the device starts copying once it is staged, not a whole piece; in a
  // stream the device has earlier pieces to copy meanwhile anyway. H200
  // machine, 256 KiB: 64 KiB then 192 KiB 0.86-1.00x
  // pageable cudaMemcpy, one piece 0.72-0.79x; a small last piece as well
  // (64, 128, 64) 0.74-0.76x, and 32 KiB first 0.66-0.70x: each piece costs
  // ferryd a submission (copy, timeline write, event).
  const uint64_t fp = first_piece_from();
  const uint64_t small = hot && threads == 1 && fp != 0 ? std::min(piece, std::max(fp, piece / 4)) : piece;
  const uint64_t lead = small < piece && bytes > small ? small : 0;  // 0: all pieces alike
  const uint64_t pieces = lead == 0 ? (bytes + piece - 1) / piece : 1 + (bytes - lead + piece - 1) / piece;
  // Where piece i starts.
  auto offset_of = [&](uint64_t i) -> uint64_t { return lead == 0 ? i * piece : i == 0 ? 0 : lead + (i - 1) * piece; };
  // Every piece's ticket is taken now, in one run, so the last one is known
  // before any is sent: the upload's outcome is that of all its pieces.
  uint64_t first = 0;
  if (int r = tl.take(pieces, &first); r != 0) return r;
  // Piece i: wait for its slot, stage it, send it. While one piece is staged
  // the device copies earlier ones; large uploads stage several at once.
  auto one = [&](uint64_t i) {
    const uint64_t t = first + i;
    const uint64_t off = offset_of(i);
    const uint64_t n = (i + 1 == pieces ? bytes : offset_of(i + 1)) - off;
    uint64_t at = 0;
    if (int r = tl.place(t, n, c->conn.timeout_ms(), &at); r != 0) return r;
    from.copy(tl.staging() + at, off, n, stream);
    FERRY_SLOT_HANDED_ON(tl.staging());
    Submit s{proto::Type::upload, at, t, n, dst, dst_offset + off};
    if (i + 1 == pieces) s.flags = proto::kTransferLastPiece;  // the call is counted by it
    if (signal && i + 1 == pieces) {
      // The last piece carries the event: the in-order queue signals it
      // after every earlier piece.
      s.type = proto::Type::upload_signal;
      s.pool = o.pool;
      s.event = o.event;
    } else if (o.fenced) {
      // Every piece waits for the values, as below; the last publishes.
      s.type = proto::Type::upload_fenced;
      s.after = after;
      s.pool = o.release;
      s.event = i + 1 == pieces ? o.publish : 0;
    } else if (after != 0) {
      // Every piece waits for the value: pieces staged by several threads
      // may reach the daemon in any order.
      s.type = proto::Type::upload_after;
      s.after = after;
    }
    return submit(c, s);
  };
  int r = 0;
  // With a signal, the last piece goes last, after the others were sent.
  const uint64_t parallel = signal ? pieces - 1 : pieces;
  if (parallel >= 4 && threads > 1) {
    r = c->stager.run(parallel, one, threads - 1);
  } else {
    for (uint64_t i = 0; i < parallel && r == 0; ++i) r = one(i);
  }
  if (r == 0 && signal) r = one(pieces - 1);
  if (r != 0) return r;
  if (out != nullptr) *out = first + pieces - 1;
  return 0;
}

// A reservation this client made and has not used: its ticket issued here,
// its bytes in this client's staging area where the reservation says.
static int own_reservation(ferry_client* c, const ferry_reservation* r, const char* fn) {
  const Timeline& tl = c->timeline;
  if (r->ticket > tl.issued() || r->staging > tl.staging_bytes() || r->bytes > tl.staging_bytes() - r->staging ||
      r->data != tl.staging() + r->staging)
    return misuse(-EINVAL, fn, "the reservation is not this client's (made by another ferry_client, or altered)");
  return 0;
}

int reserve(ferry_client* c, uint64_t bytes, ferry_reservation* r) {
  if (r == nullptr) return misuse(-EFAULT, "ferry_upload_reserve", "the reservation is NULL");
  if (bytes == 0) return misuse(-EINVAL, "ferry_upload_reserve", "0 bytes");
  if (bytes > c->slot_bytes)
    return misuse(-EMSGSIZE, "ferry_upload_reserve",
                  std::to_string(bytes) + " bytes is more than a staging slot holds (" + std::to_string(c->slot_bytes) +
                      "): reserve at most ferry_get_info's slot_bytes, or use ferry_upload");
  Timeline& tl = c->timeline;
  uint64_t t = 0, at = 0;
  if (int e = tl.take(1, &t); e != 0) return e;
  if (int e = tl.place(t, bytes, c->conn.timeout_ms(), &at); e != 0) return e;
  *r = ferry_reservation{tl.staging() + at, bytes, t, at};
  return 0;
}

int commit(ferry_client* c, ferry_reservation* r, ferry_buffer dst, uint64_t dst_offset, ferry_ticket* out) {
  if (r == nullptr) return misuse(-EFAULT, "ferry_upload_commit", "the reservation is NULL");
  if (r->ticket == 0)
    return misuse(-EINVAL, "ferry_upload_commit", "the reservation was used already (committed or cancelled)");
  if (int e = own_reservation(c, r, "ferry_upload_commit"); e != 0) return e;
  Timeline& tl = c->timeline;
  const uint64_t t = r->ticket;
  // Sent whatever the range: the daemon takes tickets in order, and fails
  // this one on its own if the range is wrong.
  const int range = check_range(c, dst, dst_offset, r->bytes, "ferry_upload_commit");
  FERRY_SLOT_HANDED_ON(tl.staging());
  Submit s{proto::Type::upload, r->staging, t, r->bytes, dst, dst_offset};
  s.flags = proto::kTransferLastPiece;
  r->ticket = 0;
  r->data = nullptr;
  if (int e = submit(c, s); e != 0) return e;
  if (out != nullptr) *out = t;
  return range;
}

int cancel(ferry_client* c, ferry_reservation* r) {
  if (r == nullptr) return misuse(-EFAULT, "ferry_upload_cancel", "the reservation is NULL");
  if (r->ticket == 0)
    return misuse(-EINVAL, "ferry_upload_cancel", "the reservation was used already (committed or cancelled)");
  if (int e = own_reservation(c, r, "ferry_upload_cancel"); e != 0) return e;
  // The ticket still goes out, in order: an upload to buffer 0
  // (proto::kNoBuffer), which the daemon completes without a copy.
  Submit s{proto::Type::upload, r->staging, r->ticket, r->bytes, 0, 0};
  s.flags = proto::kTransferLastPiece;
  r->ticket = 0;
  r->data = nullptr;
  return submit(c, s);
}

int download(ferry_client* c, ferry_buffer src, uint64_t src_offset, void* dst, uint64_t bytes) {
  if (dst == nullptr) return misuse(-EFAULT, "ferry_download", "the destination is NULL");
  if (int r = check_range(c, src, src_offset, bytes, "ferry_download"); r != 0) return r;
  Timeline& tl = c->timeline;
  char* to = static_cast<char*>(dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(c->slot_bytes, bytes - done);
    uint64_t t = 0;
    if (int r = tl.take(1, &t); r != 0) return r;
    uint64_t at = 0;
    if (int r = tl.place(t, n, c->conn.timeout_ms(), &at); r != 0) return r;
    tl.hold(t);  // before the ticket can complete: no upload may reuse the bytes until we read them
    int r = submit(c, Submit{proto::Type::download, at, t, n, src, src_offset + done});
    // One slot's copy: a daemon that does not finish it in the timeout stalled.
    if (r == 0) r = tl.wait(t, int64_t{c->conn.timeout_ms()} * 1'000'000);
    if (r == -ETIMEDOUT) tl.ended(-ETIMEDOUT);
    if (r == 0) std::memcpy(to + done, tl.staging() + at, n);
    tl.release(t);
    if (r != 0) return r;
    done += n;
  }
  return 0;
}

}  // namespace ferry::client
