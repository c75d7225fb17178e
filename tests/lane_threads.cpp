// SPDX-License-Identifier: MIT
// ferry-run's lanes under threads, in a process of its own (Lanes is one per
// process; run_tests starts this with $FERRY_SOCKET naming its ferryd): four
// threads copy 64 KiB direct uploads 300 times each, as ferry-run does
// (FERRY_DIRECT_NO_WAIT), into queues that run each command as it is
// appended. Threads 0 and 1 share a queue (so a lane serves two threads),
// and every 50th copy of a thread goes to a queue of its own (a lane is
// rebound, or another made). Every landed byte is checked. Under the
// sanitizer builds this is what looks at Lanes::take_back's compare-and-swap
// against rebinding, sweeping and done. Prints "lane_threads: ok" and exits
// 0, or says what went wrong and exits 1.
#include <ferry/ferry.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "lanes.hpp"

namespace fr = ferry::run;

namespace {

// A queue that runs each command as it is appended: the copy lands in `dst`
// at once, the number is written at once.
struct ImmediateQueue {
  std::vector<uint8_t> dst;
  static int copy(void* ctx, uint64_t off, const void* staging, uint64_t n) {
    auto* q = static_cast<ImmediateQueue*>(ctx);
    std::memcpy(q->dst.data() + off, staging, n);
    return 0;
  }
  static int write(void*, volatile uint64_t* word, uint64_t value) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    return 0;
  }
};

std::atomic<int> prepared{0};

int prepare(ferry_client*, uint64_t, void*) {
  prepared.fetch_add(1);
  return 0;
}
void unprepare(ferry_client*, uint64_t, void*) {}

}  // namespace

int main() {
  fr::Lanes& lanes = fr::Lanes::get();
  constexpr int kThreads = 4, kRounds = 300;
  constexpr uint64_t kBytes = 65536;
  std::atomic<int> wrong{0}, staged{0}, no_lane{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ImmediateQueue q{std::vector<uint8_t>(kBytes)};
      std::vector<uint8_t> src(kBytes);
      for (int i = 0; i < kRounds; ++i) {
        const uint64_t queue = i % 50 == 49 ? 10 + t : t < 2 ? 1 : t;
        int why = -1;
        ferry_client* c = lanes.acquire(queue, 7, 0, prepare, unprepare, nullptr, &why, std::chrono::seconds(60));
        if (c == nullptr) {
          no_lane.fetch_add(1);
          continue;
        }
        std::fill(src.begin(), src.end(), static_cast<uint8_t>(t * 31 + i));
        ferry_direct_ops ops{sizeof ops,          FERRY_DIRECT_NO_WAIT | FERRY_DIRECT_CALLER_THREAD,
                             &q,                   queue,
                             7,                    ImmediateQueue::copy,
                             ImmediateQueue::write};
        const int r = ferry_upload_direct(c, src.data(), kBytes, &ops, nullptr);
        lanes.done(c, r);
        if (r == 0) {
          staged.fetch_add(1);
          if (q.dst != src) wrong.fetch_add(1);
        } else if (r != -EAGAIN) {
          std::fprintf(stderr, "lane_threads: thread %d copy %d: %s\n", t, i, ferry_strerror(r));
          failed.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const uint32_t max_lanes = lanes.settings().max_lanes;
  std::printf("lane_threads: %d staged, %d wrong, %d failed, %d without a lane, %d lanes prepared (at most %u)\n",
              staged.load(), wrong.load(), failed.load(), no_lane.load(), prepared.load(), max_lanes);
  std::printf("%s", lanes.report().c_str());
  // No wrong byte, every copy had a lane, most found room, and no more lanes
  // were ever prepared than ferry-run allows at once (each lane once).
  const bool ok = wrong == 0 && failed == 0 && no_lane == 0 && staged > kThreads * kRounds / 2 &&
                  prepared.load() <= static_cast<int>(max_lanes);
  std::printf("lane_threads: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
