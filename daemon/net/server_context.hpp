// SPDX-License-Identifier: MIT
// What every session is given: the engine, the settings, and the server's
// counters and state. Owned by the server; io thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>

#include "engine/engine.hpp"
#include "log.hpp"
#include "net/users.hpp"
#include "options.hpp"
#include "engine/stats.hpp"

namespace ferry::ferryd {

// Lines about one connection each (a session closed for bad input) are
// rate-limited: any local user can make one per connection. At most
// kPerSecond a second are written; past that they are counted, and the next
// line after the second says how many were left out.
struct LogBudget {
  static constexpr uint32_t kPerSecond = 10;
  std::chrono::steady_clock::time_point window{};
  uint32_t used = 0;
  uint32_t left_out = 0;  // in this window
  // Whether this line may be written; adds to *total when not.
  bool take(uint64_t* total) { return take(total, std::chrono::steady_clock::now()); }
  bool take(uint64_t* total, std::chrono::steady_clock::time_point now) {
    if (now - window >= std::chrono::seconds(1)) {
      if (left_out != 0)
        FERRY_LOG(warn, "%u more sessions closed in the last second, not logged one by one", left_out);
      window = now;
      used = left_out = 0;
    }
    if (used < kPerSecond) {
      ++used;
      return true;
    }
    ++left_out;
    ++*total;
    return false;
  }
};

struct Context {
  TransferEngine& engine;
  const Options& options;
  ServerStats stats{};
  bool stopping = false;      // no new clients; copies drain, then the sessions end
  Users users{};  // each user's sessions, pending Hellos and unread replies
  std::function<void()> request_stop{};  // an orderly stop, as SIGTERM (ferryctl drain)
  LogBudget session_log{};  // "closing session" lines
};

}  // namespace ferry::ferryd
