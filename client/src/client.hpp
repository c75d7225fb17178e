// SPDX-License-Identifier: MIT
// What a ferry_client is: the connection, the tickets and the staging FIFO,
// the mapped staging segment, the buffers this client may name, and the staging pool.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <map>
#include <set>
#include <atomic>
#include <memory>
#include <mutex>

#include "areas.hpp"
#include "connection.hpp"
#include "ferry/ferry.h"
#include "ferry/util/mapping.hpp"
#include "ferry/proto.hpp"
#include "stager.hpp"
#include "staging_fifo.hpp"
#include "tickets.hpp"

struct ferry_client {
  ferry_client();

  // The staging segment's mapping: declared first, so it goes last.
  ferry::util::SegmentMapping mapping;
  // Declared before the connection, so the connection (whose receiver ends
  // the tickets) goes before them.
  ferry::client::Tickets tickets;
  ferry::client::StagingFifo fifo{tickets};
  ferry::client::Connection conn;
  std::string socket_path;  // as resolved at connect (ferry_socket_path)
  ferry::proto::Welcome welcome{};
  ferry::proto::Segment* seg = nullptr;
  // The submission ring: every transfer goes there.
  ferry::proto::SubmitEntry* ring = nullptr;
  // The fences of this client's allocations.
  ferry::proto::Fence* fence_words = nullptr;
  uint64_t seg_bytes = 0;
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;     // the largest transfer
  uint32_t ring_entries = 0;   // tickets in flight at once
  ferry::client::Stager stager;
  // Direct uploads go one call at a time, so that their numbers reach the
  // queue in order; the queue they went to last (ferry_direct_ops::queue).
  std::mutex direct_mu;
  uint64_t direct_queue = 0, direct_queue_context = 0;
  // Staging areas beyond the segment, for direct uploads (under direct_mu).
  ferry::client::Areas areas;

  // Buffers this client allocated, opened or imported: id -> bytes, and
  // the fence of each allocation (its index + 1; 0: none).
  std::mutex buffers_mu;
  std::map<uint64_t, uint64_t> buffer_sizes;
  std::map<uint64_t, uint32_t> fences;
  std::set<uint64_t> opened;  // buffers opened through a grant (their fence is their owner's)
  // Tickets of reservations made and not yet committed or cancelled, at
  // ticket % ring_entries (two tickets in flight never share a place): a
  // copy of a used reservation cannot send its ticket a second time.
  std::unique_ptr<std::atomic<uint64_t>[]> reserved;

  // The process that connected, and the fork generation it saw then
  // (client::owner_check): a forked child inherits this struct but must not
  // touch anything it points at.
  pid_t pid;
  uint64_t generation;
};

namespace ferry::client {

// 0 when the calling process is the one that connected c; -EBADF for a
// NULL c; -ECHILD in a process forked from it (ferry_last_error says so).
// Every call on a client starts here, so a child touches nothing shared.
int owner_check(const ferry_client* c);
// The calling thread's ferry_last_error text.
std::string& last_error();
// Copies a size-versioned struct out (ferry_info, ferry_timeline): as many
// bytes as the caller's version holds (out->size; 0: this header's), then
// out->size says how many were written. -EINVAL for a size below the
// struct's first two words.
// A misuse of the API: sets ferry_last_error to "fn: what" and returns err
// (each misuse has its errno: -EBADF a NULL client, -EFAULT a NULL pointer,
// -EINVAL a zero or contradictory value, -ERANGE past a buffer's end,
// -ENOENT an unknown buffer, -ESRCH an unknown ticket, -EMSGSIZE more than a
// slot, -EOVERFLOW more than 2^64 bytes; the man page lists them).
int misuse(int err, const char* fn, const std::string& what);

// Copies a size-versioned struct out (ferry_info, ferry_timeline): as many
// bytes as the caller's version holds (out->size; 0: this header's), then
// out->size says how many were written. -EINVAL for a size too small to
// hold the size word and the one beside it.
template <class T>
int fill_versioned(T* out, T full, const char* fn) {
  const uint32_t want = out->size == 0 ? uint32_t{sizeof(T)} : out->size;
  if (want < 8) return misuse(-EINVAL, fn, "out->size is " + std::to_string(want) + ": set it to sizeof the struct, or 0");
  const uint32_t n = want < sizeof(T) ? want : uint32_t{sizeof(T)};
  full.size = n;
  std::memcpy(static_cast<void*>(out), &full, n);
  return 0;
}

// Checks [offset, offset + bytes) against a buffer this client knows: 0, or
// -EINVAL (0 bytes), -ENOENT (not its buffer), -ERANGE (past the end), with
// ferry_last_error naming fn.
int check_range(ferry_client* c, uint64_t buf, uint64_t offset, uint64_t bytes, const char* fn);
void remember_buffer(ferry_client* c, uint64_t buf, uint64_t bytes, uint32_t fence = 0);
void forget_buffer(ferry_client* c, uint64_t buf);
// The fence of an allocation of this client (index + 1), or 0. A buffer
// opened through a grant has its owner's fence, which this client cannot
// see: 0 here, and the daemon checks it.
uint32_t fence_of(ferry_client* c, uint64_t buf);

// What an upload asks besides its bytes. `signal`: the last piece has the
// device signal event `event` of pool `pool` after it. `after` > 0: every
// piece is held by the daemon until the segment's app_value reaches it.
// `fenced`: every piece is an upload_fenced entry (held until the
// destination's fence shows `release`), and the last one has the device
// write `publish` into the fence.
struct UploadOptions {
  bool signal = false;
  uint64_t pool = 0;
  uint32_t event = 0;
  uint64_t after = 0;
  bool fenced = false;
  uint64_t release = 0;
  uint64_t publish = 0;
};

// How an upload of `bytes` is cut and staged (plan_staging), from what is
// in flight now; pieces of at most piece_cap (0: a slot).
struct StagingPlan;
StagingPlan plan_for(ferry_client* c, uint64_t bytes, uint64_t piece_cap = 0);

// The transfer paths (transfers.cpp). An upload gathers `count` source
// ranges, back to back, into dst from dst_offset.
int upload(ferry_client* c, uint64_t dst, uint64_t dst_offset, const ferry_iovec* src, size_t count,
           const UploadOptions& o, ferry_ticket* out);
// ferry_upload_direct: staged here, copied by the caller's own queue (direct.cpp).
int upload_direct(ferry_client* c, const void* src, uint64_t bytes, const ferry_direct_ops* ops, ferry_ticket* out);
int download(ferry_client* c, uint64_t src, uint64_t src_offset, void* dst, uint64_t bytes);
// ferry_upload_reserve / ferry_upload_commit: one upload written in place.
int reserve(ferry_client* c, uint64_t bytes, ferry_reservation* r);
int commit(ferry_client* c, ferry_reservation* r, uint64_t dst, uint64_t dst_offset, ferry_ticket* out);
int cancel(ferry_client* c, ferry_reservation* r);

}  // namespace ferry::client
