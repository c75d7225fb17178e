// SPDX-License-Identifier: MIT
// Logging to stderr (journald adds the time under systemd).
#pragma once

#include <chrono>
#include <cstdio>
#include <utility>

namespace ferry::ferryd::log {

enum Level { error = 0, warn = 1, info = 2, debug = 3 };
inline Level& threshold() {
  static Level l = info;
  return l;
}
// Under systemd (stderr is the journal: $JOURNAL_STREAM is set) each line
// starts with its syslog priority, "<3>" for errors, which journald takes
// as the entry's priority (journalctl -p err). Set once at start.
inline bool& priority_prefix() {
  static bool on = false;
  return on;
}

template <class... Args>
void write(Level l, const char* fmt, Args&&... args) {
  if (l > threshold()) return;
  static const char* const kTag[] = {"<3>error", "<4>warning", "<6>info", "<7>debug"};
  std::fprintf(stderr, "%s: ", priority_prefix() ? kTag[l] : kTag[l] + 3);
  if constexpr (sizeof...(Args) == 0) {
    std::fputs(fmt, stderr);
  } else {
    std::fprintf(stderr, fmt, std::forward<Args>(args)...);
  }
  std::fputc('\n', stderr);
}

// A warning said at most once per interval: a bound a client keeps hitting
// is one line in the log, not one per request.
class Every {
 public:
  explicit Every(std::chrono::seconds interval) : interval_(interval) {}
  void note(const char* what) {
    const auto now = std::chrono::steady_clock::now();
    if (said_ && now - last_ < interval_) return;
    said_ = true;
    last_ = now;
    write(warn, "%s", what);
  }

 private:
  std::chrono::seconds interval_;
  std::chrono::steady_clock::time_point last_{};
  bool said_ = false;
};

}  // namespace ferry::ferryd::log

#define FERRY_LOG(level, ...) ::ferry::ferryd::log::write(::ferry::ferryd::log::level, __VA_ARGS__)
