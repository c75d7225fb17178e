// SPDX-License-Identifier: MIT
// ferryd's idle policy, in one place: what the data thread does between two
// pieces of work while it polls (spin, yield, nap), when it stays awake for
// a held transfer, how often a timer looks at holds while it sleeps, and how
// a doorbell that rings in vain is heard less and less. The Poller, Holds
// and the doorbells' handler ask it; none keeps a constant of its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ferry::ferryd {

struct IdlePolicy {
  using Clock = std::chrono::steady_clock;

  // ---- the poller, awake
  // Sockets are looked at this often: control requests wait at most this long.
  static constexpr auto kIoEvery = std::chrono::microseconds(10);
  // Socket work between two rounds of the loop: at most this many ready
  // handlers, with a look at the rings and the device between any two, and
  // none started after kIoBudget (those looks count in it). However much
  // socket traffic arrives (connects, Hellos, doorbell rings, status
  // requests, from any user), the rings and the device's completions are
  // served in between.
  static constexpr int kIoBatch = 8;
  static constexpr auto kIoBudget = std::chrono::microseconds(25);

  // What the poller does after a round that found nothing to do.
  enum class Rest {
    relax,     // a pause instruction, and the next round
    yield,     // sched_yield
    hold_nap,  // sleep kHoldNap: a held transfer's value is likely near
    nap,       // sleep nap(): the device has copies queued for longer than that
  };
  // `since_work`: since the last round that did something; `queued`: copies
  // on the device; `hold_near()`: Holds::near(), asked only when it decides;
  // `nap_us`: --poll-nap-us (per queued copy; 0: never nap).
  template <class HoldNear>
  static Rest rest(Clock::duration since_work, uint32_t queued, HoldNear hold_near, uint32_t nap_us) {
    // With kNapFrom copies queued and nothing new in the rings, the device
    // has work for longer than the nap: nothing waits for us, and one
    // wake-up then retires a batch.
    if (nap_us != 0 && queued >= kNapFrom) return Rest::nap;
    // After kYieldAfter without work the core goes to the threads the poller
    // waits for (the client staging, the device's engine); measured on the
    // 2-core machine: the ordered loop 83 -> 68 ms. A hold whose value is
    // near gets a short nap instead: a sleeper that wakes runs again
    // promptly, where a yield can hand the core to any process for a slice.
    if (since_work >= kYieldAfter) return hold_near() ? Rest::hold_nap : Rest::yield;
    return Rest::relax;
  }
  static std::chrono::microseconds nap(uint32_t queued, uint32_t nap_us) {
    return std::min<std::chrono::microseconds>(kMaxNap, std::chrono::microseconds(uint64_t{queued} * nap_us));
  }
  static constexpr uint32_t kNapFrom = 4;
  static constexpr auto kYieldAfter = std::chrono::microseconds(5);
  static constexpr auto kMaxNap = std::chrono::microseconds(50);
  static constexpr auto kHoldNap = std::chrono::microseconds(10);

  // ---- held transfers
  // A hold is usually answered within the kernels its application queued:
  // for this long after one came or moved the poller does not sleep.
  static constexpr auto kHoldAwake = std::chrono::milliseconds(1);
  // Asleep, a timer looks at the holds every sixteenth of the time since one
  // last moved, within [kHoldPollMin, kHoldPollMax]: a hold released within
  // half a second is seen within 1/16 of its wait, and one never answered
  // costs a wake-up per kHoldPollMax, not a core (at 8 ms, 1.1-1.3% of one on
  // the 2-core machine: over the 1% an idle hold may cost).
  static Clock::duration hold_poll(Clock::duration since_moved) {
    return std::clamp<Clock::duration>(since_moved / 16, kHoldPollMin, kHoldPollMax);
  }
  static constexpr auto kHoldPollMin = std::chrono::microseconds(20);
  static constexpr auto kHoldPollMax = std::chrono::milliseconds(32);

  // ---- doorbells
  // After kIdleRings rings in a row that brought no entry, a client's
  // doorbell is heard only after a pause, 1 ms doubling up to kLongestPause,
  // until a ring brings one: a client that rang in vain waits that long at
  // most for its next ring to be heard while the poller sleeps. 0: at once.
  static std::chrono::milliseconds doorbell_pause(uint32_t idle_rings) {
    if (idle_rings <= kIdleRings) return std::chrono::milliseconds(0);
    return std::min<std::chrono::milliseconds>(
        kLongestPause, std::chrono::milliseconds(1L << std::min<uint32_t>(idle_rings - kIdleRings - 1, 6)));
  }
  static constexpr uint32_t kIdleRings = 4;
  static constexpr auto kLongestPause = std::chrono::milliseconds(64);
};

}  // namespace ferry::ferryd
