// SPDX-License-Identifier: MIT
#include "engine/poller.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace ferry::ferryd {

namespace {
// While polling, sockets are looked at this often: control requests wait
// at most this long.
constexpr auto kIoEvery = std::chrono::microseconds(10);
// Socket work between two rounds of the loop: at most this many ready
// handlers, with a look at the rings and the device between any two, and
// none started after kIoBudget (those looks count in it). However much
// socket traffic arrives (connects, Hellos, doorbell rings, status requests, from
// any user), the rings and the device's completions are served in between.
constexpr int kIoBatch = 8;
constexpr auto kIoBudget = std::chrono::microseconds(25);
// With this many copies queued on the device and nothing new in the rings,
// the poller naps instead of spinning: the device has work for longer than
// the nap, so nothing waits for us, and one wake-up then retires a batch.
constexpr uint32_t kNapFrom = 4;
// After this long without work the poller yields its core at every empty
// round (sched_yield): on a small machine the threads it would take the core
// from are the ones it waits for (the client staging, the device's engine).
// Measured on the 2-core machine: the ordered loop 83 -> 68 ms.
constexpr auto kYieldAfter = std::chrono::microseconds(5);
constexpr auto kMaxNap = std::chrono::microseconds(50);
constexpr auto kHoldNap = std::chrono::microseconds(10);

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

void Poller::run() {
  if (idle_us_ == 0) {
    // Never polls: every ring entry comes with its doorbell, every finished
    // copy with the device's eventfd.
    engine_.sleep_begin();
    io_.run();
    return;
  }
  const auto idle = std::chrono::microseconds(idle_us_);
  // It starts awake, and says so (the engine starts as if asleep, for use
  // without a poller): it polls for `idle`, then sleeps the proper way.
  engine_.sleep_end();
  engine_.set_polled(true);
  auto last_work = Clock::now();
  auto last_io = last_work;
  while (!io_.stopped()) {
    const size_t n = engine_.poll();
    auto now = Clock::now();
    if (n != 0) last_work = now;
    if (now - last_io >= kIoEvery) {
      if (run_io(now) != 0) last_work = Clock::now();
      last_io = now;
    }
    if (now - last_work >= idle) {
      if (engine_.sleep_begin()) {
        io_.run_one();
        engine_.sleep_end();
        // A look at the holds that released nothing: back to sleep at once.
        if (engine_.take_idle_wake()) continue;
      }
      last_work = last_io = Clock::now();
    } else if (const uint32_t queued = engine_.stats().in_flight; n == 0 && nap_us_ != 0 && queued >= kNapFrom) {
      // ferryd's timer slack is 1 µs
      engine_.count_nap();
      std::this_thread::sleep_for(std::min<std::chrono::microseconds>(kMaxNap, std::chrono::microseconds(queued * nap_us_)));
    } else if (n == 0 && now - last_work >= kYieldAfter && engine_.hold_near()) {
      // A hold waits for a value that is likely near: a short nap leaves the
      // core to the threads that produce it, and a sleeper that wakes is
      // run again promptly (a yield can hand the core to any other process
      // for a whole time slice).
      std::this_thread::sleep_for(kHoldNap);
    } else if (n == 0 && now - last_work >= kYieldAfter) {
      sched_yield();
    } else if (n == 0) {
      relax();
    }
  }
}

size_t Poller::run_io(Clock::time_point start) {
  size_t n = 0;
  for (int i = 0; i < kIoBatch && Clock::now() - start < kIoBudget; ++i) {
    // The rings between any two socket handlers: an entry waits for one
    // handler at most, not for the batch (the loop looks after the last).
    if (i != 0) n += engine_.poll();
    if (io_.poll_one() == 0) break;
    ++n;
  }
  return n;
}

}  // namespace ferry::ferryd
