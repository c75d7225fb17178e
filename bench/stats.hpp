// SPDX-License-Identifier: MIT
// Timing and summary helpers shared by ferry_bench and cuda_bench.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
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

// One upload path at one size: how long each call took to return and how long
// until the bytes were on the device, over several repetitions. plot.sh draws
// both against size with their range, from the rows write_row() appends:
//   bytes  path  call_median call_min call_max  done_median done_min done_max  (µs)
struct CallDone {
  std::vector<double> call_us, done_us;
  // `call` returns once the call under test has returned; `finish` waits until
  // the bytes are on the device. A synchronous path passes an empty finish.
  void time(const std::function<void()>& call, const std::function<void()>& finish) {
    auto t0 = Clock::now();
    call();
    call_us.push_back(us_since(t0));
    if (finish) finish();
    done_us.push_back(us_since(t0));
  }
  void time(int reps, const std::function<void()>& call, const std::function<void()>& finish) {
    for (int r = 0; r < reps; ++r) time(call, finish);
  }
  double gbps(uint64_t bytes) const { return static_cast<double>(bytes) / (stats(done_us).median * 1000.0); }
  void write_row(std::ofstream& tsv, uint64_t bytes, const char* path) const {
    if (!tsv || call_us.empty()) return;
    auto [c0, c1] = std::minmax_element(call_us.begin(), call_us.end());
    auto [d0, d1] = std::minmax_element(done_us.begin(), done_us.end());
    tsv << bytes << '\t' << path << '\t' << stats(call_us).median << '\t' << *c0 << '\t' << *c1 << '\t'
        << stats(done_us).median << '\t' << *d0 << '\t' << *d1 << '\n';
  }
};

inline void write_call_done_header(std::ofstream& tsv) {
  if (tsv) tsv << "# bytes\tpath\tcall_us\tcall_min\tcall_max\tdone_us\tdone_min\tdone_max\n";
}

}  // namespace ferry::bench
