// Uploads and downloads through the client's slots.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "client.hpp"
#include "tsan.hpp"

namespace ferry::client {

namespace {

// How much of an upload goes in one slot. An upload of a few slots or less is
// cut into at least kMinPieces pieces (of at least kMinPiece bytes) so that
// staging the next piece overlaps with the device copying this one.
constexpr uint64_t kMinPieces = 4;
constexpr uint64_t kMinPiece = 64 * 1024;
uint64_t piece_bytes(uint64_t slot_bytes, uint64_t bytes) {
  if (bytes >= kMinPieces * slot_bytes) return slot_bytes;
  uint64_t p = (bytes + kMinPieces - 1) / kMinPieces;
  p = (p + 4095) / 4096 * 4096;
  return std::min(slot_bytes, std::max(p, kMinPiece));
}

// Uploads at least this large stage several pieces at once (see Stager).
constexpr uint64_t kParallelFrom = 8ull << 20;

proto::Transfer transfer_message(ferry_client* c, proto::Type type, uint64_t ticket, uint64_t length,
                                 uint64_t buffer, uint64_t offset) {
  auto m = proto::make<proto::Transfer>(type);
  m.ticket = ticket;
  m.slot = static_cast<uint32_t>((ticket - 1) % c->slot_count);
  m.length = length;
  m.buffer = buffer;
  m.offset = offset;
  return m;
}

}  // namespace

int check_range(ferry_client* c, ferry_buffer buf, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return -EINVAL;
  if (offset + bytes < offset) return -EINVAL;  // 64-bit wrap
  std::lock_guard lock(c->buffers_mu);
  auto it = c->buffer_sizes.find(buf);
  if (it == c->buffer_sizes.end()) return -ENOENT;
  if (offset > it->second || bytes > it->second - offset) return -EINVAL;
  return 0;
}

void remember_buffer(ferry_client* c, ferry_buffer buf, uint64_t bytes) {
  std::lock_guard lock(c->buffers_mu);
  c->buffer_sizes[buf] = bytes;
}

int upload(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
           const proto::UploadSignal* signal, uint64_t after, ferry_ticket* out) {
  if (c == nullptr || src == nullptr || (signal != nullptr && after != 0)) return -EINVAL;
  if (int r = check_range(c, dst, dst_offset, bytes); r != 0) return r;
  Timeline& tl = c->timeline;
  const uint64_t piece = piece_bytes(c->slot_bytes, bytes);
  const uint64_t pieces = (bytes + piece - 1) / piece;
  const char* from = static_cast<const char*>(src);
  // Every piece's ticket is taken now, in one run, so the last one is known
  // before any is sent: the upload's outcome is that of all its pieces.
  uint64_t first = 0;
  if (int r = tl.take(pieces, &first); r != 0) return r;
  // Piece i: wait for its slot, stage it, send it. While one piece is staged
  // the device copies earlier ones; large uploads stage several at once.
  auto one = [&](uint64_t i) {
    const uint64_t t = first + i;
    const uint64_t off = i * piece;
    const uint64_t n = std::min(piece, bytes - off);
    if (int r = tl.wait_slot(t, c->conn.timeout_ms()); r != 0) return r;
    std::memcpy(tl.slot_of(t), from + off, n);
    FERRY_SLOT_HANDED_ON(tl.slot_of(t));
    if (signal != nullptr && i + 1 == pieces) {
      // The last piece carries the event: the in-order queue signals it
      // after every earlier piece.
      proto::UploadSignal m = *signal;
      m.t = transfer_message(c, proto::Type::upload_signal, t, n, dst, dst_offset + off);
      m.t.h.size = sizeof m;
      return c->conn.send(&m, sizeof m);
    }
    if (after != 0) {
      // Every piece waits for the value: pieces staged by several threads
      // may reach the daemon in any order.
      proto::UploadAfter m{};
      m.t = transfer_message(c, proto::Type::upload_after, t, n, dst, dst_offset + off);
      m.t.h.size = sizeof m;
      m.after = after;
      return c->conn.send(&m, sizeof m);
    }
    auto m = transfer_message(c, proto::Type::upload, t, n, dst, dst_offset + off);
    return c->conn.send(&m, sizeof m);
  };
  int r = 0;
  // With a signal, the last piece goes last, after the others were sent.
  const uint64_t parallel = signal != nullptr ? pieces - 1 : pieces;
  if (parallel >= 4 && bytes >= kParallelFrom) {
    r = c->stager.run(parallel, one);
  } else {
    for (uint64_t i = 0; i < parallel && r == 0; ++i) r = one(i);
  }
  if (r == 0 && signal != nullptr) r = one(pieces - 1);
  if (r != 0) return r;
  if (out != nullptr) *out = first + pieces - 1;
  return 0;
}

int download(ferry_client* c, ferry_buffer src, uint64_t src_offset, void* dst, uint64_t bytes) {
  if (c == nullptr || dst == nullptr) return -EINVAL;
  if (int r = check_range(c, src, src_offset, bytes); r != 0) return r;
  Timeline& tl = c->timeline;
  char* to = static_cast<char*>(dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(c->slot_bytes, bytes - done);
    uint64_t t = 0;
    if (int r = tl.take(1, &t); r != 0) return r;
    if (int r = tl.wait_slot(t, c->conn.timeout_ms()); r != 0) return r;
    tl.hold_slot(t);  // before the ticket can complete: no upload may reuse the slot until we read it
    auto m = transfer_message(c, proto::Type::download, t, n, src, src_offset + done);
    int r = c->conn.send(&m, sizeof m);
    // One slot's copy: a daemon that does not finish it in the timeout stalled.
    if (r == 0) r = tl.wait(t, int64_t{c->conn.timeout_ms()} * 1'000'000);
    if (r == -ETIMEDOUT) tl.ended(-ETIMEDOUT);
    if (r == 0) std::memcpy(to + done, tl.slot_of(t), n);
    tl.release_slot(t);
    if (r != 0) return r;
    done += n;
  }
  return 0;
}

}  // namespace ferry::client
