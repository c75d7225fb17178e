// SPDX-License-Identifier: MIT
// Timing and summary helpers shared by ferry_bench and cuda_bench.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace ferry::bench {

using Clock = std::chrono::steady_clock;

inline double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

inline Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))]; };
  return {at(0.5), at(0.1), at(0.9)};
}

// "median unit (p10–p90)"
inline std::string fmt(const Stats& s, const char* unit) {
  char b[96];
  std::snprintf(b, sizeof b, "%.2f %s (%.2f–%.2f)", s.median, unit, s.p10, s.p90);
  return b;
}

// Jain's fairness index: 1 when every share is equal.
inline double jain(const std::vector<double>& x) {
  double s1 = 0, s2 = 0;
  for (double v : x) s1 += v, s2 += v * v;
  return s2 == 0 ? 0 : s1 * s1 / (static_cast<double>(x.size()) * s2);
}

}  // namespace ferry::bench
