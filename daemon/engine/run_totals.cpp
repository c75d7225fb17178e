// SPDX-License-Identifier: MIT
#include "engine/run_totals.hpp"

#include <algorithm>

namespace ferry::ferryd {

namespace {
uint64_t add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
}  // namespace

void RunCounts::keep_max(const RunCounts& o) {
  staged = std::max(staged, o.staged);
  staged_bytes = std::max(staged_bytes, o.staged_bytes);
  passed_bytes = std::max(passed_bytes, o.passed_bytes);
  for (uint32_t i = 0; i < proto::kPassReasons; ++i) passed[i] = std::max(passed[i], o.passed[i]);
}

void RunCounts::add(const RunCounts& o) {
  staged = add_sat(staged, o.staged);
  staged_bytes = add_sat(staged_bytes, o.staged_bytes);
  passed_bytes = add_sat(passed_bytes, o.passed_bytes);
  for (uint32_t i = 0; i < proto::kPassReasons; ++i) passed[i] = add_sat(passed[i], o.passed[i]);
}

std::string RunTotals::row_name(uid_t uid, const std::string& command) const {
  if (rows_.count({uid, command}) != 0) return command;
  auto it = commands_.find(uid);
  return it != commands_.end() && it->second >= kCommandsPerUser ? kOther : command;
}

void RunTotals::fold(uid_t uid, pid_t pid, const std::string& command, const RunCounts& last,
                     std::chrono::system_clock::time_point now) {
  const std::string name = row_name(uid, command);
  auto [it, made] = rows_.try_emplace({uid, name});
  if (made && name != kOther) ++commands_[uid];
  it->second.processes = add_sat(it->second.processes, 1);
  it->second.counts.add(last);
  recent_.push_back(Exited{pid, uid, command, now, last});
  if (recent_.size() > kRecent) recent_.pop_front();
}

std::vector<RunTotals::Exited> RunTotals::recent(std::chrono::system_clock::time_point now) const {
  std::vector<Exited> out;
  for (const Exited& e : recent_)
    if (now - e.at <= kRecentFor) out.push_back(e);
  return out;
}

}  // namespace ferry::ferryd
