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
  bool take(uint64_t* total) {
    const auto now = std::chrono::steady_clock::now();
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
  // Hellos waiting for their segment, by the peer's uid: they count as
  // clients, of all users and of theirs (Limits).
  std::map<uid_t, size_t> hellos{};
  size_t hellos_of(uid_t uid) const {
    auto it = hellos.find(uid);
    return it == hellos.end() ? 0 : it->second;
  }
  size_t hellos_pending() const {
    size_t n = 0;
    for (const auto& [uid, k] : hellos) n += k;
    return n;
  }
  void hello_started(uid_t uid) { ++hellos[uid]; }
  void hello_ended(uid_t uid) {
    if (auto it = hellos.find(uid); it != hellos.end() && --it->second == 0) hellos.erase(it);
  }
  // What each user's sessions hold of replies their peers have not read yet
  // (bytes, and descriptors in flight, which count against ferryd's own
  // descriptor limit): bounded per user, not per session, so that more
  // connections buy a user nothing (admins are not bounded).
  struct Backlog {
    int64_t bytes = 0, fds = 0;
  };
  static constexpr int64_t kUserBacklogBytes = 4 << 20;
  static constexpr int64_t kUserBacklogFds = 32;
  std::map<uid_t, Backlog> backlog{};
  // A session's outbox of `uid` changed by (bytes, fds); false when that
  // takes the user past its bound (giving back is always accepted).
  bool hold_backlog(uid_t uid, bool admin, int64_t bytes, int64_t fds) {
    Backlog& b = backlog[uid];
    b.bytes += bytes;
    b.fds += fds;
    const bool within = admin || (b.bytes <= kUserBacklogBytes && b.fds <= kUserBacklogFds);
    if (b.bytes == 0 && b.fds == 0) backlog.erase(uid);
    return within || (bytes <= 0 && fds <= 0);
  }
  std::function<void()> request_stop{};  // an orderly stop, as SIGTERM (ferryctl drain)
  LogBudget session_log{};
  const std::map<uid_t, size_t>* connections_by_uid = nullptr;  // open sessions by uid (the server's)    // "closing session" lines
};

}  // namespace ferry::ferryd
