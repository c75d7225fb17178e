// SPDX-License-Identifier: MIT
#include "timeline.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

#include "tsan.hpp"

namespace ferry::client {

namespace {
// How long a waiter spins before it sleeps: a completion the caller waits for
// usually comes within microseconds (the device writes it), while a slot
// waits for a copy that left the ring a whole ring ago, and spinning then
// takes a core from the daemon and the device.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kSlotSpin = std::chrono::microseconds(2);
}  // namespace

void Timeline::attach(proto::Segment* seg, const proto::Result* results, char* staging, uint32_t slots,
                      uint64_t slot_bytes, uint32_t entries) {
  seg_ = seg;
  results_ = results;
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
  direct_ = reinterpret_cast<proto::DirectWords*>(reinterpret_cast<char*>(seg) + proto::kDirectOffset);
}

int Timeline::take(uint64_t count, bool direct, Turn* first) {
  std::lock_guard lock(mu_);
  if (dead_ != 0) return dead_;
  first->direct = direct;
  first->place = next_place_;
  next_place_ += count;
  if (direct) {
    first->ticket = next_direct_;
    next_direct_ += count;
    direct_issued_.store(next_direct_ - 1, std::memory_order_release);
    return 0;  // a direct upload's pieces report their error under its last ticket themselves
  }
  first->ticket = next_ticket_;
  next_ticket_ += count;
  issued_.store(next_ticket_ - 1, std::memory_order_release);
  if (count > 1) {
    std::vector<uint64_t> earlier(count - 1);
    for (uint64_t i = 0; i + 1 < count; ++i) earlier[i] = first->ticket + i;
    groups_.emplace(first->ticket + count - 1, std::move(earlier));
  }
  return 0;
}

int Timeline::take_direct(uint64_t count, uint64_t* first) {
  std::lock_guard lock(mu_);
  if (dead_ != 0) return dead_;
  *first = next_direct_;
  next_direct_ += count;
  direct_issued_.store(next_direct_ - 1, std::memory_order_release);
  return 0;
}

namespace {
// The one rule for a call of several pieces: its outcome is its first
// failed piece's error, kept at the call's own (last) ticket.
void fold_failure(std::map<uint64_t, int>& failed, uint64_t call, int first_error) {
  if (first_error != 0) failed[call] = first_error;
}
}  // namespace

void Timeline::fail_direct(uint64_t ticket, int err) {
  std::lock_guard lock(mu_);
  // The Appender reports a call's first refused copy only.
  fold_failure(direct_failed_, ticket, err);
}

void Timeline::ended(int why) {
  {
    std::lock_guard lock(mu_);
    dead_ = why;
  }
  {
    std::lock_guard lock(place_mu_);  // a placer checks dead_ under it
  }
  place_cv_.notify_all();
  wake_sleepers();
}

void Timeline::wake_sleepers() {
  if (seg_ != nullptr) proto::wake_sleepers(*seg_);
}

// Folds the errors of an upload's earlier pieces into its last ticket, once
// the last ticket is done (fold_failure).
void Timeline::settle_groups(uint64_t completed) {
  while (!groups_.empty() && groups_.begin()->first <= completed) {
    auto node = groups_.extract(groups_.begin());
    int first = 0;
    for (uint64_t t : node.mapped()) {  // the earlier pieces, in ticket order
      auto it = failed_.find(t);
      if (it == failed_.end()) continue;
      if (first == 0) first = it->second;
      failed_.erase(it);
    }
    fold_failure(failed_, node.key(), first);
  }
}

// Waits until `ready()` holds, or the deadline passes, or the connection dies.
// Spins a little first: the device writes the timeline microseconds after the
// copy. Then sleeps on the segment's futex word, which ferryd bumps and wakes
// after it moves `completed` (it looks at `sleepers` only then): no thread of
// ours, and no message, stands between the daemon and the waiter.
template <class Ready>
int Timeline::wait_for(Clock::time_point deadline, bool forever, Ready ready, Clock::duration spin, uint64_t target,
                       bool poll) {
  const auto spin_end = Clock::now() + spin;
  while (Clock::now() < spin_end) {
    if (ready()) return 0;
    if (!forever && Clock::now() >= deadline) break;
  }
  auto* word = reinterpret_cast<uint32_t*>(&seg_->wake);
  // The application's queue writes its word and wakes no one: look again
  // after a short sleep, longer each time (a queue that runs far behind is
  // looked at a thousand times a second).
  std::chrono::microseconds nap(20);
  for (;;) {
    if (ready()) return 0;
    if (int d = dead_.load(); d != 0) return d;
    std::chrono::microseconds left = std::chrono::milliseconds(100);  // a bound, against a wake-up lost to a dead daemon
    if (poll) {
      left = nap;
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
    }
    if (!forever) {
      const auto now = Clock::now();
      if (now >= deadline) return -ETIMEDOUT;
      left = std::min(left, std::chrono::ceil<std::chrono::microseconds>(deadline - now));
    }
    const uint32_t seen = seg_->wake.load(std::memory_order_acquire);
    seg_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    // Lowered, never raised: several threads may sleep for different values.
    for (uint64_t at = seg_->wake_at.load(std::memory_order_relaxed);
         at > target && !seg_->wake_at.compare_exchange_weak(at, target, std::memory_order_seq_cst);) {
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!ready() && dead_.load() == 0) {
      timespec ts{static_cast<time_t>(left.count() / 1'000'000), static_cast<long>(left.count() % 1'000'000) * 1000};
      ::syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
    }
    seg_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

int Timeline::place(const Turn& turn, uint64_t length, int stall_ms, uint64_t* offset) {
  const auto t0 = Clock::now();
  const uint64_t daemon_bound = daemon_bound_of(turn, length);
  Room room;
  if (int d = claim(turn, length, offset, &room); d != 0) return d;
  room.daemon = daemon_bound;
  const int r = await(room, stall_ms);
  // Before ticket t's entry overwrites ticket t - entries', the outcomes of
  // the tickets done are read (proto::Result): only if one failed meanwhile.
  if (r == 0 && seg_->failures.load(std::memory_order_acquire) != failures_seen_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(mu_);
    harvest();
  }
  note_slot_wait(Clock::now() - t0);
  FERRY_SLOT_TAKEN(staging_);
  return r;
}

uint64_t Timeline::daemon_bound_of(const Turn& turn, uint64_t length) const {
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

int Timeline::claim(const Turn& turn, uint64_t length, uint64_t* offset, Room* room) {
  const uint64_t q = turn.place;
  uint64_t need = q > placements_ ? q - placements_ : 0;  // the placement that last used these bytes
  {
    std::unique_lock lock(place_mu_);
    // Bytes are handed out in placement order; the thread placing q - 1 (a
    // staging thread of the same upload, or another caller) is about to.
    place_cv_.wait(lock, [&] { return placed_ + 1 == q || dead_.load() != 0; });
    if (int d = dead_.load(); d != 0) return d;
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
  place_cv_.notify_all();
  return 0;
}

uint64_t Timeline::sleep_target(const Room& room) {
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

int Timeline::await(const Room& room, int stall_ms) {
  // The window by the daemon's own word, not the device's: ferryd refuses a
  // ticket beyond it until the copies before it retired (so too the large
  // transfers' bound: ferryd counts them in flight until it retires them).
  // The bytes by either word: the device has read them once it ran the
  // copy. A download that still reads bytes of a placement <= need holds them.
  auto ready = [&] {
    return seg_->completed.load(std::memory_order_acquire) >= room.daemon && completed() >= room.want.ring &&
           direct_completed() >= room.want.direct && oldest_hold_.load(std::memory_order_acquire) > room.need;
  };
  // Bytes a direct transfer used come free when the application's queue
  // gets there, which wakes no one: those waits look again now and then.
  const bool poll = room.want.direct > direct_completed();
  auto progress = [&] {
    return seg_->completed.load(std::memory_order_acquire) + direct_->completed.load(std::memory_order_acquire);
  };
  const uint64_t target = sleep_target(room);
  for (uint64_t seen = progress();;) {
    const int r = wait_for(Clock::now() + std::chrono::milliseconds(stall_ms), false, ready, kSlotSpin, target, poll);
    if (r != -ETIMEDOUT) return r;
    const uint64_t now = progress();
    if (now == seen) {
      ended(-ETIMEDOUT);  // no progress at all: the daemon, or the application's queue, stalled
      return r;
    }
    seen = now;  // slow, but moving: wait on
  }
}

void Timeline::note_slot_wait(Clock::duration waited) {
  // Published for the daemon's metrics (histogram of slot wait time).
  const auto ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  auto* m = reinterpret_cast<proto::ClientMetrics*>(reinterpret_cast<char*>(seg_) + proto::kClientMetricsOffset);
  m->slot_waits.fetch_add(1, std::memory_order_relaxed);
  m->slot_wait_ns.fetch_add(ns, std::memory_order_relaxed);
  m->buckets[proto::latency_bucket(ns)].fetch_add(1, std::memory_order_relaxed);
}

int Timeline::wait(uint64_t t, int64_t timeout_ns) {
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  if (int r = wait_for(deadline, forever, [&] { return completed() >= t; }, kSpin, t); r != 0) return r;
  return outcome(t);
}

int Timeline::wait_direct_done(uint64_t t, int64_t timeout_ns) {
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  return wait_for(deadline, forever, [&] { return direct_completed() >= t; }, kSpin, UINT64_MAX, true);
}

int Timeline::wait_direct(uint64_t t, int64_t timeout_ns) {
  if (int r = wait_direct_done(t, timeout_ns); r != 0) return r;
  std::lock_guard lock(mu_);
  auto it = direct_failed_.find(t);
  if (it == direct_failed_.end()) return 0;
  const int err = it->second;
  direct_failed_.erase(it);
  return err;
}

int Timeline::wait_word(const std::atomic<uint64_t>& word, uint64_t value, int64_t timeout_ns) {
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  // Target 0: any move of this client's timeline wakes it too, besides
  // ferryd's wake-up after the word's write.
  return wait_for(deadline, forever, [&] { return word.load(std::memory_order_acquire) >= value; }, kSpin, 0);
}

int Timeline::flush(int64_t timeout_ns) {
  const uint64_t last = issued(), direct_last = direct_issued();
  if (last == 0 && direct_last == 0) return 0;
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  auto done = [&] { return completed() >= last && direct_completed() >= direct_last; };
  if (int r = wait_for(deadline, forever, done, kSpin, last == 0 ? UINT64_MAX : last, direct_last != 0); r != 0)
    return r;
  std::lock_guard lock(mu_);
  catch_up();
  // Report the oldest; the flush covers the rest.
  int err = 0;
  if (auto it = failed_.begin(); it != failed_.end() && it->first <= last) err = it->second;
  failed_.erase(failed_.begin(), failed_.upper_bound(last));
  if (auto it = direct_failed_.begin(); err == 0 && it != direct_failed_.end() && it->first <= direct_last)
    err = it->second;
  direct_failed_.erase(direct_failed_.begin(), direct_failed_.upper_bound(direct_last));
  return err;
}

uint64_t Timeline::harvest() {
  const uint64_t limit = completed();
  // `failures` is raised before either timeline word passes a failed
  // ticket: unchanged after reading the words, no ticket up to them failed
  // that has not been read.
  const uint64_t count = seg_->failures.load(std::memory_order_acquire);
  if (count != failures_seen_.load(std::memory_order_relaxed)) {
    uint64_t seen = failures_seen_.load(std::memory_order_relaxed);
    // A failure not read yet is of one of the last `entries_` tickets done:
    // place() reads the records before it sends a ticket beyond the window,
    // whenever `failures` moved.
    const uint64_t from = std::max(scanned_, limit > entries_ ? limit - entries_ : 0);
    for (uint64_t t = from + 1; t <= limit; ++t) {
      const proto::Result& r = results_[(t - 1) % entries_];
      if (r.ticket.load(std::memory_order_acquire) != t) continue;
      const auto error = r.error.load(std::memory_order_relaxed);
      // A record is the daemon's word; one that says nothing is still a failure.
      failed_[t] = error < 0 && error >= -4095 ? static_cast<int>(error) : -EIO;
      ++seen;
    }
    failures_seen_.store(seen, std::memory_order_relaxed);
  }
  if (limit > scanned_) scanned_ = limit;
  return limit;
}

void Timeline::catch_up() { settle_groups(harvest()); }

int Timeline::outcome(uint64_t t) {
  std::lock_guard lock(mu_);
  catch_up();
  auto it = failed_.find(t);
  if (it == failed_.end()) return 0;
  int err = it->second;
  failed_.erase(it);
  return err;
}

}  // namespace ferry::client
