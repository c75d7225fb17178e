// SPDX-License-Identifier: MIT
#include "staging_fifo.hpp"

#include <algorithm>
#include <cerrno>

#include "tsan.hpp"

namespace ferry::client {

namespace {
// A slot waits for a copy that left the ring a whole ring ago: a short spin,
// then sleep (spinning then takes a core from the daemon and the device).
constexpr auto kSlotSpin = std::chrono::microseconds(2);
}  // namespace

void StagingFifo::attach(char* staging, uint32_t slots, uint64_t slot_bytes, uint32_t entries) {
  staging_ = staging;
  staging_bytes_ = uint64_t{slots} * slot_bytes;
  slot_bytes_ = slot_bytes;
  slots_ = slots;
  entries_ = entries;
  // Enough that the staging bytes, not this table, bound a direct uploader
  // whose queue is held: 8 x ring_entries records (a 64 MiB staging area in
  // 256 KiB pieces is 256 placements; the default 16 slots give 512).
  placements_ = uint64_t{entries} * 8;
  placed_at_ = std::make_unique<Placed[]>(placements_);
  tickets_.on_end([this] { wake_placers(); });
}

void StagingFifo::wake_placers() {
  {
    std::lock_guard lock(mu_);  // a placer checks the connection's end under it
  }
  turn_cv_.notify_all();
}

int StagingFifo::place(const Turn& turn, uint64_t length, int stall_ms, uint64_t* offset) {
  const auto t0 = Clock::now();
  const uint64_t daemon_bound = daemon_bound_of(turn, length);
  Room room;
  if (int d = claim(turn, length, offset, &room); d != 0) return d;
  room.daemon = daemon_bound;
  const int r = await(room, stall_ms);
  // Before ticket t's entry overwrites ticket t - entries', the outcomes of
  // the tickets done are read (proto::Result): only if one failed meanwhile.
  if (r == 0) tickets_.note_failures();
  note_slot_wait(Clock::now() - t0);
  FERRY_SLOT_TAKEN(staging_);
  return r;
}

uint64_t StagingFifo::daemon_bound_of(const Turn& turn, uint64_t length) const {
  if (turn.direct) return 0;  // the application's queue copies it: ferryd's window has no say
  const uint64_t t = turn.ticket;
  // ferryd's window: the ticket `entries` before this one is done.
  const uint64_t window = t > entries_ ? t - entries_ : 0;
  // Large transfers stay proto::large_bound in flight (ferryd leaves any
  // more in the ring until one retires).
  const uint64_t bound = proto::large_bound(slots_);
  const uint64_t large = proto::is_large(length, slot_bytes_) && t > bound ? t - bound : 0;
  return std::max(window, large);
}

int StagingFifo::claim(const Turn& turn, uint64_t length, uint64_t* offset, Room* room) {
  {
    std::unique_lock lock(mu_);
    // Bytes are handed out in placement order; the thread placing q - 1 (a
    // staging thread of the same upload, or another caller) is about to.
    turn_cv_.wait(lock, [&] { return placed_ + 1 == turn.place || tickets_.dead() != 0; });
    if (int d = tickets_.dead(); d != 0) return d;
    claim_locked(turn, length, offset, room);
  }
  turn_cv_.notify_all();
  return 0;
}

void StagingFifo::claim_locked(const Turn& turn, uint64_t length, uint64_t* offset, Room* room) {
  const uint64_t q = turn.place;
  uint64_t need = q > placements_ ? q - placements_ : 0;  // the placement that last used these bytes
  {
    const uint64_t S = staging_bytes_;
    const uint64_t p = start_at(head_, length, true);
    const uint64_t end = p + length;
    // Every placement that started before end - S used bytes this one
    // overwrites (placements start in order), and so must be done first.
    if (reuse_ <= need) reuse_ = need + 1;
    if (const uint64_t r = overwritten(reuse_, q, end); r != 0) reuse_ = r + 1;
    need = std::max(need, reuse_ - 1);
    // Read before this placement's record takes the place of q - placements_'s.
    if (need != 0) room->want = placed_at_[(need - 1) % placements_];
    room->ring_before = last_.ring;
    last_.start = p;
    (turn.direct ? last_.direct : last_.ring) = turn.ticket;
    placed_at_[(q - 1) % placements_] = last_;
    head_ = end;
    placed_ = q;
    *offset = p % S;
  }
  room->need = need;
}

bool StagingFifo::claim_now(const StagingPlan& plan, uint64_t bytes, Turn* turn, uint64_t* offsets) {
  {
    std::lock_guard lock(mu_);
    if (!room_locked(plan, bytes) || !tickets_.take_direct_after(plan.pieces, placed_, turn)) return false;
    for (uint64_t i = 0; i < plan.pieces; ++i) {
      Room room;
      claim_locked(turn->next(i), plan.length(i, bytes), &offsets[i], &room);
    }
  }
  turn_cv_.notify_all();  // a ring upload that took the placement after these waits for its turn
  for (uint64_t i = 0; i < plan.pieces; ++i) note_slot_wait(Clock::duration::zero());
  FERRY_SLOT_TAKEN(staging_);
  return true;
}

uint64_t StagingFifo::sleep_target(const Room& room) {
  // Asleep, it waits for three quarters of the ring's transfers in flight
  // before it, not for `need` alone: the device still has the last quarter
  // to copy, and the bytes after these are then free too, so a stream of
  // small uploads sleeps once per 3/4 window rather than once per upload.
  // Measured on the 2-core machine with 16 tickets in flight, 200,000
  // uploads of 1 KiB: one ticket 0.14 sleeps per upload, 1/2 0.078, 3/4
  // 0.063; at 7/8 the device ran dry and ferryd's CPU rose.
  const uint64_t ring_need = std::max(room.want.ring, room.daemon);
  if (ring_need == 0) return UINT64_MAX;
  return ring_need + (std::max(room.ring_before, ring_need) - ring_need) * 3 / 4;
}

int StagingFifo::await(const Room& room, int stall_ms) {
  const proto::Segment& seg = tickets_.segment();
  // The window by the daemon's own word, not the device's: ferryd refuses a
  // ticket beyond it until the copies before it retired (so too the large
  // transfers' bound: ferryd counts them in flight until it retires them).
  // The bytes by either word: the device has read them once it ran the
  // copy. A download that still reads bytes of a placement <= need holds them.
  auto ready = [&] {
    return seg.completed.load(std::memory_order_acquire) >= room.daemon && tickets_.completed() >= room.want.ring &&
           tickets_.direct_completed() >= room.want.direct && oldest_hold_.load(std::memory_order_acquire) > room.need;
  };
  // Bytes a direct transfer used come free when the application's queue
  // gets there, which wakes no one: those waits look again now and then.
  const bool poll = room.want.direct > tickets_.direct_completed();
  auto progress = [&] {
    return seg.completed.load(std::memory_order_acquire) +
           tickets_.direct_words().completed.load(std::memory_order_acquire);
  };
  const uint64_t target = sleep_target(room);
  for (uint64_t seen = progress();;) {
    const int r =
        tickets_.wait_for(Clock::now() + std::chrono::milliseconds(stall_ms), false, ready, kSlotSpin, target, poll);
    if (r != -ETIMEDOUT) return r;
    const uint64_t now = progress();
    if (now == seen) {
      tickets_.ended(-ETIMEDOUT);  // no progress at all: the daemon, or the application's queue, stalled
      return r;
    }
    seen = now;  // slow, but moving: wait on
  }
}

void StagingFifo::note_slot_wait(Clock::duration waited) {
  // Published for the daemon's metrics (histogram of slot wait time).
  const auto ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  auto* m = reinterpret_cast<proto::ClientMetrics*>(reinterpret_cast<char*>(&tickets_.segment()) +
                                                    proto::kClientMetricsOffset);
  m->slot_waits.fetch_add(1, std::memory_order_relaxed);
  m->slot_wait_ns.fetch_add(ns, std::memory_order_relaxed);
  m->buckets[proto::latency_bucket(ns)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t StagingFifo::start_at(uint64_t head, uint64_t length, bool may_restart) const {
  const uint64_t S = staging_bytes_;
  uint64_t p = (head + proto::kStagingAlign - 1) / proto::kStagingAlign * proto::kStagingAlign;
  if (p % S + length > S) p += S - p % S;  // never across the end
  // With nothing in flight, back to the area's start: an upload now and
  // then stages into the same bytes each time, still in the CPU's cache
  // (as a driver's bounce buffer is), not into the next cold ones.
  // (placed_idle reads words the device and ferryd write: only when it may matter.)
  if (p % S != 0 && may_restart && placed_idle()) p += S - p % S;
  return p;
}

bool StagingFifo::placed_idle() const {
  return tickets_.completed() >= last_.ring && tickets_.direct_completed() >= last_.direct &&
         oldest_hold_.load(std::memory_order_acquire) == UINT64_MAX;
}

uint64_t StagingFifo::overwritten(uint64_t from, uint64_t q, uint64_t end) const {
  const uint64_t S = staging_bytes_;
  uint64_t r = from;
  while (r < q && end > S && placed_at_[(r - 1) % placements_].start < end - S) ++r;
  return r > from ? r - 1 : 0;
}

bool StagingFifo::room_now(const StagingPlan& plan, uint64_t bytes) {
  std::lock_guard lock(mu_);
  return room_locked(plan, bytes);
}

bool StagingFifo::room_locked(const StagingPlan& plan, uint64_t bytes) const {
  if (tickets_.placements_taken() != placed_ || tickets_.dead() != 0) return false;  // a placement is under way
  // The pieces as place() would lay them out, one after the other; the
  // newest placement any of them overwrites must be done.
  const uint64_t S = staging_bytes_, last = placed_;
  uint64_t head = head_, q = last + 1, from = reuse_, need = 0, first = 0;
  for (uint64_t i = 0; i < plan.pieces; ++i) {
    const uint64_t length = plan.length(i, bytes);
    const uint64_t p = start_at(head, length, i == 0);
    if (q == last + 1) first = p;
    const uint64_t end = p + length;
    if (end - first > S) return false;  // its own pieces would have to be done first
    need = std::max(need, q > placements_ ? q - placements_ : 0);
    if (from <= need) from = need + 1;
    // Only placements made so far have records; this upload's own pieces do not overlap.
    if (const uint64_t r = overwritten(from, last + 1, end); r != 0) from = r + 1;
    need = std::max(need, from - 1);
    head = end;
    ++q;
  }
  if (need > placed_) return false;
  if (need == 0) return true;
  const Placed want = placed_at_[(need - 1) % placements_];
  return tickets_.completed() >= want.ring && tickets_.direct_completed() >= want.direct &&
         oldest_hold_.load(std::memory_order_acquire) > need;
}

void StagingFifo::hold(uint64_t p) {
  std::lock_guard lock(mu_);
  holds_.insert(p);
  oldest_hold_.store(*holds_.begin(), std::memory_order_release);
}

void StagingFifo::release(uint64_t p) {
  FERRY_SLOT_HANDED_ON(staging_);
  {
    std::lock_guard lock(mu_);
    if (auto it = holds_.find(p); it != holds_.end()) holds_.erase(it);
    oldest_hold_.store(holds_.empty() ? UINT64_MAX : *holds_.begin(), std::memory_order_release);
  }
  tickets_.wake_sleepers();  // an upload may wait for these bytes
}

}  // namespace ferry::client
