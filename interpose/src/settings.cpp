// SPDX-License-Identifier: MIT
#include "settings.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace ferry::run {

namespace {
// A number the environment gives, or `fallback` for anything else.
uint64_t number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v < '0' || *v > '9') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return errno == 0 && *end == '\0' ? n : fallback;
}

bool flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}
}  // namespace

Settings settings_from_env() {
  Settings s;
  s.cuda_min_bytes = number("FERRY_RUN_MIN_BYTES", s.cuda_min_bytes);
  s.ze_min_bytes = number("FERRY_RUN_MIN_BYTES", s.ze_min_bytes);
  s.list_bytes = number("FERRY_RUN_LIST_BYTES", s.list_bytes);
  s.ahead_bytes = number("FERRY_RUN_AHEAD_BYTES", s.ahead_bytes);
  if (const char* v = std::getenv("FERRY_SOCKET")) s.socket = v;
  s.max_lanes = static_cast<uint32_t>(number("FERRY_RUN_LANES", s.max_lanes));
  if (s.max_lanes == 0) s.max_lanes = 1;
  if (s.max_lanes > 64) s.max_lanes = 64;
  // At most 10 minutes: beyond, a stalled ferryd would look like a hung program.
  if (const uint64_t ms = number("FERRY_RUN_CONNECT_MS", UINT64_MAX); ms != UINT64_MAX) {
    s.connect_ms = static_cast<int64_t>(ms < 600'000 ? ms : 600'000);
  }
  if (const char* v = std::getenv("FERRY_RUN_REPORT")) s.report = v;
  s.off = flag("FERRY_RUN_OFF");
  s.stats = flag("FERRY_RUN_STATS");
  return s;
}

}  // namespace ferry::run
