// SPDX-License-Identifier: MIT
#include "tickets.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace ferry::client {

namespace {
// How long a waiter spins before it sleeps: a completion the caller waits for
// usually comes within microseconds (the device writes it).
constexpr auto kSpin = std::chrono::microseconds(50);

// The one rule for a call of several pieces: its outcome is its first
// failed piece's error, kept at the call's own (last) ticket.
void fold_failure(std::map<uint64_t, int>& failed, uint64_t call, int first_error) {
  if (first_error != 0) failed[call] = first_error;
}
}  // namespace

void Tickets::attach(proto::Segment* seg, const proto::Result* results, uint32_t entries) {
  seg_ = seg;
  results_ = results;
  entries_ = entries;
  direct_ = reinterpret_cast<proto::DirectWords*>(reinterpret_cast<char*>(seg) + proto::kDirectOffset);
}

int Tickets::take(uint64_t count, bool direct, Turn* first) {
  std::lock_guard lock(mu_);
  if (dead_ != 0) return dead_;
  first->direct = direct;
  first->place = places_taken_.fetch_add(count, std::memory_order_acq_rel) + 1;
  if (direct) {
    // A direct upload's pieces report their error under its last ticket themselves.
    first->ticket = direct_issued_.fetch_add(count, std::memory_order_acq_rel) + 1;
    return 0;
  }
  // Ring tickets in the order of their placements: both taken under mu_.
  first->ticket = issued_.fetch_add(count, std::memory_order_acq_rel) + 1;
  if (count > 1) {
    std::vector<uint64_t> earlier(count - 1);
    for (uint64_t i = 0; i + 1 < count; ++i) earlier[i] = first->ticket + i;
    groups_.emplace(first->ticket + count - 1, std::move(earlier));
  }
  return 0;
}

int Tickets::take_direct(uint64_t count, uint64_t* first) {
  if (int d = dead_.load(); d != 0) return d;
  *first = direct_issued_.fetch_add(count, std::memory_order_acq_rel) + 1;
  return 0;
}

bool Tickets::take_direct_after(uint64_t count, uint64_t placed, Turn* first) {
  if (dead_.load() != 0) return false;
  if (!places_taken_.compare_exchange_strong(placed, placed + count, std::memory_order_acq_rel)) return false;
  first->direct = true;
  first->place = placed + 1;
  first->ticket = direct_issued_.fetch_add(count, std::memory_order_acq_rel) + 1;
  return true;
}

void Tickets::fail_direct(uint64_t ticket, int err) {
  std::lock_guard lock(mu_);
  // The Appender reports a call's first refused copy only.
  fold_failure(direct_failed_, ticket, err);
}

void Tickets::ended(int why) {
  {
    std::lock_guard lock(mu_);
    dead_ = why;
  }
  if (on_end_) on_end_();
  wake_sleepers();
}

void Tickets::wake_sleepers() {
  if (seg_ != nullptr) proto::wake_sleepers(*seg_);
}

void Tickets::sleep_once(std::chrono::microseconds left, uint64_t target, const std::function<bool()>& still) {
  auto* word = reinterpret_cast<uint32_t*>(&seg_->wake);
  const uint32_t seen = seg_->wake.load(std::memory_order_acquire);
  seg_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  // Lowered, never raised: several threads may sleep for different values.
  for (uint64_t at = seg_->wake_at.load(std::memory_order_relaxed);
       at > target && !seg_->wake_at.compare_exchange_weak(at, target, std::memory_order_seq_cst);) {
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (still()) {
    timespec ts{static_cast<time_t>(left.count() / 1'000'000), static_cast<long>(left.count() % 1'000'000) * 1000};
    ::syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  seg_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

// Folds the errors of an upload's earlier pieces into its last ticket, once
// the last ticket is done (fold_failure).
void Tickets::settle_groups(uint64_t completed) {
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

int Tickets::wait(uint64_t t, int64_t timeout_ns) {
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  if (int r = wait_for(
          deadline, forever, [&] { return completed() >= t; }, kSpin, t);
      r != 0)
    return r;
  return outcome(t);
}

int Tickets::wait_direct_done(uint64_t t, int64_t timeout_ns) {
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  return wait_for(
      deadline, forever, [&] { return direct_completed() >= t; }, kSpin, UINT64_MAX, true);
}

int Tickets::wait_direct(uint64_t t, int64_t timeout_ns) {
  if (int r = wait_direct_done(t, timeout_ns); r != 0) return r;
  std::lock_guard lock(mu_);
  auto it = direct_failed_.find(t);
  if (it == direct_failed_.end()) return 0;
  const int err = it->second;
  direct_failed_.erase(it);
  return err;
}

int Tickets::wait_word(const std::atomic<uint64_t>& word, uint64_t value, int64_t timeout_ns) {
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  // Target 0: any move of this client's timeline wakes it too, besides
  // ferryd's wake-up after the word's write.
  return wait_for(
      deadline, forever, [&] { return word.load(std::memory_order_acquire) >= value; }, kSpin, 0);
}

int Tickets::flush(int64_t timeout_ns) {
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

void Tickets::note_failures() {
  if (seg_->failures.load(std::memory_order_acquire) == failures_seen_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(mu_);
  harvest();
}

uint64_t Tickets::harvest() {
  const uint64_t limit = completed();
  // `failures` is raised before either timeline word passes a failed
  // ticket: unchanged after reading the words, no ticket up to them failed
  // that has not been read.
  const uint64_t count = seg_->failures.load(std::memory_order_acquire);
  if (count != failures_seen_.load(std::memory_order_relaxed)) {
    uint64_t seen = failures_seen_.load(std::memory_order_relaxed);
    // A failure not read yet is of one of the last `entries_` tickets done:
    // a placement reads the records (note_failures) before its ticket goes
    // beyond the window, whenever `failures` moved.
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

void Tickets::catch_up() {
  settle_groups(harvest());
}

int Tickets::outcome(uint64_t t) {
  std::lock_guard lock(mu_);
  catch_up();
  auto it = failed_.find(t);
  if (it == failed_.end()) return 0;
  int err = it->second;
  failed_.erase(it);
  return err;
}

}  // namespace ferry::client
