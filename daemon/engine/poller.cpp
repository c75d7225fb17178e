// SPDX-License-Identifier: MIT
#include "engine/poller.hpp"

#include <sched.h>

#include <chrono>
#include <thread>

#include "engine/idle.hpp"

namespace ferry::ferryd {

namespace {
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
    if (now - last_io >= IdlePolicy::kIoEvery) {
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
    } else if (n == 0) {
      const uint32_t queued = engine_.stats().in_flight;
      switch (IdlePolicy::rest(now - last_work, queued, [this] { return engine_.hold_near(); }, nap_us_)) {
        case IdlePolicy::Rest::nap:  // ferryd's timer slack is 1 µs
          engine_.count_nap();
          std::this_thread::sleep_for(IdlePolicy::nap(queued, nap_us_));
          break;
        case IdlePolicy::Rest::hold_nap: std::this_thread::sleep_for(IdlePolicy::kHoldNap); break;
        case IdlePolicy::Rest::yield: sched_yield(); break;
        case IdlePolicy::Rest::relax: relax(); break;
      }
    }
  }
}

size_t Poller::run_io(Clock::time_point start) {
  size_t n = 0;
  for (int i = 0; i < IdlePolicy::kIoBatch && Clock::now() - start < IdlePolicy::kIoBudget; ++i) {
    // The rings between any two socket handlers: an entry waits for one
    // handler at most, not for the batch (the loop looks after the last).
    if (i != 0) n += engine_.poll();
    if (io_.poll_one() == 0) break;
    ++n;
  }
  return n;
}


}  // namespace ferry::ferryd
