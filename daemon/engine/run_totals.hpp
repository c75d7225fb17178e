// SPDX-License-Identifier: MIT
// What processes under ferry-run staged and left to the driver, per user
// and command, for as long as ferryd runs: each process's lead client
// publishes its counts in its segment (proto::RunWords); when the client
// goes, its last counts are folded into its user's and command's totals, so
// a sum over them never goes down (Prometheus counters) and a process that
// exits leaves no series of its own. The last processes that exited are
// kept a while with their own totals, for ferryctl status.
//
// Bounds, whatever the churn: at most kCommandsPerUser commands per user
// (the rest count as "other"), one row per user and command; kRecent exits,
// none older than kRecentFor. A user's rows last as long as ferryd (a
// counter that vanished would go down): at most one per user of the
// machine that ran a program under ferry-run, times kCommandsPerUser + 1.
//
// Contract: io thread only. The numbers are the client's own (hostile): each
// client's are taken as the highest seen of each word (a client that writes
// smaller ones cannot make a total go down), and sums saturate.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ferry/proto.hpp"

namespace ferry::ferryd {

// One process's counts (proto::RunWords), or a sum of them.
struct RunCounts {
  uint64_t staged = 0, staged_bytes = 0, passed_bytes = 0;
  uint64_t passed[proto::kPassReasons] = {};
  // The larger of each word (a client's highest seen so far).
  void keep_max(const RunCounts& o);
  // Adds o, saturating.
  void add(const RunCounts& o);
};

class RunTotals {
 public:
  static constexpr size_t kCommandsPerUser = 32;
  static constexpr size_t kRecent = 16;
  static constexpr auto kRecentFor = std::chrono::minutes(10);
  static constexpr const char* kOther = "other";

  struct Row {
    uint64_t processes = 0;  // that ended, folded in here
    RunCounts counts;
  };
  struct Exited {
    pid_t pid = 0;
    uid_t uid = 0;
    std::string command;
    std::chrono::system_clock::time_point at;
    RunCounts counts;
  };

  // A process's lead client went: its last counts join its user's totals.
  void fold(uid_t uid, pid_t pid, const std::string& command, const RunCounts& last,
            std::chrono::system_clock::time_point now = std::chrono::system_clock::now());
  // The row a user's command counts in (its own, or kOther past the bound).
  std::string row_name(uid_t uid, const std::string& command) const;
  // Departed processes' totals, by (user, command).
  const std::map<std::pair<uid_t, std::string>, Row>& rows() const { return rows_; }
  // The last processes that exited (at most kRecent), the newest last,
  // none that exited more than kRecentFor before `now`.
  std::vector<Exited> recent(std::chrono::system_clock::time_point now = std::chrono::system_clock::now()) const;

 private:
  std::map<std::pair<uid_t, std::string>, Row> rows_;
  std::map<uid_t, size_t> commands_;  // rows of each user, kOther not counted
  std::deque<Exited> recent_;
};

}  // namespace ferry::ferryd
