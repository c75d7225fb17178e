// SPDX-License-Identifier: MIT
// Uploads and downloads through the client's slots.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "client.hpp"
#include "gather.hpp"
#include "pieces.hpp"
#include "stage_copy.hpp"
#include "staging_plan.hpp"
#include "tsan.hpp"

namespace ferry::client {

// Threads that stage one large upload, this one included (thread_share).
uint64_t staging_threads(ferry_client* c) {
  return thread_share(c->stager.workers() + 1, c->seg->staging_threads.load(std::memory_order_relaxed));
}

StagingPlan plan_for(ferry_client* c, uint64_t bytes, uint64_t piece_cap) {
  StagingInput in{bytes, piece_cap != 0 ? piece_cap : c->slot_bytes, c->tickets.idle(), 1};
  if (wants_threads(in, tuning())) in.threads = staging_threads(c);
  return plan_staging(in, tuning());
}

namespace {

// One transfer of `ticket`, as the daemon takes it: an entry in the
// submission ring (and its doorbell only if ferryd's poller sleeps).
int submit(ferry_client* c, uint64_t ticket, const proto::Transfer& t) {
  proto::write_entry(c->ring[(ticket - 1) % c->ring_entries], ticket, t);
  // The daemon sets `doorbell` before its last look at the ring: either it
  // sees this entry, or this sees the flag (proto::Segment::doorbell).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (c->seg->doorbell.load(std::memory_order_relaxed) == 0) return 0;
  return c->conn.ring();
}

}  // namespace

int check_range(ferry_client* c, uint64_t buf, uint64_t offset, uint64_t bytes, const char* fn) {
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

void remember_buffer(ferry_client* c, uint64_t buf, uint64_t bytes, uint32_t fence) {
  std::lock_guard lock(c->buffers_mu);
  c->buffer_sizes[buf] = bytes;
  if (fence != 0) c->fences[buf] = fence;
}

void forget_buffer(ferry_client* c, uint64_t buf) {
  std::lock_guard lock(c->buffers_mu);
  c->buffer_sizes.erase(buf);
  c->fences.erase(buf);
  c->opened.erase(buf);
}

uint32_t fence_of(ferry_client* c, uint64_t buf) {
  std::lock_guard lock(c->buffers_mu);
  auto it = c->fences.find(buf);
  return it == c->fences.end() ? 0 : it->second;
}

namespace {
// The call's own arguments, before anything is touched.
int check_upload(const ferry_iovec* src, size_t count, const UploadOptions& o, const char* fn) {
  if (src == nullptr) return misuse(-EFAULT, fn, "the source ranges are NULL");
  if (count == 0) return misuse(-EINVAL, fn, "no source ranges (count is 0)");
  if (o.signal && (o.after != 0 || o.fenced))
    return misuse(-EINVAL, fn, "an event signal cannot be combined with after or fences");
  return 0;
}

// The ring entry of piece p of an upload of `pieces` pieces: its kind and
// values by the call's options (its ticket is the upload's first plus p.index).
proto::Transfer piece_entry(const UploadOptions& o, uint64_t pieces, uint64_t dst, uint64_t dst_offset,
                            const Piece& p) {
  const bool last = p.index + 1 == pieces;
  proto::Transfer s{proto::Type::upload, 0, p.staging, p.length, dst, dst_offset + p.offset};
  if (last) s.flags = proto::kTransferLastPiece;  // the call is counted by it
  if (o.signal && last) {
    // The last piece carries the event: the in-order queue signals it
    // after every earlier piece.
    s.kind = proto::Type::upload_signal;
    s.pool = o.pool;
    s.event = o.event;
  } else if (o.fenced) {
    // Every piece waits for the values, as below; the last publishes.
    s.kind = proto::Type::upload_fenced;
    s.after = o.after;
    s.pool = o.release;
    s.event = last ? o.publish : 0;
  } else if (o.after != 0) {
    // Every piece waits for the value: pieces staged by several threads
    // may reach the daemon in any order.
    s.kind = proto::Type::upload_after;
    s.after = o.after;
  }
  return s;
}
}  // namespace

int upload(ferry_client* c, uint64_t dst, uint64_t dst_offset, const ferry_iovec* src, size_t count,
           const UploadOptions& o, ferry_ticket* out) {
  const char* fn = o.signal ? "ferry_upload_signal" : count == 1 ? "ferry_upload" : "ferry_upload_gather";
  if (int r = check_upload(src, count, o, fn); r != 0) return r;
  Gather from;
  if (int r = from.init(src, count); r != 0) return r;
  const uint64_t bytes = from.bytes();
  if (int r = check_range(c, dst, dst_offset, bytes, fn); r != 0) return r;
  const StagingPlan plan = plan_for(c, bytes);
  // Every piece's ticket is taken now, in one run, so the last one is known
  // before any is sent: the upload's outcome is that of all its pieces.
  Turn turn;
  if (int r = c->tickets.take(plan.pieces, false, &turn); r != 0) return r;
  // Each piece, staged, becomes a ring entry; with a signal, the last piece
  // goes last, after the others were sent.
  auto entry = [&](const Piece& p) {
    return submit(c, turn.ticket + p.index, piece_entry(o, plan.pieces, dst, dst_offset, p));
  };
  if (int r = stage_pieces(c, plan, bytes, turn, from, Destination{}, true, o.signal, entry); r != 0) return r;
  if (out != nullptr) *out = turn.ticket + plan.pieces - 1;
  return 0;
}

// A reservation this client made and has not used: its ticket issued here,
// its bytes in this client's staging area where the reservation says.
// Used up here (the ticket leaves the open set) when it is.
static int own_reservation(ferry_client* c, const ferry_reservation* r, const char* fn) {
  const StagingFifo& fifo = c->fifo;
  if (r->ticket > c->tickets.issued() || r->staging > fifo.staging_bytes() ||
      r->bytes > fifo.staging_bytes() - r->staging || r->data != fifo.staging() + r->staging)
    return misuse(-EINVAL, fn, "the reservation is not this client's (made by another ferry_client, or altered)");
  uint64_t open = r->ticket;
  if (!c->reserved[r->ticket % c->ring_entries].compare_exchange_strong(open, 0, std::memory_order_acq_rel))
    return misuse(-EINVAL, fn, "the reservation was used already (a copy of one committed or cancelled)");
  return 0;
}

int reserve(ferry_client* c, uint64_t bytes, ferry_reservation* r) {
  if (r == nullptr) return misuse(-EFAULT, "ferry_upload_reserve", "the reservation is NULL");
  if (bytes == 0) return misuse(-EINVAL, "ferry_upload_reserve", "0 bytes");
  if (bytes > c->slot_bytes)
    return misuse(-EMSGSIZE, "ferry_upload_reserve",
                  std::to_string(bytes) + " bytes is more than a staging slot holds (" + std::to_string(c->slot_bytes) +
                      "): reserve at most ferry_get_info's slot_bytes, or use ferry_upload");
  Turn turn;
  uint64_t at = 0;
  if (int e = c->tickets.take(1, false, &turn); e != 0) return e;
  if (int e = c->fifo.place(turn, bytes, c->conn.timeout_ms(), &at); e != 0) return e;
  const uint64_t t = turn.ticket;
  c->reserved[t % c->ring_entries].store(t, std::memory_order_release);
  *r = ferry_reservation{c->fifo.staging() + at, bytes, t, at};
  return 0;
}

int commit(ferry_client* c, ferry_reservation* r, uint64_t dst, uint64_t dst_offset, ferry_ticket* out) {
  if (r == nullptr) return misuse(-EFAULT, "ferry_upload_commit", "the reservation is NULL");
  if (r->ticket == 0)
    return misuse(-EINVAL, "ferry_upload_commit", "the reservation was used already (committed or cancelled)");
  if (int e = own_reservation(c, r, "ferry_upload_commit"); e != 0) return e;
  const uint64_t t = r->ticket;
  // Sent whatever the range: the daemon takes tickets in order, and fails
  // this one on its own if the range is wrong.
  const int range = check_range(c, dst, dst_offset, r->bytes, "ferry_upload_commit");
  FERRY_SLOT_HANDED_ON(c->fifo.staging());
  const proto::Transfer s{proto::Type::upload, proto::kTransferLastPiece, r->staging, r->bytes, dst, dst_offset};
  r->ticket = 0;
  r->data = nullptr;
  if (int e = submit(c, t, s); e != 0) return e;
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
  const uint64_t t = r->ticket;
  const proto::Transfer s{proto::Type::upload, proto::kTransferLastPiece, r->staging, r->bytes, proto::kNoBuffer, 0};
  r->ticket = 0;
  r->data = nullptr;
  return submit(c, t, s);
}

int download(ferry_client* c, uint64_t src, uint64_t src_offset, void* dst, uint64_t bytes) {
  if (dst == nullptr) return misuse(-EFAULT, "ferry_download", "the destination is NULL");
  if (int r = check_range(c, src, src_offset, bytes, "ferry_download"); r != 0) return r;
  Tickets& tickets = c->tickets;
  StagingFifo& fifo = c->fifo;
  char* to = static_cast<char*>(dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(c->slot_bytes, bytes - done);
    Turn turn;
    if (int r = tickets.take(1, false, &turn); r != 0) return r;
    const uint64_t t = turn.ticket;
    uint64_t at = 0;
    if (int r = fifo.place(turn, n, c->conn.timeout_ms(), &at); r != 0) return r;
    fifo.hold(turn.place);  // before the ticket can complete: no upload may reuse the bytes until we read them
    int r = submit(c, t, proto::Transfer{proto::Type::download, 0, at, n, src, src_offset + done});
    // One slot's copy: a daemon that does not finish it in the timeout stalled.
    if (r == 0) r = tickets.wait(t, int64_t{c->conn.timeout_ms()} * 1'000'000);
    if (r == -ETIMEDOUT) tickets.ended(-ETIMEDOUT);
    if (r == 0) std::memcpy(to + done, fifo.staging() + at, n);
    fifo.release(turn.place);
    if (r != 0) return r;
    done += n;
  }
  return 0;
}

}  // namespace ferry::client
