// SPDX-License-Identifier: MIT
// What one client holds: its staging segment and ticket window, its table of
// buffers and event pools, its statistics. Created and released by the
// engine (Clients::add_client); lives while its session is open or any
// of its copies is in flight, whichever is longer. io thread only.
//
// The segment's timeline words (`completed`, `failures`) are written here and
// nowhere else (publish()); the daemon's own bookkeeping lives in this
// object's memory, which no client can touch.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/buffer.hpp"
#include "engine/window.hpp"
#include "engine/grants.hpp"
#include "engine/run_totals.hpp"
#include "engine/segment.hpp"
#include "engine/staging_areas.hpp"
#include "engine/stats.hpp"

namespace ferry::ferryd {

class ClientState;


// Told when the client broke its submission ring: its session ends with
// `why`. The session implements it.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  // The client broke the protocol (its ring): its session ends.
  virtual void broken(const char* why) = 0;
  // Its session ends for `why`, told to the client as `code` (an admin's
  // disconnect): at once, whether or not it reads its socket.
  virtual void end(int code, const char* why) = 0;
};

using ClientRef = std::shared_ptr<ClientState>;

// One transfer as ferryd took it from the ring: every word copied out of
// shared memory once (proto::SubmitEntry), and only this copy used.
// after: upload_after, upload_fenced: the client's app_value to wait for;
// pool: upload_signal: the pool; upload_fenced: the fence's release to wait
// for; event: upload_signal: the event; upload_fenced: the value to publish.
struct Entry : proto::Transfer {
  uint64_t ticket = 0;
  bool download() const { return kind == proto::Type::download; }
  bool signal() const { return kind == proto::Type::upload_signal; }
  bool fenced() const { return kind == proto::Type::upload_fenced; }
  bool last_piece() const { return (flags & proto::kTransferLastPiece) != 0; }
};

class ClientState : public std::enable_shared_from_this<ClientState> {
 public:
  explicit ClientState(uint64_t id) : id_(id) {}
  ClientState(const ClientState&) = delete;
  ClientState& operator=(const ClientState&) = delete;

  // Creates the staging segment: slots of slot_bytes, zero-filled. 0 or -errno.
  int create_segment(uint32_t slots, uint64_t slot_bytes);
  // Takes a segment made beforehand (SegmentPool), never used by anyone;
  // `registered`: registered with the device (it may then write the timeline).
  void adopt_segment(StagingSegment seg, bool registered);
  // Gives the segment away (the engine's release, to unmap it elsewhere).
  StagingSegment take_segment() { return std::move(segment_); }

  uint64_t id() const { return id_; }
  StagingSegment& segment() { return segment_; }
  const StagingSegment& segment() const { return segment_; }
  uint32_t slot_count() const { return slot_count_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // Its ticket window: the engine's to change (engine/window.hpp).
  Window& window() { return window_; }
  const Window& window() const { return window_; }
  uint32_t ring_entries() const { return window_.entries(); }
  uint64_t completed() const { return window_.completed(); }
  uint32_t in_flight() const { return window_.in_flight(); }
  uint64_t in_flight_bytes() const { return window_.in_flight_bytes(); }
  uint64_t device_bytes() const { return device_bytes_; }
  size_t buffer_count() const { return buffers_.size(); }
  uint32_t opened() const { return opened_; }
  uint32_t imported() const { return imported_; }
  // Allocations of its own (not imports, not buffers opened through grants).
  size_t allocated() const { return buffers_.size() - opened_ - imported_; }
  ClientStats& stats() { return stats_; }
  const ClientStats& stats() const { return stats_; }

  // ---- buffers: owned (allocated or imported) and opened through grants
  // Adds an owned buffer; its Buffer::charged counts in device_bytes.
  uint64_t adopt(BufferRef b);
  // Adds a buffer opened through `g`: 0, or -EACCES when the grant was
  // revoked or its owner freed the buffer.
  int open(const std::shared_ptr<GrantInfo>& g, uint64_t* id, uint64_t* bytes);
  // Drops `id` from the table: 0, or -ENOENT. *was_owned tells whether it
  // was this client's own (its grants then end too).
  int remove(uint64_t id, bool* was_owned);
  // The buffer `id` names for this client if it may use it for `rights`:
  // nullptr with *err = -ENOENT (no such buffer, or its owner freed it) or
  // -EACCES (revoked, or a right not granted).
  BufferRef find(uint64_t id, uint32_t rights, int* err) const;
  BufferRef owned(uint64_t id) const;

  // ---- IPC event pools this client registered: our id -> the backend's
  uint64_t add_event_pool(uint64_t backend_id);
  bool event_pool(uint64_t id, uint64_t* backend_id) const;
  const std::map<uint64_t, uint64_t>& event_pools() const { return event_pools_; }

  // ---- staging areas beyond the segment (proto::StagingGrow)
  StagingAreas& areas() { return areas_; }
  const StagingAreas& areas() const { return areas_; }

  // ---- the ticket window (window(): states, `completed`, the frontier)
  // Checks a transfer's ticket against this client's window, and its
  // staging range (Entry::staging, length) against the staging area.
  // Returns nullptr or the reason it is refused.
  const char* check_transfer(uint64_t ticket, uint64_t staging, uint64_t length) const;
  // Writes a failed ticket's Result record and counts it in the segment
  // (proto::Result), before anything (the device's write included) can
  // pass the ticket.
  void record_failure(uint64_t ticket, int error);
  // Writes the timeline into the segment: `completed`, and `device_completed`
  // too when the device does not write it (failures are recorded before).
  // Wakes the client's sleepers.
  void publish(bool host_writes_device_word);

  // ---- fences (proto::Fence): one per allocation, in this client's segment
  // A free fence, its words zeroed: index + 1, or 0 when all are taken.
  uint32_t take_fence();
  void give_fence(uint32_t fence);
  proto::Fence* fence_words(uint32_t fence) const { return segment_.fence(fence - 1); }
  // Wakes the client's threads asleep on the segment's futex word, whatever
  // they wait for (a fence's word, written by the device, say).
  void wake_sleepers() { wake(false); }

  // ---- holds (upload_after, upload_fenced entries): transfers waiting for a value
  struct Held {
    Entry e;  // e.after 0: no value of its own, only behind an earlier hold
    // upload_fenced: the destination's fence released (e.pool, 0: no wait)
    // in this owner's segment.
    std::weak_ptr<ClientState> fence_owner;
    uint32_t fence = 0;
    std::chrono::steady_clock::time_point since{};  // when it began to wait (Holds::add)
    uint64_t release() const { return fence != 0 ? e.pool : 0; }
  };
  void hold(const Held& h);
  std::deque<Held>& held() { return held_; }
  const std::deque<Held>& held() const { return held_; }
  // The application's value as the client's segment shows it (hostile: a number only).
  uint64_t app_value() const;
  // Whether h may start now: its values came (each read as a number that
  // decides only when this client's transfer, or an upload into the fence
  // owner's own buffer, starts). A fence owner that is gone holds nothing.
  bool hold_over(const Held& h) const;

  // Adds the slot waits the client published in its segment to h, if they
  // are believable against what the daemon itself saw of this client (every
  // bucket summing to the count, no more waits than its transfers plus its
  // slots, none longer than its connection): a client that scribbles on its
  // page drops out of the daemon-wide histogram instead of poisoning it.
  void add_slot_waits(Histogram& h) const;
  // What the client says of its direct uploads (proto::DirectWords), for its
  // own row alone: calls and bytes as it counts them, and the numbers its
  // queue has not yet written back, at most the placements a client can have
  // in flight (8 * ring_entries). All 0 without a segment.
  struct Direct {
    uint64_t uploads = 0, bytes = 0, in_flight = 0;
  };
  Direct direct() const;
  // What a process under ferry-run says of itself (proto::RunWords); role 0
  // for any other client. Numbers only, each the highest this client
  // showed so far (a count it lowers stays where it was: RunTotals).
  struct Run {
    uint32_t role = 0;
    RunCounts counts;
  };
  Run run() const;
  // A piece of an upload call is being copied (`last`: the call's last
  // piece). The client counts as transferring once one call reaches
  // proto::kThreadedUpload, the size libferry stages with threads from.
  // Returns whether the client was idle until now (see Clients::publish).
  bool note_upload(uint64_t bytes, bool last) {
    call_bytes_ += bytes;
    const bool threaded = call_bytes_ >= proto::kThreadedUpload;
    if (last) call_bytes_ = 0;
    if (!threaded) return false;
    ++transfers_;
    if (active_) return false;
    active_ = true;
    return true;
  }
  // Called every kIdleCheck: whether the client is still active (it moved a
  // transfer since the last call); it becomes idle otherwise.
  bool still_active() {
    if (!active_) return false;
    if (transfers_ == transfers_seen_) active_ = false;
    transfers_seen_ = transfers_;
    return active_;
  }
  bool active() const { return active_; }

  // 1 while the daemon serves this client, 2 once it is stopping.
  void set_daemon_state(uint32_t s);

  // ---- its session and ring
  // Connected until its session closed (copies in flight may still drain).
  bool connected() const { return connected_; }
  void disconnect() { connected_ = false; }
  // A bad entry (or a fatal error) ended the session: the ring is not read again.
  bool ring_broken() const { return ring_broken_; }
  void break_ring() { ring_broken_ = true; }
  // The segment is registered with the device (adopt_segment).
  bool registered() const { return registered_; }
  // The device could not write device_completed: the retire path does, from now on.
  bool host_timeline() const { return host_timeline_; }
  void keep_timeline_on_host() { host_timeline_ = true; }

  // Who the client is, for status and logs.
  pid_t pid = 0;
  uid_t uid = 0;
  bool admin = false;  // its user is one of the daemon's admins (no Limits::user_share)
  std::string name;
  std::chrono::system_clock::time_point since = std::chrono::system_clock::now();
  std::chrono::steady_clock::time_point steady_since = std::chrono::steady_clock::now();
  std::weak_ptr<ProgressSink> sink;
  // The engine's marks on this client (engine/ alone writes them).
  struct Marks {
    bool holder = false;      // in Holds' list of clients with held transfers
    bool lone_write = false;  // a timeline write without a copy is queued on the device (one at a time)
  } marks;

 private:
  // Wakes the segment's sleepers: all of them, or (only_due) only once
  // `completed` reached what one of them waits for (Segment::wake_at).
  void wake(bool only_due);

  bool connected_ = true;
  bool ring_broken_ = false;
  bool registered_ = false;
  bool host_timeline_ = false;
  uint64_t id_;
  StagingSegment segment_;
  uint32_t slot_count_ = 0;
  uint64_t slot_bytes_ = 0;
  Window window_;
  uint64_t failures_ = 0;  // Result records written so far
  mutable RunCounts run_high_;  // run(): the highest of each word seen
  std::deque<Held> held_;
  std::vector<uint32_t> free_fences_;  // fence indexes + 1, the lowest last
  uint64_t device_bytes_ = 0;
  uint64_t next_buffer_ = 0;
  uint32_t opened_ = 0;    // table entries opened through grants
  uint64_t transfers_ = 0; // transfers accepted
  uint64_t transfers_seen_ = 0;  // transfers_ at the last still_active()
  uint64_t call_bytes_ = 0;      // of the upload call being copied (note_upload)
  bool active_ = false;          // moved a transfer lately (still_active)
  uint32_t imported_ = 0;  // table entries that are imports
  struct Entry {
    BufferRef owned;                   // set for the owner
    std::shared_ptr<GrantInfo> grant;  // set for a buffer opened through a grant
  };
  std::map<uint64_t, Entry> buffers_;
  std::map<uint64_t, uint64_t> event_pools_;
  StagingAreas areas_;
  uint64_t next_pool_ = 0;
  ClientStats stats_;
};

}  // namespace ferry::ferryd
